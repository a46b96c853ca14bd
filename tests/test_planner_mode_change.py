"""Prefer no reset (issue 20, part B): of equally good GPUs, the planner takes one whose MIG mode need not
change, then one whose mode changes without a GPU reset.

A MIG mode change on Ampere needs a GPU reset, which the driver refuses while a client such as
nvidia-persistenced holds the GPU; Hopper and later change the mode without one (MIG User Guide, "Getting
Started with MIG"; docs/nvidia-smi.md §1). The objective charges `weights.mode` per GPU whose mode changes and
`weights.reset` more when that needs a reset (docs/model.md §7).
"""

from __future__ import annotations

import dataclasses

import pytest
from planner_fixtures import EXACT, fleet, gpu, placed, profiles, run, wl

from migplan.planner import Plan, Weights

A100_80 = "A100-SXM4-80GB"
H100 = "H100-SXM5-80GB"


def _actions(p: Plan) -> dict[tuple[str, int], list[str]]:
    return {(g.host, g.index): [str(a) for a in g.actions] for g in p.gpus if g.actions}


@pytest.mark.parametrize("off_first", [True, False])
def test_an_empty_mig_enabled_gpu_is_taken_before_enabling_mig_on_another(off_first: bool) -> None:
    """The issue's host: a MIG-off A100 and an empty MIG-on A100; one 3g workload goes to the MIG-on one."""
    off, on = (0, 1) if off_first else (1, 0)
    st = fleet(*sorted((gpu("h", off), gpu("h", on, layout=[])), key=lambda g: g.index))
    p = run(st, profiles(wl("w", 15000, 0.4)))
    host, index, inst = placed(p)["w"]
    assert (host, index) == ("h", on) and inst is not None and inst.startswith("3g.20gb@")
    acts = _actions(p)
    assert list(acts) == [("h", on)] and not any("mig" in a for a in acts[("h", on)])
    assert p.summary.gpus_used == 1 and p.summary.gpus_changed == 1


@pytest.mark.parametrize("hopper_first", [True, False])
def test_of_two_mig_off_gpus_the_one_that_needs_no_reset_is_enabled(hopper_first: bool) -> None:
    """A100-80GB and H100-80GB give a 30 GB workload the same 3g.40gb (same slices, so the same waste); enabling
    MIG resets the A100 only, so the H100 is chosen."""
    h100, a100 = (0, 1) if hopper_first else (1, 0)
    st = fleet(*sorted((gpu("h", h100, model=H100), gpu("h", a100, model=A100_80)), key=lambda g: g.index))
    p = run(st, profiles(wl("w", 30000)))
    assert placed(p)["w"][:2] == ("h", h100) and (placed(p)["w"][2] or "").startswith("3g.40gb@")
    assert _actions(p)[("h", h100)][0] == "enable-mig"  # no "+reset": Hopper (docs/nvidia-smi.md §1)
    assert ("h", a100) not in _actions(p)


def _objective(p: Plan) -> float:
    assert p.solve.objective is not None
    return p.solve.objective


def test_the_objective_charges_exactly_the_mode_and_reset_weights() -> None:
    w = Weights()
    one = profiles(wl("w", 15000, 0.4))
    on = run(fleet(gpu("h", 0, layout=[])), one)
    off = run(fleet(gpu("h", 0)), one)
    assert _actions(off)[("h", 0)][0] == "enable-mig +reset"
    assert _objective(off) - _objective(on) == pytest.approx(w.mode + w.reset)
    big = profiles(wl("w", 30000))
    hopper = run(fleet(gpu("h", 0, model=H100)), big)
    ampere = run(fleet(gpu("h", 0, model=A100_80)), big)
    assert _objective(ampere) - _objective(hopper) == pytest.approx(w.reset)
    # with both weights 0 the tie is back: the MIG-off GPU costs what the MIG-on one does
    flat = dataclasses.replace(EXACT, weights=dataclasses.replace(w, mode=0.0, reset=0.0))
    assert _objective(run(fleet(gpu("h", 0)), one, flat)) == pytest.approx(_objective(run(fleet(gpu("h", 0, layout=[])),
                                                                                          one, flat)))


def test_a_mode_change_is_still_made_where_it_saves_a_gpu() -> None:
    """Below a GPU: two 3-slice workloads need the two empty MIG-on A30s (4g.24gb each, MIG mode kept) or one
    MIG-off A100 (3g.20gb twice, MIG enabled with a reset): one GPU is worth more than a reset."""
    st = fleet(gpu("h", 0, model="A30", layout=[]), gpu("h", 1, model="A30", layout=[]), gpu("h", 2))
    p = run(st, profiles(wl("a", 15000, 0.4), wl("b", 15000, 0.4)))
    assert {placed(p)[n][:2] for n in ("a", "b")} == {("h", 2)} and p.summary.gpus_used == 1
    assert _actions(p)[("h", 2)][0] == "enable-mig +reset"


def test_the_mode_weights_sit_between_an_instance_and_a_move() -> None:
    """The documented order of the defaults (docs/model.md §7): an instance < a mode change (+ reset) < the least a
    running workload's move costs when consolidating (a twentieth of a GPU) < a GPU."""
    from migplan.planner.demand import MOVE_SHARE_OF_GPU

    w = Weights()
    assert w.fragment < w.mode < w.mode + w.reset < MOVE_SHARE_OF_GPU * w.gpu < w.gpu < w.disrupt
    assert w.change < w.change + w.mode  # a GPU whose mode changes costs more than one whose instances change
