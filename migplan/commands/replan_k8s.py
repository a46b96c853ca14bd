"""`migplan replan --via gpu-operator`: one unattended run against a cluster whose MIG layouts NVIDIA's GPU Operator
manages (docs/kubernetes.md, "Replan from cron"; docs/replan.md for the rules it shares with SSH replan).

Inside the state directory's lock (`commands.replan.replan`, which also writes the metrics file):

1. read every node and every pod live, through the one kubectl adapter (`commands.k8s_live`), and finish what a
   killed run left (`k8s-inflight.json`: its last node's previous label put back unless the MIG manager succeeded,
   its cordon lifted; `_finish_interrupted`);
2. hold the nodes a well-behaved controller leaves alone now (`k8s.holds.nodes_to_hold`: the MIG manager at work
   or failed, cordoned, not Ready, pods on the node's GPUs without consent to disrupt; a node whose change was rolled
   back within `cooldown_h`), and, for the cool-down, every GPU of a node changed within `cooldown_h` (the labels do
   not tell a node's GPUs apart);
3. the demand: the pods' (`pods.pod_demand`: running pods tied to instances of what they hold on their node,
   pending pods as new demand), merged with measured profiles when given (`collect --prometheus` output, `-p`);
4. plan and decide with SSH replan's rules (`commands.replan.plan_and_decide`: hysteresis, cool-down and its
   override, maintenance windows, never the greedy fallback); a node the plan changes only where the labels cannot
   tell (instances moved between its GPUs or slots, its counts the same), or into a layout its MIG strategy does
   not advertise, is held and the plan made again (`k8s.holds.labels_only`, `unadvertised`), so a plan made from
   labels never relabels a node for nothing;
5. when worth it, apply through the MIG manager (`commands.gpu_operator.apply_gpu_operator`: the ConfigMap merged,
   only the nodes whose counts change relabelled, waited for, verified, rolled back on failure), and record the
   run: the decision, each node's end (as planned, or as before) and why, the kubectl writes.

A plan whose every change fits the devices nodes have now (pending pods the scheduler has yet to bind) changes no
node: nothing to do. So a second run right after a successful one relabels nothing and writes no ConfigMap.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from migplan import documents
from migplan.adapters.kubectl import Kubectl, KubectlError, KubectlOptions
from migplan.adapters.state_dir import StateDir
from migplan.catalog import Catalog
from migplan.commands import Report, quiet
from migplan.commands.context import LIVE, Context
from migplan.commands.fleet import select_hosts
from migplan.commands.gpu_operator import Clock, GpuOperatorRequest, GpuOperatorResult, apply_gpu_operator
from migplan.commands.k8s_live import LiveConfigMap, read_nodes, read_pods_live
from migplan.commands.pods import demand_from_pods, strategies
from migplan.commands.replan import (
    EXIT_APPLIED,
    EXIT_FAILED,
    EXIT_NOTHING,
    EXIT_PARTIAL,
    Planned,
    ReplanRequest,
    ReplanResult,
    _hold,
    _profiles,
    _run_id,
    plan_and_decide,
    replan,
    replan_policy,
    replan_sizing,
    report_orphans,
)
from migplan.errors import EXIT_FAILURE, EXIT_OK, InputError, MigplanError
from migplan.fleet.outcomes import GpuOutcome
from migplan.inventory import Inventory
from migplan.k8s import holds
from migplan.k8s.objects import NodeView
from migplan.k8s.rollout import (
    BUSY_STATES,
    DEFAULT_CONFIGMAP,
    DEFAULT_NAMESPACE,
    DEFAULT_SETTLE_S,
    DEFAULT_TIMEOUT_S,
    MIG_CONFIG_LABEL,
    MIG_STATE_LABEL,
    cordon_patch,
    label_patch,
)
from migplan.model.state import FleetState, GpuKey, state_from_inventory
from migplan.planner import plan_to_dict
from migplan.profiles import ProfileSet
from migplan.replan.decide import in_cooldown
from migplan.replan.policy import ReplanPolicy
from migplan.text import printable

VIA = "gpu-operator"
SOURCE = "kubectl get nodes"  # the plan's state source
# each node's end, for the record: as planned, as before, or to be looked at
_END = {GpuOutcome.APPLIED: "as planned", GpuOutcome.UNCHANGED: "as before", GpuOutcome.SKIPPED: "as before",
        GpuOutcome.REFUSED: "as before", GpuOutcome.ROLLED_BACK: "as before", GpuOutcome.WOULD_APPLY: "as before",
        GpuOutcome.FAILED: "not as before: check it"}


@dataclass(frozen=True)
class K8sReplan:
    """How the run reaches the cluster and applies (the options `apply --via gpu-operator` has)."""

    kubectl: KubectlOptions = field(default_factory=KubectlOptions)
    configmap: str = DEFAULT_CONFIGMAP
    namespace: str = DEFAULT_NAMESPACE
    drain: str = "when-busy"
    mig_timeout: float = DEFAULT_TIMEOUT_S
    settle_s: float = DEFAULT_SETTLE_S


def replan_gpu_operator(ctx: Context, req: ReplanRequest, k8s: K8sReplan, *, report: Report = quiet,
                        now: dt.datetime | None = None, kubectl: Kubectl | None = None,
                        clock: Clock | None = None) -> ReplanResult:
    """One run (the module notes). `kubectl` and `clock` replace the real ones (tests)."""
    if req.collect:
        raise InputError("--collect fetches histories over SSH; with --via gpu-operator measure with 'migplan collect "
                         "--prometheus URL --out DIR' and pass -p DIR", hint="drop --collect")
    if req.fleet.inventory not in (None, LIVE) or req.pods not in (None, LIVE):
        raise InputError("--via gpu-operator reads the cluster's nodes and pods live, through kubectl",
                         hint="drop --inventory and --pods (or give them as 'kubectl'); pass --kubeconfig/--context")
    body = functools.partial(_run, k8s=k8s, kube=kubectl or Kubectl(k8s.kubectl), clock=clock)
    return replan(ctx, req, report=report, now=now, body=body)


@dataclass
class _Run:
    """One run's record as it is filled in."""

    run_id: str
    now: dt.datetime
    record: dict[str, Any]
    via: dict[str, Any]


