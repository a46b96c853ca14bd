"""apply --via gpu-operator, the pure parts: nodes and pods read as untrusted data, each node's decision, the
capacity the device plugin must advertise, the MIG manager's states, the patches, and the kubectl adapter's argv
and error reasons (with a runner that plays kubectl's answers; the real kubectl against the stand-in is in
tests/test_apply_gpu_operator.py)."""

from __future__ import annotations

from typing import Any

import pytest

from migplan.adapters.kubectl import Kubectl, KubectlError, KubectlOptions, parse_object
from migplan.adapters.runner import Completed
from migplan.catalog.layout import Layout
from migplan.inventory.model import DeclaredGpu, Host
from migplan.k8s import rollout
from migplan.k8s.objects import BadObject, NodeView, PodView, node_view, pod_view
from migplan.model.diff import diff
from migplan.model.gpu_plan import GpuPlan
from migplan.model.state import GpuState

A100 = "A100-SXM4-40GB"


def gpu(index: int, current: list[str] | None, target: list[str] | None, host: str = "n1") -> GpuPlan:
    cur = Layout.parse(current) if current is not None else None
    tgt = Layout.parse(target) if target is not None else None
    st = GpuState(host=host, index=index, model=A100, mig_enabled=cur is not None, layout=cur)
    return GpuPlan(st, tgt, tuple(diff(cur, tgt, gpu=st.key, architecture="ampere")))


def host(*layouts: list[str] | None, name: str = "n1") -> Host:
    return Host(name=name, address=name, gpus=tuple(
        DeclaredGpu(i, A100, mig_enabled=lay is not None, layout=Layout.parse(lay) if lay is not None else None)
        for i, lay in enumerate(layouts)))


def view(labels: dict[str, str] | None = None, capacity: dict[str, str] | None = None, name: str = "n1") -> NodeView:
    return NodeView(name, "7", {"nvidia.com/mig.config": "all-disabled", "nvidia.com/mig.config.state": "success",
                                "nvidia.com/mig.strategy": "mixed", **(labels or {})}, capacity or {})


PLAN = [gpu(0, ["1g.5gb@0"], ["3g.20gb@0"]), gpu(1, None, None)]


def decide(live: NodeView | None = None, h: Host | None = None, pods: list[PodView] | None = None,
           **kw: Any) -> rollout.NodeDecision:
    args = {"allow_disrupt": False, "drain": "when-busy", **kw}
    h = h if h is not None else host(["1g.5gb@0"], None)
    return rollout.decide_node("n1", PLAN, "migplan-x", live or view(), h, pods or [], **args)


def test_a_node_as_the_plan_assumed_is_changed_with_its_previous_label_kept() -> None:
    d = decide()
    assert (d.action, d.config, d.previous, d.drain) == ("change", "migplan-x", "all-disabled", False)


def test_a_node_already_as_planned_is_unchanged_and_nothing_planned_is_unchanged() -> None:
    assert decide(h=host(["3g.20gb@4"], None)).action == "unchanged"  # counts, not placements
    assert rollout.decide_node("n1", [gpu(0, None, None)], "c", view(), host(None), [], allow_disrupt=False,
                               drain="never").action == "unchanged"


def test_a_node_that_changed_since_the_plan_is_refused_saying_what_changed() -> None:
    d = decide(h=host(["2g.10gb@0"], None))
    assert d.action == "refused"
    assert "1g.5gb x1" in d.reason and "2g.10gb x1" in d.reason


def test_a_node_gone_or_without_labels_is_refused_and_one_being_changed_is_skipped() -> None:
    assert rollout.decide_node("n1", PLAN, "c", None, None, [], allow_disrupt=True, drain="never").action == "refused"
    for state in ("pending", "rebooting"):
        d = decide(view({"nvidia.com/mig.config.state": state}))
        assert d.action == "skipped" and state in d.reason


def _pod(node: str = "n1", phase: str = "Running", res: str = "nvidia.com/mig-1g.5gb") -> PodView:
    return pod_view({"metadata": {"name": "p", "namespace": "ml"}, "spec": {"nodeName": node, "containers": [
        {"name": "c", "resources": {"limits": {res: "1", "cpu": "2"}}}]}, "status": {"phase": phase}})


def test_gpu_pods_block_without_allow_disrupt_and_are_drained_with_it() -> None:
    d = decide(pods=[_pod()])
    assert d.action == "skipped" and "ml/p" in d.reason and "--allow-disrupt" in d.reason
    d = decide(pods=[_pod()], allow_disrupt=True)
    assert d.action == "change" and d.drain and [p.ref for p in d.pods] == ["ml/p"]
    assert not decide(pods=[_pod()], allow_disrupt=True, drain="never").drain
    assert decide(allow_disrupt=True, drain="always").drain
    # pods elsewhere, done, or without NVIDIA devices do not count
    for p in (_pod(node="n2"), _pod(phase="Succeeded"), _pod(res="cpu")):
        assert decide(pods=[p]).action == "change"


