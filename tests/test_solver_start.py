"""Solves begun in the background (`PulpSolver.start`, `milp.start_solve`): CBC runs while the caller works,
the answer is the synchronous one, and a cancelled or interrupted solve leaves no process and no file.
The planner uses it to work on the lower bound while CBC solves the plan: its plans are the ones a
solver without `start` (solving one model after the other) gives."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from planner_fixtures import CAT, fleet, gpu, profiles, wl

from migplan.adapters import solver as solver_mod
from migplan.adapters.solver import PulpSolver
from migplan.planner import Policy, plan
from migplan.planner.milp import Milp, SolveResult, SolveStatus, start_solve

# every solve's temporary directory goes under a fresh folder, so leftovers can be seen
pytestmark = pytest.mark.usefixtures("own_tmpdir")


@pytest.fixture()
def slow_cbc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[int]:
    """CBC behind a wrapper that first sleeps 1 s, so a test can see it still running; the wrapper's pids."""
    real = solver_mod._OwnedCbc(str(tmp_path)).path
    wrapper = tmp_path / "slow-cbc"
    wrapper.write_text(f"#!/bin/sh\nsleep 1\nexec {real} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setattr(solver_mod._OwnedCbc, "pulp_cbc_path", str(wrapper))
    pids: list[int] = []
    spawn = solver_mod._OwnedCbc._spawn

    def record(self: solver_mod._OwnedCbc, *a: object, **k: object) -> object:
        proc = spawn(self, *a, **k)  # type: ignore[arg-type]
        pids.append(proc.pid)
        return proc

    monkeypatch.setattr(solver_mod._OwnedCbc, "_spawn", record)
    return pids


def knapsack() -> Milp:
    m = Milp()
    xs = [m.var(f"x{i}", ub=1) for i in range(8)]
    w = [13, 7, 22, 9, 31, 4, 17, 11]
    m.add("cover", [(x, wi) for x, wi in zip(xs, w, strict=True)], ">=", 50)
    for x, c in zip(xs, [5, 3, 9, 4, 12, 2, 7, 5], strict=True):
        m.cost(x, c)
    return m


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_start_returns_while_cbc_runs_and_gives_the_synchronous_answer(slow_cbc: list[int],
                                                                       own_tmpdir: Path) -> None:
    s = PulpSolver(gap=0.0, gap_abs=None)
    t0 = time.perf_counter()
    handle = s.start(knapsack())
    started = time.perf_counter() - t0
    assert slow_cbc and alive(slow_cbc[0]) and started < 0.9  # back before the wrapper's 1 s sleep ended
    res = handle.result()
    assert res.status is SolveStatus.OPTIMAL
    assert res.values == PulpSolver(gap=0.0, gap_abs=None).solve(knapsack()).values
    assert not list(own_tmpdir.iterdir())


def test_cancel_kills_cbc_and_removes_its_files(slow_cbc: list[int], own_tmpdir: Path) -> None:
    handle = PulpSolver().start(knapsack())
    assert list(own_tmpdir.iterdir())  # the model file is there while it runs
    handle.cancel()
    assert not alive(slow_cbc[0])  # killed and reaped (a zombie would still answer kill 0)
    assert not list(own_tmpdir.iterdir())
    handle.cancel()  # twice is harmless


def test_start_solve_falls_back_to_solve_for_a_solver_without_start() -> None:
    class Plain:
        name = "plain"
        calls = 0

        def solve(self, milp: Milp, *, relax: bool = False) -> SolveResult:
            Plain.calls += 1
            return SolveResult(SolveStatus.OPTIMAL, tuple(0.0 for _ in milp.names), 0.0, 0.0)

    handle = start_solve(Plain(), knapsack())
    assert Plain.calls == 0  # nothing solved until the result is asked for
    assert handle.result().status is SolveStatus.OPTIMAL and Plain.calls == 1


class Sequential:
    """PulpSolver without `start`: every model solved when asked, one after the other."""

    name = "cbc"

    def __init__(self) -> None:
        self.inner = PulpSolver(time_limit=30)

    def solve(self, milp: Milp, *, relax: bool = False) -> SolveResult:
        return self.inner.solve(milp, relax=relax)


def test_overlapped_planning_gives_the_sequential_plan() -> None:
    state = fleet(*[gpu("h1", i) for i in range(4)], *[gpu("h2", i, model="A100-SXM4-80GB") for i in range(2)])
    profs = profiles(*[wl(f"w{i}", 3000 + 2500 * i, 0.05 + 0.1 * (i % 5)) for i in range(14)])
    over = plan(state, profs, CAT, Policy(), PulpSolver(time_limit=30))
    seq = plan(state, profs, CAT, Policy(), Sequential())
    assert over.solve.gpus_lower_bound == seq.solve.gpus_lower_bound is not None
    assert over.summary == seq.summary and over.gpus == seq.gpus and over.workloads == seq.workloads


def test_a_plan_that_leaves_demand_out_is_bounded_with_what_it_leaves_out() -> None:
    """The lower bound is started, while CBC solves the plan, for a plan that places everything; this plan
    cannot, so the bound is solved again with the counts it leaves
    out. Unchanged, it would ask to place all ten on two GPUs: an infeasible LP, and no bound at all."""
    # 9,000 MiB + 10% needs a 3g.20gb on an A100-40GB: two per GPU, so four placed and six left out
    state = fleet(gpu("h1", 0), gpu("h1", 1))
    profs = profiles(*[wl(f"w{i}", 9000) for i in range(10)])
    over = plan(state, profs, CAT, Policy(), PulpSolver(time_limit=30))
    seq = plan(state, profs, CAT, Policy(), Sequential())
    assert over.summary.workloads_unplaced == 6 and over.summary.gpus_used == 2
    assert over.solve.gpus_lower_bound == seq.solve.gpus_lower_bound == 2


class _Handle:
    def __init__(self, result: SolveResult, log: list[str], what: str) -> None:
        self._result, self.log, self.what = result, log, what

    def result(self) -> SolveResult:
        self.log.append(f"result {self.what}")
        return self._result

    def cancel(self) -> None:
        self.log.append(f"cancel {self.what}")


class NoPlan:
    """A solver that finds no plan (and would bound any LP at 0), logging what is asked of it."""

    name = "cbc"

    def __init__(self) -> None:
        self.log: list[str] = []

    def solve(self, milp: Milp, *, relax: bool = False) -> SolveResult:
        raise AssertionError("the planner starts its solves")

    def start(self, milp: Milp, *, relax: bool = False) -> _Handle:
        what = "bound" if relax else "plan"
        self.log.append(f"start {what}")
        status = SolveStatus.OPTIMAL if relax else SolveStatus.INFEASIBLE
        return _Handle(SolveResult(status, tuple(0.0 for _ in milp.names), 0.0, 0.0), self.log, what)


def test_the_bound_started_early_is_stopped_when_no_plan_is_found() -> None:
    from migplan.planner.plan import PlanError

    solver = NoPlan()
    with pytest.raises(PlanError, match="found no plan"):
        plan(fleet(gpu("h1", 0)), profiles(wl("w", 4000)), CAT, Policy(), solver)
    assert solver.log[:2] == ["start plan", "start bound"]  # the bound is started while the plan is solved
    assert "cancel bound" in solver.log and "result bound" not in solver.log
