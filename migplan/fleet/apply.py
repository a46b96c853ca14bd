"""Apply a plan to one host: pre-flight, re-read it, refuse what changed, change only what the plan changes
(moves in the plan's migration order), verify placement for placement and memory, and roll a GPU back to its
checkpoint when anything fails.

Per host: take the lock, then the pre-flight (`preflight`): `nvidia-smi mig -h` runs through the host's become
prefix (so a refusing sudo fails here, before anything) and must document `-cgi PROFILE:START`; every GPU of
the plan must be there with the model the plan was made for. A failed pre-flight skips the host, nothing run.

Per GPU of the plan on this host:
  1. the live state (read again now) already equals the target        -> unchanged (nothing is run)
  2. the live state differs from what the plan assumed                -> refused (stale), with what changed
  3. an instance to destroy (or a whole GPU to partition) is busy     -> skipped, unless allow_disrupt
  4. checkpoint = the layout just read under the lock; run the steps (`fleet.steps`)
  5. read the GPU back; it must equal the target exactly, and every created instance must have at least the
     memory the plan assumed (plain `nvidia-smi`, §12)                -> applied
  6. any failure in 4-5 (an nvidia-smi error, a timeout, a dropped connection, a mismatch, a reset refused):
     read the GPU again (after a dropped connection the runner reconnects), run the steps back to the
     checkpoint, verify                                               -> rolled-back, or failed
With `allow_disrupt` and migrations (`Plan.migrations`, `planner/migration.py`), the moves run first, in step
order: a make-before-break move creates its target instance (when it fits next to what is still there) before
its source is destroyed; a stop-first move destroys first. `on_move` is called around each move (the hooks).
GPUs linked by a move that has not finished are rolled back together. Each GPU ends either as planned or as
it was; the result says which. Nothing here knows SSH: the runner is passed in.

Round trips (issue 10: at most 4 per changed GPU): the reads go in two batches per host (`FIRST_READS` before
anything, the read-back with `DEVICE_READS` after; `BatchedReads.prefetch`, one SSH exec each where the runner
can), so a host costs the lock, two batches and 3 commands per changed GPU, plus the files the caller writes.
Only read-only commands are batched; every change is a command of its own, judged by its own exit code.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from migplan import smi
from migplan.adapters.host_lock import acquire
from migplan.adapters.runner import CommandRunner, FileToPut, HostError
from migplan.adapters.smi_session import BatchedReads, SmiSession
from migplan.catalog import Catalog, GpuModel
from migplan.errors import MigplanError
from migplan.fleet.discover import READS, busy_without_table, discover_host
from migplan.fleet.inflight import INFLIGHT_FILE, InFlight, InFlightGpu, inflight_document
from migplan.fleet.snapshot import ComputeInstance, DiscoveredGpu, DiscoveredHost, DiscoveredInstance
from migplan.fleet.state import GpuState, changes
from migplan.fleet.steps import (
    Step,
    StepError,
    StepKind,
    cancel_pending,
    create_steps,
    destroy_steps,
    is_read_only,
    steps,
)
from migplan.inventory import Host
from migplan.layout import Instance, Layout, check_layout
from migplan.planner.migration import Endpoint, Migration
from migplan.planner.plan import GpuPlan
from migplan.smi import SmiError
from migplan.smi.mig_table import parse_mig_devices, takes_placement

Journal = Callable[[dict[str, Any]], None]


class GpuOutcome(str, enum.Enum):
    APPLIED = "applied"
    UNCHANGED = "unchanged"
    WOULD_APPLY = "would-apply"  # dry run
    SKIPPED = "skipped"  # busy, held, or not asked for
    REFUSED = "refused"  # the GPU changed since the plan was made
    ROLLED_BACK = "rolled-back"  # a step failed; the GPU is back as it was
    REPAIRED = "repaired"  # an interrupted apply had left it half-done: finished or put back to its checkpoint
    FAILED = "failed"  # a step failed and so did the rollback: state as read last is reported


@dataclass(frozen=True)
class GpuResult:
    gpu: int
    outcome: GpuOutcome
    reason: str = ""
    commands: tuple[str, ...] = ()
    layout: list[str] | None = None  # as read at the end (None: MIG disabled or unknown)
    reset_needed: tuple[str, ...] = ()  # the driver refused the reset: what to stop before applying again
    repair: str = ""  # "finished" or "rolled back": what a repair of an interrupted apply did here ("": none)


@dataclass(frozen=True)
class ApplyOptions:
    allow_disrupt: bool = False
    dry_run: bool = False
    timeout: float = 60.0


@dataclass(frozen=True)
class MoveEvent:
    """One moved workload, for the `on_move` hooks: where it was and goes, with the MIG device UUIDs.

    phase: "move" (make-before-break: both exist now, the source is destroyed next), "stop" (stop-first:
    the source is destroyed next) or "start" (stop-first: the target exists now)."""

    workload: str
    phase: str
    source: Endpoint
    target: Endpoint | None
    old_device: str | None
    new_device: str | None
    gpus: tuple[int, ...]  # the GPUs of this host it touches


OnMove = Callable[[MoveEvent], "str | None"]  # the hook's failure, or None
AfterApply = Callable[["HostApplyResult"], None]  # writes the host's files (and `inflight`), under the lock


@dataclass
class _Live:
    """One GPU as read now: mode, layout and the GPU instance id of each instance."""

    mig: bool
    pending: bool | None
    layout: Layout | None
    gi_ids: dict[Instance, int] = field(default_factory=dict)


def _quiet(_event: dict[str, Any]) -> None:
    """A journal that keeps nothing."""


class ResetNeeded(MigplanError):
    """The driver refused the one-GPU reset a MIG mode change needs on Ampere."""

    def __init__(self, message: str, stop: tuple[str, ...]) -> None:
        super().__init__(message)
        self.stop = stop


class _Mismatch(MigplanError):
    """The GPU read back is not what was asked for."""


class _Linked(MigplanError):
    """Another GPU of a move failed, so this one goes back too."""


_FAILURES = (SmiError, HostError, StepError, MigplanError)


class _Gpu:
    """The apply of one GPU (so the rollback sees the same session, model and journal)."""

    def __init__(self, session: SmiSession, plan: GpuPlan, model: GpuModel, journal: Journal) -> None:
        self.s, self.plan, self.model, self.journal = session, plan, model, journal
        self.index = plan.index
        self.ran: list[str] = []
        self.checkpoint: _Live | None = None
        self.live: _Live | None = None  # as the steps run so far left it (for the move order)
        self.failure: BaseException | None = None

    def read(self, *, mig_known: bool = False) -> _Live:
        """The GPU now. `mig_known`: MIG is on and no mode change ran, so `-lgi` alone says it (one command)."""
        if not mig_known:
            info = next((g for g in self.s.gpus() if g.index == self.index), None)
            if info is None:
                raise MigplanError(f"GPU {self.index} is no longer listed by nvidia-smi")
            if not info.mig_current:
                return _Live(False, info.mig_pending, None)
            pending = info.mig_pending
        else:
            pending = None
        rows = self.s.gpu_instances(self.index)
        layout = Layout.of(Instance(r.start, r.profile_name) for r in rows)
        return _Live(True, pending, layout, {Instance(r.start, r.profile_name): r.gi_id for r in rows})

    def run(self, step: Step) -> None:
        start = time.monotonic()
        done = self.s.run(step.argv)
        self.ran.append(str(step))
        self.journal({"event": "command", "gpu": self.index, "kind": step.kind.value, "argv": list(step.argv),
                      "exit_code": done.exit_code, "stdout": done.stdout[-4000:], "stderr": done.stderr[-4000:],
                      "duration_s": round(time.monotonic() - start, 3)})
        if not done.ok:
            err = smi.classify_failure(step.argv, done.exit_code, done.stdout, done.stderr)
            if step.kind is StepKind.RESET:
                raise _reset_needed(self, err, done.stdout + done.stderr)
            raise err

    def run_all(self, todo: Sequence[Step], after: Layout | None) -> None:
        for step in todo:
            self.run(step)
        if self.live is not None:
            self.live = dataclasses.replace(self.live, layout=after, mig=after is not None)

    def verify(self, target: Layout | None, *, mig_known: bool = False) -> _Live:
        return self.check(self.read(mig_known=mig_known), target)

    def check(self, now: _Live, target: Layout | None) -> _Live:
        ok = now.layout == target and (now.mig == (target is not None)) and now.pending in (None, now.mig)
        self.journal({"event": "verify", "gpu": self.index, "want": _shown(target), "found": _shown(now.layout),
                      "mig": now.mig, "ok": ok})
        if not ok:
            raise _Mismatch(f"GPU {self.index}: read back {_shown(now.layout)} (MIG {'on' if now.mig else 'off'}), "
                            f"planned {_shown(target)}")
        return now


def _reset_needed(g: _Gpu, err: SmiError, text: str) -> ResetNeeded:
    """What to stop so that the driver can reset this one GPU: what NVIDIA's refusal names (persistence daemon,
    display, processes; `The following GPUs could not be reset: ... In use by another client`, public logs cited
    in tests/sim), plus the processes nvidia-smi lists on it now."""
    stop = [f"nvidia-persistenced (sudo systemctl stop nvidia-persistenced, or nvidia-smi -i {g.index} -pm 0)",
            "the display manager / X server and the nvidia_drm module (sudo modprobe -r nvidia_drm)",
            "GPU monitoring that holds the device (nv-hostengine / DCGM exporters)"]
    try:
        uuid = g.plan.uuid
        procs = [a for a in g.s.compute_apps() if uuid is None or (a.gpu_uuid or "").lower() == uuid.lower()]
        stop += [f"process {a.pid} ({a.process_name or '?'})" for a in procs]
    except _FAILURES:
        pass
    if "not supported" in text.lower():
        stop = ["a reset is not possible on this host (a VM or pass-through): reboot it, and migplan apply --last "
                "re-creates the instances (Ampere keeps the MIG mode)"]
    return ResetNeeded(f"reset needed: the driver refused to reset GPU {g.index} for the MIG mode change "
                       f"({err.message}); stop {'; '.join(stop)}, then apply again", tuple(stop))


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


def _precheck(plan: GpuPlan, live: GpuState | None, options: ApplyOptions,
              seen: GpuState | None = None) -> GpuResult | None:
    """The GPU's result when nothing is to be run on it (unchanged, held, stale or busy), else None. `seen`: `live`
    for the stale check, its busy instances placed as the plan's discovery placed them (`_as_planned`); whether
    the plan would destroy a busy instance is judged on `live`, what is read now."""
    if live is not None and live.current == plan.target and live.mig_pending is None:
        return GpuResult(plan.index, GpuOutcome.UNCHANGED, "already as planned", layout=_listed(plan.target))
    if plan.hold is not None:
        return GpuResult(plan.index, GpuOutcome.SKIPPED, f"{plan.hold} in the plan")
    stale = changes(plan.observed, seen if seen is not None else live)
    if stale:
        return GpuResult(plan.index, GpuOutcome.REFUSED, "changed since the plan was made: " + "; ".join(stale)
                         + " (re-plan with 'migplan propose')")
    assert live is not None  # `changes` reports a missing GPU
    busy = _busy_problem(plan, live, options.allow_disrupt)
    if busy:
        return GpuResult(plan.index, GpuOutcome.SKIPPED, busy)
    return None


def _as_planned(assumed: GpuState, live: GpuState | None, d: DiscoveredGpu | None,
                apps: Callable[[], Sequence[smi.ComputeApp]]) -> GpuState | None:
    """`live` with the busy instances the plan assumed, when they differ from it only by how processes were placed
    on GPU instances: by plain `nvidia-smi`'s Processes table (fleet.discover), or without it (a discovery that
    could not read it, or a migplan before it did) -- a changed way of reading is not a changed GPU. So: when the
    rules without that table, applied to the processes read now, give what the plan assumed; or when processes
    cannot be placed now (every instance counts as busy, the plan's busy ones among them). Else `live` itself."""
    if live is None or d is None or set(live.busy) == set(assumed.busy):
        return live
    if d.mig_current and d.processes and set(assumed.busy) <= set(live.busy):
        return dataclasses.replace(live, busy=assumed.busy)
    try:
        without = busy_without_table(d, apps())
    except _FAILURES:  # `--query-compute-apps` was read with the host: only a lost batch gets here
        return live
    return dataclasses.replace(live, busy=assumed.busy) if set(without) == set(assumed.busy) else live


def _checkpoint(d: DiscoveredGpu) -> _Live:
    """The checkpoint, from the read just made under the lock (no second read: fewer round trips)."""
    gi_ids = {i.instance: i.gi_id for i in d.instances if i.gi_id is not None}
    return _Live(d.mig_current, d.mig_pending, d.layout, gi_ids)


def _roll_back(g: _Gpu, cause: BaseException) -> GpuResult:
    """Back to the checkpoint: read what is there now (a failed step may have done part of its work)."""
    checkpoint = g.checkpoint
    assert checkpoint is not None
    stop = cause.stop if isinstance(cause, ResetNeeded) else ()
    try:
        now = g.read()
        if now.pending is not None and now.pending != now.mig and now.mig == (checkpoint.layout is not None):
            g.run(cancel_pending(g.index, now.mig))  # a mode change the driver left pending (reset refused)
        g.run_all(steps(g.index, g.model, now.layout, checkpoint.layout, now.gi_ids), checkpoint.layout)
        back = g.verify(checkpoint.layout)
    except _FAILURES as err:
        g.journal({"event": "rollback-failed", "gpu": g.index, "error": str(err)})
        return GpuResult(g.index, GpuOutcome.FAILED, f"{cause}; the rollback failed too: {err} (the GPU's state "
                         "is what 'migplan status' shows now)", tuple(g.ran), reset_needed=stop)
    g.journal({"event": "rolled-back", "gpu": g.index, "layout": _shown(back.layout)})
    return GpuResult(g.index, GpuOutcome.ROLLED_BACK, f"{cause}; rolled back to {_shown(back.layout)}",
                     tuple(g.ran), _listed(back.layout), reset_needed=stop)


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
    if not out and target is not None:  # the host's driver rules: a combination its driver refuses (R510, §2)
        out = [f"this host's driver refuses it: {c.message}" for c in check_layout(host, target)]
    return sorted(set(out))


def _listed(layout: Layout | None) -> list[str] | None:
    return None if layout is None else layout.as_list()


@dataclass(frozen=True)
class HostApplyResult:
    host: str
    gpus: tuple[GpuResult, ...]
    preflight: str | None = None  # why the host was skipped before anything ran (None: it passed)
    placement_source: str = ""  # how `-cgi PROFILE:START` support was established
    devices: DiscoveredHost | None = None  # the GPUs and MIG device UUIDs as read at the end (None: not read)
    inflight: FileToPut | None = None  # inflight.json as the host's apply left it (written by `apply_host`)


def apply_host(runner: CommandRunner, host: Host, plans: Sequence[GpuPlan], catalog: Catalog,
               options: ApplyOptions, journal: Journal = _quiet, *, migrations: Sequence[Migration] = (),
               on_move: OnMove | None = None, plan_id: str = "", finish_recorded: bool = False,
               files: AfterApply | None = None) -> HostApplyResult:
    """Every GPU of the plan on this host, after taking the host's apply lock and reading the host again
    (one GPU's failure never stops the next GPU: each is checkpointed and rolled back on its own). A dry
    run takes no lock: it changes nothing. A GPU an interrupted apply left half-done is repaired first
    (`repair`): finished where the plans still want its recorded target (`finish_recorded`: always, for a
    repair without a plan), else put back to its checkpoint. inflight.json is settled before the lock is
    released: by `files(result)` when given (the caller writes the host's files, `result.inflight` among them,
    still under the lock), else on its own."""
    if options.dry_run or not hasattr(runner, "hold"):
        if not options.dry_run:
            raise HostError(runner.host, "this runner cannot hold the host's apply lock")
        return _apply_host(runner, host, plans, catalog, options, journal, migrations, on_move, plan_id,
                           finish_recorded)
    lock = acquire(runner, host.lock_file, timeout=options.timeout)  # type: ignore[arg-type]
    journal({"event": "locked", "path": host.lock_file})
    try:
        res = _apply_host(runner, host, plans, catalog, options, journal, migrations, on_move, plan_id,
                          finish_recorded)
        # under the lock, so that another apply's record is never overwritten: the caller's files (their one round
        # trip carries the settled record), else the record alone
        if files is not None and res.preflight is None:
            files(res)
        else:
            _settle(runner, host, res, options, journal)
        return res
    finally:
        lock.release()
        journal({"event": "unlocked", "path": host.lock_file})


MIG_HELP = (smi.NVIDIA_SMI, "mig", "-h")  # read-only; through the become prefix, so it also tests become
PLACEMENT_SOURCE = ("`nvidia-smi mig -h` documents the -cgi placement tuple (the reference names no minimum "
                    "driver for it, so it is detected, not assumed)")


def preflight(session: SmiSession, record: DiscoveredHost | None, plans: Sequence[GpuPlan],
              catalog: Catalog) -> str | None:
    """Why this host must not be touched, or None. `record` None: only the become/nvidia-smi check (before
    discovery, so a refusing sudo is reported as the pre-flight failure it is)."""
    if record is None:
        help_run = session.run(MIG_HELP)
        text = help_run.stdout + help_run.stderr
        creates = any(gp.target is not None and set(gp.target.instances) - set(
            gp.current.instances if gp.current is not None else ()) for gp in plans)
        if creates and not takes_placement(text):
            return ("nvidia-smi on this host does not document '-cgi PROFILE:START' (placement tuples) in 'nvidia-smi "
                    "mig -h'; migplan creates instances only at explicit placements (upgrade the NVIDIA driver)")
        return None
    gpus = {g.index: g for g in record.gpus}
    out = []
    for gp in plans:
        d = gpus.get(gp.index)
        if d is None:
            out.append(f"GPU {gp.index} is not on the host")
            continue
        want = catalog.get(gp.model).base_id
        found = catalog.find(d.model) if d.model is not None else None
        have = found.base_id if found is not None else d.name
        if have != want:
            out.append(f"GPU {gp.index} is a {have}, the plan was made for a {want}")
    return "; ".join(out) or None


def _apply_host(runner: CommandRunner, host: Host, plans: Sequence[GpuPlan], catalog: Catalog,
                options: ApplyOptions, journal: Journal, migrations: Sequence[Migration],
                on_move: OnMove | None, plan_id: str = "", finish_recorded: bool = False) -> HostApplyResult:
    reads = BatchedReads(runner)  # one -lgi/-lci/-lgip/-lgipp per host, not per GPU
    session = SmiSession(reads, timeout=options.timeout)
    wanted = None if finish_recorded else {gp.index: gp.target for gp in plans}
    checked = _checked_host(reads, session, host, plans, catalog, options, journal, wanted)
    if isinstance(checked, str):
        return HostApplyResult(host.name, (), preflight=checked)
    record, repaired = checked
    live: dict[int, GpuState] = {}
    models: dict[int, GpuModel] = {}
    found = {d.index: d for d in record.gpus}
    for d in record.gpus:
        own = d.planning_model(catalog)
        st = d.state(host.name, own.id if own is not None else None)
        if st is not None and own is not None:
            live[d.index], models[d.index] = st, own
    results: dict[int, GpuResult] = {}
    todo: dict[int, _Gpu] = {}
    apps = functools.cache(session.compute_apps)  # read with the host (FIRST_READS): asked for a busy difference
    for gp in sorted(plans, key=lambda p: p.index):
        model = models.get(gp.index) or catalog.get(gp.model)
        short = shortfalls(catalog.get(gp.model), model, gp.target)
        if short:
            results[gp.index] = GpuResult(gp.index, GpuOutcome.REFUSED, "the host's own profile table does not give "
                                          "what the plan assumed: " + "; ".join(short) +
                                          " (re-plan from a fresh discovery)")
            continue
        st = live.get(gp.index)
        if st is not None and st.model != gp.model:  # the same GPU, described by another (equivalent) model
            st = dataclasses.replace(st, model=gp.model)
        early = _precheck(gp, st, options, _as_planned(gp.observed, st, found.get(gp.index), apps))
        if early is not None:
            results[gp.index] = early
            continue
        g = _Gpu(session, gp, model, journal)
        g.checkpoint = _checkpoint(found[gp.index])
        g.live = dataclasses.replace(g.checkpoint)
        journal({"event": "checkpoint", "gpu": gp.index, "layout": _shown(g.checkpoint.layout),
                 "mig": g.checkpoint.mig, "gi_ids": {str(i): n for i, n in g.checkpoint.gi_ids.items()}})
        todo[gp.index] = g
    moves = [m for m in sorted(migrations, key=lambda m: m.step) if _on_host(m, host.name, todo)] \
        if options.allow_disrupt else []
    if todo and not options.dry_run:  # before the first change: what an interrupted apply leaves to repair
        _put_inflight(runner, host, todo, plan_id, options)
    _Run(todo, record, moves, on_move, options).go()
    if todo and not options.dry_run:  # the read-back, the memory and the new MIG device UUIDs: one round trip
        creates = any(g.plan.target is not None and g.checkpoint is not None and set(g.plan.target.instances)
                      - set(g.checkpoint.layout.instances if g.checkpoint.layout is not None else ()) for g in
                      todo.values())
        _read_together(reads, (*DEVICE_READS, *((MIG_TABLE,) if creates else ())), options, journal, "read-back")
    verified = _verify_all(session, [g for g in todo.values() if g.failure is None], options)
    for index, g in todo.items():
        results[index] = _finish(g, options, verified.get(index))
    devices = None
    if not options.dry_run:
        _check_memory(session, todo, results, catalog)
        if not reads.has(DEVICE_READS):  # a rollback ran since: the UUIDs are read again
            _read_together(reads, DEVICE_READS, options, journal, "MIG devices")
        table = reads.cached(MIG_TABLE)
        try:
            devices = device_record(session, host.name, table.stdout if table is not None and table.ok else None)
        except _FAILURES as err:  # the caller reads them again, and reports it if that fails too
            journal({"event": "devices-not-read", "error": str(err)})
    inflight = _settled(host, todo, results, plan_id) if not options.dry_run and (
        todo or (record.inflight is not None and record.inflight.gpus)) else None
    results.update({index: _with_repair(results.get(index), fixed) for index, fixed in repaired.items()})
    return HostApplyResult(host.name, tuple(results[i] for i in sorted(results)), placement_source=PLACEMENT_SOURCE,
                           devices=devices, inflight=inflight)


def _checked_host(reads: BatchedReads, session: SmiSession, host: Host, plans: Sequence[GpuPlan], catalog: Catalog,
                  options: ApplyOptions, journal: Journal,
                  wanted: Mapping[int, Layout | None] | None) -> str | tuple[DiscoveredHost, dict[int, GpuResult]]:
    """Under the lock: the host read (one round trip), the pre-flight, and the repair of what an interrupted
    apply left half-done (`repair`; the host is read again after it). A string: why nothing may be changed."""
    _read_together(reads, FIRST_READS, options, journal, "pre-flight and state")
    try:
        why = preflight(session, None, plans, catalog)
    except HostError as err:  # a refusing become prefix, nvidia-smi missing
        why = err.detail
    if why is None:
        record = discover_host(reads, host, catalog, timeout=options.timeout, assignments=False)
        why = preflight(session, record, plans, catalog)
    if why is not None:
        journal({"event": "preflight-failed", "reason": why})
        return f"pre-flight failed, nothing changed: {why}"
    repaired: dict[int, GpuResult] = {}
    if record.inflight is not None and not options.dry_run:
        repaired = repair(session, record, wanted, catalog, options, journal)
        if any(r.commands for r in repaired.values()):  # the host changed: read it again (one round trip)
            _read_together(reads, FIRST_READS, options, journal, "state after the repair")
            record = discover_host(reads, host, catalog, timeout=options.timeout, assignments=False)
    return record, repaired


def _read_together(reads: BatchedReads, argvs: Sequence[Sequence[str]], options: ApplyOptions, journal: Journal,
                   purpose: str) -> None:
    """Read-only commands in one round trip (`BatchedReads.prefetch`), journaled as one event with every
    command and exit code. Never for a mutating command (a timed-out batch may leave the rest running)."""
    assert all(is_read_only(a) for a in argvs), "only read-only commands are batched"
    start = time.monotonic()
    ok = reads.prefetch(argvs, timeout=options.timeout)
    found = [reads.cached(a) for a in argvs]
    journal({"event": "reads", "for": purpose, "batched": ok, "argv": [list(a) for a in argvs],
             "exit_codes": [d.exit_code if d is not None else None for d in found],
             "stdout": [d.stdout[-4000:] if d is not None else "" for d in found],
             "stderr": [d.stderr[-4000:] if d is not None else "" for d in found],
             "duration_s": round(time.monotonic() - start, 3)})


def _on_host(m: Migration, host: str, todo: Mapping[int, _Gpu]) -> bool:
    ends = [e for e in (m.source, m.target) if e is not None and e.host == host]
    return any(e.gpu in todo for e in ends)


def _verify_all(session: SmiSession, gs: Sequence[_Gpu], options: ApplyOptions) -> dict[int, _Live | BaseException]:
    """Read back every changed GPU of the host at once: one `--query-gpu` when a MIG mode changed and one
    `nvidia-smi mig -lgi` for all GPUs (§6 lists every MIG-enabled GPU without `-i`), instead of two reads per
    GPU. A failed read is that GPU's failure (it is then read again on its own, and rolled back)."""
    if options.dry_run or not gs:
        return {}
    out: dict[int, _Live | BaseException] = {}
    try:
        mode_changed = any(g.checkpoint is None or g.checkpoint.mig != (g.plan.target is not None)
                           or g.checkpoint.pending not in (None, g.checkpoint.mig)
                           or (g.plan.target is not None and not len(g.plan.target)) for g in gs)  # empty: no rows
        modes = {i.index: i for i in session.gpus()} if mode_changed else {}
        rows = session.listing(LIST_ALL_GI, smi.parse_gpu_instances) \
            if any(g.plan.target is not None for g in gs) else []
    except _FAILURES as err:
        return dict.fromkeys((g.index for g in gs), err)
    for g in gs:
        info = modes.get(g.index)
        mig = info.mig_current if info is not None else True
        pending = info.mig_pending if info is not None else None
        mine = [r for r in rows if r.gpu == g.index]
        if not mig:
            out[g.index] = _Live(False, pending, None)
            continue
        out[g.index] = _Live(True, pending, Layout.of(Instance(r.start, r.profile_name) for r in mine),
                             {Instance(r.start, r.profile_name): r.gi_id for r in mine})
    return out


LIST_ALL_GI = (smi.NVIDIA_SMI, "mig", "-lgi")
LIST_ALL_CI = (smi.NVIDIA_SMI, "mig", "-lci")
MIG_TABLE = (smi.NVIDIA_SMI,)  # plain nvidia-smi: MIG devices with their memory, processes with GI/CI ids (§12)
# What a host's apply reads, in two round trips for the whole host (`_read_together`): before anything, the
# pre-flight's help text and everything `discover_host` asks (`fleet.discover.READS`: the per-GPU listings
# answered by one host-wide listing each, and plain `nvidia-smi`, so that the host read again places processes
# on GPU instances as the discovery the plan was made from did); after the changes, the read-back
# (`--query-gpu` for the modes, `-lgi`), the memory table when instances were created, and what
# `device_record` needs for the assignments (`-L`, `-lci`).
FIRST_READS = (MIG_HELP, *READS)
DEVICE_READS = (tuple(smi.query_gpus()), tuple(smi.list_gpus()), LIST_ALL_GI, LIST_ALL_CI)


def _finish(g: _Gpu, options: ApplyOptions, read: _Live | BaseException | None = None) -> GpuResult:
    """Verify a GPU whose steps all ran (or roll it back when one failed); `read`: the host-wide read-back."""
    if g.failure is not None:
        g.journal({"event": "failure", "gpu": g.index, "error": str(g.failure)})
        if options.dry_run:
            return GpuResult(g.index, GpuOutcome.FAILED, f"dry run: {g.failure}", tuple(g.ran))
        return _roll_back(g, g.failure)
    if options.dry_run:
        return GpuResult(g.index, GpuOutcome.WOULD_APPLY, commands=tuple(g.ran))
    assert g.checkpoint is not None
    quick = g.checkpoint.mig and g.plan.target is not None and g.checkpoint.pending in (None, True)
    try:
        if isinstance(read, BaseException):
            raise read
        now = g.verify(g.plan.target, mig_known=quick) if read is None else g.check(read, g.plan.target)
    except _FAILURES as err:
        g.journal({"event": "failure", "gpu": g.index, "error": str(err)})
        return _roll_back(g, err)
    g.live = now
    return GpuResult(g.index, GpuOutcome.APPLIED, commands=tuple(g.ran), layout=_listed(now.layout))


def _check_memory(session: SmiSession, todo: Mapping[int, _Gpu], results: dict[int, GpuResult],
                  catalog: Catalog) -> None:
    """Issue 14: each created instance must have at least the memory the plan assumed (its planned model's
    profile MiB, which is what the plan's `instance_mib` of a workload there is). One plain `nvidia-smi` for the
    host (§12); a GPU below that is rolled back."""
    created = {i: g for i, g in todo.items() if results[i].outcome is GpuOutcome.APPLIED and g.plan.target
               is not None and set(g.plan.target.instances) - set(g.checkpoint.layout.instances
                                                                  if g.checkpoint and g.checkpoint.layout else ())}
    if not created:
        return
    try:
        rows = parse_mig_devices(session.output([smi.NVIDIA_SMI]))
    except _FAILURES as err:
        for i, g in created.items():
            results[i] = _roll_back(g, MigplanError(f"the created instances' memory could not be read back: {err}"))
        return
    for i, g in created.items():
        assert g.live is not None and g.plan.target is not None and g.checkpoint is not None
        by_gi = {gi: inst for inst, gi in g.live.gi_ids.items()}
        have: dict[Instance, int] = {}
        for r in rows:
            if r.gpu == i and r.gi_id in by_gi:
                have[by_gi[r.gi_id]] = min(have.get(by_gi[r.gi_id], r.total_mib), r.total_mib)
        planned = catalog.get(g.plan.model)
        old = set(g.checkpoint.layout.instances) if g.checkpoint.layout else set()
        short = []
        for inst in sorted(set(g.plan.target.instances) - old):
            want = planned.profile(inst.profile).memory_mib if planned.has_profile(inst.profile) else 0
            got = have.get(inst)
            if got is None:
                short.append(f"{inst}: no MIG device memory listed")
            elif got < want:
                short.append(f"{inst} has {got} MiB, the plan assumed {want} MiB")
        g.journal({"event": "memory", "gpu": i, "read": {str(k): v for k, v in have.items()}, "short": short})
        if short:
            results[i] = _roll_back(g, _Mismatch(f"GPU {i}: created instance memory below the plan: "
                                                 + "; ".join(short)))


class _Run:
    """The steps of every GPU to change on a host: the plan's moves first, in step order (planner/migration.py,
    "Execution model": 0. instances leaving the layout that no mover runs on are destroyed; then per step the
    workloads in `stops` stop, a stop-first mover stops, the target GPU gets its MIG mode, the target instance
    is created, a make-before-break mover then leaves its source), then the rest of each GPU in one batch."""

    def __init__(self, todo: Mapping[int, _Gpu], record: DiscoveredHost, moves: Sequence[Migration],
                 on_move: OnMove | None, options: ApplyOptions) -> None:
        self.todo, self.moves, self.on_move, self.options = todo, moves, on_move, options
        self.host = record.name
        self.devices: dict[tuple[int, Instance | None], str | None] = {
            (g.index, i.instance): next((c.uuid for c in i.compute_instances if c.uuid), None)
            for g in record.gpus for i in g.instances}
        self.devices.update({(g.index, None): g.uuid for g in record.gpus})  # a whole MIG-disabled GPU
        self.by_name = {m.workload: m for m in moves}
        self.left: set[str] = set()  # movers stopped at their source already
        self.links: dict[int, set[int]] = {}  # GPU -> GPUs sharing an unfinished move with it
        self.at: _Gpu | None = None  # the GPU whose step runs now (the one a failure is on)

    def go(self) -> None:
        self._clear_first()
        for m in self.moves:
            self._move(m)
        for g in self.todo.values():
            if g.failure is None:
                self._attempt([g], functools.partial(self._rest, g))

    def _clear_first(self) -> None:
        """Step 0: on GPUs with moves, destroy what leaves the layout and no mover runs on (capacity first)."""
        sources: dict[int, set[Instance]] = {}
        for m in self.moves:
            src, s_inst, _, _ = self._ends(m)
            if src is not None and s_inst is not None:
                sources.setdefault(src.index, set()).add(s_inst)
        touched = {e.gpu for m in self.moves for e in (m.source, m.target) if e is not None and e.host == self.host}
        for index in sorted(touched & set(self.todo)):
            g = self.todo[index]
            assert g.checkpoint is not None
            if g.checkpoint.layout is None:
                continue
            doomed = [i for i in g.checkpoint.layout.instances if _will_destroy(g, i)
                      and i not in sources.get(index, set())]
            if doomed:
                self._attempt([g], functools.partial(self._destroy, g, doomed))

    # -- one move ----------------------------------------------------------------------------
    def _ends(self, m: Migration) -> tuple[_Gpu | None, Instance | None, _Gpu | None, Instance | None]:
        src = self.todo.get(m.source.gpu) if m.source.host == self.host else None
        tgt = self.todo.get(m.target.gpu) if m.target is not None and m.target.host == self.host else None
        s_inst = Instance.parse(m.source.instance) if src is not None and m.source.instance else None
        t_inst = Instance.parse(m.target.instance) if tgt is not None and m.target and m.target.instance else None
        return src, s_inst, tgt, t_inst

    def _move(self, m: Migration) -> None:
        src, _, tgt, t_inst = self._ends(m)
        stopped = [self.by_name[w] for w in m.stops if w in self.by_name and w not in self.left]
        gpus = list({g.index: g for g in (src, tgt, *(self._ends(x)[0] for x in stopped)) if g is not None}.values())
        if not gpus or any(g.failure is not None for g in gpus):
            return
        ids = {g.index for g in gpus}
        for g in gpus:
            self.links.setdefault(g.index, set()).update(ids - {g.index})

        ready = self._ready(m)  # the target is on a GPU of this host that the plan leaves as it is: it exists

        def run() -> None:
            for other in stopped:
                self._leave(other, ids)
            mbb = m.make_before_break and not m.stop_first and m.workload not in self.left and (
                ready or (tgt is not None and t_inst is not None and self._can_create(tgt, t_inst)))
            if not mbb:
                self._leave(m, ids)
            if tgt is not None:
                self._arrive(tgt, t_inst)
            if tgt is not None or ready or mbb:
                self._hook(m, "move" if mbb else "start", ids)
            if mbb:
                self._leave(m, ids, hook=False)

        self._attempt(gpus, run)
        for g in gpus:  # the move is done (or failed and rolled back as a pair): its GPUs go on on their own
            self.links.get(g.index, set()).difference_update(ids)

    def _leave(self, m: Migration, ids: set[int], *, hook: bool = True) -> None:
        """`m`'s workload stops at its source (the hook first), and the source goes when the plan drops it."""
        if m.workload in self.left:
            return
        if hook:
            self._hook(m, "stop", ids)
        self.left.add(m.workload)
        src, s_inst, _, _ = self._ends(m)
        if src is not None and s_inst is not None and _will_destroy(src, s_inst):
            self._destroy(src, [s_inst])

    def _arrive(self, g: _Gpu, inst: Instance | None) -> None:
        """The target GPU in its mode, and the target instance created (None: the whole GPU, MIG disabled)."""
        assert g.live is not None
        if inst is None:
            if g.plan.target is None and g.live.layout is not None:
                self._rest(g)  # what is left there goes and MIG is disabled: the workload gets the whole GPU
            return
        if g.live.layout is None:  # enable MIG (and reset this one GPU on Ampere) before creating on it
            self.at = g
            g.run_all(steps(g.index, g.model, None, Layout(), {}), Layout())
        if not _fits_now(g, inst):
            self._make_room(g, inst)
        self._create(g, inst)

    def _ready(self, m: Migration) -> bool:
        return m.target is not None and m.target.host == self.host and m.target.gpu not in self.todo \
            and (m.target.gpu, _parsed(m.target.instance)) in self.devices

    def _can_create(self, g: _Gpu, inst: Instance) -> bool:
        return g.live is not None and (g.live.layout is None or _fits_now(g, inst)) and _will_create(g, inst)

    def _attempt(self, gpus: Sequence[_Gpu], work: Callable[[], None]) -> None:
        try:
            work()
        except _FAILURES as err:
            where = self.at if self.at is not None and self.at in gpus else gpus[0]
            failed = [g for g in gpus if g.failure is None]
            for g in failed:
                g.failure = err if g is where or len(failed) == 1 else _Linked(
                    f"{err} (GPU {where.index}, which a move shares with this GPU)")
            for g in failed:
                for other in self.links.get(g.index, set()):
                    o = self.todo.get(other)
                    if o is not None and o.failure is None:
                        o.failure = _Linked(f"rolled back with GPU {g.index}, whose change failed: {err}")

    def _hook(self, m: Migration, phase: str, gpus: set[int]) -> None:
        if self.on_move is None or self.options.dry_run:
            return
        self.at = None  # a failing hook fails the move: all of its GPUs
        _, s_inst, tgt, t_inst = self._ends(m)
        old = self.devices.get((m.source.gpu, s_inst)) if m.source.host == self.host else None
        new = None
        if tgt is not None and t_inst is not None and phase in ("move", "start"):
            new = _device_uuids(tgt).get(t_inst)
        elif tgt is not None and phase in ("move", "start"):
            new = tgt.plan.uuid  # the whole GPU
        elif self._ready(m) and m.target is not None and phase in ("move", "start"):
            new = self.devices.get((m.target.gpu, _parsed(m.target.instance)))
        failed = self.on_move(MoveEvent(m.workload, phase, m.source, m.target, old, new, tuple(sorted(gpus))))
        if failed:
            raise MigplanError(f"on_move hook for {m.workload} ({phase}) failed: {failed}")

    # -- steps on one GPU, tracking what is there --------------------------------------------
    def _create(self, g: _Gpu, inst: Instance) -> None:
        assert g.live is not None and g.live.layout is not None
        if inst in g.live.layout.instances:
            return
        self.at = g
        g.run_all(create_steps(g.index, g.model, [inst]), Layout.of([*g.live.layout.instances, inst]))

    def _destroy(self, g: _Gpu, items: Sequence[Instance]) -> None:
        assert g.live is not None and g.checkpoint is not None
        here = set(g.live.layout.instances) if g.live.layout is not None else set()
        gone = [i for i in items if i in here]
        if not gone:
            return
        self.at = g
        g.run_all(destroy_steps(g.index, gone, g.checkpoint.gi_ids), Layout.of(i for i in here if i not in gone))

    def _make_room(self, g: _Gpu, inst: Instance) -> None:
        """Destroy, on the target's GPU, what the plan removes anyway and no waiting mover still runs on."""
        assert g.live is not None and g.live.layout is not None and g.plan.target is not None
        busy = {self._ends(m)[1] for m in self.moves if m.workload not in self.left and self._ends(m)[0] is g}
        doomed = [i for i in g.live.layout.instances if i not in g.plan.target.instances and i not in busy]
        for i in doomed:
            if _fits_now(g, inst):
                return
            self._destroy(g, [i])  # if it still does not fit, the create fails with the driver's error

    def _rest(self, g: _Gpu) -> None:
        """What is left of this GPU's change after its moves: one batch of destroys, mode, one -cgi."""
        assert g.live is not None and g.checkpoint is not None
        self.at = g
        g.run_all(steps(g.index, g.model, g.live.layout, g.plan.target, g.checkpoint.gi_ids), g.plan.target)


def _parsed(instance: str | None) -> Instance | None:
    return Instance.parse(instance) if instance is not None else None


def _will_destroy(g: _Gpu, inst: Instance) -> bool:
    assert g.checkpoint is not None
    target = set(g.plan.target.instances) if g.plan.target is not None else set()
    return g.checkpoint.layout is not None and inst in g.checkpoint.layout.instances and inst not in target


def _will_create(g: _Gpu, inst: Instance) -> bool:
    assert g.checkpoint is not None
    before = set(g.checkpoint.layout.instances) if g.checkpoint.layout is not None else set()
    return g.plan.target is not None and inst in g.plan.target.instances and inst not in before


def _fits_now(g: _Gpu, inst: Instance) -> bool:
    assert g.live is not None
    if g.live.layout is None:
        return False
    return not check_layout(g.model, Layout.of([*g.live.layout.instances, inst]))


# --- an interrupted apply: the in-flight record and its repair -------------------------------------------

def _inflight_path(host: Host) -> str:
    return f"{host.state_dir}/{INFLIGHT_FILE}"


def _inflight_file(host: Host, todo: Mapping[int, _Gpu], plan_id: str) -> FileToPut:
    """inflight.json for these GPUs (none: the settled record, nothing in flight, always the same text)."""
    gpus = tuple(InFlightGpu(g.index, g.plan.uuid, g.checkpoint.layout if g.checkpoint else None, g.plan.target)
                 for g in sorted(todo.values(), key=lambda g: g.index))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) if gpus else ""
    doc = inflight_document(InFlight(host.name, plan_id if gpus else "", stamp, gpus))
    return FileToPut(INFLIGHT_FILE, doc.encode(), 0o644)