def _fail(sd: StateDir, rp: ReplanPolicy, r: _Run, err: MigplanError, line: str, code: int,
          report: Report) -> ReplanResult:
    """A run that changed no node and stopped on an error: recorded as failed (exit `code`)."""
    reason = getattr(err, "reason", None)
    report(f"error: event=failed {'reason=' + reason + ' ' if isinstance(reason, str) else ''}{err.message}")
    sd.record(r.run_id, {**r.record, "result": "failed", "exit_code": code, "line": line, "error": str(err)}, None,
              rp.keep_runs)
    return ReplanResult("failed", line, code, run_id=r.run_id, via=r.via)


def _run(ctx: Context, req: ReplanRequest, sd: StateDir, report: Report, now: dt.datetime, *, k8s: K8sReplan,
         kube: Kubectl, clock: Clock | None) -> ReplanResult:
    rp = replan_policy(ctx)
    r = _Run(_run_id(now), now, {}, {"via": VIA})
    r.record = {"id": r.run_id, "at": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "via": VIA, "dry_run": req.dry_run}
    # the ConfigMap the apply writes tells each GPU's MIG devices (a note where it is missing)
    configmap = LiveConfigMap(k8s.namespace, k8s.configmap, missing="note")
    try:
        views, inventory = read_nodes(None, ctx.catalog, kube=kube, configmap=configmap)
        pods, pod_views = read_pods_live(None, kube=kube)
    except KubectlError as err:
        return _fail(sd, rp, r, err, f"failed: cannot read the cluster: {err.message}", EXIT_FAILED, report)
    for note in inventory.notes:
        if configmap.shown in note:  # where a node's GPUs are inferred though the ConfigMap was read, and why
            report(f"info: event=note {note}")
    inventory = select_hosts(inventory, req.fleet.limit)
    nodes = {h.name for h in inventory.hosts}
    repaired, fixing = _finish_interrupted(sd, views, {h.name: [g.index for g in h.gpus] for h in inventory.hosts},
                                           kube, req.dry_run, now, report)
    if repaired:
        r.record["repaired"] = r.via["repaired"] = repaired
    disrupt = rp.may_disrupt(now)
    held = {h.node: h for h in holds.nodes_to_hold(views, pod_views, nodes, may_disrupt=disrupt)}
    for node, why in {**_rolled_back(sd, now, rp), **fixing}.items():
        if node in nodes:
            held[node] = holds.Held(node, why)
    for h in held.values():
        report(f"{'warning' if h.warn else 'info'}: event=held node={h.node} {h.reason}")
    state = state_from_inventory(inventory, ctx.catalog)
    catalog = Catalog(ctx.catalog.models + state.models) if state.models else ctx.catalog
    measured = _profiles(ctx, dataclasses.replace(req, pods=LIVE), now, report)
    profiles = demand_from_pods(pods, state, catalog, measured, inventory, report)
    cooling_nodes = sorted({h for h, _ in in_cooldown(sd.last_changed(), now.timestamp(), rp)} & nodes)
    rule, choice = replan_sizing(ctx, req, sd, now, report)
    made, later = _plan(ctx, rp, state, profiles, catalog, inventory, set(held), set(cooling_nodes), now, report,
                        sizing=rule)
    if choice is not None:
        made = dataclasses.replace(made, plan=dataclasses.replace(made.plan, sizing=choice))
    chosen, decision = made.plan, made.decision
    report_orphans(made.orphans, report)
    changing = holds.changing_nodes(chosen.gpus)
    r.via["held"] = {**{n: h.reason for n, h in held.items()}, **later}
    r.record.update({"line": decision.line, "reasons": list(decision.reasons), "cooling": cooling_nodes,
                     "held": r.via["held"], "disrupt_allowed": disrupt, "orphans": made.orphans,
                     "nodes_to_change": changing, "summary": dataclasses.asdict(chosen.summary)})
    if choice is not None:
        r.record["sizing"] = dataclasses.asdict(choice)
    if not decision.apply or not changing:
        line = decision.line if not decision.apply else (
            "nothing to do: the plan changes no node's MIG devices (what it would do, " + "; ".join(decision.reasons)
            + ", needs only the devices the nodes have now: the scheduler binds pending pods to them)")
        report(f"info: event=decision cooling={len(cooling_nodes)} disrupt={'yes' if disrupt else 'no'} {line}")
        result, code = "nothing_to_do" if not changing else "not_applied", EXIT_NOTHING
        wrote = [x for x in repaired if x["wrote"]]
        if wrote:  # the nodes did change: an interrupted run's change put back (or its cordon lifted)
            line, result, code = f"repaired {len(wrote)} node(s) an interrupted run left half-done; {line}", \
                "repaired", EXIT_APPLIED
        sd.record(r.run_id, {**r.record, "line": line, "result": result, "exit_code": code},
                  plan_to_dict(chosen), rp.keep_runs)
        return ReplanResult(result, line, code, decision, chosen, solve_s=made.solve_s, run_id=r.run_id, via=r.via)
    report(f"info: event=decision cooling={len(cooling_nodes)} disrupt={'yes' if disrupt else 'no'} "
           f"nodes={','.join(changing)} {decision.line}")
    return _apply(ctx, req, sd, rp, r, made, k8s, kube, clock, report)


