"""Apply a plan document to the fleet: every host in parallel, each GPU checkpointed, changed, verified
and rolled back on failure (`migplan.fleet.apply`); a dry run records the commands instead.

Exit codes (README, "Exit codes"): 0 every GPU ends as planned; 1 some did not (partial: the others
were applied); 3 nothing was applied (every change refused, skipped or rolled back); 2 bad input.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from migplan import documents
from migplan.adapters.pool import HostResult, for_each_host
from migplan.adapters.recording import RecordingRunner
from migplan.adapters.runner import CommandRunner, HostError
from migplan.catalog import Catalog
from migplan.commands import Report, quiet
from migplan.commands.context import Context
from migplan.commands.fleet import FleetRequest, runner_for, select_hosts
from migplan.errors import EXIT_FAILURE, EXIT_OK, InputError, MigplanError
from migplan.files import append_durable
from migplan.fleet.apply import ApplyOptions, GpuOutcome, GpuResult, HostApplyResult, apply_host
from migplan.fleet.assignments import Assignment, assignments, assignments_document, env_file, env_file_name
from migplan.fleet.discover import discover_host
from migplan.fleet.steps import is_read_only
from migplan.inventory import Host, hook_argv
from migplan.planner.plan import GpuPlan, Plan
from migplan.text import printable

EXIT_NOTHING_APPLIED = 3
DEFAULT_MAX_AGE_H = 24.0
GOOD = (GpuOutcome.APPLIED, GpuOutcome.UNCHANGED, GpuOutcome.WOULD_APPLY)


@dataclass(frozen=True)
class ApplyRequest:
    plan: str
    fleet: FleetRequest = field(default_factory=FleetRequest)
    dry_run: bool = False
    allow_disrupt: bool = False
    fail_fast: bool = False
    force_stale: bool = False
    max_age_h: float = DEFAULT_MAX_AGE_H
    journal: str | None = None  # JSON lines, one per event; None: no journal


@dataclass(frozen=True)
class HostReport:
    host: str
    gpus: tuple[GpuResult, ...] = ()
    error: str | None = None  # the host could not be applied at all (unreachable, pre-flight)
    commands: tuple[str, ...] = ()  # a dry run's recorded commands, in order
    assignments: tuple[Assignment, ...] = ()  # workload -> MIG device, as written on the host

    @property
    def ok(self) -> bool:
        return self.error is None and all(g.outcome in GOOD for g in self.gpus)


@dataclass(frozen=True)
class ApplyResult:
    plan: Plan
    hosts: tuple[HostReport, ...]
    dry_run: bool

    @property
    def exit_code(self) -> int:
        if all(h.ok for h in self.hosts):
            return EXIT_OK
        changed = [g for h in self.hosts for g in h.gpus if g.outcome is GpuOutcome.APPLIED]
        return EXIT_FAILURE if changed else EXIT_NOTHING_APPLIED

    def to_dict(self) -> dict[str, Any]:
        return {"plan_fingerprint": self.plan.fingerprint, "dry_run": self.dry_run, "exit_code": self.exit_code,
                "hosts": [{"host": h.host, "ok": h.ok, "error": h.error, "commands": list(h.commands),
                           "assignments": [{"workload": a.workload, "gpu": a.gpu, "instance": a.instance,
                                            "device": a.device} for a in h.assignments],
                           "gpus": [{"gpu": g.gpu, "outcome": g.outcome.value, "reason": g.reason,
                                     "commands": list(g.commands), "layout": g.layout} for g in h.gpus]}
                          for h in self.hosts]}


class _Journal:
    """JSON lines appended durably as the apply goes, so a crash leaves everything up to the crash."""

    def __init__(self, path: str | None, now: dt.datetime | None) -> None:
        self.path = path
        self.now = now
        self._lock = threading.Lock()

    def __call__(self, host: str, event: dict[str, Any]) -> None:
        if self.path is None:
            return
        stamp = (self.now or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        line = json.dumps({"at": stamp, "host": host, **event}, sort_keys=True) + "\n"
        with self._lock:
            append_durable(self.path, line)


def _check_age(plan: Plan, req: ApplyRequest, now: dt.datetime) -> None:
    if req.force_stale or plan.created_at is None:
        return
    made = dt.datetime.strptime(plan.created_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    age_h = (now - made).total_seconds() / 3600
    if age_h > req.max_age_h:
        raise InputError(f"the plan was made {age_h:.1f} h ago (at {plan.created_at}), more than {req.max_age_h:g} h",
                         source=req.plan, hint="re-plan with 'migplan propose', or pass --force-stale")


def _by_host(plan: Plan, hosts: Sequence[Host]) -> dict[str, list[GpuPlan]]:
    names = {h.name for h in hosts}
    out: dict[str, list[GpuPlan]] = {}
    for g in plan.gpus:
        if g.host in names and (g.actions or g.hold is None):
            out.setdefault(g.host, []).append(g)
    return out


def _write_assignments(runner: CommandRunner, host: Host, plan: Plan, catalog: Catalog, options: ApplyOptions,
                       stamp: str) -> tuple[Assignment, ...]:
    """Read the host once more (the MIG device UUIDs are new) and write where each workload's device is."""
    record = discover_host(runner, host, catalog, timeout=options.timeout)
    items = assignments(plan, record)
    env_dir = f"{host.state_dir}/env"
    mkdir = runner.run(["mkdir", "-p", "--", env_dir], timeout=options.timeout)
    if not mkdir.ok:
        raise HostError(host.name, f"cannot create {env_dir}: {printable(mkdir.stderr, 200)}")
    runner.put_file(f"{host.state_dir}/assignments.json",
                    assignments_document(host.name, plan, items, stamp).encode(), mode=0o644,
                    timeout=options.timeout)
    taken: set[str] = set()
    for a in items:
        runner.put_file(f"{env_dir}/{env_file_name(a.workload, taken)}", env_file(a).encode(), mode=0o644,
                        timeout=options.timeout)
    return tuple(items)