def _put_inflight(runner: CommandRunner, host: Host, todo: Mapping[int, _Gpu], plan_id: str,
                  options: ApplyOptions) -> None:
    """Record on the host, before the first change, each GPU's checkpoint and target (fleet/inflight.py): one round
    trip (`put_files`). Failing to write it changes nothing yet: the host is failed (an apply that could not be
    repaired is not started)."""
    try:
        runner.put_files(host.state_dir, [_inflight_file(host, todo, plan_id)], timeout=options.timeout)
    except HostError as err:  # a sudoers rule for nvidia-smi alone, a read-only state_dir: found before any change
        refused = HostError(host.name, f"nothing changed: cannot write {_inflight_path(host)} before the first "
                            f"change ({err.detail})", hint=err.hint or "the apply writes its record and the host's "
                            "files in state_dir through the become prefix: allow that, or set state_dir")
        refused.code = err.code  # the cause's code (become-failed, transfer-failed, ...) for the report
        raise refused from None


def _settled(host: Host, todo: Mapping[int, _Gpu], results: Mapping[int, GpuResult], plan_id: str) -> FileToPut:
    """The record once the host's apply has ended: empty, unless a GPU is left FAILED (its rollback failed too):
    that one stays recorded, so the next run repairs it."""
    left = {i: g for i, g in todo.items() if results.get(i) is not None and results[i].outcome is GpuOutcome.FAILED}
    return _inflight_file(host, left, plan_id)


