"""`migplan apply PLAN --via gpu-operator`: a plan applied through the GPU Operator's MIG manager.

Order (docs/kubernetes.md, "Applying through the GPU Operator"):

1. read the cluster through `adapters.kubectl`: every node, every pod, the MIG manager's ConfigMap;
2. decide per node (`k8s.rollout.decide_node`): unchanged, refused (changed since the plan), skipped (busy
   without --allow-disrupt, the MIG manager at work) or to change;
3. write the configs the changing nodes need into the ConfigMap (key `config.yaml`, NVIDIA/gpu-operator
   `assets/state-mig-manager`), built by `export.build_gpu_operator` (the one builder: names, checks), every
   config already there kept; the write is a merge patch carrying the resourceVersion read, so a concurrent
   writer makes it a 409 Conflict: then the ConfigMap is read and merged again (at most `conflict_retries`);
   then wait `settle_s` for the kubelet to project the new file into the MIG manager's pod (a ConfigMap volume
   is refreshed on the kubelet's sync, about a minute by default: Kubernetes docs, "ConfigMaps", "Mounted
   ConfigMaps are updated automatically");
4. node by node: optionally cordon and evict its GPU pods through the eviction API (PodDisruptionBudgets
   honoured: a refusal stops that node's change, the node left as it was and uncordoned); set
   `nvidia.com/mig.config` (clearing the MIG manager's stale state label); wait for
   `nvidia.com/mig.config.state=success` (polling with backoff, `rebooting` is progress) within `timeout`;
   verify the node's advertised capacity against the plan; on `failed`, a timeout or a capacity that differs,
   put the previous label back, wait for it and verify the node is as before: `rolled-back` (or `failed`
   when even that did not end as before, with what is there); uncordon what was cordoned.

A dry run reads the cluster and records the commands instead of running the writes: each is a kubectl line a
person can paste. Exit codes and per-host results as SSH apply (`commands.apply.ApplyResult`).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from migplan import documents, mig_parted, yamljson
from migplan.adapters.kubectl import Kubectl, KubectlError, KubectlOptions
from migplan.catalog import Catalog
from migplan.commands import Report, quiet
from migplan.commands.apply import K8S_LABEL, ApplyRequest, ApplyResult, _check_age, _Journal
from migplan.commands.context import Context
from migplan.commands.export import CONFIG_KEY, Export, build_gpu_operator, config_text, parse_configmap
from migplan.commands.fleet import select_hosts
from migplan.commands.k8s_live import read_nodes
from migplan.errors import InputError, MigplanError
from migplan.fleet.outcomes import GpuOutcome, GpuResult, HostApplyResult
from migplan.inventory import Host, Inventory
from migplan.k8s import rollout
from migplan.k8s.objects import BadObject, NodeView, PodView, node_view, pod_views
from migplan.k8s.rollout import (  # the defaults live with the pure decisions: the CLI reads them cheaply
    DEFAULT_CONFIGMAP,
    DEFAULT_NAMESPACE,
    DEFAULT_SETTLE_S,
    DEFAULT_TIMEOUT_S,
    MIG_STATE_LABEL,
    STRATEGY_LABEL,
    NodeDecision,
)
from migplan.model.gpu_plan import GpuPlan
from migplan.planner.plan import Plan
from migplan.text import printable

CONFLICT_RETRIES = 5


class Clock(Protocol):
    def monotonic(self) -> float: ...
    def sleep(self, seconds: float) -> None: ...


class _RealClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass(frozen=True)
class GpuOperatorRequest:
    plan: str
    kubectl: KubectlOptions = field(default_factory=KubectlOptions)
    configmap: str = DEFAULT_CONFIGMAP
    namespace: str = DEFAULT_NAMESPACE
    limit: tuple[str, ...] | None = None
    dry_run: bool = False
    allow_disrupt: bool = False
    drain: str = "when-busy"
    timeout: float = DEFAULT_TIMEOUT_S
    settle_s: float = DEFAULT_SETTLE_S
    force_stale: bool = False
    max_age_h: float = 24.0
    journal: str | None = None
    conflict_retries: int = CONFLICT_RETRIES


@dataclass(frozen=True)
class GpuOperatorResult:
    """The apply (per node, as SSH apply reports per host) and what was done to the ConfigMap, with every
    write's kubectl line in order."""

    apply: ApplyResult
    configmap: dict[str, Any]
    commands: tuple[str, ...]

    @property
    def exit_code(self) -> int:
        return self.apply.exit_code

    @property
    def dry_run(self) -> bool:
        return self.apply.dry_run

    def to_dict(self) -> dict[str, Any]:
        return {**self.apply.to_dict(), "via": "gpu-operator", "configmap": self.configmap,
                "commands": list(self.commands)}


