"""The Kubernetes stand-in (tests/k8s_sim) checked on its own: with plain HTTP (fast) and with the real kubectl
(slow, through the `k8s_cluster` fixture). What kubectl 1.20 sends and expects is asserted from the request
log, so a stand-in that drifts from what kubectl does fails here before it misleads migplan's tests."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from k8s_sim import Cluster, start_cluster
from k8s_sim.mig_manager import ConfigError, check_fit, expand, model_of, parse_mig_parted

JSON = dict[str, Any]

MIG_CONFIG = """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  all-3g.20gb:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.20gb": 2
  mixed-0:
    - devices: all
      mig-enabled: false
    - devices: [0]
      mig-enabled: true
      mig-devices:
        "1g.5gb": 2
        "2g.10gb": 1
        "3g.20gb": 1
  too-big:
    - devices: all
      mig-enabled: true
      mig-devices:
        "3g.20gb": 2
        "1g.5gb": 1
"""


def a100_node(name: str = "gpu-1", config: str = "all-disabled", strategy: str = "mixed") -> JSON:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        "kubernetes.io/hostname": name, "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB",
        "nvidia.com/gpu.count": "2", "nvidia.com/mig.strategy": strategy, "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.config": config, "nvidia.com/mig.config.state": "success",
        "nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu.deploy.dcgm": "false"}},
        "spec": {}, "status": {"capacity": {"cpu": "64", "nvidia.com/gpu": "2"},
                               "allocatable": {"cpu": "64", "nvidia.com/gpu": "2"},
                               "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}


def mig_configmap(text: str = MIG_CONFIG) -> JSON:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "default-mig-parted-config", "namespace": "gpu-operator"},
            "data": {"config.yaml": text}}


def pod(name: str, node: str, labels: dict[str, str] | None = None, phase: str = "Running",
        gpu: str | None = None, namespace: str = "default", owner: str | None = "ReplicaSet") -> JSON:
    container: JSON = {"name": "main", "image": "busybox"}
    if gpu:
        container["resources"] = {"limits": {gpu: "1"}, "requests": {gpu: "1"}}
    meta: JSON = {"name": name, "namespace": namespace, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner, "name": f"{name}-owner",
                                    "uid": f"uid-{name}", "controller": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeName": node, "containers": [container]}, "status": {"phase": phase}}


def pdb(name: str, app: str, min_available: int | str) -> JSON:
    return {"apiVersion": "policy/v1beta1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}}}


def http(cluster: Cluster, method: str, path: str, body: Any = None,
         ctype: str = "application/json") -> tuple[int, JSON]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(cluster.url + path, data=data, method=method, headers={"Content-Type": ctype})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def wait_for(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(0.02)


def state(cluster: Cluster, node: str = "gpu-1") -> str | None:
    return (cluster.get("node", node)["metadata"].get("labels") or {}).get("nvidia.com/mig.config.state")


# ------------------------------------------------------------------ fast: HTTP and the parts, no kubectl


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    with start_cluster([a100_node()], pods=[pod("web-0", "gpu-1", {"app": "web"})],
                       configmaps=[mig_configmap()], tmp_path=tmp_path) as c:
        yield c


def test_unknown_paths_and_objects_answer_the_real_404_status(cluster: Cluster) -> None:
    code, body = http(cluster, "GET", "/api/v1/widgets")
    assert (code, body) == (404, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": "the server could not find the requested resource",
                                  "reason": "NotFound", "details": {}, "code": 404})
    code, body = http(cluster, "GET", "/api/v1/namespaces/gpu-operator/configmaps/nope")
    assert code == 404 and body["message"] == 'configmaps "nope" not found'
    assert body["details"] == {"name": "nope", "kind": "configmaps"}
    code, body = http(cluster, "GET", "/apis/policy/v1beta1/namespaces/default/poddisruptionbudgets/x")
    assert body["message"] == 'poddisruptionbudgets.policy "x" not found' and body["details"]["group"] == "policy"
    assert cluster.requests[-1].code == 404 and cluster.requests[-1].verb == "get"


def test_discovery_lists_eviction_as_policy_v1beta1(cluster: Cluster) -> None:
    # kubectl drain's CheckEvictionSupport looks for pods/eviction with kind Eviction in /api/v1 and takes the
    # policy group's preferred version from /apis.
    _, v1 = http(cluster, "GET", "/api/v1")
    ev = next(r for r in v1["resources"] if r["name"] == "pods/eviction")
    assert (ev["kind"], ev["group"], ev["version"], ev["verbs"]) == ("Eviction", "policy", "v1beta1", ["create"])
    _, groups = http(cluster, "GET", "/apis")
    policy = next(g for g in groups["groups"] if g["name"] == "policy")
    assert policy["preferredVersion"] == {"groupVersion": "policy/v1beta1", "version": "v1beta1"}


def test_selectors_filter_lists(cluster: Cluster) -> None:
    cluster.put(pod("job-0", "gpu-1", {"app": "job", "tier": "batch"}, phase="Succeeded"))
    cluster.put(pod("other", "gpu-2", {"app": "web"}))

    def names(query: str) -> list[str]:
        code, body = http(cluster, "GET", "/api/v1/pods?" + query)
        assert code == 200, body
        return [i["metadata"]["name"] for i in body["items"]]

    assert names("fieldSelector=spec.nodeName%3Dgpu-1") == ["job-0", "web-0"]
    assert names("fieldSelector=spec.nodeName%3Dgpu-1,status.phase!%3DSucceeded") == ["web-0"]
    assert names("labelSelector=app+in+(job,db)") == ["job-0"]
    assert names("labelSelector=app%3Dweb,!tier") == ["other", "web-0"]
    assert names("labelSelector=tier+notin+(batch)") == ["other", "web-0"]
    code, body = http(cluster, "GET", "/api/v1/pods?fieldSelector=spec.foo%3Dx")
    assert (code, body["reason"], body["message"]) == (400, "BadRequest", "field label not supported: spec.foo")


def test_conditional_writes_conflict_unconditional_ones_do_not(cluster: Cluster) -> None:
    path = "/api/v1/namespaces/gpu-operator/configmaps/default-mig-parted-config"
    _, cm = http(cluster, "GET", path)
    stale = cm["metadata"]["resourceVersion"]
    cm["data"]["extra"] = "1"
    code, cm2 = http(cluster, "PUT", path, cm)
    assert code == 200 and int(cm2["metadata"]["resourceVersion"]) > int(stale)
    cm["data"]["extra"] = "2"  # still carries the stale resourceVersion
    code, body = http(cluster, "PUT", path, cm)
    assert code == 409 and body["reason"] == "Conflict"
    assert body["message"] == ('Operation cannot be fulfilled on configmaps "default-mig-parted-config": the object '
                               "has been modified; please apply your changes to the latest version and try again")
    del cm["metadata"]["resourceVersion"]  # ConfigMap allows unconditional updates
    cluster.conflict_next("cm", "gpu-operator", "default-mig-parted-config", times=1)
    assert http(cluster, "PUT", path, cm)[0] == 200  # the knob hits only writes with a precondition
    current = cluster.get("configmap", "default-mig-parted-config")
    assert http(cluster, "PUT", path, current)[0] == 409  # ... this one
    assert http(cluster, "PUT", path, cluster.get("cm", "default-mig-parted-config"))[0] == 200


def test_patch_types(cluster: Cluster) -> None:
    path = "/api/v1/nodes/gpu-1"
    code, _ = http(cluster, "PATCH", path, {"metadata": {"labels": {"a": "1", "kubernetes.io/hostname": None}}},
                   "application/merge-patch+json")
    labels = cluster.get("node", "gpu-1")["metadata"]["labels"]
    assert code == 200 and labels["a"] == "1" and "kubernetes.io/hostname" not in labels
    http(cluster, "PATCH", path, [{"op": "replace", "path": "/metadata/labels/a", "value": "2"},
                                  {"op": "add", "path": "/spec/unschedulable", "value": True}],
         "application/json-patch+json")
    node = cluster.get("node", "gpu-1")
    assert node["metadata"]["labels"]["a"] == "2" and node["spec"]["unschedulable"] is True
    http(cluster, "PATCH", path, {"spec": {"unschedulable": None}}, "application/strategic-merge-patch+json")
    assert "unschedulable" not in cluster.get("node", "gpu-1")["spec"]
    code, body = http(cluster, "PATCH", path, {"metadata": {"labels": {"b": "1"}, "resourceVersion": "1"}},
                      "application/merge-patch+json")
    assert code == 409 and "b" not in cluster.get("node", "gpu-1")["metadata"]["labels"]
    code, body = http(cluster, "PATCH", path, {}, "application/apply-patch+yaml")
    assert code == 415 and body["reason"] == "UnsupportedMediaType"


def test_eviction_rules(cluster: Cluster) -> None:
    evict = {"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": "web-0"}}
    cluster.put(pdb("web", "web", 1))
    code, body = http(cluster, "POST", "/api/v1/namespaces/default/pods/web-0/eviction", evict)
    assert code == 429
    assert body == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                    "message": "Cannot evict pod as it would violate the pod's disruption budget.",
                    "reason": "TooManyRequests", "details": {"causes": [{
                        "reason": "DisruptionBudget",
                        "message": "The disruption budget web needs 1 healthy pods and has 1 currently"}]},
                    "code": 429}
    cluster.put(pdb("web-2", "web", "50%"))
    code, body = http(cluster, "POST", "/api/v1/namespaces/default/pods/web-0/eviction", evict)
    assert code == 500 and "more than one PodDisruptionBudget" in body["message"]
    cluster.put(pod("pending", "", {"app": "web"}, phase="Pending"))
    code, body = http(cluster, "POST", "/api/v1/namespaces/default/pods/pending/eviction",
                      {**evict, "metadata": {"name": "pending"}})
    assert (code, body["status"]) == (201, "Success")  # canIgnorePDB: a Pending pod is deleted
    cluster.remove("pdb", "web", "default")
    cluster.remove("pdb", "web-2", "default")
    assert http(cluster, "POST", "/api/v1/namespaces/default/pods/web-0/eviction", evict)[0] == 201
    assert cluster.list("pods") == []


def test_rbac_review_and_enforcement(tmp_path: Path) -> None:
    rules = {"rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]}],
             "roles": [{"kind": "Role", "metadata": {"name": "cm", "namespace": "gpu-operator"},
                        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "update"],
                                   "resourceNames": ["default-mig-parted-config"]}]}]}
    with start_cluster([a100_node()], configmaps=[mig_configmap()], rbac=rules, tmp_path=tmp_path) as c:
        def review(**attrs: str) -> bool:
            code, body = http(c, "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                              {"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                               "spec": {"resourceAttributes": attrs}})
            assert code == 201 and body["kind"] == "SelfSubjectAccessReview"
            return bool(body["status"]["allowed"])

        assert review(verb="patch", resource="nodes")
        assert not review(verb="delete", resource="nodes")
        assert review(verb="update", resource="configmaps", namespace="gpu-operator",
                      name="default-mig-parted-config")
        assert not review(verb="update", resource="configmaps", namespace="default",
                          name="default-mig-parted-config")
        assert not review(verb="create", resource="pods", subresource="eviction", namespace="default")
        code, body = http(c, "DELETE", "/api/v1/nodes/gpu-1")
        assert code == 403 and body["message"] == (
            'nodes "gpu-1" is forbidden: User "system:serviceaccount:gpu-operator:migplan" cannot delete '
            'resource "nodes" in API group "" at the cluster scope')
        code, body = http(c, "GET", "/api/v1/namespaces/gpu-operator/configmaps")
        assert code == 403 and body["message"].endswith('cannot list resource "configmaps" in API group "" in '
                                                        'the namespace "gpu-operator"')
        assert http(c, "GET", "/api/v1/nodes")[0] == 200


def test_mig_parted_schema_as_mig_parted_reads_it() -> None:
    assert set(parse_mig_parted(MIG_CONFIG)) == {"all-disabled", "all-3g.20gb", "mixed-0", "too-big"}
    ok_empty = "version: v1\nmig-configs:\n  e:\n    - devices: all\n      mig-enabled: true\n      mig-devices: {}\n"
    assert parse_mig_parted(ok_empty)["e"][0]["mig-devices"] == {}
    bad = {
        "mig-configs: {a: [{devices: all, mig-enabled: false}]}": "missing 'version'",
        "version: v2\nmig-configs: {a: [{devices: all, mig-enabled: false}]}": "unknown version",
        "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, x: 1}]}": "unexpected field: x",
        "version: v1\nmig-configs: {a: [{devices: all}]}": "missing required field: mig-enabled",
        "version: v1\nmig-configs: {a: [{devices: some, mig-enabled: false}]}": "invalid string input",
        "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true}]}": "missing required field 'mig-devices'",
        "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: false, mig-devices: {1g.5gb: 1}}]}":
            "MIG devices included",
        "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {1g.5gb: 0}}]}":
            "all counts for all MigProfiles are 0",
        "version: v1\nmig-configs: {a: [{devices: all, mig-enabled: true, mig-devices: {3g: 1}}]}":
            "invalid format for '3g'",
        "version: v1\nmig-configs: {a: []}": "at least one entry in 'a'",
        "version: v1\nextra: 1\nmig-configs: {a: [{devices: all, mig-enabled: false}]}": "unexpected field: extra",
    }
    for text, why in bad.items():
        with pytest.raises(ConfigError, match=why.replace("(", r"\(")):
            parse_mig_parted(text)


def test_fit_and_expansion() -> None:
    configs = parse_mig_parted(MIG_CONFIG)
    specs = expand(configs["mixed-0"], "A100-40GB", 2, [None, None])
    assert specs == [(True, (("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1))), (False, ())]
    assert check_fit("A100-40GB", specs) is None
    assert "Insufficient Resources" in (check_fit("A100-40GB", expand(configs["too-big"], "A100-40GB", 1,
                                                                      [None])) or "")
    assert "unsupported MIG profile 1g.5gb on A100-80GB" in (check_fit("A100-80GB", specs) or "")
    assert "not supported" in (check_fit(None, specs) or "")
    # a device-filter for another model leaves the GPU as it was; indices past the node's GPUs are skipped
    filtered = [{"device-filter": "0x233010DE", "devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
                {"devices": [1, 5], "mig-enabled": True, "mig-devices": {"7g.40gb": 1}}]
    assert expand(filtered, "A100-40GB", 2, [None, None]) == [None, (True, (("7g.40gb", 1),))]
    assert [model_of(p) for p in ("NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-80GB-PCIe", "NVIDIA-H100-80GB-HBM3-MIG-1g.10gb",
                                  "NVIDIA-A30", "Tesla-T4", "NVIDIA-H100-NVL")] == [
        "A100-40GB", "A100-80GB", "H100-80GB", "A30", None, "H100-NVL"]


def test_mig_manager_reacts_only_to_a_changed_label(cluster: Cluster) -> None:
    mm = cluster.mig_manager
    assert mm is not None
    mm.delay_s = 0.01
    path = "/api/v1/nodes/gpu-1"
    http(cluster, "PATCH", path, {"metadata": {"labels": {"nvidia.com/mig.config": "all-disabled"}}},
         "application/merge-patch+json")
    time.sleep(0.1)
    assert mm.events == []  # same value: no informer update handed on
    http(cluster, "PATCH", path, {"metadata": {"labels": {"nvidia.com/mig.config": "all-3g.20gb"}}},
         "application/merge-patch+json")
    wait_for(lambda: state(cluster) == "success" and len(mm.events) == 2)
    assert [e[2] for e in mm.events] == ["pending", "success"]
    node = cluster.get("node", "gpu-1")
    assert node["status"]["capacity"]["nvidia.com/mig-3g.20gb"] == "4"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "0"
    assert node["metadata"]["labels"]["nvidia.com/mig-3g.20gb.count"] == "4"
    # back to a config already applied before: mig-parted assert says applied -> success without pending
    http(cluster, "PATCH", path, {"metadata": {"labels": {"nvidia.com/mig.config": "all-disabled"}}},
         "application/merge-patch+json")
    wait_for(lambda: len(mm.events) == 4)
    http(cluster, "PATCH", path, {"metadata": {"labels": {"nvidia.com/mig.config": "all-3g.20gb"}}},
         "application/merge-patch+json")
    wait_for(lambda: len(mm.events) == 6)
    assert [e[2] for e in mm.events[2:]] == ["pending", "success", "pending", "success"]
    mm.wait_idle()


def test_mig_manager_refuses_a_busy_node(cluster: Cluster) -> None:
    mm = cluster.mig_manager
    assert mm is not None
    cluster.put(pod("train", "gpu-1", gpu="nvidia.com/gpu"))
    http(cluster, "PATCH", "/api/v1/nodes/gpu-1", {"metadata": {"labels": {"nvidia.com/mig.config": "mixed-0"}}},
         "application/merge-patch+json")
    wait_for(lambda: state(cluster) == "failed")
    assert "In use by another client" in mm.errors["gpu-1"] and "default/train" in mm.errors["gpu-1"]
    node = cluster.get("node", "gpu-1")
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "2"  # unchanged
    assert node["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] == "true"  # restored
    assert node["metadata"]["labels"]["nvidia.com/gpu.deploy.dcgm"] == "false"  # maybeSetTrue keeps false


# ------------------------------------------------------------------ slow: the real kubectl


def seeded(k8s_cluster: Callable[..., Cluster], **kw: Any) -> Cluster:
    pods = kw.pop("pods", [pod("web-0", "gpu-1", {"app": "web"}), pod("web-1", "gpu-1", {"app": "web"}),
                           pod("db-0", "gpu-2", {"app": "db"}),
                           pod("queued", "", {"app": "train"}, phase="Pending", gpu="nvidia.com/mig-3g.20gb")])
    return k8s_cluster([a100_node("gpu-1"), a100_node("gpu-2")], pods=pods,
                       configmaps=kw.pop("configmaps", [mig_configmap()]), **kw)


def ok(cluster: Cluster, *args: str) -> str:
    r = cluster.kubectl(*args)
    assert r.returncode == 0, f"kubectl {' '.join(args)}: rc={r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_kubectl_get_json(k8s_cluster: Callable[..., Cluster]) -> None:
    c = seeded(k8s_cluster)
    out = json.loads(ok(c, "get", "nodes", "-o", "json"))
    assert out["kind"] == "List" and [i["metadata"]["name"] for i in out["items"]] == ["gpu-1", "gpu-2"]
    assert out["items"][0]["kind"] == "Node"  # kubectl puts back what list items lack on the wire
    assert out["items"][0]["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    pods = json.loads(ok(c, "get", "pods", "-A", "-o", "json", "--field-selector",
                         "spec.nodeName=gpu-1,status.phase=Running"))
    assert sorted(p["metadata"]["name"] for p in pods["items"]) == ["web-0", "web-1"]
    pending = json.loads(ok(c, "get", "pods", "-A", "-o", "json", "--field-selector", "status.phase=Pending"))
    assert [p["metadata"]["name"] for p in pending["items"]] == ["queued"]
    one = json.loads(ok(c, "get", "node", "gpu-2", "-o", "json"))
    assert one["kind"] == "Node" and one["metadata"]["resourceVersion"]
    assert ok(c, "get", "pods", "-l", "app=db", "-o", "name").split() == ["pod/db-0"]
    table = ok(c, "get", "nodes", "-L", "nvidia.com/mig.config")
    assert table.splitlines()[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION", "MIG.CONFIG"]
    assert table.splitlines()[1].split()[:2] == ["gpu-1", "Ready"]
    r = c.kubectl("get", "node", "nope")
    assert r.returncode == 1 and 'Error from server (NotFound): nodes "nope" not found' in r.stderr
    lists = [q for q in c.requests if q.path == "/api/v1/pods" and q.verb == "list"]
    assert lists[0].query["fieldSelector"] == "spec.nodeName=gpu-1,status.phase=Running"


def test_kubectl_label_and_overwrite(k8s_cluster: Callable[..., Cluster]) -> None:
    c = seeded(k8s_cluster)
    ok(c, "label", "node", "gpu-1", "example.com/pool=a")
    r = c.kubectl("label", "node", "gpu-1", "example.com/pool=b")
    assert r.returncode == 1 and "already has a value (a), and --overwrite is false" in r.stderr
    ok(c, "label", "node", "gpu-1", "example.com/pool=b", "--overwrite")
    assert c.get("node", "gpu-1")["metadata"]["labels"]["example.com/pool"] == "b"
    patch = [q for q in c.requests if q.method == "PATCH"][-1]
    assert patch.content_type == "application/merge-patch+json"
    assert patch.body == {"metadata": {"labels": {"example.com/pool": "b"}}}
    ok(c, "label", "node", "gpu-1", "example.com/pool-")
    assert "example.com/pool" not in c.get("node", "gpu-1")["metadata"]["labels"]
    # --resource-version makes the patch conditional: a stale one is the real 409
    r = c.kubectl("label", "node", "gpu-1", "x=1", "--resource-version=1")
    assert r.returncode == 1 and 'Operation cannot be fulfilled on nodes "gpu-1"' in r.stderr
    ok(c, "annotate", "node", "gpu-1", "example.com/note=hi")
    assert c.get("node", "gpu-1")["metadata"]["annotations"] == {"example.com/note": "hi"}
    ok(c, "patch", "node", "gpu-1", "--type=json", "-p",
       '[{"op":"add","path":"/metadata/labels/example.com~1json","value":"y"}]')
    assert c.get("node", "gpu-1")["metadata"]["labels"]["example.com/json"] == "y"


def test_kubectl_cordon_uncordon(k8s_cluster: Callable[..., Cluster]) -> None:
    c = seeded(k8s_cluster)
    assert "node/gpu-1 cordoned" in ok(c, "cordon", "gpu-1")
    assert c.get("node", "gpu-1")["spec"]["unschedulable"] is True
    assert "Ready,SchedulingDisabled" in ok(c, "get", "node", "gpu-1")
    assert ok(c, "get", "nodes", "--field-selector", "spec.unschedulable=true", "-o", "name").split() == [
        "node/gpu-1"]
    assert "node/gpu-1 uncordoned" in ok(c, "uncordon", "gpu-1")
    assert "unschedulable" not in c.get("node", "gpu-1")["spec"]
    patches = [q for q in c.requests if q.method == "PATCH"]
    assert [(q.content_type, q.body) for q in patches] == [
        ("application/strategic-merge-patch+json", {"spec": {"unschedulable": True}}),
        ("application/strategic-merge-patch+json", {"spec": {"unschedulable": None}})]


def test_kubectl_drain_blocked_by_a_pdb(k8s_cluster: Callable[..., Cluster]) -> None:
    c = seeded(k8s_cluster, pdbs=[pdb("web", "web", 2)])
    t0 = time.monotonic()
    r = c.kubectl("drain", "gpu-1", "--timeout=2s", "--grace-period=0")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "Cannot evict pod as it would violate the pod's disruption budget." in r.stderr
    assert time.monotonic() - t0 < 30
    assert c.get("node", "gpu-1")["spec"]["unschedulable"] is True  # drain cordons first, and leaves it so
    assert {p["metadata"]["name"] for p in c.list("pods")} >= {"web-0", "web-1"}
    evictions = [q for q in c.requests if q.subresource == "eviction"]
    assert evictions and all(q.code == 429 for q in evictions)
    assert evictions[0].body["apiVersion"] == "policy/v1beta1" and evictions[0].body["kind"] == "Eviction"


def test_kubectl_drain_without_a_blocking_pdb(k8s_cluster: Callable[..., Cluster]) -> None:
    # A budget on other pods does not block; no controller recreates evicted pods here, so a budget the
    # evictions themselves would spend (web, minAvailable 1 of 2) would block the second eviction for good.
    c = seeded(k8s_cluster, pdbs=[pdb("db", "db", 1)])
    c.put(pod("agent", "gpu-1", {"app": "agent"}, owner="DaemonSet", namespace="gpu-operator"))
    c.put({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent-owner",
                                                                      "namespace": "gpu-operator"}, "spec": {}})
    r = c.kubectl("drain", "gpu-1", "--ignore-daemonsets", "--timeout=20s", "--grace-period=0")
    assert r.returncode == 0, r.stdout + r.stderr
    # kubectl 1.20 ends with "node/gpu-1 evicted" when it evicted pods ("drained" when there were none)
    assert "node/gpu-1 evicted" in r.stdout or "node/gpu-1 drained" in r.stdout
    left = {p["metadata"]["name"] for p in c.list("pods")}
    assert left == {"db-0", "queued", "agent"}  # the DaemonSet's pod stays, as --ignore-daemonsets says
    evictions = sorted((q.name, q.code) for q in c.requests if q.subresource == "eviction")
    assert evictions == [("web-0", 201), ("web-1", 201)]


def test_kubectl_configmap_create_replace_conflict_apply(k8s_cluster: Callable[..., Cluster],
                                                         tmp_path: Path) -> None:
    c = seeded(k8s_cluster, configmaps=[])
    cm = mig_configmap()
    f = tmp_path / "cm.json"
    f.write_text(json.dumps(cm))
    ok(c, "create", "-f", str(f), "--validate=false")
    r = c.kubectl("create", "-f", str(f), "--validate=false")
    assert r.returncode == 1 and 'configmaps "default-mig-parted-config" already exists' in r.stderr
    c.conflict_next("configmap", "gpu-operator", "default-mig-parted-config", times=1)
    cm["data"]["config.yaml"] += "  # v2\n"
    f.write_text(json.dumps(cm))
    r = c.kubectl("replace", "-f", str(f), "--validate=false")
    assert r.returncode == 1 and "Error from server (Conflict)" in r.stderr
    assert "the object has been modified; please apply your changes to the latest version" in r.stderr
    assert "# v2" not in c.get("cm", "default-mig-parted-config")["data"]["config.yaml"]
    ok(c, "replace", "-f", str(f), "--validate=false")  # kubectl replace GETs the resourceVersion, then PUTs
    assert "# v2" in c.get("cm", "default-mig-parted-config")["data"]["config.yaml"]
    stale = {**cm, "metadata": {**cm["metadata"], "resourceVersion": "5"}}
    f.write_text(json.dumps(stale))
    r = c.kubectl("replace", "-f", str(f), "--validate=false")
    assert r.returncode == 1 and "Error from server (Conflict)" in r.stderr
    # client-side apply: create with the last-applied annotation, then a strategic merge patch
    new = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "applied", "namespace": "gpu-operator"},
           "data": {"a": "1", "b": "2"}}
    f.write_text(json.dumps(new))
    assert "configmap/applied created" in ok(c, "apply", "-f", str(f), "--validate=false")
    del new["data"]["b"]
    f.write_text(json.dumps(new))
    assert "configmap/applied configured" in ok(c, "apply", "-f", str(f), "--validate=false")
    assert c.get("cm", "applied", "gpu-operator")["data"] == {"a": "1"}
    r = c.kubectl("apply", "-f", str(f))  # validation wants /openapi/v2, which the stand-in does not serve
    assert r.returncode == 1 and "the server could not find the requested resource" in r.stderr


def test_kubectl_auth_can_i(k8s_cluster: Callable[..., Cluster]) -> None:
    rbac = {"rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
                      {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]}],
            "roles": [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                       "metadata": {"name": "migplan", "namespace": "gpu-operator"},
                       "rules": [{"apiGroups": [""], "resources": ["configmaps"],
                                  "verbs": ["get", "create", "update"]}]}]}
    c = seeded(k8s_cluster, rbac=rbac)
    assert c.kubectl("auth", "can-i", "patch", "nodes").stdout.strip() == "yes"
    r = c.kubectl("auth", "can-i", "delete", "nodes")
    assert (r.returncode, r.stdout.strip()) == (1, "no")
    assert c.kubectl("auth", "can-i", "update", "configmaps", "-n", "gpu-operator").stdout.strip() == "yes"
    assert c.kubectl("auth", "can-i", "update", "configmaps", "-n", "default").stdout.strip() == "no"
    assert c.kubectl("auth", "can-i", "create", "pods", "--subresource=eviction", "-n", "ml").stdout.strip() == "yes"
    review = [q for q in c.requests if q.resource == "selfsubjectaccessreviews"][-1]
    assert review.body["spec"]["resourceAttributes"] == {"namespace": "ml", "verb": "create", "resource": "pods",
                                                         "subresource": "eviction"}
    r = c.kubectl("delete", "pod", "web-0")
    assert r.returncode == 1 and ('Error from server (Forbidden): pods "web-0" is forbidden: User '
                                  '"system:serviceaccount:gpu-operator:migplan" cannot delete resource "pods" in '
                                  'API group "" in the namespace "default"') in r.stderr


def label_mig(c: Cluster, config: str, node: str = "gpu-1") -> None:
    ok(c, "label", "node", node, f"nvidia.com/mig.config={config}", "--overwrite")


def test_mig_manager_pending_then_success(k8s_cluster: Callable[..., Cluster]) -> None:
    c = seeded(k8s_cluster)
    assert c.mig_manager is not None
    c.mig_manager.delay_s = 0.3
    label_mig(c, "mixed-0")
    wait_for(lambda: state(c) == "pending")
    out = json.loads(ok(c, "get", "node", "gpu-1", "-o", "json"))
    assert out["metadata"]["labels"]["nvidia.com/gpu.deploy.device-plugin"] == "paused-for-mig-change"
    wait_for(lambda: state(c) == "success")
    node = json.loads(ok(c, "get", "node", "gpu-1", "-o", "json"))
    capacity, labels = node["status"]["capacity"], node["metadata"]["labels"]
    assert {k: v for k, v in capacity.items() if k.startswith("nvidia.com/")} == {
        "nvidia.com/gpu": "1", "nvidia.com/mig-1g.5gb": "2", "nvidia.com/mig-2g.10gb": "1",
        "nvidia.com/mig-3g.20gb": "1"}
    assert node["status"]["allocatable"]["nvidia.com/mig-1g.5gb"] == "2"
    assert labels["nvidia.com/mig-1g.5gb.count"] == "2" and labels["nvidia.com/gpu.deploy.device-plugin"] == "true"
    assert [e[2] for e in c.mig_manager.events] == ["pending", "success"]
    label_mig(c, "all-3g.20gb")  # a profile that goes away stays in capacity at 0
    wait_for(lambda: state(c) == "success" and len(c.mig_manager.events) == 4)
    capacity = c.get("node", "gpu-1")["status"]["capacity"]
    assert (capacity["nvidia.com/mig-1g.5gb"], capacity["nvidia.com/mig-3g.20gb"], capacity["nvidia.com/gpu"]) == (
        "0", "4", "0")
    assert "nvidia.com/mig-1g.5gb.count" not in c.get("node", "gpu-1")["metadata"]["labels"]


def test_mig_manager_failed_on_an_unknown_or_oversized_config(k8s_cluster: Callable[..., Cluster]) -> None:
    c = seeded(k8s_cluster)
    assert c.mig_manager is not None
    label_mig(c, "no-such-config")
    wait_for(lambda: state(c) == "failed")
    assert [e[2] for e in c.mig_manager.events] == ["failed"]  # assert --valid-config fails before pending
    assert "not found in config file" in c.mig_manager.errors["gpu-1"]
    label_mig(c, "too-big", node="gpu-2")
    wait_for(lambda: state(c, "gpu-2") == "failed")
    assert "Insufficient Resources" in c.mig_manager.errors["gpu-2"]
    assert c.get("node", "gpu-2")["status"]["capacity"]["nvidia.com/gpu"] == "2"
    c.mig_manager.outcome["gpu-2"] = "failed"
    label_mig(c, "all-3g.20gb", node="gpu-2")
    wait_for(lambda: state(c, "gpu-2") == "failed" and c.mig_manager.events[-1][2] == "failed"
             and c.mig_manager.events[-2][2] == "pending")


def test_mig_manager_hang_stays_pending(k8s_cluster: Callable[..., Cluster]) -> None:
    c = seeded(k8s_cluster)
    assert c.mig_manager is not None
    c.mig_manager.outcome["gpu-1"] = "hang"
    c.mig_manager.delay_s = 0.02
    label_mig(c, "all-3g.20gb")
    wait_for(lambda: state(c) == "pending")
    time.sleep(0.5)
    assert state(c) == "pending"
    assert c.get("node", "gpu-1")["status"]["capacity"]["nvidia.com/gpu"] == "2"


def test_mig_manager_reboot(k8s_cluster: Callable[..., Cluster]) -> None:
    c = seeded(k8s_cluster)
    assert c.mig_manager is not None
    c.mig_manager.outcome["gpu-1"] = "reboot"
    c.mig_manager.delay_s = 0.3
    label_mig(c, "all-3g.20gb")
    wait_for(lambda: state(c) == "rebooting")
    assert "NotReady" in ok(c, "get", "node", "gpu-1")
    wait_for(lambda: state(c) == "success")
    assert [e[2] for e in c.mig_manager.events] == ["pending", "rebooting", "success"]
    assert "Ready" in ok(c, "get", "node", "gpu-1").splitlines()[1].split()
    assert c.get("node", "gpu-1")["status"]["capacity"]["nvidia.com/mig-3g.20gb"] == "4"
