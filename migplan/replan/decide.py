"""The hysteresis decision: apply a new plan only when it is worth it, never flap.

Apply when the plan (1) places workloads that no instance serves now, (2) gives a workload that has outgrown
its instance (less memory than its sized demand: an OOM waiting to happen) a different instance with enough
memory, (3) frees at least `min_free_gpus` whole GPUs, or (4) cuts the memory allocated beyond demand by at
least `min_waste_cut`. (1) and (2) are urgent: they override the cool-down. (1) and (2) count workloads one
by one, where each is served now against where the plan serves it, so the line says what the plan does: an
outgrown workload the plan leaves out is not "given a larger instance", and one placed while another is
left out in its stead is said too. A plan that is the planner's greedy fallback (the solver had no plan in
time) is never applied. Every decision is one line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from migplan.model.state import GpuKey
from migplan.planner.plan import Plan, instance_memory_mib
from migplan.planner.problem import Problem
from migplan.replan.policy import ReplanPolicy

Spot = tuple[str, int, str | None]  # host, GPU index, instance ("PROFILE@START"; None: the whole GPU)


@dataclass(frozen=True)
class Served:
    """Where one workload (replica) is served, and whether that instance has less memory than it needs."""

    spot: Spot | None  # None: left out (no instance serves it)
    outgrown: bool = False


@dataclass(frozen=True)
class Standing:
    """How well the fleet serves its demand: now (as it runs) or as a plan would leave it."""

    workloads: Mapping[str, Served]  # every workload replica, by name
    gpus_used: int  # planned GPUs hosting a workload or a busy instance
    waste_mib: int  # instance MiB beyond sized demand, over served workloads

    @property
    def left_out(self) -> int:
        """Workloads (replicas) no instance serves."""
        return sum(1 for w in self.workloads.values() if w.spot is None)

    @property
    def outgrown(self) -> int:
        """Served workloads whose instance has less memory than their sized demand."""
        return sum(1 for w in self.workloads.values() if w.spot is not None and w.outgrown)


def standing_now(problem: Problem) -> Standing:
    """The fleet as it runs: each workload where its profile says it runs (when that instance exists)."""
    waste = 0
    served: dict[str, Served] = {}
    used: set[GpuKey] = set()
    for it in problem.items:
        gpu = problem.gpu(it.running) if it.running is not None else None
        if gpu is None:
            served[it.name] = Served(None)
            continue
        instance = str(it.running_on) if it.running_on is not None else None
        mib = instance_memory_mib(problem.models[gpu.model], instance)
        served[it.name] = Served((gpu.key[0], gpu.key[1], instance), mib < it.demand.memory_mib)
        waste += max(0, mib - it.demand.memory_mib)
        used.add(gpu.key)
    served.update((name, Served(None)) for name, _ in problem.rejected)
    used |= {g.key for g in problem.gpus if g.hold is None and (g.busy or g.whole_busy)}
    return Standing(served, len(used), waste)


def standing_planned(plan: Plan) -> Standing:
    served: dict[str, Served] = {}
    waste = 0
    for w in plan.workloads:
        if not w.on_gpu or w.host is None or w.gpu is None:
            served[w.name] = Served(None)
            continue
        mib = w.instance_mib or 0
        served[w.name] = Served((w.host, w.gpu, w.instance), mib < w.memory_mib)
        waste += max(0, mib - w.memory_mib)
    return Standing(served, plan.summary.gpus_used, waste)


@dataclass(frozen=True)
class Changes:
    """What a plan does to the workloads, one by one (names sorted)."""

    placed: tuple[str, ...]  # left out now, served by the plan
    dropped: tuple[str, ...]  # served now; the plan serves it nowhere and its instance does not stay for it
    enlarged: tuple[str, ...]  # outgrown now, moved by the plan to an instance with enough memory


def _stays(spot: Spot, plan: Plan, taken: set[Spot]) -> bool:
    """Whether the instance at `spot` is still there after `plan`, free for whoever runs in it: a workload the
    plan may not stop (no consent to disrupt, `movable: false`) keeps running there, placed or not."""
    host, index, instance = spot
    gpu = next((g for g in plan.gpus if (g.host, g.index) == (host, index)), None)
    if gpu is None or spot in taken:
        return False
    if instance is None:  # the whole GPU: stays when it stays MIG-disabled
        return gpu.target is None
    return gpu.target is not None and instance in {str(i) for i in gpu.target.instances}


def changes(now: Standing, planned: Standing, plan: Plan) -> Changes:
    placed, dropped, enlarged = [], [], []
    taken = {w.spot for w in planned.workloads.values() if w.spot is not None}
    for name, was in sorted(now.workloads.items()):
        will = planned.workloads.get(name, Served(None))
        if was.spot is None and will.spot is not None:
            placed.append(name)
        elif was.spot is not None and will.spot is None and not _stays(was.spot, plan, taken):
            dropped.append(name)
        elif was.spot is not None and was.outgrown and will.spot not in (None, was.spot) and not will.outgrown:
            enlarged.append(name)
    return Changes(tuple(placed), tuple(dropped), tuple(enlarged))


@dataclass(frozen=True)
class Decision:
    apply: bool
    urgent: bool  # demand left out or outgrown instances: the cool-down does not hold it back
    reasons: tuple[str, ...]  # why it applies (empty when it does not)
    line: str  # the decision in one line, e.g. "not applied: frees 0 GPUs, threshold 1"
    gpus_freed: int
    waste_cut: float  # share of today's waste the plan removes (0..1; 0 when there is none)


def _unserved(now: Standing, c: Changes) -> str:
    """Why demand left out or outgrown now is no reason here, in words."""
    parts = []
    if c.placed:
        parts.append(f"places {len(c.placed)} workload(s) now left out but leaves out {len(c.dropped)} that run now")
    elif now.left_out:
        parts.append(f"places none of the {now.left_out} workload(s) left out")
    if now.outgrown:
        parts.append(f"gives none of the {now.outgrown} workload(s) that outgrew their instance a larger one")
    return "; ".join(parts) or "no demand left out or outgrown"


def decide(now: Standing, planned: Standing, plan: Plan, policy: ReplanPolicy) -> Decision:
    freed = now.gpus_used - planned.gpus_used
    cut = (now.waste_mib - planned.waste_mib) / now.waste_mib if now.waste_mib > 0 else 0.0
    c = changes(now, planned, plan)
    reasons = []
    # urgent when the plan serves more of the demand left out now than it leaves out of what runs
    if len(c.placed) > len(c.dropped):
        reasons.append(f"places {len(c.placed)} workload(s) now left out"
                       + (f" (and leaves out {len(c.dropped)} that run now)" if c.dropped else ""))
    if c.enlarged:
        reasons.append(f"gives {len(c.enlarged)} workload(s) that outgrew their instance a larger one")
    urgent = bool(reasons)
    if freed >= policy.min_free_gpus:
        reasons.append(f"frees {freed} GPU(s) (threshold {policy.min_free_gpus})")
    if cut >= policy.min_waste_cut and now.waste_mib > 0:
        reasons.append(f"cuts unneeded memory by {cut:.0%} (threshold {policy.min_waste_cut:.0%})")
    if plan.solve.fallback is not None:
        # the planner's fallback when the solver had nothing in time: checked, but no one chose it; a run from
        # cron leaves the fleet as it is rather than act on it (the next run may have the solver's plan)
        return Decision(False, False, (), f"not applied: the solver found no plan within its time limit and this "
                        f"is the {plan.solve.fallback} fallback; raise replan.time_limit_s (or planner.time_limit)",
                        freed, cut)
    if not plan.summary.gpus_changed and not urgent:
        return Decision(False, False, (), "nothing to do: the plan changes no GPU", freed, cut)
    # urgent without a GPU change: new demand fits instances that exist; applying writes its assignments
    if reasons and len(c.dropped) > len(c.placed):
        instead = f", placing {len(c.placed)} now left out" if c.placed else ""
        return Decision(False, False, (), f"not applied: it would leave out {len(c.dropped)} workload(s) that run "
                        f"now{instead}", freed, cut)
    if reasons:
        # placing as many as it leaves out (the guard above: never fewer) is no reason, but the line says so
        swap = (f" (it also places {len(c.placed)} workload(s) now left out and leaves out {len(c.dropped)} that "
                "run now)" if c.dropped and len(c.placed) <= len(c.dropped) else "")
        return Decision(True, urgent, tuple(reasons), "applied: " + "; ".join(reasons) + swap, freed, cut)
    line = (f"not applied: frees {max(freed, 0)} GPU(s), threshold {policy.min_free_gpus}; cuts unneeded memory "
            f"by {max(cut, 0.0):.0%}, threshold {policy.min_waste_cut:.0%}; {_unserved(now, c)}")
    return Decision(False, False, (), line, freed, cut)


def orphans(problem: Problem) -> list[str]:
    """Instances no workload accounts for: not busy (no process), nobody's measured or assigned place
    (`planner.problem`), on a GPU the planner may change. `HOST:GPU:PROFILE@START`, sorted. A plan may reclaim them
    (they are idle capacity it can re-partition); replan reports them so that none goes unnoticed."""
    taken = {(it.running, it.running_on) for it in problem.items if it.running is not None}
    out = []
    for g in problem.gpus:
        if g.hold is not None or g.current is None:
            continue
        out += [f"{g.host}:{g.index}:{i}" for i in g.current.instances if i not in g.busy and (g.key, i) not in taken]
    return sorted(out)


def in_cooldown(last_changed: Mapping[GpuKey, float], now_ts: float, policy: ReplanPolicy) -> set[GpuKey]:
    """GPUs changed less than `cooldown_h` hours before `now_ts` (unix seconds)."""
    limit = policy.cooldown_h * 3600.0
    return {k for k, t in last_changed.items() if now_ts - t < limit}


def changed_gpus(plan: Plan) -> Iterable[GpuKey]:
    return (g.key for g in plan.gpus if g.actions)
