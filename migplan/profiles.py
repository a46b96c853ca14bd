"""Workload profiles: what each workload used, as measured, plus what its owner asks for.

A profile file is a versioned YAML document (README, "Workload profiles"):

    version: 1
    workloads:
      - name: chat-llama-8b
        observed: {host: gpu-a100-01, gpu: 0, gpu_model: A100-SXM4-40GB, mig_profile: 3g.20gb, mig_start: 4,
                   window: {start: 2026-11-01T00:00:00Z, end: 2026-11-08T00:00:00Z}, samples: 10080}
        memory_mib: {p50: 14100, p95: 15020, p99: 15400, max: 15900}
        compute: {p50: 0.08, p95: 0.21, p99: 0.3, max: 0.35}   # share of the whole GPU it ran on
        priority: 10
        movable: true            # false: never moved to consolidate (`propose --consolidate`)
        min_profile: 2g.10gb     # optional; `whole`: only a whole GPU with MIG disabled

Memory may be written in fractional MiB (a collector that averages or converts from bytes): each value
is rounded UP to the next whole MiB, never down, because memory is a hard limit. `compute.p99` is
optional (older profiles lack it); `--compute-percentile p99` then refuses the workload rather than
quietly using another statistic. Percentiles must not decrease (p50 <= p95 <= p99 <= max).
A workload without `compute` has compute that was never measured (`UNKNOWN_COMPUTE`): never an invented
number; the planner then sizes it by memory alone (a compute floor of one slice).

`kind: vm` (default `process`) is a virtual machine on NVIDIA vGPU (issue 26, docs/vgpu.md "Demand"): its memory
is the frame buffer it used, its compute the vGPU's share of the GPU it ran on, measured in the guest or on the host
(`nvidia-smi vgpu -q`). `observed.vgpu_type` is the type it ran on (`A100X-3-20C`) and `observed.vm_uuid` the VM's
UUID; the owner may pin a type (`vgpu_type`) or a smallest type (`min_vgpu_type`). A type must be a name of
NVIDIA's grammar here; whether the vGPU catalog has it is checked when a plan is made (`planner.vm_demand`). A VM
has no `min_profile`, and only a VM has the vGPU keys. The document version stays 1: a profile without these keys is
read as before, and a reader older than them refuses the new keys by name.

Bounds: memory 0..`names.MAX_MEMORY_MIB` MiB; compute shares are finite, 0..1; GPU indices
0..`names.MAX_GPU_INDEX`; `mig_start` 0..`names.MAX_MIG_SLICES`-1; `priority` 0..`MAX_PRIORITY`;
`replicas` 1..`MAX_REPLICAS`; `samples` 0..`MAX_SAMPLES`. Window times are ISO 8601; a time
without a zone is UTC (as the collector writes them), so naive and aware times compare.
"""

from __future__ import annotations

import datetime as dt
import decimal
import itertools
import math
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from migplan import names, yamldoc
from migplan.catalog import Catalog
from migplan.catalog.vgpu import parse_type_name, smi_type_name
from migplan.errors import CatalogError, InputError
from migplan.yamldoc import Entries, Node

PROFILES_VERSION = 1
MAX_PRIORITY = 10_000
MAX_REPLICAS = 1_024  # more copies of one workload than instances in a large fleet's rack
MAX_SAMPLES = 10**12
_TIME_HINT = "write an ISO 8601 time such as 2026-11-01T00:00:00Z"


@dataclass(frozen=True)
class MemoryStats:
    """GPU memory used, whole MiB (fractions in the file were rounded up); `max` is the observed peak."""

    p50: int
    p95: int
    p99: int
    max: int

    def percentile(self, name: str) -> int:
        return int(getattr(self, name))


@dataclass(frozen=True)
class ComputeStats:
    """Compute used, as a fraction (0..1) of the whole GPU it was measured on.

    `p99` is None when the profile does not record it (it was added after p50/p95/max); asking for it
    then is an error, never a silent substitute."""

    p50: float
    p95: float
    max: float
    p99: float | None = None
    # False when the profile has no `compute` (never measured, e.g. NVML in MIG mode on Ampere): every
    # statistic then reads 0.0, so the planner's compute floor is one slice and memory decides the size
    known: bool = True

    def percentile(self, name: str) -> float:
        if name not in ("p50", "p95", "p99", "max"):
            raise InputError(f"compute percentile {name!r} is not one of p50, p95, p99, max")
        if not self.known:
            return 0.0
        value = getattr(self, name)
        if value is None:
            raise InputError("the profile has no compute.p99",
                             hint="add compute.p99 to the profile, or use --compute-percentile p95 or max")
        return float(value)


