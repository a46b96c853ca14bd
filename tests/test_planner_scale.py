"""Anti-affinity at scale: the model grows with sets and classes, not with sets x GPU groups, and a size guard
refuses a model that would not fit (docs/model.md, "Anti-affinity" and "Scale")."""

from __future__ import annotations

from collections import defaultdict

import pytest
from planner_fixtures import CAT, fleet, gpu, placed, profiles, run, wl

from bench.generate import Spec, generate
from migplan.adapters.solver import PulpSolver
from migplan.planner import PlanError, Policy, build_problem, plan_problem
from migplan.planner.formulation import formulate
from migplan.planner.groups import split
from migplan.planner.milp import SizeLimit

# The review's small case: 40 GPUs (70% with a random current layout), 300 workloads, 100 of them in 21
# anti-affinity sets of 2-8. The previous formulation (y per anti-affine class, GPU group and profile, and a
# Hall row per set, group and profile subset listing the x of every pattern of the group) built 19,180
# variables, 43,127 rows and 3,319,153 nonzeros for it (2.9 GB, then no plan); this one about 4,300 / 700 /
# 16,000.
SMALL = Spec(40, 300, "single", "small", "random", anti=100)
OLD_VARIABLES, OLD_ROWS, OLD_NONZEROS = 19_180, 43_127, 3_319_153


def _problem(scope: str = "gpu"):
    state, ps = generate(SMALL)
    return ps, build_problem(state, ps, CAT, Policy(anti_affinity_scope=scope))


def test_model_grows_with_sets_not_with_sets_times_groups() -> None:
    _, prob = _problem()
    sp = split(prob)
    f = formulate(prob, sp)
    assert len(sp.groups) > 25 and len({a for c in sp.classes for a in c.sample.groups}) > 15
    assert not f.y_group  # no anti-affine class gets variables per GPU group
    assert len(f.milp.names) < 10_000 < OLD_VARIABLES
    assert len(f.milp.rows) < 2_000 < OLD_ROWS
    assert f.milp.nonzeros < 50_000 < OLD_NONZEROS


@pytest.mark.parametrize("scope", ["gpu", "host"])
def test_formerly_exploding_case_plans_with_every_set_spread(scope: str) -> None:
    ps, prob = _problem(scope)
    msgs: list[str] = []
    p = plan_problem(prob, PulpSolver(time_limit=30), progress=msgs.append)  # validated, or PlanError
    sets = {w.name: w.anti_affinity for w in ps.workloads if w.anti_affinity}
    spots: dict[str, list[object]] = defaultdict(list)
    for w in p.workloads:
        if w.name in sets and w.status == "placed":
            spots[sets[w.name]].append(w.host if scope == "host" else (w.host, w.gpu))
    assert spots and all(len(v) == len(set(v)) for v in spots.values())  # members on distinct GPUs (hosts)
    assert sum(map(len, spots.values())) > len(sets) // 2
    for w in p.workloads:
        if w.name in sets and w.status != "placed":
            assert w.reason and "anti-affinity set" in w.reason
    assert p.summary.gpus_lower_bound is not None and p.summary.gpus_lower_bound <= p.summary.gpus_used
    assert any("nonzeros" in m for m in msgs)


def test_size_guard_names_the_counts_and_what_to_do() -> None:
    _, prob = _problem()
    with pytest.raises(PlanError) as err:
        plan_problem(prob, PulpSolver(time_limit=30), limit=SizeLimit(variables=500))
    msg = str(err.value)
    assert "too large" in msg and "500 variables" in msg and "GPU groups x layout patterns" in msg
    assert err.value.hint and "plan the fleet in parts" in err.value.hint


def test_size_guard_blames_anti_affinity_when_that_is_what_grows() -> None:
    _, prob = _problem()
    sp = split(prob)
    before = formulate(prob, sp).sizes["capacity"]  # (variables, rows, nonzeros) before the spread rows
    with pytest.raises(PlanError) as err:
        formulate(prob, sp, limit=SizeLimit(nonzeros=before[2] + 100))
    msg = str(err.value)
    assert "anti-affinity part" in msg and f"{before[2] + 100:,} nonzero" in msg
    assert "anti-affinity sets x GPU types" in msg and "21 sets" in msg
    assert err.value.hint and "anti-affinity sets" in err.value.hint


def test_sets_the_mapping_cannot_spread_are_planned_per_group_again() -> None:
    # 12 GPUs on 2 hosts, host scope: per-model counts promise members the two hosts' instances cannot hold
    state, ps = generate(Spec(12, 45, "single", "small", "empty", seed=40, anti=30))
    msgs: list[str] = []
    p = plan_problem(build_problem(state, ps, CAT, Policy(anti_affinity_scope="host")), PulpSolver(time_limit=30),
                     progress=msgs.append)
    assert any("could not be spread" in m for m in msgs) and sum(m.startswith("model:") for m in msgs) == 2
    sets = {w.name: w.anti_affinity for w in ps.workloads if w.anti_affinity}
    hosts: dict[str, list[str | None]] = defaultdict(list)
    for w in p.workloads:
        if w.name in sets and w.status == "placed":
            hosts[sets[w.name]].append(w.host)
    assert all(len(v) == len(set(v)) for v in hosts.values())


@pytest.mark.parametrize(("scope", "expect"), [("gpu", {"s1": ("a", 1), "s2": ("b", 0)}), ("host", {"s1": ("b", 0)})])
def test_a_running_member_keeps_its_gpu_or_host_to_itself(scope: str, expect: dict[str, tuple[str, int]]) -> None:
    # members planned per model still never join a GPU (host) where one of their set runs
    st = fleet(gpu("a", 0, layout=["1g.5gb@0"]), gpu("a", 1), gpu("b", 0))
    ws = [wl("s0", 1000, host="a", gpu_idx=0, inst="1g.5gb@0", anti_affinity="x")]
    ws += [wl(f"s{i}", 1000, anti_affinity="x") for i in (1, 2)]
    p = run(st, profiles(*ws), Policy(headroom=0.0, headroom_min_mib=0, anti_affinity_scope=scope))
    got = {k: v[:2] for k, v in placed(p).items() if k != "s0"}
    assert placed(p)["s0"] == ("a", 0, "1g.5gb@0")
    assert sorted(got.values()) == sorted(expect.values())
    for w in p.workloads:
        if w.status != "placed":
            assert w.reason and "anti-affinity set 'x'" in w.reason
