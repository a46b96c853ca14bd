"""Every document migplan writes and reads back, in one place: a `load_*` / `write_*` pair per kind.

Kinds are named `migplan/<kind>` (`kind:` in the document) and carry `version:`. Documents are
written atomically (`files.write_atomic`) as JSON, or YAML when the file name ends in .yaml/.yml,
and read through the one strict reader (`yamldoc`: file, line and key in every error; JSON is YAML).

  plan       migplan propose --out       -> load_plan / write_plan
  snapshot   migplan discover --out      -> load_snapshot / write_snapshot
  profiles   migplan profiles build (collect) -> write_profiles; read by `profiles.load_profiles`
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import yaml

from migplan import jsontext, yamldoc
from migplan.catalog import Catalog, builtin_catalog
from migplan.files import write_atomic
from migplan.model.state import FleetState
from migplan.planner.plan import Plan, parse_plan, plan_to_dict
from migplan.profiles import PROFILES_VERSION, Workload

if TYPE_CHECKING:  # fleet.snapshot (and nvidia-smi's parsers under it) is imported where a snapshot is read or written
    from migplan.fleet.snapshot import Snapshot

PROFILES_KIND = "migplan/profiles"
_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
Path = str | os.PathLike[str]


def format_for(path: Path) -> str:
    """`yaml` for .yaml/.yml names, else `json`."""
    return "yaml" if os.fspath(path).endswith((".yaml", ".yml")) else "json"


def dump(doc: Any, fmt: str = "json") -> str:
    """A document as text: indented JSON, or block-style YAML in key order."""
    with yamldoc.paused_gc():  # a large document's events and nodes: no cycles, and the collector rescanning them
        if fmt == "yaml":  # libyaml's emitter when built (the same YAML; PyYAML's own took 90% of a 200,000-
            # workload CSV import, bench/scale_bounds.py), else PyYAML's
            return str(yaml.dump(doc, Dumper=_DUMPER, sort_keys=False, width=120))
        return jsontext.dumps(doc) + "\n"


def write_document(path: Path, doc: Any, *, forbid: Iterable[Path] = ()) -> None:
    """Write atomically in the format the name asks for; refuse to overwrite any file in `forbid`
    (`--out` equal to the inventory would destroy it)."""
    write_atomic(path, dump(doc, format_for(path)), forbid=forbid)


# --- plan ----------------------------------------------------------------------------------------

def write_plan(path: Path, plan: Plan, *, forbid: Iterable[Path] = ()) -> None:
    write_document(path, plan_to_dict(plan), forbid=forbid)


def load_plan(path: Path, catalog: Catalog | None = None) -> Plan:
    """A plan file, validated strictly against `catalog` (default: the built-in one). The collector is paused
    while it is read and checked: a 200,000-GPU plan is millions of objects that stay alive, and its full passes
    over them grew with the square of the plan's size (bench/scale_bounds.py). A JSON plan is read by json.loads
    (`yamldoc.parse`'s fast_json: the same values, errors and lines as the YAML reader, minutes less at 200,000
    GPUs)."""
    with yamldoc.paused_gc():
        return parse_plan(yamldoc.load(path, fast_json=True), catalog or builtin_catalog())


# --- snapshot ------------------------------------------------------------------------------------

def write_snapshot(path: Path, snapshot: Snapshot, *, forbid: Iterable[Path] = ()) -> None:
    from migplan.fleet.snapshot import snapshot_to_dict

    write_document(path, snapshot_to_dict(snapshot), forbid=forbid)


def load_snapshot(path: Path, catalog: Catalog | None = None) -> Snapshot:
    """The whole snapshot document, validated (models and layouts against `catalog`, default built-in)."""
    from migplan.fleet.snapshot import parse_snapshot

    return parse_snapshot(yamldoc.load(path), catalog or builtin_catalog())


def load_snapshot_state(path: Path, catalog: Catalog | None = None) -> FleetState:
    """The FleetState a snapshot records (hosts that failed discovery are left out; see Snapshot.failed)."""
    cat = catalog or builtin_catalog()
    return load_snapshot(path, cat).fleet_state(source=f"snapshot:{os.fspath(path)}", catalog=cat)


# --- profiles ------------------------------------------------------------------------------------

def _timestamp(value: object) -> str | None:
    if value is None:
        return None
    iso = getattr(value, "isoformat", None)
    text = iso() if callable(iso) else str(value)
    return str(text).replace("+00:00", "Z")


def workload_to_dict(w: Workload) -> dict[str, Any]:
    """One workload in the profiles schema (only what is set, so defaults stay defaults)."""
    o = w.observed
    observed: dict[str, Any] = {k: v for k, v in (
        ("host", o.host), ("gpu", o.gpu), ("gpu_model", o.gpu_model), ("mig_profile", o.mig_profile),
        ("mig_start", o.mig_start), ("samples", o.samples)) if v is not None}
    if o.window_start is not None or o.window_end is not None:
        observed["window"] = {"start": _timestamp(o.window_start), "end": _timestamp(o.window_end)}
    out: dict[str, Any] = {"name": w.name}
    if observed:
        out["observed"] = observed
    out["memory_mib"] = {"p50": w.memory.p50, "p95": w.memory.p95, "p99": w.memory.p99, "max": w.memory.max}
    if w.compute.known:  # never measured: no `compute` key, so it reads back as unknown, not as a real 0
        out["compute"] = {"p50": w.compute.p50, "p95": w.compute.p95,
                          **({"p99": w.compute.p99} if w.compute.p99 is not None else {}), "max": w.compute.max}
    if w.priority != 1:
        out["priority"] = w.priority
    if w.pin is not None:
        out["pin"] = {"host": w.pin.host, **({"gpu": w.pin.gpu} if w.pin.gpu is not None else {})}
    for key in ("anti_affinity", "min_profile"):
        if getattr(w, key) is not None:
            out[key] = getattr(w, key)
    if w.replicas != 1:
        out["replicas"] = w.replicas
    return out


def write_profiles(path: Path, workloads: Iterable[Workload], *, forbid: Iterable[Path] = ()) -> None:
    """A profiles file (`profiles.load_profiles` reads it back; the schema is the README's)."""
    doc = {"version": PROFILES_VERSION, "kind": PROFILES_KIND,
           "workloads": [workload_to_dict(w) for w in workloads]}
    write_document(path, doc, forbid=forbid)
