"""Plans a Kubernetes cluster can use: each node's `nvidia.com/mig.strategy` (NVIDIA/k8s-device-plugin @1b826ac
`internal/lm/mig-strategy.go`, `internal/rm/rm.go`; reference/ecosystem.md §2.3) becomes generic rules the planner
enforces (inventory/k8s_nodes.py: a GPU's `allowed`; pods.py: a workload's `eligible`), checked again by the
validator and by the plan reader. Fixtures: tests/data/k8s/nodes.json, mixed-nodes.json and pods.json; plans by
the real CBC.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from migplan.catalog import builtin_catalog
from migplan.cli.app import app
from migplan.commands.pods import strategies
from migplan.documents import load_plan
from migplan.errors import InputError
from migplan.inventory import load_inventory
from migplan.inventory.k8s_nodes import WHOLE
from migplan.model.diff import diff
from migplan.model.state import state_from_inventory
from migplan.planner import plan_from_dict
from migplan.pods import pod_demand, read_pods
from migplan.profiles import ANY_MIG, WHOLE_GPU, ProfileSet

CAT = builtin_catalog()
DATA = Path(__file__).resolve().parent / "data" / "k8s"
NODES = DATA / "nodes.json"
MIXED = DATA / "mixed-nodes.json"
PODS = DATA / "pods.json"


def _doc(path: Path = NODES) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(path.read_text())
    return doc


def _node(doc: dict[str, Any], name: str) -> dict[str, Any]:
    node: dict[str, Any] = next(i for i in doc["items"] if i["metadata"]["name"] == name)
    return node


def _write(tmp_path: Path, doc: dict[str, Any], name: str = "nodes.json") -> Path:
    f = tmp_path / name
    f.write_text(json.dumps(doc, indent=1))
    return f


def _pending(name: str, resource: str, count: int = 1) -> dict[str, Any]:
    """A pending pod without a node, as kubectl lists it, asking for `count` x `resource`."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ml"},
            "spec": {"containers": [{"name": "main", "resources": {"limits": {resource: str(count)}}}]},
            "status": {"phase": "Pending"}}


def _propose(nodes: Path, pods: Path, *args: str) -> tuple[dict[str, Any], str]:
    r = CliRunner().invoke(app, ["propose", "-i", str(nodes), "--pods", str(pods), *args, "-o", "json"])
    assert r.exit_code == 0, r.output
    assert "Traceback" not in r.output
    return json.loads(r.stdout), r.stderr


def _single_ok(plan: dict[str, Any], node: str, profile: str) -> None:
    """Every GPU of a single-strategy node: MIG on, at least one instance, each of the node's profile."""
    gpus = [g for g in plan["gpus"] if g["host"] == node]
    assert gpus
    for g in gpus:
        assert g["target"] and {i.split("@")[0] for i in g["target"]} == {profile}, g
        assert g["allowed"] == [profile]


# -- the node reader: strategies as rules -------------------------------------------------------------------------

def test_each_strategy_becomes_a_rule_for_the_gpus_of_its_node() -> None:
    inv = load_inventory(NODES, CAT)
    rules = {(h.name, g.index): g.allowed for h in inv.hosts for g in h.gpus}
    assert rules[("h100-single", 0)] == rules[("h100-single", 1)] == ("1g.10gb",)  # single: its one profile
    assert all(rules[("a100-mixed", i)] is None for i in range(4))  # mixed: every profile advertised
    state = state_from_inventory(inv, CAT)
    g = state.gpu("h100-single", 0)
    assert g is not None and g.allowed == ("1g.10gb",) and g.identity()["allowed"] == ["1g.10gb"]
    assert "allowed" not in (state.gpu("a100-mixed", 0) or g).identity()  # no rule: its fingerprint as before
    assert WHOLE == WHOLE_GPU  # the inventory's name for MIG off is the planner's


