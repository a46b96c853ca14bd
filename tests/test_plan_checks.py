"""The planner re-checks every plan before it returns it (planner/validate.py): a plan whose actions or
workloads are wrong is refused, never returned."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from planner_fixtures import CAT, fleet, gpu, profiles, wl

from migplan.adapters.solver import PulpSolver
from migplan.planner import Policy, plan
from migplan.planner import planner as planner_mod
from migplan.planner.plan import PlanError


def test_a_gpu_check_that_fails_refuses_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU checks find wrong actions: the first action of a GPU is lost on the way to the plan."""
    real = planner_mod.diff
    monkeypatch.setattr(planner_mod, "diff", lambda *a, **k: real(*a, **k)[1:])
    state = fleet(gpu("h1", 0), gpu("h1", 1))
    with pytest.raises(PlanError, match="actions do not turn the current layout into the target"):
        plan(state, profiles(wl("a", 4000), wl("b", 15000)), CAT, Policy(), PulpSolver(time_limit=30))


def test_a_workload_check_that_fails_refuses_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """A workload the problem never had, in the plan: the workloads' checks refuse it."""
    real = planner_mod._workload

    def renamed(problem: Any, it: Any, mapped: Any) -> Any:
        w = real(problem, it, mapped)
        return dataclasses.replace(w, name="ghost") if w.name == "b" else w  # a replica the problem never had

    monkeypatch.setattr(planner_mod, "_workload", renamed)
    state = fleet(gpu("h1", 0), gpu("h1", 1))
    with pytest.raises(PlanError, match="every workload replica must appear exactly once"):
        plan(state, profiles(wl("a", 4000), wl("b", 15000)), CAT, Policy(), PulpSolver(time_limit=30))
