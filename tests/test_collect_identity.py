"""Workload identity from /proc facts: real cgroup paths of kubelet (both drivers), docker, containerd, podman
and systemd; MIGPLAN_WORKLOAD; user rules; executables. And the readers of those facts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from migplan.adapters.procfs import local_facts, remote_facts
from migplan.adapters.runner import LocalRunner
from migplan.commands.collect import load_rules
from migplan.errors import InputError
from migplan.history.identity import ProcessFacts, clean, container_id, identify, parse_rules, pod_uid, pod_workload
from migplan.names import WORKLOAD_NAME

CID = "4a8bfa3c5e6d7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7a8"
UID = "8f1a2b3c-1d2e-4f5a-9b8c-7d6e5f4a3b2c"

# Shapes as the kubelet, docker, containerd, podman and systemd write them (cgroup v1 lines are
# ID:CONTROLLERS:PATH, the v2 line is 0::PATH).
KUBELET_CGROUPFS_V1 = f"""12:memory:/kubepods/burstable/pod{UID}/{CID}
11:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}
1:name=systemd:/kubepods/burstable/pod{UID}/{CID}"""
KUBELET_CGROUPFS_BESTEFFORT_V2 = f"0::/kubepods/besteffort/pod{UID}/{CID}"
KUBELET_SYSTEMD_V2 = (f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{UID.replace('-', '_')}"
                      f".slice/cri-containerd-{CID}.scope")
KUBELET_SYSTEMD_GUARANTEED_CRIO = f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope"
DOCKER_CGROUPFS_V1 = f"11:cpu,cpuacct:/docker/{CID}\n1:name=systemd:/docker/{CID}"
DOCKER_SYSTEMD_V2 = f"0::/system.slice/docker-{CID}.scope"
CONTAINERD_NERDCTL_V2 = f"0::/default/{CID}"
PODMAN_ROOTLESS_V2 = f"0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope/container"
SYSTEMD_SERVICE_V2 = "0::/system.slice/vllm-server.service"
SYSTEMD_USER_SERVICE_V2 = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service"
SESSION_V2 = "0::/user.slice/user-1000.slice/session-3.scope"
CGROUP_V1_SYSTEMD_SERVICE = "12:memory:/system.slice/triton.service\n1:name=systemd:/system.slice/triton.service"


@pytest.mark.parametrize("cgroup", [KUBELET_CGROUPFS_V1, KUBELET_CGROUPFS_BESTEFFORT_V2, KUBELET_SYSTEMD_V2,
                                    KUBELET_SYSTEMD_GUARANTEED_CRIO])
def test_kubernetes_pod_uid_from_either_cgroup_driver(cgroup: str) -> None:
    assert pod_uid(cgroup) == UID
    assert identify(ProcessFacts(1, ("python3", "serve.py"), cgroup=cgroup)).workload == f"k8s-pod:{UID}"


def test_kubernetes_pod_by_namespace_and_name_when_the_downward_api_gives_them() -> None:
    facts = ProcessFacts(1, ("python3",), cgroup=KUBELET_SYSTEMD_V2,
                         env={"POD_NAMESPACE": "inference", "POD_NAME": "chat-llama3-7d9f8c6b5-x2x4z"})
    assert identify(facts).workload == "k8s:inference/chat-llama3"  # the ReplicaSet's suffix dropped


@pytest.mark.parametrize(("name", "workload"), [("chat-7d9f8c6b5-x2x4z", "chat"),
                                                 ("nightly-embed-8kq2p", "nightly-embed"),
                                                 ("redis-0", "redis-0"), ("solo", "solo")])
def test_pod_names_lose_only_generated_suffixes(name: str, workload: str) -> None:
    assert pod_workload(name) == workload


@pytest.mark.parametrize("cgroup", [DOCKER_CGROUPFS_V1, DOCKER_SYSTEMD_V2, CONTAINERD_NERDCTL_V2, PODMAN_ROOTLESS_V2])
def test_containers_outside_kubernetes(cgroup: str) -> None:
    assert container_id(cgroup) == CID
    assert identify(ProcessFacts(1, ("python3",), cgroup=cgroup)).workload == f"container:{CID[:12]}"


@pytest.mark.parametrize(("cgroup", "unit"), [(SYSTEMD_SERVICE_V2, "vllm-server.service"),
                                              (SYSTEMD_USER_SERVICE_V2, "jupyter.service"),
                                              (CGROUP_V1_SYSTEMD_SERVICE, "triton.service")])
def test_systemd_services(cgroup: str, unit: str) -> None:
    assert identify(ProcessFacts(1, ("/usr/bin/python3", "x.py"), cgroup=cgroup)).workload == f"systemd:{unit}"


def test_a_login_session_is_not_a_workload_the_executable_is() -> None:
    facts = ProcessFacts(1, ("/usr/bin/python3", "-u", "/home/a/train.py", "--lr", "3"), exe="/usr/bin/python3.11",
                         cgroup=SESSION_V2)
    assert identify(facts).workload == "exe:python3.11:train.py"
    assert identify(ProcessFacts(2, ("python", "-m", "vllm.entrypoints.api_server"), cgroup=SESSION_V2)).workload == \
        "exe:python:vllm.entrypoints.api_server"
    assert identify(ProcessFacts(3, ("/opt/tritonserver/bin/tritonserver", "--model-repository=/m"))).workload == \
        "exe:tritonserver"
    assert identify(ProcessFacts(4)) .workload == "unknown"


def test_migplan_workload_wins_then_rules_then_the_rest() -> None:
    rules = parse_rules({"version": 1, "rules": [{"match": r"serve\.py --model (\S+)", "workload": r"llm-\1"}]},
                        "r.yaml")
    base = ProcessFacts(1, ("python3", "serve.py", "--model", "llama3-8b"), cgroup=KUBELET_SYSTEMD_V2)
    assert identify(base, rules).workload == "llm-llama3-8b"
    with_env = ProcessFacts(1, base.cmdline, cgroup=base.cgroup, env={"MIGPLAN_WORKLOAD": "chat prod"})
    assert identify(with_env, rules).workload == "chat_prod"  # cleaned to a valid name
    assert identify(base).workload == f"k8s-pod:{UID}"


@pytest.mark.parametrize("doc", [None, {"version": 2, "rules": []}, {"version": 1, "rules": [{"match": "("}]},
                                 {"version": 1, "rules": [{"match": "(", "workload": "x"}]},
                                 {"version": 1, "rules": [{"match": "a", "workload": " "}]}])
def test_bad_rules_are_input_errors(doc: object) -> None:
    with pytest.raises(InputError, match="r.yaml"):
        parse_rules(doc, "r.yaml")


def test_rules_file(tmp_path: Path) -> None:
    f = tmp_path / "rules.yaml"
    f.write_text(yaml.safe_dump({"version": 1, "rules": [{"match": "x", "workload": "y"}]}))
    assert load_rules(str(f))[0].workload == "y"
    f.write_text("version: 1\nrules: [\n")
    with pytest.raises(InputError, match="not valid YAML"):
        load_rules(str(f))


@pytest.mark.parametrize("raw", ["a b", "ünïcode", "../../etc", "x" * 400, ":", "ok-name_1.2/x:y"])
def test_clean_names_are_valid_workload_names(raw: str) -> None:
    assert WORKLOAD_NAME.fullmatch(clean(raw))


# --- the readers: this host's /proc, and a host's /proc over a runner ----------------------------------

@pytest.fixture
def child() -> object:
    env = {**os.environ, "MIGPLAN_WORKLOAD": "probe-ok", "POD_NAME": "p-1", "OTHER": "secret"}
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "arg with space"], env=env)
    time.sleep(0.2)
    yield proc
    proc.kill()
    proc.wait()


def test_local_facts_read_this_hosts_proc(child: subprocess.Popen[bytes]) -> None:  # type: ignore[type-arg]
    facts = local_facts(child.pid)
    assert facts.cmdline[-1] == "arg with space" and facts.exe and "python" in facts.exe
    assert facts.env == {"MIGPLAN_WORKLOAD": "probe-ok", "POD_NAME": "p-1"}  # only the identity keys
    assert identify(facts).workload == "probe-ok"
    assert local_facts(2**22 + 12345).cmdline == ()  # a process that is gone: no facts, no error


def test_remote_facts_over_a_runner_match_local_ones(child: subprocess.Popen[bytes]) -> None:  # type: ignore[type-arg]
    got = remote_facts(LocalRunner(), [child.pid, 2**22 + 12345], names={child.pid: "python3"})
    here = local_facts(child.pid)
    assert got[child.pid].cmdline == here.cmdline and got[child.pid].env == here.env
    assert got[child.pid].cgroup.strip() == here.cgroup.strip()
    assert got[2**22 + 12345].cmdline == ()


def test_remote_facts_cannot_be_forged_by_a_process(tmp_path: Path) -> None:
    """An argument that looks like another pid's record stays this pid's argument."""
    other = os.getpid()
    evil = f"/proc/{other}/environ:MIGPLAN_WORKLOAD=stolen"
    forged_cgroup = f"\n/proc/{other}/cgroup:0::/x"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", evil, forged_cgroup])
    try:
        time.sleep(0.2)
        got = remote_facts(LocalRunner(), [proc.pid, other])
        assert got[proc.pid].cmdline[-2] == evil
        assert got[other].env.get("MIGPLAN_WORKLOAD") != "stolen"
        assert "0::/x" not in got[other].cgroup
    finally:
        proc.kill()
        proc.wait()
