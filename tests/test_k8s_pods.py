"""`--pods`: demand from `kubectl get pods -A -o json` (migplan/pods.py, commands/pods.py; docs/kubernetes.md).

Fixtures: tests/data/k8s/pods.json (a `kind: List` of Pods as kubectl prints it, on the nodes of nodes.json:
mixed-strategy pods, a single-strategy node's pods, whole-GPU pods, pending pods, init and sidecar containers,
a finished pod, a CPU-only pod) and tests/data/k8s/pods-profiles/ (profiles named as `collect --prometheus` names
dcgm-exporter's pods). Plans are made by the real CBC.
"""

from __future__ import annotations

import copy
import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from migplan.catalog import builtin_catalog
from migplan.cli.app import app
from migplan.commands.pods import demand_from_pods, strategies
from migplan.errors import InputError
from migplan.inventory import load_inventory
from migplan.model.state import state_from_inventory
from migplan.planner.demand import Policy
from migplan.planner.problem import build_problem
from migplan.pods import MAX_DEVICES, PodDemand, pod_demand, read_pods
from migplan.profiles import WHOLE_GPU, ProfileSet, load_profiles

CAT = builtin_catalog()
DATA = Path(__file__).resolve().parent / "data" / "k8s"
NODES = DATA / "nodes.json"
PODS = DATA / "pods.json"
MEASURED = DATA / "pods-profiles"


def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(PODS.read_text())
    return doc


