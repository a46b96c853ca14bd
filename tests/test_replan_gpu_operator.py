"""`migplan replan --via gpu-operator`, issue 24's "Done when": a cluster of mixed nodes (A100 mixed strategy, H100
single, A30 all-disabled, a T4, an L4, a control plane: tests/data/k8s/mixed-nodes.json) with Running and Pending pods
(tests/data/k8s/mixed-pods.json). Replan plans for the Pending pods, relabels only the node that changes, waits for the
simulated MIG manager, and a second run changes nothing; a failed config, a timeout, a ConfigMap conflict and a PDB
that blocks eviction each end with every node as planned or as before, and the output and the run record say which.

The slow tests run the real kubectl against the stand-in (tests/k8s_sim); the others play kubectl's answers to the
reads (any write fails them) or check the pure parts and the CronJob manifest (examples/k8s/migplan-cronjob.yaml).
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from migplan.adapters.kubectl import Kubectl, KubectlOptions
from migplan.adapters.runner import Completed
from migplan.adapters.state_dir import StateDir
from migplan.catalog.layout import Layout
from migplan.cli.app import app
from migplan.commands import replan_k8s
from migplan.commands.context import build_context
from migplan.commands.fleet import FleetRequest
from migplan.commands.replan import EXIT_APPLIED, EXIT_FAILED, EXIT_NOTHING, ReplanRequest
from migplan.commands.replan_k8s import K8sReplan, replan_gpu_operator
from migplan.errors import InputError
from migplan.k8s import holds
from migplan.k8s.objects import BadObject, NodeView, PodView, node_view
from migplan.model.diff import diff
from migplan.model.gpu_plan import GpuPlan
from migplan.model.state import GpuState

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "k8s"
CRONJOB = ROOT / "examples" / "k8s" / "migplan-cronjob.yaml"
RBAC = ROOT / "examples" / "k8s" / "migplan-rbac.yaml"
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
      mig-devices: {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2}
    - devices: [1]
      mig-enabled: false
"""}}
# each GPU node's nvidia.com/mig.config as the fixture has it (the T4 and L4 have none)
BEFORE = {"a100-mixed": "custom-a100", "h100-single": "all-1g.10gb", "a30-disabled": "all-disabled",
          "t4-node": None, "l4-node": None}
PENDING = ("ocr-5d8f7c6b9-m4n8v", "asr-7c9d8b6f5-p2r6t")  # ml/, waiting for a 2g.12gb and a 1g.6gb (A30 profiles)


def nodes() -> list[dict[str, Any]]:
    return list(json.loads((DATA / "mixed-nodes.json").read_text())["items"])


def pods() -> list[dict[str, Any]]:
    return list(json.loads((DATA / "mixed-pods.json").read_text())["items"])


def config(tmp_path: Path, **replan: Any) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "replan": replan}))
    return str(path)


def run(cluster: Any, tmp_path: Path, *extra: str, cfg: str | None = None) -> tuple[int, dict[str, Any], str]:
    r = CliRunner().invoke(app, ["replan", "--via", "gpu-operator", "--kubeconfig", str(cluster.kubeconfig),
                                 "--context", "stand-in", "--config", cfg or config(tmp_path),
                                 "--state-dir", str(tmp_path / "state"), "--configmap-settle", "0",
                                 "--mig-timeout", "8", "-o", "json", *extra])
    out = r.stdout
    return r.exit_code, json.loads(out[out.index("{"):]) if "{" in out else {}, r.output


def labels(cluster: Any) -> dict[str, str | None]:
    return {n["metadata"]["name"]: (n["metadata"].get("labels") or {}).get("nvidia.com/mig.config")
            for n in cluster.list("nodes") if n["metadata"]["name"] in BEFORE}


def writes(cluster: Any, since: int = 0) -> list[tuple[str, str, str]]:
    """Every request after `since` that is not a read: (verb, resource, name)."""
    return [(r.verb, r.resource, r.name) for r in cluster.requests[since:] if r.verb not in ("get", "list", "")]


def profiles_of(layouts: dict[int, list[str] | None]) -> list[str]:
    """The node's MIG devices per profile and its MIG-off GPUs, as the labels tell them (placements left out)."""
    return sorted([i.split("@")[0] for lay in layouts.values() if lay is not None for i in lay]
                  + ["MIG off"] * sum(1 for lay in layouts.values() if lay is None))


def last_run(tmp_path: Path) -> dict[str, Any]:
    return StateDir(tmp_path / "state").runs(1)[0]


# --- the scenario, end to end ---------------------------------------------------------------------------------------

