"""vGPU planning (issue 26, docs/vgpu.md "Planning"): planner.vgpu_solve with the real CBC, checked against the vGPU
simulator's own type table and the MIG simulator's geometry (tests/sim_vgpu/vgpu_table.py, tests/sim/geometry.py:
written from NVIDIA's documents independently of migplan's catalogs), never against migplan's own rules."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence

import pytest
from sim import geometry as sim_geometry
from sim_vgpu import vgpu_table

from migplan.adapters.solver import PulpSolver
from migplan.catalog import builtin_catalog, builtin_vgpu_catalog
from migplan.model.vgpu import VgpuGpuPlan, VgpuGpuState, VgpuPlan, VgpuSlot, vgpu_actions
from migplan.planner.demand import Policy
from migplan.planner.vgpu_check import check
from migplan.planner.vgpu_solve import plan_vgpus
from migplan.profiles import ComputeStats, MemoryStats, Observation, Workload

CAT = builtin_catalog()
VCAT = builtin_vgpu_catalog()
SIM_MODEL = {"A100-HGX-40GB": "A100-SXM4-40GB", "L4": "L4", "T4": "T4"}  # migplan board -> the simulator's model


def vm(name: str, mib: int, typ: str | None = None, *, host: str | None = None, gpu: int | None = None,
       pin: str | None = None, floor: str | None = None, priority: int = 1) -> Workload:
    return Workload(name=name, kind="vm", memory=MemoryStats(p50=mib * 8 // 10, p95=mib * 9 // 10, p99=mib, max=mib),
                    compute=ComputeStats(0.0, 0.0, 0.0, known=False),
                    observed=Observation(host=host, gpu=gpu, vgpu_type=typ), vgpu_type=pin, min_vgpu_type=floor,
                    priority=priority)


def gpu(host: str, index: int, board: str, modes: Sequence[str] = ("time_sliced", "mig_backed"), **kw: object
        ) -> VgpuGpuState:
    b = VCAT.get(board)
    allowed = tuple(m for m in modes if m in b.modes)
    return VgpuGpuState(host=host, index=index, model=b.gpu, board=b.id, host_mode=b.host_vgpu_mode,
                        allowed=allowed, **kw)  # type: ignore[arg-type]


def solve(gpus: Sequence[VgpuGpuState], vms: Sequence[Workload], **policy: object) -> VgpuPlan:
    return plan_vgpus(gpus, vms, Policy(**policy), PulpSolver(time_limit=30), VCAT, CAT)  # type: ignore[arg-type]


def oracle_problems(p: VgpuPlan) -> list[str]:
    """What the simulator's table and geometry refuse in the plan's targets (the driver's rules as the simulator
    enforces them on `current_vgpu_type` / mdev `create`, independent of migplan)."""
    out = []
    for g in p.gpus:
        if not g.slots:
            continue
        m = vgpu_table.model(SIM_MODEL[g.observed.board])
        types = [m.type(s.type_name) for s in g.slots]
        if None in types:
            out.append(f"{g.key}: a type the simulator does not know")
            continue
        ts = [t for t in types if t is not None]
        if g.mode == "mig_backed":
            geo = sim_geometry.find_model(m.mig_model or "")
            placed = [(str(s.placement).split("@")[0], int(str(s.placement).split("@")[1])) for s in g.slots]
            out += [f"{g.key}: {msg}" for _, msg in sim_geometry.conflicts(geo, placed)]
            out += [f"{g.key}: {t.short} is not on a {t.mig_profile}" for t, s in zip(ts, g.slots, strict=True)
                    if t.mig_profile != str(s.placement).split("@")[0]]
        elif g.mode == "time_sliced":
            if len({t.fb_mib for t in ts}) != 1:
                out.append(f"{g.key}: equal-size mode with frame buffers {sorted({t.fb_mib for t in ts})}")
            out += [f"{g.key}: {n} x {t.short} > {t.max_equal}" for t, n in Counter(ts).items() if n > t.max_equal]
        else:
            out += [f"{g.key}: {n} x {t.short} > {t.max_mixed}" for t, n in Counter(ts).items()
                    if t.max_mixed is None or n > t.max_mixed]
            if sum(t.fb_mib for t in ts) > m.vgpu_fb_mib:
                out.append(f"{g.key}: {sum(t.fb_mib for t in ts)} MiB > {m.vgpu_fb_mib}")
    return out


def applied(p: VgpuPlan, running: bool = True) -> list[VgpuGpuState]:
    """The state an apply of `p` leaves (each new vGPU on a device of its own), with the VMs started or not."""
    out, n = [], 0
    for g in p.gpus:
        slots = []
        for s in g.slots:
            n += 1
            dev = s.device or f"0000:{n:02x}:00.4"
            slots.append(dataclasses.replace(s, device=dev, running=running and s.vm is not None,
                                             vm=s.vm if running else None))
        o = g.observed
        mig = g.mode == "mig_backed" or (o.mig_enabled and g.mode is None)
        out.append(dataclasses.replace(o, mode=g.mode, slots=tuple(slots), mig_enabled=mig,
                                       layout=tuple(sorted(str(s.placement) for s in slots if s.placement)) if mig
                                       else (), vfs=16 if o.host_mode == "sr-iov" and g.mode else o.vfs))
    return out


MIXED_FLEET_VMS = [*(vm(f"vm:l4-{i}", 5000 + 300 * i, "L4-8C") for i in range(5)),
                   *(vm(f"vm:t4-{i}", 3000, "T4-4C") for i in range(3)),
                   *(vm(f"vm:a100-{i}", 9000, "A100X-3-20C") for i in range(4)),
                   vm("vm:a100-big", 17000, "A100X-4-20C")]


def mixed_fleet() -> list[VgpuGpuState]:
    return [gpu("kvm-l4", i, "L4") for i in range(2)] + [gpu("kvm-t4", i, "T4") for i in range(2)] + [
        gpu("kvm-a100", i, "A100X", modes=("mig_backed",)) for i in range(2)]


def test_mixed_fleet_is_planned_within_the_simulators_rules_and_at_its_lower_bound() -> None:
    p = solve(mixed_fleet(), MIXED_FLEET_VMS)
    assert oracle_problems(p) == []
    assert {v.status for v in p.vms} == {"placed"}
    assert p.gpus_used == p.gpu_lower_bound == 5  # L4 2 (3 x 8C equal-size), T4 1, A100 2 (60 GB of frame buffer)
    assert all(g.mode in (None, "mig_backed") for g in p.gpus if g.observed.board == "A100-HGX-40GB")


def test_each_vm_gets_the_smallest_type_of_its_kind_holding_its_need() -> None:
    p = solve(mixed_fleet(), MIXED_FLEET_VMS)
    by = {v.name: v for v in p.vms}
    assert by["vm:t4-0"].vgpu_type == "T4-4C"  # 3512 MiB needed
    assert by["vm:a100-big"].vgpu_type == "A100X-3-20C"  # 18700 MiB: the 20 GB type with the fewest slices
    for v in p.vms:
        assert v.frame_buffer_mib >= v.need_mib
        assert v.vgpu_type is not None and "-" in v.vgpu_type
    # the A100 VMs ran MIG-backed and stay MIG-backed; the L4's time-sliced
    assert all(VCAT.get("A100X").vgpu_type(by[f"vm:a100-{i}"].vgpu_type or "").mig_backed for i in range(4))


def test_a_replan_after_apply_with_the_same_demand_changes_nothing() -> None:
    first = solve(mixed_fleet(), MIXED_FLEET_VMS)
    for running in (True, False):
        again = solve(applied(first, running=running), MIXED_FLEET_VMS)
        assert [a for g in again.gpus for a in g.actions] == []
        assert {(v.name, v.host, v.gpu, v.vgpu_type) for v in again.vms} == {
            (v.name, v.host, v.gpu, v.vgpu_type) for v in first.vms}


def test_a_running_vm_keeps_its_gpu_and_type_even_when_too_small_without_disruption() -> None:
    running = VgpuSlot("L4-4C", vm="vm:small", running=True, device="0000:01:00.4")
    g0 = gpu("kvm", 0, "L4", mode="time_sliced", slots=(running,), vfs=32)
    p = solve([g0, gpu("kvm", 1, "L4")], [vm("vm:small", 7000, "L4-4C", host="kvm", gpu=0)])
    (v,) = p.vms
    assert (v.status, v.vgpu_type, v.gpu) == ("kept", "L4-4C", 0)
    assert v.reason is not None and "--allow-disrupt" in v.reason
    assert all(not g.actions for g in p.gpus)


def test_allow_disrupt_gives_a_running_vm_too_small_a_larger_type() -> None:
    running = VgpuSlot("L4-4C", vm="vm:small", running=True, device="0000:01:00.4")
    g0 = gpu("kvm", 0, "L4", mode="time_sliced", slots=(running,), vfs=32)
    p = solve([g0, gpu("kvm", 1, "L4")], [vm("vm:small", 7000, "L4-4C", host="kvm", gpu=0)], allow_disrupt=True)
    (v,) = p.vms
    assert (v.status, v.vgpu_type, v.moved) == ("placed", "L4-8C", True)
    assert oracle_problems(p) == []
    removed = [a for g in p.gpus for a in g.actions if a.kind == "remove"]
    assert [a.device for a in removed] == ["0000:01:00.4"]


def test_new_vms_share_a_gpu_with_running_ones_only_in_its_mode_and_type() -> None:
    running = tuple(VgpuSlot("L4-8C", vm=f"vm:r{i}", running=True, device=f"0000:01:00.{4 + i}") for i in range(2))
    g0 = gpu("kvm", 0, "L4", mode="time_sliced", slots=running, vfs=32)
    new = [vm("vm:n0", 6000, "L4-8C"), vm("vm:n1", 3000, "L4-4C")]
    p = solve([g0, gpu("kvm", 1, "L4")], [vm("vm:r0", 6000, "L4-8C"), vm("vm:r1", 6000, "L4-8C"), *new])
    assert oracle_problems(p) == []
    assert p.gpus_used == 2  # GPU 0 holds three 8C in equal-size mode: one more VM there, the other on GPU 1
    g = p.gpu("kvm", 0)
    assert g is not None and [s.device for s in g.slots if s.running] == ["0000:01:00.4", "0000:01:00.5"]


def test_inventory_modes_are_honoured() -> None:
    only_ts = [gpu("kvm", i, "A100X", modes=("time_sliced",)) for i in range(2)]
    p = solve(only_ts, [vm(f"vm:{i}", 9000, "A100X-10C") for i in range(3)])
    assert {g.mode for g in p.gpus if g.slots} == {"time_sliced"}
    assert oracle_problems(p) == []
    # MIG-backed VMs have no place on a host that may not use MIG-backed mode
    p = solve(only_ts, [vm("vm:mb", 9000, "A100X-2-10C")])
    assert [(v.status, v.reason is not None) for v in p.vms] == [("unplaced", True)]


def test_mixed_size_mode_packs_two_sizes_on_one_gpu_where_allowed() -> None:
    vms = [vm("vm:big", 11000, "L4-12C"), vm("vm:s1", 5000, "L4-6C"), vm("vm:s2", 5000, "L4-6C")]
    equal = solve([gpu("kvm", i, "L4", modes=("time_sliced",)) for i in range(2)], vms)
    mixed = solve([gpu("kvm", i, "L4", modes=("time_sliced", "time_sliced_mixed")) for i in range(2)], vms)
    assert (equal.gpus_used, mixed.gpus_used) == (2, 1)
    assert oracle_problems(mixed) == [] and oracle_problems(equal) == []
    (used,) = [g for g in mixed.gpus if g.slots]
    assert used.mode == "time_sliced_mixed" and [a.kind for a in used.actions][:2] == ["vfs-enable", "mixed-on"]


def test_a_pin_is_the_type_given_and_a_floor_is_respected() -> None:
    p = solve([gpu("kvm", 0, "L4")], [vm("vm:pin", 3000, pin="L4-12C"), vm("vm:floor", 3000, floor="L4-8C")])
    by = {v.name: v for v in p.vms}
    assert by["vm:pin"].vgpu_type == "L4-12C"
    assert by["vm:floor"].vgpu_type in ("L4-8C", "L4-12C")


def test_lower_bound_never_exceeds_gpus_used_on_random_fleets() -> None:
    import random

    rng = random.Random(7)
    for _ in range(6):
        vms = [vm(f"vm:{i}", rng.randint(2000, 20000), rng.choice(["L4-8C", "A100X-3-20C", "A100X-10C"]))
               for i in range(rng.randint(4, 14))]
        fleet = [gpu("kvm-l4", i, "L4") for i in range(6)] + [gpu("kvm-a", i, "A100X") for i in range(6)]
        p = solve(fleet, vms)
        assert oracle_problems(p) == []
        assert p.gpu_lower_bound <= p.gpus_used
        assert all(v.status == "placed" for v in p.vms)


def test_more_vms_than_room_leaves_the_lowest_priority_out() -> None:
    vms = [vm("vm:lo", 12000, "T4-16C", priority=0), vm("vm:hi", 12000, "T4-16C", priority=5)]
    p = solve([gpu("kvm", 0, "T4")], vms)
    assert {v.name: v.status for v in p.vms} == {"vm:hi": "placed", "vm:lo": "unplaced"}


def test_the_plan_check_refuses_a_target_the_rules_forbid() -> None:
    p = solve([gpu("kvm", 0, "L4")], [vm("vm:a", 6000, "L4-8C")])
    (g,) = p.gpus
    bad_slots = (*g.slots, VgpuSlot("L4-4C", vm="vm:x"))  # two sizes in equal-size mode
    bad = dataclasses.replace(g, slots=bad_slots, actions=vgpu_actions(g.observed, g.mode, bad_slots))
    problems = check(dataclasses.replace(p, gpus=(bad,)), VCAT, CAT, movable=False)
    assert any("equal-size mode holds one type" in x for x in problems)


def test_a_running_vms_vgpu_dropped_is_refused_by_the_check_unless_disruption_is_allowed() -> None:
    running = VgpuSlot("L4-8C", vm="vm:r", running=True, device="0000:01:00.4")
    g0 = gpu("kvm", 0, "L4", mode="time_sliced", slots=(running,), vfs=32)
    dropped = VgpuPlan(gpus=(VgpuGpuPlan(g0, None, (), vgpu_actions(g0, None, ())),), vms=())
    assert [a.kind for a in dropped.gpus[0].actions] == ["remove"]
    assert any("is not kept" in x for x in check(dropped, VCAT, CAT, movable=False))
    assert check(dropped, VCAT, CAT, movable=True) == []


def test_the_diff_refuses_a_kept_device_of_another_type() -> None:
    g0 = gpu("kvm", 0, "L4", mode="time_sliced", slots=(VgpuSlot("L4-8C", device="0000:01:00.4"),), vfs=32)
    with pytest.raises(ValueError, match="kept as L4-4C"):
        vgpu_actions(g0, "time_sliced", (VgpuSlot("L4-4C", device="0000:01:00.4"),))


def test_no_hypervisor_gpu_means_every_vm_is_left_out_with_a_reason() -> None:
    p = solve([], [vm("vm:a", 6000, "L4-8C")])
    assert [(v.status, bool(v.reason)) for v in p.vms] == [("unplaced", True)]


def test_a_held_gpu_stays_as_it_is_even_when_its_vms_could_pack_tighter() -> None:
    idle = VgpuSlot("L4-4C", device="0000:01:00.4")
    g0 = gpu("kvm", 0, "L4", mode="time_sliced", slots=(idle,), vfs=32)
    vms = [vm("vm:a", 7000, "L4-8C"), vm("vm:b", 7000, "L4-8C")]
    free = solve([g0], vms)
    assert [a.kind for a in free.gpus[0].actions].count("remove") == 1  # the idle 4C goes, GPU 0 takes the 8Cs
    assert {v.status for v in free.vms} == {"placed"}
    held = plan_vgpus([g0, gpu("kvm", 1, "L4")], vms, Policy(), PulpSolver(time_limit=30), VCAT, CAT,
                      held=frozenset({("kvm", 0)}))
    g = held.gpu("kvm", 0)
    assert g is not None and g.actions == () and g.slots == (idle,)
    assert {v.gpu for v in held.vms} == {1}
    alone = plan_vgpus([g0], vms, Policy(), PulpSolver(time_limit=30), VCAT, CAT, held=frozenset({("kvm", 0)}))
    assert {v.status for v in alone.vms} == {"unplaced"} and alone.gpus[0].actions == ()


def test_allow_disrupt_moves_a_running_vm_to_another_gpu_and_frees_its_old_vgpu() -> None:
    """GPU 0 runs two VMs on L4-4C in equal-size mode; one now needs 7,000 MiB. GPU 0 cannot hold an 8C beside the
    other 4C, so with --allow-disrupt that VM moves to GPU 1 as an L4-8C and its old vGPU is removed."""
    slots = (VgpuSlot("L4-4C", vm="vm:grow", running=True, device="0000:01:00.4"),
             VgpuSlot("L4-4C", vm="vm:stay", running=True, device="0000:01:00.5"))
    g0 = gpu("kvm", 0, "L4", mode="time_sliced", slots=slots, vfs=32)
    vms = [vm("vm:grow", 7000, "L4-4C", host="kvm", gpu=0), vm("vm:stay", 3000, "L4-4C", host="kvm", gpu=0)]
    p = solve([g0, gpu("kvm", 1, "L4")], vms, allow_disrupt=True)
    by = {v.name: v for v in p.vms}
    assert (by["vm:grow"].gpu, by["vm:grow"].vgpu_type, by["vm:grow"].moved) == (1, "L4-8C", True)
    assert (by["vm:stay"].gpu, by["vm:stay"].vgpu_type) == (0, "L4-4C")
    g = p.gpu("kvm", 0)
    assert g is not None and [a.device for a in g.actions if a.kind == "remove"] == ["0000:01:00.4"]
    assert oracle_problems(p) == []


def test_every_maximal_mixed_size_set_of_every_shipped_board_is_enumerated() -> None:
    from migplan.planner.vgpu_solve import MAX_MIXED_PATTERNS, _mixed_sets

    for board in VCAT:
        types = tuple(t for t in board.types_in("time_sliced_mixed") if t.max_mixed)
        if types:
            assert len(_mixed_sets(board, types)) < MAX_MIXED_PATTERNS, board.id
