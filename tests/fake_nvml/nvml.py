"""The fake: a host's GPUs, MIG devices and processes on a virtual clock, answered through pynvml's API.

Semantics kept from the real library (nvml-apis.md §2, §3, §5 and nvml.h as quoted there):

* `nvmlInit` without a driver raises `NVMLError_LibraryNotFound` ("NVML Shared Library Not Found");
  any call before a successful init raises `NVMLError_Uninitialized`.
* MIG mode on: device utilisation (`GetUtilizationRates`, `GetSamples` of GPU/memory utilisation) and
  `GetProcessUtilization` raise NotSupported ("On MIG-enabled GPUs, querying ... is not currently
  supported"); accounting mode reads DISABLED ("would be set to DISABLED and changing it is not
  supported"); `GetComputeRunningProcesses` on the parent handle is the aggregate with real
  gpuInstanceId/computeInstanceId, or NoPermission when not privileged; on a MIG device handle it lists
  that instance's processes. MIG mode off: the ids are 0xFFFFFFFF. A GPU without MIG: GetMigMode raises
  NotSupported.
* Utilisation samples carry CPU timestamps in microseconds; `lastSeenTimeStamp` returns only later ones;
  none later raises NotFound. Only processes "that had some non-zero utilization during the last sample
  period" get a process sample (nvml.h, nvmlDeviceGetProcessUtilization).
  The sample period and how far back the driver keeps samples are not documented exactly ("between 1
  second and 1/6 second depending on the product"): here one sample per `sample_period_s` (1 s) and
  `buffer_s` (120 s) kept - unverified.
* Accounting (MIG off, mode on): `GetAccountingPids` lists running and finished processes; stats give the
  lifetime mean utilisation, the peak memory in bytes, the time in ms (0 while running) and the start
  time in µs; unknown pid: NotFound; mode off: NotSupported.
* GPM (Hopper and later, `gpm=True`): `nvmlGpmMigSampleGet(device, gi, sample)` twice and
  `nvmlGpmMetricsGet` give SM_UTIL of the GPU instance between the two samples; older GPUs report
  isSupportedDevice 0.

Each call may be made to cost real CPU time (`latency={"nvmlDeviceGetCount": 2e-5, ...}` seconds,
busy-waited, so a benchmark's CPU time counts it) and is counted in `calls`.
"""

from __future__ import annotations

import string
import sys
import time
from collections import Counter
from collections.abc import Callable
from ctypes import (
    POINTER,
    Structure,
    Union,
    c_char,
    c_double,
    c_int,
    c_longlong,
    c_uint,
    c_ulong,
    c_ulonglong,
    c_ushort,
    c_void_p,
    pointer,
)
from dataclasses import dataclass, field
from typing import Any

# --- constants (values as in pynvml.py / nvml.h) ---------------------------------------------------

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
NVML_TOTAL_POWER_SAMPLES = 0
NVML_GPU_UTILIZATION_SAMPLES = 1
NVML_MEMORY_UTILIZATION_SAMPLES = 2
NVML_VALUE_TYPE_DOUBLE = 0
NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_DEVICE_ARCH_VOLTA = 5
NVML_DEVICE_ARCH_TURING = 6
NVML_DEVICE_ARCH_AMPERE = 7
NVML_DEVICE_ARCH_ADA = 8
NVML_DEVICE_ARCH_HOPPER = 9
NVML_DEVICE_ARCH_BLACKWELL = 10
NVML_DEVICE_ARCH_UNKNOWN = 0xFFFFFFFF
NVML_GPM_METRIC_GRAPHICS_UTIL = 1
NVML_GPM_METRIC_SM_UTIL = 2
NVML_GPM_METRIC_SM_OCCUPANCY = 3
NVML_GPM_METRIC_MAX = 477
NVML_GPM_METRICS_GET_VERSION = 1
NVML_GPM_SUPPORT_VERSION = 1
NVML_VALUE_NOT_AVAILABLE_ulonglong = c_ulonglong(-1)
NVML_VALUE_NOT_AVAILABLE_uint = c_uint(-1)
_NO_ID = 0xFFFFFFFF


# --- errors, made like pynvml's _extractNVMLErrorsAsClasses ---------------------------------------