def test_replan_serves_the_pending_pods_relabels_only_the_changed_node_and_then_changes_nothing(
        k8s_cluster: Any, tmp_path: Path) -> None:
    cluster = k8s_cluster(nodes(), pods=pods(), configmaps=[CM])
    code, doc, out = run(cluster, tmp_path)
    assert code == EXIT_APPLIED and doc["result"] == "applied", out
    assert "places 2 workload(s) now left out" in doc["line"] and "a30-disabled applied (as planned)" in doc["line"]
    assert "frees" not in doc["line"]  # the held nodes' GPUs in use count neither now nor in the plan
    # the busy nodes are held (their pods would stop), the T4's pod too; the control plane is no GPU node at all
    assert set(doc["held"]) == {"a100-mixed", "h100-single", "t4-node"}
    assert "ml/chat-6f7c9d8b4-k2x9p" in doc["held"]["a100-mixed"] and "control-1" not in out
    # only the A30 node is relabelled, after the ConfigMap got its config; the MIG manager was waited for
    assert writes(cluster) == [("patch", "configmaps", "default-mig-parted-config"), ("patch", "nodes", "a30-disabled")]
    now = labels(cluster)
    assert now["a30-disabled"].startswith("migplan-a30") and {k: v for k, v in now.items() if k != "a30-disabled"} == {
        k: v for k, v in BEFORE.items() if k != "a30-disabled"}
    a30 = cluster.get("node", "a30-disabled")
    assert a30["metadata"]["labels"]["nvidia.com/mig.config.state"] == "success"
    cap = a30["status"]["capacity"]
    assert (cap["nvidia.com/mig-2g.12gb"], cap["nvidia.com/mig-1g.6gb"], cap["nvidia.com/gpu"]) == ("1", "1", "1")
    assert [s for _, n, s in cluster.mig_manager.events if n == "a30-disabled"][-2:] == ["pending", "success"]
    config_yaml = cluster.get("configmap", "default-mig-parted-config", "gpu-operator")["data"]["config.yaml"]
    assert all(f"{c}:" in config_yaml for c in ("all-disabled", "all-1g.10gb", "custom-a100", now["a30-disabled"]))
    record = last_run(tmp_path)
    assert record["result"] == "applied" and record["nodes"]["a30-disabled"]["end"] == "as planned"
    assert record["via"] == "gpu-operator" and record["gpus_changed"] == [["a30-disabled", 0], ["a30-disabled", 1]]
    assert StateDir(tmp_path / "state").k8s_inflight() == {}  # the change ended: nothing left for the next run
    first_target = {g["index"]: g["target"] for g in json.loads(
        (tmp_path / "state" / "plans" / f"{record['id']}.json").read_text())["gpus"] if g["host"] == "a30-disabled"}

    # right after: the pods still Pending (no scheduler here), the new devices free for them: nothing changes
    since = len(cluster.requests)
    code, doc, out = run(cluster, tmp_path)
    assert code == EXIT_NOTHING and doc["result"] == "nothing_to_do", out
    assert "changes no node's MIG devices" in doc["line"] and not writes(cluster, since)
    # the labels give counts per node, not per GPU: the config the node's label names, read from the ConfigMap, says
    # which GPU holds what, so the node as read now is the plan's GPU for GPU (from the labels alone the MIG-enabled
    # GPU would be read as GPU 0, while the first plan made GPU 1 the MIG one: tests/test_k8s_configmap.py)
    second = json.loads((tmp_path / "state" / "plans" / f"{last_run(tmp_path)['id']}.json").read_text())
    read_now = {g["index"]: g["current"] for g in second["gpus"] if g["host"] == "a30-disabled"}
    assert {i: profiles_of({0: lay}) for i, lay in read_now.items()} == {
        i: profiles_of({0: lay}) for i, lay in first_target.items()}

    # the scheduler binds the pending pods to the new devices: still nothing to do (they are tied to them)
    for p in pods():
        if p["metadata"]["name"] in PENDING:
            p["spec"]["nodeName"], p["status"] = "a30-disabled", {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True"}]}
            cluster.put({**p, "kind": "Pod"})
    since = len(cluster.requests)
    code, doc, out = run(cluster, tmp_path)
    assert code == EXIT_NOTHING and doc["result"] == "nothing_to_do", out
    assert not writes(cluster, since) and "a30-disabled" in doc["held"]
    assert [r["result"] for r in StateDir(tmp_path / "state").runs()] == ["nothing_to_do", "nothing_to_do", "applied"]


@pytest.mark.parametrize("fault", ["failed", "hang"])
def test_a_failed_or_stuck_config_ends_with_the_node_as_before_and_is_not_retried_in_the_cool_down(
        k8s_cluster: Any, tmp_path: Path, fault: str) -> None:
    cluster = k8s_cluster(nodes(), pods=pods(), configmaps=[CM])
    cluster.mig_manager.outcome["a30-disabled"] = fault
    code, doc, out = run(cluster, tmp_path, "--mig-timeout", "3", "--metrics-file", str(tmp_path / "m.prom"))
    assert code == EXIT_FAILED and doc["result"] == "failed", out
    end = doc["nodes"]["a30-disabled"]
    assert (end["outcome"], end["end"]) == ("rolled-back", "as before")
    assert ("=failed" if fault == "failed" else "not done within 3 s") in end["reason"]
    assert "put back to all-disabled" in end["reason"] and "a30-disabled rolled-back (as before)" in doc["line"]
    assert labels(cluster) == BEFORE
    if fault == "failed":  # a hung MIG manager has not reported yet; the failed one went back to the old config
        assert cluster.get("node", "a30-disabled")["status"]["capacity"]["nvidia.com/gpu"] == "2"
    record = last_run(tmp_path)
    assert record["nodes"]["a30-disabled"]["outcome"] == "rolled-back" and record["exit_code"] == EXIT_FAILED
    assert 'migplan_last_run_result{result="failed"} 1' in (tmp_path / "m.prom").read_text()
    # the next run does not try the same node again within the cool-down (each try drains and relabels it)
    since = len(cluster.requests)
    code, doc, out = run(cluster, tmp_path)
    assert code == EXIT_NOTHING, out
    assert "its change was rolled-back" in doc["held"]["a30-disabled"] and not writes(cluster, since)


def test_a_change_a_killed_run_left_is_put_back_and_its_cordon_lifted(k8s_cluster: Any, tmp_path: Path) -> None:
    """A run killed while the MIG manager worked on a30-disabled left it cordoned, labelled with the new config, and
    the MIG manager reported failed (seeded here: the state directory's k8s-inflight.json as the killed run wrote
    it). The next run puts the previous label back and uncordons (exit 5, repaired), holding the node; the one after
    serves the pending pods."""
    killed = _node("a30-disabled", labels={"nvidia.com/mig.config": "migplan-a30-gone",
                                           "nvidia.com/mig.config.state": "failed"}, unschedulable=True)
    cluster = k8s_cluster([*[n for n in nodes() if n["metadata"]["name"] != "a30-disabled"], killed], pods=pods(),
                          configmaps=[CM])
    sd = StateDir(tmp_path / "state")
    sd.prepare()
    sd.set_k8s_inflight("a30-disabled", {"previous": "all-disabled", "config": "migplan-a30-gone", "cordoned": True})
    code, doc, out = run(cluster, tmp_path)
    assert code == EXIT_APPLIED and doc["result"] == "repaired", out
    assert doc["repaired"][0]["node"] == "a30-disabled" and "put back to all-disabled" in doc["repaired"][0]["what"]
    assert "put back" in doc["held"]["a30-disabled"] and "uncordoned" in doc["repaired"][0]["what"]
    a30 = cluster.get("node", "a30-disabled")
    assert a30["metadata"]["labels"]["nvidia.com/mig.config"] == "all-disabled"
    assert not a30["spec"].get("unschedulable") and sd.k8s_inflight() == {}
    assert writes(cluster) == [("patch", "nodes", "a30-disabled")] * 2  # the label, the uncordon; nothing else
    cluster.mig_manager.wait_idle()
    code, doc, out = run(cluster, tmp_path)
    assert code == EXIT_APPLIED and doc["nodes"]["a30-disabled"]["end"] == "as planned", out


def test_a_change_cut_short_by_an_error_is_left_for_the_next_run(k8s_cluster: Any, tmp_path: Path) -> None:
    """RBAC that lets replan write the ConfigMap but not the node: the label patch is refused (403) and the node ends
    as before, reported failed with the reason; the change's record stays (k8s-inflight.json) for the next run,
    which finds the label as it was and drops it, writing nothing."""
    roles = [d for d in yaml.safe_load_all(RBAC.read_text()) if d["kind"] in ("ClusterRole", "Role")]
    for role in roles:
        for rule in role["rules"]:
            if rule["resources"] == ["nodes"]:
                rule["verbs"] = ["get", "list"]
    cluster = k8s_cluster(nodes(), pods=pods(), configmaps=[CM], rbac={"roles": roles, "enforce": True})
    code, doc, out = run(cluster, tmp_path)
    assert code == EXIT_FAILED, out
    assert doc["nodes"]["a30-disabled"]["outcome"] == "failed" and "Forbidden" in doc["nodes"]["a30-disabled"]["reason"]
    assert labels(cluster) == BEFORE
    assert StateDir(tmp_path / "state").k8s_inflight()["a30-disabled"]["previous"] == "all-disabled"
    since = len(cluster.requests)
    code, doc, out = run(cluster, tmp_path)  # the node failed: held for the cool-down, so nothing is tried
    assert code == EXIT_NOTHING and "left as it is" in doc["repaired"][0]["what"], out
    assert not doc["repaired"][0]["wrote"] and "its change was failed" in doc["held"]["a30-disabled"]
    assert StateDir(tmp_path / "state").k8s_inflight() == {} and not writes(cluster, since)


def test_a_configmap_conflict_is_read_again_and_retried(k8s_cluster: Any, tmp_path: Path) -> None:
    cluster = k8s_cluster(nodes(), pods=pods(), configmaps=[CM])
    cluster.conflict_next("configmap", "gpu-operator", "default-mig-parted-config", times=2)
    code, doc, out = run(cluster, tmp_path)
    assert code == EXIT_APPLIED, out
    assert doc["configmap"]["conflicts"] == 2 and doc["nodes"]["a30-disabled"]["end"] == "as planned"
    assert [r.code for r in cluster.requests if r.verb == "patch" and r.resource == "configmaps"] == [409, 409, 200]


def test_a_configmap_conflict_past_the_retries_changes_no_node_and_the_record_says_so(
        k8s_cluster: Any, tmp_path: Path) -> None:
    cluster = k8s_cluster(nodes(), pods=pods(), configmaps=[CM])
    cluster.conflict_next("configmap", "gpu-operator", "default-mig-parted-config", times=99)
    code, doc, out = run(cluster, tmp_path)
    assert code == EXIT_FAILED and doc["result"] == "failed", out
    assert "no node was changed" in doc["line"] and "Conflict" in doc["line"] and "Traceback" not in out
    assert labels(cluster) == BEFORE and not [w for w in writes(cluster) if w[1] == "nodes"]
    record = last_run(tmp_path)
    assert record["result"] == "failed" and "Conflict" in record["error"]


def test_a_pdb_that_blocks_eviction_leaves_the_node_as_before_and_uncordoned(k8s_cluster: Any, tmp_path: Path) -> None:
    render = copy.deepcopy(next(p for p in pods() if p["metadata"]["name"].startswith("transcode-")))
    render["metadata"].update(name="render-0", labels={"app": "render"})
    render["spec"]["nodeName"] = "a30-disabled"
    pdb = {"metadata": {"name": "render", "namespace": "media"},
           "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "render"}}}}
    cluster = k8s_cluster(nodes(), pods=[*pods(), render], configmaps=[CM], pdbs=[pdb])
    cfg = config(tmp_path, allow_disrupt=True, maintenance_windows=["always"])
    code, doc, out = run(cluster, tmp_path, "--limit", "a30-disabled", cfg=cfg)
    assert code == EXIT_FAILED, out
    end = doc["nodes"]["a30-disabled"]
    assert (end["outcome"], end["end"]) == ("skipped", "as before") and "PodDisruptionBudget" in end["reason"]
    assert [(r.name, r.code) for r in cluster.requests if r.subresource == "eviction"] == [("render-0", 429)]
    assert labels(cluster) == BEFORE and cluster.get("pod", "render-0", "media")
    assert not cluster.get("node", "a30-disabled")["spec"].get("unschedulable")
    assert last_run(tmp_path)["nodes"]["a30-disabled"]["outcome"] == "skipped"


def test_the_dry_run_reads_and_says_what_it_would_write(k8s_cluster: Any, tmp_path: Path) -> None:
    cluster = k8s_cluster(nodes(), pods=pods(), configmaps=[CM])
    code, doc, out = run(cluster, tmp_path, "--dry-run")
    assert code == EXIT_NOTHING and doc["result"] == "would_apply", out
    assert not writes(cluster) and labels(cluster) == BEFORE
    assert [c.split(" patch ")[1].split()[:2] for c in doc["commands"] if " patch " in c] == [
        ["configmaps", "default-mig-parted-config"], ["nodes", "a30-disabled"]]
    assert "event=would-run" in out


def test_live_reads_on_the_command_line_and_their_errors(k8s_cluster: Any, tmp_path: Path) -> None:
    """`-i kubectl` and `--pods kubectl` read the cluster through the adapter with --kubeconfig/--context; a context
    that does not exist, or rules that do not allow the read, are one error line (exit 1), never a traceback."""
    cluster = k8s_cluster(nodes(), pods=pods(), configmaps=[CM])
    kc = ["--kubeconfig", str(cluster.kubeconfig), "--context", "stand-in"]
    r = CliRunner().invoke(app, ["inventory", "check", "-i", "kubectl", *kc])
    assert r.exit_code == 0 and "a30-disabled" in r.stdout and "control-1" not in r.stdout, r.output
    out = tmp_path / "plan.json"
    r = CliRunner().invoke(app, ["propose", "-i", "kubectl", "--pods", "kubectl", *kc, "--out", str(out)])
    assert r.exit_code == 0 and "pods from kubectl get pods" in r.stderr, r.output
    planned = {w["name"]: w for w in json.loads(out.read_text())["workloads"]}
    assert all(planned[f"ml/{p}"]["status"] == "placed" for p in PENDING)
    assert not writes(cluster)
    r = CliRunner().invoke(app, ["propose", "-i", "kubectl", "--kubeconfig", str(cluster.kubeconfig), "--context",
                                 "elsewhere", "--pods", "kubectl"])
    assert r.exit_code == 1 and "context was not found" in r.stderr and "Traceback" not in r.output
    assert r.stderr.count("error:") == 1
    nodes_only = [{"kind": "ClusterRole", "metadata": {"name": "nodes"},
                   "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list"]}]}]
    strict = k8s_cluster(nodes(), pods=pods(), rbac={"roles": nodes_only, "enforce": True})
    r = CliRunner().invoke(app, ["propose", "-i", "kubectl", "--pods", "kubectl", "--kubeconfig",
                                 str(strict.kubeconfig)])
    assert r.exit_code == 1 and "Forbidden" in r.stderr and "RBAC" in r.stderr and "Traceback" not in r.output


