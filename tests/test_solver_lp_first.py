"""CBC's LP-first step (`PulpSolver.lp_first`): an integral LP optimum is taken as the MILP's proven optimum,
anything else goes on to CBC's MILP search on the same file, with what is left of the time limit.

The oracle for "optimal" is brute force over every 0/1 point (independent of CBC and of the adapter).
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from milp_fixtures import brute_force_optimum, cover_milp

from migplan.adapters import solver as solver_mod
from migplan.adapters.solver import PulpSolver
from migplan.planner.milp import Milp, SolveStatus


@pytest.fixture()
def runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[bool, float | None]]:
    """Every CBC process the adapter starts: (LP relaxation only?, its -sec time limit)."""
    seen: list[tuple[bool, float | None]] = []
    real = solver_mod._OwnedCbc._spawn

    def spy(self: solver_mod._OwnedCbc, mps: str, sol: str, relaxation: bool = False) -> Any:
        seen.append((relaxation, self.timeLimit))
        return real(self, mps, sol, relaxation)

    monkeypatch.setattr(solver_mod._OwnedCbc, "_spawn", spy)
    return seen


def assignment_milp(n: int = 6, seed: int = 1) -> Milp:
    """n jobs to n machines at random costs: the rows are totally unimodular, so the LP optimum is integral."""
    r = random.Random(seed)
    m = Milp()
    x = {(i, j): m.var(f"x{i}_{j}", ub=1) for i in range(n) for j in range(n)}
    for i in range(n):
        m.add(f"job{i}", [(x[i, j], 1) for j in range(n)], "==", 1)
        m.add(f"machine{i}", [(x[j, i], 1) for j in range(n)], "<=", 1)
    for v in x.values():
        m.cost(v, r.randint(1, 50))
    return m


def test_an_integral_relaxation_is_the_proven_optimum_after_one_lp(runs: list[tuple[bool, float | None]]) -> None:
    milp = assignment_milp(n=4)
    res = PulpSolver(gap=0.0, gap_abs=None).solve(milp)
    assert runs == [(True, 60.0)]  # one CBC process, the LP relaxation only
    assert res.status is SolveStatus.OPTIMAL and "LP relaxation integral" in res.message
    assert res.objective == pytest.approx(brute_force_optimum(milp))
    assert res.bound == res.objective and res.gap == 0.0
    assert all(v in (0.0, 1.0) for v in res.values) and not milp.violations(list(res.values))


@pytest.mark.slow
def test_the_lp_answer_is_the_milp_search_answer() -> None:
    for seed in range(5):
        milp = assignment_milp(n=4, seed=seed)
        first = PulpSolver().solve(milp)
        search = PulpSolver(lp_first=False).solve(milp)
        assert first.status is search.status is SolveStatus.OPTIMAL
        assert first.objective == pytest.approx(search.objective)
        assert first.objective == pytest.approx(brute_force_optimum(milp))


def test_a_fractional_relaxation_goes_on_to_the_milp(runs: list[tuple[bool, float | None]]) -> None:
    milp = cover_milp(10, 2)
    res = PulpSolver(gap=0.0, gap_abs=None, time_limit=30).solve(milp)
    assert [r for r, _ in runs] == [True, False]  # the LP, then CBC's search on the same file
    assert runs[1][1] is not None and 1.0 <= runs[1][1] < 30  # with what the LP left of the limit
    assert res.status is SolveStatus.OPTIMAL and "LP relaxation" not in res.message
    assert res.objective == pytest.approx(brute_force_optimum(milp))
    assert res.values == PulpSolver(gap=0.0, gap_abs=None, time_limit=30, lp_first=False).solve(milp).values


def test_no_lp_step_for_a_relaxation_or_when_turned_off(runs: list[tuple[bool, float | None]]) -> None:
    PulpSolver().solve(assignment_milp(), relax=True)
    PulpSolver(lp_first=False).solve(assignment_milp())
    assert [r for r, _ in runs] == [False, False]


def test_a_stale_answer_file_is_never_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """The MILP run after the LP must read its own answer: when it writes none, the solve is an error (the
    LP's answer file, still there from the first run, would otherwise be read as the MILP's)."""
    real = solver_mod._OwnedCbc._spawn

    def search_writes_nothing(self: solver_mod._OwnedCbc, mps: str, sol: str, relaxation: bool = False) -> Any:
        if not relaxation:
            self.path = "/bin/true"  # exits 0 and writes no answer file
        return real(self, mps, sol, relaxation)

    monkeypatch.setattr(solver_mod._OwnedCbc, "_spawn", search_writes_nothing)
    res = PulpSolver().solve(cover_milp(10, 2))
    assert res.status is SolveStatus.ERROR and "no solution file" in res.message


@pytest.mark.slow
def test_an_lp_stopped_early_proves_nothing(runs: list[tuple[bool, float | None]],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """An LP answer CBC read as "stopped with an objective" (PuLP: Optimal + IntegerFeasible, what a time
    limit gives) is not a proven LP optimum: even integral, it goes on to CBC's search."""
    real = solver_mod._OwnedCbc.get_status
    first = [True]

    def stopped_lp(self: solver_mod._OwnedCbc, filename: str) -> tuple[int, int]:
        status, sol_status = real(self, filename)
        if first[0]:
            first[0] = False
            return solver_mod.pulp.LpStatusOptimal, solver_mod.pulp.LpSolutionIntegerFeasible
        return status, sol_status

    monkeypatch.setattr(solver_mod._OwnedCbc, "get_status", stopped_lp)
    milp = assignment_milp(n=4)
    res = PulpSolver(gap=0.0, gap_abs=None).solve(milp)
    assert [r for r, _ in runs] == [True, False]
    assert res.status is SolveStatus.OPTIMAL and "LP relaxation" not in res.message
    assert res.objective == pytest.approx(brute_force_optimum(milp))
