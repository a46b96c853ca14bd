"""The greedy fallback (planner/greedy.py, issue 23): when the solver stops before it has any solution, the
planner still returns a plan, checked by the same validator and marked as the fallback: every layout kept,
nothing running moved or stopped, new demand in the idle instances it fits, spare and keep-free respected.

The solver here is a real CBC whose MILP answer is withheld (status no-solution, as at a time limit before an
incumbent); its LP solves (the lower bound) are real.
"""

from __future__ import annotations

import json

import pytest
from helpers import isolate_cli

from migplan.adapters.solver import PulpSolver
from migplan.catalog.layout import Instance
from migplan.errors import InputError
from migplan.planner import Policy, plan
from migplan.planner.milp import Milp, SolveResult, SolveStatus
from migplan.planner.plan import plan_from_dict, plan_to_dict
from tests.planner_fixtures import CAT, EXACT, fleet, gpu, pin, profiles, targets, wl


class NoIncumbent:
    """CBC for the LP relaxations; every MILP ends as a time limit before any incumbent."""

    name = "cbc"
    time_limit = 1.0

    def solve(self, milp: Milp, *, relax: bool = False) -> SolveResult:
        if relax:
            return PulpSolver(time_limit=30).solve(milp, relax=True)
        return SolveResult(SolveStatus.NO_SOLUTION, solver="cbc", time_s=1.0,
                           message="stopped before an incumbent, infeasibility not proven")


def _plan(state, ps, policy=EXACT):  # type: ignore[no-untyped-def]
    return plan(state, ps, CAT, policy, NoIncumbent())  # type: ignore[arg-type]


def _status(p):  # type: ignore[no-untyped-def]
    return {w.name: (w.status, w.host, w.gpu, w.instance) for w in p.workloads}


def test_no_incumbent_gives_the_greedy_plan_marked_as_such() -> None:
    st = fleet(gpu("a", 0, layout=["3g.20gb@0", "3g.20gb@4"]), gpu("a", 1))
    ps = profiles(wl("run", 9000, host="a", gpu_idx=0, inst="3g.20gb@4"), wl("new", 15000))
    p = _plan(st, ps)
    assert (p.solve.status, p.solve.fallback) == ("no-solution", "greedy")
    assert _status(p) == {"run": ("placed", "a", 0, "3g.20gb@4"), "new": ("placed", "a", 0, "3g.20gb@0")}
    assert all(g.actions == () for g in p.gpus) and p.migrations == ()


def test_the_fallback_never_changes_a_layout_even_where_demand_is_left_out() -> None:
    # a 20 GB workload fits no idle instance; the MIG-disabled GPU is free but changing it is the solver's job
    st = fleet(gpu("a", 0, layout=["1g.5gb@0", "1g.5gb@1"]), gpu("a", 1, layout=[]))
    p = _plan(st, profiles(wl("small", 3000), wl("big", 19000)))
    assert _status(p)["small"] == ("placed", "a", 0, "1g.5gb@0")
    big = next(w for w in p.workloads if w.name == "big")
    assert big.status == "unplaced" and big.reason is not None and "no idle instance it fits" in big.reason
    assert targets(p) == {("a", 0): ["1g.5gb@0", "1g.5gb@1"], ("a", 1): []}
    assert p.summary.instances_created == p.summary.instances_destroyed == 0


def test_outgrown_workloads_keep_running_and_are_not_stopped_even_with_allow_disrupt() -> None:
    st = fleet(gpu("a", 0, layout=["1g.5gb@0"]), gpu("a", 1, layout=["3g.20gb@0"]))
    ps = profiles(wl("grown", 9000, host="a", gpu_idx=0, inst="1g.5gb@0"))  # 9 GB on 5 GB: peak no longer fits
    solved = plan(st, ps, CAT, Policy(headroom=0.0, headroom_min_mib=0, allow_disrupt=True), PulpSolver())
    assert solved.migrations and solved.solve.fallback is None  # the solver moves it to the free 3g.20gb
    p = _plan(st, ps, Policy(headroom=0.0, headroom_min_mib=0, allow_disrupt=True))
    grown = next(w for w in p.workloads if w.name == "grown")
    assert grown.status == "unplaced" and "found no plan in time" in (grown.reason or "")
    assert p.migrations == () and p.summary.workloads_disrupted == 0
    assert p.policy["allow_disrupt"] is True  # the policy asked for is what the plan records


