"""plan(state, profiles, catalog, policy, solver) -> Plan: the whole planner, pure apart from the injected solver.

build problem -> aggregate -> formulate -> solve -> re-check the solution row by row -> map to GPUs
and workloads -> diff each GPU -> validate the plan -> summary. A plan that fails a check is never
returned (PlanError).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Mapping
from typing import TypeVar

from migplan import yamldoc
from migplan.catalog import Catalog
from migplan.catalog.layout import Layout, used_compute
from migplan.model.diff import Op, diff
from migplan.model.gpu_plan import Endpoint, GpuPlan, WorkloadPlan, instances_taken
from migplan.model.state import FleetState, GpuKey
from migplan.planner.demand import Policy, Weights, headroom_rule, memory_warning
from migplan.planner.formulation import Formulation, formulate, reweighted
from migplan.planner.greedy import GREEDY, STILL, frozen_problem, greedy_values, left_out_reason
from migplan.planner.groups import Split, class_key, split
from migplan.planner.mapping import Mapped, map_solution
from migplan.planner.migration import GpuLayouts, Move, order
from migplan.planner.milp import Milp, SizeLimit, SolveHandle, Solver, SolveResult, SolveStatus, start_solve
from migplan.planner.plan import (
    Consolidation,
    CurvePoint,
    Eligibility,
    Plan,
    PlanError,
    SolveInfo,
    Summary,
    in_use,
    instance_memory_mib,
    memory_margins,
    plan_freed,
)
from migplan.planner.problem import Item, Problem, build_problem
from migplan.planner.validate import check_gpus, check_workloads, validate
from migplan.profiles import Eligible, ProfileSet

Progress = Callable[[str], None]
# The planner's own phases, told to a caller's `phase` hook as they begin (a progress display shows them): the
# solver is working on a built model, then its answer is mapped, checked and turned into the plan
SOLVING = "solving"
CHECKING = "checking the plan"
LB_WEIGHTS = Weights(unplaced=0, disrupt=0, gpu=1, change=0, fragment=0, waste=0, mode=0, reset=0, risk=0, idle=0)


def gpu_lower_bound(problem: Problem, sp: Split, solver: Solver,
                    left_out: dict[int, int] | None = None) -> int | None:
    """ceil(LP relaxation of: min GPUs used s.t. every item placed, same fixed instances); None if impossible.

    `left_out` (class -> count) lets that many items of a class stay out, so the bound compares with a plan
    that could not place everything."""
    return _bound(start_solve(solver, _bound_model(problem, sp, left_out), relax=True))


def _bound_model(problem: Problem, sp: Split, left_out: dict[int, int] | None = None,
                 f: Formulation | None = None) -> Milp:
    """The lower bound's LP (`gpu_lower_bound`); `f`: its formulation made beforehand (its `u` bounds set here)."""
    f = f or formulate(problem, sp, LB_WEIGHTS, place_all=True)
    for c, n in (left_out or {}).items():
        f.milp.upper[f.u[c]] = n
    return f.milp


def _bound(handle: SolveHandle) -> int | None:
    res = handle.result()
    if res.objective is None:
        return None
    return math.ceil(res.objective - 1e-6)


def _gpus(problem: Problem, m: Mapped) -> tuple[GpuPlan, ...]:
    out = []
    for g in problem.gpus:
        target = m.targets.get(g.key, g.current)
        arch = problem.models[g.model].architecture
        out.append(GpuPlan(g, target, tuple(diff(g.current, target, gpu=g.key, architecture=arch))))
    return tuple(out)


