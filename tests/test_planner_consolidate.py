"""Consolidation (--consolidate, --max-moves, movable: false), the ordered migration, and whole MIG-off GPUs.

The migration order is replayed against the nvidia-smi simulator's own placement rules (tests/sim, which
never imports migplan): at every step, every instance that exists must form a layout the simulator accepts,
a make-before-break workload must still run at its source when its target is created, and nothing may be
created on a GPU whose MIG mode is not yet the target's.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Sequence

import pytest
from hypothesis import given
from planner_fixtures import CAT, EXACT, fleet, gpu, placed, profiles, run, targets, wl
from sim import geometry as simgeo
from test_hostile_fuzz import FUZZ, check, mutated

from bench.consolidate import whole_gpu_fleet
from migplan.adapters.solver import PulpSolver
from migplan.catalog.layout import Layout
from migplan.errors import InputError
from migplan.model.gpu_plan import Endpoint, Migration
from migplan.planner import Plan, Policy, build_problem, plan_from_dict, plan_problem, plan_to_dict, validate
from migplan.planner.migration import GpuLayouts, Move, order

CONS = dataclasses.replace(EXACT, consolidate=True)
A80 = "A100-SXM4-80GB"


def _parse(text: str | None) -> tuple[str, int] | None:
    if text is None:
        return None
    name, _, start = text.partition("@")
    return name, int(start)


class _Replay:
    """The fleet while a migration runs, as the simulator's placement rules see it."""

    def __init__(self, gpus: dict[tuple[str, int], tuple[str, list[str] | None, list[str] | None]],
                 steps: Sequence[Migration], kept: dict[str, tuple[tuple[str, int], str | None]]) -> None:
        self.models = {k: simgeo.find_model(m) for k, (m, _, _) in gpus.items()}
        self.mig = {k: cur is not None for k, (_, cur, _) in gpus.items()}
        self.want = {k: {_parse(i) for i in (tgt or [])} for k, (_, _, tgt) in gpus.items()}
        self.runs = {name: (k, _parse(inst)) for name, (k, inst) in kept.items()}
        for m in steps:
            self.runs[m.workload] = (m.source.key, _parse(m.source.instance))
        sources = set(self.runs.values())
        self.exist = {k: {_parse(i) for i in (cur or []) if _parse(i) in self.want[k] or (k, _parse(i)) in sources}
                      for k, (_, cur, _) in gpus.items()}

    def leave(self, name: str) -> None:
        k, inst = self.runs.pop(name)
        if inst is not None and inst not in self.want[k]:
            self.exist[k].discard(inst)

    def arrive(self, m: Migration) -> None:
        assert m.target is not None
        k, inst = m.target.key, _parse(m.target.instance)
        others = [i for w, (g, i) in self.runs.items() if g == k and w != m.workload]
        if inst is None:
            assert not others and not (self.mig[k] and self.exist[k] - self.want[k]), f"step {m.step}: {k} not free"
            self.mig[k], self.exist[k] = False, set()
            return
        if not self.mig[k]:
            mine = m.workload in self.runs and self.runs[m.workload][0] == k
            assert not others and not mine, f"step {m.step}: MIG enabled on {k} under a running workload"
            self.mig[k], self.exist[k] = True, set()
        assert inst not in others, f"step {m.step}: {m.target} is in use"
        if inst not in self.exist[k]:
            bad = simgeo.conflicts(self.models[k], [*self.exist[k], inst])  # type: ignore[list-item]
            assert not bad, f"step {m.step}: creating {m.target} next to {sorted(self.exist[k])}: {bad}"
            self.exist[k].add(inst)

    def step(self, m: Migration) -> None:
        for s in m.stops:
            assert s in self.runs, f"step {m.step}: {s} is stopped but does not run"
            self.leave(s)
        if m.stop_first and m.workload in self.runs:
            self.leave(m.workload)
        if m.make_before_break:
            assert not m.stop_first and m.workload in self.runs, f"step {m.step}: make-before-break without a source"
        if m.target is not None:
            self.arrive(m)
        if m.workload in self.runs:
            self.leave(m.workload)  # make-before-break: it ran on both until now
        if m.target is not None:
            self.runs[m.workload] = (m.target.key, _parse(m.target.instance))


