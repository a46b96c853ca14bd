"""diff(current, target): only what changes, in a safe order; to_commands: those actions as nvidia-smi commands."""

from __future__ import annotations

import pytest

from migplan.catalog import GpuModel, builtin_catalog
from migplan.catalog.layout import Instance, Layout
from migplan.fleet.steps import StepError, to_commands
from migplan.model.diff import Action, Op, diff, keep_mode

L = Layout.parse


@pytest.mark.parametrize(("current", "target", "expect"), [
    (L(["3g.20gb@0"]), L(["3g.20gb@0"]), []),
    (None, None, []),
    (None, L(["7g.40gb@0"]), ["enable-mig", "create-gi 7g.40gb@0", "create-ci 7g.40gb@0"]),
    (L(["7g.40gb@0"]), None, ["destroy-ci 7g.40gb@0", "destroy-gi 7g.40gb@0", "disable-mig"]),
    (L(["3g.20gb@0", "3g.20gb@4"]), L(["3g.20gb@0", "2g.10gb@4", "1g.5gb@6"]),
     ["destroy-ci 3g.20gb@4", "destroy-gi 3g.20gb@4", "create-gi 2g.10gb@4", "create-ci 2g.10gb@4",
      "create-gi 1g.5gb@6", "create-ci 1g.5gb@6"]),
    (L(["1g.5gb@0", "1g.5gb@1"]), L([]),
     ["destroy-ci 1g.5gb@1", "destroy-gi 1g.5gb@1", "destroy-ci 1g.5gb@0", "destroy-gi 1g.5gb@0"]),
])
def test_diff(current, target, expect) -> None:
    assert [str(a) for a in diff(current, target)] == expect


def test_action_str() -> None:
    assert str(Action(Op.ENABLE_MIG)) == "enable-mig"


# --- a GPU's actions as its nvidia-smi commands (fleet.steps.to_commands, the one builder of MIG changes) -----

A100 = builtin_catalog().get("A100-SXM4-40GB")
H100 = builtin_catalog().get("H100-SXM5-80GB")


def _cmds(gpu: int, model: GpuModel, actions: list[Action], ids: dict[Instance, int]) -> list[tuple[str, str]]:
    return [(s.kind, str(s)) for s in to_commands(gpu, model, actions, ids)]


def test_destroys_are_one_dci_and_one_dgi_by_live_ids_and_creates_one_cgi_with_its_cis() -> None:
    current, target = L(["3g.20gb@0", "3g.20gb@4"]), L(["7g.40gb@0"])
    ids = {Instance(0, "3g.20gb"): 1, Instance(4, "3g.20gb"): 2}
    assert _cmds(2, A100, diff(current, target, architecture="ampere"), ids) == [
        ("destroy-ci", "nvidia-smi mig -i 2 -dci -gi 2,1"), ("destroy-gi", "nvidia-smi mig -i 2 -dgi -gi 2,1"),
        ("create-gi", "nvidia-smi mig -i 2 -cgi 0:0 -C")]


def test_enabling_mig_on_ampere_resets_that_one_gpu_before_creating() -> None:
    actions = diff(None, L(["3g.20gb@0", "3g.20gb@4"]), architecture="ampere")
    assert _cmds(3, A100, actions, {}) == [
        ("set-mig-mode", "nvidia-smi -i 3 -mig 1"), ("reset-gpu", "nvidia-smi -r -i 3"),
        ("create-gi", "nvidia-smi mig -i 3 -cgi 9:0,9:4 -C")]


def test_disabling_mig_on_hopper_needs_no_reset() -> None:
    actions = diff(L(["7g.80gb@0"]), None, architecture="hopper")
    assert _cmds(0, H100, actions, {Instance(0, "7g.80gb"): 0}) == [
        ("destroy-ci", "nvidia-smi mig -i 0 -dci -gi 0"), ("destroy-gi", "nvidia-smi mig -i 0 -dgi -gi 0"),
        ("set-mig-mode", "nvidia-smi -i 0 -mig 0")]


def test_a_destroy_gi_without_its_destroy_ci_is_a_dgi_alone_in_the_actions_order() -> None:
    """The repair's GPU instances whose compute instance is already gone."""
    bare = [Instance(0, "3g.20gb"), Instance(4, "3g.20gb")]
    actions = [Action(Op.DESTROY_GI, ("h", 1), i) for i in bare]
    assert _cmds(1, A100, actions, {bare[0]: 5, bare[1]: 7}) == [("destroy-gi", "nvidia-smi mig -i 1 -dgi -gi 5,7")]


def test_keep_mode_clears_a_pending_change_without_a_reset() -> None:
    assert _cmds(4, A100, [keep_mode(True)], {}) == [("set-mig-mode", "nvidia-smi -i 4 -mig 1")]
    assert _cmds(4, A100, [keep_mode(False)], {}) == [("set-mig-mode", "nvidia-smi -i 4 -mig 0")]


def test_actions_that_cannot_be_commands_are_refused() -> None:
    gone = diff(L(["3g.20gb@0"]), L([]))
    with pytest.raises(StepError, match="no live GPU instance id for 3g.20gb@0"):
        to_commands(0, A100, gone, {})
    with pytest.raises(StepError, match="default compute instance"):
        to_commands(0, A100, [Action(Op.CREATE_GI, ("h", 0), Instance(0, "7g.40gb"))], {})
    with pytest.raises(StepError, match="more than one MIG mode change"):
        to_commands(0, A100, [keep_mode(True), keep_mode(False)], {})
    assert to_commands(0, A100, [], {}) == []