def _settle(runner: CommandRunner, host: Host, result: HostApplyResult, options: ApplyOptions,
            journal: Journal) -> None:
    """Write `result.inflight`, the record as the host's apply leaves it (one round trip)."""
    if result.inflight is None:
        return
    try:
        runner.put_files(host.state_dir, [result.inflight], timeout=options.timeout)
    except (HostError, MigplanError) as err:  # the GPUs are as reported; a stale record is only looked at again
        journal({"event": "inflight-not-settled", "error": str(err)})


def repair(session: SmiSession, record: DiscoveredHost, wanted: Mapping[int, Layout | None] | None,
           catalog: Catalog, options: ApplyOptions, journal: Journal) -> dict[int, GpuResult]:
    """Each GPU that `record.inflight` (an apply that did not finish) shows half-done: finished when `wanted`
    (the targets of the plan being applied now; None: the interrupted plan's own, for replan) still has the same
    target for it, else put back to its checkpoint. A GPU already at its target or its checkpoint needs nothing. A
    direction that would destroy an instance with processes is not taken without `allow_disrupt` (the other one
    is tried)."""
    inflight = record.inflight
    if inflight is None:
        return {}
    found = {d.index: d for d in record.gpus}
    out: dict[int, GpuResult] = {}
    for index in half_done(record):  # a GPU gone, or another board now, is nothing of ours to repair
        ig, d = inflight.gpu(index), found[index]
        assert ig is not None
        model = d.planning_model(catalog)
        live = d.state(record.name, model.id) if model is not None else None
        if model is None or live is None:
            continue
        if any(check_layout(model, x) for x in (ig.target, ig.checkpoint) if x is not None):
            out[ig.index] = GpuResult(ig.index, GpuOutcome.FAILED, "inflight.json records a layout this GPU cannot "
                                      f"have; left as {_shown(d.layout)} (look at it, then remove the file)",
                                      layout=_listed(d.layout))
            continue
        still = wanted is None or (ig.index in wanted and wanted[ig.index] == ig.target)
        first, second = (ig.target, ig.checkpoint) if still else (ig.checkpoint, ig.target)
        dest = next((x for x in (first, second) if options.allow_disrupt or not _destroys_busy(live, x)), None)
        if dest is None:
            out[ig.index] = GpuResult(ig.index, GpuOutcome.FAILED, "an interrupted apply left it as "
                                      f"{_shown(d.layout)}; finishing or undoing it would stop running processes "
                                      "(repair with --allow-disrupt)", layout=_listed(d.layout))
            continue
        out[ig.index] = _repair_gpu(session, d, live, model, dest, "finished" if dest == ig.target and
                                    dest != ig.checkpoint else "rolled back", journal)
    return out