def _workload(problem: Problem, it: Item, m: Mapped) -> WorkloadPlan:
    first = it.fits[0][0] if it.fits else ""
    base = {"name": it.name, "workload": it.workload, "memory_mib": it.demand.memory_mib,
            "peak_mib": it.demand.peak_mib}
    if it.name in m.placed:
        (host, idx), inst = m.placed[it.name]
        gpu = problem.gpu((host, idx))
        slices = it.slices(gpu.model) if gpu else 0
        moved = it.running is not None and it.name not in m.kept
        instance = str(inst) if inst else None
        # the memory it gets there: the instance's profile, or the whole MIG-disabled GPU's memory
        mib = instance_memory_mib(problem.models[gpu.model], instance) if gpu else None
        margin = mib - it.demand.peak_mib if mib is not None else None
        # kept where it runs although only its peak fits there: at risk, with its margin and why
        risky = it.name in m.kept and it.name in m.at_risk
        return WorkloadPlan(**base, status="at_risk" if risky else "placed", host=host, gpu=idx,  # type: ignore[arg-type]  # base: str and int fields
                            instance=instance, instance_mib=mib, margin_mib=margin, slices=slices,
                            kept=it.name in m.kept, moved=moved, reason=m.at_risk[it.name] if risky else None)
    return WorkloadPlan(**base, status="unplaced", slices=it.slices(first),  # type: ignore[arg-type]  # base: as above
                        reason=m.unplaced.get(it.name, "left out"))


def _busy_disrupted(problem: Problem, gpus: tuple[GpuPlan, ...]) -> int:
    """Busy instances the targets drop, plus busy MIG-disabled GPUs the targets put in MIG mode."""
    # a MIG-disabled GPU where a profiled workload runs: its processes are that workload's (groups.py)
    whole_running = {it.running for it in problem.items if it.running is not None and it.running_on is None}
    n = 0
    for g in gpus:
        pg = problem.gpu((g.host, g.index))
        if pg is None:
            continue
        n += sum(1 for i in pg.busy if g.target is None or i not in g.target.instances)
        n += int(pg.whole_busy and g.target is not None and pg.key not in whole_running)
    return n


def _stoppable(problem: Problem) -> set[str]:
    """Running items the plan may move or stop: without consent (or with `movable: false`) an outgrown
    workload keeps running where it is, placed or not."""
    return {it.name for it in problem.items if it.running is not None and it.movable and problem.policy.movable_running}


def _kept_running(problem: Problem, placed: Mapping[str, GpuKey], targets: Mapping[GpuKey, Layout | None],
                  stoppable: set[str]) -> set[GpuKey]:
    """MIG-disabled GPUs (in the plan's target) where something keeps running although no placed workload is
    there: an outgrown workload the plan may not move (it is left out, and runs on), or processes on the
    whole GPU that no moved or stopped workload accounts for. Such a GPU is in use, not free."""
    out: set[GpuKey] = set()
    gone: set[GpuKey] = set()  # MIG-disabled GPUs a running whole-GPU workload leaves (its processes go too)
    for it in problem.items:
        if it.running is None or targets.get(it.running) is not None:
            continue
        if it.name not in placed and it.name not in stoppable:
            out.add(it.running)
        elif it.running_on is None and placed.get(it.name) != it.running:
            gone.add(it.running)
    for g in problem.gpus:
        if g.hold is None and g.whole_busy and targets.get(g.key) is None and g.key not in gone:
            out.add(g.key)
    return out