def replay(gpus: dict[tuple[str, int], tuple[str, list[str] | None, list[str] | None]],
           steps: Sequence[Migration], kept: dict[str, tuple[tuple[str, int], str | None]] | None = None) -> None:
    """Execute `steps` as migration.py's docstring says, checking each moment with the simulator's rules.
    `gpus`: key -> (model, current, target) as PROFILE@START lists (None: MIG disabled)."""
    r = _Replay(gpus, steps, kept or {})
    for m in steps:
        r.step(m)
    for m in steps:
        if m.target is not None:
            assert r.runs[m.workload] == (m.target.key, _parse(m.target.instance))
    for k in gpus:
        assert r.exist[k] <= r.want[k] or not r.mig[k]


def replay_plan(p: Plan) -> None:
    gpus = {g.key: (g.model, g.current.as_list() if g.current is not None else None,
                    g.target.as_list() if g.target is not None else None) for g in p.gpus}
    kept = {w.name: ((w.host or "", w.gpu or 0), w.instance) for w in p.workloads if w.kept}
    replay(gpus, p.migrations, kept)


def _small_whole_fleet(n: int = 4) -> tuple[object, object]:
    return (fleet(*(gpu("h", i) for i in range(n))),
            profiles(*(wl(f"w{i}", 3000, host="h", gpu_idx=i) for i in range(n))))


def test_consolidate_frees_gpus_and_orders_the_moves() -> None:
    st, ws = _small_whole_fleet()
    assert run(st, ws).summary.gpus_used == 4  # by default nothing running moves
    p = run(st, ws, CONS)
    assert p.summary.gpus_used == 1 and p.summary.workloads_placed == 4
    assert len(p.freed) == 3 and p.consolidation is not None
    assert p.consolidation.gpus_freed == 3 and p.consolidation.gpus_freeable == 3 and p.consolidation.moves == 4
    (host_gpu,) = {(h, g) for h, g, _ in placed(p).values()}
    assert host_gpu not in p.freed
    assert [m.step for m in p.migrations] == [1, 2, 3, 4]
    # the workload on the GPU that gets MIG enabled must stop first; the other three move make-before-break
    first = p.migrations[0]
    assert first.stop_first and first.source.key == host_gpu and first.target and first.target.key == host_gpu
    assert all(m.make_before_break for m in p.migrations[1:])
    replay_plan(p)
    assert validate(p, build_problem(st, ws, CAT, CONS)) == []


def test_the_curve_says_how_many_gpus_each_budget_frees() -> None:
    st, ws = _small_whole_fleet()
    c = run(st, ws, CONS).consolidation
    assert c is not None
    by_budget = {pt.max_moves: pt.gpus_freed for pt in c.curve}
    assert by_budget[0] == 0 and by_budget[None] == 3
    freed = [pt.gpus_freed for pt in c.curve]
    assert freed == sorted(freed) and all(pt.moves <= (pt.max_moves if pt.max_moves is not None else 99)
                                          for pt in c.curve)


def test_max_moves_bounds_the_moves() -> None:
    st, ws = _small_whole_fleet()
    p = run(st, ws, dataclasses.replace(CONS, max_moves=2))
    assert len(p.migrations) <= 2 and p.summary.gpus_used == 3 and len(p.freed) == 1
    assert p.consolidation is not None and p.consolidation.gpus_freeable == 3  # the bound: moves unlimited
    assert any(pt.max_moves is None and pt.gpus_freed == 3 for pt in p.consolidation.curve)
    replay_plan(p)
    p0 = run(st, ws, dataclasses.replace(CONS, max_moves=0))
    assert not p0.migrations and p0.summary.gpus_used == 4


def test_max_moves_needs_consolidate() -> None:
    with pytest.raises(InputError, match="consolidate"):
        Policy(max_moves=3)


