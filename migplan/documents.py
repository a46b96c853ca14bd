"""Every document migplan writes and reads back, in one place: a `load_*` / `write_*` pair per kind.

Kinds are named `migplan/<kind>` (`kind:` in the document) and carry `version:`. Documents are
written atomically (`files.write_atomic`) as JSON, or YAML when the file name ends in .yaml/.yml,
and read through the one strict reader (`yamldoc`: file, line and key in every error; JSON is YAML).

  plan       migplan propose --out       -> load_plan / write_plan
  snapshot   migplan discover --out      -> load_snapshot / write_snapshot
  profiles   migplan profiles build (collect) -> write_profiles / load_profiles, start_profiles

Profiles are read here with their large sets shared among forked worker processes (`adapters.forkmap`):
the same ProfileSet and the same first error as `profiles.load_profiles`, which reads them one by one.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path as FilePath
from typing import TYPE_CHECKING, Any

import yaml

from migplan import yamldoc, yamljson
from migplan.catalog import Catalog, builtin_catalog
from migplan.errors import InputError
from migplan.files import write_atomic
from migplan.model.state import FleetState
from migplan.planner.plan import Plan, parse_plan, plan_to_dict
from migplan.profiles import PROFILES_VERSION, ProfileSet, Workload, merge_profiles, profile_files, read_profile_file

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
        return json.dumps(doc, indent=2) + "\n"


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
    (`yamljson`: the same values, errors and lines as the YAML reader, minutes less at 200,000 GPUs)."""
    with yamldoc.paused_gc():
        return parse_plan(yamljson.load(path), catalog or builtin_catalog())


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


PARALLEL_BYTES = 1 << 20  # profiles larger than this in all are read by several processes (when CPUs allow)


def _start_reading(files: list[FilePath], keep_share: bool) -> Iterable[list[Workload]]:
    """Each file's workloads, in file order, as an iterable whose reading may already be under way: large
    sets of files are shared among forked workers (each file's error raised at the same point of the
    iteration as when reading them one by one)."""
    sizes = []
    for f in files:
        try:
            sizes.append(f.stat().st_size)
        except OSError:
            sizes.append(0)  # the reader reports it
    if len(files) < 2 or sum(sizes) < PARALLEL_BYTES:
        return (read_profile_file(f) for f in files)
    from migplan.adapters.forkmap import fork_start

    return fork_start(read_profile_file, files, weights=sizes, keep_share=keep_share)


class PendingProfiles:
    """Profiles being read (`start_profiles`): `result()` gives the ProfileSet `load_profiles` would, raising
    the same first error; `cancel()` (or leaving a `with` block) stops workers whose result is not wanted."""

    def __init__(self, path: Path | InputError, keep_share: bool = False) -> None:
        self._error: InputError | None = path if isinstance(path, InputError) else None
        self._reading: Iterable[list[Workload]] = ()
        self._files: list[FilePath] = []
        if isinstance(path, InputError):
            return
        try:
            self._files = profile_files(FilePath(path))
        except InputError as err:  # raised by result(), after whatever the caller reads before
            self._error = err
            return
        self._reading = _start_reading(self._files, keep_share)

    def __enter__(self) -> PendingProfiles:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.cancel()

    def cancel(self) -> None:
        stop = getattr(self._reading, "cancel", None)
        if stop is not None:
            stop()

    def result(self) -> ProfileSet:
        if self._error is not None:
            raise self._error
        try:
            return merge_profiles(self._reading, self._files)
        finally:
            self.cancel()


def start_profiles(path: Path | InputError) -> PendingProfiles:
    """Start reading profiles (large sets in worker processes, leaving this one free to read the inventory
    meanwhile); `.result()` is what `load_profiles(path)` returns (an InputError for `path`: raised then, so
    that errors come in the order of a sequential run). Use as a context manager."""
    return PendingProfiles(path, keep_share=False)


def load_profiles(path: Path) -> ProfileSet:
    """All workload profiles in a file or in the .yaml files of a directory (sorted by name): large sets read
    by this process and forked workers together."""
    with PendingProfiles(path, keep_share=True) as pending:
        return pending.result()


def write_profiles(path: Path, workloads: Iterable[Workload], *, forbid: Iterable[Path] = ()) -> None:
    """A profiles file (`load_profiles` reads it back; the schema is the README's)."""
    doc = {"version": PROFILES_VERSION, "kind": PROFILES_KIND,
           "workloads": [workload_to_dict(w) for w in workloads]}
    write_document(path, doc, forbid=forbid)