# --- the CronJob and its least-privilege RBAC --------------------------------------------------------------------

def _cronjob() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    docs = {d["kind"]: d for d in yaml.safe_load_all(CRONJOB.read_text())}
    return docs["CronJob"], docs["ConfigMap"], docs["PersistentVolumeClaim"]


def test_the_cronjob_runs_replan_through_the_operator_with_its_state_on_the_volume(tmp_path: Path) -> None:
    from migplan.cli.replan_cmd import check_replan_args
    from migplan.config import load_config

    job, cm, pvc = _cronjob()
    assert job["spec"]["concurrencyPolicy"] == "Forbid" and job["spec"]["jobTemplate"]["spec"]["backoffLimit"] == 0
    pod = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    sa = next(d for d in yaml.safe_load_all(RBAC.read_text()) if d["kind"] == "ServiceAccount")["metadata"]
    assert (pod["serviceAccountName"], job["metadata"]["namespace"]) == (sa["name"], sa["namespace"])
    (main,) = pod["containers"]
    args = main["args"]
    check_replan_args(args)  # replan's own parser: every option exists and its value is valid
    assert args[args.index("--via") + 1] == "gpu-operator"
    state = args[args.index("--state-dir") + 1]
    vols = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in main["volumeMounts"]}
    on = next(p for p in mounts if state.startswith(p + "/"))  # the state directory is on the claim's volume
    assert vols[mounts[on]]["persistentVolumeClaim"]["claimName"] == pvc["metadata"]["name"]
    init = " ".join(pod["initContainers"][0]["command"])
    assert f"-m 0700 {state}" in init and f"chmod 0755 {on}" in init  # what the state directory's checks want
    conf = tmp_path / "config.yaml"
    conf.write_text(cm["data"]["config.yaml"])
    loaded = load_config(str(conf))
    assert loaded.replan["cooldown_h"] == 24 and args[args.index("--config") + 1] == f"/etc/migplan/{conf.name}"