def _summary(problem: Problem, gpus: tuple[GpuPlan, ...], wls: tuple[WorkloadPlan, ...], value: float,
             lb: int | None) -> Summary:
    hosting = {(w.host, w.gpu) for w in wls if w.on_gpu}
    stoppable = _stoppable(problem)
    placed = {w.name: (w.host or "", w.gpu if w.gpu is not None else -1) for w in wls if w.on_gpu}
    hosting |= _kept_running(problem, placed, {g.key: g.target for g in gpus}, stoppable)
    planned = [g for g in gpus if g.hold is None]
    used = [g for g in planned if (g.target is not None and len(g.target)) or (g.host, g.index) in hosting]
    stranded = sum(problem.models[g.model].compute_slices - used_compute(problem.models[g.model], g.target)
                   for g in used if g.target is not None)
    running = {it.name for it in problem.items if it.running is not None}
    disrupted = sum(1 for w in wls if w.name in running and (w.moved or (not w.on_gpu and w.name in stoppable)))
    busy_disrupted = _busy_disrupted(problem, gpus)
    below_peak, least_margin = memory_margins(wls)
    if problem.policy.memory_percentile == "max":
        # sized from the peak, only a workload kept where it runs on a reserved/excluded GPU can be below it
        held = {(g.host, g.index) for g in gpus if g.hold is not None}
        bad = [w.name for w in wls if w.status == "placed" and (w.margin_mib or 0) < 0 and (w.host, w.gpu) not in held]
        if bad:
            raise PlanError(f"sized from the observed peak, yet {len(bad)} workload(s) were placed below it: "
                            + ", ".join(bad[:5]))
    idle_kept, idle_removed, idle_freeing = _idle(problem, planned, wls, {(g.host, g.index) for g in used})
    return Summary(
        gpus_total=len(gpus), gpus_planned=len(planned), gpus_used=len(used), gpus_lower_bound=lb,
        gpus_changed=sum(1 for g in gpus if g.actions), free_whole_gpus=len(planned) - len(used),
        instances_destroyed=sum(1 for g in gpus for a in g.actions if a.op is Op.DESTROY_GI),
        instances_created=sum(1 for g in gpus for a in g.actions if a.op is Op.CREATE_GI),
        workloads_placed=sum(1 for w in wls if w.status == "placed"),
        workloads_unplaced=sum(1 for w in wls if not w.on_gpu),
        workloads_disrupted=disrupted, busy_disrupted=busy_disrupted, stranded_slices=stranded,
        placed_value=round(value, 4), below_peak=below_peak, min_margin_mib=least_margin,
        headroom_rule=headroom_rule(problem.policy), memory_warning=memory_warning(problem.policy, below_peak),
        workloads_at_risk=sum(1 for w in wls if w.status == "at_risk"), idle_kept=idle_kept,
        idle_removed=idle_removed, idle_removed_freeing=idle_freeing)


def _idle(problem: Problem, planned: list[GpuPlan], wls: tuple[WorkloadPlan, ...],
          used: set[GpuKey]) -> tuple[int, int, int]:
    """(idle instances kept free, idle instances destroyed, of those on GPUs left unused): idle = a current
    instance where no workload runs and no process is busy."""
    running: dict[GpuKey, set[object]] = {}
    for it in problem.items:
        if it.running is not None and it.running_on is not None:
            running.setdefault(it.running, set()).add(it.running_on)
    taken = instances_taken(wls)
    kept = removed = freeing = 0
    for g in planned:
        if g.current is None:
            continue
        occupied = running.get(g.key, set()) | set(g.observed.busy)
        after = set(g.target.instances) if g.target is not None else set()
        for inst in g.current.instances:
            if inst in occupied:
                continue
            if inst not in after:
                removed += 1
                freeing += int(g.key not in used)
            elif (g.key, str(inst)) not in taken:
                kept += 1
    return kept, removed, freeing


def _left_out(problem: Problem, sp: Split, mapped: Mapped) -> dict[int, int]:
    """Items per class the plan leaves out (what the mapping did, which may differ from the solver's u when
    an anti-affine member could not be spread): the lower bound then compares with the plan itself."""
    klass = {c.key: c.idx for c in sp.classes}
    out: dict[int, int] = {c.idx: 0 for c in sp.classes}
    for it in problem.items:
        k = class_key(it)
        if it.name not in mapped.placed and it.name not in sp.unplaced and k in klass:
            out[klass[k]] += 1
    return out


class NoIncumbent(PlanError):
    """The solver stopped (its time limit) before it had any solution, and proved nothing: `plan_problem` then
    makes the greedy fallback (planner.greedy)."""

    def __init__(self, result: SolveResult) -> None:
        super().__init__(f"the solver found no plan in time ({result.status.value}: {result.message})",
                         hint="give it more time (--time-limit) or a larger --gap")
        self.result = result


def _fallback(problem: Problem, res: SolveResult, say: Progress,
              limit: SizeLimit | None) -> tuple[Problem, Split, Mapped, SolveResult]:
    """The greedy plan (planner.greedy) for a problem the solver found no plan for in time: the frozen problem
    (nothing running moves), its split, the mapping of the greedy's values, and the solver's result as it ended.
    PlanError when even that cannot be made (a GPU group with no pattern that keeps it as it is)."""
    frozen = frozen_problem(problem)
    sp = split(frozen, still=STILL)
    f = formulate(frozen, sp, limit=limit)
    try:
        values = greedy_values(f)
    except ValueError as err:
        raise PlanError(f"the solver found no plan in time, and no fallback could be made: {err}",
                        hint="give it more time (--time-limit)") from None
    say(f"solver {res.solver}: no solution in {res.time_s:.2f}s; falling back to a greedy plan "
        "(every layout kept, nothing running moved, new demand in idle instances)")
    mapped = map_solution(f, values)
    for it in frozen.items:  # new demand without a place: say why in the fallback's terms
        if it.name in mapped.unplaced and it.name not in sp.unplaced:
            mapped.unplaced[it.name] = left_out_reason(it, frozen.policy.anti_affinity_scope)
    return frozen, sp, mapped, res


