"""`Sample`: one measurement of one workload, whatever recorded it (NVML sampler, CSV, Prometheus).

Memory is what the workload's processes held on the GPU (MiB, fractional allowed: sources convert from
bytes). Compute is the utilisation of the place it ran on (a MIG instance or a whole GPU), 0..100, or
None where the source could not measure it (NVML gives no utilisation in MIG mode on Ampere): never an
invented number. `place` says where it ran so that compute can be converted to a share of the whole GPU.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Place:
    """Where a workload ran: host, GPU index and model, the MIG profile/start (None: whole GPU), and for a VM its
    vGPU type and UUID."""

    host: str | None = None
    gpu: int | None = None
    gpu_model: str | None = None
    mig_profile: str | None = None  # e.g. "3g.20gb"; None: MIG disabled (the whole GPU) or unknown
    mig_start: int | None = None
    # a virtual machine's vGPU (`collect --local --vgpu`): its type (`A100X-3-20C`; a MIG-backed type's profile is
    # also `mig_profile`) and the VM's UUID; None for a process
    vgpu_type: str | None = None
    vm_uuid: str | None = None


@dataclass(frozen=True, slots=True)
class Sample:
    timestamp: float  # unix seconds, UTC
    workload: str
    memory_mib: float | None  # None: not measured in this sample
    util_pct: float | None = None  # 0..100 of `place`; None: not measured
    place: Place = Place()
    source: str = ""  # "nvml", "nvidia-smi", "csv:FILE:LINE", "prometheus" (for messages and few-sample notes)
