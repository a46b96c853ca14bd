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
from collections.abc import Mapping, Sequence
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
    out: list[Step] = []
    gone = sorted(have - want, key=lambda i: (-i.start, i.profile))
    if gone:
        missing = [str(i) for i in gone if i not in gi_ids]
        if missing:
            raise StepError(f"GPU {gpu}: no live GPU instance id for {', '.join(missing)}")
        ids = [gi_ids[i] for i in gone]
        out.append(Step(StepKind.DESTROY_CI, tuple(smi.destroy_compute_instances(gpu, ids)), gpu, tuple(gone)))
        out.append(Step(StepKind.DESTROY_GI, tuple(smi.destroy_gpu_instances(gpu, ids)), gpu, tuple(gone)))
    if (current is None) != (target is None):
        enable = target is not None
        out.append(Step(StepKind.MODE, tuple(smi.set_mig_mode(gpu, enable)), gpu))
        if model.architecture in RESET_ON_MODE_CHANGE:
            out.append(Step(StepKind.RESET, tuple(smi.reset_gpu(gpu)), gpu))
    new = sorted(want - have)
    if new:
        out.append(Step(StepKind.CREATE, tuple(smi.create_instances_for(model, gpu, new, default_ci=True)), gpu,
                        tuple(new)))
    return out


READ_ONLY_FLAGS = ("-L", "-lgi", "-lci", "-lgip", "-lgipp")


def is_read_only(argv: Sequence[str]) -> bool:
    """True for the nvidia-smi queries migplan runs (what a dry run may still run on the host)."""
    if not argv or argv[0].rsplit("/", 1)[-1] != smi.NVIDIA_SMI:
        return False
    rest = list(argv[1:])
    if any(a.startswith(("--query-gpu=", "--query-compute-apps=")) for a in rest):
        return True
    return bool(rest) and rest[-1] in READ_ONLY_FLAGS  # the builders put the listing flag last
