"""`migplan apply PLAN --via gpu-operator` end to end: the real kubectl against the Kubernetes API stand-in
(tests/k8s_sim) and its simulated MIG manager. Every fault ends with each node as planned or as before, and the
output says which (docs/kubernetes.md, "Applying through the GPU Operator")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from migplan.cli.app import app

pytestmark = pytest.mark.slow  # each test starts the stand-in and runs kubectl

DATA = Path(__file__).resolve().parent / "data" / "k8s"
PROFILES = str(Path(__file__).resolve().parent.parent / "profiles" / "example")
CM = {"metadata": {"name": "default-mig-parted-config", "namespace": "gpu-operator"}, "data": {"config.yaml": """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-1g.10gb:
    - devices: all
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
  custom-a100:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"1g.5gb": 7}
    - devices: [1]
      mig-enabled: true
      mig-devices: {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}
    - devices: [2, 3]
      mig-enabled: false
"""}}
BEFORE = {"a100-mixed": "custom-a100", "h100-single": "all-1g.10gb", "a100-80-busy": "all-3g.40gb"}


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A plan of `nodes()` for profiles/example: a100-mixed and h100-single change, a100-80-busy (its MIG manager
    pending) is held."""
    d = tmp_path_factory.mktemp("plan")
    (d / "nodes.json").write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": nodes()}))
    out = d / "plan.json"
    r = CliRunner().invoke(app, ["propose", "-i", str(d / "nodes.json"), "-p", PROFILES, "--out", str(out)])
    assert r.exit_code == 0, r.output
    return str(out)


