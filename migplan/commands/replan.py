"""Replan: one unattended run. Lock, read the live state, plan, decide, apply only when worth it, record.

Exit codes (docs/replan.md): 0 nothing to do (or not worth applying, or a dry run that would apply),
5 applied, 1 partial (some GPUs applied, others not), 3 failed (nothing applied), 4 locked (another run
holds the state directory),
2 bad input. A cool-down keeps a recently changed GPU as it is (reserved for the planner) unless the plan
without the cool-down places demand now left out or an outgrown workload: then that plan is used.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from migplan import documents
from migplan.adapters import children
from migplan.adapters.runner import CommandRunner
from migplan.adapters.state_dir import DEFAULT_STATE_DIR, Locked, StateDir, state_dir_option
from migplan.catalog import Catalog
from migplan.commands import Report, quiet, vgpu_plan
from migplan.commands.apply import ApplyRequest, ApplyResult, apply, repair_hosts
from migplan.commands.context import Context
from migplan.commands.fleet import FleetRequest, runner_for, select_hosts
from migplan.commands.pods import demand_from_pods
from migplan.commands.propose import ProposeRequest, planner_policy, planner_solver
from migplan.commands.vms import without_vms
from migplan.errors import EXIT_FAILURE, EXIT_OK
from migplan.files import check_output_option, write_atomic
from migplan.fleet.apply import GpuOutcome, half_done
from migplan.fleet.discover import discover_fleet
from migplan.fleet.snapshot import Snapshot
from migplan.inventory import Host
from migplan.model.state import FleetState, GpuKey
from migplan.planner import Plan, plan_problem, plan_to_dict
from migplan.planner.plan import SizingChoice
from migplan.planner.problem import build_problem
from migplan.planner.vm_demand import split_vms
from migplan.profiles import ProfileSet, Workload, check_models
from migplan.replan import metrics
from migplan.replan.decide import Decision, Standing, decide, in_cooldown, orphans, standing_now, standing_planned
from migplan.replan.policy import ReplanPolicy, parse_window

EXIT_NOTHING = EXIT_OK
EXIT_PARTIAL = EXIT_FAILURE
EXIT_FAILED = 3
EXIT_LOCKED = 4
EXIT_APPLIED = 5


@dataclass(frozen=True)
class ReplanRequest:
    fleet: FleetRequest = field(default_factory=FleetRequest)
    profiles: str | None = None
    state_dir: str | None = None  # None: config `replan.state_dir`, else /var/lib/migplan
    metrics_file: str | None = None  # node_exporter textfile (None: config `replan.metrics_file`, else none)
    dry_run: bool = False  # decide, then record the commands apply would run instead of running them
    # Profiles rolled up from this history (a host's store, or a directory of <host>.sqlite that
    # 'migplan collect --inventory' fetched) over the last `window_s` seconds up to now, instead of files.
    history: str | None = None
    window_s: float = 7 * 86400.0
    # Collect first: fetch every host's history store (or take a short nvidia-smi sample where there is
    # none) into STATE_DIR/fetched, as 'migplan collect --inventory' does, and plan from it.
    collect: bool = False
    remote_history: str | None = None  # the store's path on the hosts (None: collect's default)
    pods: str | None = None  # `kubectl get pods -A -o json`: their demand merged in (commands/pods.py)
    sizing: str | None = None  # `--sizing RULE|auto` (planner/sizing.py): the whole memory rule, over the config's
    target_oom: str | None = None  # --sizing auto: the target (commands/sizing.py)
    sizing_history: str | None = None  # --sizing auto: the history to calibrate from (default: `history`)


@dataclass(frozen=True)
class ReplanResult:
    result: str  # metrics.RESULTS
    line: str  # the decision (or the failure) in one line
    exit_code: int
    decision: Decision | None = None
    plan: Plan | None = None
    applied: ApplyResult | None = None
    solve_s: float | None = None
    apply_s: float | None = None
    run_id: str | None = None
    via: Mapping[str, Any] | None = None  # `--via gpu-operator`: the nodes held, the ConfigMap, the kubectl writes

    def to_dict(self) -> dict[str, Any]:
        out = {"run": self.run_id, "result": self.result, "line": self.line, "exit_code": self.exit_code,
               "reasons": list(self.decision.reasons) if self.decision else [],
               "gpus_freed": self.decision.gpus_freed if self.decision else None,
               "plan_fingerprint": self.plan.fingerprint if self.plan else None,
               "summary": dataclasses.asdict(self.plan.summary) if self.plan else None,
               "solve_s": self.solve_s, "apply_s": self.apply_s,
               "apply": self.applied.to_dict() if self.applied else None}
        return {**out, **self.via} if self.via is not None else out


def replan_policy(ctx: Context) -> ReplanPolicy:
    cfg = dict(ctx.config.replan)
    where = f"{ctx.config.source or 'config'}: replan.maintenance_windows"
    listed = cfg.pop("maintenance_windows", ()) or ()
    windows = tuple(parse_window(str(w), where) for w in (listed if isinstance(listed, (list, tuple)) else ()))
    known = {f.name for f in dataclasses.fields(ReplanPolicy)}
    return ReplanPolicy(windows=windows, **{k: v for k, v in cfg.items() if k in known})  # type: ignore[arg-type]  # checked per key when read


def _hold(state: FleetState, keys: set[GpuKey]) -> FleetState:
    return dataclasses.replace(state, gpus=tuple(dataclasses.replace(g, reserved=True) if g.key in keys else g
                                                 for g in state.gpus))


def _run_id(now: dt.datetime) -> str:
    return now.strftime("%Y%m%dT%H%M%S") + f"-{now.microsecond:06d}"


Body = Callable[[Context, ReplanRequest, StateDir, Report, dt.datetime], "ReplanResult"]


def replan(ctx: Context, req: ReplanRequest, *, report: Report = quiet, now: dt.datetime | None = None,
           connect: Callable[[Host], CommandRunner] | None = None, body: Body | None = None,
           sysfs_root: str | Mapping[str, str] = "/") -> ReplanResult:
    """One run (see the module notes). `connect` overrides SSH (tests, local hosts); `body` replaces the run itself
    inside the lock, the metrics file written after it (`commands.replan_k8s`: through the GPU Operator);
    `sysfs_root`: where hypervisor hosts' /sys is (tests only, as for discovery and apply)."""
    now = now or dt.datetime.now(dt.timezone.utc)
    state_dir = StateDir(req.state_dir or str(ctx.config.replan.get("state_dir") or DEFAULT_STATE_DIR),
                         state_dir_option(req.state_dir, ctx.config.replan.get("state_dir")))
    metrics_file = req.metrics_file or ctx.config.replan.get("metrics_file")
    if isinstance(metrics_file, str) and metrics_file:  # refused now, not after the GPUs changed
        check_output_option(metrics_file, "--metrics-file" if req.metrics_file else "replan.metrics_file")
    try:
        with state_dir.lock(), children.stop_on_signals():
            result = (body(ctx, req, state_dir, report, now) if body is not None else
                      _discover_plan_apply(ctx, req, state_dir, report, now, connect, sysfs_root))
    except Locked as e:
        return ReplanResult("locked", f"locked: {e}", EXIT_LOCKED)
    if isinstance(metrics_file, str) and metrics_file:
        s = result.plan.summary if result.plan else None
        risky = tuple(metrics.AtRisk(w.name, w.host, w.gpu, w.instance, w.margin_mib) for w in result.plan.workloads
                      if w.status == "at_risk" and w.host is not None and w.gpu is not None
                      and w.margin_mib is not None) if result.plan else None
        write_atomic(metrics_file, metrics.render(metrics.RunMetrics(
            finished_at=now.timestamp(), result=result.result,
            gpus_used=s.gpus_used if s else None, gpus_lower_bound=s.gpus_lower_bound if s else None,
            gap=result.plan.solve.gap if result.plan else None,
            workloads_unplaced=s.workloads_unplaced if s else None,
            workloads_at_risk=s.workloads_at_risk if s else None,
            idle_instances_kept=s.idle_kept if s else None,
            workloads_below_instance=standing_planned(result.plan).outgrown if result.plan else None,
            stranded_slices=s.stranded_slices if s else None,
            gpus_changed=sum(1 for h in result.applied.hosts for g in h.gpus if g.outcome is GpuOutcome.APPLIED)
            if result.applied and not result.applied.dry_run else 0,
            solve_seconds=result.solve_s, apply_seconds=result.apply_s,
            reasons=result.decision.reasons if result.decision else None,
            gpu_changed_at=tuple((h, i, t) for (h, i), t in state_dir.last_changed().items()),
            at_risk=risky)), mode=0o644)
    return result


