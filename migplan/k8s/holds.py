"""What `replan --via gpu-operator` leaves alone, and which planned changes are no change to the MIG manager (pure).

A replan from cron acts on a cluster that others act on too, so before it plans it holds (keeps exactly as they
are) the nodes a well-behaved controller would not touch now (`nodes_to_hold`):

  * the MIG manager is at work (`nvidia.com/mig.config.state` pending or rebooting), or reported `failed`: a
    failed node is a person's to look at (the MIG manager retries nothing until its label changes);
  * cordoned (`spec.unschedulable`) or not Ready: someone is working on the node, or its kubelet does not report;
  * pods hold its GPUs or MIG devices and running work may not be disrupted now (replan.allow_disrupt outside a
    maintenance window): the MIG manager stops every GPU client of the node while it reconfigures, and which GPU
    a pod holds is not in the labels, so any change of the node may stop them.

After it plans, two kinds of planned change are not made (`labels_only`, `unadvertised`), and the plan is made again
with those nodes held:

  * the labels give each node's MIG devices per profile, not which GPU holds them or where: the layouts read
    from them are inferred (`inventory.k8s_nodes`). A plan that only moves instances between GPUs or slots of a
    node, its counts per profile and its MIG-off GPUs the same, tells the MIG manager nothing it can act on
    (the apply compares the same counts, `rollout.decide_node`): it is no change, never a reason to relabel;
  * a node under `mig.strategy=single` must hold one profile on every GPU (or MIG off on all): GFD labels any
    other layout `-MIG-INVALID` and the device plugin advertises none of it (NVIDIA/k8s-device-plugin
    `internal/lm/mig-strategy.go`); under `none` MIG devices are not advertised at all. Pods could use neither.

Pure: no files, processes or clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from migplan.k8s.objects import NodeView, PodView
from migplan.k8s.rollout import BUSY_STATES, MIG_STATE_LABEL, STRATEGY_LABEL, gpu_pods, planned_counts
from migplan.model.gpu_plan import GpuPlan


@dataclass(frozen=True)
class Held:
    node: str
    reason: str  # one phrase: why the node is kept as it is
    warn: bool = False  # a person should look (the MIG manager failed, the node is not Ready)


def nodes_to_hold(views: Mapping[str, NodeView], pods: Sequence[PodView], gpu_nodes: Iterable[str], *,
                  may_disrupt: bool) -> list[Held]:
    """The GPU nodes (`gpu_nodes`, those the inventory has) a replan keeps as they are now, sorted by name."""
    out = []
    for name in sorted(set(gpu_nodes)):
        view = views.get(name)
        if view is None:
            continue
        state = view.label(MIG_STATE_LABEL)
        busy = gpu_pods(pods, name)
        if state in BUSY_STATES:
            out.append(Held(name, f"its MIG manager is changing it ({MIG_STATE_LABEL}={state})"))
        elif state == "failed":
            out.append(Held(name, f"its MIG manager reported {MIG_STATE_LABEL}=failed: look at the node (the MIG "
                                  "manager's log); it is left as it is until the state is success", warn=True))
        elif view.unschedulable:
            out.append(Held(name, "it is cordoned (spec.unschedulable): someone is working on it"))
        elif view.ready is False:
            out.append(Held(name, "it is not Ready (its kubelet does not report)", warn=True))
        elif busy and not may_disrupt:
            names = ", ".join(p.ref for p in busy[:5]) + (" ..." if len(busy) > 5 else "")
            out.append(Held(name, f"{len(busy)} pod(s) hold its GPUs ({names}); changing it may stop them, allowed "
                                  "only with replan.allow_disrupt inside a maintenance window"))
    return out


def _by_node(gpus: Iterable[GpuPlan]) -> dict[str, list[GpuPlan]]:
    out: dict[str, list[GpuPlan]] = {}
    for g in gpus:
        out.setdefault(g.host, []).append(g)
    return out


def counts_change(gpus: Sequence[GpuPlan]) -> bool:
    """Whether the node's plan changes what the MIG manager can be told: its MIG devices per profile or its MIG-off
    GPUs (`rollout.planned_counts`, what the apply compares)."""
    return planned_counts(gpus, target=False) != planned_counts(gpus, target=True)


def changing_nodes(gpus: Iterable[GpuPlan]) -> list[str]:
    """The nodes whose counts the plan changes, sorted."""
    return sorted(n for n, gs in _by_node(gpus).items() if any(g.actions for g in gs) and counts_change(gs))


def labels_only(gpus: Iterable[GpuPlan]) -> list[str]:
    """Nodes the plan changes only where the labels cannot tell (instances moved between GPUs or slots, the counts
    the same): sorted."""
    return sorted(n for n, gs in _by_node(gpus).items() if any(g.actions for g in gs) and not counts_change(gs))


def unadvertised(gpus: Iterable[GpuPlan], strategies: Mapping[str, str]) -> dict[str, str]:
    """Nodes the plan changes into a layout their `nvidia.com/mig.strategy` does not advertise, with why."""
    out = {}
    for node, gs in sorted(_by_node(gpus).items()):
        if not any(g.actions for g in gs) or not counts_change(gs):
            continue
        strategy = strategies.get(node, "none")
        targets = [g.target for g in gs]
        profiles = {i.profile for t in targets if t is not None for i in t.instances}
        if strategy == "none" and any(t is not None for t in targets):
            out[node] = (f"{STRATEGY_LABEL}=none: the device plugin advertises no MIG device; set the GPU Operator's "
                         "mig.strategy to mixed to use MIG on it")
        elif strategy == "single" and not (all(t is None for t in targets) or (
                len(profiles) == 1 and all(t is not None and t.instances for t in targets))):
            what = ", ".join(sorted(profiles)) or "no instance"
            out[node] = (f"{STRATEGY_LABEL}=single: the plan gives it {what}"
                         f"{' and MIG off' if any(t is None for t in targets) else ''}, which the device plugin does "
                         "not advertise (one profile on every GPU); set the GPU Operator's mig.strategy to mixed")
    return out
