"""One table-driven test per constraint family (real CBC)."""

from __future__ import annotations

import dataclasses

import pytest
from planner_fixtures import CAT, EXACT, fleet, gpu, pin, placed, profiles, run, targets, wl

from migplan.adapters.solver import available
from migplan.catalog.layout import Instance
from migplan.planner import PlanError, Policy, build_problem


def two_hosts() -> list:
    return [gpu("a", 0), gpu("a", 1), gpu("b", 0), gpu("b", 1)]


@pytest.mark.parametrize(("pinned", "expect"), [
    (pin("b"), ("b", None)),
    (pin("b", 1), ("b", 1)),
    (pin("a", 1), ("a", 1)),
])
def test_pins(pinned, expect) -> None:
    ws = [wl("x", 4000, pin=pinned), wl("y", 4000)]
    host, idx, _ = placed(run(fleet(*two_hosts()), profiles(*ws)))["x"]
    assert host == expect[0] and (expect[1] is None or idx == expect[1])


@pytest.mark.parametrize(("scope", "members", "key"), [
    ("gpu", 3, lambda w: (w[0], w[1])),
    ("host", 2, lambda w: w[0]),
])
def test_anti_affinity(scope, members, key) -> None:
    ws = [wl(f"s{i}", 1000, anti_affinity="safe") for i in range(members)] + [wl("free", 1000)]
    p = run(fleet(*two_hosts()), profiles(*ws), dataclasses.replace(EXACT, anti_affinity_scope=scope))
    spots = [key(v) for k, v in placed(p).items() if k.startswith("s")]
    assert len(spots) == members and len(set(spots)) == members


@pytest.mark.parametrize(("replicas", "gpus"), [(2, 2), (3, 3)])
def test_replicas_on_different_gpus(replicas, gpus) -> None:
    p = run(fleet(*two_hosts()), profiles(wl("r", 1000, replicas=replicas)))
    pl = placed(p)
    assert len(pl) == replicas and len({v[:2] for v in pl.values()}) == gpus


def test_more_replicas_than_gpus_reported() -> None:
    p = run(fleet(gpu("a", 0), gpu("a", 1)), profiles(wl("r", 1000, replicas=3)))
    assert p.summary.workloads_placed == 2 and p.summary.workloads_unplaced == 1


@pytest.mark.parametrize("flag", ["reserved", "excluded"])
def test_held_gpus_untouched(flag) -> None:
    st = fleet(gpu("a", 0, layout=["3g.20gb@4"], **{flag: True}), gpu("a", 1))
    p = run(st, profiles(wl("x", 15000), wl("y", 15000)))
    g = p.gpu("a", 0)
    assert g is not None and g.target == st.gpus[0].layout and not g.actions and g.hold == flag
    assert all(v[:2] != ("a", 0) for v in placed(p).values())


@pytest.mark.parametrize(("keep", "used_max"), [(0, 1), (1, 1), (2, 1)])
def test_keep_free(keep, used_max) -> None:
    p = run(fleet(gpu("a", 0), gpu("a", 1), gpu("a", 2)), profiles(wl("x", 1000), wl("y", 1000)),
            dataclasses.replace(EXACT, keep_free=keep))
    assert p.summary.free_whole_gpus >= keep and p.summary.gpus_used <= used_max


def test_keep_free_impossible_is_an_error() -> None:
    with pytest.raises(PlanError):
        run(fleet(gpu("a", 0)), profiles(wl("x", 1000)), dataclasses.replace(EXACT, keep_free=2))


@pytest.mark.parametrize(("min_profile", "expect"), [(None, "1g.5gb"), ("2g.10gb", "2g.10gb"), ("3g.20gb", "3g.20gb")])
def test_min_profile(min_profile, expect) -> None:
    p = run(fleet(gpu("a", 0)), profiles(wl("x", 1000, min_profile=min_profile)))
    assert placed(p)["x"][2].split("@")[0] == expect


@pytest.mark.parametrize("allow", [False, True])
def test_busy_instance_kept_without_consent(allow) -> None:
    st = fleet(gpu("a", 0, layout=["1g.5gb@3"], busy=(Instance(3, "1g.5gb"),)))
    p = run(st, profiles(wl("big", 30000)), dataclasses.replace(EXACT, allow_disrupt=allow))
    if allow:
        # the busy instance goes (consent), and the full-GPU workload gets the whole GPU as a 7g instance: MIG stays
        # on (disabling it needs a GPU reset on Ampere, weights.mode + weights.reset)
        assert placed(p)["big"] == ("a", 0, "7g.40gb@0") and targets(p)[("a", 0)] == ["7g.40gb@0"]
        assert p.summary.busy_disrupted == 1
    else:
        assert "1g.5gb@3" in (targets(p)[("a", 0)] or []) and p.summary.workloads_unplaced == 1


