"""The plan the planner still makes when the solver found none in time (pure; no solver).

A time limit that passes before CBC or HiGHS holds an incumbent proves nothing either way, and an operator
still needs an answer (issue 23). The fallback changes nothing that runs: every GPU keeps its current layout,
every running workload stays where it runs (one that no longer fits is left out and runs on, never stopped),
busy instances stay, and new demand takes the idle instances it fits, highest value first, each item on the
smallest profile it fits, leaving the `spare` counts and `keep_free` whole GPUs free.

Those choices are written as values of the formulation's own variables (x: each group on its current pattern;
y: the items per class and profile; u: the rest) and handed to the same mapping and, in the planner, the
same validator as a solver's answer: the fallback is checked like any other plan, and creates or destroys
no instance.
"""

from __future__ import annotations

import dataclasses
from collections import Counter

from migplan.planner.formulation import Formulation, PatternInfo, spare_models
from migplan.planner.groups import Klass
from migplan.planner.patterns import WHOLE
from migplan.planner.problem import Item, Problem
from migplan.profiles import WHOLE_GPU

GREEDY = "greedy"  # SolveInfo.fallback of such a plan
STILL = "the solver found no plan in time: it keeps running where it is"  # groups.split's `still`


def frozen_problem(problem: Problem) -> Problem:
    """The problem with nothing running allowed to move or stop: the policy the fallback is made and checked
    under (no --allow-disrupt, no --consolidate; everything else as asked)."""
    return dataclasses.replace(problem, policy=dataclasses.replace(
        problem.policy, allow_disrupt=False, consolidate=False, max_moves=None))


def current_pattern(patterns: list[PatternInfo]) -> int:
    """Index of the pattern that is the group's current state (its layout, or MIG disabled as it is):
    `patterns.candidates` lists the current layout first; WHOLE without an evicted workload on a GPU
    with MIG disabled. ValueError when there is none (a group the planner could not keep as it is)."""
    for pi, info in enumerate(patterns):
        if not info.change and not info.evict:
            return pi
    raise ValueError("no pattern keeps the GPU as it is")


def _order(f: Formulation, c: Klass) -> list[tuple[str, str]]:
    """(model, profile) pairs class c may take, in its fit order: models as listed, smallest profile first."""
    return [(m, q) for m, profs in c.sample.fits for q in profs if (c.idx, m, q) in f.y_pool]


def greedy_values(f: Formulation) -> tuple[float, ...]:
    """Values of f's variables for the fallback (see the module notes). f must be formulated on a
    `frozen_problem` split (nothing soft): then the current pattern displaces nothing and its free
    instances are the GPU's idle ones."""
    values = [0.0] * len(f.milp.names)
    problem, sp = f.problem, f.split
    pool: Counter[tuple[str, str]] = Counter()  # (model, profile) -> free instances model-wide
    per_group: Counter[tuple[int, str]] = Counter()  # (group, profile) -> free instances in the group
    free_gpus = 0  # planned GPUs without an instance or a workload: what keep_free counts
    for g in sp.groups:
        pi = current_pattern(f.patterns[g.idx])
        info = f.patterns[g.idx][pi]
        values[f.x[(g.idx, pi)]] = float(len(g.gpus))
        for q, n in info.free.items():
            pool[(g.model, q)] += n * len(g.gpus)
            per_group[(g.idx, q)] += n * len(g.gpus)
        if info.empty or (info.pattern is WHOLE and info.free[WHOLE_GPU]):
            free_gpus += len(g.gpus)
    # kept free: the spare counts (per entry, over the models it names, in model order) and keep_free's GPUs,
    # which only the MIG-disabled idle GPUs' whole places could use up (no layout changes here)
    for entry, n in problem.policy.spare:
        q, models = spare_models(problem, entry)
        for m in models:
            take = min(n, pool[(m, q)])
            pool[(m, q)] -= take
            n -= take
    whole_left = max(0, free_gpus - problem.policy.keep_free)
    whole_models = {g.model for g in sp.groups}
    for m in whole_models:
        take = min(pool[(m, WHOLE_GPU)], whole_left)
        pool[(m, WHOLE_GPU)] = take
        whole_left -= take
    groups = {g.idx: g for g in sp.groups}
    # pinned classes (and refined sets) first, as the mapping places them; then the rest; highest value first
    classes = sorted(sp.classes, key=lambda c: (not f.per_group(c), -c.sample.value, c.idx))
    for c in classes:
        todo = len(c.free)
        if f.per_group(c):
            for (ci, gi, q), var in sorted(f.y_group.items()):
                if ci != c.idx or not todo:
                    continue
                m = groups[gi].model
                take = min(todo, per_group[(gi, q)], pool[(m, q)])
                per_group[(gi, q)] -= take
                pool[(m, q)] -= take
                values[var] += take
                todo -= take
        else:
            for m, q in _order(f, c):
                if not todo:
                    break
                take = min(todo, pool[(m, q)])
                pool[(m, q)] -= take
                values[f.y_pool[(c.idx, m, q)]] += take
                todo -= take
        values[f.u[c.idx]] = float(todo)
    return tuple(values)


def left_out_reason(it: Item, scope: str) -> str:
    """Why the fallback leaves a new item out: no idle instance it fits was free (for a member of a set: on a
    GPU, or host, without another member)."""
    where = "host" if scope == "host" else "GPU"
    spread = f" on a {where} without another member of its anti-affinity set" if it.groups else ""
    return (f"left out: no idle instance it fits was free{spread} (priority {it.priority}); the greedy fallback "
            "creates no instance: a solver's plan may make room")


__all__ = ["GREEDY", "STILL", "current_pattern", "frozen_problem", "greedy_values", "left_out_reason"]
