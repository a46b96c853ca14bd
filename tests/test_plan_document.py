"""The plan document: round trip, strict loading, and the validator catching corrupted plans."""

from __future__ import annotations

import copy
import dataclasses
import json

import pytest
from planner_fixtures import CAT, EXACT, fleet, gpu, profiles, run, wl

from migplan.catalog.layout import Instance, Layout
from migplan.errors import InputError
from migplan.model.diff import Action, Op
from migplan.planner import PLAN_VERSION, build_problem, plan_from_dict, plan_to_dict, validate


@pytest.fixture(scope="module")
def case():
    st = fleet(gpu("h", 0, layout=["3g.20gb@0"]), gpu("h", 1), gpu("h", 2, reserved=True))
    ps = profiles(wl("a", 15000, host="h", gpu_idx=0, inst="3g.20gb@0"), wl("b", 4000), wl("c", 9000),
                  wl("d", 4000, anti_affinity="x"), wl("e", 4000, anti_affinity="x"))
    return st, ps, run(st, ps), build_problem(st, ps, CAT, EXACT)


def test_round_trip(case) -> None:
    _, _, p, prob = case
    doc = json.loads(json.dumps(plan_to_dict(p)))
    back = plan_from_dict(doc, CAT)
    assert back == p and validate(back, prob) == []
    assert doc["version"] == PLAN_VERSION and doc["fingerprint"].startswith("sha256:")


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda d: d.update(version=PLAN_VERSION + 1), "version"),
    (lambda d: d.update(extra=1), "extra"),
    (lambda d: d.pop("gpus"), "gpus"),
    (lambda d: d["gpus"][0].update(target=["9g.1gb@0"]), None),
    (lambda d: d["gpus"][0].update(actions=["explode"]), "explode"),
    (lambda d: d["workloads"][0].update(bogus=True), "bogus"),
])
def test_strict_loader(case, mutate, field) -> None:
    doc = copy.deepcopy(plan_to_dict(case[2]))
    mutate(doc)
    try:
        plan_from_dict(doc, CAT)
    except InputError as err:
        assert field is None or field in str(err)
        return
    assert field is None  # an unknown profile parses; the validator catches it (below)


def test_a_gpu_entry_removed_or_copied_in_is_refused_by_the_plans_fingerprint(case) -> None:
    """Each GPU's entry matches its own fingerprint; the plan's top-level one covers the set of GPUs, so a GPU
    dropped from the plan, or one pasted in from another plan, is refused (not silently left or applied)."""
    doc = plan_to_dict(case[2])
    assert plan_from_dict(copy.deepcopy(doc), CAT) == case[2]
    dropped = copy.deepcopy(doc)
    dropped["gpus"] = [g for g in dropped["gpus"] if (g["host"], g["index"]) != ("h", 1)]
    pasted = copy.deepcopy(doc)  # a GPU entry of another plan: right in itself, its own fingerprint matches
    other = plan_to_dict(run(fleet(gpu("other", 0)), profiles(wl("z", 4000))))
    pasted["gpus"].append(copy.deepcopy(other["gpus"][0]))
    for bad in (dropped, pasted):
        with pytest.raises(InputError, match="fingerprint: does not match the plan's GPUs"):
            plan_from_dict(bad, CAT)


@pytest.mark.parametrize("weight", ["NaN", ".nan", "inf", True, "1e3", -1, 1e13])
def test_a_weight_that_is_not_a_finite_number_in_range_is_refused(case, weight) -> None:
    doc = copy.deepcopy(plan_to_dict(case[2]))
    doc["policy"]["weights"]["gpu"] = weight
    with pytest.raises(InputError, match=r"planner\.weights\.gpu must be a number from 0"):
        plan_from_dict(doc, CAT)


def _corrupt_gpu(p, host, idx, **changes):
    gpus = tuple(dataclasses.replace(g, **changes) if (g.host, g.index) == (host, idx) else g for g in p.gpus)
    return dataclasses.replace(p, gpus=gpus)


@pytest.mark.parametrize("corrupt", [
    lambda p: _corrupt_gpu(p, "h", 1, target=Layout.parse(["3g.20gb@0", "4g.20gb@0"])),  # overlap
    lambda p: _corrupt_gpu(p, "h", 2, target=Layout(),  # reserved touched
                           actions=(Action(Op.ENABLE_MIG, ("h", 2), reset=True),)),
    lambda p: _corrupt_gpu(p, "h", 0, target=Layout(), actions=(
        Action(Op.DESTROY_CI, ("h", 0), Instance.parse("3g.20gb@0")),
        Action(Op.DESTROY_GI, ("h", 0), Instance.parse("3g.20gb@0")))),  # busy destroyed
    lambda p: dataclasses.replace(p, workloads=p.workloads[1:]),  # a workload lost
    lambda p: dataclasses.replace(p, fingerprint="sha256:0"),
    lambda p: dataclasses.replace(p, workloads=tuple(
        dataclasses.replace(w, instance="1g.5gb@6") if w.name == "c" else w for w in p.workloads)),  # absent
    lambda p: dataclasses.replace(p, workloads=tuple(
        dataclasses.replace(w, host=x.host, gpu=x.gpu, instance=x.instance) if w.name == "e" else w
        for w in p.workloads for x in p.workloads if x.name == "d")),  # anti-affinity + shared instance
])
def test_validator_catches_corruption(case, corrupt) -> None:
    _, _, p, prob = case
    assert validate(p, prob) == []
    assert validate(corrupt(p), prob) != []
