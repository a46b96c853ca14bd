"""Each end of a solve forced with the real CBC and the real HiGHS: optimal, within the gap, stopped at the time
limit, no solution in time, proven infeasible (issue 23, "Honest solver status").

The models are small and chosen so that each end is reached for a reason the test can state, not by luck:

* optimal: `cover_milp(14, 3)`, whose optimum (103) brute force over all 2^14 points confirms;
* within the gap: `cover_milp(300, 40, 3)` with a 5% relative gap: both solvers stop with an incumbent
  0.5-2% above their bound in well under a second, long before they could prove it (neither proves it
  within a minute);
* time limit: the same model with gap 0 and 1 s: an incumbent and a weaker bound when the clock runs out;
* no solution: 60 binaries under 4 equality rows with six-digit weights, built around a hidden point so
  the model IS feasible; a subset-sum system neither solver finds a point of in seconds (3 s was tried on
  three seeds), so a 1 s limit ends with nothing, and nothing may be called proven;
* infeasible: x + y >= 7 and x + y <= 6: both solvers prove it at once.

A last test runs the infeasible model through the planner's own path (`plan`) to show that a proven
infeasible model is a clear PlanError and a no-solution one the greedy fallback, never a plan called optimal.
"""

from __future__ import annotations

import random

import pytest
from milp_fixtures import brute_force_optimum, cover_milp
from planner_fixtures import CAT, EXACT, fleet, gpu, profiles, wl

from migplan.adapters.solver import PulpSolver, is_available
from migplan.planner import PlanError, plan
from migplan.planner.milp import Milp, SolveResult, SolveStatus

SOLVERS = [
    "cbc",
    pytest.param("highs", marks=pytest.mark.skipif(not is_available("highs"),
                                                   reason="highspy is not installed (pip install '.[test]')")),
]


def subset_sum_milp(n: int = 60, rows: int = 4, seed: int = 3) -> Milp:
    """Feasible by construction (the hidden point `star` meets every row), yet hard to find a point of."""
    r = random.Random(seed)
    m = Milp()
    xs = [m.var(f"x{i}", ub=1) for i in range(n)]
    star = [r.randint(0, 1) for _ in xs]
    for j in range(rows):
        w = [r.randint(10**5, 10**6) for _ in xs]
        m.add(f"eq{j}", [(x, wi) for x, wi in zip(xs, w, strict=True)], "==",
              sum(wi * s for wi, s in zip(w, star, strict=True)))
    for x in xs:
        m.cost(x, r.randint(1, 9))
    assert not m.violations([float(s) for s in star])  # the oracle: feasible, whatever a solver says
    return m


def contradictory_milp() -> Milp:
    m = Milp()
    x, y = m.var("x", ub=5), m.var("y", ub=5)
    m.add("at_least_7", [(x, 1), (y, 1)], ">=", 7)
    m.add("at_most_6", [(x, 1), (y, 1)], "<=", 6)
    m.cost(x, 1)
    m.cost(y, 1)
    return m


def _incumbent_checks(m: Milp, res: SolveResult) -> None:
    """An answer with an incumbent: its values break no row and give the objective it claims."""
    assert res.status.has_solution
    assert not m.violations(list(res.values))
    assert res.objective == pytest.approx(m.evaluate(list(res.values)))


@pytest.mark.parametrize("solver", SOLVERS)
def test_optimal_is_the_brute_force_optimum(solver: str) -> None:
    m = cover_milp(14, 3)
    res = PulpSolver(name=solver, gap=0, time_limit=30).solve(m)
    assert res.status is SolveStatus.OPTIMAL, res.message
    _incumbent_checks(m, res)
    assert res.objective == brute_force_optimum(m) == 103
    assert res.bound == pytest.approx(res.objective)


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_gap_stop_is_within_gap_with_its_gap(solver: str) -> None:
    m = cover_milp(300, 40, 3)
    res = PulpSolver(name=solver, gap=0.05, time_limit=30).solve(m)
    assert res.status is SolveStatus.WITHIN_GAP, res.message
    _incumbent_checks(m, res)
    assert res.bound is not None and res.objective is not None
    assert res.bound < res.objective  # not proven: a gap is left ...
    assert (res.objective - res.bound) / res.objective <= 0.05 + 1e-9  # ... and it is within the one asked for
    assert "within gap" in res.message
    assert res.time_s < 30  # the gap stopped it, not the clock


@pytest.mark.slow
@pytest.mark.parametrize("solver", SOLVERS)
def test_a_time_limit_stop_is_time_limit_with_its_gap(solver: str) -> None:
    m = cover_milp(300, 40, 3)
    res = PulpSolver(name=solver, gap=0, time_limit=1).solve(m)
    assert res.status is SolveStatus.TIME_LIMIT, res.message
    _incumbent_checks(m, res)
    assert res.bound is not None and res.objective is not None and res.bound < res.objective
    assert "time limit" in res.message and "%" in res.message  # says how far from the bound it stopped


@pytest.mark.slow
@pytest.mark.parametrize("solver", SOLVERS)
def test_no_incumbent_in_time_is_no_solution_never_infeasible(solver: str) -> None:
    m = subset_sum_milp()
    res = PulpSolver(name=solver, gap=0, time_limit=1).solve(m)
    assert res.status is SolveStatus.NO_SOLUTION, res.message  # the model is feasible: "infeasible" would lie
    assert not res.status.has_solution
    assert res.values == () and res.objective is None


@pytest.mark.parametrize("solver", SOLVERS)
def test_a_contradiction_is_proven_infeasible(solver: str) -> None:
    res = PulpSolver(name=solver, gap=0, time_limit=5).solve(contradictory_milp())
    assert res.status is SolveStatus.INFEASIBLE, res.message
    assert res.values == () and res.objective is None
    assert res.time_s < 5  # proven, not a stop at the limit


class _Fixed:
    """Hands the planner one real solve of a given model instead of the planner's own (each end once)."""

    name = "cbc"

    def __init__(self, model: Milp, **kwargs: float) -> None:
        self.model, self.inner = model, PulpSolver(**kwargs)  # type: ignore[arg-type]

    def solve(self, milp: Milp, *, relax: bool = False) -> SolveResult:
        if relax:
            return self.inner.solve(milp, relax=True)
        return self.inner.solve(self.model)


@pytest.mark.slow
def test_the_planner_turns_each_end_into_a_plan_a_fallback_or_a_clear_error() -> None:
    st = fleet(gpu("a", 0))
    work = profiles(wl("x", 3000))
    with pytest.raises(PlanError, match="found no plan \\(infeasible"):
        plan(st, work, CAT, EXACT, _Fixed(contradictory_milp(), gap=0, time_limit=5))  # type: ignore[arg-type]
    p = plan(st, work, CAT, EXACT, _Fixed(subset_sum_milp(), gap=0, time_limit=1))  # type: ignore[arg-type]
    assert (p.solve.status, p.solve.fallback) == ("no-solution", "greedy")