def _pod(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return next(i for i in doc["items"] if i["metadata"]["name"] == name)


def _demand(measured: ProfileSet | None = None, text: str | None = None) -> PodDemand:
    inv = load_inventory(NODES, CAT)
    state = state_from_inventory(inv, CAT)
    pods = read_pods(PODS.read_text() if text is None else text, str(PODS))
    return pod_demand(pods, state, CAT, measured if measured is not None else load_profiles(MEASURED),
                      strategies(inv))


# -- what a pod asks for -----------------------------------------------------------------------------------------

def test_requests_are_counted_as_kubernetes_counts_them() -> None:
    pods = read_pods(PODS.read_text(), "pods.json")
    got = {p.workload: dict(p.requests) for p in pods.pods}
    assert got["ml/chat-7d9f8c6b5d-x2x4z"] == {"nvidia.com/mig-3g.20gb": 1}  # requests and limits agree
    assert got["research/notebook-0"] == {"nvidia.com/gpu": 2}
    # an init container asking 2 while the app asks 1: the pod reserves 2 (max of init and the app's sum)
    assert got["ml/warm-cache-0"] == {"nvidia.com/mig-1g.5gb": 2}
    # a sidecar (restartPolicy Always) runs next to the later init container and the app: 1 + 2 during init
    assert got["batch/etl-x8k2p"] == {"nvidia.com/mig-1g.5gb": 3}
    assert pods.finished == ("ml/old-run-b6t2w",)
    assert pods.without_gpu == 1  # the CPU-only frontend
    assert "web/frontend-6c7d8f9b5c-zz2xw" not in got
    bound = {p.workload for p in pods.pods if p.bound}
    assert "ml/pending-bound-0" in bound  # Pending but bound to a node: it holds its device there
    assert "ml/llm-70b-5b8c9d7f6c-k2m4p" not in bound


def test_limits_alone_are_the_request_and_one_pod_document_reads() -> None:
    one = _pod(_doc(), "llm-70b-5b8c9d7f6c-k2m4p")
    assert "requests" not in one["spec"]["containers"][0]["resources"]
    pods = read_pods(json.dumps(one), "pod.json")
    assert [(p.workload, p.requests, p.bound) for p in pods.pods] == [
        ("ml/llm-70b-5b8c9d7f6c-k2m4p", (("nvidia.com/mig-3g.40gb", 1),), False)]


def test_a_sidecar_listed_after_an_init_container_does_not_add_to_it() -> None:
    doc = _doc()
    etl = _pod(doc, "etl-x8k2p")
    etl["spec"]["initContainers"].reverse()  # convert (2) runs before the sidecar starts: init peak 2, app 1 + 1
    got = {p.workload: dict(p.requests) for p in read_pods(json.dumps(doc), "p.json").pods}
    assert got["batch/etl-x8k2p"] == {"nvidia.com/mig-1g.5gb": 2}


# -- pods as workloads, and the precedence with measured profiles -------------------------------------------------

def test_running_pods_are_tied_to_an_instance_of_what_they_hold_on_their_node() -> None:
    d = _demand()
    w = {x.name: x for x in d.profiles.workloads}
    how = {p.workload: p for p in d.pods}
    chat = w["ml/chat-7d9f8c6b5d-x2x4z"]
    assert (chat.observed.host, chat.observed.gpu, chat.observed.mig_profile) == ("a100-mixed", 1, "3g.20gb")
    assert chat.observed.mig_start is not None
    train = w["ml/train-job-q7x9k"]  # nvidia.com/gpu on a mixed node: a whole MIG-disabled GPU
    assert (train.observed.host, train.observed.gpu, train.observed.mig_profile) == ("a100-mixed", 2, None)
    assert train.requested == WHOLE_GPU and train.memory.max == CAT.get("A100-SXM4-40GB").memory_mib
    # nvidia.com/gpu on a single-strategy node: a MIG device of the node's one profile, two of them
    for name in ("research/notebook-0", "research/notebook-0:2"):
        assert (w[name].observed.host, w[name].observed.mig_profile, w[name].requested) == (
            "h100-single", "1g.10gb", "1g.10gb")
        assert how[name].state == "running" and how[name].sized == "requested"
    assert w["research/notebook-0"].observed.mig_start != w["research/notebook-0:2"].observed.mig_start
    bound = w["ml/pending-bound-0"]
    assert (bound.observed.host, bound.observed.mig_profile) == ("a100-mixed", "2g.10gb")
    # every tied device has its own instance
    places = [(x.observed.host, x.observed.gpu, x.observed.mig_start) for x in w.values() if x.observed.host]
    assert len(places) == len(set(places))


def test_pending_pods_are_new_demand_sized_by_their_request() -> None:
    d = _demand()
    w = {x.name: x for x in d.profiles.workloads}
    llm = w["ml/llm-70b-5b8c9d7f6c-k2m4p"]
    assert llm.observed.host is None and llm.requested == "3g.40gb" and llm.min_profile == "3g.40gb"
    # the smallest 3g.40gb of the fleet's models (A100-SXM4-80GB, H100-SXM5-80GB): it fits either
    assert llm.memory.max == min(CAT.get(m).profile("3g.40gb").memory_mib for m in ("A100-SXM4-80GB", "H100-SXM5-80GB"))
    assert not llm.compute.known
    sim = w["research/sim-4xk2p"]  # nvidia.com/gpu: a whole GPU, or the single node's 1g.10gb (its smaller memory)
    assert sim.requested == WHOLE_GPU and sim.observed.host is None and sim.min_profile is None
    assert sim.memory.max == CAT.get("H100-SXM5-80GB").profile("1g.10gb").memory_mib
    assert [(e.profile, e.hosts) for e in sim.eligible] == [(WHOLE_GPU, None), ("1g.10gb", ("h100-single",))]
    assert {"batch/etl-x8k2p", "batch/etl-x8k2p:2", "batch/etl-x8k2p:3"} <= set(w)
    assert any("batch/etl-x8k2p waits for 3 devices" in n for n in d.notes)
    # a profile no model of the fleet offers: reported, not fatal
    assert "research/nvl-only-0" not in w
    assert any("research/nvl-only-0" in n and "1g.24gb" in n and "not planned" in n for n in d.notes)


def test_a_measured_pod_is_sized_by_what_it_used_with_its_request_as_floor() -> None:
    d = _demand()
    w = {x.name: x for x in d.profiles.workloads}
    how = {p.workload: p for p in d.pods}
    embed = w["ml/embed-0"]  # its own profile (namespace/pod, as dcgm-exporter names it)
    assert embed.memory.max == 4000 and embed.compute.known and embed.requested is None
    assert embed.min_profile == "1g.5gb"
    assert (embed.observed.host, embed.observed.gpu, embed.observed.mig_profile) == ("a100-mixed", 1, "1g.5gb")
    assert how["ml/embed-0"].sized == "measured" and how["ml/embed-0"].measured_as is None
    chat = w["ml/chat-7d9f8c6b5d-x2x4z"]  # the Deployment's profile ('--workload-name owner')
    assert chat.memory.max == 12000 and chat.priority == 5 and chat.min_profile == "3g.20gb"
    assert how["ml/chat-7d9f8c6b5d-x2x4z"].measured_as == "ml/chat"
    assert "ml/chat" not in w  # taken by its pod: not planned twice
    assert "ml/old-run-b6t2w" not in w  # the profile of a finished pod
    assert any("ml/old-run-b6t2w" in n for n in d.notes)
    assert "batch-host-job" in w  # a profile no pod claims stays as it is


def test_the_pods_own_profile_wins_over_its_owners() -> None:
    measured = load_profiles(MEASURED)
    own = [x for x in measured.workloads if x.name == "ml/chat"][0]
    mine = dataclasses.replace(own, name="ml/chat-7d9f8c6b5d-x2x4z", memory=dataclasses.replace(own.memory, max=15000))
    d = _demand(ProfileSet((*measured.workloads, mine)))
    w = {x.name: x for x in d.profiles.workloads}
    assert w["ml/chat-7d9f8c6b5d-x2x4z"].memory.max == 15000
    assert {p.workload: p.measured_as for p in d.pods}["ml/chat-7d9f8c6b5d-x2x4z"] is None


def test_the_planner_offers_an_unmeasured_pod_only_what_it_requests() -> None:
    d = _demand()
    state = state_from_inventory(load_inventory(NODES, CAT), CAT)
    problem = build_problem(state, d.profiles, CAT, Policy())
    items = {i.name: i for i in problem.items}
    # mig-3g.40gb: only the H100 has 3g.40gb among the models planned (the A100-80GB node is held: mig.config.state
    # pending), and the H100 node is single: no node may serve it, said before solving (tests/test_k8s_strategies.py)
    llm = next(i for i in problem.rejected_items if i.name == "ml/llm-70b-5b8c9d7f6c-k2m4p")
    assert llm.fits == (("H100-SXM5-80GB", ("3g.40gb",)),)
    assert llm.demand.memory_mib == d.profiles.workloads[
        [x.name for x in d.profiles.workloads].index("ml/llm-70b-5b8c9d7f6c-k2m4p")].memory.max  # no headroom
    assert "nvidia.com/mig.strategy=mixed" in dict(problem.rejected)["ml/llm-70b-5b8c9d7f6c-k2m4p"]
    # nvidia.com/gpu: a whole GPU anywhere one can be, or the single node's one profile (1g.10gb fits the A100's too,
    # which its eligibility leaves out: on h100-single only)
    sim = items["research/sim-4xk2p"]
    assert dict(sim.fits) == {"A100-SXM4-40GB": ("1g.10gb", WHOLE_GPU), "H100-SXM5-80GB": ("1g.10gb", WHOLE_GPU)}
    assert [(e.profile, e.hosts) for e in sim.eligible] == [(WHOLE_GPU, None), ("1g.10gb", ("h100-single",))]
    embed = items["ml/embed-0"]  # measured: memory + headroom, any profile from the floor up
    assert embed.demand.memory_mib == 4512 and "1g.10gb" in dict(embed.fits)["A100-SXM4-40GB"]
    assert items["ml/embed-0"].running is not None and items["research/notebook-0:2"].running is not None


def test_a_pod_on_a_node_without_a_free_instance_or_outside_the_inventory_is_reported() -> None:
    doc = _doc()
    extra = copy.deepcopy(_pod(doc, "chat-7d9f8c6b5d-x2x4z"))
    extra["metadata"]["name"] = "chat-7d9f8c6b5d-zzzzz"  # a second 3g.20gb on a node that has one
    ghost = copy.deepcopy(_pod(doc, "embed-0"))
    ghost["metadata"]["name"], ghost["spec"]["nodeName"] = "ghost-0", "gpu-elsewhere"
    doc["items"] += [extra, ghost]
    d = _demand(ProfileSet(()), json.dumps(doc))
    w = {x.name: x for x in d.profiles.workloads}
    pinned = [x for x in w.values() if x.pin is not None]
    assert [(x.name, x.pin.host if x.pin else None) for x in pinned] == [("ml/chat-7d9f8c6b5d-zzzzz", "a100-mixed")]
    assert any("ml/chat-7d9f8c6b5d-zzzzz holds 3g.20gb on a100-mixed" in n for n in d.notes)
    assert "ml/ghost-0" not in w and any("gpu-elsewhere" in n for n in d.notes)


def test_demand_from_pods_reads_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    inv = load_inventory(NODES, CAT)
    monkeypatch.setattr("sys.stdin", io.StringIO(PODS.read_text()))
    lines: list[str] = []
    got = demand_from_pods("-", state_from_inventory(inv, CAT), CAT, ProfileSet(()), inv, lines.append)
    assert "ml/llm-70b-5b8c9d7f6c-k2m4p" in {w.name for w in got.workloads}
    assert lines[0].startswith("note: pods from <stdin>: 10 with GPU requests")


# -- end to end, with the real CBC -------------------------------------------------------------------------------

def _propose(*args: str) -> Any:
    """`propose` on the fixtures as JSON; an `-i` in `args` comes later and wins (click keeps an option's last)."""
    r = CliRunner().invoke(app, ["propose", "-i", str(NODES), "--pods", str(PODS), *args, "-o", "json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout), r.stderr


def test_propose_creates_the_instance_a_pending_pod_waits_for_and_keeps_running_pods(tmp_path: Path) -> None:
    nodes = json.loads(NODES.read_text())  # the A100-80GB node (mixed) done with its MIG manager: it may change
    busy = next(n for n in nodes["items"] if n["metadata"]["name"] == "a100-80-busy")
    busy["metadata"]["labels"]["nvidia.com/mig.config.state"] = "success"
    (tmp_path / "nodes.json").write_text(json.dumps(nodes))
    plan, err = _propose("-p", str(MEASURED), "-i", str(tmp_path / "nodes.json"))
    w = {x["name"]: x for x in plan["workloads"]}
    llm = w["ml/llm-70b-5b8c9d7f6c-k2m4p"]  # mig-3g.40gb: on the mixed node, never on the single H100
    assert llm["host"] == "a100-80-busy" and llm["instance"].startswith("3g.40gb@")
    gpu = next(g for g in plan["gpus"] if (g["host"], g["index"]) == (llm["host"], llm["gpu"]))
    assert f"create-gi {llm['instance']}" in gpu["actions"] and llm["instance"] in gpu["target"], gpu
    for name in ("ml/chat-7d9f8c6b5d-x2x4z", "ml/embed-0", "ml/train-job-q7x9k", "research/notebook-0",
                 "research/notebook-0:2", "ml/warm-cache-0", "ml/warm-cache-0:2", "ml/pending-bound-0"):
        assert w[name]["kept"] and not w[name]["moved"], w[name]
    for k in ("", ":2", ":3"):
        assert w["batch/etl-x8k2p" + k]["instance"].startswith("1g.5gb@")
    assert plan["summary"]["workloads_unplaced"] == 0
    for g in plan["gpus"]:  # the single node keeps its one profile on every GPU
        if g["host"] == "h100-single":
            assert g["target"] and {i.split("@")[0] for i in g["target"]} == {"1g.10gb"}, g
    assert "note: pods from" in err and "research/nvl-only-0" in err
    assert "warning" not in err and "Traceback" not in err


def test_propose_with_pods_alone_needs_no_profiles() -> None:
    plan, _ = _propose()
    names = {x["name"] for x in plan["workloads"]}
    assert "ml/llm-70b-5b8c9d7f6c-k2m4p" in names and "batch-host-job" not in names
    chat = next(x for x in plan["workloads"] if x["name"] == "ml/chat-7d9f8c6b5d-x2x4z")
    assert chat["instance"].startswith("3g.20gb@") and chat["kept"]


def test_a_pending_pod_whose_profile_only_a_held_node_offers_is_left_out_with_a_reason(tmp_path: Path) -> None:
    doc = {"apiVersion": "v1", "kind": "List", "items": [copy.deepcopy(_pod(_doc(), "llm-70b-5b8c9d7f6c-k2m4p"))]}
    nodes = json.loads(NODES.read_text())
    nodes["items"] = [n for n in nodes["items"] if n["metadata"]["name"] != "h100-single"]
    (tmp_path / "nodes.json").write_text(json.dumps(nodes))
    (tmp_path / "pods.json").write_text(json.dumps(doc))
    r = CliRunner().invoke(app, ["propose", "-i", str(tmp_path / "nodes.json"), "--pods", str(tmp_path / "pods.json"),
                                 "-o", "json"])
    assert r.exit_code == 0, r.output
    w = json.loads(r.stdout)["workloads"]
    assert [(x["name"], x["host"]) for x in w] == [("ml/llm-70b-5b8c9d7f6c-k2m4p", None)]
    assert "requests 3g.40gb" in w[0]["reason"] and "reserved" in w[0]["reason"]


# -- hostile input -----------------------------------------------------------------------------------------------

def _set(path: list[Any], value: Any) -> Any:
    def edit(doc: dict[str, Any]) -> None:
        at: Any = doc
        for k in path[:-1]:
            at = at[k]
        at[path[-1]] = value
    return edit


_LIMIT = ["items", 0, "spec", "containers", 0, "resources", "limits", "nvidia.com/mig-3g.20gb"]
_REQ = ["items", 0, "spec", "containers", 0, "resources", "requests", "nvidia.com/mig-3g.20gb"]
HOSTILE = {
    "1e9": (_set(_LIMIT[:-1] + ["nvidia.com/gpu"], "1e9"), "limits.nvidia.com/gpu", "'1e9' is not a whole number"),
    "negative": (_set(_LIMIT, "-1"), "limits.nvidia.com/mig-3g.20gb", "'-1' is negative"),
    "negative-int": (_set(_LIMIT, -2), "limits.nvidia.com/mig-3g.20gb", "-2 is negative"),
    "fraction": (_set(_LIMIT, "0.5"), "limits.nvidia.com/mig-3g.20gb", "not a whole number"),
    "milli": (_set(_LIMIT, "500m"), "limits.nvidia.com/mig-3g.20gb", "not a whole number"),
    "float": (_set(_LIMIT, 1.5), "limits.nvidia.com/mig-3g.20gb", "not a whole number"),
    "bool": (_set(_LIMIT, True), "limits.nvidia.com/mig-3g.20gb", "expected a whole number"),
    "huge": (_set(_LIMIT, str(MAX_DEVICES + 1)), "limits.nvidia.com/mig-3g.20gb", "more than the"),
    "unknown-profile": (_set(_LIMIT[:-1] + ["nvidia.com/mig-huge"], "1"), "limits.nvidia.com/mig-huge",
                        "does not name a MIG profile"),
    "compute-instance": (_set(_LIMIT[:-1] + ["nvidia.com/mig-1c.3g.20gb"], "1"), "nvidia.com/mig-1c.3g.20gb",
                         "does not name a MIG profile"),
    "limit-differs": (_set(_REQ, "2"), "requests.nvidia.com/mig-3g.20gb", "differ"),
    "containers-not-list": (_set(["items", 0, "spec", "containers"], {"a": 1}), "spec.containers",
                            "expected a list of containers"),
    "running-no-node": (_set(["items", 0, "spec", "nodeName"], None), "items[0]", "has no spec.nodeName"),
    "phase": (_set(["items", 0, "status", "phase"], "Exploded"), "status.phase", "unknown phase"),
    "pod-name": (_set(["items", 0, "metadata", "name"], "Bad Name; rm -rf /"), "metadata.name",
                 "not a Kubernetes pod name"),
    "node-kind": (_set(["items", 1, "kind"], "Node"), "items[1].kind", "a 'Node' in a list of pods"),
    "list-kind": (_set(["kind"], "NodeList"), "pods.json", "this is a 'NodeList' document, not pods"),
    "duplicate": (lambda d: d["items"].append(copy.deepcopy(d["items"][0])), "items[12]", "listed twice"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_pods_documents_are_one_clear_error(case: str, tmp_path: Path) -> None:
    edit, key, words = HOSTILE[case]
    doc = _doc()
    edit(doc)
    f = tmp_path / "pods.json"
    f.write_text(json.dumps(doc, indent=4))
    with pytest.raises(InputError) as err:
        read_pods(f.read_text(), str(f))
    msg = str(err.value)
    assert msg.startswith(f"{f}:") and key in msg and words in msg, msg
    if case not in ("list-kind", "node-kind", "duplicate", "pod-name"):
        assert "pod ml/chat-7d9f8c6b5d-x2x4z" in msg, msg  # the pod is named
    r = CliRunner().invoke(app, ["propose", "-i", str(NODES), "--pods", str(f)])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert r.stderr.startswith(f"error: {f}:"), r.stderr


@pytest.mark.parametrize("text", ["", "{", "[1, 2]", "not: [json", '{"kind": "List"}', '"a string"',
                                  '{"kind": "List", "items": [42]}', '{"kind": "Pod", "metadata": 7}'])
def test_malformed_documents_are_one_clear_error(text: str, tmp_path: Path) -> None:
    f = tmp_path / "bad.json"
    f.write_text(text)
    r = CliRunner().invoke(app, ["propose", "-i", str(NODES), "--pods", str(f)])
    assert r.exit_code == 2, r.output
    assert r.stderr.startswith(f"error: {f}") and "Traceback" not in r.output, r.stderr


def test_pods_and_inventory_cannot_both_come_from_stdin() -> None:
    r = CliRunner().invoke(app, ["propose", "-i", "-", "--pods", "-"], input="{}")
    assert r.exit_code == 2 and "both read stdin" in r.stderr


def test_a_missing_pods_file_is_named() -> None:
    r = CliRunner().invoke(app, ["propose", "-i", str(NODES), "--pods", "/nonexistent/pods.json"])
    assert r.exit_code == 2 and "/nonexistent/pods.json" in r.stderr and "not found" in r.stderr


# -- replan --pods, on a simulated host (tests/test_replan.py's harness) ------------------------------------------

def test_replan_creates_the_instance_a_pending_pod_waits_for_then_has_nothing_to_do(tmp_path: Path) -> None:
    import datetime as dt
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import test_replan as harness

    from migplan.commands.replan import EXIT_APPLIED, EXIT_NOTHING

    harness._setup(tmp_path)  # h1: two MIG-disabled A100-SXM4-40GB
    harness._profiles(tmp_path, {"batch-host-job": 4000})
    pending = copy.deepcopy(_pod(_doc(), "llm-70b-5b8c9d7f6c-k2m4p"))
    limits = pending["spec"]["containers"][0]["resources"]["limits"]
    limits.pop("nvidia.com/mig-3g.40gb")
    limits["nvidia.com/mig-3g.20gb"] = "1"
    pods = tmp_path / "pods.json"
    pods.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [pending]}))
    t0 = dt.datetime(2026, 11, 2, 3, 0, tzinfo=dt.timezone.utc)
    r = harness._run(tmp_path, t0, pods=str(pods))
    assert r.exit_code == EXIT_APPLIED, r.line
    got = {w.name: w for w in r.plan.workloads}
    assert got["ml/llm-70b-5b8c9d7f6c-k2m4p"].instance.startswith("3g.20gb@")
    assert got["batch-host-job"].status == "placed"
    # the pod is still listed (the file is as old as the apply): the last apply's assignment is its place now
    again = harness._run(tmp_path, t0 + dt.timedelta(hours=1), pods=str(pods))
    assert again.exit_code == EXIT_NOTHING, again.line
