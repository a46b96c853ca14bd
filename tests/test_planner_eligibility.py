"""The planner's generic placement rules, with real CBC: a GPU's rule for its target (`GpuState.allowed`) and a
workload's eligibility (`Workload.eligible`: which profiles it may use, on which hosts). Kubernetes is one source of
them (tests/test_k8s_strategies.py); here they are set directly, as any source would.
"""

from __future__ import annotations

import dataclasses

import pytest
from planner_fixtures import CAT, EXACT, H100, fleet, gpu, placed, profiles, run, targets, wl

from migplan.adapters.solver import PulpSolver
from migplan.catalog.layout import Layout
from migplan.model.diff import diff
from migplan.model.gpu_plan import GpuPlan
from migplan.planner import PlanError, Policy, build_problem, plan_problem, validate
from migplan.planner.groups import split
from migplan.profiles import ANY_MIG, WHOLE_GPU, Eligible, MemoryStats, Observation, Workload, may_use
from migplan.profiles import UNKNOWN_COMPUTE as UNKNOWN

ONE_G = [f"1g.10gb@{i}" for i in range(7)]  # an H100 with seven 1g.10gb: NVIDIA's all-1g.10gb
ONLY_1G = ("1g.10gb",)


def h100(host: str, index: int = 0, layout: list[str] | None = None, **kw: object) -> object:
    return gpu(host, index, H100, layout, **kw)


def profiles_of(p: object) -> set[str]:
    return {i.split("@")[0] for i in (p or [])}  # type: ignore[attr-defined]


def test_the_rule_keeps_a_gpu_to_its_one_profile() -> None:
    # s/0 may hold 1g.10gb only (a single-strategy node); m/0 has no rule. A 35 GB workload needs 3g.40gb or more: it
    # must go to m/0 although s/0 has room for it after a reshape; the small one may share s/0's 1g.10gb.
    st = fleet(h100("s", 0, ONE_G, allowed=ONLY_1G), h100("m", 0))
    p = run(st, profiles(wl("big", 35000, model=H100), wl("small", 5000, model=H100)))
    pl = placed(p)
    assert pl["big"][0] == "m" and pl["small"][0] == "s"
    assert profiles_of(targets(p)[("s", 0)]) == {"1g.10gb"}


def test_a_rule_never_empties_a_mig_gpu_nor_turns_mig_off() -> None:
    # idle instances go when reclaim_idle says so; under a rule a MIG GPU keeps an instance (an empty one, or MIG
    # off, is what the rule forbids: under the device plugin's single strategy GFD calls the node MIG-INVALID)
    reclaim = dataclasses.replace(EXACT, reclaim_idle=True)
    free = run(fleet(h100("a", 0, ["3g.40gb@0", "3g.40gb@4"])), profiles(), reclaim)
    assert targets(free)[("a", 0)] in ([], None)  # without a rule: emptied
    ruled = run(fleet(h100("a", 0, ["3g.40gb@0", "3g.40gb@4"], allowed=("3g.40gb",))), profiles(), reclaim)
    assert targets(ruled)[("a", 0)] == ["3g.40gb@0", "3g.40gb@4"]
    # a whole-GPU workload may not take it either: MIG off is not allowed
    p = run(fleet(h100("a", 0, ["3g.40gb@0", "3g.40gb@4"], allowed=("3g.40gb",))),
            profiles(wl("w", 5000, min_profile=WHOLE_GPU, model=H100)))
    assert p.summary.workloads_unplaced == 1 and targets(p)[("a", 0)] == ["3g.40gb@0", "3g.40gb@4"]


def test_a_rule_allowing_only_mig_off_keeps_the_gpu_whole_and_free() -> None:
    # MIG off only (a none-strategy node): a whole-GPU workload takes it, a MIG-sized one does not; it counts as a
    # free whole GPU for keep_free
    st = fleet(h100("n", 0, allowed=(WHOLE_GPU,)), h100("n", 1, allowed=(WHOLE_GPU,)))
    p = run(st, profiles(wl("whole", 60000, model=H100), wl("mig", 5000, model=H100)),
            dataclasses.replace(EXACT, keep_free=1))
    assert targets(p) == {("n", 0): None, ("n", 1): None}
    assert placed(p)["whole"][2] is None and "mig" not in placed(p)
    assert "which no GPU the plan may change may hold" in next(w.reason for w in p.workloads if w.name == "mig")


def test_a_mig_disabled_gpu_under_a_profile_rule_is_enabled_with_that_profile_only() -> None:
    st = fleet(h100("s", 0, allowed=("1g.10gb", WHOLE_GPU)))
    p = run(st, profiles(*(wl(f"w{i}", 5000, model=H100) for i in range(3)), wl("big", 35000, model=H100)))
    assert profiles_of(targets(p)[("s", 0)]) == {"1g.10gb"}
    assert sum(1 for n in placed(p) if n.startswith("w")) == 3 and "big" not in placed(p)