class NVMLError(Exception):
    _valClassMapping: dict[int, type[NVMLError]] = {}
    _errcode_to_string = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized", NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported", NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized", NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size", NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout", NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found", NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_RESET_REQUIRED: "GPU requires restart", NVML_ERROR_MEMORY: "Insufficient Memory",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }
    value: int

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        # pynvml asks the library (nvmlErrorString) for codes outside its table; without it, this text
        return self._errcode_to_string.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return self.value == getattr(other, "value", None)

    __hash__ = Exception.__hash__


def _make_error_classes() -> None:
    module = sys.modules[__name__]
    for name in [n for n in dir(module) if n.startswith("NVML_ERROR_")]:
        class_name = "NVMLError_" + string.capwords(name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        val = getattr(module, name)

        def gen_new(v: int) -> Callable[..., NVMLError]:
            def new(typ: type[NVMLError], *args: Any) -> NVMLError:
                return NVMLError.__new__(typ, v)
            return new
        cls = type(class_name, (NVMLError,), {"__new__": gen_new(val)})
        cls.__module__ = __name__
        setattr(module, class_name, cls)
        NVMLError._valClassMapping[val] = cls


_make_error_classes()


def nvmlExceptionClass(code: int) -> type[NVMLError]:  # pynvml's name
    if code not in NVMLError._valClassMapping:
        raise ValueError(f"nvmlErrorCode {code} is not valid")
    return NVMLError._valClassMapping[code]


# --- structs (same fields as pynvml's) -------------------------------------------------------------

class c_nvmlProcessUtilizationSample_t(Structure):
    _fields_ = [("pid", c_uint), ("timeStamp", c_ulonglong), ("smUtil", c_uint), ("memUtil", c_uint),
                ("encUtil", c_uint), ("decUtil", c_uint)]


class c_nvmlValue_t(Union):
    _fields_ = [("dVal", c_double), ("uiVal", c_uint), ("ulVal", c_ulong), ("ullVal", c_ulonglong),
                ("sllVal", c_longlong), ("siVal", c_int), ("usVal", c_ushort)]


class c_nvmlSample_t(Structure):
    _fields_ = [("timeStamp", c_ulonglong), ("sampleValue", c_nvmlValue_t)]


class c_nvmlAccountingStats_t(Structure):
    _fields_ = [("gpuUtilization", c_uint), ("memoryUtilization", c_uint), ("maxMemoryUsage", c_ulonglong),
                ("time", c_ulonglong), ("startTime", c_ulonglong), ("isRunning", c_uint), ("reserved", c_uint * 5)]


class c_nvmlMemory_t(Structure):
    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class c_nvmlUtilization_t(Structure):
    _fields_ = [("gpu", c_uint), ("memory", c_uint)]


class nvmlPciInfo_t(Structure):  # the fields migplan may read, same names and types
    _fields_ = [("busId", c_char * 32), ("domain", c_uint), ("bus", c_uint), ("device", c_uint),
                ("pciDeviceId", c_uint), ("pciSubSystemId", c_uint)]


class c_nvmlGpuInstancePlacement_t(Structure):
    _fields_ = [("start", c_uint), ("size", c_uint)]


class c_nvmlGpuInstanceInfo_t(Structure):
    _fields_ = [("device", c_void_p), ("id", c_uint), ("profileId", c_uint),
                ("placement", c_nvmlGpuInstancePlacement_t)]


class struct_c_nvmlGpmSample_t(Structure):  # opaque in pynvml; an id here
    _fields_ = [("fake_id", c_uint)]


c_nvmlGpmSample_t = POINTER(struct_c_nvmlGpmSample_t)


class c_metricInfo_t(Structure):
    _fields_ = [("shortName", c_void_p), ("longName", c_void_p), ("unit", c_void_p)]


class c_nvmlGpmMetric_t(Structure):
    _fields_ = [("metricId", c_uint), ("nvmlReturn", c_uint), ("value", c_double), ("metricInfo", c_metricInfo_t)]


class c_nvmlGpmMetricsGet_t(Structure):
    _fields_ = [("version", c_uint), ("numMetrics", c_uint), ("sample1", c_nvmlGpmSample_t),
                ("sample2", c_nvmlGpmSample_t), ("metrics", c_nvmlGpmMetric_t * NVML_GPM_METRIC_MAX)]


class c_nvmlGpmSupport_t(Structure):
    _fields_ = [("version", c_uint), ("isSupportedDevice", c_uint)]


class nvmlFriendlyObject:  # what pynvml returns for process lists
    def __init__(self, dictionary: dict[str, Any]) -> None:
        for k, v in dictionary.items():
            setattr(self, k, v)


# --- the host being faked ------------------------------------------------------------------------------

Util = float | Callable[[float], float]


@dataclass
class FakeProcess:
    """A compute process; `util` is SM % (of the GPU, or of its MIG instance) as a number or f(t)."""

    pid: int
    used_mib: float = 1024.0
    util: Util = 0.0
    mig: int | None = None  # index into FakeGpu.migs; None: the whole GPU
    start: float = 0.0  # unix seconds
    end: float | None = None  # exited at
    peak_mib: float | None = None  # for accounting; default: used_mib

    def util_at(self, t: float) -> float:
        return float(self.util(t) if callable(self.util) else self.util)

    def alive(self, t: float) -> bool:
        return self.start <= t and (self.end is None or t < self.end)


@dataclass
class FakeMig:
    """A MIG device (GPU instance + compute instance) at a placement."""

    gi_id: int
    profile_id: int  # the GI profile id (nvidia-smi's)
    profile_name: str  # e.g. "3g.20gb"
    start: int
    size: int
    ci_id: int = 0
    memory_mib: int = 20000


@dataclass
class FakeGpu:
    name: str = "NVIDIA A100-SXM4-40GB"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    pci_device_id: int = 0x20B010DE
    memory_mib: int = 40960
    arch: int = NVML_DEVICE_ARCH_AMPERE
    mig_capable: bool = True
    mig: bool = False
    migs: list[FakeMig] = field(default_factory=list)
    accounting: bool = False
    gpm: bool = False  # GPM metrics (only honoured on Hopper and later)
    processes: list[FakeProcess] = field(default_factory=list)


class _Dev:
    def __init__(self, gpu: int, mig: int | None = None) -> None:
        self.gpu, self.mig = gpu, mig


class _Gi:
    def __init__(self, gpu: int, gi_id: int) -> None:
        self.gpu, self.gi_id = gpu, gi_id


def _err(code: int) -> NVMLError:
    return NVMLError(code)


class FakeNvml:
    """Looks like the `pynvml` module: pass an instance where migplan takes the module."""

    sample_period_s = 1.0
    buffer_s = 120.0

    def __init__(self, gpus: list[FakeGpu], *, now: float = 1_764_547_200.0, library_missing: bool = False,
                 privileged: bool = True, driver: str = "535.129.03",
                 latency: dict[str, float] | None = None, default_latency: float = 0.0) -> None:
        module = sys.modules[__name__]
        for name in dir(module):  # constants, error classes and structs, as pynvml exposes them
            if name.startswith(("NVML", "c_nvml", "nvmlPci", "struct_c_nvml", "nvmlFriendly")):
                setattr(self, name, getattr(module, name))
        self.nvmlExceptionClass = nvmlExceptionClass
        self.gpus = gpus
        self.now = now
        self.library_missing = library_missing
        self.privileged = privileged
        self.driver = driver
        self.latency = dict(latency or {})
        self.default_latency = default_latency
        self.calls: Counter[str] = Counter()
        self.initialised = 0
        self._gpm: dict[int, tuple[int, int | None, float]] = {}

    # -- test controls -------------------------------------------------------------------------------
    def advance(self, seconds: float) -> None:
        self.now += seconds

    def _enter(self, name: str, *, init: bool = True) -> None:
        self.calls[name] += 1
        cost = self.latency.get(name, self.default_latency)
        if cost > 0:
            end = time.perf_counter() + cost
            while time.perf_counter() < end:  # busy: real NVML calls are ioctls that cost CPU time
                pass
        if init and not self.initialised:
            raise _err(NVML_ERROR_UNINITIALIZED)

    def _gpu(self, h: Any) -> FakeGpu:
        if not isinstance(h, _Dev) or not 0 <= h.gpu < len(self.gpus):
            raise _err(NVML_ERROR_INVALID_ARGUMENT)
        return self.gpus[h.gpu]

    def _running(self, g: FakeGpu) -> list[FakeProcess]:
        return [p for p in g.processes if p.alive(self.now)]

    def _sample_times(self, last_seen_us: int) -> list[int]:
        period = self.sample_period_s
        first = max(last_seen_us / 1e6, self.now - self.buffer_s)
        k = int(first // period) + 1
        out = []
        while k * period <= self.now:
            out.append(int(round(k * period * 1e6)))
            k += 1
        return [t for t in out if t > last_seen_us]

    # -- init ------------------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self._enter("nvmlInit", init=False)
        if self.library_missing:
            raise _err(NVML_ERROR_LIBRARY_NOT_FOUND)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver

    # -- devices ---------------------------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Dev:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise _err(NVML_ERROR_INVALID_ARGUMENT)
        return _Dev(index)

    def nvmlDeviceGetName(self, h: _Dev) -> str:
        self._enter("nvmlDeviceGetName")
        g = self._gpu(h)
        # a MIG device's name: the GPU's name and "MIG <profile>" (as nvidia-smi -L shows it) - unverified
        return g.name if h.mig is None else f"{g.name} MIG {g.migs[h.mig].profile_name}"

    def nvmlDeviceGetUUID(self, h: _Dev) -> str:
        self._enter("nvmlDeviceGetUUID")
        g = self._gpu(h)
        return g.uuid if h.mig is None else f"MIG-{g.uuid[4:12]}-0000-0000-0000-{h.mig:012d}"

    def nvmlDeviceGetArchitecture(self, h: _Dev) -> int:
        self._enter("nvmlDeviceGetArchitecture")
        return self._gpu(h).arch

    def nvmlDeviceGetPciInfo(self, h: _Dev) -> nvmlPciInfo_t:
        self._enter("nvmlDeviceGetPciInfo")
        g = self._gpu(h)
        return nvmlPciInfo_t(busId=f"00000000:{0x17 + 0x10 * h.gpu:02X}:00.0".encode(), pciDeviceId=g.pci_device_id)

    def nvmlDeviceGetMemoryInfo(self, h: _Dev) -> c_nvmlMemory_t:
        self._enter("nvmlDeviceGetMemoryInfo")
        g = self._gpu(h)
        procs = [p for p in self._running(g) if h.mig is None or p.mig == h.mig]
        total = g.memory_mib if h.mig is None else g.migs[h.mig].memory_mib
        used = int(sum(p.used_mib for p in procs) * 2**20)
        return c_nvmlMemory_t(total=total * 2**20, free=max(0, total * 2**20 - used), used=used)

    def nvmlDeviceGetMigMode(self, h: _Dev) -> list[int]:
        self._enter("nvmlDeviceGetMigMode")
        g = self._gpu(h)
        if not g.mig_capable:
            raise _err(NVML_ERROR_NOT_SUPPORTED)
        return [int(g.mig), int(g.mig)]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: _Dev) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount")
        g = self._gpu(h)
        return 7 if g.mig else 0  # "Returns zero if MIG is not supported or enabled"

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: _Dev, index: int) -> _Dev:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex")
        g = self._gpu(h)
        if not g.mig:
            raise _err(NVML_ERROR_NOT_SUPPORTED)
        if not 0 <= index < len(g.migs):
            raise _err(NVML_ERROR_NOT_FOUND)
        return _Dev(h.gpu, index)

    def nvmlDeviceIsMigDeviceHandle(self, h: _Dev) -> c_uint:  # pynvml returns the c_uint
        self._enter("nvmlDeviceIsMigDeviceHandle")
        return c_uint(int(h.mig is not None))

    def nvmlDeviceGetGpuInstanceId(self, h: _Dev) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId")
        g = self._gpu(h)
        if h.mig is None:
            raise _err(NVML_ERROR_NOT_SUPPORTED)
        return g.migs[h.mig].gi_id

    def nvmlDeviceGetComputeInstanceId(self, h: _Dev) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId")
        g = self._gpu(h)
        if h.mig is None:
            raise _err(NVML_ERROR_NOT_SUPPORTED)
        return g.migs[h.mig].ci_id

    def nvmlDeviceGetGpuInstanceById(self, h: _Dev, gi_id: int) -> _Gi:
        self._enter("nvmlDeviceGetGpuInstanceById")
        g = self._gpu(h)
        if not g.mig:
            raise _err(NVML_ERROR_NOT_SUPPORTED)
        if not any(m.gi_id == gi_id for m in g.migs):
            raise _err(NVML_ERROR_NOT_FOUND)
        return _Gi(h.gpu, gi_id)

    def nvmlGpuInstanceGetInfo(self, gi: _Gi) -> c_nvmlGpuInstanceInfo_t:
        self._enter("nvmlGpuInstanceGetInfo")
        m = next(m for m in self.gpus[gi.gpu].migs if m.gi_id == gi.gi_id)
        return c_nvmlGpuInstanceInfo_t(id=m.gi_id, profileId=m.profile_id,
                                       placement=c_nvmlGpuInstancePlacement_t(m.start, m.size))

    # -- processes and utilisation ------------------------------------------------------------------------
    def nvmlDeviceGetComputeRunningProcesses(self, h: _Dev) -> list[nvmlFriendlyObject]:
        self._enter("nvmlDeviceGetComputeRunningProcesses")
        g = self._gpu(h)
        if g.mig and h.mig is None and not self.privileged:
            raise _err(NVML_ERROR_NO_PERMISSION)  # aggregate "only if the caller has appropriate privileges"
        out = []
        for p in self._running(g):
            if h.mig is not None and p.mig != h.mig:
                continue
            m = g.migs[p.mig] if (g.mig and p.mig is not None) else None
            out.append(nvmlFriendlyObject({
                "pid": p.pid, "usedGpuMemory": int(p.used_mib * 2**20),
                "gpuInstanceId": m.gi_id if m else _NO_ID, "computeInstanceId": m.ci_id if m else _NO_ID}))
        return out

    def nvmlDeviceGetProcessUtilization(self, h: _Dev, last_seen_us: int) -> list[c_nvmlProcessUtilizationSample_t]:
        self._enter("nvmlDeviceGetProcessUtilization")
        g = self._gpu(h)
        if g.mig or h.mig is not None:
            raise _err(NVML_ERROR_NOT_SUPPORTED)
        out = []
        for t_us in self._sample_times(int(last_seen_us)):
            t = t_us / 1e6
            for p in g.processes:
                u = p.util_at(t) if p.alive(t) else 0.0
                if u > 0:
                    out.append(c_nvmlProcessUtilizationSample_t(pid=p.pid, timeStamp=t_us, smUtil=int(round(u))))
        if not out:
            raise _err(NVML_ERROR_NOT_FOUND)  # "no valid sample entries are found since the lastSeenTimeStamp"
        return out

    def nvmlDeviceGetSamples(self, h: _Dev, sampling_type: int, last_seen_us: int) -> tuple[int, list[c_nvmlSample_t]]:
        self._enter("nvmlDeviceGetSamples")
        g = self._gpu(h)
        if sampling_type not in (NVML_GPU_UTILIZATION_SAMPLES, NVML_MEMORY_UTILIZATION_SAMPLES):
            raise _err(NVML_ERROR_NOT_SUPPORTED)
        if g.mig or h.mig is not None:
            raise _err(NVML_ERROR_NOT_SUPPORTED)
        out = []
        for t_us in self._sample_times(int(last_seen_us)):
            t = t_us / 1e6
            v = min(100, int(round(sum(p.util_at(t) for p in g.processes if p.alive(t)))))
            s = c_nvmlSample_t(timeStamp=t_us)
            s.sampleValue.uiVal = v
            out.append(s)
        if not out:
            raise _err(NVML_ERROR_NOT_FOUND)
        return NVML_VALUE_TYPE_UNSIGNED_INT, out

    def nvmlDeviceGetUtilizationRates(self, h: _Dev) -> c_nvmlUtilization_t:
        self._enter("nvmlDeviceGetUtilizationRates")
        g = self._gpu(h)
        if g.mig or h.mig is not None:
            raise _err(NVML_ERROR_NOT_SUPPORTED)
        return c_nvmlUtilization_t(gpu=min(100, int(sum(p.util_at(self.now) for p in self._running(g)))), memory=0)

    # -- accounting ----------------------------------------------------------------------------------------
    def nvmlDeviceGetAccountingMode(self, h: _Dev) -> int:
        self._enter("nvmlDeviceGetAccountingMode")
        g = self._gpu(h)
        return NVML_FEATURE_ENABLED if (g.accounting and not g.mig) else NVML_FEATURE_DISABLED

    def nvmlDeviceGetAccountingBufferSize(self, h: _Dev) -> int:
        self._enter("nvmlDeviceGetAccountingBufferSize")
        g = self._gpu(h)
        if not g.accounting or g.mig:
            raise _err(NVML_ERROR_NOT_SUPPORTED)
        return 4000

    def nvmlDeviceGetAccountingPids(self, h: _Dev) -> list[int]:
        self.nvmlDeviceGetAccountingBufferSize(h)  # as pynvml does: sized by the buffer (NotSupported when off)
        self._enter("nvmlDeviceGetAccountingPids")
        g = self._gpu(h)
        return [p.pid for p in g.processes if p.start <= self.now][-4000:]

    def nvmlDeviceGetAccountingStats(self, h: _Dev, pid: int) -> c_nvmlAccountingStats_t:
        self._enter("nvmlDeviceGetAccountingStats")
        g = self._gpu(h)
        if not g.accounting or g.mig:
            raise _err(NVML_ERROR_NOT_SUPPORTED)
        procs = [p for p in g.processes if p.pid == pid and p.start <= self.now]
        if not procs:
            raise _err(NVML_ERROR_NOT_FOUND)
        p = procs[-1]
        stop = self.now if p.end is None or p.end > self.now else p.end
        steps = max(1, int((stop - p.start) // self.sample_period_s))
        mean = sum(p.util_at(p.start + i * self.sample_period_s) for i in range(steps)) / steps
        running = p.alive(self.now)
        return c_nvmlAccountingStats_t(
            gpuUtilization=int(round(mean)), memoryUtilization=0,
            maxMemoryUsage=int((p.peak_mib or p.used_mib) * 2**20),
            time=0 if running else int((stop - p.start) * 1000), startTime=int(p.start * 1e6), isRunning=int(running))

    # -- GPM (Hopper+) ---------------------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, h: _Dev) -> c_nvmlGpmSupport_t:
        self._enter("nvmlGpmQueryDeviceSupport")
        g = self._gpu(h)
        return c_nvmlGpmSupport_t(version=NVML_GPM_SUPPORT_VERSION,
                                  isSupportedDevice=int(g.gpm and g.arch >= NVML_DEVICE_ARCH_HOPPER))

    def nvmlGpmSampleAlloc(self) -> Any:
        self._enter("nvmlGpmSampleAlloc")
        sid = len(self._gpm) + 1
        self._gpm[sid] = (-1, None, 0.0)
        return pointer(struct_c_nvmlGpmSample_t(sid))

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self._enter("nvmlGpmSampleFree")
        self._gpm.pop(sample.contents.fake_id, None)

    def nvmlGpmMigSampleGet(self, h: _Dev, gi_id: int, sample: Any) -> Any:
        self._enter("nvmlGpmMigSampleGet")
        g = self._gpu(h)
        if not (g.gpm and g.arch >= NVML_DEVICE_ARCH_HOPPER):
            raise _err(NVML_ERROR_NOT_SUPPORTED)
        if not any(m.gi_id == gi_id for m in g.migs):
            raise _err(NVML_ERROR_INVALID_ARGUMENT)
        self._gpm[sample.contents.fake_id] = (h.gpu, gi_id, self.now)
        return sample

    def nvmlGpmMetricsGet(self, mg: c_nvmlGpmMetricsGet_t) -> c_nvmlGpmMetricsGet_t:
        self._enter("nvmlGpmMetricsGet")
        g1, gi1, t1 = self._gpm[mg.sample1.contents.fake_id]
        g2, gi2, t2 = self._gpm[mg.sample2.contents.fake_id]
        if (g1, gi1) != (g2, gi2) or t2 <= t1 or mg.version != NVML_GPM_METRICS_GET_VERSION:
            raise _err(NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[g1]
        mig = next(i for i, m in enumerate(gpu.migs) if m.gi_id == gi1)
        steps = 10
        busy = [min(100.0, sum(p.util_at(t1 + (t2 - t1) * k / steps) for p in gpu.processes
                               if p.mig == mig and p.alive(t1 + (t2 - t1) * k / steps))) for k in range(1, steps + 1)]
        for i in range(mg.numMetrics):
            metric = mg.metrics[i]
            if metric.metricId == NVML_GPM_METRIC_SM_UTIL:
                metric.value, metric.nvmlReturn = sum(busy) / steps, NVML_SUCCESS
            else:
                metric.nvmlReturn = NVML_ERROR_NOT_SUPPORTED
        return mg
