"""Kubernetes pods as demand: `kubectl get pods -A -o json` in, one workload per GPU device a pod holds or waits
for out (pure: text in, workloads out; docs/kubernetes.md, "Demand from pods").

`read_pods(text, source)` parses the document (a `List`/`PodList` of pods, or one `Pod`) as untrusted input:
every refusal is an `InputError` naming the file, the line, the key path and the pod. `pod_demand(...)` turns the
pods into workloads against the fleet state and merges them with the measured profiles. A live read
(`kubectl get pods -A -o json` run by an adapter) is `read_pods(stdout, "kubectl get pods")`.

What a pod asks for, as Kubernetes counts it (kubernetes.io, "Effective Pod requests and limits";
"Resource Management for Pods and Containers", extended resources):

* per container, `resources.requests[R]`, else `resources.limits[R]` (requests default to limits); extended
  resources cannot be overcommitted, so where both are given they must be equal, and they are whole numbers;
* the pod's request for R is the larger of the effective init request (for each init container, its request plus
  the sidecars, init containers with `restartPolicy: Always`, started before it; the largest of these) and the
  sum of the app containers' requests plus every sidecar's;
* R is `nvidia.com/mig-<profile>` (mixed strategy; `+` written `.`: `mig-1g.10gb.me` is `1g.10gb+me`) or
  `nvidia.com/gpu`: a whole GPU, or under `mig.strategy=single` one MIG device of the node's one profile
  (NVIDIA/k8s-device-plugin README, `internal/rm/rm.go`; reference/ecosystem.md §2.3). Other resources are
  not read.

Which pods: `Running` or `Unknown` pods and `Pending` pods bound to a node (`spec.nodeName`) hold their devices
on that node; `Pending` pods without a node are new demand; `Succeeded`/`Failed` pods and pods without GPU
requests are not demand. Each device is one workload: `namespace/pod` for the first, `namespace/pod:2`, ... for
the others (pods are not grouped by owner: each holds its own devices on its own node).

Where a device can be served is what the nodes' device plugins advertise under the resource it requests, by each
node's `nvidia.com/mig.strategy` (NVIDIA/k8s-device-plugin @1b826ac `internal/rm/rm.go`, `internal/lm/
mig-strategy.go`; reference/ecosystem.md §2.3). With the strategies known (an inventory from `kubectl get nodes`)
each workload carries it as generic eligibility (`profiles.Eligible`), which the planner enforces without knowing
Kubernetes (`_Fleet.rules`):

* `nvidia.com/mig-<p>`: a MIG device, on nodes with strategy `mixed` only (any MIG profile: a measured pod may
  be sized to another one there, as its new request);
* `nvidia.com/gpu`: a whole MIG-disabled GPU (on `none` and `mixed` nodes and GPUs without MIG: the nodes' GPU
  rules keep MIG off or on where it must be, inventory/k8s_nodes.py), or a MIG device of the node's one profile
  P on a `single` node with P. A pending pod may take either: one workload with those forms of its request.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from migplan import names, yamljson
from migplan.catalog import Catalog
from migplan.catalog.geometry import GpuModel
from migplan.catalog.layout import Instance
from migplan.errors import InputError
from migplan.history.prom_series import owner_name
from migplan.model.state import FleetState, GpuState
from migplan.profiles import (
    ANY_MIG,
    UNKNOWN_COMPUTE,
    WHOLE_GPU,
    Eligible,
    MemoryStats,
    Observation,
    Pin,
    ProfileSet,
    Workload,
    eligible_for,
)
from migplan.yamldoc import Node

GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
STRATEGY_LABEL = "nvidia.com/mig.strategy"  # GFD's node label (inventory/k8s_nodes.py STRATEGY)
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
FINISHED = ("Succeeded", "Failed")
# A node holds at most 64 GPUs (names.MAX_GPUS_PER_HOST) of at most 7 MIG devices each (NVIDIA MIG User Guide):
# no pod can hold more devices than that; a larger count is a typo or hostile input.
MAX_DEVICES = names.MAX_GPUS_PER_HOST * 7
_LIST_KINDS = ("List", "PodList")
# Kubernetes object names: a namespace is a DNS label, a pod name a DNS subdomain (apimachinery validation)
_NAMESPACE = re.compile(r"\A[a-z0-9](?:[-a-z0-9]{0,61}[a-z0-9])?\Z")
_POD_NAME = re.compile(r"\A[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?\Z")
# the part after `nvidia.com/mig-`: `<g>g.<gb>gb`, attributes joined by '.' (`1g.10gb.me`)
_RESOURCE_PROFILE = re.compile(r"\A([0-9]{1,2})g\.([0-9]{1,4})gb((?:\.[a-z0-9]{1,16}){0,4})\Z")
_PODS_HINT = "pass the JSON of 'kubectl get pods -A -o json' (a List of Pods), or one Pod"


@dataclass(frozen=True)
class Pod:
    """One pod's GPU request as Kubernetes counts it (`requests`: resource -> devices, counts above 0 only)."""

    namespace: str
    name: str
    node: str | None  # spec.nodeName
    phase: str  # status.phase; "" when the document has none
    requests: tuple[tuple[str, int], ...]
    source: str = ""  # FILE:LINE of the pod, for messages

    @property
    def workload(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def bound(self) -> bool:
        """It holds its devices on `node`: Running or Unknown, or Pending on a node it was bound to."""
        return self.node is not None and self.phase not in FINISHED


@dataclass(frozen=True)
class PodList:
    source: str
    pods: tuple[Pod, ...]  # pods with GPU requests that hold or wait for devices
    finished: tuple[str, ...] = ()  # Succeeded/Failed pods with GPU requests (namespace/pod): not demand
    without_gpu: int = 0  # pods that request no NVIDIA GPU resource


# -- reading the document ----------------------------------------------------------------------------------------

def read_pods(text: str, source: str) -> PodList:
    """The pods of a `kubectl get pods -o json` document (JSON or YAML text); `source` names it in errors."""
    root = yamljson.parse(text, source)
    if root is None:
        raise InputError("no pods: the document is empty", source=source, hint=_PODS_HINT)
    return parse_pods(root)


def _kind(node: Node) -> str | None:
    f = dict(node.items()) if node.is_map else {}
    k = f.get("kind")
    return k.str() if k is not None and k.is_scalar and not k.is_null else None


def parse_pods(root: Node) -> PodList:
    if not root.is_map:
        root.fail("expected a Kubernetes List of Pods (a mapping)", hint=_PODS_HINT)
    kind = _kind(root)
    if kind == "Pod":
        items = [root]
    elif kind in _LIST_KINDS:
        top = dict(root.items())
        if "items" not in top:
            root.fail(f"a {kind} without 'items'", hint=_PODS_HINT)
        items = [] if top["items"].is_null else top["items"].list()
    else:
        root.fail(f"this is a {kind!r} document, not pods" if kind else "no 'kind': not a Kubernetes List of Pods",
                  hint=_PODS_HINT)
    pods: list[Pod] = []
    finished: list[str] = []
    without = 0
    seen: dict[str, int] = {}
    for item in items:
        pod = _pod(item)
        if pod.workload in seen:
            item.fail(f"pod {pod.workload} is listed twice (first at line {seen[pod.workload]})")
        seen[pod.workload] = item.line
        if not pod.requests:
            without += 1
        elif pod.phase in FINISHED:
            finished.append(pod.workload)
        else:
            pods.append(pod)
    return PodList(root.source, tuple(pods), tuple(finished), without)


def _map(node: Node | None, what: str) -> dict[str, Node]:
    if node is None or node.is_null:
        return {}
    if not node.is_map:
        node.fail(f"{what}: expected a mapping")
    return dict(node.items())


def _pod(item: Node) -> Pod:
    if not item.is_map:
        item.fail("expected a Pod (a mapping)", hint=_PODS_HINT)
    f = dict(item.items())
    kind = _kind(item)
    if kind is not None and kind != "Pod":
        f["kind"].fail(f"a {kind!r} in a list of pods", hint=_PODS_HINT)
    meta = _map(f.get("metadata"), "metadata")
    if "name" not in meta:
        item.fail("a Pod without metadata.name", hint=_PODS_HINT)
    name = meta["name"].str()
    if not _POD_NAME.fullmatch(name):
        meta["name"].fail(f"{name!r} is not a Kubernetes pod name (lower-case letters, digits, '-' and '.')")
    namespace = meta["namespace"].str() if "namespace" in meta else "default"
    if not _NAMESPACE.fullmatch(namespace):
        meta["namespace"].fail(f"pod {name!r}: {namespace!r} is not a Kubernetes namespace name")
    who = f"pod {namespace}/{name}"
    if not names.WORKLOAD_NAME.fullmatch(f"{namespace}/{name}:{MAX_DEVICES}"):
        meta["name"].fail(f"{who}: the workload name {namespace}/{name} is too long (at most 249 characters)")
    spec = _map(f.get("spec"), f"{who}: spec")
    status = _map(f.get("status"), f"{who}: status")
    node = None
    if "nodeName" in spec and not spec["nodeName"].is_null:
        node = spec["nodeName"].str()
        if not names.HOST_NAME.fullmatch(node):
            spec["nodeName"].fail(f"{who}: {node!r} is not a node name")
    phase = status["phase"].str() if "phase" in status and not status["phase"].is_null else ""
    if phase and phase not in PHASES:
        status["phase"].fail(f"{who}: unknown phase {phase!r}", hint=f"Kubernetes writes {', '.join(PHASES)}")
    if phase in ("Running", "Unknown") and node is None:
        item.fail(f"{who} is {phase} but has no spec.nodeName", hint="a running pod is bound to a node")
    requests = _requests(spec, who)
    return Pod(namespace, name, node, phase, tuple(sorted((r, n) for r, n in requests.items() if n > 0)),
               f"{item.source}:{item.line}")


def _containers(spec: Mapping[str, Node], key: str, who: str) -> list[Node]:
    if key not in spec or spec[key].is_null:
        return []
    if not spec[key].is_list:
        spec[key].fail(f"{who}: expected a list of containers")
    return spec[key].list()


def _requests(spec: Mapping[str, Node], who: str) -> dict[str, int]:
    """The pod's effective request per NVIDIA resource (kubernetes.io, "Effective Pod requests and limits")."""
    apps = [_container(c, who) for c in _containers(spec, "containers", who)]
    total: dict[str, int] = {}
    for c in apps:
        _add(total, c)
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for node in _containers(spec, "initContainers", who):
        c = _container(node, who)
        f = dict(node.items())
        restart = f["restartPolicy"].str() if "restartPolicy" in f and not f["restartPolicy"].is_null else ""
        if restart == "Always":  # a sidecar: runs through initialisation and after it
            _add(sidecars, c)
            for r, n in sidecars.items():
                init_peak[r] = max(init_peak.get(r, 0), n)
        else:  # runs alone, next to the sidecars started before it
            for r in set(c) | set(sidecars):
                init_peak[r] = max(init_peak.get(r, 0), c.get(r, 0) + sidecars.get(r, 0))
    _add(total, sidecars)
    out = {r: max(total.get(r, 0), init_peak.get(r, 0)) for r in set(total) | set(init_peak)}
    for r, n in out.items():
        if n > MAX_DEVICES:
            spec.get("containers", next(iter(spec.values()))).fail(
                f"{who}: requests {n} x {r} in all, more than the {MAX_DEVICES} devices a node can hold")
    return out


def _add(into: dict[str, int], more: Mapping[str, int]) -> None:
    for r, n in more.items():
        into[r] = into.get(r, 0) + n


def _is_gpu_resource(key: str) -> bool:
    return key == GPU_RESOURCE or key.startswith(MIG_PREFIX)


def _container(node: Node, who: str) -> dict[str, int]:
    """One container's NVIDIA requests: requests, else limits (they must agree where both are given)."""
    if not node.is_map:
        node.fail(f"{who}: expected a container (a mapping)")
    f = dict(node.items())
    res = _map(f.get("resources"), f"{who}: resources")
    requests = {k: (n, _quantity(n, k, who)) for k, n in _map(res.get("requests"), f"{who}: requests").items()
                if _is_gpu_resource(k)}
    limits = {k: (n, _quantity(n, k, who)) for k, n in _map(res.get("limits"), f"{who}: limits").items()
              if _is_gpu_resource(k)}
    out: dict[str, int] = {}
    for key in sorted(set(requests) | set(limits)):
        node_at, count = requests[key] if key in requests else limits[key]
        if key in requests and key in limits and requests[key][1] != limits[key][1]:
            node_at.fail(f"{who}: request {requests[key][1]} and limit {limits[key][1]} of {key} differ; an extended "
                         "resource cannot be overcommitted, so Kubernetes requires them equal")
        if key != GPU_RESOURCE:
            resource_profile(node_at, key, who)
        out[key] = count
    return out


def _quantity(node: Node, key: str, who: str) -> int:
    """A whole number of devices: an integer, or its text as the API server writes it ("1")."""
    raw = node.value()
    hint = "Kubernetes writes extended resources as whole numbers, e.g. \"1\""
    if isinstance(raw, bool) or raw is None:
        node.fail(f"{who}: {key}: expected a whole number of devices, got {node.text!r}", hint=hint)
    if isinstance(raw, int):
        value = raw
    else:
        text = str(node.text if not isinstance(raw, str) else raw).strip()
        if not names.is_ascii_digits(text) or len(text) > 6:
            what = "negative" if text.startswith("-") else "not a whole number of devices written in digits"
            node.fail(f"{who}: {key}: {text!r} is {what}", hint=hint)
        value = int(text)
    if value < 0:
        node.fail(f"{who}: {key}: {value} is negative", hint=hint)
    if value > MAX_DEVICES:
        node.fail(f"{who}: {key}: {value} devices is more than the {MAX_DEVICES} a node can hold", hint=hint)
    return value


def profile_of(resource: str) -> str | None:
    """`nvidia.com/mig-1g.10gb.me` -> `1g.10gb+me`: the resource's MIG profile in the catalog's spelling (None:
    not a MIG resource name)."""
    m = _RESOURCE_PROFILE.fullmatch(resource[len(MIG_PREFIX):]) if resource.startswith(MIG_PREFIX) else None
    if m is None:
        return None
    attrs = m.group(3)
    return f"{m.group(1)}g.{m.group(2)}gb" + (f"+{attrs[1:].replace('.', ',')}" if attrs else "")


def resource_profile(node: Node, key: str, who: str) -> str:
    """`profile_of(key)`, refused (at `node`) when the key names no MIG profile."""
    profile = profile_of(key)
    if profile is None:
        node.fail(f"{who}: {key!r} does not name a MIG profile (nvidia.com/mig-<g>g.<gb>gb, e.g. "
                  "nvidia.com/mig-3g.20gb)", hint="the device plugin's mixed strategy names one resource per profile")
    return profile


# -- pods as workloads -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PodWorkload:
    """One device of one pod, as planned: `sized` is "measured" (a profile's history) or "requested"."""

    workload: str
    pod: str
    state: str  # "running" (bound to `node`) or "pending"
    node: str | None
    wants: str  # the MIG profile, or WHOLE_GPU
    sized: str
    measured_as: str | None = None  # the profile's name when it is not the pod's own (an owner's profile)


@dataclass(frozen=True)
class PodDemand:
    profiles: ProfileSet  # what to plan: the pods' workloads, then the profiles no pod took
    pods: tuple[PodWorkload, ...]
    notes: tuple[str, ...]  # pods not planned and why, profiles dropped, assumptions made

    def summary(self, pods: PodList) -> str:
        running = [p for p in self.pods if p.state == "running"]
        pending = [p for p in self.pods if p.state == "pending"]
        measured = sum(1 for p in self.pods if p.sized == "measured")
        return (f"pods from {pods.source}: {len(pods.pods)} with GPU requests, {len(running)} device(s) held by "
                f"running pods and {len(pending)} awaited by pending ones ({measured} sized as measured, "
                f"{len(self.pods) - measured} as requested); {len(pods.finished)} finished and {pods.without_gpu} "
                "without GPU requests ignored")


def _strategy_profile(gpus: list[GpuState]) -> str | None:
    """The one profile of a node whose every GPU is in MIG mode with instances of that profile only (what
    `mig.strategy=single` requires), else None."""
    profiles = set()
    for g in gpus:
        if g.current is None or not g.current.instances:
            return None
        profiles |= {i.profile for i in g.current.instances}
    return next(iter(profiles)) if len(profiles) == 1 else None


@dataclass
class _Fleet:
    gpus: dict[str, list[GpuState]]  # host -> its GPUs by index
    catalog: Catalog
    strategies: Mapping[str, str]
    taken: set[tuple[str, int, Instance | None]]
    _rules: dict[bool, tuple[Eligible, ...]] = dataclasses.field(default_factory=dict)

    def rules(self, mig: bool) -> tuple[Eligible, ...]:
        """Where a device of a `nvidia.com/mig-*` (`mig`) or `nvidia.com/gpu` request can be served (the module
        notes), as eligibility; () where the strategies are not known or nothing is excluded. One tuple per kind,
        shared by every such workload (the planner groups them into one class)."""
        if mig not in self._rules:
            self._rules[mig] = self._make_rules(mig) if self.strategies else ()
        return self._rules[mig]

    def _make_rules(self, mig: bool) -> tuple[Eligible, ...]:
        hosts = sorted(self.gpus)
        if mig:  # a node whose strategy is not known is not excluded
            mixed = tuple(h for h in hosts if self.strategies.get(h, "mixed") == "mixed")
            return (Eligible(ANY_MIG, None if mixed == tuple(hosts) else mixed,
                             f"nodes with {STRATEGY_LABEL}=mixed"),)
        singles: dict[str, list[str]] = {}
        for h in hosts:
            p = self.single_profile(h) if self.strategies.get(h) == "single" else None
            if p is not None:
                singles.setdefault(p, []).append(h)
        out = [] if sum(map(len, singles.values())) == len(hosts) else [
            Eligible(WHOLE_GPU, None, "a whole GPU with MIG disabled")]
        out += [Eligible(p, None if len(hs) == len(hosts) else tuple(hs),
                         f"nodes with {STRATEGY_LABEL}=single and profile {p}") for p, hs in sorted(singles.items())]
        return () if not singles else tuple(out)

    def forms(self, mig: bool, wants: str) -> tuple[str, ...]:
        """The devices a request can be served as: `wants`, and every profile its rules name on their own."""
        named = [e.profile for e in self.rules(mig) if e.profile != ANY_MIG]
        return (wants, *(q for q in named if q != wants))

    def model(self, g: GpuState) -> GpuModel:
        return self.catalog.get(g.model)

    def single_profile(self, host: str) -> str | None:
        """The profile `nvidia.com/gpu` means on this node, or None (a whole GPU)."""
        strategy = self.strategies.get(host)
        if strategy is not None and strategy != "single":
            return None
        return _strategy_profile(self.gpus.get(host, []))

    def free_slot(self, host: str, wants: str, prefer: int | None) -> tuple[GpuState, Instance | None] | None:
        order = sorted(self.gpus.get(host, []), key=lambda g: (g.index != prefer, g.index))
        for g in order:
            slots: list[Instance | None] = []
            if wants == WHOLE_GPU:
                slots = [None] if g.current is None else []
            elif g.current is not None:
                slots = [*sorted(i for i in g.current.instances if i.profile == wants)]
            for inst in slots:
                if (host, g.index, inst) not in self.taken:
                    self.taken.add((host, g.index, inst))
                    return g, inst
        return None

    def smallest_memory(self, wants: str, hosts: tuple[str, ...] | None = None) -> int | None:
        """MiB of the smallest instance `wants` names on any model of the fleet (of `hosts`; None: no model offers
        it)."""
        sizes = []
        for m in {g.model for h, gs in self.gpus.items() if hosts is None or h in hosts for g in gs}:
            model = self.catalog.get(m)
            if wants == WHOLE_GPU:
                sizes.append(model.memory_mib)
            elif any(p.name == wants for p in model.plain_profiles):
                sizes.append(model.profile(wants).memory_mib)
        return min(sizes) if sizes else None


def _devices(pod: Pod, fleet: _Fleet, everywhere_single: str | None) -> list[tuple[str, bool]]:
    """What each device of the pod is (a MIG profile, or WHOLE_GPU; for a pending `nvidia.com/gpu` pod the first
    of its forms), and whether it is a `nvidia.com/mig-*` request."""
    out: list[tuple[str, bool]] = []
    for resource, count in pod.requests:
        if resource == GPU_RESOURCE:
            if pod.bound and pod.node:
                single = fleet.single_profile(pod.node)
            elif fleet.rules(False):  # the strategies are known: a whole GPU where one can be, else a single profile
                single = next(e.profile for e in fleet.rules(False))
            else:
                single = everywhere_single
            out += [(single or WHOLE_GPU, False)] * count
        else:
            out += [(profile_of(resource) or resource, True)] * count  # checked when read: always a profile
    return out


def _hosts(rules: tuple[Eligible, ...], profile: str) -> tuple[str, ...] | None:
    """The hosts `rules` let a device take `profile` on (None: any)."""
    rule = eligible_for(rules, profile) if rules else None
    return rule.hosts if rule is not None else None


def _placed(w: Workload) -> tuple[str, int, Instance | None] | None:
    o = w.observed
    if o.host is None or o.gpu is None:
        return None
    if o.mig_profile is None:
        return o.host, o.gpu, None
    return (o.host, o.gpu, Instance(o.mig_start, o.mig_profile)) if o.mig_start is not None else None


def pod_demand(pods: PodList, state: FleetState, catalog: Catalog, measured: ProfileSet,
               strategies: Mapping[str, str] | None = None) -> PodDemand:
    """The pods' devices as workloads, merged with the measured profiles (docs/kubernetes.md, "Demand from pods").

    Precedence: a pod's own profile (`namespace/pod`), else its owner's (`namespace/<pod less its generated
    suffix>`, as `collect --prometheus --workload-name owner` names it), sizes it by what it used, with the
    requested instance as its floor (`min_profile`, unless the profile sets its own); a pod without one is sized
    by its request: exactly that instance (memory: the instance's, no headroom). A bound pod is placed on a free
    instance of what it holds on its node (the node's layout is inferred from its labels, so the instance is one
    of that size there, not necessarily the one it has); a pending pod is new demand. Profiles no pod takes
    stay as they are, except those named after a finished pod.
    `strategies`: node -> `nvidia.com/mig.strategy` (from `kubectl get nodes`); a node missing from it is taken as
    `single` when every GPU holds instances of one profile only."""
    by_name = {w.name: w for w in measured.workloads}
    gpus: dict[str, list[GpuState]] = {}
    for g in sorted(state.gpus, key=lambda g: g.key):
        gpus.setdefault(g.host, []).append(g)
    fleet = _Fleet(gpus, catalog, strategies or {}, set())
    notes: list[str] = []
    took: set[str] = set()
    matches: dict[str, Workload | None] = {}
    for pod in pods.pods:
        own = by_name.get(pod.workload)
        owner = f"{pod.namespace}/{owner_name(pod.name)}"
        w = own if own is not None else by_name.get(owner) if owner != pod.workload else None
        matches[pod.workload] = w
        if w is not None:
            took.add(w.name)
    finished = set(pods.finished) & set(by_name)
    if finished:
        notes.append(f"{len(finished)} profile(s) of finished pods not planned: {_some(sorted(finished))}")
    rest = [w for w in measured.workloads if w.name not in took and w.name not in finished]
    fleet.taken |= {p for p in (_placed(w) for w in rest) if p is not None}
    singles = {fleet.single_profile(h) for h in gpus}
    everywhere_single = next(iter(singles)) if len(singles) == 1 else None
    out: list[Workload] = []
    planned: list[PodWorkload] = []
    # bound pods first (they hold their instances), each group by name: the same input gives the same demand
    for pod in sorted(pods.pods, key=lambda p: (not p.bound, p.workload)):
        devices = _devices(pod, fleet, everywhere_single)
        if not pod.bound and len(devices) > 1:
            notes.append(f"pod {pod.workload} waits for {len(devices)} devices on one node; they are planned as "
                         "separate workloads, which the plan does not keep on one node")
        for k, (wants, mig) in enumerate(devices):
            made = _device(pod, k, wants, mig, fleet, matches[pod.workload], notes)
            if made is not None:
                out.append(made[0])
                planned.append(made[1])
    return PodDemand(ProfileSet((*out, *rest), (*measured.sources, pods.source)), tuple(planned), tuple(notes))


def _some(items: Iterable[str], n: int = 10) -> str:
    shown = list(items)
    return ", ".join(shown[:n]) + (" ..." if len(shown) > n else "")


def _device(pod: Pod, k: int, wants: str, mig: bool, fleet: _Fleet, measured: Workload | None,
            notes: list[str]) -> tuple[Workload, PodWorkload] | None:
    name = pod.workload if k == 0 else f"{pod.workload}:{k + 1}"
    what = "a whole GPU" if wants == WHOLE_GPU else wants
    if wants != WHOLE_GPU and fleet.smallest_memory(wants) is None:
        notes.append(f"pod {pod.workload} ({pod.source}) requests {what}, which no GPU model in the fleet offers "
                     "(as a plain MIG profile): not planned")
        return None
    rules = fleet.rules(mig)
    # a pending `nvidia.com/gpu` pod that a whole GPU and a single node's MIG device could serve: no floor, its
    # memory the smallest of them (for an unmeasured one), each form offered as exactly as its request
    forms = fleet.forms(mig, wants) if not pod.bound else (wants,)
    floor = wants if len(forms) == 1 else None
    place: tuple[GpuState, Instance | None] | None = None
    pin = None
    if pod.bound:
        assert pod.node is not None
        if pod.node not in fleet.gpus:
            notes.append(f"pod {pod.workload} runs on node {pod.node}, which has no GPU in the inventory: not planned")
            return None
        prefer = measured.observed.gpu if measured is not None and measured.observed.host == pod.node else None
        place = fleet.free_slot(pod.node, wants, prefer)
        if place is None:
            notes.append(f"pod {pod.workload} holds {what} on {pod.node}, but the node's layout as read has no "
                         f"free {what}: planned as new demand on {pod.node}")
            pin = Pin(host=pod.node)
    if place is not None:
        g, inst = place
        where: dict[str, object] = {"host": g.host, "gpu": g.index, "mig_profile": inst.profile if inst else None,
                                    "mig_start": inst.start if inst else None}
    else:
        where = {"host": None, "gpu": None, "mig_profile": None, "mig_start": None}
    state = "running" if place is not None or pin is not None else "pending"
    if measured is not None:
        obs = dataclasses.replace(measured.observed, **where)  # type: ignore[arg-type]  # the keys are Observation's
        if obs.gpu_model is None and place is not None:
            obs = dataclasses.replace(obs, gpu_model=place[0].model)
        w = dataclasses.replace(measured, name=name, observed=obs, replicas=1, pin=pin or measured.pin,
                                min_profile=measured.min_profile or floor, source=measured.source or pod.source,
                                eligible=rules)
        return w, PodWorkload(name, pod.workload, state, pod.node, wants, "measured",
                              None if measured.name == pod.workload else measured.name)
    if place is not None:
        model = fleet.model(place[0])
        mib = model.memory_mib if wants == WHOLE_GPU else model.profile(wants).memory_mib
    else:
        # each form's smallest instance where its rules let it be (anywhere, when no such host has one: it is then
        # left out by the planner, with that reason)
        sizes = [m for m in (fleet.smallest_memory(q, _hosts(rules, q)) or fleet.smallest_memory(q) for q in forms)
                 if m is not None]
        assert sizes  # every fleet has a model; a profile no model offers returned above
        mib = min(sizes)
    obs = Observation(gpu_model=place[0].model if place else None, **where)  # type: ignore[arg-type]  # as above
    w = Workload(name=name, observed=obs, memory=MemoryStats(mib, mib, mib, mib), compute=UNKNOWN_COMPUTE,
                 pin=pin, min_profile=floor, requested=wants, source=pod.source, eligible=rules)
    return w, PodWorkload(name, pod.workload, state, pod.node, wants, "requested")