UNKNOWN_COMPUTE = ComputeStats(p50=0.0, p95=0.0, max=0.0, p99=0.0, known=False)


@dataclass(frozen=True)
class ObservedPlace:
    """One place a workload was measured on (`observed.places`, written by `migplan profiles build`)."""

    host: str | None = None
    gpu: int | None = None
    gpu_model: str | None = None
    mig_profile: str | None = None
    mig_start: int | None = None
    samples: int = 0
    first_seen: str | None = None
    last_seen: str | None = None
    vgpu_type: str | None = None  # a VM's vGPU type there (kind: vm)
    vm_uuid: str | None = None


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
    # written by `migplan profiles build` (all optional): first/last sample time, every place seen,
    # how many samples measured compute, and notes such as "rests on few samples"
    first_seen: str | None = None
    last_seen: str | None = None
    places: tuple[ObservedPlace, ...] = ()
    compute_samples: int | None = None
    notes: tuple[str, ...] = ()
    vgpu_type: str | None = None  # kind: vm: the vGPU type it runs on (`A100X-3-20C`)
    vm_uuid: str | None = None  # kind: vm: the VM's UUID, as the hypervisor gives it


@dataclass(frozen=True)
class Pin:
    host: str | None = None
    gpu: int | None = None


ANY_MIG = "*"  # `Eligible.profile`: every MIG profile that has no entry of its own


@dataclass(frozen=True)
class Eligible:
    """Where a workload may take an instance of one profile: `profile` a MIG profile, WHOLE_GPU (a whole MIG-disabled
    GPU, or a GPU without MIG) or ANY_MIG; `hosts` the hosts it may take one on (None: any host); `why` those hosts in
    words, for the reasons a plan gives ("nodes with nvidia.com/mig.strategy=mixed").

    Generic: the planner knows hosts and profiles, not what made them so. Kubernetes is one source: a pod can use
    only the devices its node's device plugin advertises under the resource it requests (migplan/pods.py)."""

    profile: str
    hosts: tuple[str, ...] | None = None
    why: str = ""

    def allows(self, host: str) -> bool:
        return self.hosts is None or host in self.hosts


def eligible_for(rules: tuple[Eligible, ...], profile: str) -> Eligible | None:
    """The rule of `rules` that governs `profile` (its own, else ANY_MIG's for a MIG profile); None: not allowed. An
    empty `rules` allows every profile on every host (None is never returned for it: check `rules` first)."""
    own = next((e for e in rules if e.profile == profile), None)
    if own is not None or profile == WHOLE_GPU:
        return own
    return next((e for e in rules if e.profile == ANY_MIG), None)


def may_use(rules: tuple[Eligible, ...], profile: str, host: str) -> bool:
    """Whether a workload with these rules may take an instance of `profile` (plain, or WHOLE_GPU) on `host`."""
    if not rules:
        return True
    rule = eligible_for(rules, profile)
    return rule is not None and rule.allows(host)


@dataclass(frozen=True)
class Workload:
    name: str
    observed: Observation
    memory: MemoryStats
    compute: ComputeStats
    priority: int = 1
    pin: Pin | None = None
    anti_affinity: str | None = None
    min_profile: str | None = None  # a MIG profile name, or WHOLE_GPU: only a whole MIG-disabled GPU
    replicas: int = 1
    source: str = ""
    movable: bool = True  # false: `propose --consolidate` (and --allow-disrupt) never moves it while it fits
    # Set only for an unmeasured Kubernetes pod (migplan/pods.py; never read from a profiles file): the one
    # instance it can use, a MIG profile (`nvidia.com/mig-<profile>`) or WHOLE_GPU (`nvidia.com/gpu`). The
    # planner offers it that profile only, and `memory_mib` is that instance's size, not a measurement: no
    # headroom is added to it.
    requested: str | None = None
    # Set only by a source that knows how each host offers its GPUs (migplan/pods.py: the MIG strategy of each
    # Kubernetes node; never read from a profiles file): the profiles it may use and where (`Eligible`). Empty:
    # every profile it fits, on every host. With `requested`, each profile named here is another form of the
    # same request (a pod's `nvidia.com/gpu` is a whole GPU on one node, a MIG device of the node's profile on
    # another), offered as exactly as `requested` is.
    eligible: tuple[Eligible, ...] = ()
    kind: str = "process"  # KIND_PROCESS or KIND_VM (a virtual machine on NVIDIA vGPU)
    vgpu_type: str | None = None  # kind: vm: exactly this vGPU type (a pin, checked against the vGPU catalog)
    min_vgpu_type: str | None = None  # kind: vm: no vGPU type with less frame buffer than this one

    @property
    def is_vm(self) -> bool:
        return self.kind == KIND_VM