def test_expected_capacity_per_strategy_and_its_differences() -> None:
    lays = [Layout.parse(["3g.20gb@0", "1g.5gb+me@6"]), None]
    assert rollout.expected_capacity(lays, "mixed") == {"nvidia.com/gpu": 1, "nvidia.com/mig-3g.20gb": 1,
                                                       "nvidia.com/mig-1g.5gb.me": 1}
    assert rollout.expected_capacity(lays, "none") == {"nvidia.com/gpu": 2}
    assert rollout.expected_capacity(lays, "single") is None
    assert rollout.expected_capacity([Layout.parse(["3g.20gb@0", "3g.20gb@4"])] * 2, "single") == {
        "nvidia.com/gpu": 4}
    want = {"nvidia.com/gpu": 1, "nvidia.com/mig-3g.20gb": 1}
    assert rollout.capacity_differences(want, {"nvidia.com/gpu": "1", "nvidia.com/mig-3g.20gb": "1",
                                               "nvidia.com/mig-1g.5gb": "0"}) == []
    diffs = rollout.capacity_differences(want, {"nvidia.com/gpu": "1", "nvidia.com/mig-1g.5gb": "2"})
    assert diffs == ["nvidia.com/mig-1g.5gb: 2 advertised, the plan wants 0",
                     "nvidia.com/mig-3g.20gb: not advertised, the plan wants 1"]


def test_states_backoff_and_patches() -> None:
    assert [rollout.state_verdict(s) for s in ("success", "failed", "pending", "rebooting", None)] == [
        "success", "failed", "wait", "wait", "wait"]
    waits = [rollout.backoff(i) for i in range(12)]
    assert waits[0] == 1.0 and waits == sorted(waits) and max(waits) == rollout.BACKOFF_MAX_S
    assert rollout.label_patch("c") == {"metadata": {"labels": {"nvidia.com/mig.config": "c",
                                                                "nvidia.com/mig.config.state": None}}}
    assert rollout.cordon_patch(False) == {"spec": {"unschedulable": None}}


@pytest.mark.parametrize("obj, says", [
    ("x", "expected an object"),
    ({"metadata": {"name": 3}}, "metadata.name"),
    ({"metadata": {"name": "n", "labels": {"a": 1}}}, "metadata.labels.a"),
    ({"metadata": {"name": "n"}, "spec": {"unschedulable": "yes"}}, "unschedulable"),
])
def test_hostile_nodes_are_clear_errors(obj: Any, says: str) -> None:
    with pytest.raises(BadObject, match=says):
        node_view(obj)


def test_hostile_pods_are_clear_errors() -> None:
    with pytest.raises(BadObject, match="not a whole number"):
        pod_view({"metadata": {"name": "p"}, "spec": {"nodeName": "n", "containers": [
            {"resources": {"limits": {"nvidia.com/gpu": "1.5"}}}]}})
    with pytest.raises(BadObject, match="containers is not a list"):
        pod_view({"metadata": {"name": "p"}, "spec": {"containers": {}}})


# --- the adapter -----------------------------------------------------------------------------------

class Played:
    """Answers each kubectl call with the next (exit code, stdout, stderr)."""

    def __init__(self, *answers: tuple[int, str, str]) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[list[str], bytes | None]] = []

    def run(self, argv: list[str], *, timeout: float, stdin: bytes | None = None) -> Completed:
        self.calls.append((list(argv), stdin))
        code, out, err = self.answers.pop(0)
        return Completed(tuple(argv), code, out, err)


def test_argv_carries_kubeconfig_context_and_a_timeout_and_refuses_bad_names() -> None:
    k = Kubectl(KubectlOptions(kubeconfig="/k/cfg", context="stand-in", request_timeout=12))
    assert k.argv("get", "nodes") == ["kubectl", "--kubeconfig", "/k/cfg", "--context", "stand-in",
                                      "--request-timeout=12s", "get", "nodes"]
    with pytest.raises(Exception, match="not a Kubernetes name"):
        k.get_args("nodes", "a;rm -rf /")
    with pytest.raises(Exception, match="unknown kind"):
        k.get_args("secrets")
    with pytest.raises(Exception, match="not a context name"):
        Kubectl(KubectlOptions(context="-x\n"))


@pytest.mark.parametrize("code, err, reason", [
    (127, "kubectl: command not found", "missing"),
    (1, 'Error from server (Forbidden): nodes is forbidden: User "x" cannot list resource', "forbidden"),
    (1, 'Error from server (NotFound): configmaps "x" not found', "not-found"),
    (1, "Error from server (Conflict): Operation cannot be fulfilled on configmaps", "conflict"),
    (1, "Error from server (TooManyRequests): Cannot evict pod as it would violate the pod's disruption budget.",
     "too-many-requests"),
    (1, "The connection to the server 127.0.0.1:1 was refused - did you specify the right host or port?",
     "unreachable"),
    (1, 'error: context "nope" does not exist', "config"),
])
def test_errors_get_their_reason(code: int, err: str, reason: str) -> None:
    k = Kubectl(runner=Played((code, "", err)))
    with pytest.raises(KubectlError) as caught:
        k.get("nodes")
    assert caught.value.reason == reason


def test_answers_are_untrusted_json_of_the_expected_kind() -> None:
    for text, says in (("not json", "not JSON"), ("[1]", "not a JSON object"), ('{"kind": "PodList"}', "expected"),
                       ("[" * 5000 + "]" * 5000, "nested too deep"), ('{"kind": "NodeList", "items": 3}', "items")):
        with pytest.raises(KubectlError, match=says):
            parse_object(text, ("List", "NodeList"), "kubectl get nodes")
    k = Kubectl(runner=Played((0, '{"kind": "List", "items": []}', "")))
    assert k.get("nodes") == {"kind": "List", "items": []}


def test_evict_posts_an_eviction_on_stdin() -> None:
    played = Played((0, "", ""))
    Kubectl(runner=played).evict("ml", "p-1")
    argv, stdin = played.calls[0]
    assert argv[-5:] == ["create", "--raw", "/api/v1/namespaces/ml/pods/p-1/eviction", "-f", "-"]
    assert stdin is not None and b'"kind":"Eviction"' in stdin