@pytest.mark.parametrize(("replan_exit", "job_exit"), [(0, 0), (5, 0), (1, 1), (3, 3), (4, 4), (2, 2)])
def test_the_cronjob_wrapper_counts_applied_as_success(tmp_path: Path, replan_exit: int, job_exit: int) -> None:
    job, _, _ = _cronjob()
    main = job["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    fake = tmp_path / "migplan"
    fake.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{tmp_path}/argv"\nexit {replan_exit}\n')
    fake.chmod(0o755)
    done = subprocess.run([*main["command"], *main["args"]], env={**os.environ, "PATH": f"{tmp_path}:/usr/bin:/bin"},
                          check=False)
    assert done.returncode == job_exit
    assert (tmp_path / "argv").read_text().split("\n")[:-1] == ["replan", *main["args"]]


def test_the_rbac_is_enough_for_a_whole_replan_and_no_more(k8s_cluster: Any, tmp_path: Path) -> None:
    roles = [d for d in yaml.safe_load_all(RBAC.read_text()) if d["kind"] in ("ClusterRole", "Role")]
    cluster = k8s_cluster(nodes(), pods=pods(), configmaps=[CM], rbac={"roles": roles, "enforce": True})
    for verb, what, ns, want in (("list", "nodes", None, "yes"), ("list", "pods", None, "yes"),
                                 ("get", "configmaps/default-mig-parted-config", "gpu-operator", "yes"),
                                 ("patch", "nodes", None, "yes"),
                                 ("create", "pods --subresource=eviction", "ml", "yes"),
                                 ("delete", "pods", "ml", "no"), ("update", "nodes", None, "no"),
                                 ("create", "configmaps", "gpu-operator", "no"), ("list", "secrets", None, "no")):
        got = cluster.kubectl("auth", "can-i", verb, *what.split(), *(["-n", ns] if ns else []))
        assert got.stdout.strip() == want, (verb, what, got.stdout, got.stderr)
    code, doc, out = run(cluster, tmp_path)
    assert code == EXIT_APPLIED, out  # reads, the ConfigMap merge, the label, the waits: all under those rules
    assert not [r for r in cluster.requests if r.code == 403]


# --- without the stand-in: kubectl's answers played, the pure parts ----------------------------------------------

class Reads:
    """kubectl's answers to `get nodes`, `get pods -A` and `get configmaps NAME -n NS` (`configmap`, the MIG manager's:
    CM; None: NotFound) from documents; any other call fails the test."""

    def __init__(self, node_items: list[dict[str, Any]], pod_items: list[dict[str, Any]],
                 configmap: dict[str, Any] | None = CM) -> None:
        self.docs = {"nodes": node_items, "pods": pod_items}
        self.configmap = configmap
        self.calls: list[list[str]] = []

    def run(self, argv: list[str], *, timeout: float, stdin: bytes | None = None) -> Completed:
        args = argv[next(i for i, a in enumerate(argv) if a.startswith("--request-timeout")) + 1:]
        self.calls.append(args)
        if args[:2] == ["get", "configmaps"]:
            cm = self.configmap
            if cm is None or args[2:5] != [cm["metadata"]["name"], "-n", cm["metadata"]["namespace"]]:
                return Completed(tuple(argv), 1, "", f'Error from server (NotFound): configmaps "{args[2]}" not found')
            return Completed(tuple(argv), 0, json.dumps({"apiVersion": "v1", "kind": "ConfigMap", **cm}), "")
        assert args[0] == "get" and args[1] in self.docs, f"a write or an unexpected read: {args}"
        doc = {"apiVersion": "v1", "kind": "List", "items": self.docs[args[1]], "metadata": {"resourceVersion": ""}}
        return Completed(tuple(argv), 0, json.dumps(doc), "")


def replan_played(tmp_path: Path, reads: Any, *, lines: list[str] | None = None, limit: tuple[str, ...] = (),
                  profiles: str | None = None, **replan: Any) -> Any:
    ctx = build_context(config(tmp_path, **replan), None, None)
    req = ReplanRequest(fleet=FleetRequest(limit=limit), state_dir=str(tmp_path / "state"),
                        metrics_file=str(tmp_path / "metrics.prom"), profiles=profiles)
    return replan_gpu_operator(ctx, req, K8sReplan(settle_s=0), report=(lines if lines is not None else []).append,
                               now=dt.datetime(2026, 12, 5, 10, 0, tzinfo=dt.timezone.utc),
                               kubectl=Kubectl(runner=reads))


def _node(name: str, **change: Any) -> dict[str, Any]:
    n = copy.deepcopy(next(x for x in nodes() if x["metadata"]["name"] == name))
    for key, value in change.items():
        if key == "labels":
            n["metadata"]["labels"].update(value)
        elif key == "unschedulable":
            n["spec"] = {"unschedulable": value}
        else:
            n["status"][key] = value
    return n


def test_nodes_a_controller_should_leave_alone_are_held_and_nothing_is_written(tmp_path: Path) -> None:
    """A cordoned A30 (someone works on it) and busy nodes without consent to disrupt: all held, nothing written,
    the pending pods left out with a reason (kubectl's reads played: any write fails the test)."""
    cordoned = _node("a30-disabled", unschedulable=True)
    lines: list[str] = []
    r = replan_played(tmp_path, Reads([*[n for n in nodes() if n["metadata"]["name"] != "a30-disabled"], cordoned],
                                      pods()), lines=lines)
    assert r.exit_code == EXIT_NOTHING and r.result in ("nothing_to_do", "not_applied"), r.line
    assert "cordoned" in r.via["held"]["a30-disabled"]
    assert any(ln.startswith("info: event=held node=a30-disabled") for ln in lines)
    # the pending pods' profiles exist only on the A30: left out, said in the plan, and no node changed
    assert {w.name for w in r.plan.workloads if w.status != "placed"} == {f"ml/{p}" for p in PENDING}


def test_measured_profiles_size_the_pods_they_name(tmp_path: Path) -> None:
    """`-p DIR` as `collect --prometheus --workload-name owner` writes it: the pending pod's Deployment measured at a
    9,000 MiB peak is sized by it (with headroom), not by its request; the others by what they request."""
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "prom.yaml").write_text(yaml.safe_dump({"version": 1, "kind": "migplan/profiles",
        "workloads": [{"name": "ml/ocr", "memory_mib": {"p50": 7000, "p95": 8500, "p99": 8900, "max": 9000},
                       "observed": {"gpu_model": "A30", "mig_profile": "2g.12gb", "samples": 600}}]}))
    lines: list[str] = []
    cordoned = [_node("a30-disabled", unschedulable=True) if n["metadata"]["name"] == "a30-disabled" else n
                for n in nodes()]  # nothing may change: the run only plans
    r = replan_played(tmp_path, Reads(cordoned, pods()), lines=lines, profiles=str(tmp_path / "profiles"))
    assert any("(1 sized as measured, 5 as requested)" in ln for ln in lines), lines
    ocr = next(w for w in r.plan.workloads if w.name == f"ml/{PENDING[0]}")
    assert ocr.memory_mib > 9000 and ocr.status != "placed"  # sized by its peak plus headroom; the A30 is held


