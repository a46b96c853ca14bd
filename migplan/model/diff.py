"""Current layout vs target layout -> the typed, ordered actions that turn one into the other (pure).

Only what changes: instances in both layouts (same profile, same start) are left alone. Order:
destroy compute then GPU instances (highest start first), change the MIG mode, create GPU instances
at their explicit placement then their default compute instance (lowest start first).

A MIG mode change on Ampere stays pending until that GPU is reset; on Hopper and later it takes
effect at once when the GPU is idle (NVIDIA MIG User Guide, "Enable MIG Mode"; docs/nvidia-smi.md).
The mode-change action says which, so `apply` resets exactly that one GPU and no other.

These actions are the one change vocabulary: a plan lists them, apply runs them (`fleet.steps.to_commands` turns a
GPU's actions into its nvidia-smi commands), a rollback is `diff(live, checkpoint)` and the repair of an
interrupted apply `diff(live, wanted)` run the same way. `Op` is also the kind of each command.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from migplan.catalog.layout import Instance, Layout

GpuKey = tuple[str, int]


class Op(str, enum.Enum):
    """What an action does; the values are the plan document's words."""

    DESTROY_CI = "destroy-ci"
    DESTROY_GI = "destroy-gi"
    DISABLE_MIG = "disable-mig"
    ENABLE_MIG = "enable-mig"
    CREATE_GI = "create-gi"
    CREATE_CI = "create-ci"

    @property
    def is_mode_change(self) -> bool:
        return self in (Op.DISABLE_MIG, Op.ENABLE_MIG)


OPS = tuple(op.value for op in Op)
# Architectures on which a MIG mode change needs a GPU reset to take effect (catalog `architecture`).
RESET_ON_MODE_CHANGE = frozenset({"ampere"})


@dataclass(frozen=True)
class Action:
    """One step on one GPU. `instance` for instance actions; `reset` for a mode change that needs a GPU reset."""

    op: Op
    gpu: GpuKey = ("", 0)
    instance: Instance | None = None
    reset: bool = False

    def __post_init__(self) -> None:
        if self.op.is_mode_change == (self.instance is not None):
            raise ValueError(f"{self.op.value}: an instance action needs an instance, a mode change none")
        if self.reset and not self.op.is_mode_change:
            raise ValueError(f"{self.op.value}: only a MIG mode change can need a reset")

    def __str__(self) -> str:
        """The plan document's form: `OP` or `OP PROFILE@START` (`+reset` when a mode change needs one)."""
        if self.instance is not None:
            return f"{self.op.value} {self.instance}"
        return self.op.value + (" +reset" if self.reset else "")


def diff(current: Layout | None, target: Layout | None, *, gpu: GpuKey = ("", 0),
         architecture: str | None = None) -> list[Action]:
    """`None` is MIG disabled. Equal layouts give no actions. `architecture` decides whether a mode
    change needs a reset (None: unknown, taken as needing none; pass the GPU model's architecture)."""
    if current == target:
        return []
    have = set(current.instances) if current is not None else set()
    want = set(target.instances) if target is not None else set()
    reset = architecture in RESET_ON_MODE_CHANGE
    out: list[Action] = []
    for inst in sorted(have - want, key=lambda i: (-i.start, i.profile)):
        out += [Action(Op.DESTROY_CI, gpu, inst), Action(Op.DESTROY_GI, gpu, inst)]
    if current is None and target is not None:
        out.append(Action(Op.ENABLE_MIG, gpu, reset=reset))
    if current is not None and target is None:
        out.append(Action(Op.DISABLE_MIG, gpu, reset=reset))
    for inst in sorted(want - have):
        out += [Action(Op.CREATE_GI, gpu, inst), Action(Op.CREATE_CI, gpu, inst)]
    return out


def keep_mode(mig: bool, gpu: GpuKey = ("", 0)) -> Action:
    """The mode change that sets the MIG mode in force again (no reset): it clears a pending change the driver could
    not make effective (an Ampere reset refused), so the GPU is as it was (docs/nvidia-smi.md §1: pending differs
    from current until a reset)."""
    return Action(Op.ENABLE_MIG if mig else Op.DISABLE_MIG, gpu)
