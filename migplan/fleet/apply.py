"""Apply a plan to one host: re-read it, refuse what changed, change only what the plan changes,
verify placement for placement, and roll a GPU back to its checkpoint when anything fails.

Per GPU of the plan on this host:
  1. the live state (read again now) already equals the target        -> unchanged (nothing is run)
  2. the live state differs from what the plan assumed                -> refused (stale), with what changed
  3. an instance to destroy (or a whole GPU to partition) is busy     -> skipped, unless allow_disrupt
  4. checkpoint = the live layout; run the steps (`fleet.steps`)
  5. read the GPU back; it must equal the target exactly              -> applied
  6. any failure in 4-5 (an nvidia-smi error, a timeout, a dropped connection, a mismatch): read the GPU
     again (after a dropped connection the runner reconnects), run the steps back to the checkpoint,
     verify                                                           -> rolled-back, or failed
Each GPU ends either as planned or as it was; the result says which. Nothing here knows SSH: the
runner is passed in (`SshRunner`, `LocalRunner`, or the `RecordingRunner` of a dry run).
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from migplan import smi
from migplan.adapters.host_lock import acquire
from migplan.adapters.runner import CommandRunner, HostError
from migplan.adapters.smi_session import SmiSession
from migplan.catalog import Catalog, GpuModel
from migplan.errors import MigplanError
from migplan.fleet.discover import discover_host
from migplan.fleet.state import GpuState, changes
from migplan.fleet.steps import Step, StepError, steps
from migplan.inventory import Host
from migplan.layout import Instance, Layout
from migplan.planner.plan import GpuPlan
from migplan.smi import SmiError

Journal = Callable[[dict[str, Any]], None]


class GpuOutcome(str, enum.Enum):
    APPLIED = "applied"
    UNCHANGED = "unchanged"
    WOULD_APPLY = "would-apply"  # dry run
    SKIPPED = "skipped"  # busy, held, or not asked for
    REFUSED = "refused"  # the GPU changed since the plan was made
    ROLLED_BACK = "rolled-back"  # a step failed; the GPU is back as it was
    FAILED = "failed"  # a step failed and so did the rollback: state as read last is reported


@dataclass(frozen=True)
class GpuResult:
    gpu: int
    outcome: GpuOutcome
    reason: str = ""
    commands: tuple[str, ...] = ()
    layout: list[str] | None = None  # as read at the end (None: MIG disabled or unknown)


@dataclass(frozen=True)
class ApplyOptions:
    allow_disrupt: bool = False
    dry_run: bool = False
    timeout: float = 60.0


@dataclass
class _Live:
    """One GPU as read now: mode, layout and the GPU instance id of each instance."""

    mig: bool
    pending: bool | None
    layout: Layout | None
    gi_ids: dict[Instance, int] = field(default_factory=dict)


def _quiet(_event: dict[str, Any]) -> None:
    """A journal that keeps nothing."""


class _Gpu:
    """The apply of one GPU (so the rollback sees the same session, model and journal)."""

    def __init__(self, session: SmiSession, plan: GpuPlan, model: GpuModel, journal: Journal) -> None:
        self.s, self.plan, self.model, self.journal = session, plan, model, journal
        self.index = plan.index
        self.ran: list[str] = []

    def read(self) -> _Live:
        info = next((g for g in self.s.gpus() if g.index == self.index), None)
        if info is None:
            raise MigplanError(f"GPU {self.index} is no longer listed by nvidia-smi")
        if not info.mig_current:
            return _Live(False, info.mig_pending, None)
        rows = self.s.gpu_instances(self.index)
        layout = Layout.of(Instance(r.start, r.profile_name) for r in rows)
        return _Live(True, info.mig_pending, layout, {Instance(r.start, r.profile_name): r.gi_id for r in rows})

    def run(self, step: Step) -> None:
        start = time.monotonic()
        done = self.s.run(step.argv)
        self.ran.append(str(step))
        self.journal({"event": "command", "gpu": self.index, "kind": step.kind.value, "argv": list(step.argv),
                      "exit_code": done.exit_code, "stdout": done.stdout[-4000:], "stderr": done.stderr[-4000:],
                      "duration_s": round(time.monotonic() - start, 3)})
        if not done.ok:
            raise smi.classify_failure(step.argv, done.exit_code, done.stdout, done.stderr)

    def change(self, live: _Live, target: Layout | None) -> None:
        for step in steps(self.index, self.model, live.layout, target, live.gi_ids):
            self.run(step)

    def verify(self, target: Layout | None) -> _Live:
        now = self.read()
        ok = now.layout == target and (now.mig == (target is not None)) and now.pending in (None, now.mig)
        self.journal({"event": "verify", "gpu": self.index, "want": _shown(target), "found": _shown(now.layout),
                      "mig": now.mig, "ok": ok})
        if not ok:
            raise _Mismatch(f"GPU {self.index}: read back {_shown(now.layout)} (MIG {'on' if now.mig else 'off'}), "
                            f"planned {_shown(target)}")
        return now


class _Mismatch(MigplanError):
    """The GPU read back is not what was asked for."""


def _shown(layout: Layout | None) -> str:
    return "MIG disabled" if layout is None else str(layout)


def _busy_problem(plan: GpuPlan, live: GpuState, allow_disrupt: bool) -> str | None:
    if allow_disrupt:
        return None
    target = set(plan.target.instances) if plan.target is not None else set()
    lost = sorted(i for i in live.busy if i not in target)
    if lost:
        return f"processes run on {', '.join(map(str, lost))}, which the plan destroys (use --allow-disrupt)"
    if live.whole_busy and plan.target is not None:
        return "processes run on the whole GPU, and enabling MIG would stop them (use --allow-disrupt)"
    return None


def apply_gpu(session: SmiSession, plan: GpuPlan, live: GpuState | None, model: GpuModel,
              options: ApplyOptions, journal: Journal = _quiet) -> GpuResult:
    """One GPU, as in the module docstring."""
    g = _Gpu(session, plan, model, journal)
    if live is not None and live.current == plan.target and live.mig_pending is None:
        return GpuResult(plan.index, GpuOutcome.UNCHANGED, "already as planned", layout=_listed(plan.target))
    if plan.hold is not None:
        return GpuResult(plan.index, GpuOutcome.SKIPPED, f"{plan.hold} in the plan")
    stale = changes(plan.observed, live)
    if stale:
        return GpuResult(plan.index, GpuOutcome.REFUSED, "changed since the plan was made: " + "; ".join(stale)
                         + " (re-plan with 'migplan propose')")
    assert live is not None  # `changes` reports a missing GPU
    busy = _busy_problem(plan, live, options.allow_disrupt)
    if busy:
        return GpuResult(plan.index, GpuOutcome.SKIPPED, busy)
    checkpoint = g.read()
    journal({"event": "checkpoint", "gpu": plan.index, "layout": _shown(checkpoint.layout), "mig": checkpoint.mig,
             "gi_ids": {str(i): n for i, n in checkpoint.gi_ids.items()}})
    try:
        g.change(checkpoint, plan.target)
        if options.dry_run:
            return GpuResult(plan.index, GpuOutcome.WOULD_APPLY, commands=tuple(g.ran))
        now = g.verify(plan.target)
        return GpuResult(plan.index, GpuOutcome.APPLIED, commands=tuple(g.ran), layout=_listed(now.layout))
    except (SmiError, HostError, StepError, MigplanError) as err:
        journal({"event": "failure", "gpu": plan.index, "error": str(err)})
        if options.dry_run:
            return GpuResult(plan.index, GpuOutcome.FAILED, f"dry run: {err}", tuple(g.ran))
        return _roll_back(g, checkpoint, err)


def _roll_back(g: _Gpu, checkpoint: _Live, cause: BaseException) -> GpuResult:
    """Back to the checkpoint: read what is there now (a failed step may have done part of its work)."""
    try:
        now = g.read()
        g.change(now, checkpoint.layout)
        back = g.verify(checkpoint.layout)
    except (SmiError, HostError, StepError, MigplanError) as err:
        g.journal({"event": "rollback-failed", "gpu": g.index, "error": str(err)})
        return GpuResult(g.index, GpuOutcome.FAILED, f"{cause}; the rollback failed too: {err} (the GPU's state "
                         "is what 'migplan status' shows now)", tuple(g.ran))
    g.journal({"event": "rolled-back", "gpu": g.index, "layout": _shown(back.layout)})
    return GpuResult(g.index, GpuOutcome.ROLLED_BACK, f"{cause}; rolled back to {_shown(back.layout)}",
                     tuple(g.ran), _listed(back.layout))


def shortfalls(planned: GpuModel, host: GpuModel, target: Layout | None) -> list[str]:
    """Where the host's own table gives less than the plan assumed for the instances it creates: a profile
    missing, another profile id, a placement not offered, or less memory (the OOM a plan must not cause)."""
    if planned.base_id != host.base_id:
        return [f"the GPU is a {host.base_id}, the plan was made for a {planned.base_id}"]
    out = []
    for inst in target.instances if target is not None else ():
        if not planned.has_profile(inst.profile):
            continue
        want = planned.profile(inst.profile)
        if not host.has_profile(inst.profile):
            out.append(f"{inst.profile} is not offered by this host's driver")
            continue
        have = host.profile(inst.profile)
        if have.id != want.id:
            out.append(f"{inst.profile} is profile id {have.id} here, {want.id} in the plan")
        if inst.start not in have.starts:
            out.append(f"{inst} is not a placement this host offers")
        if have.memory_mib < want.memory_mib:
            out.append(f"{inst.profile} has {have.memory_mib} MiB here, the plan assumed {want.memory_mib}")
    return sorted(set(out))


def _listed(layout: Layout | None) -> list[str] | None:
    return None if layout is None else layout.as_list()


@dataclass(frozen=True)
class HostApplyResult:
    host: str
    gpus: tuple[GpuResult, ...]


def apply_host(runner: CommandRunner, host: Host, plans: Sequence[GpuPlan], catalog: Catalog,
               options: ApplyOptions, journal: Journal = _quiet) -> HostApplyResult:
    """Every GPU of the plan on this host, after taking the host's apply lock and reading the host again
    (one GPU's failure never stops the next GPU: each is checkpointed and rolled back on its own). A dry
    run takes no lock: it changes nothing."""
    if options.dry_run or not hasattr(runner, "hold"):
        if not options.dry_run:
            raise HostError(runner.host, "this runner cannot hold the host's apply lock")
        return _apply_host(runner, host, plans, catalog, options, journal)
    lock = acquire(runner, host.lock_file, timeout=options.timeout)  # type: ignore[arg-type]
    journal({"event": "locked", "path": host.lock_file})
    try:
        return _apply_host(runner, host, plans, catalog, options, journal)
    finally:
        lock.release()
        journal({"event": "unlocked", "path": host.lock_file})


def _apply_host(runner: CommandRunner, host: Host, plans: Sequence[GpuPlan], catalog: Catalog,
                options: ApplyOptions, journal: Journal) -> HostApplyResult:
    record = discover_host(runner, host, catalog, timeout=options.timeout)
    live: dict[int, GpuState] = {}
    models: dict[int, GpuModel] = {}
    for d in record.gpus:
        own = d.planning_model(catalog)
        st = d.state(host.name, own.id if own is not None else None)
        if st is not None and own is not None:
            live[d.index], models[d.index] = st, own
    session = SmiSession(runner, timeout=options.timeout)
    results = []
    for gp in sorted(plans, key=lambda p: p.index):
        model = models.get(gp.index) or catalog.get(gp.model)
        short = shortfalls(catalog.get(gp.model), model, gp.target)
        if short:
            results.append(GpuResult(gp.index, GpuOutcome.REFUSED, "the host's own profile table does not give what "
                                     "the plan assumed: " + "; ".join(short) + " (re-plan from a fresh discovery)"))
            continue
        st = live.get(gp.index)
        if st is not None and st.model != gp.model:  # the same GPU, described by another (equivalent) model
            st = dataclasses.replace(st, model=gp.model)
        results.append(apply_gpu(session, gp, st, model, options, journal))
    return HostApplyResult(host.name, tuple(results))