@pytest.mark.parametrize(("configmap", "note"), [
    (None, "info: event=note the MIG manager's ConfigMap gpu-operator/default-mig-parted-config does not exist: "),
    ({**CM, "data": {"config.yaml": CM["data"]["config.yaml"].replace('"1g.5gb": 2', '"1g.5gb": 3')}},
     "info: event=note node 'a100-mixed': nvidia.com/mig.config='custom-a100' of ConfigMap "
     "gpu-operator/default-mig-parted-config gives GPU 0: 3g.20gb x1, 2g.10gb x1, 1g.5gb x3; GPU 1: MIG off, but"),
    (CM, None)])
def test_replan_says_where_the_configmap_cannot_tell_a_nodes_gpus(tmp_path: Path, configmap: dict[str, Any] | None,
                                                                   note: str | None) -> None:
    """The ConfigMap replan writes also tells which GPU holds what (tests/test_k8s_configmap.py): where it is not there,
    or a node's config in it disagrees with the node's labels, a note says so and the GPUs are inferred from the
    labels' counts; a ConfigMap that agrees is no line. (The A30 is cordoned: the run only plans.)"""
    lines: list[str] = []
    cordoned = [_node("a30-disabled", unschedulable=True) if n["metadata"]["name"] == "a30-disabled" else n
                for n in nodes()]
    replan_played(tmp_path, Reads(cordoned, pods(), configmap), lines=lines)
    notes = [ln for ln in lines if ln.startswith("info: event=note")]
    assert (notes == []) if note is None else (len(notes) == 1 and notes[0].startswith(note)), lines


