"""NVML through nvidia-ml-py: the one module that imports `pynvml`; the module itself is passed in.

`read_host(nvml, cursors, seen)` reads, per GPU: the running compute processes with their memory (in MIG
mode each attributed to its GPU/compute instance by the ids the v3 process struct carries), SM
utilisation per process since the last read, the device utilisation samples of the same window, the
accounting records of processes that finished since the last read, and, per MIG instance on Hopper and
later, GPM's SM activity. `nvml` is `pynvml` in production (`load_pynvml()`) and the fake under
tests/fake_nvml in tests; nothing here calls the library except through it.

What NVML cannot give is reported as None, never invented (nvml-apis.md §3, nvml.h):
* MIG mode on: "querying process utilization is not currently supported", nor device utilisation
  (NotSupported): per-process SM % is None. On Hopper and later the GPM metrics give the SM activity of
  each GPU instance (`nvmlGpmMigSampleGet`, "For Hopper or newer fully supported devices"), sampled over
  `gpm_interval_s`; elsewhere the instance's compute stays None.
* Accounting is forced off in MIG mode ("accounting mode would be set to DISABLED").
* A process that had no non-zero utilisation in a sample period gets no process sample ("One
  utilization sample structure is returned per process running, that had some non-zero utilization
  during the last sample period"), so a process without samples in a window that NVML answered was idle.

Utilisation windows: every GPU has a cursor (and one for its device samples), the newest sample timestamp
(µs) already read; the next read passes it as `lastSeenTimeStamp`, so no sample is counted twice, and a
run that crashes before its history commit leaves the cursor where it was, so the next run reads those
samples again. The device utilisation samples of the same window give the number of sample periods it
spans (a zero-utilisation period has a device sample but no process sample), so a process's mean is over
every period, idle ones included (`_periods`).

Library failures become `NvmlError` with what to do: no driver (`NVMLError_LibraryNotFound`,
`DriverNotLoaded`), no permission (`NoPermission`), a GPU lost; NotSupported on one call is a None field.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from migplan.errors import MigplanError

NO_ID = 0xFFFFFFFF  # gpuInstanceId/computeInstanceId outside MIG mode (nvml.h nvmlProcessInfo_t)
MIB = 1024 * 1024
ARCHITECTURES = {5: "volta", 6: "turing", 7: "ampere", 8: "ada", 9: "hopper", 10: "blackwell"}  # nvmlDeviceArch
HOPPER = 9
DEVICE_CURSOR = "#device"  # cursors[uuid] is the process samples' cursor, cursors[uuid + DEVICE_CURSOR] the device's


class NvmlError(MigplanError):
    """NVML cannot be used on this host (no driver, no permission, a lost GPU)."""

    code = "nvml-failed"


def load_pynvml() -> Any:
    """The real binding (nvidia-ml-py, module `pynvml`); importing it needs no driver (nvml-apis.md §1)."""
    try:
        import pynvml
    except ImportError:
        raise NvmlError("the NVML Python binding is not installed",
                        hint="pip install nvidia-ml-py (NVIDIA's binding, imported as pynvml)") from None
    return pynvml


# --- what a read returns ----------------------------------------------------------------------------

@dataclass(frozen=True)
class UtilWindow:
    """SM utilisation (%) over one read's window: the mean over its sample periods, the peak, and how
    many samples were seen."""

    mean: float
    peak: float
    samples: int


@dataclass(frozen=True)
class NvmlProcess:
    pid: int
    used_mib: float | None  # None: NVML reports it as not available
    gi_id: int | None = None  # MIG GPU instance id; None outside MIG mode
    ci_id: int | None = None


@dataclass(frozen=True)
class MigDevice:
    gi_id: int
    ci_id: int | None
    gi_profile_id: int | None  # nvidia-smi's GPU-instance profile id (per model)
    start: int | None  # placement start (memory slice)
    uuid: str | None
    sm_util: float | None = None  # GPM SM activity of the GPU instance (%), Hopper+; None: not measured


@dataclass(frozen=True)
class Finished:
    """An accounting record of a process that has exited: NVML's own history of it."""

    pid: int
    start_us: int  # CPU timestamp of its start (µs)
    end: float  # unix seconds it ended (start + time)
    max_mib: float | None
    util_pct: float | None  # mean GPU utilisation over its life; None when NVML had none


