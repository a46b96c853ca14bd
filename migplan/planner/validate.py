"""Re-check a plan in plain Python against the catalog and every constraint, whatever the solver said (pure).

Returns one message per violation (empty when the plan is sound). Families: layout (catalog
placement rules), frozen (reserved/excluded GPUs untouched), actions (they turn current into target),
accounting (every item once), instance (exists, one workload each), fit (memory and compute), pin,
spread (anti-affinity), busy (no running instance destroyed without --allow-disrupt, nor a running workload
without --allow-disrupt or --consolidate, nor a `movable: false` one), keep-free, moves (the consolidation
budget), whole (a whole-GPU placement only on a MIG-disabled target, only for a workload that needs the
full profile or asks for `min_profile: whole`, and such a workload never on an instance; a GPU without MIG
never has a MIG layout), rule (a GPU's target keeps its `allowed` rule: only those profiles, MIG off only where
"whole" is allowed, never an empty MIG layout), eligible (a workload only where its eligibility lets it use that
profile, or the whole GPU).
"""

from __future__ import annotations

from collections import defaultdict

from migplan.catalog.layout import Layout, check_layout
from migplan.model.diff import diff
from migplan.model.gpu_plan import GpuPlan, WorkloadPlan, instances_taken
from migplan.model.state import GpuKey
from migplan.planner.groups import fits_where_it_runs, runs_in_mib
from migplan.planner.plan import Plan
from migplan.planner.problem import Item, Problem
from migplan.profiles import WHOLE_GPU, eligible_for, may_use


def _gpus(gpus: tuple[GpuPlan, ...], problem: Problem) -> list[str]:
    out = []
    layout_issues: dict[tuple[str, Layout], list[str]] = {}  # a fleet plans few distinct layouts per model
    for g in gpus:
        pg = problem.gpu((g.host, g.index))
        if pg is None:
            out.append(f"gpu {g.host}/{g.index}: not in the observed state")
            continue
        if g.current != pg.current:
            out.append(f"gpu {g.host}/{g.index}: current layout differs from the observed one")
        if pg.hold and (g.target != pg.current or g.actions):
            out.append(f"gpu {g.host}/{g.index}: {pg.hold} GPU would be changed")
        broken = pg.may_hold(g.target) if pg.hold is None else None
        if broken is not None:
            out.append(f"gpu {g.host}/{g.index}: target {g.target if g.target is not None else 'MIG disabled'} "
                       f"breaks its rule: {broken}")
        if (g.target is not None or g.current is not None) and not problem.models[pg.model].mig:
            out.append(f"gpu {g.host}/{g.index}: {pg.model} has no MIG, but the plan gives it a MIG layout")
        elif g.target is not None:
            issues = layout_issues.get((pg.model, g.target))
            if issues is None:
                issues = layout_issues[(pg.model, g.target)] = [
                    c.message for c in check_layout(problem.models[pg.model], g.target)]
            out += [f"gpu {g.host}/{g.index}: layout: {message}" for message in issues]
        if list(g.actions) != diff(g.current, g.target, gpu=g.key, architecture=problem.models[pg.model].architecture):
            out.append(f"gpu {g.host}/{g.index}: actions do not turn the current layout into the target")
    if len({(g.host, g.index) for g in gpus}) != len(problem.gpus) or len(gpus) != len(problem.gpus):
        out.append("gpus: the plan must list every observed GPU exactly once")
    return out


def _eligible(w: WorkloadPlan, it: Item, g: GpuPlan, profile: str) -> list[str]:
    """A placed workload only where its eligibility lets it use `profile` (plain, or WHOLE_GPU)."""
    if w.status != "placed" or may_use(it.eligible, profile, g.host):
        return []
    rule = eligible_for(it.eligible, profile)
    where = "it may not use it anywhere" if rule is None else f"it may use it only on {rule.why or 'other hosts'}"
    what = "the whole GPU" if profile == WHOLE_GPU else profile
    return [f"{w.name}: {what} on {g.host}/{g.index}, but {where}"]


def _item_checks(w: WorkloadPlan, it: Item, g: GpuPlan, problem: Problem, frozen: bool) -> list[str]:
    out = []
    model = problem.models[g.model]
    if w.instance is None:
        if not frozen:
            out += _eligible(w, it, g, WHOLE_GPU)
        if g.target is not None:
            out.append(f"{w.name}: on the whole GPU {g.host}/{g.index}, whose target has MIG enabled")
        elif not w.kept and not frozen and WHOLE_GPU not in it.profiles(g.model):
            out.append(f"{w.name}: moved onto a whole MIG-disabled GPU, which it does not need (it fits "
                       f"{', '.join(it.profiles(g.model)) or 'nothing'} on {model.id})")
        elif it.running_on is None and w.kept and (g.host, g.index) != it.running:
            out.append(f"{w.name}: marked kept on {g.host}/{g.index}, but it runs on {it.running}")
        return out
    inst = next((i for i in (g.target.instances if g.target else ()) if str(i) == w.instance), None)
    if inst is None:
        return [f"{w.name}: instance {w.instance} is not in the target layout of {g.host}/{g.index}"]
    prof = inst.profile.removesuffix("+me")
    if w.status == "at_risk":
        return out  # where it runs, its peak within it: `_at_risk` checks that, not the fit it is known to lack
    if not frozen and prof not in it.profiles(g.model):
        out.append(f"{w.name}: {inst.profile} on {model.id} does not fit {it.demand.memory_mib} MiB / "
                   f"{it.slices(g.model)} slices")
    if not frozen and it.pin_host and (g.host != it.pin_host or (it.pin_gpu is not None and g.index != it.pin_gpu)):
        out.append(f"{w.name}: pinned to {it.pin_host}/{it.pin_gpu}, placed on {g.host}/{g.index}")
    if not frozen:
        out += _eligible(w, it, g, prof)
    return out