def test_a_none_node_keeps_mig_off_and_its_mig_enabled_gpus_as_they_are(tmp_path: Path) -> None:
    doc = _doc()
    labels = _node(doc, "a100-mixed")["metadata"]["labels"]
    labels.pop("nvidia.com/mig.strategy")  # GFD writes no strategy label under none
    inv = load_inventory(_write(tmp_path, doc), CAT)
    host = inv.host("a100-mixed")
    assert host is not None
    # the MIG device counts the node still lists (capacity, labels: written by hand, GFD writes none under none)
    # make two GPUs MIG-enabled: no pod could use their instances, so they stay as they are, said in a note
    mig = [g for g in host.gpus if g.mig_enabled]
    assert len(mig) == 2 and all(g.reserved and g.allowed is None for g in mig)
    assert all(g.allowed == (WHOLE,) and not g.reserved for g in host.gpus if not g.mig_enabled)
    assert host.reserved_gpus == (0, 1)
    assert any("node 'a100-mixed'" in n and "GPU(s) 0, 1" in n and "mig.strategy=none" in n for n in inv.notes)
    # as GFD labels a none node: no MIG labels at all, every GPU whole and planned as such
    for k in [k for k in labels if k.startswith("nvidia.com/mig-")]:
        del labels[k]
    cap = _node(doc, "a100-mixed")["status"]["capacity"]
    for k in [k for k in cap if k.startswith("nvidia.com/mig-")]:
        del cap[k]
    cap["nvidia.com/gpu"] = "4"
    host = load_inventory(_write(tmp_path, doc), CAT).host("a100-mixed")
    assert host is not None and all(g.allowed == (WHOLE,) and not g.mig_enabled for g in host.gpus)


def test_a_single_node_with_every_gpu_mig_off_stays_off(tmp_path: Path) -> None:
    doc = _doc()
    labels = _node(doc, "h100-single")["metadata"]["labels"]
    # mig-strategy.go: no MIG-enabled GPU under single "is equivalent to the none MIG strategy": the full GPU labels
    labels.update({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.count": "2",
                   "nvidia.com/gpu.memory": "81559"})
    _node(doc, "h100-single")["status"]["capacity"]["nvidia.com/gpu"] = "2"
    host = load_inventory(_write(tmp_path, doc), CAT).host("h100-single")
    assert host is not None and [(g.mig_enabled, g.allowed) for g in host.gpus] == [(False, (WHOLE,))] * 2


def test_an_invalid_single_node_is_left_out_with_a_note(tmp_path: Path) -> None:
    doc = _doc()
    labels = _node(doc, "h100-single")["metadata"]["labels"]
    # newInvalidMigStrategyLabeler: product <name>-MIG-INVALID, count 0, memory 0; the device plugin offers nothing
    labels.update({"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3-MIG-INVALID", "nvidia.com/gpu.count": "0",
                   "nvidia.com/gpu.memory": "0"})
    _node(doc, "h100-single")["status"]["capacity"]["nvidia.com/gpu"] = "0"
    nodes = _write(tmp_path, doc)
    inv = load_inventory(nodes, CAT)
    assert [h.name for h in inv.hosts] == ["a100-mixed", "a100-80-busy"]
    assert len(inv.notes) == 1 and "node 'h100-single'" in inv.notes[0] and "MIG-INVALID" in inv.notes[0]
    plan, err = _propose(nodes, PODS)
    assert "note: node 'h100-single': GFD labels it" in err and "left out of the plan, as it is" in err
    assert "research/notebook-0 runs on node h100-single, which has no GPU in the inventory" in err
    assert not any(g["host"] == "h100-single" for g in plan["gpus"])
    r = CliRunner().invoke(app, ["inventory", "check", "-i", str(nodes)])
    assert r.exit_code == 0 and "note: node 'h100-single'" in r.stderr
    # a cluster of nothing but such nodes: the error says why
    doc["items"] = [_node(doc, "h100-single")]
    with pytest.raises(InputError, match="that can be planned .*MIG-INVALID"):
        load_inventory(_write(tmp_path, doc), CAT)


