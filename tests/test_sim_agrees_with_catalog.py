"""migplan's shipped catalog against the nvidia-smi simulator's own geometry, for every catalog model.

The simulator (tests/sim) never imports migplan: its geometry comes from verbatim -lgip/-lgipp samples
(tests/data/sim/README.md) or its table of reference values (tests/sim/geometry_inferred.py). So a wrong
profile id, memory size, count, start or SM count in migplan/catalog/data/models.yaml fails here.

Fields the simulator's table marks `unknown` (no source gives them; placeholders) are not compared.
A known disagreement where the simulator holds verbatim evidence goes into KNOWN with the exact values,
which turns it into one strict xfail per difference (fixing the catalog then fails it: remove the entry).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from sim import geometry as geo

from migplan.catalog import builtin_catalog
from migplan.catalog.geometry import GiProfile, GpuModel

CAT = builtin_catalog()
SIM = geo.builtin_models()
ENGINES = ("ce", "dec", "enc", "jpeg", "ofa")
FIELDS = ("name", "compute_slices", "memory_slices", "memory_mib", "max_count", "starts", "sm_count", *ENGINES)

# (model id, profile id or None, field) -> (catalog value, simulator value, reason). Also a catalog figure below
# the simulator's from a report the reference does not hold: the simulator takes its data from the reference's
# real output only, so it keeps its value and the difference is listed here.
KNOWN: dict[tuple[str, int | None, str], tuple[Any, Any, str]] = {}


@dataclasses.dataclass(frozen=True)
class Difference:
    model: str
    profile: str  # profile name (or "-" for a model-level field)
    profile_id: int | None
    field: str
    catalog: Any
    simulator: Any

    @property
    def key(self) -> tuple[str, int | None, str]:
        return self.model, self.profile_id, self.field

    def __str__(self) -> str:
        return f"{self.model} {self.profile}: {self.field}: catalog {self.catalog!r}, simulator {self.simulator!r}"


def _simulator_value(p: geo.Profile, field: str) -> Any:
    """The value the catalog must carry: memory is the least any known driver prints, not this host's."""
    if field == "memory_mib" and p.smallest_known_mib is not None:
        return p.smallest_known_mib
    return getattr(p, field)


def _catalog_value(p: GiProfile, field: str) -> Any:
    return getattr(p.engines, field) if field in ENGINES else getattr(p, field)


def differences(cat: GpuModel, sim: geo.Model) -> list[Difference]:
    """Every field on which the catalog and the simulator disagree (fields the simulator does not know skipped)."""
    out = [Difference(cat.id, "-", None, f, getattr(cat, f), getattr(sim, f))
           for f in ("architecture", "memory_slices", "compute_slices") if getattr(cat, f) != getattr(sim, f)]
    if "smi_name" not in sim.unknown_identity and sim.smi_name not in cat.smi_names:
        out.append(Difference(cat.id, "-", None, "smi_names", cat.smi_names, sim.smi_name))
    if sim.pci_device_id.lower() not in cat.pci_device_ids:
        out.append(Difference(cat.id, "-", None, "pci_device_ids", cat.pci_device_ids, sim.pci_device_id))
    ours = {p.id: p for p in sim.profiles}
    theirs = {p.id: p for p in cat.profiles}
    for pid in sorted(theirs.keys() | ours.keys()):
        if pid not in ours or pid not in theirs:
            name = (theirs.get(pid) or ours[pid]).name
            out.append(Difference(cat.id, name, pid, "profile id", theirs[pid].name if pid in theirs else None,
                                  ours[pid].name if pid in ours else None))
            continue
        c, s = theirs[pid], ours[pid]
        for field in FIELDS:
            if field not in s.unknown and _catalog_value(c, field) != _simulator_value(s, field):
                out.append(Difference(cat.id, c.name, pid, field, _catalog_value(c, field), _simulator_value(s, field)))
    return out


def test_the_simulator_plays_every_catalog_model() -> None:
    missing = [m.id for m in CAT.models if m.id not in SIM]
    assert not missing, f"catalog models the simulator has no geometry for (add them to tests/sim): {missing}"


@pytest.mark.parametrize("model", CAT.models, ids=lambda m: m.id)
def test_catalog_agrees_with_the_simulator(model: GpuModel) -> None:
    if model.id not in SIM:
        pytest.fail(f"the simulator has no geometry for {model.id}")
    found = differences(model, SIM[model.id])
    unexpected = [d for d in found if KNOWN.get(d.key, (None, None))[:2] != (d.catalog, d.simulator)]
    assert not unexpected, f"{model.id}: catalog and simulator disagree ({SIM[model.id].source}):\n" + "\n".join(
        f"  {d}" for d in unexpected)
    stale = [k for k in KNOWN if k[0] == model.id and k not in {d.key for d in found}]
    assert not stale, f"KNOWN lists differences that are gone (remove them): {stale}"


if KNOWN:
    @pytest.mark.parametrize("key", [
        pytest.param(k, id="-".join(map(str, k)),
                     marks=pytest.mark.xfail(strict=True, reason=f"{k[0]} profile {k[1]} {k[2]}: catalog {v[0]!r}, "
                                                                 f"simulator {v[1]!r} ({v[2]})"))
        for k, v in KNOWN.items()])
    def test_known_difference(key: tuple[str, int | None, str]) -> None:
        model = CAT.get(key[0])
        assert [d for d in differences(model, SIM[model.id]) if d.key == key] == []


def test_unknown_fields_are_only_placeholders_of_rows_without_a_source() -> None:
    """The only fields left out of the comparison are the table's placeholders, never a sample's."""
    skipped = {(m.id, p.name): p.unknown for m in SIM.values() for p in m.profiles if p.unknown}
    assert all(SIM[mid].lgip_sample is None for mid, _ in skipped)
    assert set(skipped) == {("GH200-144GB", n) for n in ("3g.72gb", "4g.72gb", "7g.144gb")} | {
        ("B200", n) for n in ("3g.90gb", "4g.90gb", "7g.180gb")}


def test_a_wrong_catalog_entry_is_reported_field_by_field() -> None:
    """The comparison itself: change a catalog model and each change is listed with both values."""
    good = CAT.get("A100-SXM4-40GB")
    p3g = good.profile("3g.20gb")
    bad = dataclasses.replace(good, profiles=tuple(
        dataclasses.replace(p, starts=(0, 2, 4), max_count=3, sm_count=40) if p is p3g else p
        for p in good.profiles if p.name != "1g.5gb+me"))
    found = {(d.profile, d.field, str(d.catalog), str(d.simulator)) for d in differences(bad, SIM[good.id])}
    assert found == {("3g.20gb", "starts", "(0, 2, 4)", "(0, 4)"), ("3g.20gb", "max_count", "3", "2"),
                     ("3g.20gb", "sm_count", "40", "42"), ("1g.5gb+me", "profile id", "None", "1g.5gb+me")}
    assert differences(good, SIM[good.id]) == []
