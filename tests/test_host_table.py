"""The host is the source of truth: a GPU's own -lgip/-lgipp table is recorded by discovery, compared
with the catalog, carried by the snapshot, and used for planning that GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_runner
from helpers.samples import lowmem_catalog
from planner_fixtures import EXACT, profiles, wl
from sim.fleet import write_host

from migplan import smi
from migplan.adapters.runner import LocalRunner
from migplan.adapters.solver import PulpSolver
from migplan.catalog import Catalog, builtin_catalog
from migplan.catalog.layout import Layout
from migplan.documents import dump, load_snapshot
from migplan.fleet.discover import discover_host
from migplan.fleet.host_table import differences, host_model, lowest_mib, table_from_smi
from migplan.fleet.snapshot import Snapshot, snapshot_to_dict
from migplan.inventory import Host
from migplan.planner import plan

CAT = builtin_catalog()
A100 = CAT.get("A100-SXM4-40GB")
DATA = Path(__file__).resolve().parent / "data" / "smi"

def test_lowest_mib_prints_back_as_the_hosts_value() -> None:
    for gib in ("4.75", "4.62", "9.62", "19.50", "0.01", "39.38"):
        low = lowest_mib(gib)
        assert f"{low / 1024:.2f}" == gib and f"{(low - 1) / 1024:.2f}" != gib


def test_the_real_a100_sample_agrees_with_the_catalog() -> None:
    table = table_from_smi(smi.parse_gi_profiles((DATA / "lgip_a100_40gb.txt").read_text()),
                           smi.parse_gi_placements((DATA / "lgipp_a100_40gb.txt").read_text()), 0)
    assert differences(A100, table) == [] and host_model(A100, table) is A100


@pytest.fixture
def lowmem_host(tmp_path: Path) -> tuple[LocalRunner, Host]:
    cat = lowmem_catalog(tmp_path)  # an A100-40GB whose driver gives 1g.5gb less memory, and no 1g.10gb
    state = write_host(tmp_path / "h.json", "A100-LOWMEM", 1, layouts=None, catalog_files=[str(cat)])
    return sim_runner.local(state), Host(name="h1", address="h1")


@pytest.mark.slow
def test_discovery_records_the_table_and_names_each_difference(lowmem_host: tuple[LocalRunner, Host]) -> None:
    runner, host = lowmem_host
    rec = discover_host(runner, host, CAT)
    g = rec.gpus[0]
    assert g.model == "A100-SXM4-40GB" and g.table is not None and g.driver_version
    note = next(n for n in rec.notes if "differs from the catalog" in n)
    assert "1g.5gb: memory GiB catalog 4.75, host 4.62" in note
    assert "1g.10gb: in the catalog (A100-SXM4-40GB), not offered by this host's driver" in note


@pytest.mark.slow
def test_snapshot_round_trip_keeps_the_table(lowmem_host: tuple[LocalRunner, Host], tmp_path: Path) -> None:
    runner, host = lowmem_host
    snap = Snapshot((discover_host(runner, host, CAT),))
    path = tmp_path / "snap.yaml"
    path.write_text(dump(snapshot_to_dict(snap), "yaml"))
    again = load_snapshot(path, CAT)
    assert again.hosts[0].gpus[0].table == snap.hosts[0].gpus[0].table
    assert again.hosts[0].gpus[0].driver_version == snap.hosts[0].gpus[0].driver_version


@pytest.mark.slow
def test_planning_uses_the_hosts_smaller_table(lowmem_host: tuple[LocalRunner, Host]) -> None:
    """4800 MiB fits the catalog's 1g.5gb (4864 MiB) but not this host's (4736): the plan must say 2g.10gb."""
    runner, host = lowmem_host
    snap = Snapshot((discover_host(runner, host, CAT),))
    state = snap.fleet_state(catalog=CAT)
    (own,) = state.models
    assert own.id.startswith("A100-SXM4-40GB@host-") and own.profile("1g.5gb").memory_mib <= 4736
    assert not own.has_profile("1g.10gb")
    work = profiles(wl("w", 4800))
    p = plan(state, work, Catalog(CAT.models + state.models), EXACT, PulpSolver(time_limit=30))
    placed = next(w for w in p.workloads if w.name == "w")
    assert placed.status == "placed" and placed.instance is not None and placed.instance.startswith("2g.10gb@")
    catalog_only = plan(snap.fleet_state(), work, CAT, EXACT, PulpSolver(time_limit=30))
    assert next(w for w in catalog_only.workloads if w.name == "w").instance.startswith("1g.5gb@")  # type: ignore[union-attr]


@pytest.mark.slow
def test_a_plan_carries_its_host_models_and_applies_with_them(lowmem_host: tuple[LocalRunner, Host],
                                                              tmp_path: Path) -> None:
    import copy
    import json

    from migplan.documents import load_plan, write_plan
    from migplan.errors import InputError
    from migplan.fleet.apply import ApplyOptions, GpuOutcome, apply_host
    from migplan.planner import plan_from_dict

    runner, host = lowmem_host
    host = Host(name="h1", address="h1", lock_file=str(tmp_path / "apply.lock"))
    snap = Snapshot((discover_host(runner, host, CAT),))
    state = snap.fleet_state(catalog=CAT)
    p = plan(state, profiles(wl("w", 4800)), Catalog(CAT.models + state.models), EXACT, PulpSolver(time_limit=30))
    assert [m.id for m in p.models] == [m.id for m in state.models]
    out = tmp_path / "plan.json"
    write_plan(out, p)
    again = load_plan(out, CAT)  # the shipped catalog alone: the plan brings its host model
    assert again == p
    res = apply_host(runner, host, list(again.gpus), Catalog((*again.models, *CAT.models)), ApplyOptions())
    assert res.gpus[0].outcome is GpuOutcome.APPLIED and any(i.startswith("2g.10gb@") for i in res.gpus[0].layout or [])

    doc = json.loads(out.read_text())
    forged = copy.deepcopy(doc)
    forged["host_models"][0]["id"] = "A100-SXM4-40GB"  # a plan must never replace a catalog model
    with pytest.raises(InputError, match="host model"):
        plan_from_dict(forged, CAT, source="plan.json")


def test_offline_plans_offer_min_driver_profiles_only_when_the_inventory_driver_has_them(tmp_path: Path) -> None:
    from migplan.inventory import load_inventory
    from migplan.model.state import state_from_inventory

    inv = tmp_path / "inv.yaml"
    for driver, has_1g10 in ((None, False), ("460.32", False), ("535.129.03", True)):
        extra = f"    driver: {driver!r}\n" if driver else ""
        inv.write_text(f"version: 1\nhosts:\n  h:\n{extra}    gpus: {{model: A100-SXM4-40GB, count: 1, mig: true}}\n")
        st = state_from_inventory(load_inventory(str(inv), CAT), CAT)
        model = next((m for m in st.models if m.id == st.gpus[0].model), None) or CAT.get(st.gpus[0].model)
        assert model.has_profile("1g.10gb") is has_1g10, (driver, model.id)


def test_apply_refuses_where_the_host_gives_less_than_the_plan_assumed() -> None:
    import dataclasses

    from migplan.fleet.apply import shortfalls

    a100 = CAT.get("A100-SXM4-40GB")
    smaller = dataclasses.replace(a100, id="A100-SXM4-40GB@host-00000000", profiles=tuple(
        dataclasses.replace(p, memory_mib=p.memory_mib - 128) if p.name == "3g.20gb" else p for p in a100.profiles))
    target = Layout.parse(["3g.20gb@0", "2g.10gb@4"])
    assert shortfalls(a100, a100, target) == []
    assert shortfalls(a100, smaller, target) == [f"3g.20gb has {a100.profile('3g.20gb').memory_mib - 128} MiB here, "
                                                 f"the plan assumed {a100.profile('3g.20gb').memory_mib}"]
    assert shortfalls(smaller, a100, target) == []  # more memory than assumed is fine
    assert "the plan was made for a A30" in shortfalls(CAT.get("A30"), a100, target)[0]