def _hooks(runner: CommandRunner, host: Host, stage: str, lines: Sequence[str], env: dict[str, str],
           journal: _Journal, options: ApplyOptions) -> str | None:
    """Run the host's hooks for `stage` in order (through `env`, so they see MIGPLAN_* variables); the
    first failure stops them and is returned."""
    for line in lines:
        argv = ["env", *(f"{k}={v}" for k, v in sorted(env.items())), *hook_argv(line)]
        done = runner.run(argv, timeout=options.timeout)
        journal(host.name, {"event": "hook", "stage": stage, "argv": argv, "exit_code": done.exit_code,
                            "stdout": done.stdout[-4000:], "stderr": done.stderr[-4000:]})
        if not done.ok:
            why = printable(done.stderr or done.stdout, 200)
            return f"{stage} hook {line!r} failed (exit {done.exit_code}){': ' + why if why else ''}"
    return None


def apply(ctx: Context, req: ApplyRequest, *, report: Report = quiet, now: dt.datetime | None = None,
          connect: Any = None) -> ApplyResult:
    """`connect(host) -> CommandRunner` overrides SSH (tests, `connection: local`)."""
    plan = documents.load_plan(req.plan, ctx.catalog)
    _check_age(plan, req, now or dt.datetime.now(dt.timezone.utc))
    inventory = select_hosts(ctx.inventory(req.fleet.inventory), req.fleet.limit)
    work = _by_host(plan, inventory.hosts)
    hosts = [h for h in inventory.hosts if h.name in work]
    unknown = sorted({g.host for g in plan.gpus if g.actions} - {h.name for h in ctx.inventory(
        req.fleet.inventory).hosts})
    if unknown:
        report(f"warning: the plan changes host(s) not in the inventory, left alone: {', '.join(unknown[:10])}")
    catalog = Catalog((*plan.models, *ctx.catalog.models))  # models built from hosts' own tables first
    options = ApplyOptions(allow_disrupt=req.allow_disrupt, dry_run=req.dry_run, timeout=req.fleet.timeout)
    journal = _Journal(None if req.dry_run else req.journal, now)
    stop = threading.Event()
    stamp = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")

    def one(host: Host, runner: CommandRunner) -> HostReport:
        if stop.is_set():
            return HostReport(host.name, error="not started: an earlier host failed (--fail-fast)")
        target: CommandRunner = RecordingRunner(runner, read_only=is_read_only) if req.dry_run else runner
        journal(host.name, {"event": "start", "plan": plan.fingerprint, "dry_run": req.dry_run})
        changed = [g.index for g in work[host.name] if g.actions]
        env = {"MIGPLAN_HOST": host.name, "MIGPLAN_PLAN": plan.fingerprint,
               "MIGPLAN_GPUS": ",".join(map(str, changed))}

        def recorded() -> tuple[str, ...]:
            return tuple(str(c) for c in target.commands) if isinstance(target, RecordingRunner) else ()

        failed = _hooks(target, host, "pre_apply", host.hooks.pre_apply if changed else (), env, journal, options)
        if failed:
            return HostReport(host.name, error=f"nothing changed: {failed}", commands=recorded())
        res: HostApplyResult = apply_host(target, host, work[host.name], catalog, options,
                                          lambda e: journal(host.name, e))
        outcome = "ok" if all(g.outcome in GOOD for g in res.gpus) else "partial"
        written: tuple[Assignment, ...] = ()
        if not req.dry_run:
            try:
                written = _write_assignments(target, host, plan, catalog, options, stamp)
            except (HostError, MigplanError) as err:
                return HostReport(host.name, res.gpus, error=f"applied, but the assignments were not written: {err}")
        failed = _hooks(target, host, "post_apply", host.hooks.post_apply if changed else (),
                        {**env, "MIGPLAN_RESULT": outcome}, journal, options)
        rep = HostReport(host.name, res.gpus, error=failed, commands=recorded(), assignments=written)
        if req.fail_fast and not rep.ok:
            stop.set()
        journal(host.name, {"event": "end", "ok": rep.ok})
        return rep

    def on_done(done: int, total: int, r: HostResult[HostReport]) -> None:
        if r.value is not None:
            summary = ", ".join(f"GPU {g.gpu} {g.outcome.value}" for g in r.value.gpus) or "nothing to do"
            report(f"[{done}/{total}] {r.host}: {summary}")
        elif r.error is not None:
            report(f"[{done}/{total}] {r.host}: FAILED ({r.error.code}) {r.error.detail}")

    if connect is None:
        from migplan.adapters.ssh import SshFleet

        with SshFleet(req.fleet.ssh) as ssh:
            results = for_each_host(hosts, lambda h: one(h, runner_for(ssh, h)), parallel=req.fleet.parallel,
                                    on_done=on_done)
    else:
        results = for_each_host(hosts, lambda h: one(h, connect(h)), parallel=req.fleet.parallel, on_done=on_done)
    reports = tuple(r.value if r.value is not None else HostReport(r.host, error=str(r.error)) for r in results)
    return ApplyResult(plan, reports, req.dry_run)