def _collect(ctx: Context, req: ReplanRequest, inventory: Any, sd: StateDir, report: Report,
             connect: Callable[[Host], CommandRunner] | None) -> str:
    """Every host's history into STATE_DIR/fetched (hosts that fail are reported; their last copy stays)."""
    from migplan.adapters.pool import for_each_host
    from migplan.commands.collect import FleetCollect, collect_host

    out = sd.subdir("fetched")
    what = FleetCollect(out=str(out)) if req.remote_history is None else FleetCollect(
        out=str(out), remote_history=req.remote_history)

    def one(h: Host, runner: CommandRunner) -> object:
        return collect_host(runner, h, ctx.catalog, what, req.fleet.timeout)

    if connect is None:
        from migplan.adapters.ssh import SshFleet

        with SshFleet(req.fleet.ssh) as ssh:
            results = for_each_host(list(inventory.hosts), lambda h: one(h, runner_for(ssh, h)),
                                    parallel=req.fleet.parallel)
    else:
        results = for_each_host(list(inventory.hosts), lambda h: one(h, connect(h)), parallel=req.fleet.parallel)
    for r in results:
        if r.error is not None:
            report(f"warning: event=collect-failed host={r.host} {r.error}")
    report(f"info: event=collected hosts={sum(1 for r in results if r.error is None)}/{len(results)}")
    return str(out)