@pytest.mark.parametrize("check", ["labels_only", "unadvertised"])
def test_a_node_planned_for_no_change_or_for_what_it_cannot_advertise_is_held_and_planned_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, check: str) -> None:
    """The labels cannot tell placements apart (a node whose plan keeps its counts is no change), and a node's MIG
    strategy may not advertise a planned layout: either holds the node and plans again. Forced here by taking the first
    plan's changing node (a30-disabled) as one; the run plans again with it held, and writes nothing."""
    seen: list[list[str]] = []
    real = getattr(holds, check)

    def first_change_caught(gpus: Any, *more: Any) -> Any:
        gpus = list(gpus)
        out = real(gpus, *more)
        changing = holds.changing_nodes(gpus)
        if not seen and changing:
            out = sorted({*out, *changing}) if check == "labels_only" else {**out, **{n: "forced" for n in changing}}
        seen.append(list(out))
        return out

    monkeypatch.setattr(replan_k8s.holds, check, first_change_caught)
    r = replan_played(tmp_path, Reads(nodes(), pods()))
    assert seen[0] == ["a30-disabled"] and len(seen) == 2  # planned twice
    assert r.exit_code == EXIT_NOTHING and "a30-disabled" in r.via["held"], r.line
    assert not [g for g in r.plan.gpus if g.actions]