@pytest.mark.parametrize("allow", [False, True])
def test_whole_gpu_with_processes_keeps_mig_off_without_consent(allow) -> None:
    # Discovery saw processes on a MIG-disabled GPU that no profile accounts for: enabling MIG would stop them.
    st = fleet(gpu("a", 0, whole_gpu_busy=True), gpu("a", 1, whole_gpu_busy=True))
    ws = profiles(wl("s1", 3000), wl("s2", 3000))
    p = run(st, ws, dataclasses.replace(EXACT, allow_disrupt=allow))
    if allow:
        assert p.summary.workloads_placed == 2
        assert sum(t is not None for t in targets(p).values()) == 1  # one GPU's processes are disrupted
        assert p.summary.busy_disrupted == 1
    else:
        assert targets(p) == {("a", 0): None, ("a", 1): None}
        assert p.summary.workloads_unplaced == 2 and p.summary.busy_disrupted == 0


def test_idle_mig_disabled_gpu_is_used() -> None:
    p = run(fleet(gpu("a", 0)), profiles(wl("s1", 3000)))
    assert placed(p)["s1"][0:2] == ("a", 0) and targets(p)[("a", 0)] is not None


@pytest.mark.parametrize(("pct", "headroom", "need"), [("p99", 0.1, 11000), ("p50", 0.0, 5000), ("max", 0.5, 18000)])
def test_demand_policy(pct, headroom, need) -> None:
    w = wl("x", 10000)
    w = dataclasses.replace(w, memory=dataclasses.replace(w.memory, p50=5000, p95=9000, p99=10000, max=12000))
    pol = Policy(memory_percentile=pct, headroom=headroom, headroom_min_mib=0)
    prob = build_problem(fleet(gpu("a", 0)), profiles(w), CAT, pol)
    assert prob.items[0].demand.memory_mib == need


def test_headroom_minimum_mib() -> None:
    prob = build_problem(fleet(gpu("a", 0)), profiles(wl("x", 1000)), CAT, Policy(headroom=0.1, headroom_min_mib=512))
    assert prob.items[0].demand.memory_mib == 1512


def test_mixed_models_sm_conversion() -> None:
    # 0.30 of an A100 = 29.4 SMs: 3 slices on A100 (14 SM), 2 on H100 (16 SM)
    prob = build_problem(fleet(gpu("a", 0), gpu("b", 0, model="H100-SXM5-80GB")), profiles(wl("x", 1000, share=0.3)),
                         CAT, EXACT)
    it = prob.items[0]
    assert it.slices("A100-SXM4-40GB") == 3 and it.slices("H100-SXM5-80GB") == 2


@pytest.mark.skipif("highs" not in available(), reason="highspy not installed")
def test_highs_gives_the_same_gpu_count() -> None:
    st = fleet(*two_hosts())
    ws = profiles(*(wl(f"w{i}", 1000 + 900 * i) for i in range(10)))
    assert run(st, ws, solver="highs").summary.gpus_used == run(st, ws).summary.gpus_used


@pytest.mark.parametrize("policy", [EXACT, dataclasses.replace(EXACT, allow_disrupt=True, keep_free=1),
                                    dataclasses.replace(EXACT, consolidate=True, max_moves=2)])
def test_the_lower_bound_made_from_the_plans_model_is_the_one_formulated_anew(policy: Policy) -> None:
    """`reweighted` (the lower bound from the plan's own model: its rows shared, its objective made anew)
    writes the very MPS text that formulating the lower bound from scratch writes."""
    from migplan.adapters.solver import mps_text
    from migplan.planner.formulation import formulate, reweighted
    from migplan.planner.groups import split
    from migplan.planner.planner import LB_WEIGHTS

    state = fleet(gpu("a", 0, layout=["3g.20gb@0", "2g.10gb@4"]), gpu("a", 1), gpu("b", 0, whole_gpu_busy=True),
                  gpu("b", 1, model="A100-SXM4-80GB", layout=["7g.80gb@0"]))
    ws = [wl("r", 9000, 0.2, host="a", gpu_idx=0, inst="3g.20gb@0"), wl("s", 30000, host="b", gpu_idx=1,
                                                                        inst="7g.80gb@0", model="A100-SXM4-80GB"),
          wl("n1", 4000, anti_affinity="grp"), wl("n2", 4000, anti_affinity="grp"), wl("big", 38000, 0.9)]
    problem = build_problem(state, profiles(*ws), CAT, policy)
    sp = split(problem)
    plan_model = formulate(problem, sp)
    assert mps_text(reweighted(plan_model, LB_WEIGHTS, place_all=True).milp, True) == \
        mps_text(formulate(problem, sp, LB_WEIGHTS, place_all=True).milp, True)
    assert plan_model.milp.objective != reweighted(plan_model, LB_WEIGHTS).milp.objective  # made anew
