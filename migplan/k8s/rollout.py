"""What to do with each node of a plan applied through the GPU Operator's MIG manager (pure).

The MIG manager (NVIDIA/mig-parted `cmd/nvidia-mig-manager/main.go` @152a49c) watches its node and runs a
reconfiguration whenever the value of the label `nvidia.com/mig.config` changes (an informer's UpdateFunc
compares the old and the new label: setting the same value again does nothing). The reconfiguration
(`pkg/mig/reconfigure/reconfigure.go` @0d08f4f, `Run`) sets `nvidia.com/mig.config.state`:

  success            at once when the selected config is already applied, else at the end;
  pending            when it starts changing the node (it stops the device plugin, GFD, DCGM first);
  rebooting          when a MIG mode change needs a reboot (`WITH_REBOOT=true`): progress, not failure;
  failed             when any step fails (an unknown config, a GPU in use, a failed `nvidia-mig-parted apply`).

It does not put anything back after `failed`: the caller does, by setting the previous label again.

Per node (`decide_node`): nothing planned or already as planned: **unchanged**; the node's MIG devices no
longer what the plan assumed (its labels and capacity read now against the plan's recorded state, as SSH apply
refuses a changed GPU): **refused**; the MIG manager still at work (pending, rebooting): **skipped**; pods that
hold its GPUs or MIG devices and no `--allow-disrupt`: **skipped**; else **change**, with a drain (cordon,
evict the GPU pods through the eviction API, uncordon after) when the policy wants one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from migplan.catalog.layout import Layout
from migplan.inventory.model import Host
from migplan.k8s.objects import GPU_RESOURCE, MIG_RESOURCE_PREFIX, NodeView, PodView
from migplan.model.gpu_plan import GpuPlan

MIG_CONFIG_LABEL = "nvidia.com/mig.config"
MIG_STATE_LABEL = "nvidia.com/mig.config.state"
STRATEGY_LABEL = "nvidia.com/mig.strategy"
BUSY_STATES = ("pending", "rebooting")
DRAIN_POLICIES = ("never", "when-busy", "always")
BACKOFF_FIRST_S = 1.0
BACKOFF_MAX_S = 15.0
DEFAULT_CONFIGMAP = "default-mig-parted-config"  # the GPU Operator's own (gpu-operator values.yaml, migManager)
DEFAULT_NAMESPACE = "gpu-operator"
DEFAULT_TIMEOUT_S = 600.0  # per node: the MIG manager stops GPU clients, may reset GPUs or reboot
DEFAULT_SETTLE_S = 60.0  # the kubelet's default sync period: a changed ConfigMap reaches the pod's file by then


def resource_name(profile: str) -> str:
    """`1g.10gb+me` -> `nvidia.com/mig-1g.10gb.me`: the device plugin's mixed-strategy resource ('+' as '.',
    NVIDIA/k8s-device-plugin `internal/rm/device_map.go`)."""
    return MIG_RESOURCE_PREFIX + profile.replace("+", ".")


@dataclass(frozen=True)
class NodeCounts:
    """What labels and capacity can tell of a node: its GPUs, how many have MIG off, its MIG devices."""

    gpus: int
    disabled: int
    profiles: tuple[tuple[str, int], ...]

    def __str__(self) -> str:
        parts = [f"{p} x{n}" for p, n in self.profiles]
        if self.disabled:
            parts.append(f"{self.disabled} GPU(s) MIG off")
        return f"{self.gpus} GPU(s): " + (", ".join(parts) or "MIG on, no instances")


def _counts(layouts: Sequence[Layout | None]) -> NodeCounts:
    profiles: Counter[str] = Counter()
    for lay in layouts:
        if lay is not None:
            profiles.update(lay.profile_counts())
    return NodeCounts(len(layouts), sum(1 for lay in layouts if lay is None),
                      tuple(sorted((p, n) for p, n in profiles.items() if n)))


def planned_counts(gpus: Sequence[GpuPlan], *, target: bool) -> NodeCounts:
    """The node as the plan assumed it (`target=False`) or wants it."""
    return _counts([g.target if target else g.current for g in gpus])


def live_counts(host: Host) -> NodeCounts:
    """The node as its labels and capacity say now (`inventory.k8s_nodes` read them)."""
    return _counts([g.layout if g.mig_enabled or g.layout is not None else None for g in host.gpus])


def expected_capacity(layouts: Sequence[Layout | None], strategy: str) -> dict[str, int] | None:
    """What the device plugin advertises in `status.capacity` once the node is as planned, by MIG strategy
    (ecosystem notes §2.3; NVIDIA/k8s-device-plugin README): `mixed`, one `nvidia.com/mig-<profile>` per
    profile and `nvidia.com/gpu` for the GPUs with MIG off; `single`, every MIG device as `nvidia.com/gpu`
    (only when every GPU has MIG on with one profile; else None: GFD calls such a node INVALID); `none`,
    every GPU as `nvidia.com/gpu`. `layouts`: each GPU's (None: MIG off)."""
    if strategy == "mixed":
        out: Counter[str] = Counter()
        out[GPU_RESOURCE] = sum(1 for lay in layouts if lay is None)
        for lay in layouts:
            if lay is not None:
                for p, n in lay.profile_counts().items():
                    out[resource_name(p)] += n
        return dict(out)
    if strategy == "single":
        profiles = {p for lay in layouts if lay is not None for p in lay.profile_counts()}
        if all(lay is None for lay in layouts):
            return {GPU_RESOURCE: len(layouts)}
        if any(lay is None for lay in layouts) or len(profiles) != 1:
            return None
        return {GPU_RESOURCE: sum(len(lay.instances) for lay in layouts if lay is not None)}
    return {GPU_RESOURCE: len(layouts)}