@pytest.mark.parametrize("product", ["NVIDIA-H100-80GB-HBM3-MIG-1g.12gb", "NVIDIA-H100-80GB-HBM3-MIG-" + "z" * 300])
def test_a_single_node_whose_profile_is_unknown_is_left_out_with_a_note(tmp_path: Path, product: str) -> None:
    doc = _doc()
    _node(doc, "h100-single")["metadata"]["labels"]["nvidia.com/gpu.product"] = product  # a newer driver's profile?
    inv = load_inventory(_write(tmp_path, doc), CAT)
    assert inv.host("h100-single") is None and len(inv.notes) == 1
    assert "not a MIG profile of H100-SXM5-80GB: left out of the plan, as it is" in inv.notes[0]
    assert len(inv.notes[0]) < 500 and "catalog learn" in inv.notes[0]


HOSTILE: list[tuple[Any, str]] = [  # label value, words of the one error (GFD writes none, single or mixed)
    ("Mixed", "unknown MIG strategy 'Mixed'"),
    ("single ", "unknown MIG strategy 'single '"),
    ("", "unknown MIG strategy ''"),
    ("mixed\nnone", "unknown MIG strategy 'mixed\\nnone'"),
    ("x" * 5000, "unknown MIG strategy '" + "x" * 40 + "'"),
    (7, "unknown MIG strategy '7'"),
    (None, "expected a string, got nothing (null)"),
    (True, "expected a string"),
    (["mixed"], "expected a string"),
]


@pytest.mark.parametrize(("value", "words"), HOSTILE, ids=[repr(v)[:20] for v, _ in HOSTILE])
def test_hostile_strategy_labels_are_one_clear_error(tmp_path: Path, value: Any, words: str) -> None:
    doc = _doc()
    _node(doc, "a100-mixed")["metadata"]["labels"]["nvidia.com/mig.strategy"] = value
    nodes = _write(tmp_path, doc)
    with pytest.raises(InputError) as err:
        load_inventory(nodes, CAT)
    msg = str(err.value)
    assert words in msg and "nvidia.com/mig.strategy" in msg and str(nodes) in msg, msg
    assert len(msg) < 1000
    r = CliRunner().invoke(app, ["propose", "-i", str(nodes), "--pods", str(PODS)])
    assert r.exit_code == 2 and r.stderr.startswith(f"error: {nodes}") and "Traceback" not in r.output


def test_a_mig_product_names_the_single_strategy(tmp_path: Path) -> None:
    doc = _doc()
    labels = _node(doc, "h100-single")["metadata"]["labels"]
    labels["nvidia.com/mig.strategy"] = "mixed"  # `-MIG-<p>` is GFD's only under single
    with pytest.raises(InputError, match="names a MIG profile .* only under nvidia.com/mig.strategy=single, not mixed"):
        load_inventory(_write(tmp_path, doc), CAT)
    del labels["nvidia.com/mig.strategy"]  # no label at all: the product says single
    host = load_inventory(_write(tmp_path, doc), CAT).host("h100-single")
    assert host is not None and dict(host.labels)["k8s.mig.strategy"] == "single"
    assert all(g.allowed == ("1g.10gb",) for g in host.gpus)


# -- the pods: requests as eligibility ----------------------------------------------------------------------------

def test_a_pods_request_fixes_the_nodes_that_can_serve_it() -> None:
    inv = load_inventory(NODES, CAT)
    state = state_from_inventory(inv, CAT)
    d = pod_demand(read_pods(PODS.read_text(), str(PODS)), state, CAT, ProfileSet(()), strategies(inv))
    w = {x.name: x for x in d.profiles.workloads}
    mig = w["ml/llm-70b-5b8c9d7f6c-k2m4p"].eligible  # nvidia.com/mig-3g.40gb: mixed nodes only
    assert [(e.profile, e.hosts) for e in mig] == [(ANY_MIG, ("a100-80-busy", "a100-mixed"))]
    assert "nvidia.com/mig.strategy=mixed" in mig[0].why
    gpu = w["research/sim-4xk2p"].eligible  # nvidia.com/gpu: a whole GPU, or the single node's profile
    assert [(e.profile, e.hosts) for e in gpu] == [(WHOLE_GPU, None), ("1g.10gb", ("h100-single",))]
    assert w["research/notebook-0"].eligible == gpu  # running pods carry theirs too (they may be moved)
    assert w["ml/chat-7d9f8c6b5d-x2x4z"].eligible == mig
    # without the strategies (an inventory not from kubectl get nodes) nothing is known: no rules, as before
    bare = pod_demand(read_pods(PODS.read_text(), str(PODS)), state, CAT, ProfileSet(()), {})
    assert all(not x.eligible for x in bare.profiles.workloads)