class _Session:
    """One apply's cluster access: the kubectl adapter, the journal (per node), the commands recorded."""

    def __init__(self, kube: Kubectl, journal: _Journal, dry_run: bool) -> None:
        self.kube, self.journal, self.dry_run = kube, journal, dry_run
        self.node = "cluster"
        self.lines: list[str] = []
        self.by_node: dict[str, list[str]] = {}

    def on_call(self, event: dict[str, Any]) -> None:
        self.journal(self.node, {"event": "kubectl", **event})

    def record(self, line: str) -> None:
        self.lines.append(line)
        self.by_node.setdefault(self.node, []).append(line)

    def write(self, args: Sequence[str], *, stdin: bytes | None = None, shown: str | None = None) -> str | None:
        """A call that changes the cluster: recorded, and run unless this is a dry run."""
        self.record(shown or self.kube.line(*args))
        if self.dry_run:
            return None
        return self.kube.run(args, stdin=stdin)


# --- reading the cluster -------------------------------------------------------------------------

def _nodes(s: _Session, catalog: Catalog) -> tuple[dict[str, NodeView], Inventory]:
    return read_nodes(None, catalog, kube=s.kube)


def _pods(s: _Session) -> list[PodView]:
    try:
        return pod_views(s.kube.get("pods", all_namespaces=True))
    except BadObject as err:
        raise InputError(f"kubectl get pods: {err.message}") from None


_Configs = dict[str, tuple[mig_parted.Entry, ...]]


def _configmap(s: _Session, name: str, namespace: str) -> tuple[dict[str, Any], _Configs]:
    try:
        cm = s.kube.get("configmaps", name, namespace)
    except KubectlError as err:
        if err.reason == "not-found":
            raise InputError(f"the ConfigMap {namespace}/{name} the MIG manager reads does not exist",
                             hint="pass --configmap NAME --namespace NS of the ConfigMap the ClusterPolicy names "
                                  "(spec.migManager.config.name; the GPU Operator's default is "
                                  f"{DEFAULT_CONFIGMAP} in {DEFAULT_NAMESPACE})") from None
        raise
    if cm.get("kind") != "ConfigMap":
        raise InputError(f"{namespace}/{name}: kubectl answered kind {printable(str(cm.get('kind')), 40)!r}, "
                         "not a ConfigMap")
    root = yamljson.parse(json.dumps(cm), f"configmap {namespace}/{name}")
    if root is None:
        raise InputError(f"configmap {namespace}/{name} is empty")
    configs, _, _ = parse_configmap(root)
    return cm, configs


# --- the ConfigMap -------------------------------------------------------------------------------

def _sub_plan(plan: Plan, nodes: set[str]) -> Plan:
    return dataclasses.replace(plan, gpus=tuple(g for g in plan.gpus if g.host in nodes), workloads=())


def _needs_write(live: dict[str, tuple[mig_parted.Entry, ...]], export: Export) -> bool:
    return any(n not in live or not mig_parted.same_config(live[n], export.configs[n]) for n in export.ours)


