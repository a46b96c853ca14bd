"""Typed rows parsed from nvidia-smi output (frozen dataclasses, pure data).

§n = a section of docs/nvidia-smi.md ("Facts we rely on").
"""

from __future__ import annotations

from dataclasses import dataclass

from migplan.catalog.geometry import Engines


@dataclass(frozen=True)
class GpuQueryRow:
    """One line of `--query-gpu=index,uuid,name,pci.bus_id,memory.total,mig.mode.*,pci.device_id`.

    None means nvidia-smi printed a bracketed value such as `[N/A]` (a GPU without MIG, §2).
    """

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    memory_total_mib: int | None
    mig_current: bool | None
    mig_pending: bool | None
    pci_device_id: str | None

    @property
    def mig_capable(self) -> bool:
        return self.mig_current is not None

    @property
    def mig_change_pending(self) -> bool:
        return self.mig_current is not None and self.mig_pending is not None and self.mig_current != self.mig_pending


@dataclass(frozen=True)
class MigDevice:
    """A MIG device line of `nvidia-smi -L` (§11). gi/ci only in the R450/R460 UUID form."""

    gpu: int
    profile_name: str
    device: int
    uuid: str
    gi_id: int | None = None
    ci_id: int | None = None


@dataclass(frozen=True)
class GpuListing:
    """A GPU line of `nvidia-smi -L` with the MIG devices listed under it."""

    index: int
    name: str
    uuid: str
    mig_devices: tuple[MigDevice, ...] = ()


@dataclass(frozen=True)
class ProfileRow:
    """One profile of `nvidia-smi mig -lgip` (two table lines, §3)."""

    gpu: int
    profile_name: str
    profile_id: int
    free: int
    total: int
    memory_gib: str  # as printed: memorySizeMB / 1024, %.2f
    p2p: bool
    sm_count: int
    engines: Engines

    @property
    def memory_mib(self) -> int:
        """MiB nearest to `memory_gib` x 1024: -lgip rounds to 1/100 GiB, so this is within 6 MiB of the
        driver's memorySizeMB (exact for e.g. 4.75 -> 4864) and always prints back as `memory_gib`."""
        return round(float(self.memory_gib) * 1024)


@dataclass(frozen=True)
class PlacementRow:
    """One line of `nvidia-smi mig -lgipp`: `GPU  0 Profile ID  9 Placements: {0,4}:4` (§4)."""

    gpu: int
    profile_id: int
    starts: tuple[int, ...]
    size: int


@dataclass(frozen=True)
class GpuInstanceRow:
    """One row of `nvidia-smi mig -lgi` (§6)."""

    gpu: int
    profile_name: str
    profile_id: int
    gi_id: int
    start: int
    size: int


@dataclass(frozen=True)
class ComputeInstanceRow:
    """One row of `nvidia-smi mig -lci` (§9); start/size are None in the old format without Placement."""

    gpu: int
    gi_id: int
    profile_name: str
    profile_id: int
    ci_id: int
    start: int | None = None
    size: int | None = None


@dataclass(frozen=True)
class ComputeApp:
    """One line of `--query-compute-apps` (§13). No GI/CI attribution exists in this query."""

    pid: int
    gpu_uuid: str | None
    used_memory_mib: int | None
    process_name: str | None


@dataclass(frozen=True)
class CreatedGpuInstance:
    """`Successfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.20gb (ID  9)` (§5)."""

    gpu: int
    gi_id: int
    profile_name: str
    profile_id: int


@dataclass(frozen=True)
class CreatedComputeInstance:
    """`Successfully created compute instance ID  0 on GPU  0 GPU instance ID  2 using profile ...` (§8).

    ci_id is None in the older text without `ID n` (MIG User Guide).
    """

    gpu: int
    gi_id: int
    ci_id: int | None
    profile_name: str
    profile_id: int


@dataclass(frozen=True)
class Destroyed:
    """`Successfully destroyed GPU instance ID  1 from GPU  0` or `... compute instance ID ...` (§10)."""

    gpu: int
    gi_id: int
    ci_id: int | None = None  # None for a GPU instance