def test_priority_decides_who_stays() -> None:
    # two half-used GPUs: one of the two workloads moves next to the other; the low-priority one moves
    st = fleet(gpu("h", 0, layout=["3g.20gb@4"]), gpu("h", 1, layout=["3g.20gb@4"]))
    for hi, lo in ((0, 1), (1, 0)):
        ws = profiles(wl("a", 15000, host="h", gpu_idx=hi, inst="3g.20gb@4", priority=10),
                      wl("b", 15000, host="h", gpu_idx=lo, inst="3g.20gb@4", priority=1))
        p = run(st, ws, CONS)
        assert p.summary.gpus_used == 1 and [m.workload for m in p.migrations] == ["b"]
        assert placed(p)["a"] == ("h", hi, "3g.20gb@4") and placed(p)["b"][:2] == ("h", hi)
        assert p.migrations[0].make_before_break and p.freed == (("h", lo),)
        replay_plan(p)


def test_movable_false_stays_put() -> None:
    st, _ = _small_whole_fleet()
    ws = profiles(*(wl(f"w{i}", 3000, host="h", gpu_idx=i, movable=i != 2) for i in range(4)))
    p = run(st, ws, CONS)
    assert placed(p)["w2"] == ("h", 2, None) and "w2" not in {m.workload for m in p.migrations}
    assert p.summary.gpus_used == 2 and len(p.freed) == 2  # the rest share one other GPU
    replay_plan(p)
    assert validate(p, build_problem(st, ws, CAT, CONS)) == []
    moved = dataclasses.replace(p, workloads=tuple(
        dataclasses.replace(w, kept=False, moved=True) if w.name == "w2" else w for w in p.workloads))
    assert any("movable: false" in m for m in validate(moved, build_problem(st, ws, CAT, CONS)))


def test_the_validator_counts_moves_against_the_budget() -> None:
    st, ws = _small_whole_fleet()
    p = run(st, ws, CONS)
    tight = dataclasses.replace(CONS, max_moves=1)
    assert any(m.startswith("moves:") for m in validate(p, build_problem(st, ws, CAT, tight)))


def test_a_swap_stops_the_lower_priority_workload_first() -> None:
    # a on GPU 0 and b on GPU 1 trade places (7g each): neither target can exist while the other runs
    m40 = CAT.get("A100-SXM4-40GB")
    lay = Layout.parse(["7g.40gb@0"])
    gpus = {("h", 0): GpuLayouts(m40, lay, lay), ("h", 1): GpuLayouts(m40, lay, lay)}
    moves = [Move("a", 10, Endpoint("h", 0, "7g.40gb@0"), Endpoint("h", 1, "7g.40gb@0")),
             Move("b", 1, Endpoint("h", 1, "7g.40gb@0"), Endpoint("h", 0, "7g.40gb@0"))]
    steps = order(gpus, moves)
    assert [(s.workload, s.stops, s.make_before_break, s.stop_first) for s in steps] == [
        ("a", ("b",), True, False), ("b", (), False, True)]
    replay({k: ("A100-SXM4-40GB", ["7g.40gb@0"], ["7g.40gb@0"]) for k in gpus}, steps)


def test_the_replay_catches_an_impossible_order() -> None:
    # the oracle itself: the swap done make-before-break with nobody stopped must fail
    gpus = {k: ("A100-SXM4-40GB", ["7g.40gb@0"], ["7g.40gb@0"]) for k in (("h", 0), ("h", 1))}
    bad = [Migration(1, "a", Endpoint("h", 0, "7g.40gb@0"), Endpoint("h", 1, "7g.40gb@0"), True, False),
           Migration(2, "b", Endpoint("h", 1, "7g.40gb@0"), Endpoint("h", 0, "7g.40gb@0"), True, False)]
    with pytest.raises(AssertionError, match="in use"):
        replay(gpus, bad)
    overlap = [Migration(1, "a", Endpoint("h", 0, "7g.40gb@0"), Endpoint("h", 0, "3g.20gb@4"), True, False)]
    with pytest.raises(AssertionError, match="creating"):
        replay({("h", 0): ("A100-SXM4-40GB", ["7g.40gb@0"], ["3g.20gb@4"])}, overlap)