@dataclass(frozen=True)
class ProfileSet:
    workloads: tuple[Workload, ...]
    sources: tuple[str, ...] = ()

    def __iter__(self) -> Iterator[Workload]:
        return iter(self.workloads)

    def __len__(self) -> int:
        return len(self.workloads)


def _timestamp(f: Entries, key: str) -> tuple[str, dt.datetime]:
    """The time as written (datetimes normalised to ISO 8601) and as an aware datetime (naive: UTC)."""
    v = f.value(key)
    if isinstance(v, dt.datetime):
        text = v.isoformat() if v.tzinfo is not None else v.replace(tzinfo=dt.timezone.utc).isoformat()
        text = text.replace("+00:00", "Z")
    elif isinstance(v, dt.date):
        text, v = f"{v.isoformat()}T00:00:00Z", dt.datetime(v.year, v.month, v.day)
    elif isinstance(v, str):
        text = v
        try:
            v = dt.datetime.fromisoformat(v.strip().replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            f.node(key).fail(f"{v!r} is not an ISO 8601 time such as 2026-11-01T00:00:00Z", hint=_TIME_HINT)
    else:
        f.node(key).fail("expected an ISO 8601 time such as 2026-11-01T00:00:00Z", hint=_TIME_HINT)
    if v.tzinfo is None:
        v = v.replace(tzinfo=dt.timezone.utc)
    try:
        v = v.astimezone(dt.timezone.utc)
    except (OverflowError, ValueError):
        f.node(key).fail(f"{text!r} is out of the range of times", hint=_TIME_HINT)
    return text, v


def _ordered(f: Entries, order: list[str], values: list[float], unit: str) -> None:
    for (a, va), (b, vb) in itertools.pairwise(zip(order, values, strict=True)):
        if va > vb:
            f.node(b).fail(f"{b} ({vb:g}{unit}) is below {a} ({va:g}{unit}); percentiles must not decrease")


def _decimal(text: str) -> decimal.Decimal | None:
    try:
        d = decimal.Decimal(text.strip().replace("_", ""))
    except (decimal.InvalidOperation, ValueError):
        return None
    return d if d.is_finite() else None


def _mib(f: Entries, key: str) -> tuple[float, int]:
    """A memory value as written (for messages and the order check) and in whole MiB, rounded UP:
    15400.2 MiB needs 15401 MiB. The ceiling is taken of the decimal text where it parses, so a
    fraction too small for a binary float (14000.0000000000001) still rounds up, never down."""
    raw = f.value(key)
    if type(raw) is int and 0 <= raw <= names.MAX_MEMORY_MIB:  # the common case, as the checks below find it
        return float(raw), raw
    node = f.node(key)
    raw = node.value("number")
    if isinstance(raw, int):
        whole = raw
    else:
        if not math.isfinite(raw):
            node.fail(f"expected an integer or a finite number of MiB, got {node.text}",
                      hint="fractions of a MiB are allowed (rounded up); '.nan' and '.inf' are not measurements")
        whole = math.ceil(raw)
        exact = _decimal(node.text or "")
        if exact is not None and abs(exact - decimal.Decimal(raw)) < 1:
            whole = max(whole, int(exact.to_integral_value(rounding=decimal.ROUND_CEILING)))
    if raw < 0:
        node.fail(f"must be at least 0, got {raw:g}")
    if whole > names.MAX_MEMORY_MIB:
        node.fail(f"must be at most {names.MAX_MEMORY_MIB}, got {raw:g}")
    return float(raw), whole


_STATS = {"p50", "p95", "p99", "max"}
_COMPUTE_REQUIRED = {"p50", "p95", "max"}


def _memory(node: Node) -> MemoryStats:
    keys = ["p50", "p95", "p99", "max"]
    f = node.entries(_STATS, _STATS)
    read = [_mib(f, k) for k in keys]
    _ordered(f, keys, [r for r, _ in read], " MiB")
    return MemoryStats(*(w for _, w in read))


def _compute(node: Node) -> ComputeStats:
    """p50, p95 and max are required; p99 is optional (profiles written before it was collected)."""
    f = node.entries(_STATS, _COMPUTE_REQUIRED)
    keys: list[str] = [k for k in ("p50", "p95", "p99", "max") if k in f]
    vals = [f.number(k, minimum=0.0, maximum=1.0) for k in keys]
    _ordered(f, keys, vals, "")
    got = dict(zip(keys, vals, strict=True))
    return ComputeStats(p50=got["p50"], p95=got["p95"], max=got["max"], p99=got.get("p99"))


def _profile_name(f: Entries, key: str, example: str) -> str:
    name = f.str(key)
    if name != name.strip() or names.profile_size(name) is None:
        f.node(key).fail(f"{name!r} is not a MIG profile name such as {example}")
    return name


def _host(f: Entries, key: str) -> str:
    host = f.str(key)
    if not names.HOST_NAME.fullmatch(host):
        f.node(key).fail(f"{host!r} is not a host name")
    return host


def _gpu_index(f: Entries, key: str) -> int:
    i = f.int(key, minimum=0)
    if i > names.MAX_GPU_INDEX:
        f.node(key).fail(f"GPU index {i} is out of range 0..{names.MAX_GPU_INDEX}",
                         hint=f"a host has at most {names.MAX_GPUS_PER_HOST} GPUs, numbered from 0 as nvidia-smi "
                              "lists them")
    return i


def _vgpu_type(f: Entries, key: str) -> str:
    """A vGPU type name of NVIDIA's grammar (`A100-3-20C`, `L4-8C`; `GRID `/`NVIDIA ` as nvidia-smi prints it is
    dropped). Whether a board has it is the vGPU catalog's to say, at plan time."""
    raw = f.str(key)
    name = smi_type_name(raw)
    try:
        parse_type_name(name)
    except CatalogError as err:
        f.node(key).fail(f"{raw!r} is not a vGPU type name", hint=err.hint)
    return name


def _vm_uuid(f: Entries, key: str) -> str:
    text = f.str(key)
    if not _UUID.fullmatch(text):
        f.node(key).fail(f"{text!r} is not a VM UUID such as 10a12241-1e83-4b70-bc59-a33d7c6d063c")
    return text.lower()


_PLACE_KEYS = {"host", "gpu", "gpu_model", "mig_profile", "mig_start", "samples", "first_seen", "last_seen",
               "vgpu_type", "vm_uuid"}


def _place(node: Node, *, vm: bool = False) -> ObservedPlace:
    f = node.entries(_PLACE_KEYS)
    _vm_keys(f, vm)
    return ObservedPlace(
        host=_host(f, "host") if f.present("host") else None,
        gpu=_gpu_index(f, "gpu") if f.present("gpu") else None,
        gpu_model=f.str("gpu_model") if f.present("gpu_model") else None,
        mig_profile=_profile_name(f, "mig_profile", "3g.20gb") if f.present("mig_profile") else None,
        mig_start=f.int("mig_start", minimum=0, maximum=names.MAX_MIG_SLICES - 1) if f.present("mig_start") else None,
        samples=f.int("samples", minimum=0, maximum=MAX_SAMPLES) if "samples" in f else 0,
        first_seen=_timestamp(f, "first_seen")[0] if "first_seen" in f else None,
        last_seen=_timestamp(f, "last_seen")[0] if "last_seen" in f else None,
        vgpu_type=_vgpu_type(f, "vgpu_type") if f.present("vgpu_type") else None,
        vm_uuid=_vm_uuid(f, "vm_uuid") if f.present("vm_uuid") else None)


def _vm_keys(f: Entries, vm: bool) -> None:
    for key in ("vgpu_type", "vm_uuid"):
        if key in f and not vm:
            f.node(key).fail_key(f"{key} is for virtual machines", hint="add 'kind: vm' to this workload")


_OBSERVATION_KEYS = {"host", "gpu", "gpu_model", "mig_profile", "mig_start", "window", "samples", "first_seen",
                     "last_seen", "places", "compute_samples", "notes", "vgpu_type", "vm_uuid"}
_WINDOW_KEYS = {"start", "end"}


def _observation(node: Node, *, vm: bool = False) -> Observation:
    f = node.entries(_OBSERVATION_KEYS)
    _vm_keys(f, vm)
    profile = _profile_name(f, "mig_profile", "3g.20gb") if f.present("mig_profile") else None
    start, end = None, None
    if "window" in f:
        wf = f.node("window").entries(_WINDOW_KEYS, _WINDOW_KEYS)
        (start, t0), (end, t1) = _timestamp(wf, "start"), _timestamp(wf, "end")
        if t1 < t0:
            wf.node("end").fail("the window ends before it starts")
    return Observation(
        host=_host(f, "host") if "host" in f else None,
        gpu=_gpu_index(f, "gpu") if f.present("gpu") else None,
        gpu_model=f.str("gpu_model") if "gpu_model" in f else None,
        mig_profile=profile,
        mig_start=f.int("mig_start", minimum=0, maximum=names.MAX_MIG_SLICES - 1) if f.present("mig_start") else None,
        window_start=start,
        window_end=end,
        samples=f.int("samples", minimum=0, maximum=MAX_SAMPLES) if "samples" in f else 0,
        first_seen=_timestamp(f, "first_seen")[0] if "first_seen" in f else None,
        last_seen=_timestamp(f, "last_seen")[0] if "last_seen" in f else None,
        places=tuple(_place(n, vm=vm) for n in f.node("places").list()) if "places" in f else (),
        compute_samples=(f.int("compute_samples", minimum=0, maximum=MAX_SAMPLES)
                         if "compute_samples" in f else None),
        notes=tuple(n.str() for n in f.node("notes").list()) if "notes" in f else (),
        vgpu_type=_vgpu_type(f, "vgpu_type") if f.present("vgpu_type") else None,
        vm_uuid=_vm_uuid(f, "vm_uuid") if f.present("vm_uuid") else None,
    )


_WORKLOAD_KEYS = {"name", "observed", "memory_mib", "compute", "priority", "pin", "anti_affinity",
                  "min_profile", "replicas", "movable", "kind", "vgpu_type", "min_vgpu_type"}
KIND_PROCESS = "process"  # processes on a bare-metal host (MIG instances or whole GPUs): the default
KIND_VM = "vm"  # a virtual machine on NVIDIA vGPU (issue 26)
KINDS = (KIND_PROCESS, KIND_VM)
_WORKLOAD_REQUIRED = {"name", "memory_mib"}
_PIN_KEYS = {"host", "gpu"}
_VM_ONLY = ("vgpu_type", "min_vgpu_type")
_UUID = re.compile(r"(?a)[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
# `min_profile: whole`: the workload needs a whole GPU with MIG disabled (NVLink, profiling tools and
# other features MIG instances do not offer; NVIDIA MIG User Guide, "Application Considerations")
WHOLE_GPU = "whole"


def _workload(node: Node) -> Workload:
    f = node.entries(_WORKLOAD_KEYS, _WORKLOAD_REQUIRED)  # no `compute`: not measured (UNKNOWN_COMPUTE)
    name = f.str("name")
    if not names.WORKLOAD_NAME.fullmatch(name):
        f.node("name").fail(f"workload name {name!r} must start with a letter or digit and use letters, digits, "
                            "'.', '_', '/', ':' or '-'")
    pin = None
    if "pin" in f:
        pf = f.node("pin").entries(_PIN_KEYS)
        pin = Pin(host=_host(pf, "host") if "host" in pf else None,
                  gpu=_gpu_index(pf, "gpu") if "gpu" in pf else None)
        if pin.gpu is not None and pin.host is None:
            f.node("pin").fail("a GPU pin needs a host too", hint="write pin: {host: NAME, gpu: INDEX}")
    kind = KIND_PROCESS
    if "kind" in f:
        kind = f.str("kind")
        if kind not in KINDS:
            f.node("kind").fail(f"kind {kind!r} is not one of {', '.join(KINDS)}",
                                hint="process: processes on a bare-metal host (the default); vm: a virtual machine "
                                     "on vGPU")
    observed = _observation(f.node("observed"), vm=kind == KIND_VM) if "observed" in f else Observation()
    if kind == KIND_VM:
        if "min_profile" in f:
            f.node("min_profile").fail("a VM is given a vGPU type, not a MIG instance",
                                       hint="write min_vgpu_type: (a vGPU type such as A100-2-10C) instead")
        if "vgpu_type" in f and "min_vgpu_type" in f:
            f.node("min_vgpu_type").fail("give vgpu_type (exactly this type) or min_vgpu_type (at least this one), "
                                         "not both")
    else:
        for key in _VM_ONLY:
            if key in f:
                f.node(key).fail(f"{key} is for virtual machines", hint="add 'kind: vm' to this workload")
    min_profile = None
    if "min_profile" in f:
        min_profile = (WHOLE_GPU if f.str("min_profile") == WHOLE_GPU
                       else _profile_name(f, "min_profile", "2g.10gb (or 'whole' for a whole MIG-disabled GPU)"))
    return Workload(
        name=name,
        observed=observed,
        memory=_memory(f.node("memory_mib")),
        compute=_compute(f.node("compute")) if "compute" in f else UNKNOWN_COMPUTE,
        priority=f.int("priority", minimum=0, maximum=MAX_PRIORITY) if "priority" in f else 1,
        pin=pin,
        anti_affinity=f.str("anti_affinity") if "anti_affinity" in f else None,
        min_profile=min_profile,
        replicas=f.int("replicas", minimum=1, maximum=MAX_REPLICAS) if "replicas" in f else 1,
        source=f"{node.source}:{node.line}",
        movable=f.bool("movable") if "movable" in f else True,
        kind=kind,
        vgpu_type=_vgpu_type(f, "vgpu_type") if "vgpu_type" in f else None,
        min_vgpu_type=_vgpu_type(f, "min_vgpu_type") if "min_vgpu_type" in f else None,
    )


def parse_profiles(root: Node) -> list[Workload]:
    f = root.fields({"version", "kind", "workloads"}, {"workloads"})
    if "kind" in f and f["kind"].str() != "migplan/profiles":
        f["kind"].fail(f"this is a {f['kind'].str()!r} document, not migplan/profiles")
    yamldoc.check_version(f, root, PROFILES_VERSION, "workload profile")
    return [_workload(n) for n in f["workloads"].list()]


def _vgpu_gpu(model: str) -> bool:
    """Whether `model` is the GPU of a vGPU board migplan knows (a VM may run on a GPU without MIG: L4, T4)."""
    from migplan.catalog import builtin_vgpu_catalog  # read only for a VM on a GPU the MIG catalog lacks

    return any(b.gpu.lower() == model.strip().lower() for b in builtin_vgpu_catalog())


def check_models(profiles: ProfileSet, catalog: Catalog) -> None:
    """Every `observed.gpu_model` must be a catalog model: its SM count converts the measured compute
    share to slices of another model, so a misspelt name would silently change the demand."""
    for w in profiles:
        model = w.observed.gpu_model
        if model is not None and catalog.find(model) is None and not (w.is_vm and _vgpu_gpu(model)):
            src, _, line = w.source.rpartition(":")
            raise InputError(f"unknown GPU model {model!r}", source=src or None,
                             line=int(line) if line.isascii() and line.isdigit() else None,
                             key=f"workload {w.name!r}: observed.gpu_model",
                             hint="use a model id or alias from 'migplan catalog list', or add it with --catalog")


def profile_files(path: Path) -> list[Path]:
    """The files a profiles path names: the .yaml/.yml files of a directory, sorted by name, or the file itself."""
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
        if not files:
            raise InputError("no .yaml profile files in this directory", source=str(path),
                             hint="collect profiles first, or point --profiles at the right directory")
        return files
    if not path.exists():
        raise InputError("no such file or directory", source=str(path), hint="check --profiles")
    return [path]


def read_profile_file(file: Path) -> list[Workload]:
    """One profiles file's workloads, checked."""
    with yamldoc.paused_gc():
        return parse_profiles(yamldoc.load(file))


def merge_profiles(reads: Iterable[list[Workload]], files: list[Path]) -> ProfileSet:
    """The workloads of `files`, read in file order (`reads`: each file's `read_profile_file`, iterated lazily
    so that a file's error comes where a plain loop meets it), refusing a name defined twice."""
    workloads: list[Workload] = []
    first: dict[str, str] = {}
    for read in reads:
        for w in read:
            if w.name in first:
                src, _, line = w.source.rpartition(":")
                raise InputError(f"workload {w.name!r} is defined twice (first at {first[w.name]})",
                                 source=src, line=int(line), key="workloads",
                                 hint="workload names must be unique across all profile files")
            first[w.name] = w.source
            workloads.append(w)
    return ProfileSet(tuple(workloads), tuple(str(f) for f in files))


def load_profiles(path: str | os.PathLike[str]) -> ProfileSet:
    """All workload profiles in a file or in the .yaml files of a directory (sorted by name), read here, one
    file after another (`documents.load_profiles` shares large sets among worker processes)."""
    files = profile_files(Path(path))
    return merge_profiles((read_profile_file(f) for f in files), files)