def _write_configmap(s: _Session, req: GpuOperatorRequest, plan: Plan, catalog: Catalog, nodes: set[str],
                     cm: dict[str, Any], live: dict[str, tuple[mig_parted.Entry, ...]],
                     report: Report) -> tuple[Export, dict[str, Any]]:
    """Merge the configs `nodes` need into the ConfigMap, keeping every config in it; retried on a conflict."""
    info: dict[str, Any] = {"name": req.configmap, "namespace": req.namespace, "written": False, "conflicts": 0}
    for attempt in range(req.conflict_retries + 1):
        export = build_gpu_operator(_sub_plan(plan, nodes), catalog, existing=live, name=req.configmap,
                                    namespace=req.namespace)
        added = [n for n in export.ours if n not in live]
        info["added"] = added
        if not _needs_write(live, export):
            return export, info
        found = cm.get("metadata")
        meta: dict[str, Any] = found if isinstance(found, dict) else {}
        rv = meta.get("resourceVersion") if isinstance(meta.get("resourceVersion"), str) else None
        patch: dict[str, Any] = {"data": {CONFIG_KEY: config_text(export)}}
        if rv:
            patch["metadata"] = {"resourceVersion": rv}  # a write to exactly what was read (409 otherwise)
        try:
            s.write(s.kube.patch_args("configmaps", req.configmap, patch, req.namespace))
        except KubectlError as err:
            if err.reason != "conflict" or attempt == req.conflict_retries:
                raise
            info["conflicts"] += 1
            report(f"note: the ConfigMap {req.namespace}/{req.configmap} changed while it was written "
                   f"(409 Conflict): reading it again ({attempt + 1}/{req.conflict_retries})")
            s.journal("cluster", {"event": "configmap-conflict", "attempt": attempt + 1})
            cm, live = _configmap(s, req.configmap, req.namespace)
            continue
        info["written"] = True
        owners = meta.get("ownerReferences") if isinstance(meta.get("ownerReferences"), list) else []
        if owners:
            report(f"warning: {req.namespace}/{req.configmap} is owned by "
                   f"{printable(str(owners[0].get('kind') if isinstance(owners[0], dict) else owners[0]), 40)}: "
                   "the GPU Operator may rewrite it; point spec.migManager.config.name of the ClusterPolicy at a "
                   "ConfigMap of your own (docs/kubernetes.md)")
        return export, info
    raise AssertionError("unreachable")  # the loop returns or raises


# --- one node --------------------------------------------------------------------------------------

@dataclass
class _NodeRun:
    outcome: GpuOutcome
    reason: str


def _poll_node(s: _Session, node: str) -> NodeView | None:
    try:
        return node_view(s.kube.get("nodes", node))
    except KubectlError as err:
        if err.reason in ("unreachable", "timeout"):
            return None  # the API server blinked (or the node is rebooting behind a proxy): poll again
        raise
    except BadObject as err:
        raise InputError(f"kubectl get node {node}: {err.message}") from None


def _wait_for(s: _Session, node: str, clock: Clock, deadline: float,
              expected: dict[str, int] | None) -> tuple[str, NodeView | None, list[str]]:
    """Poll the node until its state is `success` and (when known) its capacity is `expected`, or `failed`, or
    the deadline: ("success" | "failed" | "timeout", the node as read last, the capacity differences)."""
    attempt, last, diffs = 0, None, ["not read yet"]
    while True:
        view = _poll_node(s, node)
        if view is not None:
            last = view
            verdict = rollout.state_verdict(view.label(MIG_STATE_LABEL))
            if verdict == "failed":
                return "failed", view, []
            if verdict == "success":
                diffs = rollout.capacity_differences(expected, view.capacity) if expected is not None else []
                if not diffs:
                    return "success", view, []
        if clock.monotonic() >= deadline:
            return "timeout", last, diffs
        clock.sleep(min(rollout.backoff(attempt), max(0.0, deadline - clock.monotonic())) or 0.05)
        attempt += 1


def _layouts_expected(gpus: Sequence[GpuPlan], strategy: str, *, target: bool) -> dict[str, int] | None:
    return rollout.expected_capacity([g.target if target else g.current for g in gpus], strategy)