def _pod(name: str, mib: int, rules: tuple[Eligible, ...], requested: str | None = None,
         min_profile: str | None = None, observed: Observation | None = None, **kw: object) -> Workload:
    """A workload sized as a request is (memory exactly `mib`, compute unknown) when `requested` is set."""
    return Workload(name=name, observed=observed or Observation(), memory=MemoryStats(mib, mib, mib, mib),
                    compute=UNKNOWN, requested=requested, min_profile=min_profile, eligible=rules, **kw)  # type: ignore[arg-type]


MIXED_ONLY = (Eligible(ANY_MIG, ("m",), "hosts m"),)


def test_eligibility_keeps_a_workload_to_its_hosts_and_says_why_when_there_is_none() -> None:
    st = fleet(h100("a", 0), h100("m", 0))  # a is as good, and first
    p = run(st, profiles(*(_pod(f"p{i}", 9856, MIXED_ONLY, requested="1g.10gb", min_profile="1g.10gb")
                           for i in range(9))))
    hosts = [v[0] for v in placed(p).values()]
    assert hosts == ["m"] * 7 and p.summary.workloads_unplaced == 2  # m holds seven 1g.10gb; a none of them
    # eligible only on a host whose GPUs may not hold the profile: left out before solving, the rule named
    st = fleet(h100("a", 0), h100("m", 0, ONE_G, allowed=ONLY_1G))
    p = run(st, profiles(_pod("x", 40192, MIXED_ONLY, requested="3g.40gb", min_profile="3g.40gb")))
    reason = p.workloads[0].reason or ""
    assert p.workloads[0].status == "unplaced" and "may use only on hosts m (m)" in reason, reason


def test_a_request_with_two_forms_takes_the_one_there_is_room_for() -> None:
    # like a pod's nvidia.com/gpu: a whole GPU anywhere, or the 1g.10gb of the host whose rule is 1g.10gb only
    forms = (Eligible(WHOLE_GPU, None, "a whole GPU"), Eligible("1g.10gb", ("s",), "hosts s"))

    def pod(name: str) -> Workload:
        return _pod(name, 9856, forms, requested=WHOLE_GPU)
    room = run(fleet(h100("s", 0, ONE_G, allowed=ONLY_1G), h100("w", 0, allowed=(WHOLE_GPU,))),
               profiles(pod("g0")))
    assert placed(room)["g0"][0] == "s"  # a 1g.10gb already there costs less than a whole GPU more
    full = [wl(f"run{i}", 9000, host="s", gpu_idx=0, inst=f"1g.10gb@{i}", model=H100) for i in range(7)]
    busy = run(fleet(h100("s", 0, ONE_G, allowed=ONLY_1G), h100("w", 0, allowed=(WHOLE_GPU,))),
               profiles(*full, pod("g0")))
    assert placed(busy)["g0"] == ("w", 0, None)  # no room on s: the whole GPU


def test_gpus_are_grouped_only_with_gpus_of_the_same_rule_and_zone() -> None:
    st = fleet(*(h100(h, i) for h in ("a", "b") for i in range(2)))
    plain = split(build_problem(st, profiles(wl("x", 5000, model=H100)), CAT, EXACT))
    assert len(plain.groups) == 1  # identical empty GPUs: one group
    eligible = split(build_problem(st, profiles(_pod("x", 9856, (Eligible(ANY_MIG, ("b",), "b"),),
                                                     requested="1g.10gb")), CAT, EXACT))
    assert sorted(sorted(g.host for g in grp.gpus) for grp in eligible.groups) == [["a", "a"], ["b", "b"]]
    ruled = fleet(h100("a", 0), h100("a", 1, allowed=(WHOLE_GPU,)))
    assert len(split(build_problem(ruled, profiles(), CAT, EXACT)).groups) == 2
    assert [c.restricted for c in eligible.classes] == [True]


def test_a_running_workload_where_its_eligibility_does_not_let_it_run_is_at_risk_and_moves_with_consent() -> None:
    obs = Observation(host="a", gpu=0, gpu_model=H100, mig_profile="1g.10gb", mig_start=0)
    w = _pod("p", 9856, (Eligible(ANY_MIG, ("b",), "hosts b"),), requested="1g.10gb", min_profile="1g.10gb",
             observed=obs)
    st = fleet(h100("a", 0, ["1g.10gb@0"]), h100("b", 0))
    stay = run(st, profiles(w))
    kept = stay.workloads[0]
    assert kept.status == "at_risk" and "where it may not run (hosts b)" in (kept.reason or "")
    moved = run(st, profiles(w), dataclasses.replace(EXACT, allow_disrupt=True))
    assert placed(moved)["p"][0] == "b" and moved.workloads[0].moved


def test_anti_affine_replicas_spread_over_the_gpus_of_their_hosts() -> None:
    st = fleet(h100("a", 0), h100("a", 1), h100("b", 0), h100("b", 1))
    p = run(st, profiles(_pod("r", 9856, (Eligible(ANY_MIG, ("b",), "hosts b"),), requested="1g.10gb",
                              replicas=2)))
    spots = sorted(v[:2] for v in placed(p).values())
    assert spots == [("b", 0), ("b", 1)]