REFINE_ROUNDS = 2  # re-solves with the sets the mapping could not spread planned per GPU group
REFINE_ALL = 20_000  # ... all sets at once when that many (class, group) pairs or fewer


def _with_time_limit(solver: Solver, seconds: float) -> Solver:
    """The solver with `seconds` as its time limit (a dataclass with a `time_limit` field), else itself."""
    if dataclasses.is_dataclass(solver) and not isinstance(solver, type) and hasattr(solver, "time_limit"):
        return dataclasses.replace(solver, time_limit=seconds)
    return solver


def _time_limit(solver: Solver) -> float | None:
    limit = getattr(solver, "time_limit", None)
    return float(limit) if isinstance(limit, (int, float)) else None


def _per_group_size(f: Formulation) -> int:
    """(class, group) pairs if every anti-affine class were planned per GPU group."""
    return sum(1 for c in f.split.classes if c.anti and not c.special) * len(f.split.groups)


def _unspread(f: Formulation, values: tuple[float, ...], mapped: Mapped) -> frozenset[str]:
    """Anti-affinity sets of classes with more items left out by the mapping than the solver left out."""
    klass = {c.key: c for c in f.split.classes}
    lost: Counter[int] = Counter(klass[class_key(it)].idx for it in f.problem.items
                                 if it.name in mapped.unplaced and it.name not in f.split.unplaced
                                 and class_key(it) in klass)
    return frozenset(a for c in f.split.classes if lost[c.idx] > round(values[f.u[c.idx]]) for a in c.sample.groups)


def _solve(problem: Problem, sp: Split, solver: Solver, progress: Progress,
           limit: SizeLimit | None = None,
           meanwhile: Callable[[Formulation], None] | None = None,
           phase: Progress | None = None) -> tuple[Mapped, SolveResult, dict[int, int]]:
    """Formulate, solve, re-check and map. When the mapping cannot spread members the solver placed (the model
    counts instances per model, not which GPU's instances each set may share), the sets involved are planned
    per GPU group and the model solved again (at most REFINE_ROUNDS times, each with what is left of the
    solver's time limit); the best mapping by placed value, then objective, is kept. `meanwhile` runs while
    the solver works on the first model (CBC is a child process), given that model's formulation: the lower
    bound is made from it."""
    refine: frozenset[str] = frozenset()
    best: tuple[float, float, Mapped, SolveResult] | None = None
    spent, budget = 0.0, _time_limit(solver)
    sets = len({a for c in sp.classes for a in c.sample.groups})
    for attempt in range(1 + REFINE_ROUNDS):
        try:
            f = formulate(problem, sp, limit=limit, refine=refine)
        except PlanError:
            if best is None:
                raise
            break  # the refined model is too large: keep what the smaller one gave
        progress(f"model: {len(f.milp.names)} variables, {len(f.milp.rows)} rows, {f.milp.nonzeros} nonzeros "
                 f"({len(sp.groups)} GPU groups, {len(sp.classes)} workload classes"
                 + (f", {sets} anti-affinity sets" if sets else "")
                 + (f", {len(refine)} of them per GPU group" if refine else "") + ")")
        if phase is not None:
            phase(SOLVING)
        handle = start_solve(solver if budget is None or not attempt else _with_time_limit(solver, budget - spent),
                             f.milp)
        try:
            if meanwhile is not None and not attempt:
                meanwhile(f)
            res = handle.result()
        finally:
            handle.cancel()
        spent += res.time_s
        progress(f"solver {res.solver}: {res.status.value} in {res.time_s:.2f}s ({res.message})")
        if phase is not None:
            phase(CHECKING)
        if not res.status.has_solution or f.milp.violations(list(res.values)):
            if best is not None:
                break
            if res.status is SolveStatus.NO_SOLUTION:
                raise NoIncumbent(res)
            if not res.status.has_solution:
                hint = "lower --keep-free" if problem.policy.keep_free else None
                raise PlanError(f"the solver found no plan ({res.status.value}: {res.message})", hint=hint)
            bad = f.milp.violations(list(res.values))
            raise PlanError(f"the solver's answer breaks {len(bad)} row(s), e.g. {', '.join(bad[:5])}",
                            hint="try the other solver (--solver) or a longer --time-limit")
        mapped = map_solution(f, res.values)
        value = sum(it.value for it in problem.items if it.name in mapped.placed)
        if best is None or (value, -(res.objective or 0.0)) > (best[0], best[1]):
            best = (value, -(res.objective or 0.0), mapped, res)
        more = _unspread(f, res.values, mapped) - refine
        if not more or attempt == REFINE_ROUNDS or (budget is not None and budget - spent < max(1.0, budget / 10)):
            break
        if _per_group_size(f) <= REFINE_ALL:
            more = frozenset(a for c in sp.classes for a in c.sample.groups) - refine
        refine |= more
        progress(f"{len(more)} anti-affinity set(s) could not be spread as the model counted; "
                 "planning them per GPU group")
    assert best is not None
    _, _, mapped, res = best
    return mapped, res, _left_out(problem, sp, mapped)