def nodes() -> list[dict[str, Any]]:
    """tests/data/k8s/nodes.json with h100-single under mig.strategy=mixed (its fourteen 1g.10gb as GFD labels them
    there): a plan never changes a single-strategy node's profile (the ClusterPolicy's; tests/test_k8s_strategies.py),
    so the H100 node a plan reshapes is a mixed one."""
    items = list(json.loads((DATA / "nodes.json").read_text())["items"])
    h100 = next(n for n in items if n["metadata"]["name"] == "h100-single")
    h100["metadata"]["labels"].update({"nvidia.com/mig.strategy": "mixed", "nvidia.com/gpu.count": "2",
                                       "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                                       "nvidia.com/gpu.memory": "81559", "nvidia.com/mig-1g.10gb.count": "14"})
    h100["status"]["capacity"].update({"nvidia.com/gpu": "0", "nvidia.com/mig-1g.10gb": "14"})
    return items


def run(cluster: Any, plan: str, *extra: str) -> tuple[int, dict[str, Any], str]:
    r = CliRunner().invoke(app, ["apply", plan, "--via", "gpu-operator", "--kubeconfig", str(cluster.kubeconfig),
                                 "--context", "stand-in", "--yes", "--configmap-settle", "0", "--mig-timeout", "8",
                                 "-o", "json", *extra])
    out = r.stdout
    return r.exit_code, json.loads(out[out.index("{"):]) if "{" in out else {}, r.output


def labels(cluster: Any) -> dict[str, str | None]:
    return {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get("nvidia.com/mig.config")
            for n in cluster.list("nodes") if n["metadata"]["name"] != "control-1"}


def outcomes(doc: dict[str, Any]) -> dict[str, set[str]]:
    return {h["host"]: {g["outcome"] for g in h["gpus"]} for h in doc["hosts"]}


def label_patches(cluster: Any) -> list[str]:
    return [r.name for r in cluster.requests if r.verb == "patch" and r.resource == "nodes"
            and "nvidia.com/mig.config" in json.dumps(r.body)]


def test_success_relabels_only_the_changed_nodes_and_verifies_capacity(k8s_cluster: Any, plan: str) -> None:
    cluster = k8s_cluster(nodes(), configmaps=[CM])
    code, doc, out = run(cluster, plan)
    assert code == 0, out
    assert outcomes(doc) == {"a100-80-busy": {"unchanged"}, "a100-mixed": {"applied", "unchanged"},
                             "h100-single": {"applied"}}
    now = labels(cluster)
    assert now["a100-80-busy"] == "all-3g.40gb"  # held: its MIG manager was at work
    assert now["a100-mixed"].startswith("migplan-a100-40gb") and now["h100-single"] == "migplan-h100-80gb-7g.80gb"
    assert sorted(set(label_patches(cluster))) == ["a100-mixed", "h100-single"]
    h100 = cluster.get("node", "h100-single")
    assert h100["status"]["capacity"]["nvidia.com/mig-7g.80gb"] == "2"  # mixed strategy: two 7g.80gb devices
    assert h100["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"
    config = cluster.get("configmap", "default-mig-parted-config", "gpu-operator")["data"]["config.yaml"]
    for kept in ("all-disabled:", "all-1g.10gb:", "custom-a100:", now["a100-mixed"] + ":"):
        assert kept in config  # every config already there kept, ours added
    # applying again changes nothing: every node is as planned
    before = len(cluster.requests)
    code, doc, out = run(cluster, plan)
    assert code == 0, out
    assert all(o <= {"unchanged"} for o in outcomes(doc).values()), doc
    assert not [r for r in cluster.requests[before:] if r.verb == "patch"]


@pytest.mark.parametrize("fault", ["failed", "hang"])
def test_a_failed_or_stuck_config_rolls_the_label_back_and_says_so(k8s_cluster: Any, plan: str, fault: str) -> None:
    cluster = k8s_cluster(nodes(), configmaps=[CM])
    cluster.mig_manager.outcome["h100-single"] = fault
    code, doc, out = run(cluster, plan, "--mig-timeout", "3")
    assert code == 1, out  # partial: a100-mixed applied
    got = outcomes(doc)
    assert got["h100-single"] == {"rolled-back"} and "applied" in got["a100-mixed"]
    reason = next(g["reason"] for h in doc["hosts"] if h["host"] == "h100-single" for g in h["gpus"])
    assert ("=failed" if fault == "failed" else "not done within 3 s") in reason
    assert "put back to all-1g.10gb" in reason
    assert labels(cluster)["h100-single"] == "all-1g.10gb"  # as before
    assert cluster.get("node", "h100-single")["status"]["capacity"]["nvidia.com/mig-1g.10gb"] == "14"


def test_a_configmap_conflict_is_read_again_and_retried(k8s_cluster: Any, plan: str) -> None:
    cluster = k8s_cluster(nodes(), configmaps=[CM])
    cluster.conflict_next("configmap", "gpu-operator", "default-mig-parted-config", times=2)
    code, doc, out = run(cluster, plan)
    assert code == 0, out
    assert doc["configmap"]["conflicts"] == 2 and doc["configmap"]["written"]
    cm_patches = [r for r in cluster.requests if r.verb == "patch" and r.resource == "configmaps"]
    assert [r.code for r in cm_patches] == [409, 409, 200]
    seq = [r.verb for r in cluster.requests if r.resource == "configmaps"]
    after = [seq[i + 1:] for i, v in enumerate(seq) if v == "patch"][:2]
    assert all(rest and rest[0] == "get" for rest in after)  # read again after each conflict


def test_a_configmap_conflict_past_the_retries_changes_no_node(k8s_cluster: Any, plan: str) -> None:
    cluster = k8s_cluster(nodes(), configmaps=[CM])
    cluster.conflict_next("configmap", "gpu-operator", "default-mig-parted-config", times=99)
    code, _, out = run(cluster, plan)
    assert code != 0 and "Conflict" in out and "Traceback" not in out
    assert labels(cluster) == BEFORE


def _gpu_pod(name: str, node: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ml", "labels": labels or {}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "x", "resources": {
                "limits": {"nvidia.com/gpu": "1"}}}]}, "status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True"}]}}


def test_a_node_with_gpu_pods_is_not_relabelled_without_allow_disrupt(k8s_cluster: Any, plan: str) -> None:
    cluster = k8s_cluster(nodes(), configmaps=[CM], pods=[_gpu_pod("train-0", "h100-single")])
    code, doc, out = run(cluster, plan)
    assert code == 1, out
    assert outcomes(doc)["h100-single"] == {"skipped"}
    reason = doc["hosts"][[h["host"] for h in doc["hosts"]].index("h100-single")]["gpus"][0]["reason"]
    assert "ml/train-0" in reason and "--allow-disrupt" in reason
    assert labels(cluster)["h100-single"] == "all-1g.10gb" and cluster.get("pod", "train-0", "ml")


def test_allow_disrupt_drains_through_the_eviction_api_and_uncordons(k8s_cluster: Any, plan: str) -> None:
    cluster = k8s_cluster(nodes(), configmaps=[CM], pods=[_gpu_pod("train-0", "h100-single")])
    code, doc, out = run(cluster, plan, "--allow-disrupt")
    assert code == 0, out
    assert outcomes(doc)["h100-single"] == {"applied"}
    evictions = [r for r in cluster.requests if r.subresource == "eviction"]
    assert [(r.name, r.code) for r in evictions] == [("train-0", 201)]
    node = cluster.get("node", "h100-single")
    assert not node["spec"].get("unschedulable")  # uncordoned after


