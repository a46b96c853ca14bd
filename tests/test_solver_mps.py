"""The CBC path's own MPS writer and reader (migplan.adapters.solver.mps_text, `_OwnedCbc.start_mps`/`finish_mps`).

The oracle is PuLP itself: the text must be byte for byte what PuLP 3.3's `writeMPS(rename=1)` writes for
the problem `PulpSolver._build` makes, so that CBC reads the same file (and finds the same plan) as before;
the values read back must be those PuLP's own CBC path reads. Also: importing the adapter and solving with
CBC does not import highspy, and HiGHS still works later in the same process.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from planner_fixtures import CAT, EXACT, fleet, gpu, pin, profiles, run, wl

import migplan.planner.planner as planner_mod
from migplan.adapters.solver import PulpSolver, _OwnedCbc, available, mps_text
from migplan.planner.milp import Milp, SolveResult


def _pulp_mps(milp: Milp, relax: bool, tmp_path: Path) -> str:
    prob, _ = PulpSolver("cbc")._build(milp, relax)
    path = tmp_path / "pulp.mps"
    prob.writeMPS(str(path), rename=1)
    return path.read_text()


def _random_milp(rng: random.Random) -> Milp:
    m = Milp()
    n = rng.randint(1, 40)
    for i in range(n):
        lb = rng.choice([0.0, 0.0, -0.0, 1.0, -2.0, None])
        ub = rng.choice([None, 1.0, 5.0, 0.0, -0.0, lb if lb is not None else 3.0])
        if lb is not None and ub is not None and ub < lb:
            ub = lb
        v = m.var(f"v{i}", lb=0.0, ub=ub, integer=rng.random() < 0.6)
        m.lower[v] = lb  # type: ignore[call-overload]  # a free variable (None), as PuLP allows
    for k in range(rng.randint(0, 30)):
        terms = [(rng.randrange(n), rng.choice([1.0, -1.0, 0.0, 2.5, 1e-7, 123456.75]))
                 for _ in range(rng.randint(0, 6))]
        m.add(f"row {k}/x", dict(terms).items(), rng.choice(["<=", ">=", "=="]), rng.choice([0.0, -0.0, 1.0, -3.5, 7]))
    for _ in range(rng.randint(1, n)):
        m.objective[rng.randrange(n)] = rng.choice([1.0, 0.0, -4.0, 100.0, 0.5])
    m.constant = rng.choice([0.0, 12.5])
    return m


@pytest.mark.parametrize("seed", range(40))
@pytest.mark.parametrize("relax", [False, True])
def test_mps_text_is_what_pulp_writes(seed: int, relax: bool, tmp_path: Path) -> None:
    milp = _random_milp(random.Random(seed))
    got = mps_text(milp, relax)
    assert got is not None
    assert got[0] == _pulp_mps(milp, relax, tmp_path)


class Recording:
    """A real CBC solver that keeps every model it is given."""

    def __init__(self) -> None:
        self.inner = PulpSolver("cbc")
        self.milps: list[tuple[Milp, bool]] = []
        self.time_limit = self.inner.time_limit

    def solve(self, milp: Milp, *, relax: bool = False) -> SolveResult:
        self.milps.append((milp, relax))
        return self.inner.solve(milp, relax=relax)


def _planner_models() -> list[tuple[Milp, bool]]:
    st = fleet(gpu("h1", 0, layout=["3g.20gb@0", "2g.10gb@4", "1g.5gb@6"]), gpu("h1", 1), gpu("h2", 0),
               gpu("h2", 1, layout=["7g.40gb@0"]))
    ps = profiles(wl("a", 9000, host="h1", gpu_idx=0, inst="3g.20gb@0"), wl("b", 4000), wl("c", 4000, pin=pin("h2")),
                  wl("d", 30000), wl("e", 2000, host="h1", gpu_idx=0, inst="1g.5gb@6"))
    rec = Recording()
    planner_mod.plan(st, ps, CAT, EXACT, rec)  # type: ignore[arg-type]
    return rec.milps


def test_planner_models_are_written_as_pulp_writes_them(tmp_path: Path) -> None:
    models = _planner_models()
    assert any(relax for _, relax in models) and any(not relax for _, relax in models)
    for milp, relax in models:
        got = mps_text(milp, relax)
        assert got is not None
        assert got[0] == _pulp_mps(milp, relax, tmp_path)


def test_values_read_back_are_pulps(tmp_path: Path) -> None:
    for milp, relax in _planner_models():
        text, columns = mps_text(milp, relax)  # type: ignore[misc]
        own = _OwnedCbc(str(tmp_path), msg=False, timeLimit=60, gapRel=0.0001, gapAbs=None, threads=None)
        status, sol_status, values = own.finish_mps(own.start_mps(text), columns, len(milp.names))
        prob, xs = PulpSolver("cbc")._build(milp, relax)
        prob.solve(_OwnedCbc(str(tmp_path), msg=False, timeLimit=60, gapRel=0.0001, gapAbs=None, threads=None))
        assert (status, sol_status) == (prob.status, prob.sol_status)
        assert values == [float(x.varValue or 0.0) for x in xs]


def test_an_objective_without_variables_is_left_to_pulp() -> None:
    m = Milp()
    x = m.var("x", ub=3)
    m.add("r", [(x, 1.0)], ">=", 1)
    m.constant = 4.0
    assert mps_text(m) is None
    res = PulpSolver("cbc").solve(m)  # PuLP's path (its dummy objective variable) still solves it
    assert res.status.has_solution and res.objective == 4.0


def test_same_plan_through_either_path(monkeypatch: pytest.MonkeyPatch) -> None:
    import migplan.adapters.solver as solver_mod

    st = fleet(gpu("h1", 0, layout=["3g.20gb@0", "3g.20gb@4"]), gpu("h1", 1), gpu("h2", 0))
    ps = profiles(wl("a", 9000, host="h1", gpu_idx=0, inst="3g.20gb@0"), wl("b", 4000), wl("c", 18000),
                  wl("d", 30000))
    fast = run(st, ps)
    monkeypatch.setattr(solver_mod, "mps_text", lambda milp, relax=False: None)  # PuLP builds and writes
    slow = run(st, ps)
    assert [(g.key, g.target) for g in fast.gpus] == [(g.key, g.target) for g in slow.gpus]
    assert fast.summary == slow.summary


@pytest.mark.skipif("highs" not in available(), reason="highspy not installed")
def test_cbc_does_not_import_highspy_and_highs_still_works_after() -> None:
    code = textwrap.dedent("""
        import sys
        from migplan.adapters.solver import PulpSolver
        from migplan.planner.milp import Milp
        m = Milp(); x = m.var("x", ub=10); y = m.var("y", ub=10)
        m.add("r", [(x, 2.0), (y, 3.0)], ">=", 7); m.objective.update({x: 3.0, y: 4.0})
        cbc = PulpSolver("cbc").solve(m)
        print("highspy" in sys.modules, "numpy" in sys.modules, cbc.objective)
        highs = PulpSolver("highs").solve(m)
        print("highspy" in sys.modules, highs.status.value, highs.objective)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}).stdout.split()
    assert out == ["False", "False", "10.0", "True", "optimal", "10.0"]