def test_make_before_break_where_the_target_fits_next_to_the_source() -> None:
    # 3g.20gb@0 -> 3g.20gb@4 on the same GPU: both fit at once, so no stop
    m40 = CAT.get("A100-SXM4-40GB")
    gpus = {("h", 0): GpuLayouts(m40, Layout.parse(["3g.20gb@0"]), Layout.parse(["3g.20gb@4"]))}
    steps = order(gpus, [Move("a", 1, Endpoint("h", 0, "3g.20gb@0"), Endpoint("h", 0, "3g.20gb@4"))])
    assert steps[0].make_before_break and not steps[0].stops
    replay({("h", 0): ("A100-SXM4-40GB", ["3g.20gb@0"], ["3g.20gb@4"])}, steps)
    # 7g.40gb@0 -> 3g.20gb@4 cannot: the target overlaps the source, which must stop first
    gpus = {("h", 0): GpuLayouts(m40, Layout.parse(["7g.40gb@0"]), Layout.parse(["3g.20gb@4"]))}
    steps = order(gpus, [Move("a", 1, Endpoint("h", 0, "7g.40gb@0"), Endpoint("h", 0, "3g.20gb@4"))])
    assert steps[0].stop_first and not steps[0].make_before_break
    replay({("h", 0): ("A100-SXM4-40GB", ["7g.40gb@0"], ["3g.20gb@4"])}, steps)


def test_a_fleet_of_whole_gpus_consolidates_and_replays() -> None:
    state, ps = whole_gpu_fleet(32, seed=3)
    policy = Policy(consolidate=True)
    p = plan_problem(build_problem(state, ps, CAT, policy), PulpSolver(time_limit=30, gap_abs=99), curve=False)
    c = p.consolidation
    assert c is not None and c.gpus_freed > 0 and c.gpus_freed == len(p.freed)
    assert c.gpus_freeable is not None and c.gpus_freed <= c.gpus_freeable
    assert len(p.migrations) == sum(1 for w in p.workloads if w.moved)
    replay_plan(p)
    again = plan_from_dict(json.loads(json.dumps(plan_to_dict(p))), CAT)
    assert again == p


# --- the plan document ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def doc() -> dict[str, object]:
    st, ws = _small_whole_fleet()
    return plan_to_dict(run(st, ws, CONS))


def test_round_trip_keeps_the_migration(doc) -> None:  # type: ignore[no-untyped-def]
    p = plan_from_dict(copy.deepcopy(doc), CAT)
    assert len(p.migrations) == 4 and len(p.freed) == 3 and p.consolidation is not None
    assert plan_to_dict(p) == doc


@pytest.mark.parametrize(("mutate", "words"), [
    (lambda d: d["migrations"].reverse(), "executable order"),
    (lambda d: d["migrations"].pop(), "without a migration step"),
    (lambda d: d["migrations"][1].update(make_before_break=False, stop_first=True), "executable order"),
    (lambda d: d["migrations"][1]["target"].update(instance="1g.5gb@6"), "must be where the plan places"),
    (lambda d: d["migrations"][1]["source"].update(gpu=7), "not a GPU of this plan"),
    (lambda d: d["migrations"][1].update(stops=["w0"]), "executable order"),
    (lambda d: d["migrations"][1].update(surprise=1), "surprise"),
    (lambda d: d["freed_gpus"].pop(), "freed"),
    (lambda d: d["consolidation"].update(gpus_freed=4), "gpus_freed"),
    (lambda d: d.update(consolidation=None), "consolidation"),
    (lambda d: d.pop("migrations"), "migrations"),
])
def test_a_damaged_migration_is_refused(doc, mutate, words) -> None:  # type: ignore[no-untyped-def]
    d = copy.deepcopy(doc)
    mutate(d)
    with pytest.raises(InputError, match=words):
        plan_from_dict(d, CAT)


