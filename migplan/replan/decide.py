"""The hysteresis decision: apply a new plan only when it is worth it, never flap.

Apply when the plan (1) places demand that no instance serves now, (2) moves a workload whose instance it
has outgrown (its instance has less memory than its sized demand: an OOM waiting to happen), (3) frees at
least `min_free_gpus` whole GPUs, or (4) cuts the memory allocated beyond demand by at least
`min_waste_cut`. (1) and (2) are urgent: they override the cool-down. Every decision is one line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from migplan.fleet.state import GpuKey
from migplan.planner.plan import Plan, instance_memory_mib
from migplan.planner.problem import Problem
from migplan.replan.policy import ReplanPolicy


@dataclass(frozen=True)
class Standing:
    """How well the fleet serves its demand: now (as it runs) or as a plan would leave it."""

    left_out: int  # workloads (replicas) no instance serves
    outgrown: int  # served workloads whose instance has less memory than their sized demand
    gpus_used: int  # planned GPUs hosting a workload or a busy instance
    waste_mib: int  # instance MiB beyond sized demand, over served workloads


def standing_now(problem: Problem) -> Standing:
    """The fleet as it runs: each workload where its profile says it runs (when that instance exists)."""
    left = outgrown = waste = 0
    used: set[GpuKey] = set()
    for it in problem.items:
        if it.running is None:
            left += 1
            continue
        gpu = problem.gpu(it.running)
        if gpu is None:
            left += 1
            continue
        mib = instance_memory_mib(problem.models[gpu.model],
                                  str(it.running_on) if it.running_on is not None else None)
        outgrown += int(mib < it.demand.memory_mib)
        waste += max(0, mib - it.demand.memory_mib)
        used.add(gpu.key)
    left += len(problem.rejected)
    used |= {g.key for g in problem.gpus if g.hold is None and (g.busy or g.whole_busy)}
    return Standing(left, outgrown, len(used), waste)


def standing_planned(plan: Plan) -> Standing:
    placed = [w for w in plan.workloads if w.status == "placed" and w.instance_mib is not None]
    return Standing(left_out=plan.summary.workloads_unplaced,
                    outgrown=sum(1 for w in placed if (w.instance_mib or 0) < w.memory_mib),
                    gpus_used=plan.summary.gpus_used,
                    waste_mib=sum(max(0, (w.instance_mib or 0) - w.memory_mib) for w in placed))


@dataclass(frozen=True)
class Decision:
    apply: bool
    urgent: bool  # demand left out or outgrown instances: the cool-down does not hold it back
    reasons: tuple[str, ...]  # why it applies (empty when it does not)
    line: str  # the decision in one line, e.g. "not applied: frees 0 GPUs, threshold 1"
    gpus_freed: int
    waste_cut: float  # share of today's waste the plan removes (0..1; 0 when there is none)


def decide(now: Standing, planned: Standing, plan: Plan, policy: ReplanPolicy) -> Decision:
    freed = now.gpus_used - planned.gpus_used
    cut = (now.waste_mib - planned.waste_mib) / now.waste_mib if now.waste_mib > 0 else 0.0
    reasons = []
    if planned.left_out < now.left_out:
        reasons.append(f"places {now.left_out - planned.left_out} workload(s) now left out")
    if planned.outgrown < now.outgrown:
        reasons.append(f"moves {now.outgrown - planned.outgrown} workload(s) that outgrew their instance")
    urgent = bool(reasons)
    if freed >= policy.min_free_gpus:
        reasons.append(f"frees {freed} GPU(s) (threshold {policy.min_free_gpus})")
    if cut >= policy.min_waste_cut and now.waste_mib > 0:
        reasons.append(f"cuts unneeded memory by {cut:.0%} (threshold {policy.min_waste_cut:.0%})")
    if not plan.summary.gpus_changed and not urgent:
        return Decision(False, False, (), "nothing to do: the plan changes no GPU", freed, cut)
    # urgent without a GPU change: new demand fits instances that exist; applying writes its assignments
    if reasons and planned.left_out > now.left_out:
        return Decision(False, False, (), f"not applied: it would leave out {planned.left_out - now.left_out} more "
                        "workload(s) than run now", freed, cut)
    if reasons:
        return Decision(True, urgent, tuple(reasons), "applied: " + "; ".join(reasons), freed, cut)
    line = (f"not applied: frees {max(freed, 0)} GPU(s), threshold {policy.min_free_gpus}; cuts unneeded memory "
            f"by {max(cut, 0.0):.0%}, threshold {policy.min_waste_cut:.0%}; no demand left out or outgrown")
    return Decision(False, False, (), line, freed, cut)


def in_cooldown(last_changed: Mapping[GpuKey, float], now_ts: float, policy: ReplanPolicy) -> set[GpuKey]:
    """GPUs changed less than `cooldown_h` hours before `now_ts` (unix seconds)."""
    limit = policy.cooldown_h * 3600.0
    return {k for k, t in last_changed.items() if now_ts - t < limit}


def changed_gpus(plan: Plan) -> Iterable[GpuKey]:
    return (g.key for g in plan.gpus if g.actions)
