"""Re-check a plan in plain Python against the catalog and every constraint, whatever the solver said (pure).

Returns one message per violation (empty when the plan is sound). Families: layout (catalog
placement rules), frozen (reserved/excluded GPUs untouched), actions (they turn current into target),
accounting (every item once), instance (exists, one workload each), fit (memory and compute), pin,
spread (anti-affinity), busy (no running instance destroyed without --allow-disrupt), keep-free.
"""

from __future__ import annotations

from collections import defaultdict

from migplan.fleet.diff import diff
from migplan.fleet.state import GpuKey
from migplan.layout import check_layout
from migplan.planner.plan import GpuPlan, Plan, WorkloadPlan
from migplan.planner.problem import Item, Problem


def _gpus(plan: Plan, problem: Problem) -> list[str]:
    out = []
    for g in plan.gpus:
        pg = problem.gpu((g.host, g.index))
        if pg is None:
            out.append(f"gpu {g.host}/{g.index}: not in the observed state")
            continue
        if g.current != pg.current:
            out.append(f"gpu {g.host}/{g.index}: current layout differs from the observed one")
        if pg.hold and (g.target != pg.current or g.actions):
            out.append(f"gpu {g.host}/{g.index}: {pg.hold} GPU would be changed")
        if g.target is not None:
            out += [f"gpu {g.host}/{g.index}: layout: {c.message}"
                    for c in check_layout(problem.models[pg.model], g.target)]
        if list(g.actions) != diff(g.current, g.target, gpu=g.key, architecture=problem.models[pg.model].architecture):
            out.append(f"gpu {g.host}/{g.index}: actions do not turn the current layout into the target")
    if len({(g.host, g.index) for g in plan.gpus}) != len(problem.gpus) or len(plan.gpus) != len(problem.gpus):
        out.append("gpus: the plan must list every observed GPU exactly once")
    return out


def _item_checks(w: WorkloadPlan, it: Item, g: GpuPlan, problem: Problem, frozen: bool) -> list[str]:
    out = []
    model = problem.models[g.model]
    if w.instance is None:
        if g.target is not None or not w.kept:
            out.append(f"{w.name}: on a whole GPU that is not kept MIG-disabled for it")
        return out
    inst = next((i for i in (g.target.instances if g.target else ()) if str(i) == w.instance), None)
    if inst is None:
        return [f"{w.name}: instance {w.instance} is not in the target layout of {g.host}/{g.index}"]
    prof = inst.profile.removesuffix("+me")
    if not frozen and prof not in it.profiles(g.model):
        out.append(f"{w.name}: {inst.profile} on {model.id} does not fit {it.demand.memory_mib} MiB / "
                   f"{it.slices(g.model)} slices")
    if not frozen and it.pin_host and (g.host != it.pin_host or (it.pin_gpu is not None and g.index != it.pin_gpu)):
        out.append(f"{w.name}: pinned to {it.pin_host}/{it.pin_gpu}, placed on {g.host}/{g.index}")
    return out


def _workloads(plan: Plan, problem: Problem) -> list[str]:
    out = []
    items = {it.name: it for it in problem.items}
    rejected = {n for n, _ in problem.rejected}
    names = [w.name for w in plan.workloads]
    if sorted(names) != sorted(set(items) | rejected) or len(names) != len(set(names)):
        out.append("workloads: every workload replica must appear exactly once")
    taken: dict[tuple[GpuKey, str | None], str] = {}
    spots: dict[str, dict[object, str]] = defaultdict(dict)
    kept = {w.name for w in plan.workloads if w.kept}
    for w in plan.workloads:
        if w.status != "placed" or w.name not in items:
            continue
        it = items[w.name]
        g = plan.gpu(w.host or "", w.gpu if w.gpu is not None else -1)
        if g is None:
            out.append(f"{w.name}: placed on unknown GPU {w.host}/{w.gpu}")
            continue
        spot = ((g.host, g.index), w.instance)
        if spot in taken:
            out.append(f"{w.name}: shares {w.instance} on {g.host}/{g.index} with {taken[spot]}")
        taken[spot] = w.name
        pg = problem.gpu((g.host, g.index))
        out += _item_checks(w, it, g, problem, bool(pg and pg.hold))
        where: object = g.host if problem.policy.anti_affinity_scope == "host" else (g.host, g.index)
        for a in it.groups:
            other = spots[a].get(where)
            if other and not (w.kept and other in kept):
                out.append(f"{w.name}: anti-affinity {a} broken with {other} on {where}")
            spots[a][where] = w.name
    return out


def _busy(plan: Plan, problem: Problem) -> list[str]:
    if problem.policy.allow_disrupt:
        return []
    out = []
    running: dict[GpuKey, list[Item]] = defaultdict(list)
    for it in problem.items:
        if it.running is not None:
            running[it.running].append(it)
    for pg in problem.gpus:
        g = plan.gpu(pg.host, pg.index)
        if g is None:
            continue
        busy = set(pg.busy) | {it.running_on for it in running[pg.key] if it.running_on}
        lost = {i for i in busy if g.target is None or i not in g.target.instances}
        if lost:
            out.append(f"gpu {pg.host}/{pg.index}: destroys busy instance(s) {', '.join(map(str, sorted(lost)))} "
                       "without --allow-disrupt")
        whole = [it for it in running[pg.key] if it.running_on is None]
        if (whole or pg.whole_busy) and g.target is not None:
            out.append(f"gpu {pg.host}/{pg.index}: enables MIG under a running whole-GPU workload")
    return out


def _keep_free(plan: Plan, problem: Problem) -> list[str]:
    k = problem.policy.keep_free
    if not k:
        return []
    used = {(w.host, w.gpu) for w in plan.workloads if w.status == "placed"}
    free = sum(1 for g in plan.gpus if g.hold is None and (g.target is None or not len(g.target))
               and (g.host, g.index) not in used)
    return [] if free >= k else [f"keep-free: {free} whole GPUs free, {k} required"]


def validate(plan: Plan, problem: Problem) -> list[str]:
    """Every violation of the catalog's rules and the problem's constraints in `plan`."""
    if plan.fingerprint != problem.fingerprint:
        return ["fingerprint: the plan was computed from another observed state"]
    return _gpus(plan, problem) + _workloads(plan, problem) + _busy(plan, problem) + _keep_free(plan, problem)