def test_a_pdb_that_blocks_eviction_stops_that_node_unchanged(k8s_cluster: Any, plan: str) -> None:
    pdb = {"metadata": {"name": "train", "namespace": "ml"},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "train"}}}}
    cluster = k8s_cluster(nodes(), configmaps=[CM], pods=[_gpu_pod("train-0", "h100-single", {"app": "train"})],
                          pdbs=[pdb])
    code, doc, out = run(cluster, plan, "--allow-disrupt")
    assert code == 1, out
    assert outcomes(doc)["h100-single"] == {"skipped"} and "applied" in outcomes(doc)["a100-mixed"]
    reason = doc["hosts"][[h["host"] for h in doc["hosts"]].index("h100-single")]["gpus"][0]["reason"]
    assert "PodDisruptionBudget" in reason and "unchanged" in reason
    assert labels(cluster)["h100-single"] == "all-1g.10gb" and cluster.get("pod", "train-0", "ml")
    assert not cluster.get("node", "h100-single")["spec"].get("unschedulable")


def test_a_node_changed_since_the_plan_is_refused(k8s_cluster: Any, plan: str) -> None:
    changed = nodes()
    for n in changed:
        if n["metadata"]["name"] == "a100-mixed":
            n["metadata"]["labels"]["nvidia.com/mig-1g.5gb.count"] = "7"
            n["status"]["capacity"]["nvidia.com/mig-1g.5gb"] = "7"
    cluster = k8s_cluster(changed, configmaps=[CM])
    code, doc, out = run(cluster, plan)
    assert code == 1, out
    assert "refused" in outcomes(doc)["a100-mixed"]
    assert labels(cluster)["a100-mixed"] == "custom-a100"


def test_dry_run_prints_the_kubectl_commands_and_changes_nothing(k8s_cluster: Any, plan: str) -> None:
    cluster = k8s_cluster(nodes(), configmaps=[CM])
    r = CliRunner().invoke(app, ["apply", plan, "--via", "gpu-operator", "--kubeconfig", str(cluster.kubeconfig),
                                 "-o", "sh"])
    assert r.exit_code == 0, r.output
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("kubectl") or ln.startswith("sleep")]
    assert " patch configmaps default-mig-parted-config -n gpu-operator " in lines[0]
    assert lines[1].startswith("sleep ")
    assert [ln.split(" patch nodes ")[1].split()[0] for ln in lines if " patch nodes " in ln] == [
        "a100-mixed", "h100-single"]
    assert not [x for x in cluster.requests if x.verb not in ("get", "list", "")]
    assert labels(cluster) == BEFORE


def test_ssh_apply_refuses_kubernetes_nodes(plan: str) -> None:
    r = CliRunner().invoke(app, ["apply", plan, "-i", str(DATA / "nodes.json"), "--yes"])
    assert r.exit_code == 2
    assert "--via gpu-operator" in r.output and "Traceback" not in r.output


RBAC = Path(__file__).resolve().parent.parent / "examples" / "k8s" / "migplan-rbac.yaml"


def test_the_documented_least_privilege_rbac_is_enough_and_no_more(k8s_cluster: Any, plan: str) -> None:
    import yaml

    roles = [d for d in yaml.safe_load_all(RBAC.read_text()) if d["kind"] in ("ClusterRole", "Role")]
    pdb = {"metadata": {"name": "train", "namespace": "ml"}, "spec": {"maxUnavailable": 1,
                                                                     "selector": {"matchLabels": {"app": "t"}}}}
    cluster = k8s_cluster(nodes(), configmaps=[CM], pods=[_gpu_pod("train-0", "h100-single", {"app": "t"})],
                          pdbs=[pdb], rbac={"roles": roles, "enforce": True})
    for verb, what, ns, want in (("patch", "nodes", None, "yes"), ("list", "pods", None, "yes"),
                                 ("create", "pods --subresource=eviction", "ml", "yes"),
                                 ("patch", "configmaps/default-mig-parted-config", "gpu-operator", "yes"),
                                 ("delete", "pods", "ml", "no"), ("patch", "configmaps", "kube-system", "no"),
                                 ("get", "secrets", "gpu-operator", "no")):
        got = cluster.kubectl("auth", "can-i", verb, *what.split(), *(["-n", ns] if ns else []))
        assert got.stdout.strip() == want, (verb, what, got.stdout, got.stderr)
    code, doc, out = run(cluster, plan, "--allow-disrupt")
    assert code == 0, out  # the whole apply, drain included, under those rules
    assert not [r for r in cluster.requests if r.code == 403]