def _drain(s: _Session, d: NodeDecision, live: NodeView, clock: Clock, timeout: float) -> tuple[bool, str | None]:
    """Cordon (unless already) and evict the node's GPU pods. (cordoned by us, why it stopped or None)."""
    cordoned = False
    if not live.unschedulable:
        s.write(s.kube.patch_args("nodes", d.node, rollout.cordon_patch(True)))
        cordoned = True
    for pod in d.pods:
        path, body = s.kube.eviction_path(pod.namespace, pod.name), s.kube.eviction_body(pod.namespace, pod.name)
        shown = f"printf '%s' '{body}' | {s.kube.line('create', '--raw', path, '-f', '-')}"
        s.record(shown)
        try:
            if not s.dry_run:
                s.kube.evict(pod.namespace, pod.name)
        except KubectlError as err:
            if err.reason == "not-found":
                continue  # gone already
            if err.reason == "too-many-requests":
                return cordoned, (f"eviction of {pod.ref} refused (its PodDisruptionBudget allows no disruption now: "
                                  f"{printable(err.message, 200)})")
            return cordoned, f"eviction of {pod.ref} failed: {printable(err.message, 200)}"
    if s.dry_run or not d.pods:
        return cordoned, None
    deadline, attempt = clock.monotonic() + timeout, 0
    wanted = {p.ref for p in d.pods}
    while True:
        try:
            left = {p.ref for p in pod_views(s.kube.get("pods", all_namespaces=True,
                                                        field_selector=f"spec.nodeName={d.node}"))} & wanted
        except BadObject as err:
            return cordoned, f"kubectl get pods: {err.message}"
        if not left:
            return cordoned, None
        if clock.monotonic() >= deadline:
            return cordoned, f"evicted pod(s) still on the node after {timeout:g} s: {', '.join(sorted(left)[:5])}"
        clock.sleep(min(rollout.backoff(attempt), max(0.05, deadline - clock.monotonic())))
        attempt += 1


def _relabel(s: _Session, node: str, config: str | None, timeout: float) -> None:
    """Set the label; in the commands, the wait as `kubectl wait` would do it (this run polls with backoff)."""
    s.write(s.kube.patch_args("nodes", node, rollout.label_patch(config)))
    if config is not None:
        s.record(s.kube.line("wait", f"node/{node}", "--for=jsonpath={.metadata.labels.nvidia\\.com/mig\\.config"
                             "\\.state}=success", f"--timeout={max(1, round(timeout))}s"))


def _change(s: _Session, d: NodeDecision, gpus: Sequence[GpuPlan], live: NodeView, req: GpuOperatorRequest,
            clock: Clock) -> _NodeRun:
    strategy = live.label(STRATEGY_LABEL) or "none"
    cordoned = False
    try:
        if d.drain:
            cordoned, stopped = _drain(s, d, live, clock, req.timeout)
            if stopped is not None:
                return _NodeRun(GpuOutcome.SKIPPED, f"{stopped}; the node is unchanged")
        _relabel(s, d.node, d.config, req.timeout)
        if s.dry_run:
            return _NodeRun(GpuOutcome.WOULD_APPLY, d.reason)
        want = _layouts_expected(gpus, strategy, target=True)
        verdict, last, diffs = _wait_for(s, d.node, clock, clock.monotonic() + req.timeout, want)
        if verdict == "success":
            return _NodeRun(GpuOutcome.APPLIED, d.reason + f" ({MIG_STATE_LABEL}=success, capacity as planned)")
        why = {"failed": f"the MIG manager reported {MIG_STATE_LABEL}=failed",
               "timeout": f"not done within {req.timeout:g} s ({MIG_STATE_LABEL}="
                          f"{(last.label(MIG_STATE_LABEL) if last else None) or 'unset'}"
                          + (f"; {'; '.join(diffs[:4])}" if diffs and last and
                             last.label(MIG_STATE_LABEL) == "success" else "") + ")"}[verdict]
        return _rollback(s, d, gpus, strategy, req, clock, why)
    finally:
        if cordoned:
            try:
                s.write(s.kube.patch_args("nodes", d.node, rollout.cordon_patch(False)))
            except KubectlError as err:  # reported with the node; the layout is what the result says
                s.journal(d.node, {"event": "uncordon-failed", "error": str(err)})