def test_a_cluster_that_cannot_be_read_is_a_recorded_failure(tmp_path: Path) -> None:
    class Down:
        def run(self, argv: list[str], *, timeout: float, stdin: bytes | None = None) -> Completed:
            return Completed(tuple(argv), 1, "", "The connection to the server 127.0.0.1:1 was refused - did you "
                                                 "specify the right host or port?\n")

    r = replan_played(tmp_path, Down())
    assert (r.result, r.exit_code) == ("failed", EXIT_FAILED) and "cannot read the cluster" in r.line
    assert StateDir(tmp_path / "state").runs(1)[0]["result"] == "failed"
    assert 'migplan_last_run_result{result="failed"} 1' in (tmp_path / "metrics.prom").read_text()


def test_files_and_ssh_collection_are_refused_with_via_gpu_operator(tmp_path: Path) -> None:
    ctx = build_context(config(tmp_path), None, None)
    for req in (ReplanRequest(fleet=FleetRequest(inventory="nodes.json")), ReplanRequest(pods="pods.json"),
                ReplanRequest(collect=True)):
        with pytest.raises(InputError):
            replan_gpu_operator(ctx, dataclasses.replace(req, state_dir=str(tmp_path / "s")), K8sReplan())
    r = CliRunner().invoke(app, ["replan", "--via", "gpu-operator", "-i", "nodes.json", "--state-dir",
                                 str(tmp_path / "s")])
    assert r.exit_code == 2 and "reads the cluster's nodes and pods live" in r.output


# --- the pure parts ------------------------------------------------------------------------------------------------

A100 = "A100-SXM4-40GB"


def gpu(index: int, current: list[str] | None, target: list[str] | None, host: str = "n1") -> GpuPlan:
    cur = Layout.parse(current) if current is not None else None
    tgt = Layout.parse(target) if target is not None else None
    st = GpuState(host=host, index=index, model=A100, mig_enabled=cur is not None, layout=cur)
    return GpuPlan(st, tgt, tuple(diff(cur, tgt, gpu=st.key, architecture="ampere")))