def _profiles(ctx: Context, req: ReplanRequest, now: dt.datetime, report: Report) -> ProfileSet:
    """The measured profiles this run plans for, without VM workloads (they need a hypervisor host: commands/vms.py);
    `replan --via gpu-operator` reads them here too."""
    return without_vms(_measured(ctx, req, now, report), None, ctx.catalog, report)[0]


def _profiles_and_vms(ctx: Context, req: ReplanRequest, now: dt.datetime, report: Report,
                      hypervisors: bool) -> tuple[ProfileSet, tuple[Workload, ...]]:
    """The measured profiles, and with hypervisor hosts the VM workloads apart (commands/vgpu_plan.py)."""
    if not hypervisors:
        return _profiles(ctx, req, now, report), ()
    return split_vms(_measured(ctx, req, now, report))


def _measured(ctx: Context, req: ReplanRequest, now: dt.datetime, report: Report) -> ProfileSet:
    if req.history is None:  # with --pods, profiles are optional: the pods' requests are demand on their own
        return ctx.profiles(req.profiles) if req.profiles or ctx.config.profiles or not req.pods else ProfileSet(())
    from migplan.adapters.history_store import read_samples
    from migplan.history.rollup import Window, rollup

    end = now.timestamp()
    start = None if req.window_s == float("inf") else end - req.window_s
    rolled = rollup(read_samples(req.history, since=start, until=end + 1), ctx.catalog, Window(start, end))
    report(f"info: event=profiles source={req.history} workloads={len(rolled.profiles)} "
           f"samples={rolled.samples_in_window}")
    pset = ProfileSet(tuple(p.workload for p in rolled.profiles), (req.history,))
    check_models(pset, ctx.catalog)
    return pset


