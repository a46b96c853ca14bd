"""Small instances with hand-checked optimal plans (real CBC)."""

from __future__ import annotations

import dataclasses

from planner_fixtures import EXACT, fleet, gpu, placed, profiles, run, targets, wl

from migplan.planner import Policy
from migplan.planner.replay import applied


def test_seven_small_workloads_share_one_gpu() -> None:
    # 7 x 4000 MiB, 1 slice each: one A100 as 7 x 1g.5gb; the second GPU stays untouched (MIG disabled).
    p = run(fleet(gpu("h", 0), gpu("h", 1)), profiles(*(wl(f"w{i}", 4000) for i in range(7))))
    assert p.summary.gpus_used == 1 and p.summary.gpus_lower_bound == 1
    t = targets(p)
    assert sorted(t.values(), key=str)[0] is None or None in t.values()
    used = [v for v in t.values() if v]
    assert used == [[f"1g.5gb@{s}" for s in range(7)]]
    assert p.summary.workloads_placed == 7 and p.solve.status == "optimal"


def test_memory_decides_profile() -> None:
    # 9000 MiB needs 1g.10gb (9856) or more; 15000 MiB needs 3g.20gb (4 memory slices each): no single A100
    # holds 4 + 4 + 2 memory slices, so two GPUs is optimal
    ws = [wl("big1", 15000), wl("big2", 15000), wl("mid", 9000)]
    p = run(fleet(gpu("h", 0), gpu("h", 1)), profiles(*ws))
    pl = placed(p)
    assert pl["big1"][2].startswith("3g.20gb") and pl["big2"][2].startswith("3g.20gb")
    assert pl["mid"][2].split("@")[0] in ("1g.10gb", "2g.10gb")
    assert p.summary.gpus_used == 2 == p.summary.gpus_lower_bound


def test_compute_is_a_floor() -> None:
    # 0.40 of an A100 = 39.2 SMs -> 3 slices of 14 SMs: 3g.20gb although memory fits 1g.5gb
    p = run(fleet(gpu("h", 0)), profiles(wl("busy", 1000, share=0.40)))
    assert placed(p)["busy"][2] == "3g.20gb@0" or placed(p)["busy"][2] == "3g.20gb@4"


def test_whole_gpu_workload_takes_the_whole_gpu_with_mig_off() -> None:
    # it needs the full profile: the MIG-disabled GPU (all SMs, no mode change) beats a lone 7g.40gb
    p = run(fleet(gpu("h", 0)), profiles(wl("llm", 30000)))
    assert placed(p)["llm"] == ("h", 0, None)
    assert targets(p)[("h", 0)] is None and not p.gpus[0].actions
    assert p.summary.gpus_used == 1


def test_whole_gpu_workload_on_a_mig_enabled_empty_gpu_keeps_mig_on() -> None:
    # disabling MIG is a mode change, a GPU reset on Ampere (weights.mode + weights.reset): a lone 7g instance
    # holds the workload without one; a workload that must have the whole GPU still gets MIG disabled
    p = run(fleet(gpu("h", 0, layout=[])), profiles(wl("llm", 30000)))
    assert placed(p)["llm"] == ("h", 0, "7g.40gb@0")
    assert [str(a) for a in p.gpus[0].actions] == ["create-gi 7g.40gb@0", "create-ci 7g.40gb@0"]
    p = run(fleet(gpu("h", 0, layout=[])), profiles(wl("llm", 30000, min_profile="whole")))
    assert placed(p)["llm"] == ("h", 0, None)
    assert [str(a) for a in p.gpus[0].actions] == ["disable-mig +reset"]


def test_too_large_is_reported_not_dropped() -> None:
    p = run(fleet(gpu("h", 0)), profiles(wl("huge", 60000), wl("ok", 1000)))
    w = {x.name: x for x in p.workloads}
    assert w["huge"].status == "unplaced" and "too large" in (w["huge"].reason or "")
    assert w["ok"].status == "placed"


def test_oversubscribed_priority_wins() -> None:
    ws = [wl("low", 30000, priority=1), wl("high", 30000, priority=10)]
    p = run(fleet(gpu("h", 0)), profiles(*ws))
    w = {x.name: x for x in p.workloads}
    assert w["high"].status == "placed" and w["low"].status == "unplaced" and w["low"].reason


def test_running_workloads_stay_and_replan_is_noop() -> None:
    st = fleet(gpu("h", 0, layout=["3g.20gb@0", "3g.20gb@4"]), gpu("h", 1))
    ws = [wl("a", 15000, host="h", gpu_idx=0, inst="3g.20gb@0"), wl("b", 4000), wl("c", 4000)]
    p = run(st, profiles(*ws))
    assert placed(p)["a"] == ("h", 0, "3g.20gb@0")
    st2, ps2 = applied(st, profiles(*ws), p)
    p2 = run(st2, ps2)
    assert all(not g.actions for g in p2.gpus) and p2.summary.workloads_disrupted == 0