def _finish_interrupted(sd: StateDir, views: Mapping[str, NodeView], gpus: Mapping[str, list[int]], kube: Kubectl,
                        dry_run: bool, now: dt.datetime, report: Report) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Nodes whose change a killed run began and did not end (`k8s-inflight.json`, written before the first write to
    a node): the MIG manager finished it (`success`: counted as changed for the cool-down), is still at it (left for
    a later run), or failed or never reported: then the previous label is put back, as the run's own rollback would
    have; a cordon the run set is lifted. Returns what was done per node and the nodes to hold in this run, with why.
    A dry run only says what it would do."""
    done: list[dict[str, Any]] = []
    hold: dict[str, str] = {}
    for node, entry in sorted(sd.k8s_inflight().items()):
        view = views.get(node)
        config, previous = entry.get("config"), entry.get("previous")
        label = view.label(MIG_CONFIG_LABEL) if view is not None else None
        state = view.label(MIG_STATE_LABEL) if view is not None else None
        if view is not None and label == config and state in BUSY_STATES:
            continue  # the MIG manager is still applying it (nodes_to_hold holds the node)
        steps: list[tuple[str, dict[str, object]]] = []
        if view is None:
            what = "the node is gone"
        elif label != config:
            what = f"left as it is ({MIG_CONFIG_LABEL}={label or '(none)'} now)"
        elif state == "success":
            what = f"finished by the MIG manager ({MIG_CONFIG_LABEL}={config})"
            if not dry_run:
                sd.mark_changed([(node, i) for i in gpus.get(node, [])], now.timestamp())
        else:
            what = f"{MIG_CONFIG_LABEL} put back to {previous or '(none)'} ({MIG_STATE_LABEL}={state or 'unset'})"
            steps.append(("label", label_patch(previous if isinstance(previous, str) else None)))
            hold[node] = f"an interrupted run's change was put back: {what}; the MIG manager applies it again"
        if view is not None and entry.get("cordoned") is True and view.unschedulable:
            steps.append(("uncordon", cordon_patch(False)))
            what += "; uncordoned"
        if dry_run:
            report(f"info: event=would-repair node={node} {what}")
            continue
        try:
            for _, patch in steps:
                kube.patch("nodes", node, patch)
        except KubectlError as err:
            report(f"warning: event=repair-failed node={node} {err.message}")
            hold[node] = f"an interrupted run's change could not be finished: {err.message}"
            continue
        sd.set_k8s_inflight(node, None)
        report(f"{'warning' if steps else 'info'}: event=repaired node={node} {what}")
        done.append({"node": node, "what": what, "wrote": bool(steps)})
    return done, hold


def _rolled_back(sd: StateDir, now: dt.datetime, rp: ReplanPolicy) -> dict[str, str]:
    """Nodes whose change a run within the cool-down rolled back (or could not): held until the cool-down has passed,
    so that a config the MIG manager fails on is not tried again every run (each try drains and relabels the node).
    Read from the run records (`runs/`); unreadable records are passed over."""
    out: dict[str, str] = {}
    for run in sd.runs(rp.keep_runs):
        try:
            at = dt.datetime.strptime(str(run.get("at")), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
        except ValueError:
            continue
        age_h = (now - at).total_seconds() / 3600.0
        ends = run.get("nodes")
        if run.get("via") != VIA or not 0 <= age_h < rp.cooldown_h or not isinstance(ends, dict):
            continue
        for node, end in ends.items():
            if isinstance(end, dict) and end.get("outcome") in ("rolled-back", "failed") and node not in out:
                out[str(node)] = (f"its change was {end.get('outcome')} at {run.get('at')} "
                                  f"({printable(str(end.get('reason') or ''), 160)}): not tried again within "
                                  f"replan.cooldown_h ({rp.cooldown_h:g} h)")
    return out


def _plan(ctx: Context, rp: ReplanPolicy, state: FleetState, profiles: ProfileSet, catalog: Catalog,
          inventory: Inventory, held: set[str], cooling: set[str], now: dt.datetime,
          report: Report, *, sizing: str | None = None) -> tuple[Planned, dict[str, str]]:
    """Plan with the held nodes (and the cooling ones) kept as they are; again, with more nodes held, while the plan
    changes a node only where the labels cannot tell or into a layout its MIG strategy does not advertise. Returns
    the plan and the nodes held after planning, with why."""
    later: dict[str, str] = {}
    kinds = strategies(inventory)
    while True:
        keep: set[GpuKey] = {g.key for g in state.gpus if g.host in held or g.host in later}
        cool = {g.key for g in state.gpus if g.host in cooling} - keep
        made = plan_and_decide(ctx, rp, _hold(state, keep), profiles, catalog, cool, now, source=SOURCE,
                               exclude_held=True, sizing=sizing)
        more = {n: "the plan moves its instances between GPUs or slots only, its MIG devices per profile the same: "
                   "the labels cannot tell that apart, so it is no change" for n in holds.labels_only(made.plan.gpus)}
        more.update(holds.unadvertised(made.plan.gpus, kinds))
        more = {n: why for n, why in more.items() if n not in later}
        if not more:
            return made, later
        for n, why in sorted(more.items()):
            report(f"info: event=held node={n} {why}")
        later.update(more)


def _apply(ctx: Context, req: ReplanRequest, sd: StateDir, rp: ReplanPolicy, r: _Run, made: Planned, k8s: K8sReplan,
           kube: Kubectl, clock: Clock | None, report: Report) -> ReplanResult:
    chosen, decision = made.plan, made.decision
    plan_path = sd.plan_path(r.run_id)
    documents.write_plan(plan_path, chosen)
    greq = GpuOperatorRequest(plan=str(plan_path), kubectl=k8s.kubectl, configmap=k8s.configmap,
                              namespace=k8s.namespace, dry_run=req.dry_run, allow_disrupt=made.disrupt,
                              drain=k8s.drain, timeout=k8s.mig_timeout, settle_s=k8s.settle_s,
                              journal=str(sd.subdir("journal") / f"{r.run_id}.jsonl"))
    started = time.monotonic()
    try:
        res = apply_gpu_operator(ctx, greq, report=report, now=r.now, kubectl=kube, clock=clock,
                                 on_node=sd.set_k8s_inflight)
    except MigplanError as err:  # raised before any node's label changed (reads, the ConfigMap's write)
        line = f"failed: {decision.line.removeprefix('applied: ')}; no node was changed: {err.message}"
        code = EXIT_FAILED if isinstance(err, KubectlError) else err.exit_code
        return _fail(sd, rp, r, err, line, code, report)
    apply_s = time.monotonic() - started
    nodes = _node_ends(res)
    r.via.update(nodes=nodes, configmap=res.configmap, commands=list(res.commands))
    changed: list[GpuKey] = sorted((h, g.index) for h, end in nodes.items() if end["outcome"] == "applied"
                                   for g in chosen.gpus if g.host == h)
    if not req.dry_run:
        sd.mark_changed(changed, r.now.timestamp())  # the whole node: which GPU changed is not in the labels
    code = res.exit_code
    result, exit_code = (("applied", EXIT_APPLIED) if code == EXIT_OK else
                         ("partial", EXIT_PARTIAL) if code == EXIT_FAILURE else ("failed", EXIT_FAILED))
    said = "; ".join(f"{n} {e['outcome']} ({e['end']})" for n, e in nodes.items() if e["outcome"] != "unchanged")
    line = decision.line if result == "applied" else f"{result}: {decision.line.removeprefix('applied: ')}"
    line += f"; nodes: {said}" if said else ""
    wrote = [x for x in r.record.get("repaired", ()) if x["wrote"]]
    line = f"repaired {len(wrote)} node(s) an interrupted run left half-done; {line}" if wrote else line
    if req.dry_run:
        for c in res.commands:
            report(f"info: event=would-run {c}")
        line = "dry run, would apply: " + decision.line.removeprefix("applied: ")
        result, exit_code = ("would_apply", EXIT_NOTHING) if code == EXIT_OK else (result, exit_code)
    sd.record(r.run_id, {**r.record, "result": result, "exit_code": exit_code, "line": line,
                         "gpus_changed": changed, "nodes": nodes, "configmap": res.configmap,
                         "commands": list(res.commands), "apply": res.apply.to_dict()}, None, rp.keep_runs)
    return ReplanResult(result, line, exit_code, decision, chosen, res.apply, made.solve_s, apply_s, r.run_id, r.via)


def _node_ends(res: GpuOperatorResult) -> dict[str, Mapping[str, str]]:
    """Each node of the plan: its outcome (that of its changed GPUs), whether it ends as planned or as before, why."""
    out: dict[str, Mapping[str, str]] = {}
    for h in res.apply.hosts:
        moved = [g for g in h.gpus if g.outcome is not GpuOutcome.UNCHANGED] or list(h.gpus)
        g = moved[0] if moved else None
        outcome = g.outcome if g is not None else GpuOutcome.UNCHANGED
        if h.failure is not None:
            outcome = GpuOutcome.FAILED
        out[h.host] = {"outcome": outcome.value, "end": _END.get(outcome, "check it"),
                       "reason": h.failure or (g.reason if g is not None else "")}
    return out