def test_busy_instances_stay_with_allow_disrupt() -> None:
    st = fleet(gpu("a", 0, layout=["3g.20gb@0", "3g.20gb@4"], busy=(Instance.parse("3g.20gb@4"),)))
    p = _plan(st, profiles(wl("new", 15000)), Policy(headroom=0.0, headroom_min_mib=0, allow_disrupt=True))
    assert _status(p)["new"] == ("placed", "a", 0, "3g.20gb@0") and p.summary.busy_disrupted == 0


def test_higher_value_demand_takes_the_idle_instance_first() -> None:
    st = fleet(gpu("a", 0, layout=["3g.20gb@0"]))
    p = _plan(st, profiles(wl("low", 15000, priority=1), wl("high", 15000, priority=9)))
    assert _status(p)["high"][0] == "placed" and _status(p)["low"][0] == "unplaced"


def test_spare_instances_are_not_handed_out() -> None:
    st = fleet(gpu("a", 0, layout=["1g.5gb@0", "1g.5gb@1"]))
    ps = profiles(wl("w1", 3000), wl("w2", 3000))
    p = _plan(st, ps, Policy(headroom=0.0, headroom_min_mib=0, spare={"1g.5gb": 1}))
    assert sorted(s[0] for s in _status(p).values()) == ["placed", "unplaced"]


def test_keep_free_gpus_are_not_handed_out() -> None:
    st = fleet(gpu("a", 0), gpu("a", 1))  # two MIG-disabled idle GPUs
    ps = profiles(wl("w1", 30000, share=0.9), wl("w2", 30000, share=0.9))
    p = _plan(st, ps, Policy(headroom=0.0, headroom_min_mib=0, keep_free=1))
    assert sorted(s[0] for s in _status(p).values()) == ["placed", "unplaced"]
    assert p.summary.free_whole_gpus == 1


def test_pinned_demand_goes_only_where_its_pin_allows() -> None:
    st = fleet(gpu("a", 0, layout=["3g.20gb@0"]), gpu("b", 0, layout=["3g.20gb@0"]))
    p = _plan(st, profiles(wl("pinned", 15000, pin=pin("b"))))
    assert _status(p)["pinned"] == ("placed", "b", 0, "3g.20gb@0")


def test_anti_affine_members_go_to_different_gpus() -> None:
    st = fleet(gpu("a", 0, layout=["3g.20gb@0", "3g.20gb@4"]), gpu("a", 1, layout=["3g.20gb@0", "3g.20gb@4"]))
    ps = profiles(*(wl(f"r{i}", 15000, anti_affinity="svc") for i in range(3)))
    p = _plan(st, ps)
    on = [(s[1], s[2]) for s in _status(p).values() if s[0] == "placed"]
    assert len(on) == 2 and len(set(on)) == 2  # two GPUs, two members; the third has no GPU of its own


def test_the_fallback_survives_the_plan_document() -> None:
    p = _plan(fleet(gpu("a", 0, layout=["3g.20gb@0"])), profiles(wl("new", 15000)))
    doc = json.loads(json.dumps(plan_to_dict(p)))
    assert doc["solve"]["fallback"] == "greedy"
    assert plan_from_dict(doc, CAT).solve.fallback == "greedy"


def test_a_solved_plan_writes_no_fallback_key() -> None:
    p = plan(fleet(gpu("a", 0, layout=["3g.20gb@0"])), profiles(wl("new", 15000)), CAT, EXACT, PulpSolver())
    assert "fallback" not in plan_to_dict(p)["solve"]