def _moves(problem: Problem, sp: Split, mapped: Mapped, gpus: tuple[GpuPlan, ...]) -> list[Move]:
    """Running items the plan moves or stops, with their source and target, and why."""
    after = {(h, i) for (h, i), _ in mapped.placed.values()} | {
        g.key for g in gpus if g.target is not None and len(g.target)}
    forced = set(sp.forced)
    out = []
    for it in problem.items:
        if it.running is None or it.name in mapped.kept or it.name in sp.unplaced:
            continue  # sp.unplaced: outgrown but not to be moved (no consent, movable: false): it keeps running
        src = Endpoint(it.running[0], it.running[1], str(it.running_on) if it.running_on else None)
        dst = None
        if it.name in mapped.placed:
            (h, i), inst = mapped.placed[it.name]
            dst = Endpoint(h, i, str(inst) if inst else None)
        if dst is None:
            why = "left out: " + mapped.unplaced.get(it.name, "no room")
            if it.name in sp.at_risk:  # a stop of a workload whose peak fits where it runs: say what took its place
                why += f" (it ran at risk: {sp.at_risk[it.name]}; its place went to higher-value demand)"
        elif it.name in sp.at_risk:
            why = f"at risk where it runs ({sp.at_risk[it.name]}): moves to a place that fits it"
        elif it.name in forced:
            why = "outgrown: its instance no longer fits its demand or pin"
        elif it.running not in after:
            why = f"frees {it.running[0]}:{it.running[1]}"
        else:
            why = ("another instance of its GPU, whose layout changes" if dst.key == it.running
                   else "consolidation: makes room where it runs")
        out.append(Move(it.name, it.priority, src, dst, why))
    return out


CURVE_FRACTIONS = (0.0, 0.1, 0.25, 0.5, 0.75)  # consolidation curve: re-solves at these shares of the budget
CURVE_TIME_LIMIT_S = 10.0  # each curve re-solve: at most this long (a point is then "feasible", still a plan)


def _used_after(problem: Problem, mapped: Mapped) -> set[GpuKey]:
    """Planned GPUs in use after a mapping: a workload there, something left running, or instances."""
    hosting = {k for k, _ in mapped.placed.values()}
    hosting |= _kept_running(problem, {n: k for n, (k, _) in mapped.placed.items()},
                             {g.key: mapped.targets.get(g.key, g.current) for g in problem.gpus}, _stoppable(problem))
    return {g.key for g in problem.gpus if g.hold is None and (
        g.key in hosting or (mapped.targets.get(g.key) is not None and len(mapped.targets[g.key] or ())))}