def _rollback(s: _Session, d: NodeDecision, gpus: Sequence[GpuPlan], strategy: str, req: GpuOperatorRequest,
              clock: Clock, why: str) -> _NodeRun:
    s.journal(d.node, {"event": "rollback", "why": why, "label": d.previous})
    if d.previous is None:
        _relabel(s, d.node, None, req.timeout)
        return _NodeRun(GpuOutcome.FAILED, f"{why}; the node had no {rollout.MIG_CONFIG_LABEL} label to put back "
                        "(removed again): its layout is whatever the MIG manager left; check it")
    _relabel(s, d.node, d.previous, req.timeout)
    before = _layouts_expected(gpus, strategy, target=False)
    verdict, last, diffs = _wait_for(s, d.node, clock, clock.monotonic() + req.timeout, before)
    if verdict == "success":
        return _NodeRun(GpuOutcome.ROLLED_BACK, f"{why}; {rollout.MIG_CONFIG_LABEL} put back to {d.previous}, the "
                        "node is as before")
    state = (last.label(MIG_STATE_LABEL) if last else None) or "unset"
    if last is not None and before is not None and last.label(rollout.MIG_CONFIG_LABEL) == d.previous and \
            not rollout.capacity_differences(before, last.capacity):
        # a MIG manager stuck before it changed anything (e.g. pending, waiting for its operands): the label is
        # back and the node advertises what it had; when it resumes it applies the previous config, in place
        return _NodeRun(GpuOutcome.ROLLED_BACK, f"{why}; {rollout.MIG_CONFIG_LABEL} put back to {d.previous} and the "
                        f"node advertises its previous devices, but the MIG manager has not reported yet "
                        f"({MIG_STATE_LABEL}={state}): check it")
    return _NodeRun(GpuOutcome.FAILED, f"{why}; {rollout.MIG_CONFIG_LABEL} put back to {d.previous}, but the node "
                    f"is not as before yet ({MIG_STATE_LABEL}={state}" + (f"; {'; '.join(diffs[:4])}" if diffs else "")
                    + "): the MIG manager goes on with it; check the node")


# --- the whole apply -------------------------------------------------------------------------------

def _gpu_results(gpus: Sequence[GpuPlan], outcome: GpuOutcome, reason: str,
                 commands: Sequence[str]) -> tuple[GpuResult, ...]:
    out = []
    for g in sorted(gpus, key=lambda g: g.index):
        if g.actions and g.hold is None:
            out.append(GpuResult(g.index, outcome, reason, tuple(commands)))
        else:
            out.append(GpuResult(g.index, GpuOutcome.UNCHANGED, "no change planned" if not g.actions else
                                 f"held ({g.hold})"))
    return tuple(out)


_OUTCOME = {"unchanged": GpuOutcome.UNCHANGED, "refused": GpuOutcome.REFUSED, "skipped": GpuOutcome.SKIPPED}


NodeHook = Callable[[str, "dict[str, Any] | None"], None]


def _no_hook(_node: str, _entry: dict[str, Any] | None) -> None:
    """Keeps nothing."""