@dataclass(frozen=True)
class GpuReading:
    index: int
    uuid: str
    name: str
    pci_device_id: str | None  # "0x20B1"
    memory_total_mib: int | None
    architecture: str | None
    mig: bool
    migs: tuple[MigDevice, ...] = ()
    processes: tuple[NvmlProcess, ...] = ()
    process_util: Mapping[int, UtilWindow] | None = None  # None: NVML cannot measure it here
    device_util: UtilWindow | None = None
    finished: tuple[Finished, ...] = ()
    accounting: bool = False
    accounted_pids: tuple[int, ...] = ()  # every pid NVML's accounting buffer lists now (to prune `seen`)
    cursor_us: int = 0  # newest process utilisation sample read, for the next read's lastSeenTimeStamp
    device_cursor_us: int = 0  # the same for the device utilisation samples

    def cursors(self) -> dict[str, int]:
        """This GPU's cursors as `read_host` takes them back."""
        return {self.uuid: self.cursor_us, self.uuid + DEVICE_CURSOR: self.device_cursor_us}
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class HostReading:
    driver: str | None
    gpus: tuple[GpuReading, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)


# --- the read -----------------------------------------------------------------------------------------

def read_host(nvml: Any, cursors: Mapping[str, int] | None = None, seen: Mapping[str, set[int]] | None = None, *,
              gpm_interval_s: float = 1.0, sleep: Callable[[float], None] = time.sleep) -> HostReading:
    """Every GPU of this host. `cursors`: GPU UUID -> newest sample timestamp already read (µs);
    `seen`: GPU UUID -> pids whose finished accounting record was already read."""
    cursors, seen = cursors or {}, seen or {}
    with _session(nvml):
        driver = _optional(nvml, nvml.nvmlSystemGetDriverVersion)
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        gpus = [_read_gpu(nvml, i, h, cursors, seen) for i, h in enumerate(handles)]
        gpus = _gpm(nvml, handles, gpus, gpm_interval_s, sleep)
    return HostReading(driver=str(driver) if driver is not None else None, gpus=tuple(gpus))


@contextmanager
def _session(nvml: Any) -> Iterator[None]:
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        raise _failure(nvml, err, "nvmlInit") from None
    try:
        yield
    except nvml.NVMLError as err:
        raise _failure(nvml, err, "an NVML call") from None
    finally:
        with contextlib.suppress(nvml.NVMLError):  # best effort: the read's result (or error) is what matters
            nvml.nvmlShutdown()


def _failure(nvml: Any, err: Exception, call: str) -> NvmlError:
    if isinstance(err, (nvml.NVMLError_LibraryNotFound, nvml.NVMLError_DriverNotLoaded)):
        return NvmlError(f"NVML is not available on this host ({err})",
                         hint="install or load the NVIDIA driver (libnvidia-ml.so.1); on a host without GPUs "
                              "collect over SSH from the GPU hosts instead")
    if isinstance(err, nvml.NVMLError_NoPermission):
        return NvmlError(f"NVML refused {call}: {err}",
                         hint="run 'migplan collect --local' as root (the cron entry and timer do)")
    if isinstance(err, nvml.NVMLError_GpuIsLost):
        return NvmlError(f"NVML: {err} (a GPU fell off the bus)", hint="check the host (dmesg, nvidia-smi)")
    return NvmlError(f"NVML failed in {call}: {err}")


