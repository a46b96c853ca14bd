"""Workload profiles: what each workload used, as measured, plus what its owner asks for.

A profile file is a versioned YAML document (README, "Workload profiles"):

    version: 1
    workloads:
      - name: chat-llama-8b
        observed: {host: gpu-a100-01, gpu: 0, gpu_model: A100-SXM4-40GB, mig_profile: 3g.20gb, mig_start: 4,
                   window: {start: 2026-11-01T00:00:00Z, end: 2026-11-08T00:00:00Z}, samples: 10080}
        memory_mib: {p50: 14100, p95: 15020, p99: 15400, max: 15900}
        compute: {p50: 0.08, p95: 0.21, max: 0.35}     # share of the whole GPU it ran on
        priority: 10
"""

from __future__ import annotations

import datetime as dt
import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from migplan import names, yamldoc
from migplan.catalog import Catalog
from migplan.errors import InputError
from migplan.yamldoc import Node

PROFILES_VERSION = 1


@dataclass(frozen=True)
class MemoryStats:
    """GPU memory used, MiB."""

    p50: int
    p95: int
    p99: int
    max: int

    def percentile(self, name: str) -> int:
        return int(getattr(self, name))


@dataclass(frozen=True)
class ComputeStats:
    """Compute used, as a fraction (0..1) of the whole GPU it was measured on."""

    p50: float
    p95: float
    max: float

    def percentile(self, name: str) -> float:
        if name == "p99":  # not collected; the max bounds it
            return self.max
        return float(getattr(self, name))


@dataclass(frozen=True)
class Observation:
    """Where and when the workload was measured (and where it runs now)."""

    host: str | None = None
    gpu: int | None = None
    gpu_model: str | None = None
    mig_profile: str | None = None  # None: whole GPU (MIG disabled) or unknown
    mig_start: int | None = None
    window_start: str | None = None
    window_end: str | None = None
    samples: int = 0


@dataclass(frozen=True)
class Pin:
    host: str | None = None
    gpu: int | None = None


@dataclass(frozen=True)
class Workload:
    name: str
    observed: Observation
    memory: MemoryStats
    compute: ComputeStats
    priority: int = 1
    pin: Pin | None = None
    anti_affinity: str | None = None
    min_profile: str | None = None
    replicas: int = 1
    source: str = ""


@dataclass(frozen=True)
class ProfileSet:
    workloads: tuple[Workload, ...]
    sources: tuple[str, ...] = ()

    def __iter__(self) -> Iterator[Workload]:
        return iter(self.workloads)

    def __len__(self) -> int:
        return len(self.workloads)


def _timestamp(node: Node) -> str:
    v = node.value()
    if isinstance(v, dt.datetime):
        if v.tzinfo is None:
            v = v.replace(tzinfo=dt.timezone.utc)
        return v.isoformat().replace("+00:00", "Z")
    if isinstance(v, str):
        try:
            dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            node.fail(f"{v!r} is not an ISO 8601 time such as 2026-11-01T00:00:00Z")
        return v
    node.fail("expected an ISO 8601 time such as 2026-11-01T00:00:00Z")


def _ordered(node: Node, fields: dict[str, Node], order: list[str], values: list[float], unit: str) -> None:
    for (a, va), (b, vb) in itertools.pairwise(zip(order, values, strict=True)):
        if va > vb:
            fields[b].fail(f"{b} ({vb:g}{unit}) is below {a} ({va:g}{unit}); percentiles must not decrease")


def _memory(node: Node) -> MemoryStats:
    keys = ["p50", "p95", "p99", "max"]
    f = node.fields(set(keys), set(keys))
    vals = [f[k].int(minimum=0) for k in keys]
    _ordered(node, f, keys, [float(v) for v in vals], " MiB")
    return MemoryStats(*vals)


def _compute(node: Node) -> ComputeStats:
    keys = ["p50", "p95", "max"]
    f = node.fields(set(keys), set(keys))
    vals = [f[k].number(minimum=0.0, maximum=1.0) for k in keys]
    _ordered(node, f, keys, vals, "")
    return ComputeStats(*vals)