def test_deterministic() -> None:
    st = fleet(*(gpu("h", i) for i in range(4)))
    ws = profiles(*(wl(f"w{i}", 1000 + 700 * i, share=0.02 * i) for i in range(14)))
    a, b = run(st, ws), run(st, ws)
    assert placed(a) == placed(b) and targets(a) == targets(b)


def test_outgrown_needs_allow_disrupt() -> None:
    st = fleet(gpu("h", 0, layout=["1g.5gb@0"]), gpu("h", 1))
    ws = profiles(wl("grew", 9000, host="h", gpu_idx=0, inst="1g.5gb@0"))
    p = run(st, ws)
    w = p.workloads[0]
    assert w.status == "unplaced" and "allow-disrupt" in (w.reason or "")
    assert targets(p)[("h", 0)] == ["1g.5gb@0"]  # its instance is not destroyed
    p2 = run(st, ws, Policy(headroom=0.0, headroom_min_mib=0, allow_disrupt=True))
    assert p2.workloads[0].status == "placed" and p2.workloads[0].moved
    assert p2.summary.workloads_disrupted == 1


def test_consolidate_frees_a_gpu_allow_disrupt_alone_does_not() -> None:
    # two tiny workloads on two whole GPUs. --allow-disrupt moves a workload only to place demand (a move
    # costs ten GPUs' weight), so both stay; --consolidate moves them onto one GPU and the other comes free
    st = fleet(gpu("h", 0), gpu("h", 1))
    ws = profiles(wl("a", 1000, host="h", gpu_idx=0), wl("b", 1000, host="h", gpu_idx=1))
    assert run(st, ws).summary.gpus_changed == 0
    p = run(st, ws, Policy(headroom=0.0, headroom_min_mib=0, allow_disrupt=True))
    assert p.summary.gpus_used == 2 and p.summary.workloads_disrupted == 0 and not p.freed
    p = run(st, ws, Policy(headroom=0.0, headroom_min_mib=0, consolidate=True))
    assert p.summary.workloads_placed == 2 and p.summary.gpus_used == 1 and p.summary.free_whole_gpus == 1
    assert len(p.freed) == 1 and p.consolidation is not None and p.consolidation.gpus_freed == 1
    (where,) = {(w.host, w.gpu) for w in p.workloads}
    assert p.freed == ((("h", 1 - (where[1] or 0))),)
    assert p.summary.workloads_disrupted == len(p.migrations) == 2


def test_exact_policy_is_default_free() -> None:
    assert EXACT.headroom == 0.0


def test_a_gpu_where_something_keeps_running_is_in_use_not_free() -> None:
    """An outgrown workload that may not move keeps its MIG-disabled GPU, and so do unprofiled processes on
    a busy MIG-disabled GPU: neither GPU is counted free, and the lower bound (which keeps them too) is
    never above the GPUs the plan reports in use."""
    state = fleet(gpu("h", 0), gpu("h", 1, whole_gpu_busy=True), gpu("h", 2), gpu("h", 3))
    p = run(state, profiles(wl("big", 45000, host="h", gpu_idx=0), wl("small", 3000)))
    big = next(w for w in p.workloads if w.name == "big")
    assert big.status == "unplaced" and "outgrown" in (big.reason or "")
    assert targets(p)[("h", 0)] is None and targets(p)[("h", 1)] is None  # both left as they are
    assert p.summary.gpus_used == 3 and p.summary.free_whole_gpus == 1  # h0 (big), h1 (processes), small's
    assert p.summary.gpus_lower_bound is not None and p.summary.gpus_lower_bound <= p.summary.gpus_used
    assert ("h", 1) not in p.freed  # its processes run on: the plan frees nothing there


def test_a_moved_whole_gpu_workload_frees_its_gpu() -> None:
    """With consent the outgrown workload is moved off (here: left out, it fits nowhere) and its GPU, with the
    processes taken to be its own, is free."""
    state = fleet(gpu("h", 0, whole_gpu_busy=True), gpu("h", 1))
    p = run(state, profiles(wl("big", 45000, host="h", gpu_idx=0), wl("small", 3000)),
            dataclasses.replace(EXACT, allow_disrupt=True))
    assert next(w for w in p.workloads if w.name == "big").status == "unplaced"
    assert p.summary.gpus_used == 1 and p.summary.free_whole_gpus == 1