def _optional(nvml: Any, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args), or None where NVML says the call does not apply (NotSupported, NotFound, FunctionNotFound)."""
    try:
        return fn(*args)
    except (nvml.NVMLError_NotSupported, nvml.NVMLError_NotFound, nvml.NVMLError_FunctionNotFound):
        return None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _read_gpu(nvml: Any, index: int, h: Any, cursors: Mapping[str, int], seen: Mapping[str, set[int]]) -> GpuReading:
    notes: list[str] = []
    uuid = _text(nvml.nvmlDeviceGetUUID(h))
    name = _text(nvml.nvmlDeviceGetName(h))
    pci = _optional(nvml, nvml.nvmlDeviceGetPciInfo, h)
    pci_id = f"0x{(int(pci.pciDeviceId) >> 16) & 0xFFFF:04X}" if pci is not None else None
    mem = _optional(nvml, nvml.nvmlDeviceGetMemoryInfo, h)
    arch_code = _optional(nvml, nvml.nvmlDeviceGetArchitecture, h)
    arch = ARCHITECTURES.get(int(arch_code)) if arch_code is not None else None
    mode = _optional(nvml, nvml.nvmlDeviceGetMigMode, h)
    mig = bool(mode and mode[0] == nvml.NVML_DEVICE_MIG_ENABLE)
    migs, mig_handles = _mig_devices(nvml, h) if mig else ((), [])
    processes = _processes(nvml, h, mig, mig_handles, migs)
    cursor, dev_cursor = int(cursors.get(uuid, 0)), int(cursors.get(uuid + DEVICE_CURSOR, 0))
    process_util, device_util, new_cursor, new_dev = None, None, cursor, dev_cursor
    if mig:
        notes.append(f"GPU {index}: MIG mode: NVML gives no per-process utilisation; compute "
                     + ("from GPM per instance" if (arch_code or 0) >= HOPPER else "not measured (unknown)"))
    else:
        process_util, device_util, new_cursor, new_dev = _utilisation(nvml, h, cursor, dev_cursor,
                                                                      {p.pid for p in processes})
    accounting = not mig and _optional(nvml, nvml.nvmlDeviceGetAccountingMode, h) == nvml.NVML_FEATURE_ENABLED
    finished: tuple[Finished, ...] = ()
    pids: tuple[int, ...] = ()
    if accounting:
        finished, pids = _finished(nvml, h, {p.pid for p in processes}, seen.get(uuid, set()))
    return GpuReading(index=index, uuid=uuid, name=name, pci_device_id=pci_id,
                      memory_total_mib=int(mem.total // MIB) if mem is not None else None, architecture=arch,
                      mig=mig, migs=migs, processes=processes, process_util=process_util, device_util=device_util,
                      finished=finished, accounting=bool(accounting), accounted_pids=pids, cursor_us=new_cursor,
                      device_cursor_us=new_dev, notes=tuple(notes))


def _mig_devices(nvml: Any, h: Any) -> tuple[tuple[MigDevice, ...], list[Any]]:
    out, handles = [], []
    for i in range(int(nvml.nvmlDeviceGetMaxMigDeviceCount(h))):
        mh = _optional(nvml, nvml.nvmlDeviceGetMigDeviceHandleByIndex, h, i)
        if mh is None:  # "NOT_FOUND if no valid MIG device was found at index": indices can be sparse
            continue
        gi_id = int(nvml.nvmlDeviceGetGpuInstanceId(mh))
        ci = _optional(nvml, nvml.nvmlDeviceGetComputeInstanceId, mh)
        profile_id = start = None
        gi = _optional(nvml, nvml.nvmlDeviceGetGpuInstanceById, h, gi_id)
        if gi is not None:
            info = nvml.nvmlGpuInstanceGetInfo(gi)
            profile_id, start = int(info.profileId), int(info.placement.start)
        uuid = _optional(nvml, nvml.nvmlDeviceGetUUID, mh)
        out.append(MigDevice(gi_id, int(ci) if ci is not None else None, profile_id, start,
                             _text(uuid) if uuid is not None else None))
        handles.append(mh)
    return tuple(out), handles


def _process(obj: Any, gi: int | None = None, ci: int | None = None) -> NvmlProcess:
    used = getattr(obj, "usedGpuMemory", None)
    gi_raw = getattr(obj, "gpuInstanceId", NO_ID)
    ci_raw = getattr(obj, "computeInstanceId", NO_ID)
    return NvmlProcess(int(obj.pid), used / MIB if used is not None else None,
                       gi if gi is not None else (None if gi_raw == NO_ID else int(gi_raw)),
                       ci if ci is not None else (None if ci_raw == NO_ID else int(ci_raw)))


def _processes(nvml: Any, h: Any, mig: bool, mig_handles: list[Any],
               migs: tuple[MigDevice, ...]) -> tuple[NvmlProcess, ...]:
    """The parent handle's list (in MIG mode: the aggregate with instance ids, privileged callers only);
    without that privilege, each MIG device handle's own list, attributed to that device."""
    try:
        return tuple(_process(p) for p in nvml.nvmlDeviceGetComputeRunningProcesses(h))
    except nvml.NVMLError_NoPermission:
        if not mig:
            raise
    out = []
    for mh, m in zip(mig_handles, migs, strict=True):
        for p in _optional(nvml, nvml.nvmlDeviceGetComputeRunningProcesses, mh) or []:
            out.append(_process(p, m.gi_id, m.ci_id))
    return tuple(out)