# -- plans ---------------------------------------------------------------------------------------------------------

def test_the_single_node_only_ever_gets_its_profile_and_a_pending_mig_pod_no_node_serves_is_left_out() -> None:
    plan, err = _propose(NODES, PODS)
    _single_ok(plan, "h100-single", "1g.10gb")
    w = {x["name"]: x for x in plan["workloads"]}
    llm = w["ml/llm-70b-5b8c9d7f6c-k2m4p"]  # mig-3g.40gb: the only mixed node with 3g.40gb is held (pending)
    assert llm["status"] == "unplaced" and "nodes with nvidia.com/mig.strategy=mixed" in llm["reason"], llm
    for name in ("research/notebook-0", "research/notebook-0:2"):  # nvidia.com/gpu on the single node: 1g.10gb
        assert w[name]["host"] == "h100-single" and w[name]["instance"].startswith("1g.10gb@") and w[name]["kept"]
    sim = w["research/sim-4xk2p"]  # pending nvidia.com/gpu: a whole GPU, or a 1g.10gb on the single node
    assert (sim["host"] == "h100-single" and sim["instance"].startswith("1g.10gb@")) or (
        sim["host"] != "h100-single" and sim["instance"] is None), sim
    assert "warning" not in err
    assert any(e["workloads"] and e["rules"] for e in plan["eligibility"])


@pytest.mark.parametrize("flags", [(), ("--allow-disrupt",), ("--consolidate",), ("--reclaim-idle",)])
def test_no_policy_gives_a_single_node_another_profile(tmp_path: Path, flags: tuple[str, ...]) -> None:
    pods = _doc(PODS)
    pods["items"] += [_pending(f"want-{p.replace('.', '-')}-{k}", f"nvidia.com/mig-{p}")
                      for p in ("3g.40gb", "2g.20gb", "7g.80gb", "1g.20gb", "1g.10gb") for k in range(2)]
    pods["items"] += [_pending(f"gpu-{k}", "nvidia.com/gpu") for k in range(3)]
    plan, _ = _propose(NODES, _write(tmp_path, pods, "pods.json"), *flags)
    _single_ok(plan, "h100-single", "1g.10gb")
    w = {x["name"]: x for x in plan["workloads"]}
    for name, x in w.items():
        if name.startswith("ml/want-") and x["status"] == "placed":
            assert x["host"] != "h100-single", x  # a mig-* request: never on the single node
        if x["status"] == "unplaced" and name.startswith("ml/want-3g"):
            assert "nvidia.com/mig.strategy=mixed" in x["reason"]
    load_plan_from(plan)


def load_plan_from(plan: dict[str, Any]) -> None:
    """The plan read back strictly: its rules and eligibility checked again."""
    back = plan_from_dict(plan, CAT, "plan.json")
    assert any(g.observed.allowed for g in back.gpus)