@pytest.mark.parametrize(("fallback", "status", "says"), [
    ("clever", "no-solution", "unknown fallback 'clever'"),
    ("greedy", "optimal", "only when the solver found no solution"),
])
def test_the_reader_refuses_a_fallback_that_cannot_be(fallback: str, status: str, says: str) -> None:
    p = _plan(fleet(gpu("a", 0, layout=["3g.20gb@0"])), profiles(wl("new", 15000)))
    doc = json.loads(json.dumps(plan_to_dict(p)))
    doc["solve"].update(fallback=fallback, status=status)
    with pytest.raises(InputError, match=says):
        plan_from_dict(doc, CAT)


def test_propose_writes_the_fallback_says_so_and_exits_6(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pathlib import Path

    from typer.testing import CliRunner

    from migplan.cli.app import app
    from migplan.commands import propose as propose_mod
    from migplan.documents import load_plan

    root = Path(__file__).resolve().parent.parent
    isolate_cli(monkeypatch, tmp_path)
    monkeypatch.setattr(propose_mod, "planner_solver", lambda *a, **k: NoIncumbent())
    args = ["propose", "-i", str(root / "inventory" / "example.yaml"), "-p", str(root / "profiles" / "example")]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 6, r.output
    assert "plan: the greedy fallback (every layout kept" in r.stdout
    assert "warning: the solver found no plan within its time limit" in r.stderr
    assert "GPUs changed 0, instances destroyed 0, created 0" in r.stdout
    out = tmp_path / "plan.json"
    r = CliRunner().invoke(app, [*args, "-o", "json", "--out", str(out)])
    assert r.exit_code == 6 and json.loads(r.stdout)["solve"]["fallback"] == "greedy"
    assert load_plan(out).solve.fallback == "greedy"


def test_the_html_report_says_it_is_the_fallback() -> None:
    from migplan.report_html import render

    p = _plan(fleet(gpu("a", 0, layout=["3g.20gb@0"])), profiles(wl("new", 15000)))
    page = render(p, CAT)
    assert "plan: the greedy fallback" in page and "warning: the solver found no plan within its time limit" in page
    solved = plan(fleet(gpu("a", 0, layout=["3g.20gb@0"])), profiles(wl("new", 15000)), CAT, EXACT, PulpSolver())
    assert "fallback" not in render(solved, CAT)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("current", ["random", "previous"])
@pytest.mark.parametrize("allow_disrupt", [False, True])
def test_on_generated_fleets_the_fallback_is_a_checked_plan_that_changes_nothing(seed: int, current: str,
                                                                                allow_disrupt: bool) -> None:
    """Random layouts, or a plan applied and demand changed since (mixed models, anti-affinity sets): the fallback
    passes the validator (plan() raises otherwise), creates and destroys nothing, moves and stops no one,
    and keeps every running workload that still fits where it runs."""
    from bench.generate import Spec, change_demand, generate
    from migplan.planner.replay import applied

    state, ps = generate(Spec(32, 60, "mixed", "inference", "random" if current == "random" else "empty", seed,
                              anti=8))
    if current == "previous":  # as bench/run.py's previous scenario: the plan applied, then half the demand changed
        state, ps = applied(state, ps, plan(state, ps, CAT, Policy(), PulpSolver(time_limit=30)))
        ps = change_demand(ps, 0.5, seed)
    policy = Policy(allow_disrupt=allow_disrupt)
    p = plan(state, ps, CAT, policy, NoIncumbent())  # type: ignore[arg-type]
    assert p.solve.fallback == "greedy" and p.migrations == ()
    assert all(g.actions == () for g in p.gpus) and p.summary.workloads_disrupted == 0
    assert sum(1 for w in p.workloads if w.moved) == 0
    running = [it for it in ps.workloads if it.observed is not None and it.observed.host is not None]
    kept = {w.workload for w in p.workloads if w.kept}
    assert current == "random" or kept  # the applied plan's workloads run: the fallback keeps them
    assert kept <= {w.name for w in running}