def _utilisation(nvml: Any, h: Any, cursor: int, dev_cursor: int, pids: set[int]
                 ) -> tuple[dict[int, UtilWindow] | None, UtilWindow | None, int, int]:
    """Process and device utilisation since their cursors; (per pid, device, new cursor, new device cursor)."""
    device, dev_stamps, new_dev = None, [], dev_cursor
    got = _samples(nvml, h, nvml.NVML_GPU_UTILIZATION_SAMPLES, dev_cursor)
    values = [(int(s.timeStamp), float(s.sampleValue.uiVal)) for s in got or () if int(s.timeStamp) > dev_cursor]
    if values:
        dev_stamps = sorted(t for t, _ in values)
        device = UtilWindow(sum(v for _, v in values) / len(values), max(v for _, v in values), len(values))
        new_dev = dev_stamps[-1]
    try:
        raw = nvml.nvmlDeviceGetProcessUtilization(h, cursor)
    except nvml.NVMLError_NotFound:
        raw = []  # no sample since the cursor: every process was idle (see the module notes)
    except nvml.NVMLError_NotSupported:
        return None, device, cursor, new_dev
    per_pid: dict[int, list[float]] = {}
    stamps: set[int] = set()
    for s in raw:
        t = int(s.timeStamp)
        if t > cursor:
            stamps.add(t)
            per_pid.setdefault(int(s.pid), []).append(float(s.smUtil))
    n = _periods(sorted(stamps), dev_stamps, cursor)
    util = {}
    for pid in pids | set(per_pid):
        seen = per_pid.get(pid, [])
        util[pid] = UtilWindow(min(100.0, sum(seen) / n) if n else 0.0, max(seen, default=0.0), len(seen))
    return util, device, max(stamps, default=cursor), new_dev


def _periods(stamps: list[int], dev_stamps: list[int], cursor: int) -> int:
    """How many sample periods the window spans, idle ones (no process sample) included.

    With device samples: their count, taking both kinds of samples to come from the driver's one sampling
    clock (nvml.h gives one period for utilisation, "between 1 second and 1/6 second depending on the
    product"; that process samples share it is unverified). Without: the span from the cursor to the newest
    process sample divided by the smallest gap between process samples (a multiple of the period), which
    leaves out idle periods after the last sample (an upper bound of the mean)."""
    if dev_stamps:
        return max(len(dev_stamps), len(stamps))
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False) if b > a]
    if not gaps:
        return len(stamps)
    gap = min(gaps)
    start = cursor if cursor else stamps[0] - gap
    return max(len(stamps), int(round((stamps[-1] - start) / gap)))


