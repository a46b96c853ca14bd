"""argv builders for every nvidia-smi command migplan runs (pure; nothing is executed here).

Builders are the only way commands are made: each token is either a constant or an integer that was
range-checked here, so nothing read from a host can end up on a command line. Syntax per
docs/nvidia-smi.md (a bare §n in the comments is a section there).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from migplan.catalog.geometry import GpuModel
from migplan.catalog.layout import Instance
from migplan.smi._base import MAX_GPU, MAX_ID
from migplan.smi.errors import SmiCommandError

NVIDIA_SMI = "nvidia-smi"

# Limits are generous sanity bounds, not hardware facts: GI ids seen are 0..14 and CI ids 0..7
# (docs/mig-geometry.md §6), profile ids up to 65 (RTX PRO, docs/mig-geometry.md §3), memory-slice starts 0..7.
MAX_PROFILE_ID = MAX_ID
MAX_START = 31
MAX_INSTANCE_ID = 127

# The --query-gpu fields migplan parses, in this order (§2). pci.device_id last: it never has a comma.
GPU_FIELDS = (
    "index", "uuid", "name", "pci.bus_id", "memory.total", "mig.mode.current", "mig.mode.pending",
    "pci.device_id",
)
# --query-compute-apps fields (§13); process_name last so a comma inside a name cannot shift columns.
APP_FIELDS = ("pid", "gpu_uuid", "used_memory", "process_name")
CSV_FORMAT = "--format=csv,noheader,nounits"


def _int(value: object, what: str, top: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        raise SmiCommandError(f"{what} must be an integer 0..{top}, got {value!r}")
    return value


def _ids(values: Iterable[int], what: str, top: int) -> str:
    items = [str(_int(v, what, top)) for v in values]
    if not items:
        raise SmiCommandError(f"at least one {what} is needed")
    return ",".join(items)


def _sel(gpu: int | None) -> list[str]:
    return [] if gpu is None else ["-i", str(_int(gpu, "GPU index", MAX_GPU))]


def _mig(gpu: int, *args: str) -> list[str]:
    return [NVIDIA_SMI, "mig", *_sel(_int(gpu, "GPU index", MAX_GPU)), *args]


def list_gpus() -> list[str]:
    """`nvidia-smi -L`: every GPU and its MIG devices with UUIDs (§11)."""
    return [NVIDIA_SMI, "-L"]


def query_gpus(gpu: int | None = None) -> list[str]:
    """`nvidia-smi [-i N] --query-gpu=<GPU_FIELDS> --format=csv,noheader,nounits` (§2)."""
    return [NVIDIA_SMI, *_sel(gpu), "--query-gpu=" + ",".join(GPU_FIELDS), CSV_FORMAT]


DRIVER_FIELDS = ("index", "driver_version")


def query_driver_versions() -> list[str]:
    """`nvidia-smi --query-gpu=index,driver_version --format=csv,noheader,nounits` (§2).

    A query of its own so the main GPU query (and every sample it is tested against) keeps its columns.
    """
    return [NVIDIA_SMI, "--query-gpu=" + ",".join(DRIVER_FIELDS), CSV_FORMAT]


def query_compute_apps(gpu: int | None = None) -> list[str]:
    """`nvidia-smi [-i N] --query-compute-apps=<APP_FIELDS> --format=csv,noheader,nounits` (§13)."""
    return [NVIDIA_SMI, *_sel(gpu), "--query-compute-apps=" + ",".join(APP_FIELDS), CSV_FORMAT]


def list_gi_profiles(gpu: int) -> list[str]:
    """`nvidia-smi mig -i N -lgip` (§3)."""
    return _mig(gpu, "-lgip")


def list_gi_placements(gpu: int) -> list[str]:
    """`nvidia-smi mig -i N -lgipp` (§4)."""
    return _mig(gpu, "-lgipp")


def list_gpu_instances(gpu: int) -> list[str]:
    """`nvidia-smi mig -i N -lgi` (§6)."""
    return _mig(gpu, "-lgi")


def list_compute_instances(gpu: int, gi: int | None = None) -> list[str]:
    """`nvidia-smi mig -i N -lci [-gi G]` (§9)."""
    extra = [] if gi is None else ["-gi", str(_int(gi, "GPU instance id", MAX_INSTANCE_ID))]
    return _mig(gpu, "-lci", *extra)


def create_gpu_instances(gpu: int, placements: Sequence[tuple[int, int]], *, default_ci: bool = False) -> list[str]:
    """`nvidia-smi mig -i N -cgi ID:START[,ID:START...] [-C]` with explicit placements (§5).

    `placements` are (profile id, memory-slice start) pairs. The `:start` syntax is from the help text;
    no real run with `:start` was found (§5) - unverified against hardware.
    """
    if not placements:
        raise SmiCommandError("at least one GPU instance is needed")
    tuples = [f"{_int(p, 'profile id', MAX_PROFILE_ID)}:{_int(s, 'placement start', MAX_START)}"
              for p, s in placements]
    return _mig(gpu, "-cgi", ",".join(tuples), *(["-C"] if default_ci else []))


def create_instances_for(model: GpuModel, gpu: int, instances: Iterable[Instance], *,
                         default_ci: bool = True) -> list[str]:
    """`-cgi` for catalog instances: each profile must exist on `model` and start where it may."""
    pairs = []
    for inst in instances:
        prof = model.profile(inst.profile)
        if inst.start not in prof.starts:
            raise SmiCommandError(f"{inst}: {prof.name} cannot start at {inst.start} on {model.id}")
        pairs.append((prof.id, inst.start))
    return create_gpu_instances(gpu, pairs, default_ci=default_ci)


def create_compute_instances(gpu: int, gi: int, profile_ids: Sequence[int] = ()) -> list[str]:
    """`nvidia-smi mig -i N -cci [IDS] -gi G`; no ids = the default CI profile (§8, dask-cuda form)."""
    ids = [_ids(profile_ids, "compute instance profile id", MAX_PROFILE_ID)] if profile_ids else []
    return _mig(gpu, "-cci", *ids, "-gi", str(_int(gi, "GPU instance id", MAX_INSTANCE_ID)))


def destroy_compute_instances(gpu: int, gi: Sequence[int] = (), ci: Sequence[int] = ()) -> list[str]:
    """`nvidia-smi mig -i N -dci [-gi G,..] [-ci C,..]`; no ids = every CI on the GPU (§10)."""
    args = ["-dci"]
    if gi:
        args += ["-gi", _ids(gi, "GPU instance id", MAX_INSTANCE_ID)]
    if ci:
        args += ["-ci", _ids(ci, "compute instance id", MAX_INSTANCE_ID)]
    return _mig(gpu, *args)


def destroy_gpu_instances(gpu: int, gi: Sequence[int] = ()) -> list[str]:
    """`nvidia-smi mig -i N -dgi [-gi G,..]`; no ids = every GI on the GPU (§10)."""
    extra = ["-gi", _ids(gi, "GPU instance id", MAX_INSTANCE_ID)] if gi else []
    return _mig(gpu, "-dgi", *extra)


def set_mig_mode(gpu: int, enabled: bool) -> list[str]:
    """`nvidia-smi -i N -mig 1|0` (§1). Requires root."""
    if not isinstance(enabled, bool):
        raise SmiCommandError(f"MIG mode must be true or false, got {enabled!r}")
    return [NVIDIA_SMI, *_sel(_int(gpu, "GPU index", MAX_GPU)), "-mig", "1" if enabled else "0"]


def reset_gpu(gpu: int) -> list[str]:
    """`nvidia-smi -r -i N` (= `--gpu-reset`, §1; mig-parted resets all GPUs with `nvidia-smi -r -i <ids>`,
    `ResetAllGPUs` in github.com/NVIDIA/mig-parted cmd/nvidia-mig-parted/util/device.go).

    Always one GPU: never reset GPUs the plan does not touch.
    """
    return [NVIDIA_SMI, "-r", *_sel(_int(gpu, "GPU index", MAX_GPU))]