def half_done(record: DiscoveredHost) -> list[int]:
    """The GPUs that `record.inflight` shows an interrupted apply left neither at their checkpoint nor their target."""
    if record.inflight is None:
        return []
    found = {d.index: d for d in record.gpus}
    out = []
    for ig in record.inflight.gpus:
        d = found.get(ig.index)
        if d is None or (ig.uuid and d.uuid and ig.uuid.lower() != d.uuid.lower()):
            continue
        # a GPU instance without its compute instance: a `-dci` took effect, its `-dgi` did not (migplan creates
        # every instance with its default compute instance, `-cgi ... -C`)
        bare = any(not i.compute_instances for i in d.instances)
        if d.mode_change_pending or bare or d.layout not in (ig.target, ig.checkpoint):
            out.append(ig.index)
    return out


def _destroys_busy(live: GpuState, dest: Layout | None) -> bool:
    keep = set(dest.instances) if dest is not None else set()
    return any(i not in keep for i in live.busy) or (live.whole_busy and dest is not None)


def _repair_gpu(session: SmiSession, d: DiscoveredGpu, live: GpuState, model: GpuModel, dest: Layout | None,
                how: str, journal: Journal) -> GpuResult:
    g = _Gpu(session, GpuPlan(live, dest, ()), model, journal)
    g.checkpoint = _checkpoint(d)
    now = g.checkpoint
    journal({"event": "repair", "gpu": d.index, "found": _shown(now.layout), "to": _shown(dest), "how": how})
    bare = sorted(i.instance for i in d.instances if not i.compute_instances)
    try:
        if now.pending is not None and now.pending != now.mig:
            g.run(cancel_pending(d.index, now.mig))  # a mode change left pending: back to the mode in force
        layout, ids = now.layout, dict(now.gi_ids)
        if bare and layout is not None:  # half-destroyed instances go first (`-dgi` alone: no CI to destroy)
            g.run(Step(StepKind.DESTROY_GI, tuple(smi.destroy_gpu_instances(d.index, [ids[i] for i in bare])),
                       d.index, tuple(bare)))
            layout = Layout.of(i for i in layout.instances if i not in bare)
            ids = {i: n for i, n in ids.items() if i not in bare}
        g.run_all(steps(d.index, model, layout, dest, ids), dest)
        back = g.verify(dest)
    except _FAILURES as err:
        g.journal({"event": "repair-failed", "gpu": d.index, "error": str(err)})
        return GpuResult(d.index, GpuOutcome.FAILED, f"an interrupted apply left it as {_shown(now.layout)}; "
                         f"repairing it failed: {err}", tuple(g.ran), _listed(now.layout))
    return GpuResult(d.index, GpuOutcome.REPAIRED, f"repaired: an interrupted apply had left it as "
                     f"{_shown(now.layout)}; {how} to {_shown(back.layout)}", tuple(g.ran), _listed(back.layout),
                     repair=how)


