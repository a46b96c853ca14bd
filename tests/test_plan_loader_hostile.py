"""A plan file is untrusted input: every hostile or damaged field is refused with its key and line."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from planner_fixtures import CAT, fleet, gpu, profiles, run, wl

from migplan import yamljson
from migplan.documents import load_plan, write_plan
from migplan.errors import InputError
from migplan.planner import plan_from_dict, plan_to_dict


@pytest.fixture(scope="module")
def doc() -> dict:
    st = fleet(gpu("h", 0, layout=["3g.20gb@0"]), gpu("h", 1), gpu("h", 2, reserved=True))
    ps = profiles(wl("a", 15000, host="h", gpu_idx=0, inst="3g.20gb@0"), wl("b", 4000), wl("c", 9000))
    return plan_to_dict(run(st, ps))


def _changed_gpu(d: dict) -> dict:
    return next(g for g in d["gpus"] if g["actions"])


HOSTILE = {
    "action with a shell tail": (lambda d: _changed_gpu(d)["actions"].__setitem__(0, "create-gi 3g.20gb@0; reboot"),
                                 "actions"),
    "extra action": (lambda d: _changed_gpu(d)["actions"].append("disable-mig"), "actions"),
    "no actions for a change": (lambda d: _changed_gpu(d).update(actions=[]), "actions"),
    "host is a command": (lambda d: d["gpus"][0].update(host="$(reboot)"), "gpus[0].host"),
    "host with a newline": (lambda d: d["gpus"][0].update(host="h\n"), "gpus[0].host"),
    "duplicate target instance": (lambda d: _changed_gpu(d).update(target=["1g.5gb@6", "1g.5gb@6"]), "target"),
    "status exploded": (lambda d: d["workloads"][0].update(status="exploded"), "status"),
    "solve status exploded": (lambda d: d["solve"].update(status="exploded"), "solve.status"),
    "gpus_used many": (lambda d: d["summary"].update(gpus_used="many"), "summary.gpus_used"),
    "negative count": (lambda d: d["summary"].update(gpus_used=-1), "summary.gpus_used"),
    "fingerprint any string": (lambda d: d.update(fingerprint="sha256:whatever"), "fingerprint"),
    "gpu fingerprint edited": (lambda d: d["gpus"][0].update(fingerprint="sha256:" + "0" * 64), "fingerprint"),
    "current layout edited": (lambda d: d["gpus"][0].update(current=["7g.40gb@0"]), "gpus[0]"),
    "busy instance not in layout": (lambda d: d["gpus"][0].update(busy=["1g.5gb@6"]), "busy"),
    "unknown model": (lambda d: d["gpus"][0].update(model="Z100"), "model"),
    "gpu index out of range": (lambda d: d["gpus"][0].update(index=10**20), "index"),
    "gpu listed twice": (lambda d: d["gpus"].append(copy.deepcopy(d["gpus"][0])), "listed twice"),
    "workload listed twice": (lambda d: d["workloads"].append(copy.deepcopy(d["workloads"][0])), "listed twice"),
    "placed on an unknown gpu": (lambda d: d["workloads"][0].update(host="nowhere"), "workloads[0]"),
    "two workloads on one instance": (lambda d: [w.update(host="h", gpu=0, instance="3g.20gb@0", status="placed")
                                                 for w in d["workloads"]], "both placed"),
    "nan objective": (lambda d: d["solve"].update(objective=float("nan")), "solve.objective"),
    "hold invented": (lambda d: d["gpus"][0].update(hold="frozen-forever"), "hold"),
    "policy with a bad value": (lambda d: d["policy"].update(memory_percentile="p42"), "policy"),
    "wrong kind": (lambda d: d.update(kind="migplan/snapshot"), "kind"),
    "instance not PROFILE@START": (lambda d: next(w for w in d["workloads"] if w["instance"]).update(
        instance=".nan"), "instance"),
    "busy not PROFILE@START": (lambda d: d["gpus"][0].update(busy=["3g.20gb@x"]), "busy[0]"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_plan_is_refused(doc: dict, case: str) -> None:
    mutate, where = HOSTILE[case]
    bad = copy.deepcopy(doc)
    mutate(bad)
    with pytest.raises(InputError) as err:
        plan_from_dict(bad, CAT, source="plan.json")
    assert where in str(err.value) and "plan.json" in str(err.value)


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_plan_file_is_refused_alike_by_the_json_path(doc: dict, case: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """load_plan reads a JSON plan with json.loads (migplan.yamljson): the same refusal, key and line as
    the YAML reader's."""
    mutate, where = HOSTILE[case]
    bad = copy.deepcopy(doc)
    mutate(bad)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(bad, indent=2) + "\n")
    errors = []
    for use_json in (True, False):
        monkeypatch.setattr(yamljson, "USE_JSON", use_json)
        with pytest.raises(InputError) as err:
            load_plan(path, CAT)
        errors.append((err.value.message, err.value.line, err.value.key, err.value.hint))
    assert errors[0] == errors[1] and where in str(err.value)


def test_actions_are_derived_not_trusted(doc: dict) -> None:
    plan = plan_from_dict(copy.deepcopy(doc), CAT)
    changed = next(g for g in plan.gpus if g.actions)
    listed = next(g for g in doc["gpus"] if g["actions"])["actions"]
    assert [str(a) for a in changed.actions] == listed
    assert all(a.gpu == changed.key for a in changed.actions)


def test_plan_file_round_trip_json_and_yaml(doc: dict, tmp_path: Path) -> None:
    plan = plan_from_dict(copy.deepcopy(doc), CAT)
    for name in ("plan.json", "plan.yaml"):
        path = tmp_path / name
        write_plan(path, plan)
        assert load_plan(path, CAT) == plan
    assert json.loads((tmp_path / "plan.json").read_text())["kind"] == "migplan/plan"


def test_plan_refuses_to_overwrite_an_input(doc: dict, tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("version: 1\nhosts: {}\n")
    with pytest.raises(InputError, match="refusing to write"):
        write_plan(inventory, plan_from_dict(copy.deepcopy(doc), CAT), forbid=[inventory])
    assert inventory.read_text() == "version: 1\nhosts: {}\n"