def _samples(nvml: Any, h: Any, kind: int, cursor: int) -> list[Any] | None:
    try:
        _, samples = nvml.nvmlDeviceGetSamples(h, kind, cursor)
    except (nvml.NVMLError_NotFound, nvml.NVMLError_NotSupported):
        return None
    return list(samples)


def _finished(nvml: Any, h: Any, running: set[int], seen: set[int]) -> tuple[tuple[Finished, ...], tuple[int, ...]]:
    """Accounting records of exited processes not read before. Stats are asked only for pids neither
    running nor already read (a pid reused inside the accounting buffer is missed: rare, pid_max)."""
    pids = _optional(nvml, nvml.nvmlDeviceGetAccountingPids, h)
    if pids is None:
        return (), ()
    out = []
    for pid in pids:
        if pid in running or pid in seen:
            continue
        st = _optional(nvml, nvml.nvmlDeviceGetAccountingStats, h, pid)
        if st is None or st.isRunning:
            continue
        na = nvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
        max_mem = None if st.maxMemoryUsage in (None, na) else int(st.maxMemoryUsage) / MIB
        util = None if int(st.gpuUtilization) == nvml.NVML_VALUE_NOT_AVAILABLE_uint.value else float(st.gpuUtilization)
        out.append(Finished(int(pid), int(st.startTime), (int(st.startTime) / 1e6) + int(st.time) / 1000.0,
                            max_mem, util))
    return tuple(out), tuple(int(p) for p in pids)


def _gpm_value(nvml: Any, h: Any, gi: int, s1: Any, s2: Any) -> float | None:
    if _optional(nvml, nvml.nvmlGpmMigSampleGet, h, gi, s2) is None:
        return None
    mg = nvml.c_nvmlGpmMetricsGet_t()
    mg.version, mg.numMetrics, mg.sample1, mg.sample2 = nvml.NVML_GPM_METRICS_GET_VERSION, 1, s1, s2
    mg.metrics[0].metricId = nvml.NVML_GPM_METRIC_SM_UTIL
    if _optional(nvml, nvml.nvmlGpmMetricsGet, mg) is None or mg.metrics[0].nvmlReturn != nvml.NVML_SUCCESS:
        return None
    return float(mg.metrics[0].value)


def _gpm(nvml: Any, handles: list[Any], gpus: list[GpuReading], interval: float,
         sleep: Callable[[float], None]) -> list[GpuReading]:
    """SM activity per GPU instance from two GPM samples `interval` apart (all GPUs sampled together)."""
    wanted = []
    for h, g in zip(handles, gpus, strict=True):
        if not g.mig or not g.migs or g.architecture not in ("hopper", "blackwell"):
            continue
        support = _optional(nvml, nvml.nvmlGpmQueryDeviceSupport, h)
        if support is not None and support.isSupportedDevice:
            wanted.append((h, g))
    if not wanted:
        return gpus
    pairs: dict[tuple[str, int], tuple[Any, Any]] = {}
    failed: set[tuple[str, int]] = set()
    for h, g in wanted:
        for gi in sorted({m.gi_id for m in g.migs}):
            s1, s2 = nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()
            pairs[(g.uuid, gi)] = (s1, s2)
            if _optional(nvml, nvml.nvmlGpmMigSampleGet, h, gi, s1) is None:
                failed.add((g.uuid, gi))
    sleep(interval)
    values = {key: v for (h, g) in wanted for gi in sorted({m.gi_id for m in g.migs})
              if (key := (g.uuid, gi)) not in failed and (v := _gpm_value(nvml, h, gi, *pairs[key])) is not None}
    for s1, s2 in pairs.values():
        for s in (s1, s2):
            _optional(nvml, nvml.nvmlGpmSampleFree, s)
    out = []
    for g in gpus:
        migs = tuple(MigDevice(m.gi_id, m.ci_id, m.gi_profile_id, m.start, m.uuid, values.get((g.uuid, m.gi_id)))
                     for m in g.migs)
        out.append(dataclasses.replace(g, migs=migs))
    return out
