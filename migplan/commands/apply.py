"""Apply a plan document to the fleet: every host in parallel, each GPU checkpointed, changed, verified
and rolled back on failure (`migplan.fleet.apply`); a dry run records the commands instead.

After a host is applied it gets, in its `state_dir`, `assignments.json`, one `env/<workload>.env` per workload
whose instance exists after the verification, and `last-applied.json` (the layouts as read after the apply);
every other env file migplan wrote there is removed (a workload moved to another host, rolled back, gone from
the plan), nothing else is. All of them in ONE round trip (`runner.put_files`, `_write_assignments`), and a
file whose content is already there is not rewritten. As the login user that is one SFTP session. With a
become prefix (`sudo -n`) it is one exec of a shell script on the host, `sh -c FILES_SCRIPT`
(migplan.adapters.runner): the script is a constant of migplan, the same text on every host and every call,
so no host data is ever on a command line; the directory, names, modes and contents travel on its stdin in a
framed form (sizes, then the bytes, then an end marker), which the script checks again; names are plain
(`NAME` or `env/NAME`, letters, digits and `._-`); nothing is replaced before the whole upload has arrived;
each file goes to a fresh temporary name, is chmod-ed and renamed over its name (`mv -f -T`) only when it
differs (`cmp -s`); and a symbolic link where the state directory or env/ should be is refused. Before, each
file cost three round trips under become (tee, chmod, mv) and was rewritten on every apply.
The fleet's map is also written locally (`--state-dir`, else next to the plan). `apply_last` re-applies
`last-applied.json` on this machine (boot), and reconciles the env files in the same way.

Exit codes (README, "Exit codes"): 0 every GPU ends as planned; 1 some did not (partial: the others
were applied); 3 nothing was applied (every change refused, skipped or rolled back); 2 bad input.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import socket
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from migplan import documents, names
from migplan.adapters import children
from migplan.adapters.pool import HostResult, for_each_host
from migplan.adapters.recording import RecordingRunner
from migplan.adapters.runner import CommandRunner, FileToPut, HostError, LocalRunner, Prune
from migplan.adapters.smi_session import SmiSession
from migplan.catalog import Catalog
from migplan.commands import Report, quiet
from migplan.commands.context import Context
from migplan.commands.fleet import FleetRequest, runner_for, select_hosts
from migplan.errors import EXIT_FAILURE, EXIT_OK, InputError, MigplanError
from migplan.files import append_durable, check_trusted_dir, json_depth_ok, read_trusted, write_atomic
from migplan.fleet.apply import (
    ApplyOptions,
    GpuOutcome,
    GpuResult,
    HostApplyResult,
    MoveEvent,
    apply_host,
    device_record,
)
from migplan.fleet.assignments import (
    ENV_PRUNE_RULE,
    LAST_APPLIED_FILE,
    MAX_LAST_APPLIED_BYTES,
    AppliedGpu,
    Assignment,
    LastApplied,
    Placement,
    fleet_assignments_document,
    host_files,
    last_applied_document,
    move_document,
    parse_last_applied,
    placements,
    present,
)
from migplan.fleet.discover import discover_host, root_of
from migplan.fleet.outcomes import GOOD
from migplan.fleet.steps import is_read_only
from migplan.fleet.vgpu_apply import apply_vgpu_host
from migplan.fleet.vgpu_apply import read_only as vgpu_read_only
from migplan.inventory import DEFAULT_LOCK_FILE, DEFAULT_STATE_DIR, Host, hook_argv
from migplan.model.diff import diff
from migplan.model.gpu_plan import GpuPlan, Migration
from migplan.model.vgpu import VgpuGpuPlan
from migplan.planner.plan import Plan
from migplan.smi.vgpu_commands import SRIOV_MANAGE
from migplan.text import printable

EXIT_NOTHING_APPLIED = 3
K8S_LABEL = "k8s.mig.strategy"  # inventory.k8s_nodes marks each host it reads from a node with it
DEFAULT_MAX_AGE_H = 24.0


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
    state_dir: str | None = None  # where the fleet's assignments map is written locally; None: next to the plan


@dataclass(frozen=True)
class ApplyResult:
    plan: Plan | None  # None: `apply --last` (the layout came from the host's last-applied.json)
    hosts: tuple[HostApplyResult, ...]
    dry_run: bool
    fingerprint: str = ""
    local_assignments: str | None = None  # the local copy of the fleet's map (None: not written)

    @property
    def plan_fingerprint(self) -> str:
        return self.plan.fingerprint if self.plan is not None else self.fingerprint

    @property
    def exit_code(self) -> int:
        if all(h.ok for h in self.hosts):
            return EXIT_OK
        changed = [g for h in self.hosts for g in h.gpus if g.outcome is GpuOutcome.APPLIED]
        return EXIT_FAILURE if changed else EXIT_NOTHING_APPLIED

    def to_dict(self) -> dict[str, Any]:
        return {"plan_fingerprint": self.plan_fingerprint, "dry_run": self.dry_run, "exit_code": self.exit_code,
                "local_assignments": self.local_assignments,
                "hosts": [{"host": h.host, "ok": h.ok, "error": h.error, "commands": list(h.commands),
                           "assignments": [{"workload": a.workload, "gpu": a.gpu, "instance": a.instance,
                                            "device": a.device} for a in h.assignments],
                           "moves": list(h.moves), "placement_check": h.placement_source,
                           "gpus": [{"gpu": g.gpu, "outcome": g.outcome.value, "reason": g.reason,
                                     "commands": list(g.commands), "layout": g.layout,
                                     "reset_needed": list(g.reset_needed), "repair": g.repair} for g in h.gpus]}
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
    """--max-age: refuse a plan older than it, or dated later than now (beyond names.CLOCK_SKEW_S): a wrong
    clock where it was made, or an edited date, would otherwise keep it fresh forever."""
    if req.force_stale or plan.created_at is None:
        return
    made = names.utc_stamp(plan.created_at)
    if made is None:  # the plan reader refuses these; a Plan built in code may still carry one
        raise InputError(f"created_at: {plan.created_at[:60]!r} is not a UTC time such as {names.UTC_STAMP_EXAMPLE}",
                         source=req.plan, hint="re-plan with 'migplan propose', or pass --force-stale")
    age_s = (now - made).total_seconds()
    if age_s < -names.CLOCK_SKEW_S:
        raise InputError(f"created_at: the plan is dated {plan.created_at}, {-age_s / 3600:.1f} h in the future "
                         f"(more than the {names.CLOCK_SKEW_S} s of clock skew allowed)", source=req.plan,
                         hint="check the clocks of this machine and the one that planned (NTP), re-plan with "
                              "'migplan propose', or pass --force-stale")
    age_h = age_s / 3600
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


def _vgpu_by_host(plan: Plan, hosts: Sequence[Host]) -> dict[str, list[VgpuGpuPlan]]:
    """The hypervisor hosts' GPUs the plan's `vgpu` section changes (none without one)."""
    names = {h.name for h in hosts}
    out: dict[str, list[VgpuGpuPlan]] = {}
    for g in plan.vgpu.gpus if plan.vgpu is not None else ():
        if g.observed.host in names and g.actions:
            out.setdefault(g.observed.host, []).append(g)
    return out


def _write_assignments(runner: CommandRunner, host: Host, items: Sequence[Placement], fingerprint: str,
                       catalog: Catalog, options: ApplyOptions, stamp: str,
                       record: Any = None, *, last: LastApplied | None = None,
                       journal: _Journal | None = None,
                       extra: Sequence[FileToPut] = ()) -> tuple[tuple[Assignment, ...], Any]:
    """Write where each workload's device is, from `record` (the apply's last read, under the lock: the MIG
    device UUIDs are new), or read the host once more when the apply could not; the read is returned too.

    All of the host's files in ONE round trip (`runner.put_files`): an env file for each workload whose instance
    exists as read (`present`: a rolled-back GPU's new instances do not, so their workloads get none),
    assignments.json listing exactly those, last-applied.json (`last`, with the layouts as read), and the
    removal of every other env file migplan wrote in env/ (a workload moved to another host, rolled back, or
    gone from the plan; `ENV_PRUNE_RULE`: nothing migplan did not write), and `extra` (inflight.json as the apply
    leaves it, fleet/inflight.py). A file whose content and mode are
    already there is not rewritten (its mtime is kept). The journal gets a `files` event: what was written,
    left alone and removed."""
    if record is None:
        record = device_record(SmiSession(runner, timeout=options.timeout), host.name)
    found = present(items, record)
    last_text = last_applied_document(_as_read(last, record)) if last is not None else None
    files = [FileToPut(name, text.encode(), 0o644)
             for name, text in host_files(host.name, fingerprint, items, found, stamp, last_text)] + list(extra)
    done = runner.put_files(host.state_dir, files, prune=Prune(*ENV_PRUNE_RULE), timeout=options.timeout)
    if journal is not None:
        journal(host.name, {"event": "files", "directory": host.state_dir, "written": list(done.written),
                            "unchanged": list(done.unchanged), "removed": list(done.removed)})
    return tuple(found), record


def _as_read(last: LastApplied, record: Any) -> LastApplied:
    """The layouts as read after the apply (a GPU skipped or rolled back keeps what it has): what --last must
    re-create is what is on the host, not what the plan hoped for."""
    now = {g.index: g for g in record.gpus}
    return dataclasses.replace(last, gpus=tuple(
        AppliedGpu(a.index, a.uuid, a.model, now[a.index].layout) if a.index in now else a for a in last.gpus))


def _last_applied(host: Host, plan: Plan, gpus: Sequence[GpuPlan], catalog: Catalog, stamp: str,
                  items: Sequence[Placement] | None = None) -> LastApplied:
    """What `apply --last` re-creates on this host after a reboot: every GPU of the plan here that is not held."""
    applied = tuple(AppliedGpu(g.index, g.uuid, catalog.get(g.model).base_id, g.target)
                    for g in sorted(gpus, key=lambda g: g.index) if g.hold is None)
    return LastApplied(host.name, plan.fingerprint, stamp, applied,
                       tuple(placements(plan.workloads, host.name) if items is None else items))


@dataclass(frozen=True)
class _PerHost:
    """The plan's GPUs, placements and migrations of each host, grouped in one pass over the plan: finding them
    with a scan of the whole plan for every host was O(hosts x GPUs), minutes for a 200,000-GPU plan
    (bench/scale_bounds.py)."""

    gpus: dict[str, list[GpuPlan]]
    items: dict[str, list[Placement]]
    moves: dict[str, list[Migration]]


def _per_host(plan: Plan, migrations: Sequence[Migration]) -> _PerHost:
    gpus: dict[str, list[GpuPlan]] = {}
    for g in plan.gpus:
        gpus.setdefault(g.host, []).append(g)
    items: dict[str, list[Placement]] = {}
    for w in plan.workloads:  # as assignments.placements(plan.workloads, host), for every host at once
        if w.on_gpu and w.host is not None and w.gpu is not None:
            items.setdefault(w.host, []).append(Placement(w.name, w.gpu, w.instance))
    moves: dict[str, list[Migration]] = {}
    for m in migrations:
        for h in dict.fromkeys((m.source.host, m.target.host if m.target else None)):
            if h is not None:
                moves.setdefault(h, []).append(m)
    return _PerHost(gpus, items, moves)


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


def _instance_env(e: Any) -> str:
    return "" if e is None else f"{e.gpu}:{e.instance}" if e.instance is not None else f"{e.gpu}:whole"


class _MoveHooks:
    """The `on_move` hooks of one host: per moved workload, MIGPLAN_* variables and a JSON file on the host."""

    def __init__(self, runner: CommandRunner, host: Host, fingerprint: str, journal: _Journal,
                 options: ApplyOptions) -> None:
        self.runner, self.host, self.fingerprint, self.journal, self.options = runner, host, fingerprint, journal, \
            options
        self.seen: list[dict[str, Any]] = []

    def __call__(self, event: MoveEvent) -> str | None:
        path = f"{self.host.state_dir}/move.json"
        record: dict[str, Any] = {"workload": event.workload, "phase": event.phase, "gpus": list(event.gpus),
                  "old_instance": _instance_env(event.source), "new_instance": _instance_env(event.target),
                  "old_device": event.old_device, "new_device": event.new_device}
        self.seen.append(record)
        self.journal(self.host.name, {"event": "move", **record})
        if not self.host.hooks.on_move:
            return None
        mkdir = self.runner.run(["mkdir", "-p", "--", self.host.state_dir], timeout=self.options.timeout)
        if not mkdir.ok:
            return f"cannot create {self.host.state_dir}: {printable(mkdir.stderr, 200)}"
        self.runner.put_file(path, move_document(self.host.name, self.fingerprint, event).encode(), mode=0o644,
                             timeout=self.options.timeout)
        env = {"MIGPLAN_HOST": self.host.name, "MIGPLAN_PLAN": self.fingerprint, "MIGPLAN_WORKLOAD": event.workload,
               "MIGPLAN_MOVE_PHASE": event.phase, "MIGPLAN_GPUS": ",".join(map(str, event.gpus)),
               "MIGPLAN_OLD_INSTANCE": _instance_env(event.source), "MIGPLAN_NEW_INSTANCE": _instance_env(event.target),
               "MIGPLAN_OLD_DEVICE": event.old_device or "", "MIGPLAN_NEW_DEVICE": event.new_device or "",
               "MIGPLAN_MOVE_FILE": path}
        return _hooks(self.runner, self.host, "on_move", self.host.hooks.on_move, env, self.journal, self.options)


def _vgpu_hosts(plan: Plan) -> set[str]:
    return {g.observed.host for g in plan.vgpu.gpus if g.actions} if plan.vgpu is not None else set()


def _migrations(plan: Plan) -> tuple[Migration, ...]:
    """`Plan.migrations` (the planner's ordered moves, `planner/migration.py`); () for plans without them."""
    found = getattr(plan, "migrations", ())
    return tuple(found or ())


def _local_path(req: ApplyRequest) -> str:
    if req.state_dir is not None:
        return os.path.join(req.state_dir, "assignments.json")
    base = req.plan[:-5] if req.plan.endswith(".json") else req.plan
    return base + ".assignments.json"


def _stamp(now: dt.datetime | None) -> str:
    return (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")


def apply_one_host(host: Host, runner: CommandRunner, gpus: Sequence[GpuPlan], catalog: Catalog, *, fingerprint: str,
               items: Sequence[Placement], last: LastApplied | None, migrations: Sequence[Migration],
               dry_run: bool, options: ApplyOptions, journal: _Journal, stamp: str) -> HostApplyResult:
    """One host: pre_apply hooks, the apply, assignments (and last-applied) on the host, post_apply hooks."""
    target: CommandRunner = RecordingRunner(runner, read_only=is_read_only) if dry_run else runner
    journal(host.name, {"event": "start", "plan": fingerprint, "dry_run": dry_run})
    changed = [g.index for g in gpus if g.actions]
    env = {"MIGPLAN_HOST": host.name, "MIGPLAN_PLAN": fingerprint, "MIGPLAN_GPUS": ",".join(map(str, changed))}

    def recorded() -> tuple[str, ...]:
        return tuple(str(c) for c in target.commands) if isinstance(target, RecordingRunner) else ()

    failed = _hooks(target, host, "pre_apply", host.hooks.pre_apply if changed else (), env, journal, options)
    if failed:
        return HostApplyResult(host.name, failure=f"nothing changed: {failed}", commands=recorded())
    moves = _MoveHooks(target, host, fingerprint, journal, options)
    wrote: dict[str, Any] = {}

    def files(res: HostApplyResult) -> None:
        """The host's files, under its apply lock (`apply_host` calls this), with the settled inflight.json."""
        if dry_run:
            return
        try:
            keep = last if last is not None and any(g.outcome in GOOD for g in res.gpus) else None
            wrote["written"], _ = _write_assignments(target, host, items, fingerprint, catalog, options, stamp,
                                                     res.devices, last=keep, journal=journal,
                                                     extra=(res.inflight,) if res.inflight is not None else ())
        except (HostError, MigplanError) as err:
            wrote["error"] = err

    res: HostApplyResult = apply_host(target, host, gpus, catalog, options, lambda e: journal(host.name, e),
                                      migrations=migrations, on_move=moves, plan_id=fingerprint, files=files)
    if res.preflight is not None:
        return dataclasses.replace(res, commands=recorded())
    ok = all(g.outcome in GOOD for g in res.gpus)
    written: tuple[Assignment, ...] = wrote.get("written", ())
    if "error" in wrote:
        # no commands and no placement check reported here, as it always was
        return dataclasses.replace(res, placement_source="", failure=f"applied, but the assignments were not "
                                   f"written: {wrote['error']}", moves=tuple(moves.seen))
    failed = _hooks(target, host, "post_apply", host.hooks.post_apply if changed else (),
                    {**env, "MIGPLAN_RESULT": "ok" if ok else "partial"}, journal, options)
    rep = dataclasses.replace(res, failure=failed, commands=recorded(), assignments=written, moves=tuple(moves.seen))
    journal(host.name, {"event": "end", "ok": rep.ok})
    return rep


def apply_vgpu_one_host(host: Host, runner: CommandRunner, gpus: Sequence[VgpuGpuPlan], catalog: Catalog, *,
                        fingerprint: str, dry_run: bool, options: ApplyOptions, journal: _Journal,
                        sysfs_root: str = "/", sriov_manage: str = SRIOV_MANAGE) -> HostApplyResult:
    """One hypervisor host's vGPUs (`fleet.vgpu_apply`): pre_apply hooks, the apply, post_apply hooks. No files are
    written on the host (no MIG devices or env files: a VM is given its vGPU by the hypervisor's tooling)."""
    target: CommandRunner = RecordingRunner(runner, read_only=vgpu_read_only) if dry_run else runner
    journal(host.name, {"event": "start", "plan": fingerprint, "dry_run": dry_run, "vgpu": True})
    changed = [g.observed.index for g in gpus if g.actions]
    env = {"MIGPLAN_HOST": host.name, "MIGPLAN_PLAN": fingerprint, "MIGPLAN_GPUS": ",".join(map(str, changed))}
    failed = _hooks(target, host, "pre_apply", host.hooks.pre_apply if changed else (), env, journal, options)
    if failed:
        return HostApplyResult(host.name, failure=f"nothing changed: {failed}")
    res = apply_vgpu_host(target, host, gpus, catalog, options, lambda e: journal(host.name, e),
                          sysfs_root=sysfs_root, sriov_manage=sriov_manage)
    if res.preflight is not None:
        return res
    ok = all(g.outcome in GOOD for g in res.gpus)
    failed = _hooks(target, host, "post_apply", host.hooks.post_apply if changed else (),
                    {**env, "MIGPLAN_RESULT": "ok" if ok else "partial"}, journal, options)
    rep = dataclasses.replace(res, failure=failed)
    journal(host.name, {"event": "end", "ok": rep.ok})
    return rep


def _together(mig: HostApplyResult, vgpu: HostApplyResult) -> HostApplyResult:
    """A host with GPUs in both parts of the plan: one result."""
    return dataclasses.replace(mig, gpus=(*mig.gpus, *vgpu.gpus), commands=(*mig.commands, *vgpu.commands),
                               preflight=mig.preflight or vgpu.preflight, failure=mig.failure or vgpu.failure)


def _progress(report: Report) -> Any:
    def on_done(done: int, total: int, r: HostResult[HostApplyResult]) -> None:
        if r.value is not None:
            summary = ", ".join(f"GPU {g.gpu} {g.outcome.value}" for g in r.value.gpus) or r.value.error or \
                "nothing to do"
            report(f"[{done}/{total}] {r.host}: {printable(summary, 300)}")
        elif r.error is not None:
            report(f"[{done}/{total}] {r.host}: FAILED ({r.error.code}) {r.error.detail}")
    return on_done


def apply(ctx: Context, req: ApplyRequest, *, report: Report = quiet, now: dt.datetime | None = None,
          connect: Any = None, sysfs_root: str | Mapping[str, str] = "/",
          sriov_manage: str = SRIOV_MANAGE) -> ApplyResult:
    """`connect(host) -> CommandRunner` overrides SSH (tests, `connection: local`). The hypervisor hosts of the plan's
    `vgpu` section are applied by `fleet.vgpu_apply` (`sysfs_root`, `sriov_manage`: for tests, as in discovery)."""
    plan = documents.load_plan(req.plan, ctx.catalog)
    _check_age(plan, req, now or dt.datetime.now(dt.timezone.utc))
    whole = ctx.inventory(req.fleet.inventory)  # read once
    inventory = select_hosts(whole, req.fleet.limit)
    work = _by_host(plan, inventory.hosts)
    vwork = _vgpu_by_host(plan, inventory.hosts)
    hosts = [h for h in inventory.hosts if h.name in work or h.name in vwork]
    owned = [h.name for h in hosts if any(k == K8S_LABEL for k, _ in h.labels)]
    if owned:  # the MIG manager would put its config back over ours (or fail half-way): never fight it
        raise InputError(f"{', '.join(owned[:5])}{' ...' if len(owned) > 5 else ''}: Kubernetes node(s) from "
                         "'kubectl get nodes', whose MIG layout the GPU Operator's MIG manager owns; nothing was "
                         "applied over SSH", source=os.fspath(req.plan),
                         hint="apply through the MIG manager: migplan apply PLAN --via gpu-operator "
                              "(docs/kubernetes.md)")
    every = {h.name for h in whole.hosts}
    unknown = sorted(({g.host for g in plan.gpus if g.actions} | _vgpu_hosts(plan)) - every)
    if unknown and not req.fleet.limit:  # nothing of those would be applied, and exit 0 would say all was
        more = f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
        raise InputError(f"the plan changes host(s) that are not in the inventory: {', '.join(unknown[:10])}{more}; "
                         "nothing was applied", source=os.fspath(req.plan),
                         hint="pass the inventory the plan was made from, or --limit to apply only the hosts named")
    if unknown:  # --limit named what to apply: the rest is left alone on purpose
        report(f"warning: the plan changes host(s) not in the inventory, left alone: {', '.join(unknown[:10])}")
    catalog = Catalog((*plan.models, *ctx.catalog.models))  # models built from hosts' own tables first
    options = ApplyOptions(allow_disrupt=req.allow_disrupt, dry_run=req.dry_run, timeout=req.fleet.timeout)
    journal = _Journal(None if req.dry_run else req.journal, now)
    stop = threading.Event()
    stamp = _stamp(now)
    per = _per_host(plan, _migrations(plan))

    def one(host: Host, runner: CommandRunner) -> HostApplyResult:
        if stop.is_set():
            return HostApplyResult(host.name, failure="not started: an earlier host failed (--fail-fast)")
        if host.name in vwork:
            vrep = apply_vgpu_one_host(host, runner, vwork[host.name], catalog, fingerprint=plan.fingerprint,
                                       dry_run=req.dry_run, options=options, journal=journal,
                                       sysfs_root=root_of(sysfs_root, host.name), sriov_manage=sriov_manage)
            if host.name not in work:
                if req.fail_fast and not vrep.ok:
                    stop.set()
                return vrep
        items = per.items.get(host.name, [])
        rep = apply_one_host(host, runner, work[host.name], catalog, fingerprint=plan.fingerprint, items=items,
                         last=_last_applied(host, plan, per.gpus.get(host.name, []), catalog, stamp, items),
                         migrations=per.moves.get(host.name, []), dry_run=req.dry_run, options=options,
                         journal=journal, stamp=stamp)
        if host.name in vwork:
            rep = _together(rep, vrep)
        if req.fail_fast and not rep.ok:
            stop.set()
        return rep

    with children.stop_on_signals():  # SIGTERM/INT/HUP: stop at once with every child; the next run repairs
        if connect is None:
            from migplan.adapters.ssh import SshFleet

            with SshFleet(req.fleet.ssh) as ssh:
                results = for_each_host(hosts, lambda h: one(h, runner_for(ssh, h)), parallel=req.fleet.parallel,
                                        on_done=_progress(report))
        else:
            results = for_each_host(hosts, lambda h: one(h, connect(h)), parallel=req.fleet.parallel,
                                    on_done=_progress(report))
    reports = tuple(_applied_or_failed(r) for r in results)
    local = None
    if not req.dry_run:
        local = _local_path(req)
        try:
            write_atomic(local, fleet_assignments_document(plan.fingerprint, {h.host: h.assignments for h in reports
                                                                              if h.assignments}, stamp))
        except (InputError, OSError) as err:  # the hosts are applied already: say so, do not fail the apply
            report(f"warning: the local copy of the assignments was not written to {local}: {err} "
                   "(pass --state-dir DIR)")
            local = None
    return ApplyResult(plan, reports, req.dry_run, local_assignments=local)


def repair_hosts(ctx: Context, hosts: Sequence[Host], fleet: FleetRequest, *, journal: str | None = None,
                 report: Report = quiet, now: dt.datetime | None = None, connect: Any = None) -> list[HostApplyResult]:
    """Repair, host by host, the GPUs an interrupted apply left half-done (their host's inflight.json: finished to
    the interrupted plan's target, or put back where that would stop running work), with no plan of its own:
    replan does this before it plans, so that it plans from known layouts. Each host's lock, reads and journal
    as in `apply`."""
    options = ApplyOptions(timeout=fleet.timeout)
    log = _Journal(journal, now)

    def one(host: Host, runner: CommandRunner) -> HostApplyResult:
        return apply_host(runner, host, (), ctx.catalog, options, lambda e: log(host.name, e), finish_recorded=True)

    with children.stop_on_signals():
        if connect is None:
            from migplan.adapters.ssh import SshFleet

            with SshFleet(fleet.ssh) as ssh:
                results = for_each_host(list(hosts), lambda h: one(h, runner_for(ssh, h)), parallel=fleet.parallel,
                                        on_done=_progress(report))
        else:
            results = for_each_host(list(hosts), lambda h: one(h, connect(h)), parallel=fleet.parallel,
                                    on_done=_progress(report))
    return [_applied_or_failed(r) for r in results]


def _applied_or_failed(result: HostResult[HostApplyResult]) -> HostApplyResult:
    """The host's apply, or, when its work raised (unreachable, a lost connection), the error as its failure."""
    return result.value if result.value is not None else HostApplyResult(result.host, failure=str(result.error))


def plan_gpus(plan: Plan, host: str) -> list[GpuPlan]:
    return [g for g in plan.gpus if g.host == host]


# --- apply --last: the layout applied here last, again (at boot) -----------------------------------------

@dataclass(frozen=True)
class LastRequest:
    """`migplan apply --last`: on this machine, without SSH (`connection: local`)."""

    state_dir: str = DEFAULT_STATE_DIR
    lock_file: str = DEFAULT_LOCK_FILE
    dry_run: bool = False
    allow_disrupt: bool = False
    journal: str | None = None
    timeout: float = 60.0
    host_name: str | None = None  # --host-name: the name this machine has in the inventory, when not its own


def own_names() -> tuple[str, ...]:
    """The names this machine answers to by itself: its host name and the short name before the first dot."""
    full = socket.gethostname()
    return tuple(dict.fromkeys(n for n in (full, full.split(".", 1)[0]) if n))


def _check_identity(last: LastApplied, record: Any, req: LastRequest, path: str) -> None:
    """last-applied.json is this machine's: written under its name (its host name, its short name, or the
    inventory name given with --host-name) and for its GPUs (every GPU's UUID recorded and the same here). A
    copied or restored file of another host would otherwise lay that host's layout onto these GPUs at boot."""
    mine = (req.host_name,) if req.host_name else own_names()
    if last.host.lower() not in {n.lower() for n in mine}:
        raise InputError(f"host: the layout was applied to {last.host!r}, and this machine is "
                         f"{' / '.join(map(repr, mine))}", source=path,
                         hint=f"if the inventory calls this machine {last.host!r}, pass --host-name {last.host}; "
                              "else apply a plan for this host ('migplan apply PLAN')")
    here = {d.index: (d.uuid or "").lower() for d in record.gpus}
    for n, a in enumerate(last.gpus):
        if not a.uuid:
            raise InputError(f"gpus[{n}].uuid: GPU {a.index} has no UUID recorded, so it cannot be told apart from "
                             "another machine's GPU", source=path,
                             hint="apply a plan on this host again ('migplan apply PLAN' writes it with UUIDs)")
    # One GPU replaced in its slot is refused alone (`_last_plans`: the others are re-applied); none of them
    # here is another machine's record.
    if not any(here.get(a.index) == (a.uuid or "").lower() for a in last.gpus):
        raise InputError(f"gpus[*].uuid: none of the {len(last.gpus)} GPU(s) the layout was applied to is on this "
                         f"machine (GPU {last.gpus[0].index} was {last.gpus[0].uuid}, here it is "
                         f"{here.get(last.gpus[0].index) or 'absent'})", source=path,
                         hint="a record of another machine: apply a plan for this host ('migplan apply PLAN')")


def _last_plans(last: LastApplied, record: Any, catalog: Catalog) -> tuple[list[GpuPlan], list[GpuResult]]:
    """A GpuPlan per GPU of last-applied.json, from the GPU as it is now (after a reboot: no instances), with the
    model built from the GPU's own profile table (as the plan was: `catalog` must hold those models)."""
    gpus = {d.index: d for d in record.gpus}
    out, refused = [], []
    for a in last.gpus:
        d = gpus.get(a.index)
        own = d.planning_model(catalog) if d is not None else None
        st = d.state(last.host, own.id if own is not None else None) if d is not None else None
        if d is None or st is None:
            refused.append(GpuResult(a.index, GpuOutcome.REFUSED, f"GPU {a.index} is not on this host (as a MIG GPU)"))
            continue
        if a.uuid and d.uuid and a.uuid.lower() != d.uuid.lower():
            refused.append(GpuResult(a.index, GpuOutcome.REFUSED, f"GPU {a.index} is {d.uuid}, the layout was applied "
                                     f"to {a.uuid} (a different GPU: apply a fresh plan)"))
            continue
        model = catalog.get(st.model)
        if model.base_id != catalog.get(a.model).base_id:
            refused.append(GpuResult(a.index, GpuOutcome.REFUSED, f"GPU {a.index} is a {model.base_id}, the layout was "
                                     f"applied to a {a.model}"))
            continue
        out.append(GpuPlan(st, a.layout, tuple(diff(st.current, a.layout, gpu=st.key,
                                                    architecture=model.architecture))))
    return out, refused


def _read_last_applied(state_dir: str, path: str) -> str:
    """last-applied.json of this machine, from a trusted state directory (ours or root's, not writable by group or
    others), opened without following a link and only as a regular file (`files.read_trusted`): apply --last runs
    as root at boot and would otherwise apply whatever layout someone else left there."""
    hint = "apply a plan on this host first ('migplan apply PLAN' writes it)"
    try:
        check_trusted_dir(state_dir, "--state-dir")
        data = read_trusted(path, max_bytes=MAX_LAST_APPLIED_BYTES)
    except FileNotFoundError:
        raise InputError("cannot read the last applied layout: it does not exist", source=path, hint=hint) from None
    except OSError as err:
        raise InputError(f"cannot read the last applied layout: {err.strerror or err}", source=path,
                         hint=hint) from None
    text = data.decode("utf-8", "replace")
    if not json_depth_ok(text):
        raise InputError("cannot read the last applied layout: JSON nested too deep", source=path,
                         hint="apply a fresh plan ('migplan apply PLAN' rewrites it)")
    return text


def apply_last(ctx: Context, req: LastRequest, *, report: Report = quiet, now: dt.datetime | None = None,
               connect: Any = None) -> ApplyResult:
    """Re-apply `<state_dir>/last-applied.json` on this machine: MIG instances vanish at a reboot (and Hopper's
    MIG mode with them), so a boot unit runs `migplan apply --last`. The same checks, lock and journal."""
    path = f"{req.state_dir}/{LAST_APPLIED_FILE}"
    probe = Host(name="localhost", address="localhost", connection="local", state_dir=req.state_dir,
                 lock_file=req.lock_file)
    runner: CommandRunner = connect(probe) if connect is not None else LocalRunner(host="localhost")
    text = _read_last_applied(req.state_dir, path)
    last = parse_last_applied(text, path, ctx.catalog)
    host = Host(name=last.host, address="localhost", connection="local", state_dir=req.state_dir,
                lock_file=req.lock_file)
    options = ApplyOptions(allow_disrupt=req.allow_disrupt, dry_run=req.dry_run, timeout=req.timeout)
    journal = _Journal(None if req.dry_run else req.journal, now)
    stamp = _stamp(now)
    record = discover_host(runner, host, ctx.catalog, timeout=req.timeout)
    _check_identity(last, record, req, path)
    own = {m.id: m for d in record.gpus if (m := d.planning_model(ctx.catalog)) is not None}
    catalog = Catalog((*(m for m in own.values() if ctx.catalog.find(m.id) is None), *ctx.catalog.models))
    gpus, refused = _last_plans(last, record, catalog)
    report(f"{last.host}: re-applying the layout of plan {last.plan} applied at {last.applied_at}")
    with children.stop_on_signals():
        rep = apply_one_host(host, runner, gpus, catalog, fingerprint=last.plan, items=last.placements, last=None,
                             migrations=(), dry_run=req.dry_run, options=options, journal=journal, stamp=stamp)
    rep = dataclasses.replace(rep, gpus=tuple(sorted((*rep.gpus, *refused), key=lambda g: g.gpu)))
    return ApplyResult(None, (rep,), req.dry_run, fingerprint=last.plan)
