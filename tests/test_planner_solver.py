"""Solver status and quality: PuLP's two status fields, CBC's bound, and time-limited plans."""

from __future__ import annotations

import dataclasses

import pulp
import pytest
from planner_fixtures import CAT, EXACT, fleet, gpu, profiles, wl

from migplan.adapters.solver import PulpSolver, _status, parse_cbc_log
from migplan.planner import PlanError, plan
from migplan.planner.milp import Milp, SolveResult, SolveStatus


@pytest.mark.parametrize(("status", "sol_status", "expect"), [
    (pulp.LpStatusOptimal, pulp.LpSolutionOptimal, SolveStatus.OPTIMAL),
    # A time limit with an incumbent: PuLP says "Optimal", sol_status says it is not proven.
    (pulp.LpStatusOptimal, pulp.LpSolutionIntegerFeasible, SolveStatus.TIME_LIMIT),
    (pulp.LpStatusInfeasible, pulp.LpSolutionInfeasible, SolveStatus.INFEASIBLE),
    (pulp.LpStatusUnbounded, pulp.LpSolutionUnbounded, SolveStatus.UNBOUNDED),
    (pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound, SolveStatus.NO_SOLUTION),
    (pulp.LpStatusUndefined, pulp.LpSolutionNoSolutionFound, SolveStatus.NO_SOLUTION),
])
def test_status_reads_both_fields(status: int, sol_status: int, expect: SolveStatus) -> None:
    assert _status(status, sol_status) is expect


def test_cbc_log_bound() -> None:
    log = ("Cbc0010I After 1000 nodes, 12 on tree, 1530 best solution, best possible 1500.5 (2.01 seconds)\n"
           "Result - Stopped on time limit\n\nObjective value:                1530.00000000\n"
           "Lower bound:                    1500.500\nGap:                            0.02\n")
    assert parse_cbc_log(log) == (1530.0, 1500.5)
    assert parse_cbc_log("Continuous objective value is 42.25 - 0.01 seconds\n") == (None, 42.25)
    assert parse_cbc_log("garbage") == (None, None)


class TimeLimited:
    """A real CBC solve reported as a time-limited incumbent with a weaker bound."""

    name = "cbc"

    def __init__(self) -> None:
        self.inner = PulpSolver(time_limit=30)

    def solve(self, milp: Milp, *, relax: bool = False) -> SolveResult:
        res = self.inner.solve(milp, relax=relax)
        if relax or res.objective is None:
            return res
        return dataclasses.replace(res, status=SolveStatus.TIME_LIMIT, bound=res.objective * 0.9)


def test_time_limited_plan_reports_gap_and_bound() -> None:
    st = fleet(gpu("a", 0), gpu("a", 1))
    p = plan(st, profiles(wl("x", 3000), wl("y", 15000)), CAT, EXACT, TimeLimited())  # type: ignore[arg-type]
    assert p.solve.status == "time-limit"
    assert p.solve.gap == pytest.approx(0.1)
    assert p.solve.bound is not None and p.solve.objective is not None and p.solve.bound < p.solve.objective
    assert p.summary.workloads_placed == 2  # the incumbent is still a plan, re-checked like any other


class Broken:
    name = "cbc"

    def solve(self, milp: Milp, *, relax: bool = False) -> SolveResult:
        return SolveResult(SolveStatus.NO_SOLUTION, solver="cbc", message="stopped before an incumbent")


def test_no_incumbent_gives_the_greedy_fallback_not_a_crash() -> None:
    # every solve, the lower bound's LP too, ends without a solution: the plan is the fallback, with no bound
    p = plan(fleet(gpu("a", 0)), profiles(wl("x", 39000, 0.9)), CAT, EXACT, Broken())  # type: ignore[arg-type]
    assert (p.solve.status, p.solve.fallback, p.summary.gpus_lower_bound) == ("no-solution", "greedy", None)
    assert [(w.name, w.status, w.host, w.gpu, w.instance) for w in p.workloads] == [("x", "placed", "a", 0, None)]


class Lying:
    """Says "optimal" but returns values that break the model's rows (as in coin-or/pulp#711)."""

    name = "cbc"

    def solve(self, milp: Milp, *, relax: bool = False) -> SolveResult:
        if relax:
            return PulpSolver().solve(milp, relax=True)
        return SolveResult(SolveStatus.OPTIMAL, values=tuple(0.0 for _ in milp.names), objective=0.0, bound=0.0,
                           solver="cbc")


def test_solver_values_are_rechecked() -> None:
    with pytest.raises(PlanError) as err:
        plan(fleet(gpu("a", 0)), profiles(wl("x", 3000)), CAT, EXACT, Lying())  # type: ignore[arg-type]
    assert "breaks 2 row(s)" in str(err.value) and "balance[0]" in str(err.value)