def test_a_pending_mig_pod_goes_to_a_mixed_node_that_can_serve_it(tmp_path: Path) -> None:
    doc = _doc(MIXED)
    pods = {"apiVersion": "v1", "kind": "List", "items": [
        _pending("a30-job", "nvidia.com/mig-2g.12gb"), _pending("a100-job", "nvidia.com/mig-3g.20gb"),
        _pending("h100-job", "nvidia.com/mig-1g.10gb"), _pending("gpu-job", "nvidia.com/gpu", 1)]}
    pf = _write(tmp_path, pods, "pods.json")
    plan, _ = _propose(_write(tmp_path, doc), pf)
    _single_ok(plan, "h100-single", "1g.10gb")
    w = {x["name"]: x for x in plan["workloads"]}
    assert w["ml/a30-job"]["host"] == "a30-disabled" and w["ml/a30-job"]["instance"].startswith("2g.12gb@")
    assert w["ml/a100-job"]["host"] == "a100-mixed"
    # mig-1g.10gb: the single H100 has seven idle 1g.10gb, advertised as nvidia.com/gpu there, not as this
    assert w["ml/h100-job"]["host"] == "a100-mixed" and w["ml/h100-job"]["instance"].startswith("1g.10gb@")
    # the A30 node under none: MIG devices not advertised there; it stays MIG off, a whole-GPU pod may have it
    _node(doc, "a30-disabled")["metadata"]["labels"].pop("nvidia.com/mig.strategy")
    plan, _ = _propose(_write(tmp_path, doc), pf)
    w = {x["name"]: x for x in plan["workloads"]}
    assert w["ml/a30-job"]["status"] == "unplaced" and "mig.strategy=mixed" in w["ml/a30-job"]["reason"]
    assert all(g["target"] is None and g["allowed"] == ["whole"] for g in plan["gpus"] if g["host"] == "a30-disabled")
    _single_ok(plan, "h100-single", "1g.10gb")


def test_gpu_pods_on_a_cluster_of_single_nodes_get_the_nodes_profile(tmp_path: Path) -> None:
    doc = _doc(MIXED)
    doc["items"] = [n for n in doc["items"] if n["metadata"]["name"] in ("control-1", "h100-single")]
    pods = {"apiVersion": "v1", "kind": "List", "items": [_pending(f"g{k}", "nvidia.com/gpu") for k in range(3)]}
    plan, _ = _propose(_write(tmp_path, doc), _write(tmp_path, pods, "pods.json"))
    _single_ok(plan, "h100-single", "1g.10gb")
    assert all(w["instance"].startswith("1g.10gb@") for w in plan["workloads"])


# -- the plan document carries the rules: read back, they are checked again ----------------------------------------

@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    nodes = _doc()
    _node(nodes, "a100-80-busy")["metadata"]["labels"]["nvidia.com/mig.config.state"] = "success"
    d = tmp_path_factory.mktemp("plan")
    f = _write(d, nodes)
    out = d / "plan.json"
    r = CliRunner().invoke(app, ["propose", "-i", str(f), "--pods", str(PODS), "--out", str(out)])
    assert r.exit_code == 0, r.output
    loaded = load_plan(out, CAT)
    assert {g.host for g in loaded.gpus if g.observed.allowed} == {"h100-single"}
    assert loaded.eligibility and all(e.workloads for e in loaded.eligibility)
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


def _refused(doc: dict[str, Any], words: str) -> None:
    with pytest.raises(InputError) as err:
        plan_from_dict(doc, CAT, "plan.json")
    assert words in str(err.value), str(err.value)


def test_a_plan_read_back_keeps_its_rules(planned: dict[str, Any]) -> None:
    back = plan_from_dict(copy.deepcopy(planned), CAT, "plan.json")
    written = [([(r["profile"], r["hosts"], r["why"]) for r in e["rules"]], e["workloads"])
               for e in planned["eligibility"]]
    assert [([(r.profile, list(r.hosts) if r.hosts is not None else None, r.why) for r in e.rules], list(e.workloads))
            for e in back.eligibility] == written
    assert {g.key: g.observed.allowed for g in back.gpus if g.observed.allowed} == {
        ("h100-single", 0): ("1g.10gb",), ("h100-single", 1): ("1g.10gb",)}
    single = [g for g in planned["gpus"] if g["host"] == "h100-single"]
    assert all(g["allowed"] == ["1g.10gb"] for g in single)
    assert all("allowed" not in g for g in planned["gpus"] if g["host"] != "h100-single")


