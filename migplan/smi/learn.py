"""Learn a catalog model from a host's own `mig -lgip` / `mig -lgipp` output, and write catalog YAML (pure).

`-lgip` gives names, ids, counts, SMs and engines; `-lgipp` gives starts and sizes (docs/nvidia-smi.md
§3, §4). Two facts are not printed and are therefore approximate (marked confidence: learned):
memory is printed in GiB with two decimals (the smallest matching MiB is used), and the default CI
profile id is taken from the NVML enum by compute slices (docs/mig-geometry.md §3; unverified per model).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

from migplan import yamldoc
from migplan.catalog.geometry import GiProfile, GpuModel
from migplan.catalog.loader import CATALOG_VERSION, parse_catalog
from migplan.smi.errors import SmiParseError
from migplan.smi.lines import parse_gi_placements
from migplan.smi.rows import PlacementRow, ProfileRow
from migplan.smi.tables import parse_gi_profiles

# NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE enum values (nvml.h; docs/mig-geometry.md §3), by compute slices.
_CI_ENUM = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
_G = re.compile(r"(?a)(\d+)g\.")


def _profile(row: ProfileRow, place: PlacementRow) -> GiProfile:
    g = _G.match(row.profile_name)
    if g is None:
        raise SmiParseError(f"profile {row.profile_name!r} has no '<n>g.' compute size")
    slices = int(g.group(1))
    return GiProfile(
        name=row.profile_name, id=row.profile_id, compute_slices=slices, memory_slices=place.size,
        memory_mib=row.memory_mib, max_count=row.total, sm_count=row.sm_count, starts=tuple(sorted(place.starts)),
        media_extensions=row.profile_name.endswith("+me"), engines=row.engines,
        ci_default_id=_CI_ENUM.get(slices, 0), ci_default_verified=False, confidence="learned")


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
) -> GpuModel:
    """A GpuModel for GPU `gpu` of a host, validated exactly like a catalog override file."""
    rows = [r for r in parse_gi_profiles(lgip_text) if r.gpu == gpu]
    places = {p.profile_id: p for p in parse_gi_placements(lgipp_text) if p.gpu == gpu}
    if not rows:
        raise SmiParseError(f"-lgip lists no profiles for GPU {gpu}", gpu=gpu)
    missing = sorted({r.profile_id for r in rows} - places.keys())
    if missing:
        raise SmiParseError(f"-lgipp lists no placements for profile id(s) {missing}", gpu=gpu)
    profiles = tuple(_profile(r, places[r.profile_id]) for r in rows)
    model = GpuModel(
        id=model_id, architecture=architecture,
        memory_slices=max(s + p.memory_slices for p in profiles for s in p.starts),
        compute_slices=max(p.compute_slices for p in profiles), profiles=profiles,
        aliases=tuple(aliases), smi_names=tuple(smi_names), pci_device_ids=tuple(pci_device_ids),
        verified=False, confidence="learned", source=source)
    # Round-trip through the catalog reader: the same checks as a user's override file.
    text = render_catalog_yaml([model])
    node = yamldoc.parse(text, f"learned model {model_id}")
    assert node is not None
    return parse_catalog(node)[0]


def _q(value: str) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML)."""
    return json.dumps(value)


def _flow(items: Iterable[str]) -> str:
    return "[" + ", ".join(items) + "]"


def _profile_yaml(p: GiProfile) -> list[str]:
    e = p.engines
    return [
        f"  - name: {_q(p.name)}", f"    id: {p.id}", f"    compute_slices: {p.compute_slices}",
        f"    memory_slices: {p.memory_slices}", f"    memory_mib: {p.memory_mib}", f"    max_count: {p.max_count}",
        f"    sm_count: {p.sm_count}", f"    starts: {_flow(str(s) for s in p.starts)}",
        f"    media_extensions: {str(p.media_extensions).lower()}",
        f"    engines: {{ce: {e.ce}, dec: {e.dec}, enc: {e.enc}, jpeg: {e.jpeg}, ofa: {e.ofa}}}",
        f"    ci_default_id: {p.ci_default_id}", f"    ci_default_verified: {str(p.ci_default_verified).lower()}",
        f"    confidence: {_q(p.confidence)}",
    ]


def _model_yaml(m: GpuModel) -> list[str]:
    out = [
        f"- id: {_q(m.id)}", f"  aliases: {_flow(_q(a) for a in m.aliases)}",
        f"  smi_names: {_flow(_q(n) for n in m.smi_names)}",
        f"  pci_device_ids: {_flow(_q(d) for d in m.pci_device_ids)}",
        f"  architecture: {_q(m.architecture)}", f"  memory_slices: {m.memory_slices}",
        f"  compute_slices: {m.compute_slices}", f"  verified: {str(m.verified).lower()}",
        f"  confidence: {_q(m.confidence)}", f"  source: {_q(m.source)}", "  profiles:",
    ]
    for p in m.profiles:
        out += _profile_yaml(p)
    return out


def render_catalog_yaml(models: Iterable[GpuModel]) -> str:
    """A catalog override document (schema of migplan/catalog/data/models.yaml) for `--catalog`."""
    lines = ["# migplan catalog override (learned from nvidia-smi; check before trusting it)",
             f"version: {CATALOG_VERSION}", "models:"]
    for m in models:
        lines += _model_yaml(m)
    return "\n".join(lines) + "\n"