def _workloads(gpus: tuple[GpuPlan, ...], workloads: tuple[WorkloadPlan, ...], problem: Problem) -> list[str]:
    out = []
    items = {it.name: it for it in problem.items}
    rejected = {n for n, _ in problem.rejected}
    names = [w.name for w in workloads]
    if sorted(names) != sorted(set(items) | rejected) or len(names) != len(set(names)):
        out.append("workloads: every workload replica must appear exactly once")
    taken: dict[tuple[GpuKey, str | None], str] = {}
    spots: dict[str, dict[object, str]] = defaultdict(dict)
    kept = {w.name for w in workloads if w.kept}
    planned = {g.key: g for g in gpus}
    for w in workloads:
        if not w.on_gpu or w.name not in items:
            continue
        it = items[w.name]
        if w.status == "at_risk":
            out += _at_risk(w, it, problem)
        g = planned.get((w.host or "", w.gpu if w.gpu is not None else -1))
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


def _at_risk(w: WorkloadPlan, it: Item, problem: Problem) -> list[str]:
    """Kept at risk: it stays exactly where it runs, does not fit its sized demand there, and its observed peak
    fits there (else it is outgrown, and left out or moved)."""
    where = (w.host, w.gpu)
    if it.running is None or where != it.running or w.instance != (str(it.running_on) if it.running_on else None):
        return [f"{w.name}: kept at risk on {w.host}/{w.gpu} {w.instance or 'whole'}, but it runs on "
                f"{it.running} {it.running_on or 'whole'}"]
    gpu = problem.gpu(it.running)
    if gpu is None:
        return []
    model = problem.models[gpu.model]
    if fits_where_it_runs(it, gpu, model.full_profile.name):
        return [f"{w.name}: marked at risk, yet it fits where it runs"]
    mib = runs_in_mib(model, it)
    if it.demand.peak_mib > mib:
        return [f"{w.name}: kept at risk, but its peak {it.demand.peak_mib} MiB exceeds its {mib} MiB there"]
    return []


def _busy(gpus: tuple[GpuPlan, ...], problem: Problem) -> list[str]:
    """Nothing running is destroyed without consent: busy (unprofiled) instances need --allow-disrupt, running
    workloads --allow-disrupt or --consolidate, and never a workload whose profile says `movable: false`."""
    pol = problem.policy
    out = []
    running: dict[GpuKey, list[Item]] = defaultdict(list)
    for it in problem.items:
        if it.running is not None and not (pol.movable_running and it.movable):
            running[it.running].append(it)
    planned = {g.key: g for g in gpus}
    for pg in problem.gpus:
        g = planned.get(pg.key)
        if g is None:
            continue
        busy = (set() if pol.allow_disrupt else set(pg.busy)) | {it.running_on for it in running[pg.key]
                                                                  if it.running_on}
        lost = {i for i in busy if g.target is None or i not in g.target.instances}
        if lost:
            out.append(f"gpu {pg.host}/{pg.index}: destroys busy instance(s) {', '.join(map(str, sorted(lost)))} "
                       "without consent (--allow-disrupt, or --consolidate for a movable workload)")
        whole = [it for it in running[pg.key] if it.running_on is None]
        if (whole or (pg.whole_busy and not pol.allow_disrupt)) and g.target is not None:
            out.append(f"gpu {pg.host}/{pg.index}: enables MIG under a running whole-GPU workload")
    return out


def _moves(workloads: tuple[WorkloadPlan, ...], problem: Problem) -> list[str]:
    """Consolidation: at most `max_moves` running workloads change instance (outgrown ones, which must move
    anyway, are not counted); `movable: false` workloads keep their place wherever they still fit it."""
    out = []
    pol = problem.policy
    items = {it.name: it for it in problem.items}
    outgrown = problem_outgrown(problem)
    moved = [w for w in workloads if w.name in items and items[w.name].running is not None and not w.kept
             and w.name not in outgrown]
    if pol.consolidate and pol.max_moves is not None and len(moved) > pol.max_moves:
        out.append(f"moves: {len(moved)} running workloads change instance, more than max_moves {pol.max_moves}")
    for w in moved:
        if not items[w.name].movable:
            out.append(f"{w.name}: moved although its profile says movable: false")
    return out