def _curve(problem: Problem, sp: Split, solver: Solver, say: Progress, limit: SizeLimit | None, moves: int,
           before: set[GpuKey], own: CurvePoint) -> tuple[CurvePoint, ...]:
    """Re-solve at smaller budgets (and, under a budget, without one): GPUs freed per number of moves."""
    budget = problem.policy.max_moves if problem.policy.max_moves is not None else moves
    budgets: list[int | None] = [*sorted({int(budget * x) for x in CURVE_FRACTIONS} - {budget})]
    if problem.policy.max_moves is not None:
        budgets.append(None)
    points = [own]
    limit_s = _time_limit(solver)
    quick = _with_time_limit(solver, min(limit_s, CURVE_TIME_LIMIT_S) if limit_s else CURVE_TIME_LIMIT_S)
    for b in budgets:
        sub = dataclasses.replace(problem, policy=dataclasses.replace(problem.policy, max_moves=b))
        mapped, res, _ = _solve(sub, sp, quick, lambda _m: None, limit)
        after = _used_after(sub, mapped)
        n = sum(1 for it in problem.items if it.running is not None and it.name not in mapped.kept
                and it.name not in sp.unplaced)
        points.append(CurvePoint(b, n, len(after), len(before - after)))  # freed: as the plan's own freed list
        say(f"consolidation curve: at most {b if b is not None else 'any'} moves: {n} moves, "
            f"{len(before - after)} GPUs freed ({res.status.value})")
    return tuple(sorted(points, key=lambda p: (p.max_moves is None, p.max_moves or 0)))


def plan_problem(problem: Problem, solver: Solver, *, source: str = "inventory",
                 progress: Progress | None = None, lower_bound: bool = True, limit: SizeLimit | None = None,
                 curve: bool = True, phase: Progress | None = None) -> Plan:
    """The plan for a built problem. `limit` bounds the model's size (default `formulation.LIMIT`): a larger
    model is refused with a PlanError while it is built, before it can fill memory. `curve`: when
    consolidating, re-solve at a few smaller move budgets to report GPUs freed per move (`Consolidation`)."""
    say = progress or (lambda _msg: None)
    sp = split(problem)
    with contextlib.ExitStack() as started:  # every solve begun here is stopped on the way out
        # The lower bound's LP is made from the plan's own model and started while CBC solves that model, for
        # a plan that leaves out nothing the model could place (the usual case); it is solved again with the
        # plan's left-out counts when there are any. It runs while the plan's layouts, workloads and
        # migrations are worked out (bench/large_inputs.py: ~0.3 s of 3 at 7,000 GPUs), and is the LP that
        # solving one after the other would solve.
        made: list[tuple[Formulation, SolveHandle]] = []

        def start_bound(f: Formulation) -> None:
            g = reweighted(f, LB_WEIGHTS, place_all=True)
            made.append((g, _begun(started, start_solve(solver, g.milp, relax=True))))

        asked = problem.policy
        fallback: str | None = None
        try:
            mapped, res, left_out = _solve(problem, sp, solver, say, limit,
                                           meanwhile=start_bound if lower_bound else None, phase=phase)
        except NoIncumbent as stop:
            # made and checked under the frozen problem's policy (nothing running moves); the plan records the
            # policy asked for, and that it is the fallback
            problem, sp, mapped, res = _fallback(problem, stop.result, say, limit)
            left_out, fallback = _left_out(problem, sp, mapped), GREEDY
        bound: SolveHandle | None = None
        if lower_bound:  # `_solve` ran `start_bound` on its first model
            g, bound = made[0]
            if fallback is not None and any(left_out.values()):
                bound.cancel()  # the bound on placing everything: no measure of a plan that leaves some out
                bound = None
            elif any(left_out.values()):
                bound.cancel()
                g = dataclasses.replace(g, milp=dataclasses.replace(g.milp, upper=list(g.milp.upper)))
                bound = _begun(started, start_solve(solver, _bound_model(problem, sp, left_out, g), relax=True))
        for name, reason in problem.rejected:
            mapped.unplaced[name] = reason
        gpus = _gpus(problem, mapped)
        items = list(problem.items) + list(problem.rejected_items)
        wls = tuple(_workload(problem, it, mapped) for it in sorted(items, key=lambda i: i.name))
        value = sum(it.value for it in problem.items if it.name in mapped.placed)
        moves = _moves(problem, sp, mapped, gpus)
        touched = {m.source.key for m in moves} | {m.target.key for m in moves if m.target is not None}
        catalog = {g.key: GpuLayouts(problem.models[g.model], g.current, g.target) for g in gpus if g.key in touched}
        try:
            migrations = order(catalog, moves)
        except ValueError as err:
            raise PlanError(f"the plan's moves cannot be ordered: {err}") from None
        lb = _bound(bound) if bound is not None else None
        solve = SolveInfo(res.solver, res.status.value, res.objective, res.bound, res.gap, round(res.time_s, 3), lb,
                          fallback=fallback)
        used = {g.model for g in problem.gpus}
        # carried in the plan: models built from hosts' own tables, and GPUs without MIG (not in the shipped catalog)
        host_models = tuple(m for k, m in sorted(problem.models.items())
                            if k in used and (m.confidence == "host" or not m.mig))
        summary = _summary(problem, gpus, wls, value, lb)
        before, after = in_use(gpus, wls, migrations)
        freed = plan_freed(gpus, wls, migrations)
        consolidation = None
        if problem.policy.consolidate:
            # freed: the GPUs in use before that the plan leaves empty (its freed list); GPUs it brings into use
            # are counted apart (newly used), the net is their difference, which the lower bound bounds
            own = CurvePoint(problem.policy.max_moves, len(migrations), summary.gpus_used, len(freed))
            points = _curve(problem, sp, solver, say, limit, len(migrations), before, own) if curve else (own,)
            free_lb = lb  # the bound with moves unlimited: what any budget could free at most
            if lower_bound and problem.policy.max_moves is not None:
                free_lb = gpu_lower_bound(dataclasses.replace(problem, policy=dataclasses.replace(
                    problem.policy, max_moves=None)), sp, solver, left_out)
            consolidation = Consolidation(problem.policy.max_moves, len(migrations), len(before), summary.gpus_used,
                                          len(freed), None if free_lb is None else len(before) - free_lb, points,
                                          gpus_newly_used=len(after - before))
        plan = Plan(problem.fingerprint, source, asked.to_dict(), solve, summary, gpus, wls,
                    models=host_models, migrations=migrations, freed=freed,
                    consolidation=consolidation, eligibility=_eligibility(items))
        bad = validate(plan, problem, gpu_checks=check_gpus(gpus, problem),
                       workload_checks=check_workloads(gpus, wls, problem))
    if bad:
        raise PlanError(f"the plan failed validation ({len(bad)} problem(s)): " + "; ".join(bad[:5]))
    return plan


