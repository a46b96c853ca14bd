"""Apply a plan to one host: pre-flight, re-read it, refuse what changed, change only what the plan changes
(moves in the plan's migration order), verify placement for placement and memory, and roll a GPU back to its
checkpoint when anything fails. This module is the host's orchestration; the one path of a change is:

  plan's actions (model.diff.Action) -> fleet.steps.to_commands -> nvidia-smi argv (migplan.smi builders)

run by `fleet.gpu_change.GpuChange.run_actions` for the plan's change (`fleet.moves` orders the moves' parts), for
a rollback (`diff(live, checkpoint)`) and for the repair of an interrupted apply (`fleet.repair`, `diff(live,
wanted)`). The result types are in `fleet.outcomes`, the MIG devices read at the end in `fleet.devices`.

Per host: take the lock, then the pre-flight (`preflight`): `nvidia-smi mig -h` runs through the host's become
prefix (so a refusing sudo fails here, before anything) and must document `-cgi PROFILE:START`; every GPU of
the plan must be there with the model the plan was made for. A failed pre-flight skips the host, nothing run.

Per GPU of the plan on this host:
  1. the live state (read again now) already equals the target        -> unchanged (nothing is run)
  2. the live state differs from what the plan assumed                -> refused (stale), with what changed
  3. an instance to destroy (or a whole GPU to partition) is busy     -> skipped, unless allow_disrupt
  4. checkpoint = the layout just read under the lock; run the plan's actions
  5. read the GPU back; it must equal the target exactly, and every created instance must have at least the
     memory the plan assumed (plain `nvidia-smi`, §12)                -> applied
  6. any failure in 4-5 (an nvidia-smi error, a timeout, a dropped connection, a mismatch, a reset refused):
     read the GPU again (after a dropped connection the runner reconnects), run the actions back to the
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
import functools
import time
from collections.abc import Callable, Mapping, Sequence

from migplan import smi
from migplan.adapters.host_lock import acquire
from migplan.adapters.runner import CommandRunner, HostError
from migplan.adapters.smi_session import BatchedReads, SmiSession
from migplan.catalog import Catalog, GpuModel
from migplan.catalog.layout import Instance, Layout, check_layout
from migplan.errors import MigplanError
from migplan.fleet.devices import LIST_ALL_CI, LIST_ALL_GI, MIG_TABLE, device_record
from migplan.fleet.discover import READS, busy_without_table, discover_host
from migplan.fleet.gpu_change import (
    FAILURES,
    GpuChange,
    LiveGpu,
    Mismatch,
    ResetNeeded,
    checkpoint_of,
    finish,
    roll_back,
)
from migplan.fleet.moves import HostChanges
from migplan.fleet.outcomes import (
    AfterApply,
    ApplyOptions,
    GpuOutcome,
    GpuResult,
    HostApplyResult,
    Journal,
    MoveEvent,
    OnMove,
    listed,
    quiet,
    shown,
)
from migplan.fleet.repair import half_done, put_inflight, repair, settle, settled, with_repair
from migplan.fleet.snapshot import DiscoveredGpu, DiscoveredHost
from migplan.fleet.steps import is_read_only
from migplan.inventory import Host
from migplan.model.gpu_plan import GpuPlan, Migration
from migplan.model.state import GpuState, changes
from migplan.smi.mig_table import parse_mig_devices, takes_placement

# The names callers import from here (commands/apply.py, the tests), wherever they now live.
__all__ = ["DEVICE_READS", "FIRST_READS", "AfterApply", "ApplyOptions", "GpuOutcome", "GpuResult", "HostApplyResult",
           "MoveEvent", "OnMove", "ResetNeeded", "apply_host", "device_record", "half_done", "preflight",
           "repair", "shortfalls"]


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
        return GpuResult(plan.index, GpuOutcome.UNCHANGED, "already as planned", layout=listed(plan.target))
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
    except FAILURES:  # `--query-compute-apps` was read with the host: only a lost batch gets here
        return live
    return dataclasses.replace(live, busy=assumed.busy) if set(without) == set(assumed.busy) else live


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


def apply_host(runner: CommandRunner, host: Host, plans: Sequence[GpuPlan], catalog: Catalog,
               options: ApplyOptions, journal: Journal = quiet, *, migrations: Sequence[Migration] = (),
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
    # the runner has `hold` (checked above), which the CommandRunner protocol does not declare
    lock = acquire(runner, host.lock_file, timeout=options.timeout)  # type: ignore[arg-type]  # see above
    journal({"event": "locked", "path": host.lock_file})
    try:
        res = _apply_host(runner, host, plans, catalog, options, journal, migrations, on_move, plan_id,
                          finish_recorded)
        # under the lock, so that another apply's record is never overwritten: the caller's files (their one round
        # trip carries the settled record), else the record alone
        if files is not None and res.preflight is None:
            files(res)
        else:
            settle(runner, host, res, options, journal)
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
    todo: dict[int, GpuChange] = {}
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
        g = GpuChange(session, gp, model, journal)
        g.checkpoint = checkpoint_of(found[gp.index])
        g.live = dataclasses.replace(g.checkpoint)
        journal({"event": "checkpoint", "gpu": gp.index, "layout": shown(g.checkpoint.layout),
                 "mig": g.checkpoint.mig, "gi_ids": {str(i): n for i, n in g.checkpoint.gi_ids.items()}})
        todo[gp.index] = g
    moves = [m for m in sorted(migrations, key=lambda m: m.step) if on_host(m, host.name, todo)] \
        if options.allow_disrupt else []
    if todo and not options.dry_run:  # before the first change: what an interrupted apply leaves to repair
        put_inflight(runner, host, todo, plan_id, options)
    HostChanges(todo, record, moves, on_move, options).go()
    if todo and not options.dry_run:  # the read-back, the memory and the new MIG device UUIDs: one round trip
        creates = any(g.plan.target is not None and g.checkpoint is not None and set(g.plan.target.instances)
                      - set(g.checkpoint.layout.instances if g.checkpoint.layout is not None else ()) for g in
                      todo.values())
        _read_together(reads, (*DEVICE_READS, *((MIG_TABLE,) if creates else ())), options, journal, "read-back")
    verified = _verify_all(session, [g for g in todo.values() if g.failure is None], options)
    for index, g in todo.items():
        results[index] = finish(g, options, verified.get(index))
    devices = None
    if not options.dry_run:
        _check_memory(session, todo, results, catalog)
        if not reads.has(DEVICE_READS):  # a rollback ran since: the UUIDs are read again
            _read_together(reads, DEVICE_READS, options, journal, "MIG devices")
        table = reads.cached(MIG_TABLE)
        try:
            devices = device_record(session, host.name, table.stdout if table is not None and table.ok else None)
        except FAILURES as err:  # the caller reads them again, and reports it if that fails too
            journal({"event": "devices-not-read", "error": str(err)})
    inflight = settled(host, todo, results, plan_id) if not options.dry_run and (
        todo or (record.inflight is not None and record.inflight.gpus)) else None
    results.update({index: with_repair(results.get(index), fixed) for index, fixed in repaired.items()})
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


def on_host(m: Migration, host: str, todo: Mapping[int, GpuChange]) -> bool:
    ends = [e for e in (m.source, m.target) if e is not None and e.host == host]
    return any(e.gpu in todo for e in ends)


def _verify_all(session: SmiSession, gs: Sequence[GpuChange],
                options: ApplyOptions) -> dict[int, LiveGpu | BaseException]:
    """Read back every changed GPU of the host at once: one `--query-gpu` when a MIG mode changed and one
    `nvidia-smi mig -lgi` for all GPUs (§6 lists every MIG-enabled GPU without `-i`), instead of two reads per
    GPU. A failed read is that GPU's failure (it is then read again on its own, and rolled back)."""
    if options.dry_run or not gs:
        return {}
    out: dict[int, LiveGpu | BaseException] = {}
    try:
        mode_changed = any(g.checkpoint is None or g.checkpoint.mig != (g.plan.target is not None)
                           or g.checkpoint.pending not in (None, g.checkpoint.mig)
                           or (g.plan.target is not None and not len(g.plan.target)) for g in gs)  # empty: no rows
        modes = {i.index: i for i in session.gpus()} if mode_changed else {}
        rows = session.listing(LIST_ALL_GI, smi.parse_gpu_instances) \
            if any(g.plan.target is not None for g in gs) else []
    except FAILURES as err:
        return dict.fromkeys((g.index for g in gs), err)
    for g in gs:
        info = modes.get(g.index)
        mig = info.mig_current if info is not None else True
        pending = info.mig_pending if info is not None else None
        mine = [r for r in rows if r.gpu == g.index]
        if not mig:
            out[g.index] = LiveGpu(False, pending, None)
            continue
        out[g.index] = LiveGpu(True, pending, Layout.of(Instance(r.start, r.profile_name) for r in mine),
                             {Instance(r.start, r.profile_name): r.gi_id for r in mine})
    return out


# What a host's apply reads, in two round trips for the whole host (`_read_together`): before anything, the
# pre-flight's help text and everything `discover_host` asks (`fleet.discover.READS`: the per-GPU listings
# answered by one host-wide listing each, and plain `nvidia-smi`, so that the host read again places processes
# on GPU instances as the discovery the plan was made from did); after the changes, the read-back
# (`--query-gpu` for the modes, `-lgi`), the memory table when instances were created, and what
# `device_record` needs for the assignments (`-L`, `-lci`).
FIRST_READS = (MIG_HELP, *READS)
DEVICE_READS = (tuple(smi.query_gpus()), tuple(smi.list_gpus()), LIST_ALL_GI, LIST_ALL_CI)


def _check_memory(session: SmiSession, todo: Mapping[int, GpuChange], results: dict[int, GpuResult],
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
    except FAILURES as err:
        for i, g in created.items():
            results[i] = roll_back(g, MigplanError(f"the created instances' memory could not be read back: {err}"))
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
            results[i] = roll_back(g, Mismatch(f"GPU {i}: created instance memory below the plan: "
                                                 + "; ".join(short)))
