"""The change of one GPU: its actions run as nvidia-smi commands (`fleet.steps.to_commands`), each journaled and
judged by its exit code, the GPU read back and checked against its target, and the rollback to its checkpoint
(`roll_back`: the actions `diff(live, checkpoint)`, run the same way) when anything fails."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from migplan import smi
from migplan.adapters.runner import HostError
from migplan.adapters.smi_session import SmiSession
from migplan.catalog import GpuModel
from migplan.catalog.layout import Instance, Layout
from migplan.errors import MigplanError
from migplan.fleet.outcomes import ApplyOptions, GpuOutcome, GpuResult, Journal, listed, shown
from migplan.fleet.snapshot import DiscoveredGpu
from migplan.fleet.steps import Step, StepError, to_commands
from migplan.model.diff import Action, diff, keep_mode
from migplan.model.gpu_plan import GpuPlan
from migplan.smi import SmiError


@dataclass
class LiveGpu:
    """One GPU as read now: mode, layout and the GPU instance id of each instance."""

    mig: bool
    pending: bool | None
    layout: Layout | None
    gi_ids: dict[Instance, int] = field(default_factory=dict)


class ResetNeeded(MigplanError):
    """The driver refused the one-GPU reset a MIG mode change needs on Ampere."""

    def __init__(self, message: str, stop: tuple[str, ...]) -> None:
        super().__init__(message)
        self.stop = stop


class Mismatch(MigplanError):
    """The GPU read back is not what was asked for."""


class Linked(MigplanError):
    """Another GPU of a move failed, so this one goes back too."""


FAILURES = (SmiError, HostError, StepError, MigplanError)


class GpuChange:
    """The change of one GPU, from its checkpoint to its plan's target, over the host's nvidia-smi session (the
    rollback and the repair use the same session, model and journal).

    session: the host's `SmiSession`; plan: the GPU's plan (its target, its actions); model: the model the
    commands are built for (the host's own table); journal: where each command and check is recorded; index: the
    GPU's index; ran: the commands run so far, as text; checkpoint: the GPU as read under the lock before any
    change; live: the GPU as the commands run so far left it (for the move order); failure: what failed, if
    anything (the GPU is rolled back)."""

    def __init__(self, session: SmiSession, plan: GpuPlan, model: GpuModel, journal: Journal) -> None:
        self.session, self.plan, self.model, self.journal = session, plan, model, journal
        self.index = plan.index
        self.ran: list[str] = []
        self.checkpoint: LiveGpu | None = None
        self.live: LiveGpu | None = None
        self.failure: BaseException | None = None

    def actions_to(self, current: Layout | None, target: Layout | None) -> list[Action]:
        """The actions that turn `current` into `target` on this GPU (`model.diff.diff` for its architecture)."""
        return diff(current, target, gpu=self.plan.key, architecture=self.model.architecture)

    def planned_actions(self) -> list[Action]:
        """What is left of the plan's change: the plan's own actions while nothing has run on this GPU (the plan
        reader checked that they turn the plan's current layout into its target, the stale check that the
        checkpoint is that layout); after a move's commands, the actions from what they left to the target."""
        assert self.live is not None
        if not self.ran and self.live.layout == self.plan.current:
            return list(self.plan.actions)
        return self.actions_to(self.live.layout, self.plan.target)

    def run_actions(self, actions: Sequence[Action], gi_ids: Mapping[Instance, int], after: Layout | None) -> None:
        """Run `actions` (their commands: `fleet.steps.to_commands`, with the live GPU instance ids `gi_ids`), each
        judged by its exit code; `after`: the layout they leave."""
        for step in to_commands(self.index, self.model, actions, gi_ids):
            self.run(step)
        if self.live is not None:
            self.live = dataclasses.replace(self.live, layout=after, mig=after is not None)

    def read(self, *, mig_known: bool = False) -> LiveGpu:
        """The GPU now. `mig_known`: MIG is on and no mode change ran, so `-lgi` alone says it (one command)."""
        if not mig_known:
            info = next((g for g in self.session.gpus() if g.index == self.index), None)
            if info is None:
                raise MigplanError(f"GPU {self.index} is no longer listed by nvidia-smi")
            if not info.mig_current:
                return LiveGpu(False, info.mig_pending, None)
            pending = info.mig_pending
        else:
            pending = None
        rows = self.session.gpu_instances(self.index)
        layout = Layout.of(Instance(r.start, r.profile_name) for r in rows)
        return LiveGpu(True, pending, layout, {Instance(r.start, r.profile_name): r.gi_id for r in rows})

    def run(self, step: Step) -> None:
        """One command, journaled; a failure raises (a refused reset: `ResetNeeded`, with what to stop)."""
        start = time.monotonic()
        done = self.session.run(step.argv)
        self.ran.append(str(step))
        self.journal({"event": "command", "gpu": self.index, "kind": step.kind, "argv": list(step.argv),
                      "exit_code": done.exit_code, "stdout": done.stdout[-4000:], "stderr": done.stderr[-4000:],
                      "duration_s": round(time.monotonic() - start, 3)})
        if not done.ok:
            err = smi.classify_failure(step.argv, done.exit_code, done.stdout, done.stderr)
            if step.reset:
                raise reset_needed(self, err, done.stdout + done.stderr)
            raise err

    def verify(self, target: Layout | None, *, mig_known: bool = False) -> LiveGpu:
        """Read the GPU and `check` it."""
        return self.check(self.read(mig_known=mig_known), target)

    def check(self, now: LiveGpu, target: Layout | None) -> LiveGpu:
        """`now` must be `target` exactly, its mode in force (journaled); else `Mismatch`."""
        ok = now.layout == target and (now.mig == (target is not None)) and now.pending in (None, now.mig)
        self.journal({"event": "verify", "gpu": self.index, "want": shown(target), "found": shown(now.layout),
                      "mig": now.mig, "ok": ok})
        if not ok:
            raise Mismatch(f"GPU {self.index}: read back {shown(now.layout)} (MIG {'on' if now.mig else 'off'}), "
                           f"planned {shown(target)}")
        return now


def reset_needed(g: GpuChange, err: SmiError, text: str) -> ResetNeeded:
    """What to stop so that the driver can reset this one GPU: what NVIDIA's refusal names (persistence daemon,
    display, processes; `The following GPUs could not be reset: ... In use by another client`, public logs cited
    in tests/sim), plus the processes nvidia-smi lists on it now."""
    stop = [f"nvidia-persistenced (sudo systemctl stop nvidia-persistenced, or nvidia-smi -i {g.index} -pm 0)",
            "the display manager / X server and the nvidia_drm module (sudo modprobe -r nvidia_drm)",
            "GPU monitoring that holds the device (nv-hostengine / DCGM exporters)"]
    try:
        uuid = g.plan.uuid
        procs = [a for a in g.session.compute_apps() if uuid is None or (a.gpu_uuid or "").lower() == uuid.lower()]
        stop += [f"process {a.pid} ({a.process_name or '?'})" for a in procs]
    except FAILURES:
        pass
    if "not supported" in text.lower():
        stop = ["a reset is not possible on this host (a VM or pass-through): reboot it, and migplan apply --last "
                "re-creates the instances (Ampere keeps the MIG mode)"]
    return ResetNeeded(f"reset needed: the driver refused to reset GPU {g.index} for the MIG mode change "
                       f"({err.message}); stop {'; '.join(stop)}, then apply again", tuple(stop))


def checkpoint_of(d: DiscoveredGpu) -> LiveGpu:
    """The checkpoint, from the read just made under the lock (no second read: fewer round trips)."""
    gi_ids = {i.instance: i.gi_id for i in d.instances if i.gi_id is not None}
    return LiveGpu(d.mig_current, d.mig_pending, d.layout, gi_ids)


def roll_back(g: GpuChange, cause: BaseException) -> GpuResult:
    """Back to the checkpoint: read what is there now (a failed step may have done part of its work), and run
    `diff(now, checkpoint)` like any other actions."""
    checkpoint = g.checkpoint
    assert checkpoint is not None
    stop = cause.stop if isinstance(cause, ResetNeeded) else ()
    try:
        now = g.read()
        if now.pending is not None and now.pending != now.mig and now.mig == (checkpoint.layout is not None):
            g.run_actions([keep_mode(now.mig, g.plan.key)], {}, now.layout)  # a change left pending (reset refused)
        g.run_actions(g.actions_to(now.layout, checkpoint.layout), now.gi_ids, checkpoint.layout)
        back = g.verify(checkpoint.layout)
    except FAILURES as err:
        g.journal({"event": "rollback-failed", "gpu": g.index, "error": str(err)})
        return GpuResult(g.index, GpuOutcome.FAILED, f"{cause}; the rollback failed too: {err} (the GPU's state "
                         "is what 'migplan status' shows now)", tuple(g.ran), reset_needed=stop)
    g.journal({"event": "rolled-back", "gpu": g.index, "layout": shown(back.layout)})
    return GpuResult(g.index, GpuOutcome.ROLLED_BACK, f"{cause}; rolled back to {shown(back.layout)}",
                     tuple(g.ran), listed(back.layout), reset_needed=stop)


def finish(g: GpuChange, options: ApplyOptions, read: LiveGpu | BaseException | None = None) -> GpuResult:
    """Verify a GPU whose steps all ran (or roll it back when one failed); `read`: the host-wide read-back."""
    if g.failure is not None:
        g.journal({"event": "failure", "gpu": g.index, "error": str(g.failure)})
        if options.dry_run:
            return GpuResult(g.index, GpuOutcome.FAILED, f"dry run: {g.failure}", tuple(g.ran))
        return roll_back(g, g.failure)
    if options.dry_run:
        return GpuResult(g.index, GpuOutcome.WOULD_APPLY, commands=tuple(g.ran))
    assert g.checkpoint is not None
    quick = g.checkpoint.mig and g.plan.target is not None and g.checkpoint.pending in (None, True)
    try:
        if isinstance(read, BaseException):
            raise read
        now = g.verify(g.plan.target, mig_known=quick) if read is None else g.check(read, g.plan.target)
    except FAILURES as err:
        g.journal({"event": "failure", "gpu": g.index, "error": str(err)})
        return roll_back(g, err)
    g.live = now
    return GpuResult(g.index, GpuOutcome.APPLIED, commands=tuple(g.ran), layout=listed(now.layout))