def _discover(ctx: Context, req: ReplanRequest, inventory: Any, now: dt.datetime,
              connect: Callable[[Host], CommandRunner] | None, sysfs_root: str | Mapping[str, str] = "/") -> Snapshot:
    # the vGPUs of hypervisor hosts (an inventory `vgpu` setting) are read with the GPUs
    vgpu = any(h.vgpu is not None for h in inventory.hosts)
    if connect is None:
        from migplan.adapters.ssh import SshFleet

        with SshFleet(req.fleet.ssh) as ssh:
            return discover_fleet(inventory, ctx.catalog, lambda h: runner_for(ssh, h), parallel=req.fleet.parallel,
                                  timeout=req.fleet.timeout, now=now, vgpu=vgpu, sysfs_root=sysfs_root)
    return discover_fleet(inventory, ctx.catalog, connect, parallel=req.fleet.parallel, timeout=req.fleet.timeout,
                          now=now, vgpu=vgpu, sysfs_root=sysfs_root)


@dataclass(frozen=True)
class Repaired:
    hosts: tuple[str, ...] = ()  # hosts a repair ran on
    gpus: tuple[tuple[str, int, str], ...] = ()  # (host, GPU, what was done) of each GPU repaired
    failed: tuple[tuple[str, int, str], ...] = ()  # (host, GPU, why) where the repair did not work

    def line(self) -> str:
        if not self.gpus and not self.failed:
            return ""
        bad = f", {len(self.failed)} could not be" if self.failed else ""
        return f"repaired {len(self.gpus)} GPU(s) an interrupted apply left half-done{bad}"


def _repair(ctx: Context, req: ReplanRequest, inventory: Any, snap: Snapshot, sd: StateDir, run_id: str,
            report: Report, now: dt.datetime, connect: Callable[[Host], CommandRunner] | None) -> Repaired:
    """Before planning: every GPU an interrupted apply left half-done (its host's inflight.json) is finished to
    that apply's target or put back (`commands.apply.repair_hosts`). A host that cannot be reached keeps its
    record, and is repaired by the first run that reaches it. A dry run only says what it would repair."""
    broken = {h.name: half_done(h) for h in snap.hosts if h.ok}
    hosts = [h for h in inventory.hosts if broken.get(h.name)]
    if not hosts:
        return Repaired()
    if req.dry_run:
        for h in hosts:
            report(f"info: event=would-repair host={h.name} gpus={','.join(map(str, broken[h.name]))}")
        return Repaired()
    fixed = repair_hosts(ctx, hosts, req.fleet, journal=str(sd.subdir("journal") / f"{run_id}-repair.jsonl"),
                         report=report, now=now, connect=connect)
    done: list[tuple[str, int, str]] = []
    failed: list[tuple[str, int, str]] = []
    finished: list[tuple[str, int]] = []  # a GPU finished to the interrupted target has changed (cool-down)
    for r in fixed:
        if r.error is not None:
            report(f"warning: event=repair-failed host={r.host} {r.error}")
        for g in r.gpus:
            (done if g.outcome is GpuOutcome.REPAIRED else failed).append((r.host, g.gpu, g.reason))
            if g.repair == "finished":
                finished.append((r.host, g.gpu))
            report(f"info: event=repaired host={r.host} gpu={g.gpu} outcome={g.outcome.value} {g.reason}")
    if finished:
        sd.mark_changed(finished, now.timestamp())
    return Repaired(tuple(h.name for h in hosts), tuple(done), tuple(failed))