def test_the_validator_refuses_a_plan_that_breaks_a_rule_or_an_eligibility() -> None:
    st = fleet(h100("s", 0, ONE_G, allowed=ONLY_1G), h100("s", 1, ONE_G, allowed=ONLY_1G), h100("m", 0))
    ps = profiles(_pod("p", 9856, MIXED_ONLY, requested="1g.10gb", min_profile="1g.10gb"))
    problem = build_problem(st, ps, CAT, EXACT)
    good = plan_problem(problem, PulpSolver(name="cbc", time_limit=30), lower_bound=False)
    assert validate(good, problem) == [] and placed(good)["p"][0] == "m"
    # a hand-made change: s/1 reshaped to two 3g.40gb (nothing runs there), actions as the diff says
    g = good.gpu("s", 1)
    assert g is not None
    bad_target = Layout.parse(["3g.40gb@0", "3g.40gb@4"])
    hand = GpuPlan(g.observed, bad_target, tuple(diff(g.current, bad_target, gpu=g.key,
                                                      architecture=CAT.get(H100).architecture)))
    reshaped = dataclasses.replace(good, gpus=tuple(hand if x.key == g.key else x for x in good.gpus))
    assert any("s/1: target" in m and "breaks its rule" in m and "3g.40gb" in m for m in validate(reshaped, problem))
    # MIG off on a GPU whose rule does not allow it
    off = GpuPlan(g.observed, None, tuple(diff(g.current, None, gpu=g.key, architecture=CAT.get(H100).architecture)))
    disabled = dataclasses.replace(good, gpus=tuple(off if x.key == g.key else x for x in good.gpus))
    assert any("s/1" in m and "MIG disabled, but only 1g.10gb may be" in m for m in validate(disabled, problem))
    # the workload moved by hand onto s/0's free 1g.10gb: the instance fits, its eligibility does not
    w = next(x for x in good.workloads if x.name == "p")
    moved = dataclasses.replace(good, workloads=(dataclasses.replace(w, host="s", gpu=0, instance="1g.10gb@0"),))
    assert any("p: 1g.10gb on s/0, but it may use it only on hosts m" in m for m in validate(moved, problem))


def test_a_rule_that_what_must_stay_breaks_is_a_clear_error() -> None:
    # a workload that may not move runs on an instance the GPU's rule does not allow: no layout keeps both
    st = fleet(h100("s", 0, ["3g.40gb@0"], allowed=ONLY_1G))
    w = wl("x", 30000, host="s", gpu_idx=0, inst="3g.40gb@0", model=H100)
    with pytest.raises(PlanError, match="no layout keeps both what must stay there and their rule"):
        run(st, profiles(w))


def test_without_rules_the_model_is_the_one_it_was() -> None:
    # rules absent: nothing in the problem or the program changes (tests/test_propose_cli.py's golden plans, and
    # bench/golden_plans.py, compare whole plans byte for byte)
    st = fleet(h100("a", 0), h100("a", 1, ["3g.40gb@0"]))
    problem = build_problem(st, profiles(wl("x", 5000, model=H100)), CAT, Policy())
    assert all(g.allowed is None for g in problem.gpus) and all(not it.eligible for it in problem.items)
    assert all(g.allowed is None and g.zone == frozenset() for g in split(problem).groups)
    assert "allowed" not in problem.gpus[0].identity()


def test_may_use_reads_rules_as_documented() -> None:
    rules = (Eligible(WHOLE_GPU, None), Eligible("1g.10gb", ("s",)), Eligible(ANY_MIG, ("m",)))
    assert may_use((), "3g.40gb", "anywhere")  # no rules: anything
    assert may_use(rules, WHOLE_GPU, "x") and may_use(rules, "1g.10gb", "s") and not may_use(rules, "1g.10gb", "m")
    assert may_use(rules, "3g.40gb", "m") and not may_use(rules, "3g.40gb", "s")  # ANY_MIG for profiles not named
    assert not may_use((Eligible(ANY_MIG, None),), WHOLE_GPU, "x")  # ANY_MIG is MIG profiles only


def test_the_greedy_fallback_keeps_rules_and_eligibility() -> None:
    # no incumbent in time (the solver's answer withheld, as tests/test_greedy_fallback.py does): the greedy plan puts
    # new demand in idle instances only where its eligibility lets it, and is checked like any plan
    from test_greedy_fallback import NoIncumbent

    from migplan.planner import plan as make_plan
    st = fleet(h100("s", 0, ONE_G, allowed=ONLY_1G), h100("m", 0, ["1g.10gb@0", "1g.10gb@1"]))
    ps = profiles(*(_pod(f"p{i}", 9856, MIXED_ONLY, requested="1g.10gb", min_profile="1g.10gb") for i in range(3)))
    p = make_plan(st, ps, CAT, EXACT, NoIncumbent())  # type: ignore[arg-type]
    assert p.solve.fallback == "greedy" and all(not g.actions for g in p.gpus)
    assert sorted(v[:2] for v in placed(p).values()) == [("m", 0), ("m", 0)]  # s's seven 1g.10gb: not for them
    assert p.summary.workloads_unplaced == 1