def test_placements_alone_are_no_change_counts_are() -> None:
    swapped = [gpu(0, ["3g.20gb@0"], None), gpu(1, None, ["3g.20gb@4"])]  # the same counts on the node
    moved = [gpu(0, ["1g.5gb@0", "1g.5gb@1"], ["1g.5gb@5", "1g.5gb@6"])]
    grown = [gpu(0, ["1g.5gb@0"], ["1g.5gb@0", "1g.5gb@1"], host="n2")]
    assert holds.labels_only([*swapped, *moved]) == ["n1"] and holds.changing_nodes([*swapped, *moved]) == []
    assert holds.changing_nodes(grown) == ["n2"] and holds.labels_only(grown) == []


def test_what_a_strategy_cannot_advertise() -> None:
    mixed = [gpu(0, None, ["3g.20gb@0", "2g.10gb@4"])]
    assert holds.unadvertised(mixed, {"n1": "mixed"}) == {}
    assert "single" in holds.unadvertised(mixed, {"n1": "single"})["n1"]
    assert "none" in holds.unadvertised(mixed, {})["n1"]  # no strategy label: GFD's default, none
    one_profile = [gpu(0, None, ["3g.20gb@0", "3g.20gb@4"]), gpu(1, None, ["3g.20gb@0", "3g.20gb@4"])]
    assert holds.unadvertised(one_profile, {"n1": "single"}) == {}
    empty_gpu = [gpu(0, ["1g.5gb@0"], ["1g.5gb@0", "1g.5gb@1"]), gpu(1, None, [])]
    assert "gives it 1g.5gb" in holds.unadvertised(empty_gpu, {"n1": "single"})["n1"]  # and a GPU without instances
    off = [gpu(0, ["1g.5gb@0"], None)]
    assert holds.unadvertised(off, {"n1": "single"}) == {}  # MIG off everywhere: whole GPUs are advertised


def _view(name: str = "n1", labels: dict[str, str] | None = None, **kw: Any) -> NodeView:
    return NodeView(name, "1", {"nvidia.com/mig.config.state": "success", **(labels or {})}, {}, **kw)


def test_the_nodes_held_and_why() -> None:
    busy = [PodView("ml", "p", "n5", "Running", {"nvidia.com/mig-1g.5gb": 1}),
            PodView("ml", "done", "n6", "Succeeded", {"nvidia.com/gpu": 1})]
    views = {"n1": _view("n1", {"nvidia.com/mig.config.state": "pending"}),
             "n2": _view("n2", {"nvidia.com/mig.config.state": "failed"}), "n3": _view("n3", unschedulable=True),
             "n4": _view("n4", ready=False), "n5": _view("n5"), "n6": _view("n6"), "n7": _view("n7", ready=True)}
    got = {h.node: h for h in holds.nodes_to_hold(views, busy, views, may_disrupt=False)}
    assert sorted(got) == ["n1", "n2", "n3", "n4", "n5"]
    assert got["n2"].warn and got["n4"].warn and not got["n5"].warn and "ml/p" in got["n5"].reason
    assert "n5" not in {h.node for h in holds.nodes_to_hold(views, busy, views, may_disrupt=True)}


@pytest.mark.parametrize(("conditions", "ready"), [
    ([{"type": "Ready", "status": "True"}], True), ([{"type": "Ready", "status": "Unknown"}], False),
    ([{"type": "MemoryPressure", "status": "False"}], None), (None, None)])
def test_the_ready_condition_is_read(conditions: Any, ready: bool | None) -> None:
    assert node_view({"metadata": {"name": "n"}, "status": {"conditions": conditions}}).ready is ready


@pytest.mark.parametrize("conditions", ["Ready", [["Ready"]], [{"type": "Ready", "status": 1}], [{}] * 65])
def test_hostile_conditions_are_clear_errors(conditions: Any) -> None:
    with pytest.raises(BadObject, match="node 'n'"):
        node_view({"metadata": {"name": "n"}, "status": {"conditions": conditions}})


def test_live_reads_go_through_the_adapter(tmp_path: Path) -> None:
    """`-i kubectl` and `--pods kubectl`: `kubectl get nodes -o json` / `kubectl get pods --all-namespaces -o json`
    with the kubeconfig and context given."""
    from migplan.commands.k8s_live import read_nodes, read_pods_live

    reads = Reads(nodes(), pods())
    kube = Kubectl(KubectlOptions(kubeconfig="/k/config", context="prod"), runner=reads)
    ctx = build_context(config(tmp_path), None, None)
    views, inventory = read_nodes(None, ctx.catalog, kube=kube)
    assert {h.name for h in inventory.hosts} == set(BEFORE) and "control-1" in views
    demand, seen = read_pods_live(None, kube=kube)
    assert demand.source == "kubectl get pods" and len(demand.pods) == 6 and len(seen) == len(pods())
    assert reads.calls == [["get", "nodes", "-o", "json"], ["get", "pods", "--all-namespaces", "-o", "json"]]