def test_a_version_3_plan_is_still_read(doc) -> None:  # type: ignore[no-untyped-def]
    st = fleet(gpu("h", 0))
    d = plan_to_dict(run(st, profiles(wl("a", 3000))))
    for key in ("migrations", "freed_gpus", "consolidation"):
        d.pop(key)
    d["version"] = 3
    p = plan_from_dict(d, CAT)
    assert p.version == 3 and p.migrations == () and plan_to_dict(p) == d
    d["migrations"] = []
    with pytest.raises(InputError, match="not part of a version 3 plan"):
        plan_from_dict(d, CAT)


# --- whole GPUs -------------------------------------------------------------------------------------------

def test_min_profile_whole_gets_a_mig_disabled_gpu() -> None:
    # small, but it asks for a whole GPU: never an instance, even where one would fit
    st = fleet(gpu("h", 0, layout=["1g.5gb@0"]), gpu("h", 1))
    ws = profiles(wl("tiny", 1000, host="h", gpu_idx=0, inst="1g.5gb@0"), wl("prof", 1000, min_profile="whole"))
    p = run(st, ws)
    assert placed(p)["prof"] == ("h", 1, None) and targets(p)[("h", 1)] is None
    bad = dataclasses.replace(p, workloads=tuple(
        dataclasses.replace(w, host="h", gpu=0, instance="1g.5gb@1") if w.name == "prof" else w
        for w in p.workloads))
    assert any("whole" in m for m in validate(bad, build_problem(st, ws, CAT, EXACT)))


def test_min_profile_whole_on_a_mig_enabled_gpu_disables_mig() -> None:
    p = run(fleet(gpu("h", 0, layout=["1g.5gb@0", "1g.5gb@1"])), profiles(wl("prof", 1000, min_profile="whole")))
    assert placed(p)["prof"] == ("h", 0, None)
    assert [str(a) for a in p.gpus[0].actions][-1] == "disable-mig +reset"


def test_min_profile_whole_left_out_where_every_gpu_keeps_instances() -> None:
    st = fleet(gpu("h", 0, layout=["1g.5gb@0"]))
    ws = profiles(wl("run", 1000, host="h", gpu_idx=0, inst="1g.5gb@0"), wl("prof", 1000, min_profile="whole"))
    p = run(st, ws)
    assert {w.name: w.status for w in p.workloads} == {"run": "placed", "prof": "unplaced"}


def test_small_workloads_still_share_a_gpu_under_mig() -> None:
    # the whole GPU is offered only to workloads that need the full profile (or ask for it)
    p = run(fleet(gpu("h", 0), gpu("h", 1)), profiles(wl("a", 3000), wl("b", 3000)))
    assert p.summary.gpus_used == 1 and all(i is not None for _, _, i in placed(p).values())


def test_whole_gpu_validator_refuses_a_small_workload_moved_onto_a_whole_gpu() -> None:
    st = fleet(gpu("h", 0), gpu("h", 1))
    ws = profiles(wl("a", 3000))
    p = run(st, ws)
    other = 1 - (placed(p)["a"][1] or 0)
    bad = dataclasses.replace(
        p, workloads=tuple(dataclasses.replace(w, gpu=other, instance=None) for w in p.workloads))
    assert any("whole" in m for m in validate(bad, build_problem(st, ws, CAT, EXACT)))


def test_consolidating_a100_80gb_whole_gpus_uses_mig_for_small_and_whole_for_large() -> None:
    # three 10 GiB workloads and one 60 GiB one, each alone on a MIG-off A100-80GB
    st = fleet(*(gpu("h", i, model=A80) for i in range(4)))
    ws = profiles(*(wl(f"s{i}", 10000, host="h", gpu_idx=i, model=A80) for i in range(3)),
                  wl("big", 60000, host="h", gpu_idx=3, model=A80))
    p = run(st, ws, CONS)
    assert placed(p)["big"] == ("h", 3, None)  # the big one keeps its whole GPU
    assert p.summary.gpus_used == 2 and len(p.freed) == 2
    replay_plan(p)