def test_a_plan_whose_rule_was_removed_or_broken_is_refused(planned: dict[str, Any]) -> None:
    doc = copy.deepcopy(planned)
    g = next(x for x in doc["gpus"] if x["host"] == "h100-single" and x["index"] == 1)
    del g["allowed"]  # the rule is in the GPU's fingerprint
    _refused(doc, "does not match this GPU's recorded state")
    doc = copy.deepcopy(planned)
    g = next(x for x in doc["gpus"] if x["host"] == "h100-single" and x["index"] == 1)
    g["target"] = ["3g.40gb@0", "3g.40gb@4"]  # a reshape the single strategy cannot advertise, actions as diffed
    from migplan.catalog.layout import Layout
    cur = Layout.parse(g["current"])
    g["actions"] = [str(a) for a in diff(cur, Layout.parse(g["target"]), gpu=("h100-single", 1),
                                         architecture=CAT.get("H100-SXM5-80GB").architecture)]
    _refused(doc, "breaks the GPU's rule (allowed): 3g.40gb, but only 1g.10gb may be")
    g["target"], g["actions"] = None, [str(a) for a in diff(cur, None, gpu=("h100-single", 1),
                                                              architecture=CAT.get("H100-SXM5-80GB").architecture)]
    _refused(doc, "MIG disabled, but only 1g.10gb may be")


def test_a_plan_whose_workload_sits_where_its_rules_forbid_is_refused(planned: dict[str, Any]) -> None:
    doc = copy.deepcopy(planned)
    w = next(x for x in doc["workloads"] if x["name"] == "ml/llm-70b-5b8c9d7f6c-k2m4p")
    assert w["host"] == "a100-80-busy"
    # moved by hand onto an idle 1g.10gb of the single node (instance, memory and margin made consistent)
    taken = {x["instance"] for x in doc["workloads"] if x["host"] == "h100-single" and x["gpu"] == 1}
    free = next(i for i in next(g for g in doc["gpus"] if (g["host"], g["index"]) == ("h100-single", 1))["target"]
                if i not in taken)
    mib = CAT.get("H100-SXM5-80GB").profile("1g.10gb").memory_mib
    w.update(host="h100-single", gpu=1, instance=free, instance_mib=mib, margin_mib=mib - w["peak_mib"])
    src = next(g for g in doc["gpus"] if (g["host"], g["index"]) == ("a100-80-busy", 0))
    src["target"], src["actions"] = src["current"], []  # its GPU left as it was
    doc["migrations"], doc["freed_gpus"] = [], []
    _refused(doc, "ml/llm-70b-5b8c9d7f6c-k2m4p is placed on 1g.10gb@")


@pytest.mark.parametrize(("edit", "words"), [
    (lambda e: e[0]["workloads"].append("nobody"), "'nobody' is not a workload of this plan"),
    (lambda e: e[0]["workloads"].append(e[0]["workloads"][0]), "has rules twice"),
    (lambda e: e[0]["rules"][0].update(profile="9z.1tb"), "is not a MIG profile"),
    (lambda e: e[0]["rules"][0].update(hosts=["bad host;rm"]), "is not a host name"),
    (lambda e: e[0]["rules"][0].update(hosts=["a", "a"]), "listed twice"),
    (lambda e: e[0]["rules"][0].update(why="x" * 600), "at most 500 characters"),
    (lambda e: e[0].update(rules=[]), "expected 1 to 64 rules"),
    (lambda e: e[0].update(extra=1), "extra"),
])
def test_hostile_eligibility_entries_are_refused(planned: dict[str, Any], edit: Any, words: str) -> None:
    doc = copy.deepcopy(planned)
    edit(doc["eligibility"])
    _refused(doc, words)


def test_plans_without_kubernetes_carry_no_rules(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parent.parent
    r = CliRunner().invoke(app, ["propose", "-i", str(root / "inventory" / "example.yaml"), "-p",
                                 str(root / "profiles" / "example"), "-o", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert "eligibility" not in doc and not any("allowed" in g for g in doc["gpus"])