def problem_outgrown(problem: Problem) -> frozenset[str]:
    """Running items that no longer fit where they run (they must move, or are reported as outgrown)."""
    out = set()
    for it in problem.items:
        if it.running is None:
            continue
        gpu = problem.gpu(it.running)
        if gpu is not None and not gpu.hold and not fits_where_it_runs(
                it, gpu, problem.models[gpu.model].full_profile.name):
            out.add(it.name)
    return frozenset(out)


def _keep_free(gpus: tuple[GpuPlan, ...], workloads: tuple[WorkloadPlan, ...], problem: Problem) -> list[str]:
    k = problem.policy.keep_free
    if not k:
        return []
    used = {(w.host, w.gpu) for w in workloads if w.on_gpu}
    free = sum(1 for g in gpus if g.hold is None and (g.target is None or not len(g.target))
               and (g.host, g.index) not in used)
    return [] if free >= k else [f"keep-free: {free} whole GPUs free, {k} required"]


def _spare(gpus: tuple[GpuPlan, ...], workloads: tuple[WorkloadPlan, ...], problem: Problem) -> list[str]:
    """`spare`: at least N instances of the profile free in the planned GPUs' targets of the models named (free:
    no workload placed or kept there, not busy, no running workload left on it)."""
    pol = problem.policy
    if not pol.spare:
        return []
    taken: set[tuple[GpuKey, str | None]] = set(instances_taken(workloads))
    on_gpu = {w.name for w in workloads if w.on_gpu}
    for it in problem.items:  # a running workload left out that may not be stopped runs on where it is
        if it.running is not None and it.name not in on_gpu and not (pol.movable_running and it.movable):
            taken.add((it.running, str(it.running_on) if it.running_on else None))
    out = []
    for entry, n in pol.spare:
        model_id, _, q = entry.rpartition("/")
        free = 0
        for g in gpus:
            pg = problem.gpu(g.key)
            if g.hold is not None or g.target is None or pg is None or (model_id and g.model != model_id):
                continue
            free += sum(1 for i in g.target.instances if i.profile == q and i not in pg.busy
                        and (g.key, str(i)) not in taken)
        if free < n:
            out.append(f"spare {entry}: {free} free {q} instance(s) in the targets, {n} asked for")
    return out


Checks = tuple[list[str], list[str]]  # two families' messages, which `validate` puts in its own order


def check_gpus(gpus: tuple[GpuPlan, ...], problem: Problem) -> Checks:
    """The checks that need only the plan's GPUs (layout, frozen, actions; busy)."""
    return _gpus(gpus, problem), _busy(gpus, problem)


def check_workloads(gpus: tuple[GpuPlan, ...], workloads: tuple[WorkloadPlan, ...],
                    problem: Problem) -> Checks:
    """The checks of the plan's workloads (accounting, instance, fit, pin, spread; keep-free, moves, whole):
    made as soon as the workloads are placed, while the planner orders the migrations and sums up."""
    rest = (_keep_free(gpus, workloads, problem) + _spare(gpus, workloads, problem) + _moves(workloads, problem)
            + _whole(workloads, problem))
    return _workloads(gpus, workloads, problem), rest


def validate(plan: Plan, problem: Problem, *, gpu_checks: Checks | None = None,
             workload_checks: Checks | None = None) -> list[str]:
    """Every violation of the catalog's rules and the problem's constraints in `plan`; `gpu_checks` and
    `workload_checks`: `check_gpus(plan.gpus, problem)` and `check_workloads(plan.gpus, plan.workloads,
    problem)`, made beforehand."""
    if plan.fingerprint != problem.fingerprint:
        return ["fingerprint: the plan was computed from another observed state"]
    gpus, busy = gpu_checks if gpu_checks is not None else check_gpus(plan.gpus, problem)
    placed, rest = (workload_checks if workload_checks is not None
                    else check_workloads(plan.gpus, plan.workloads, problem))
    return gpus + placed + busy + rest


def _whole(workloads: tuple[WorkloadPlan, ...], problem: Problem) -> list[str]:
    """`min_profile: whole`: placed only on a whole MIG-disabled GPU (the fit check holds the rest). A workload kept
    where it runs on a reserved GPU is not placed by the plan: its fits name only the models of the GPUs the plan may
    change (a pod on a held Kubernetes node, whose model no changeable GPU has, may read as whole-only)."""
    out = []
    need = {it.name for it in problem.items if it.fits and all(profs == (WHOLE_GPU,) for _, profs in it.fits)}
    for w in workloads:
        held = w.host is not None and w.gpu is not None and (g := problem.gpu((w.host, w.gpu))) is not None and g.hold
        if w.name in need and w.status == "placed" and w.instance is not None and not held:
            out.append(f"{w.name}: needs a whole MIG-disabled GPU (min_profile: whole), placed on {w.instance}")
    return out