def apply_gpu_operator(ctx: Context, req: GpuOperatorRequest, *, report: Report = quiet,
                       now: dt.datetime | None = None, kubectl: Kubectl | None = None,
                       clock: Clock | None = None, on_node: NodeHook = _no_hook) -> GpuOperatorResult:
    """The module notes. `kubectl`/`clock` override the real ones (tests). `on_node(node, entry)`: told before the
    first write to a node (`entry`: its label now, the label to set, whether it will be cordoned) and, with None,
    once its change has ended (applied, rolled back, skipped, or failed with what is there said); a change cut short
    by an error (or a signal) is not told its end, so a caller can finish or undo it later (`replan_k8s`)."""
    if req.drain not in rollout.DRAIN_POLICIES:
        raise InputError(f"--drain {req.drain!r}: one of {', '.join(rollout.DRAIN_POLICIES)}")
    clock = clock or _RealClock()
    plan = documents.load_plan(req.plan, ctx.catalog)
    _check_age(plan, ApplyRequest(plan=req.plan, force_stale=req.force_stale, max_age_h=req.max_age_h),
               now or dt.datetime.now(dt.timezone.utc))
    catalog = Catalog((*plan.models, *ctx.catalog.models))
    journal = _Journal(None if req.dry_run else req.journal, now)
    session = _Session(kubectl or Kubectl(req.kubectl), journal, req.dry_run)
    session.kube.on_call = session.on_call
    views, inventory = _nodes(session, catalog)
    hosts = {h.name: h for h in inventory.hosts}
    chosen = {h.name for h in select_hosts(inventory, req.limit).hosts} if req.limit else None
    by_node: dict[str, list[GpuPlan]] = {}
    for g in plan.gpus:
        if chosen is None or g.host in chosen:
            by_node.setdefault(g.host, []).append(g)
    pods = _pods(session)
    cm, live = _configmap(session, req.configmap, req.namespace)
    wanted = {n for n, gs in by_node.items() if any(g.actions for g in gs)}
    export = build_gpu_operator(_sub_plan(plan, wanted), catalog, existing=live, name=req.configmap,
                                namespace=req.namespace)
    decisions = {n: rollout.decide_node(n, gs, dict(export.nodes).get(n), views.get(n), hosts.get(n), pods,
                                        allow_disrupt=req.allow_disrupt, drain=req.drain)
                 for n, gs in sorted(by_node.items())}
    for d in decisions.values():
        journal(d.node, {"event": "decision", "action": d.action, "reason": d.reason, "config": d.config,
                         "previous": d.previous, "drain": d.drain, "pods": [p.ref for p in d.pods]})
    changing = {n for n, d in decisions.items() if d.action == "change"}
    cm_info: dict[str, Any] = {"name": req.configmap, "namespace": req.namespace, "written": False}
    if changing:
        export, cm_info = _write_configmap(session, req, plan, catalog, changing, cm, live, report)
        names = dict(export.nodes)
        decisions = {n: dataclasses.replace(d, config=names[n]) if n in changing else d for n, d in decisions.items()}
        if cm_info["written"] and req.settle_s > 0:
            session.record(f"sleep {round(req.settle_s)}  # the kubelet projects the changed ConfigMap into the "
                           "MIG manager's pod")
            if not req.dry_run:
                report(f"waiting {req.settle_s:g} s for the changed ConfigMap to reach the MIG manager pods")
                clock.sleep(req.settle_s)
    results = []
    for n, d in decisions.items():
        gpus = by_node[n]
        if d.action != "change":
            results.append(HostApplyResult(n, _gpu_results(gpus, _OUTCOME[d.action], d.reason, ())))
            continue
        session.node = n
        report(f"{n}: {d.reason}")
        if not req.dry_run:
            on_node(n, {"previous": d.previous, "config": d.config,
                        "cordoned": d.drain and not views[n].unschedulable})
        try:
            run = _change(session, d, gpus, views[n], req, clock)
        except MigplanError as err:  # a kubectl failure mid-way: the node is reported, the others go on
            session.journal(n, {"event": "error", "error": str(err)})
            results.append(HostApplyResult(n, _gpu_results(gpus, GpuOutcome.FAILED, f"{err.message}: check the "
                           "node", session.by_node.get(n, ())), failure=err.message,
                                           commands=tuple(session.by_node.get(n, ()))))
            continue
        finally:
            session.node = "cluster"
        if not req.dry_run:
            on_node(n, None)
        lines = tuple(session.by_node.get(n, ()))
        results.append(HostApplyResult(n, _gpu_results(gpus, run.outcome, run.reason, lines), commands=lines))
        journal(n, {"event": "end", "outcome": run.outcome.value, "reason": run.reason})
        report(f"{n}: {run.outcome.value}: {run.reason}")
    applied = ApplyResult(plan, tuple(results), req.dry_run)
    return GpuOperatorResult(applied, cm_info, tuple(session.lines))


def is_kubernetes(host: Host) -> bool:
    """A host read from `kubectl get nodes` (inventory.k8s_nodes labels it so): its MIG layout is the MIG
    manager's, never to be changed over SSH."""
    return any(k == K8S_LABEL for k, _ in host.labels)

