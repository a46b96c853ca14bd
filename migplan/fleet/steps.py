"""From a GPU's planned change to the exact nvidia-smi commands that make it, in order (pure).

Only what the plan changes is touched: the instances it removes are destroyed by their live GPU
instance ids (their compute instances first), the instances it adds are created at their explicit
placements with their default compute instance in one command (`-cgi ID:START,... -C`, docs/nvidia-smi.md
§5), and the MIG mode changes only on a GPU whose plan changes it, with a reset of that one GPU where
the architecture needs one (Ampere, docs/nvidia-smi.md §1). No creation-order retries: placements are
explicit, so an order that fails is an error, not something to permute.

The same builder undoes a change: `steps(target -> checkpoint)` is the rollback.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from migplan import smi
from migplan.catalog.geometry import GpuModel
from migplan.fleet.diff import RESET_ON_MODE_CHANGE
from migplan.layout import Instance, Layout


class StepKind(str, enum.Enum):
    DESTROY_CI = "destroy-ci"
    DESTROY_GI = "destroy-gi"
    MODE = "set-mig-mode"
    RESET = "reset-gpu"
    CREATE = "create-gi"


@dataclass(frozen=True)
class Step:
    """One nvidia-smi command of an apply, with what it is for."""

    kind: StepKind
    argv: tuple[str, ...]
    gpu: int
    instances: tuple[Instance, ...] = ()  # the instances it destroys or creates

    def __str__(self) -> str:
        return " ".join(self.argv)


class StepError(Exception):
    """The change cannot be expressed as commands (an instance to destroy without a live GPU instance id)."""


def steps(gpu: int, model: GpuModel, current: Layout | None, target: Layout | None,
          gi_ids: Mapping[Instance, int]) -> list[Step]:
    """Commands that turn `current` into `target` on GPU `gpu`; `gi_ids` are the live ids of current's
    instances (from `-lgi`). Equal layouts give no commands."""
    if current == target:
        return []
    have = set(current.instances) if current is not None else set()
    want = set(target.instances) if target is not None else set()
    out = destroy_steps(gpu, have - want, gi_ids)
    if (current is None) != (target is None):
        enable = target is not None
        out.append(Step(StepKind.MODE, tuple(smi.set_mig_mode(gpu, enable)), gpu))
        if model.architecture in RESET_ON_MODE_CHANGE:
            out.append(Step(StepKind.RESET, tuple(smi.reset_gpu(gpu)), gpu))
    return out + create_steps(gpu, model, want - have)


def destroy_steps(gpu: int, gone: Iterable[Instance], gi_ids: Mapping[Instance, int]) -> list[Step]:
    """`-dci` then `-dgi` of these GPU instances, by their live ids (none: no commands)."""
    items = sorted(gone, key=lambda i: (-i.start, i.profile))
    if not items:
        return []
    missing = [str(i) for i in items if i not in gi_ids]
    if missing:
        raise StepError(f"GPU {gpu}: no live GPU instance id for {', '.join(missing)}")
    ids = [gi_ids[i] for i in items]
    return [Step(StepKind.DESTROY_CI, tuple(smi.destroy_compute_instances(gpu, ids)), gpu, tuple(items)),
            Step(StepKind.DESTROY_GI, tuple(smi.destroy_gpu_instances(gpu, ids)), gpu, tuple(items))]


def create_steps(gpu: int, model: GpuModel, new: Iterable[Instance]) -> list[Step]:
    """One `-cgi ID:START,... -C` for these instances (none: no commands)."""
    items = sorted(new)
    if not items:
        return []
    return [Step(StepKind.CREATE, tuple(smi.create_instances_for(model, gpu, items, default_ci=True)), gpu,
                 tuple(items))]


def cancel_pending(gpu: int, mig: bool) -> Step:
    """`-mig` back to the current mode: clears a pending mode change the driver could not make effective (an
    Ampere reset refused), so the GPU is as it was (docs/nvidia-smi.md §1: pending differs from current until a
    reset)."""
    return Step(StepKind.MODE, tuple(smi.set_mig_mode(gpu, mig)), gpu)


READ_ONLY_FLAGS = ("-L", "-lgi", "-lci", "-lgip", "-lgipp", "-h", "--help")


def is_read_only(argv: Sequence[str]) -> bool:
    """True for the nvidia-smi queries migplan runs (what a dry run may still run on the host)."""
    if not argv or argv[0].rsplit("/", 1)[-1] != smi.NVIDIA_SMI:
        return False
    rest = list(argv[1:])
    if any(a.startswith(("--query-gpu=", "--query-compute-apps=")) for a in rest):
        return True
    if not rest or (len(rest) == 2 and rest[0] == "-i" and rest[1].isascii() and rest[1].isdigit()):
        return True  # plain `nvidia-smi [-i N]`: the default table (memory of each MIG device, §12)
    return bool(rest) and rest[-1] in READ_ONLY_FLAGS  # the builders put the listing flag last