def _away(profiles: ProfileSet, snap: Snapshot, sd: StateDir, report: Report) -> ProfileSet:
    """Workloads whose place is on a host that did not answer now (its measured place, or the last assignments that
    host wrote) are held out of this run: they may well run there, and placing them elsewhere would give them two
    places once the host is back. They are planned again when their host answers."""
    answered = {h.name for h in snap.hosts if h.ok}
    placed = {a.workload: h.name for h in snap.hosts if h.ok and h.assignments for a in h.assignments.items}
    where = sd.remember_hosts(answered, placed)
    down = {h.name for h in snap.hosts if not h.ok}
    away = sorted(w.name for w in profiles.workloads if w.name not in placed and (
        w.observed.host in down or where.get(w.name) in down))
    if not away:
        return profiles
    report(f"warning: event=held-out workloads={len(away)} {', '.join(away[:10])}"
           f"{' ...' if len(away) > 10 else ''}: their host did not answer; they keep their place")
    return ProfileSet(tuple(w for w in profiles.workloads if w.name not in set(away)), profiles.sources)


@dataclass(frozen=True)
class Planned:
    """One run's plan and the decision on it (`plan_and_decide`)."""

    plan: Plan
    decision: Decision
    disrupt: bool  # running work may be moved now (replan.allow_disrupt, inside a maintenance window)
    orphans: list[str]
    solve_s: float