def test_an_outgrown_unmovable_workload_keeps_running_and_is_no_move() -> None:
    st = fleet(gpu("h", 0, layout=["1g.5gb@0"]), gpu("h", 1))
    ws = profiles(wl("grew", 9000, host="h", gpu_idx=0, inst="1g.5gb@0", movable=False))
    p = run(st, ws, CONS)
    w = p.workloads[0]
    assert w.status == "unplaced" and "movable: false" in (w.reason or "")
    assert targets(p)[("h", 0)] == ["1g.5gb@0"] and not p.migrations and p.summary.workloads_disrupted == 0
    moving = run(st, profiles(wl("grew", 9000, host="h", gpu_idx=0, inst="1g.5gb@0")), CONS)
    assert [m.reason.split(":")[0] for m in moving.migrations] == ["outgrown"]
    replay_plan(moving)


def _consolidation_text() -> str:
    from migplan.documents import dump

    st, ws = _small_whole_fleet(3)
    return dump(plan_to_dict(run(st, ws, dataclasses.replace(CONS, max_moves=3))), "yaml")


CONSOLIDATION_PLAN = _consolidation_text()


def _load(f: object) -> object:
    from migplan.documents import load_plan

    return load_plan(f, CAT)  # type: ignore[arg-type]


@FUZZ
@given(mutated(CONSOLIDATION_PLAN))
def test_fuzz_a_plan_with_migrations(text: str) -> None:
    # migrations, freed GPUs and the consolidation record: a damaged file loads or fails with an InputError
    check(_load, text, "consolidation-plan.yaml")


def test_a_whole_gpu_workload_makes_way_for_one_that_needs_the_whole_gpu() -> None:
    # GPU 0 (MIG off) runs a small workload on the whole GPU; a new one needs the full GPU and GPU 1 keeps an
    # immovable instance: the small one moves to GPU 1 and the big one gets GPU 0 with MIG still off
    st = fleet(gpu("h", 0), gpu("h", 1, layout=["1g.5gb@0"]))
    ws = profiles(wl("s", 3000, host="h", gpu_idx=0), wl("t", 3000, host="h", gpu_idx=1, inst="1g.5gb@0",
                                                          movable=False), wl("big", 30000))
    p = run(st, ws, CONS)
    assert placed(p)["big"] == ("h", 0, None) and targets(p)[("h", 0)] is None and not p.gpus[0].actions
    assert placed(p)["s"][:2] == ("h", 1) and placed(p)["t"] == ("h", 1, "1g.5gb@0")
    assert [(m.workload, m.make_before_break) for m in p.migrations] == [("s", True)]
    replay_plan(p)


def test_a_busy_whole_gpu_whose_processes_are_its_profiled_workload_can_be_freed() -> None:
    """Discovery marks a MIG-off GPU with processes as busy; when a profiled workload runs there, those processes
    are its own: consolidating moves it (one move), and the GPU is freed, not kept for fear of stopping them."""
    gpus = [gpu("h", i, whole_gpu_busy=True) for i in range(3)]
    ws = [wl(f"w{i}", 4000 + 1000 * i, host="h", gpu_idx=i) for i in range(3)]
    policy = dataclasses.replace(EXACT, allow_disrupt=True, consolidate=True)
    p = run(fleet(*gpus), profiles(*ws), policy)
    assert p.summary.gpus_used == 1 and p.summary.busy_disrupted == 0, p.summary
    assert len(p.migrations) >= 2 and all(m.workload.startswith("w") for m in p.migrations)
    # without a profiled workload on it, a busy whole GPU stays as it is unless the disruption is worth it
    lone = run(fleet(gpu("h", 0, whole_gpu_busy=True), gpu("h", 1)), profiles(wl("x", 4000)), policy)
    assert targets(lone)[("h", 0)] is None, targets(lone)