def _observation(node: Node) -> Observation:
    f = node.fields({"host", "gpu", "gpu_model", "mig_profile", "mig_start", "window", "samples"})
    profile = f["mig_profile"].str() if "mig_profile" in f and not f["mig_profile"].is_null else None
    if profile is not None and names.profile_size(profile) is None:
        f["mig_profile"].fail(f"{profile!r} is not a MIG profile name such as 3g.20gb")
    start, end = None, None
    if "window" in f:
        wf = f["window"].fields({"start", "end"}, {"start", "end"})
        start, end = _timestamp(wf["start"]), _timestamp(wf["end"])
        if dt.datetime.fromisoformat(end.replace("Z", "+00:00")) < dt.datetime.fromisoformat(
                start.replace("Z", "+00:00")):
            wf["end"].fail("the window ends before it starts")
    host = f["host"].str() if "host" in f else None
    if host is not None and not names.HOST_NAME.match(host):
        f["host"].fail(f"{host!r} is not a host name")
    return Observation(
        host=host,
        gpu=f["gpu"].int(minimum=0) if "gpu" in f and not f["gpu"].is_null else None,
        gpu_model=f["gpu_model"].str() if "gpu_model" in f else None,
        mig_profile=profile,
        mig_start=f["mig_start"].int(minimum=0) if "mig_start" in f and not f["mig_start"].is_null else None,
        window_start=start,
        window_end=end,
        samples=f["samples"].int(minimum=0) if "samples" in f else 0,
    )


_WORKLOAD_KEYS = {"name", "observed", "memory_mib", "compute", "priority", "pin", "anti_affinity",
                  "min_profile", "replicas"}


def _workload(node: Node) -> Workload:
    f = node.fields(_WORKLOAD_KEYS, {"name", "memory_mib", "compute"})
    name = f["name"].str()
    if not names.WORKLOAD_NAME.match(name):
        f["name"].fail(f"workload name {name!r} must start with a letter or digit and use letters, digits, "
                       "'.', '_', '/', ':' or '-'")
    pin = None
    if "pin" in f:
        pf = f["pin"].fields({"host", "gpu"})
        pin = Pin(host=pf["host"].str() if "host" in pf else None,
                  gpu=pf["gpu"].int(minimum=0) if "gpu" in pf else None)
        if pin.gpu is not None and pin.host is None:
            f["pin"].fail("a GPU pin needs a host too", hint="write pin: {host: NAME, gpu: INDEX}")
    min_profile = None
    if "min_profile" in f:
        min_profile = f["min_profile"].str()
        if names.profile_size(min_profile) is None:
            f["min_profile"].fail(f"{min_profile!r} is not a MIG profile name such as 2g.10gb")
    return Workload(
        name=name,
        observed=_observation(f["observed"]) if "observed" in f else Observation(),
        memory=_memory(f["memory_mib"]),
        compute=_compute(f["compute"]),
        priority=f["priority"].int(minimum=0) if "priority" in f else 1,
        pin=pin,
        anti_affinity=f["anti_affinity"].str() if "anti_affinity" in f else None,
        min_profile=min_profile,
        replicas=f["replicas"].int(minimum=1) if "replicas" in f else 1,
        source=f"{node.source}:{node.line}",
    )


def parse_profiles(root: Node) -> list[Workload]:
    f = root.fields({"version", "workloads"}, {"workloads"})
    yamldoc.check_version(f, root, PROFILES_VERSION, "workload profile")
    return [_workload(n) for n in f["workloads"].list()]


def check_models(profiles: ProfileSet, catalog: Catalog) -> None:
    """Every `observed.gpu_model` must be a catalog model: its SM count converts the measured compute
    share to slices of another model, so a misspelt name would silently change the demand."""
    for w in profiles:
        model = w.observed.gpu_model
        if model is not None and catalog.find(model) is None:
            src, _, line = w.source.rpartition(":")
            raise InputError(f"unknown GPU model {model!r}", source=src or None,
                             line=int(line) if line.isdigit() else None,
                             key=f"workload {w.name!r}: observed.gpu_model",
                             hint="use a model id or alias from 'migplan catalog list', or add it with --catalog")


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
        if not files:
            raise InputError("no .yaml profile files in this directory", source=str(path),
                             hint="collect profiles first, or point --profiles at the right directory")
        return files
    if not path.exists():
        raise InputError("no such file or directory", source=str(path), hint="check --profiles")
    return [path]


def load_profiles(path: str | os.PathLike[str]) -> ProfileSet:
    """All workload profiles in a file or in the .yaml files of a directory (sorted by name)."""
    files = _files(Path(path))
    workloads: list[Workload] = []
    first: dict[str, str] = {}
    for file in files:
        for w in parse_profiles(yamldoc.load(file)):
            if w.name in first:
                src, _, line = w.source.rpartition(":")
                raise InputError(f"workload {w.name!r} is defined twice (first at {first[w.name]})",
                                 source=src, line=int(line), key="workloads",
                                 hint="workload names must be unique across all profile files")
            first[w.name] = w.source
            workloads.append(w)
    return ProfileSet(tuple(workloads), tuple(str(f) for f in files))
