"""Learn a catalog model from a host's own `mig -lgip` / `mig -lgipp` output, and write catalog YAML (pure).

`-lgip` gives names, ids, counts, SMs and engines; `-lgipp` gives starts and sizes (docs/nvidia-smi.md
§3, §4). A profile's variant (`+me`, `+me.all`, `-me`, `+gfx`) is its name's suffix, and the model's engine
budget is its whole-GPU profile's engine columns (migplan.catalog.geometry). Two facts are not printed and
are therefore approximate (marked confidence: learned): memory is printed in GiB with two decimals (the
smallest matching MiB is used), and the default CI profile id, which follows the rule
`geometry.default_ci_profile` (NVML enum by compute slices; 1_SLICE_REV1 = 7 for Hopper's and Blackwell's
double-memory 1g profile, as a real GH200 run printed; docs/mig-geometry.md §3), unverified per model.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from migplan import yamldoc
from migplan.catalog.geometry import GiProfile, GpuModel, default_ci_profile, profile_variant
from migplan.catalog.loader import parse_catalog
from migplan.catalog.writer import render_catalog_yaml
from migplan.smi.errors import SmiParseError
from migplan.smi.lines import parse_gi_placements
from migplan.smi.rows import PlacementRow, ProfileRow
from migplan.smi.tables import parse_gi_profiles

_G = re.compile(r"(?a)(\d+)g\.")


def _slices(row: ProfileRow) -> int:
    g = _G.match(row.profile_name)
    if g is None:
        raise SmiParseError(f"profile {row.profile_name!r} has no '<n>g.' compute size")
    return int(g.group(1))


def _profile(row: ProfileRow, place: PlacementRow, architecture: str, one_slice_memory: int) -> GiProfile:
    slices = _slices(row)
    return GiProfile(
        name=row.profile_name, id=row.profile_id, compute_slices=slices, memory_slices=place.size,
        memory_mib=row.memory_mib, max_count=row.total, sm_count=row.sm_count, starts=tuple(sorted(place.starts)),
        media_extensions=profile_variant(row.profile_name) == "+me", engines=row.engines,
        ci_default_id=default_ci_profile(architecture, slices, place.size, one_slice_memory),
        ci_default_verified=False, confidence="learned")


def learn_model(
    lgip_text: str,
    lgipp_text: str,
    model_id: str,
    *,
    architecture: str,
    gpu: int = 0,
    aliases: Sequence[str] = (),
    smi_names: Sequence[str] = (),
    pci_device_ids: Sequence[str] = (),
    source: str = "learned from nvidia-smi mig -lgip/-lgipp",
    driver: str | None = None,
) -> GpuModel:
    """A GpuModel for GPU `gpu` of a host, validated exactly like a catalog override file. `driver`
    (the host's driver version) goes into the model's `drivers` note: the numbers hold for it."""
    rows = [r for r in parse_gi_profiles(lgip_text) if r.gpu == gpu]
    places = {p.profile_id: p for p in parse_gi_placements(lgipp_text) if p.gpu == gpu}
    if not rows:
        raise SmiParseError(f"-lgip lists no profiles for GPU {gpu}", gpu=gpu)
    missing = sorted({r.profile_id for r in rows} - places.keys())
    if missing:
        raise SmiParseError(f"-lgipp lists no placements for profile id(s) {missing}", gpu=gpu)
    ones = [places[r.profile_id].size for r in rows if _slices(r) == 1]
    one_slice = min(ones) if ones else 0
    profiles = tuple(_profile(r, places[r.profile_id], architecture, one_slice) for r in rows)
    model = GpuModel(
        id=model_id, architecture=architecture,
        memory_slices=max(s + p.memory_slices for p in profiles for s in p.starts),
        compute_slices=max(p.compute_slices for p in profiles), profiles=profiles,
        aliases=tuple(aliases), smi_names=tuple(smi_names), pci_device_ids=tuple(pci_device_ids),
        verified=False, confidence="learned", source=source,
        drivers=f"learned on driver {driver}; other drivers may print other memory" if driver else "")
    # Round-trip through the catalog reader: the same checks as a user's override file.
    text = render_catalog_yaml([model])
    node = yamldoc.parse(text, f"learned model {model_id}")
    assert node is not None
    return parse_catalog(node)[0]