def plan_and_decide(ctx: Context, rp: ReplanPolicy, state: FleetState, profiles: ProfileSet, catalog: Catalog,
                    cooling: set[GpuKey], now: dt.datetime, *, source: str, exclude_held: bool = False,
                    sizing: str | None = None) -> Planned:
    """Plan `state` for `profiles` with the GPUs in `cooling` held as they are, and decide (hysteresis) whether the
    plan is worth applying; when the held GPUs keep demand left out or outgrown, the plan without the cool-down is
    used if it is urgent and serves more ("(cool-down overridden)"). The same rules for every replan (SSH and
    `--via gpu-operator`). `exclude_held`: the GPUs in use now are counted, as a plan counts them, without the GPUs
    the plan holds (a plan's `gpus_used` leaves held GPUs out; counted now, every held GPU with a workload on it
    would read as a GPU the plan frees). `sizing`: the memory rule (`--sizing`), else the config's."""
    disrupt = rp.may_disrupt(now)
    # moving running work is allowed only inside a window: then the planner consolidates within the budget
    overrides: dict[str, Any] = {"allow_disrupt": disrupt, "consolidate": disrupt,
                                 "max_moves": rp.max_moves if disrupt else None}
    policy = planner_policy(ctx, overrides, sizing)
    limit = None if "time_limit" in ctx.config.planner else rp.time_limit_s
    solver = planner_solver(ctx, ProposeRequest(time_limit=limit), policy)
    now_problem = build_problem(state, profiles, catalog, policy)
    now_standing = standing_now(now_problem)

    def now_for(plan: Plan) -> Standing:
        if not exclude_held:
            return now_standing
        held = {g.key for g in plan.gpus if g.hold is not None}
        used = {it.running for it in now_problem.items if it.running is not None and it.running in held}
        return dataclasses.replace(now_standing, gpus_used=now_standing.gpus_used - len(used))

    idle = orphans(now_problem)
    started = time.monotonic()
    # no budget curve: it is for an operator choosing --max-moves, and costs a re-solve per point
    chosen = plan_problem(build_problem(_hold(state, cooling), profiles, catalog, policy), solver,
                          source=source, curve=False)
    decision = decide(now_for(chosen), standing_planned(chosen), chosen, rp)
    planned = standing_planned(chosen)
    if cooling and (planned.left_out or planned.outgrown):
        free = plan_problem(build_problem(state, profiles, catalog, policy), solver, source=source, curve=False)
        urgent = decide(now_for(free), standing_planned(free), free, rp)
        better = standing_planned(free)
        if urgent.urgent and (better.left_out, better.outgrown) < (planned.left_out, planned.outgrown):
            chosen, decision = free, dataclasses.replace(urgent, line=urgent.line + " (cool-down overridden)")
    solve_s = time.monotonic() - started
    chosen = dataclasses.replace(chosen, created_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return Planned(chosen, decision, disrupt, idle, solve_s)


def replan_sizing(ctx: Context, req: ReplanRequest, sd: StateDir, now: dt.datetime,
                  report: Report) -> tuple[str | None, SizingChoice | None]:
    """The memory rule of this run: `--sizing RULE`, or with `sizing: auto` the rule commands/sizing.py resolves from
    the state directory's calibration (recalibrated from --sizing-history, sizing.history or the history this run
    plans from, at most once per cool-down), and what the plan records of that choice."""
    from migplan.commands.sizing import AutoRequest, check_options, resolve, wanted

    auto = AutoRequest(sizing=req.sizing, target_oom=req.target_oom, history=req.sizing_history,
                       state_dir=str(sd.path), default_history=req.history)
    check_options(ctx, auto, {})
    if not wanted(ctx, req.sizing):
        return req.sizing, None
    return resolve(ctx, auto, now=now.timestamp(), report=report)


def report_orphans(idle: list[str], report: Report) -> None:
    if idle:
        report(f"info: event=orphans instances={len(idle)} {' '.join(idle[:10])}{' ...' if len(idle) > 10 else ''}"
               ": no workload is assigned to or measured on them (a plan may reclaim them)")


def _discover_plan_apply(ctx: Context, req: ReplanRequest, sd: StateDir, report: Report, now: dt.datetime,
                         connect: Callable[[Host], CommandRunner] | None,
                         sysfs_root: str | Mapping[str, str] = "/") -> ReplanResult:
    """The run itself (`replan` holds the state directory's lock around it): discover, repair what an interrupted
    apply left, plan, decide, apply when worth it, and record the run in the state directory."""
    run_id = _run_id(now)
    rp = replan_policy(ctx)
    inventory = select_hosts(ctx.inventory(req.fleet.inventory), req.fleet.limit)
    snap = _discover(ctx, req, inventory, now, connect, sysfs_root)
    repaired = _repair(ctx, req, inventory, snap, sd, run_id, report, now, connect)
    if repaired.hosts:  # plan from what the repair left (those hosts are read again)
        snap = _discover(ctx, req, inventory, now, connect, sysfs_root)
    for h in snap.failed:
        report(f"warning: event=discover-failed host={h.name} {h.error}")
    state = snap.fleet_state(source="discovery", catalog=ctx.catalog)
    hyper = vgpu_plan.split(state, inventory, snap, report)  # hypervisor hosts: their GPUs hold VMs (issue 26)
    state = hyper.mig_state
    catalog = Catalog(ctx.catalog.models + state.models) if state.models else ctx.catalog
    if req.collect:
        req = dataclasses.replace(req, history=_collect(ctx, req, inventory, sd, report, connect))
    measured, vms = _profiles_and_vms(ctx, req, now, report, bool(hyper.vgpu_gpus))
    profiles = _away(measured, snap, sd, report)
    if req.pods:
        profiles = demand_from_pods(req.pods, state, catalog, profiles, inventory, report, ctx.kubectl)
    cooling = in_cooldown(sd.last_changed(), now.timestamp(), rp) & {g.key for g in state.gpus}
    rule, choice = replan_sizing(ctx, req, sd, now, report)
    made = plan_and_decide(ctx, rp, state, profiles, catalog, cooling, now, source="discovery", sizing=rule)
    report_orphans(made.orphans, report)
    chosen, decision, disrupt, idle, solve_s = made.plan, made.decision, made.disrupt, made.orphans, made.solve_s
    chosen = dataclasses.replace(chosen, sizing=choice)
    vgpu_only: Plan | None = None  # the vGPU changes alone, applied when the MIG part is not worth it
    if hyper.vgpu_gpus:  # the same policy as the MIG plan's: running VMs move only inside a disruption window
        policy = planner_policy(ctx, {"allow_disrupt": disrupt}, rule)
        limit = None if "time_limit" in ctx.config.planner else rp.time_limit_s
        vcool = frozenset(in_cooldown(sd.last_changed(), now.timestamp(), rp) & {g.key for g in hyper.vgpu_gpus})
        chosen, vgpu_only, decision = vgpu_plan.replan_vms(
            hyper, vms, chosen, decision, policy, planner_solver(ctx, ProposeRequest(time_limit=limit), policy),
            catalog, report, cooling=vcool)
    report(f"info: event=decision cooling={len(cooling)} disrupt={'yes' if disrupt else 'no'} {decision.line}")
    run: dict[str, Any] = {"id": run_id, "at": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "line": decision.line,
                           "reasons": list(decision.reasons), "cooling": sorted(f"{h}:{i}" for h, i in cooling),
                           "disrupt_allowed": disrupt, "dry_run": req.dry_run, "orphans": idle,
                           "summary": dataclasses.asdict(chosen.summary)}
    if choice is not None:
        run["sizing"] = dataclasses.asdict(choice)
    if repaired.gpus or repaired.failed:
        run["repaired"] = [{"host": h, "gpu": i, "reason": why} for h, i, why in (*repaired.gpus, *repaired.failed)]
    if not decision.apply:
        result = "nothing_to_do" if not chosen.summary.gpus_changed and vgpu_only is None else "not_applied"
        line, code = decision.line, EXIT_NOTHING
        if repaired.gpus or repaired.failed:  # the GPUs did change (or a repair failed): say so, exit as applied
            line = f"{repaired.line()}; {decision.line}"
            result, code = ("repaired", EXIT_APPLIED) if not repaired.failed else ("partial", EXIT_PARTIAL)
        sd.record(run_id, {**run, "result": result, "exit_code": code, "line": line}, plan_to_dict(chosen),
                  rp.keep_runs)
        return ReplanResult(result, line, code, decision, chosen, solve_s=solve_s, run_id=run_id)
    plan_path = sd.plan_path(run_id)
    documents.write_plan(plan_path, vgpu_only if vgpu_only is not None else chosen)
    started = time.monotonic()
    applied = apply(ctx, ApplyRequest(plan=str(plan_path), fleet=req.fleet, dry_run=req.dry_run,
                                      allow_disrupt=disrupt, journal=str(sd.subdir("journal") / f"{run_id}.jsonl")),
                    report=report, now=now, connect=connect, sysfs_root=sysfs_root)
    apply_s = time.monotonic() - started
    changed = [(h.host, g.gpu) for h in applied.hosts for g in h.gpus if g.outcome is GpuOutcome.APPLIED]
    if not req.dry_run:
        sd.mark_changed(changed, now.timestamp())
    code = applied.exit_code
    result, exit_code = (("applied", EXIT_APPLIED) if code == EXIT_OK else
                         ("partial", EXIT_PARTIAL) if code == EXIT_FAILURE else ("failed", EXIT_FAILED))
    line = decision.line if result == "applied" else f"{result}: {decision.line.removeprefix('applied: ')}"
    if repaired.line():
        line = f"{repaired.line()}; {line}"
    if req.dry_run:  # nothing changed: exit 0, the result says what a real run would have done
        line = "dry run, would apply: " + decision.line.removeprefix("applied: ")
        result, exit_code = ("would_apply", EXIT_NOTHING) if code == EXIT_OK else (result, exit_code)
    sd.record(run_id, {**run, "result": result, "exit_code": exit_code, "line": line, "gpus_changed": changed,
                       "apply": applied.to_dict()}, None, rp.keep_runs)
    return ReplanResult(result, line, exit_code, decision, chosen, applied, solve_s, apply_s, run_id)
