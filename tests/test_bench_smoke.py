"""The benchmark's generator, baselines and report run on a tiny instance (no timing asserted)."""

from __future__ import annotations

from bench.baselines import BASELINES
from bench.generate import Spec, generate
from bench.run import render, run_one
from migplan.catalog import builtin_catalog
from migplan.planner import Policy, build_problem


def test_generator_is_seeded() -> None:
    a, b = generate(Spec(8, 20, "mixed", "bimodal", "random")), generate(Spec(8, 20, "mixed", "bimodal", "random"))
    assert a[0].fingerprint() == b[0].fingerprint() and a[1] == b[1]


def test_baselines_place_something() -> None:
    st, ps = generate(Spec(8, 20))
    prob = build_problem(st, ps, builtin_catalog(), Policy())
    for fn in BASELINES.values():
        assert fn(prob).used() >= 1


def test_run_one_and_render() -> None:
    row = run_one(Spec(8, 16, "single", "small", "previous"))
    assert row.mig["gpus"] and row.min_churn is not None
    assert "| instance |" in render([row], 1.0)