def _with_repair(result: GpuResult | None, fixed: GpuResult) -> GpuResult:
    """A GPU's result with its repair said first: the repair alone when the plan then had nothing to do there."""
    if result is None or result.outcome is GpuOutcome.UNCHANGED or fixed.outcome is GpuOutcome.FAILED:
        return fixed
    return dataclasses.replace(result, reason=f"{fixed.reason}; then {result.reason or result.outcome.value}",
                               commands=(*fixed.commands, *result.commands), repair=fixed.repair)


def device_record(session: SmiSession, host: str, table: str | None = None) -> DiscoveredHost:
    """The host's GPUs with their MIG devices, in four commands whatever the number of GPUs (`--query-gpu`,
    `-L`, and `mig -lgi` / `mig -lci` for all GPUs; apply reads them in its read-back batch): what the
    assignments need after an apply, where a full discovery would also read every GPU's profile tables again.
    `table`: plain `nvidia-smi`'s text when it was read anyway, whose MIG devices table names each device's GI
    and CI id (§12), so a UUID is matched exactly instead of by `-L`'s order."""
    mapped = _devices_table(table)
    infos = session.gpus()
    listing = {x.index: x for x in session.gpu_listing()}
    on = [i for i in infos if i.mig_current]
    gis = session.listing(LIST_ALL_GI, smi.parse_gpu_instances) if on else []
    cis = session.listing(LIST_ALL_CI, smi.parse_compute_instances) if gis else []
    gpus = []
    for info in sorted(infos, key=lambda i: i.index):
        found = listing.get(info.index)
        uuids = _uuids_of(info.index, [r for r in gis if r.gpu == info.index], [r for r in cis if r.gpu ==
                                                                                  info.index],
                          found.mig_devices if found is not None else (), mapped.get(info.index))
        instances = tuple(DiscoveredInstance(Instance(r.start, r.profile_name), r.gi_id, tuple(
            ComputeInstance(c.ci_id, r.profile_name, uuids.get((r.gi_id, c.ci_id))) for c in cis
            if c.gpu == info.index and c.gi_id == r.gi_id)) for r in gis if r.gpu == info.index)
        gpus.append(DiscoveredGpu(info.index, None, info.name, info.uuid, info.pci_bus_id, info.memory_total_mib,
                                  info.mig_capable, bool(info.mig_current), bool(info.mig_pending),
                                  instances if info.mig_current else ()))
    return DiscoveredHost(host, None, tuple(gpus))