def capacity_differences(expected: Mapping[str, int], capacity: Mapping[str, str]) -> list[str]:
    """`nvidia.com/mig-3g.20gb: 2 advertised, the plan wants 1` for each NVIDIA resource that differs (a MIG
    resource the plan does not want must be absent or 0)."""
    out = []
    keys = set(expected) | {k for k in capacity if k.startswith(MIG_RESOURCE_PREFIX)}
    for key in sorted(keys):
        want = expected.get(key, 0)
        text = capacity.get(key)
        have = int(text) if text is not None and text.isascii() and text.isdigit() else (0 if text is None else -1)
        if have != want:
            shown = "not advertised" if text is None else f"{text} advertised"
            out.append(f"{key}: {shown}, the plan wants {want}")
    return out


@dataclass(frozen=True)
class NodeDecision:
    node: str
    action: str  # change | unchanged | refused | skipped
    reason: str
    config: str | None = None  # the label to set
    previous: str | None = None  # the label now (put back on failure)
    drain: bool = False
    pods: tuple[PodView, ...] = ()  # pods using the node's GPUs (evicted when draining)


def gpu_pods(pods: Sequence[PodView], node: str) -> tuple[PodView, ...]:
    return tuple(p for p in pods if p.node == node and p.uses_gpu)


def decide_node(node: str, gpus: Sequence[GpuPlan], config: str | None, live: NodeView | None, host: Host | None,
                pods: Sequence[PodView], *, allow_disrupt: bool, drain: str) -> NodeDecision:
    """One node's fate (the module notes). `host`: the node as `inventory.k8s_nodes` reads it now (None: it has
    no GPU labels any more); `pods`: every pod of the cluster (those on this node that hold NVIDIA devices
    count)."""
    if drain not in DRAIN_POLICIES:
        raise ValueError(drain)
    if not any(g.actions for g in gpus) or config is None:
        return NodeDecision(node, "unchanged", "no change planned")
    if live is None:
        return NodeDecision(node, "refused", "the node is not in the cluster any more: re-plan")
    previous = live.label(MIG_CONFIG_LABEL)
    state = live.label(MIG_STATE_LABEL)
    if state in BUSY_STATES:
        return NodeDecision(node, "skipped", f"the MIG manager is changing the node ({MIG_STATE_LABEL}={state}): "
                            "apply again once it is done", previous=previous)
    if host is None:
        return NodeDecision(node, "refused", "the node has no NVIDIA GPU labels any more: re-plan", previous=previous)
    now = live_counts(host)
    if now == planned_counts(gpus, target=True):
        return NodeDecision(node, "unchanged", f"already as planned ({MIG_CONFIG_LABEL}={previous})",
                            previous=previous)
    assumed = planned_counts(gpus, target=False)
    if now != assumed:
        return NodeDecision(node, "refused", f"changed since the plan: the plan assumed {assumed}, the node has "
                            f"{now}: re-plan", previous=previous)
    busy = gpu_pods(pods, node)
    if busy and not allow_disrupt:
        names = ", ".join(p.ref for p in busy[:5]) + (" ..." if len(busy) > 5 else "")
        return NodeDecision(node, "skipped", f"{len(busy)} pod(s) use the node's GPUs ({names}): relabelling would "
                            "stop them; pass --allow-disrupt", previous=previous, pods=busy)
    wants_drain = drain == "always" or (drain == "when-busy" and bool(busy))
    return NodeDecision(node, "change", f"{MIG_CONFIG_LABEL}: {previous or '(none)'} -> {config}", config=config,
                        previous=previous, drain=wants_drain, pods=busy)


def state_verdict(state: str | None) -> str:
    """`success`, `failed`, or `wait` (pending, rebooting, or no state yet: the MIG manager has not started)."""
    if state == "success":
        return "success"
    if state == "failed":
        return "failed"
    return "wait"


def backoff(attempt: int) -> float:
    """Seconds before poll number `attempt` (0-based): 1, 1.5, 2.25 ... up to 15."""
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 1.5 ** max(0, min(attempt, 20)))


def label_patch(config: str | None, *, clear_state: bool = True) -> dict[str, object]:
    """The merge patch that selects `config` (None: removes the label). The state label is removed with it:
    it is the MIG manager's report on the previous config, and a stale `success` must not be read as the new
    config's; the MIG manager writes it again (pending, then success or failed) for the new value."""
    labels: dict[str, object] = {MIG_CONFIG_LABEL: config}
    if clear_state:
        labels[MIG_STATE_LABEL] = None
    return {"metadata": {"labels": labels}}


def cordon_patch(on: bool) -> dict[str, object]:
    """What `kubectl cordon`/`uncordon` change: `spec.unschedulable` (true, or removed)."""
    return {"spec": {"unschedulable": True if on else None}}