def _eligibility(items: list[Item]) -> tuple[Eligibility, ...]:
    """The items with eligibility rules, grouped by their rules (in name order): what the plan carries for a reader
    to check them again."""
    groups: dict[tuple[Eligible, ...], list[str]] = {}
    for it in sorted(items, key=lambda i: i.name):
        if it.eligible:
            groups.setdefault(it.eligible, []).append(it.name)
    return tuple(Eligibility(rules, tuple(names)) for rules, names in groups.items())


H = TypeVar("H", bound=SolveHandle)


def _begun(stack: contextlib.ExitStack[bool | None], handle: H) -> H:
    """`handle`, to be cancelled when `stack` closes (a no-op once its result is in)."""
    stack.callback(handle.cancel)
    return handle


def plan(state: FleetState, profiles: ProfileSet, catalog: Catalog, policy: Policy, solver: Solver, *,
         progress: Progress | None = None, lower_bound: bool = True, phase: Progress | None = None) -> Plan:
    """The plan for `state` and `profiles` under `policy` (see docs/model.md). `progress` gets the planner's
    lines (model size, solver outcome); `phase` is told SOLVING and CHECKING as each begins."""
    # the collector paused while planning: millions of long-lived small objects and no cycles to speak of;
    # its full passes over everything alive took a fifth of planning 7,000 GPUs (bench/large_inputs.py)
    with yamldoc.paused_gc():
        problem = build_problem(state, profiles, catalog, policy)
        return plan_problem(problem, solver, source=state.source, progress=progress, lower_bound=lower_bound,
                            phase=phase)