def _devices_table(text: str | None) -> dict[int, dict[int, tuple[int, int]]]:
    """GPU -> MIG device index -> (GI id, CI id), from plain `nvidia-smi`'s MIG devices table (§12); {} when it
    was not read or does not parse (the order rule below is used then)."""
    if not text:
        return {}
    try:
        rows = parse_mig_devices(text)
    except _FAILURES:
        return {}
    out: dict[int, dict[int, tuple[int, int]]] = {}
    for r in rows:
        out.setdefault(r.gpu, {})[r.device] = (r.gi_id, r.ci_id)
    return out


def _uuids_of(gpu: int, gis: Sequence[smi.GpuInstanceRow], cis: Sequence[smi.ComputeInstanceRow],
              devices: Sequence[smi.MigDevice],
              table: Mapping[int, tuple[int, int]] | None = None) -> dict[tuple[int, int], str]:
    """(GI id, CI id) -> MIG device UUID: the old `MIG-GPU-.../gi/ci` form names them; with the new `MIG-<uuid>`
    form, plain `nvidia-smi`'s table gives each device index its GI and CI (when it lists every device of `-L`),
    else the devices are in ascending GI then CI id order (docs/nvidia-smi.md §11: observed, not documented)."""
    if devices and all(d.gi_id is not None and d.ci_id is not None for d in devices):
        return {(int(d.gi_id), int(d.ci_id)): d.uuid for d in devices}  # type: ignore[arg-type]
    if devices and table and all(d.device in table for d in devices) \
            and len({table[d.device] for d in devices}) == len(devices):
        return {table[d.device]: d.uuid for d in devices}
    pairs = sorted((c.gi_id, c.ci_id) for c in cis if c.gpu == gpu)
    return dict(zip(pairs, (d.uuid for d in sorted(devices, key=lambda d: d.device)), strict=False))


def _device_uuids(g: _Gpu) -> dict[Instance, str]:
    """The MIG device UUID of each instance of this GPU now: `-lgi` (placement -> GI id), `-lci` (GI -> CI) and
    `-L` (devices in ascending GI then CI id, docs/nvidia-smi.md §11)."""
    if isinstance(g.s.runner, BatchedReads) and not g.s.runner.has((LIST_ALL_GI, LIST_ALL_CI, tuple(smi.list_gpus()))):
        g.s.runner.prefetch((LIST_ALL_GI, LIST_ALL_CI, tuple(smi.list_gpus())), timeout=g.s.timeout)  # one trip
    gis = {r.gi_id: Instance(r.start, r.profile_name) for r in g.s.gpu_instances(g.index)}
    pairs = sorted((r.gi_id, r.ci_id) for r in g.s.compute_instances(g.index))
    listing = next((x for x in g.s.gpu_listing() if x.index == g.index), None)
    devices = sorted(listing.mig_devices, key=lambda d: d.device) if listing is not None else []
    out: dict[Instance, str] = {}
    for (gi, _ci), dev in zip(pairs, devices, strict=False):
        if gi in gis and gis[gi] not in out:
            out[gis[gi]] = dev.uuid
    return out
