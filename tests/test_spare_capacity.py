"""Idle instances and spare capacity as a policy (issue 23).

Default: an idle instance (nothing runs there) stays unless removing it frees a whole GPU or makes room for
demand; `reclaim_idle: true` lets idle instances go wherever the plan gains (the behaviour before); `spare`
keeps at least N free instances of a profile. The summary counts idle instances kept and removed, and why.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from migplan.adapters.solver import PulpSolver
from migplan.config import load_config
from migplan.errors import InputError
from migplan.planner import Policy, plan
from migplan.planner.plan import PlanError, plan_from_dict, plan_to_dict
from tests.planner_fixtures import CAT, EXACT, fleet, gpu, profiles, targets, wl

ONE_RUNNING_SIX_IDLE = ["1g.5gb@0", "1g.5gb@1", "1g.5gb@2", "1g.5gb@3", "1g.5gb@4", "1g.5gb@5", "1g.5gb@6"]


def _plan(state, ps, policy=EXACT):  # type: ignore[no-untyped-def]
    return plan(state, ps, CAT, policy, PulpSolver(time_limit=30))


def _busy_gpu():  # type: ignore[no-untyped-def]
    """One A100 with seven 1g.5gb instances, a workload on the first, six idle."""
    return fleet(gpu("h", 0, layout=ONE_RUNNING_SIX_IDLE)), profiles(wl("svc", 3000, host="h", gpu_idx=0,
                                                                        inst="1g.5gb@0"))


def test_idle_instances_on_a_gpu_in_use_are_kept_by_default() -> None:
    state, ps = _busy_gpu()
    p = _plan(state, ps)
    assert targets(p)[("h", 0)] == ONE_RUNNING_SIX_IDLE and p.gpu("h", 0).actions == ()  # type: ignore[union-attr]
    assert (p.summary.idle_kept, p.summary.idle_removed) == (6, 0)


def test_a_gpu_with_only_idle_instances_is_emptied_to_free_it() -> None:
    state = fleet(gpu("h", 0, layout=["3g.20gb@0", "3g.20gb@4"]), gpu("h", 1, layout=ONE_RUNNING_SIX_IDLE))
    ps = profiles(wl("a", 12000, host="h", gpu_idx=0, inst="3g.20gb@0"))
    p = _plan(state, ps)
    assert targets(p)[("h", 1)] == [] and p.summary.gpus_used == 1
    s = p.summary
    assert (s.idle_removed, s.idle_removed_freeing, s.idle_kept) == (7, 7, 1)  # 3g.20gb@4 on GPU 0 stays


def _room_needed():  # type: ignore[no-untyped-def]
    """The only GPU: a running 3g.20gb and three idle 1g.5gb; a new workload needs a 1g.10gb (slices 6-7)."""
    state = fleet(gpu("h", 0, layout=["3g.20gb@0", "1g.5gb@4", "1g.5gb@5", "1g.5gb@6"]))
    return state, profiles(wl("a", 12000, host="h", gpu_idx=0, inst="3g.20gb@0"), wl("new", 8000))


def test_idle_instances_make_room_for_demand() -> None:
    state, ps = _room_needed()
    p = _plan(state, ps)
    placed = {w.name: w for w in p.workloads}
    assert placed["new"].status == "placed" and placed["new"].instance == "1g.10gb@6"
    assert targets(p)[("h", 0)] == ["3g.20gb@0", "1g.5gb@4", "1g.5gb@5", "1g.10gb@6"]
    # the one idle instance in the way goes; the two others stay, schedulable as they were
    assert (p.summary.idle_removed, p.summary.idle_removed_freeing, p.summary.idle_kept) == (1, 0, 2)


def test_reclaim_idle_lets_them_go_where_the_plan_gains() -> None:
    # the behaviour before the policy: a GPU whose layout changes keeps only the instances that are used
    state, ps = _room_needed()
    p = _plan(state, ps, Policy(headroom=0.0, headroom_min_mib=0, reclaim_idle=True))
    assert targets(p)[("h", 0)] == ["3g.20gb@0", "1g.10gb@6"]
    assert (p.summary.idle_removed, p.summary.idle_removed_freeing, p.summary.idle_kept) == (3, 0, 0)


def test_spare_keeps_free_instances_of_a_profile() -> None:
    state = fleet(gpu("h", 0, layout=[]), gpu("h", 1, layout=[]))
    p = _plan(state, profiles(wl("a", 12000)), Policy(headroom=0.0, headroom_min_mib=0, spare={"1g.10gb": 4}))
    placed = {(w.host, w.gpu, w.instance) for w in p.workloads if w.on_gpu}
    free = Counter(i.split("@")[0] for (h, k), lay in targets(p).items() for i in (lay or [])
                   if (h, k, i) not in placed)
    assert free["1g.10gb"] >= 4
    assert p.policy["spare"] == {"1g.10gb": 4}


def test_spare_of_a_model_only_counts_that_model() -> None:
    state = fleet(gpu("h", 0, layout=[]), gpu("h", 1, model="H100-SXM5-80GB", layout=[]))
    p = _plan(state, profiles(), Policy(spare={"H100-SXM5-80GB/1g.10gb": 2}))
    h100 = [i for i in targets(p)[("h", 1)] or [] if i.startswith("1g.10gb@")]
    assert len(h100) >= 2 and targets(p)[("h", 0)] == []


def test_a_spare_profile_no_gpu_has_is_refused() -> None:
    with pytest.raises(PlanError, match="spare 1g.99gb: no planned GPU has profile 1g.99gb"):
        _plan(fleet(gpu("h", 0)), profiles(), Policy(spare={"1g.99gb": 1}))


@pytest.mark.parametrize(("spare", "says"), [
    ({"1g10gb": 1}, "not a profile"),
    ({"1g.10gb": 0}, "expected a whole number"),
    ({"1g.10gb": True}, "expected a whole number"),
    ("1g.10gb", "spare must map"),
])
def test_bad_spare_entries_are_refused(spare: object, says: str) -> None:
    with pytest.raises(InputError, match=says):
        Policy(spare=spare)  # type: ignore[arg-type]


def test_the_config_file_sets_the_policy(tmp_path) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "config.yaml"
    cfg.write_text("version: 1\nplanner:\n  reclaim_idle: true\n  spare: {1g.10gb: 4, A100-SXM4-80GB/3g.40gb: 1}\n")
    c = load_config(cfg)
    assert c.planner == {"reclaim_idle": True, "spare": {"1g.10gb": 4, "A100-SXM4-80GB/3g.40gb": 1}}
    cfg.write_text("version: 1\nplanner:\n  spare: {1g.10gb: many}\n")
    with pytest.raises(InputError, match="spare"):
        load_config(cfg)


def test_the_idle_counts_and_policy_survive_the_plan_document() -> None:
    state, ps = _busy_gpu()
    p = _plan(state, ps, Policy(headroom=0.0, headroom_min_mib=0, spare={"1g.5gb": 2}))
    back = plan_from_dict(json.loads(json.dumps(plan_to_dict(p))), CAT)
    assert back.summary == p.summary and back.policy["spare"] == {"1g.5gb": 2}
