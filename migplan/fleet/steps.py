"""A GPU's actions (`model.diff.Action`) as the exact nvidia-smi commands that carry them out, in order (pure).

`to_commands` is the one place in migplan that builds a MIG-changing nvidia-smi command (tests/test_architecture.py
checks it): apply runs the plan's actions through it, a rollback runs `diff(live, checkpoint)` through it, and the
repair of an interrupted apply `diff(live, wanted)`. The step kind is the action's `Op`.

The commands, in the phases of `diff` (destroy, mode, create), batched per GPU as they always were: the instances
destroyed by their live GPU instance ids in one `-dci` then one `-dgi` (an instance with no compute instance left
has a DESTROY_GI action alone: it is in the `-dgi` only); the mode change as `-mig 1|0`, followed by `-r -i N` of
that one GPU when the action says the architecture needs a reset (Ampere, docs/nvidia-smi.md §1); the instances
created at their explicit placements with their default compute instance in one command (`-cgi ID:START,... -C`,
docs/nvidia-smi.md §5: a CREATE_GI with its CREATE_CI). No creation-order retries: placements are explicit, so an
order that fails is an error, not something to permute.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from migplan import smi
from migplan.catalog.geometry import GpuModel
from migplan.catalog.layout import Instance
from migplan.model.diff import Action, Op

# The journal's "kind" of each command: the strings journals have always carried (tools read them), so a mode
# change is "set-mig-mode" whichever way it goes and the one `-cgi ... -C` of CREATE_GI + CREATE_CI is "create-gi".
_JOURNAL_KIND = {Op.DESTROY_CI: "destroy-ci", Op.DESTROY_GI: "destroy-gi", Op.ENABLE_MIG: "set-mig-mode",
                 Op.DISABLE_MIG: "set-mig-mode", Op.CREATE_GI: "create-gi"}
RESET_KIND = "reset-gpu"
# The phases of `diff`, in the order their commands run.
_PHASES = ((Op.DESTROY_CI,), (Op.DESTROY_GI,), (Op.ENABLE_MIG, Op.DISABLE_MIG), (Op.CREATE_GI,))


@dataclass(frozen=True)
class Step:
    """One nvidia-smi command of an apply: the `Op` of the actions it carries out, its argv, its GPU, the
    instances it destroys or creates, and `reset` for the GPU reset that follows a mode change (Ampere)."""

    op: Op
    argv: tuple[str, ...]
    gpu: int
    instances: tuple[Instance, ...] = ()
    reset: bool = False

    @property
    def kind(self) -> str:
        """What the journal calls this command (`_JOURNAL_KIND`)."""
        return RESET_KIND if self.reset else _JOURNAL_KIND[self.op]

    def __str__(self) -> str:
        return " ".join(self.argv)


class StepError(Exception):
    """The actions cannot be expressed as commands (an instance to destroy without a live GPU instance id, a GPU
    instance to create without its default compute instance, two mode changes)."""


def to_commands(gpu: int, model: GpuModel, actions: Sequence[Action], gi_ids: Mapping[Instance, int]) -> list[Step]:
    """The commands that carry out `actions` on GPU `gpu` of model `model`; `gi_ids` are the live GPU instance ids
    (from `-lgi`) of the instances destroyed. Within a phase, the actions' order is the commands' order (`diff`'s:
    destroyed highest start first, created lowest first). No actions: no commands."""
    by_op: dict[Op, list[Action]] = {op: [] for op in Op}
    for a in actions:
        by_op[a.op].append(a)
    out: list[Step] = []
    for phase in _PHASES:
        items = [a for op in phase for a in by_op[op]]
        if not items:
            continue
        if phase[0] is Op.DESTROY_CI or phase[0] is Op.DESTROY_GI:
            out.append(_destroy(gpu, phase[0], [a.instance for a in items if a.instance is not None], gi_ids))
        elif phase[0] is Op.CREATE_GI:
            out.append(_create(gpu, model, items, by_op[Op.CREATE_CI]))
        else:
            out += _mode(gpu, items)
    if by_op[Op.CREATE_CI] and not by_op[Op.CREATE_GI]:
        raise StepError(f"GPU {gpu}: a compute instance is only created with its GPU instance (-cgi ... -C)")
    return out


def _destroy(gpu: int, op: Op, items: list[Instance], gi_ids: Mapping[Instance, int]) -> Step:
    """One `-dci` or `-dgi` of these GPU instances, by their live ids."""
    missing = [str(i) for i in items if i not in gi_ids]
    if missing:
        raise StepError(f"GPU {gpu}: no live GPU instance id for {', '.join(missing)}")
    ids = [gi_ids[i] for i in items]
    argv = smi.destroy_compute_instances(gpu, ids) if op is Op.DESTROY_CI else smi.destroy_gpu_instances(gpu, ids)
    return Step(op, tuple(argv), gpu, tuple(items))


def _create(gpu: int, model: GpuModel, gis: list[Action], cis: list[Action]) -> Step:
    """One `-cgi ID:START,... -C`: every GPU instance created with its default compute instance."""
    items = [a.instance for a in gis if a.instance is not None]
    if sorted(items) != sorted(a.instance for a in cis if a.instance is not None):
        raise StepError(f"GPU {gpu}: migplan creates each GPU instance with its default compute instance "
                        "(a CREATE_GI needs its CREATE_CI, and a CREATE_CI its CREATE_GI)")
    return Step(Op.CREATE_GI, tuple(smi.create_instances_for(model, gpu, items, default_ci=True)), gpu, tuple(items))


def _mode(gpu: int, items: list[Action]) -> list[Step]:
    """`-mig 1|0`, then `-r -i N` of this one GPU when the action needs a reset."""
    if len(items) > 1:
        raise StepError(f"GPU {gpu}: more than one MIG mode change")
    [a] = items
    out = [Step(a.op, tuple(smi.set_mig_mode(gpu, a.op is Op.ENABLE_MIG)), gpu)]
    if a.reset:
        out.append(Step(a.op, tuple(smi.reset_gpu(gpu)), gpu, reset=True))
    return out


READ_ONLY_FLAGS = ("-L", "-lgi", "-lci", "-lgip", "-lgipp", "-h", "--help")
# `nvidia-smi vgpu` and its listings (smi/vgpu.py's builders: the summary, -q, -s, -c, with -v or -i N): reads only,
# unlike `vgpu -shm` and the other setters, which these flags never include
VGPU_READ_ONLY_FLAGS = frozenset(("-q", "-s", "-c", "-v"))


def is_read_only(argv: Sequence[str]) -> bool:
    """True for the nvidia-smi queries migplan runs (what a dry run may still run on the host)."""
    if not argv or argv[0].rsplit("/", 1)[-1] != smi.NVIDIA_SMI:
        return False
    rest = list(argv[1:])
    if any(a.startswith(("--query-gpu=", "--query-compute-apps=")) for a in rest):
        return True
    if not rest or (len(rest) == 2 and rest[0] == "-i" and rest[1].isascii() and rest[1].isdigit()):
        return True  # plain `nvidia-smi [-i N]`: the default table (memory of each MIG device, §12)
    if rest[0] == "vgpu":
        return _vgpu_listing(rest[1:])
    return bool(rest) and rest[-1] in READ_ONLY_FLAGS  # the builders put the listing flag last


def _vgpu_listing(flags: Sequence[str]) -> bool:
    """`nvidia-smi vgpu [-q|-s|-c] [-v] [-i N]`: every flag a listing one, `-i` only with a GPU index."""
    rest = list(flags)
    if len(rest) >= 2 and rest[-2] == "-i":
        if not (rest[-1].isascii() and rest[-1].isdigit()):
            return False
        rest = rest[:-2]
    return all(f in VGPU_READ_ONLY_FLAGS for f in rest) and len(set(rest)) == len(rest)
