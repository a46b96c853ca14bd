"""docs/model.md states the planner's defaults: each is read from the code here, so a changed default (or a
page that says p99 where the code sizes for max) fails until the page says it again."""

from __future__ import annotations

from pathlib import Path

from migplan.commands.propose import (
    CONSOLIDATE_GAP_ABS_GPUS,
    DEFAULT_GAP,
    DEFAULT_GAP_ABS_GPUS,
    DEFAULT_SOLVER,
    DEFAULT_TIME_LIMIT_S,
)
from migplan.planner.demand import Policy, Weights

PAGE = (Path(__file__).resolve().parents[1] / "docs" / "model.md").read_text()


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_the_sizing_defaults_are_the_policy_defaults() -> None:
    p = Policy()
    page = _flat(PAGE)
    assert f"memory statistic m_q (default `{p.memory_percentile}`" in page
    assert f"compute percentile c_q (default {p.compute_percentile}," in page
    assert f"defaults {p.headroom * 100:g} %, {p.headroom_min_mib} MiB" in page
    assert f"K = --keep-free, default {p.keep_free}" in page
    assert f"(scope `{p.anti_affinity_scope}`, the default)" in page


def test_the_objective_weights_are_the_weights_defaults() -> None:
    w = Weights()
    stated = (f"Default weights {w.unplaced:g} / {w.disrupt:g} / {w.gpu:g} / {w.change:g} / {w.mode:g} + "
              f"{w.reset:g} / {w.fragment:g} / {w.waste:g}")
    assert stated in _flat(PAGE)


def test_the_solve_defaults_are_propose_defaults() -> None:
    page = _flat(PAGE)
    assert f"`--time-limit` (default {DEFAULT_TIME_LIMIT_S:g} s)" in page
    assert f"`--gap` (default {DEFAULT_GAP:g})" in page
    assert f"within {DEFAULT_GAP_ABS_GPUS:g} of a GPU's weight" in page
    assert f"({CONSOLIDATE_GAP_ABS_GPUS:g} when consolidating)" in page
    assert f"solver `{DEFAULT_SOLVER}` by default" in page
