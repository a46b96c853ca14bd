"""The MIG manager's ConfigMap tells which GPU of a node holds which MIG devices (docs/kubernetes.md, "What the labels
cannot tell"): a node whose `nvidia.com/mig.config` names a config of the ConfigMap read, in state `success`, gets each
GPU's counts from that config's entries, checked against the labels' node totals; only the placement on each GPU is
inferred.

The node `a100-real` (an A100-SXM4-40GB under `mig.strategy=mixed`) really holds 2 x 3g.20gb on GPU 0 and 7 x 1g.5gb on
GPU 1; from its labels alone (7 x 1g.5gb, 2 x 3g.20gb on the node) migplan infers the opposite. Two Running pods hold
its 3g.20gb devices and a Pending pod wants a 2g.10gb, so the plan changes the GPU of 1g.5gb devices only: the
exported config keeps GPU 0's entry exactly as the ConfigMap has it, so the MIG manager (which skips a GPU already
as asked: NVIDIA/mig-parted `cmd/nvidia-mig-parted/apply/config.go`) touches GPU 1 only. Read from files
(`--mig-configmap FILE`), through the adapter with played answers, and live from the stand-in (tests/k8s_sim, slow).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from migplan import mig_parted, yamljson
from migplan.adapters.kubectl import Kubectl
from migplan.adapters.runner import Completed
from migplan.catalog import builtin_catalog
from migplan.cli.app import app
from migplan.commands.k8s_live import LiveConfigMap, read_nodes
from migplan.errors import InputError
from migplan.inventory import Inventory, load_inventory

CAT = builtin_catalog()
DATA = Path(__file__).resolve().parent / "data" / "k8s"
NODE = "a100-real"
CONFIG = "a100-real-layout"
WHO = "ConfigMap gpu-operator/default-mig-parted-config"
REAL = """\
version: v1
mig-configs:
  all-disabled:
    - devices: all
      mig-enabled: false
  a100-real-layout:
    - devices: [0]
      mig-enabled: true
      mig-devices: {"3g.20gb": 2}
    - devices: [1]
      mig-enabled: true
      mig-devices: {"1g.5gb": 7}
"""
REAL_GPUS = {0: {"3g.20gb": 2}, 1: {"1g.5gb": 7}}  # what each GPU holds, as the config says


def node(labels: dict[str, str] | None = None) -> dict[str, Any]:
    """`a100-real` as GFD and the MIG manager label it (from tests/data/k8s/mixed-nodes.json's a100-mixed)."""
    items = json.loads((DATA / "mixed-nodes.json").read_text())["items"]
    n = copy.deepcopy(next(i for i in items if i["metadata"]["name"] == "a100-mixed"))
    n["metadata"]["name"] = NODE
    kept = {k: v for k, v in n["metadata"]["labels"].items() if not k.startswith("nvidia.com/mig-")}
    n["metadata"]["labels"] = {**kept, "kubernetes.io/hostname": NODE, "nvidia.com/mig.config": CONFIG,
                               "nvidia.com/mig.config.state": "success", "nvidia.com/mig-3g.20gb.count": "2",
                               "nvidia.com/mig-1g.5gb.count": "7", **(labels or {})}
    n["status"]["capacity"] = {"cpu": "64", "memory": "527952828Ki", "pods": "110", "nvidia.com/gpu": "0",
                               "nvidia.com/mig-3g.20gb": "2", "nvidia.com/mig-1g.5gb": "7"}
    n["status"]["addresses"] = [{"type": "InternalIP", "address": "10.240.3.21"}]
    return n


def pods(*, pending: bool = True) -> list[dict[str, Any]]:
    """Two Running pods holding the node's 3g.20gb devices and, with `pending`, one Pending pod wanting a 2g.10gb;
    else one Running pod holding a 1g.5gb (so GPU 1 is not freed: nothing to change)."""
    chat = json.loads((DATA / "mixed-pods.json").read_text())["items"][0]  # ml/chat-...: a Running 3g.20gb pod
    out = []
    for i, name in enumerate(("chat-6f7c9d8b4-k2x9p", "chat-6f7c9d8b4-z7q4w")):
        p = copy.deepcopy(chat)
        p["metadata"].update(name=name, uid=f"2b7e4c1a-0000-4000-8000-00000000010{i}")
        p["spec"]["nodeName"] = NODE
        out.append(p)
    p = copy.deepcopy(chat)
    p["metadata"].update(name="embed-5d8f7c6b9-m4n8v", uid="2b7e4c1a-0000-4000-8000-000000000109")
    p["metadata"]["ownerReferences"][0]["name"] = "embed-5d8f7c6b9"
    wants = "nvidia.com/mig-2g.10gb" if pending else "nvidia.com/mig-1g.5gb"
    p["spec"]["containers"][0]["resources"] = {"limits": {wants: "1"}, "requests": {wants: "1"}}
    if pending:
        del p["spec"]["nodeName"]
        p["status"] = {"phase": "Pending"}
    else:
        p["spec"]["nodeName"] = NODE
    return [*out, p]


def configmap(text: Any = REAL, **top: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", **top,
            "metadata": {"name": "default-mig-parted-config", "namespace": "gpu-operator", "resourceVersion": "7"},
            "data": {"config.yaml": text}}


def write(tmp_path: Path, name: str, doc: Any) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


def files(tmp_path: Path, *, labels: dict[str, str] | None = None, pending: bool = True,
          text: Any = REAL) -> tuple[Path, Path, Path]:
    return (write(tmp_path, "nodes.json", {"apiVersion": "v1", "kind": "List", "items": [node(labels)]}),
            write(tmp_path, "pods.json", {"apiVersion": "v1", "kind": "List", "items": pods(pending=pending)}),
            write(tmp_path, "cm.json", configmap(text)))


def counts(inv: Inventory) -> dict[int, dict[str, int] | None]:
    host = inv.host(NODE)
    assert host is not None
    return {g.index: dict(g.layout.profile_counts()) if g.layout is not None else None for g in host.gpus}


def cli(*args: str, code: int = 0) -> tuple[str, str]:
    r = CliRunner().invoke(app, [*args])
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    return r.stdout, r.stderr


def exported(plan: Path, cm: Path) -> tuple[str, dict[int, tuple[bool, dict[str, int]]]]:
    """`export gpu-operator PLAN --existing CM`: the node's label and what its config gives each GPU."""
    out, _ = cli("export", "gpu-operator", str(plan), "--existing", str(cm), "-o", "json")
    doc = json.loads(out)
    label = next(n["label"]["nvidia.com/mig.config"] for n in doc["nodes"] if n["node"] == NODE)
    return label, per_gpu(doc["configs"][label])


def per_gpu(entries: list[dict[str, Any]], gpus: int = 2) -> dict[int, tuple[bool, dict[str, int]]]:
    """Each GPU's (MIG on, counts) as mig-parted walks the entries (a later entry selecting a GPU wins)."""
    out: dict[int, tuple[bool, dict[str, int]]] = {}
    for e in entries:
        for i in range(gpus) if e["devices"] == "all" else e["devices"]:
            out[i] = (e["mig-enabled"], {p: n for p, n in (e.get("mig-devices") or {}).items() if n})
    return out


REAL_ENTRIES = per_gpu([{"devices": [i], "mig-enabled": True, "mig-devices": c} for i, c in REAL_GPUS.items()])


# --- the reader ------------------------------------------------------------------------------------------------

def test_each_gpu_holds_what_the_applied_config_gives_it_not_what_the_inference_guesses(tmp_path: Path) -> None:
    nodes, _, cm = files(tmp_path)
    read = mig_parted.read_configmap(yamljson.parse(cm.read_text(), str(cm)))  # type: ignore[arg-type]
    assert read.name == WHO and sorted(read.configs) == ["a100-real-layout", "all-disabled"]
    assert counts(load_inventory(nodes, CAT, read)) == REAL_GPUS
    assert counts(load_inventory(nodes, CAT)) == {0: {"1g.5gb": 7}, 1: {"3g.20gb": 2}}  # the inference: the other way


def test_a_fallback_is_the_inference_and_an_agreeing_config_places_as_it_does() -> None:
    """A ConfigMap without the nodes' configs gives exactly the inventory read without one (less the notes); one whose
    config gives each GPU what the inference guessed gives the same layouts, placements included (each GPU placed as
    `split_counts` places it), so plans stay as they were."""
    for name, noted in (("nodes.json", 1), ("mixed-nodes.json", 2)):  # the mixed nodes in state success
        alone = load_inventory(DATA / name, CAT)
        other = load_inventory(DATA / name, CAT, mig_parted.ConfigMapConfigs(WHO, {}))
        added = [n for n in other.notes if n not in alone.notes]
        assert other.hosts == alone.hosts and len(added) == noted
        assert all("is not a config of " + WHO in n for n in added)
    agreeing = mig_parted.ConfigMapConfigs(WHO, {"custom-a100": (  # tests/data/k8s/mixed-nodes.json's a100-mixed
        mig_parted.Entry((0,), True, (("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1))), mig_parted.Entry((1,), False)),
        "all-disabled": (mig_parted.Entry(None, False),)})
    with_it = load_inventory(DATA / "mixed-nodes.json", CAT, agreeing)
    assert with_it.hosts == load_inventory(DATA / "mixed-nodes.json", CAT).hosts and with_it.notes == ()


# --- the plan and the export: one GPU changes, the other's entry is as it is ---------------------------------

def test_a_change_on_one_gpu_keeps_the_other_gpus_entry_as_the_configmap_has_it(tmp_path: Path) -> None:
    nodes, pods_file, cm = files(tmp_path)
    plan = tmp_path / "plan.json"
    cli("propose", "-i", str(nodes), "--pods", str(pods_file), "--mig-configmap", str(cm), "--out", str(plan))
    label, gpus = exported(plan, cm)
    assert label != CONFIG and gpus[0] == REAL_ENTRIES[0]  # GPU 0 (the pods' 3g.20gb) exactly as it is
    assert gpus[1][0] and gpus[1][1].get("2g.10gb") == 1  # GPU 1 makes room for the pending 2g.10gb
    assert {i for i in gpus if gpus[i] != REAL_ENTRIES[i]} == {1}  # what the MIG manager changes
    # from the labels alone, the config follows the inferred GPU numbers: the MIG manager would change both GPUs
    inferred = tmp_path / "inferred.json"
    cli("propose", "-i", str(nodes), "--pods", str(pods_file), "--out", str(inferred))
    _, guessed = exported(inferred, cm)
    assert {i for i in guessed if guessed[i] != REAL_ENTRIES[i]} == {0, 1}


def test_an_unchanged_node_keeps_its_config_and_its_label(tmp_path: Path) -> None:
    nodes, pods_file, cm = files(tmp_path, pending=False)
    plan = tmp_path / "plan.json"
    cli("propose", "-i", str(nodes), "--pods", str(pods_file), "--mig-configmap", str(cm), "--out", str(plan))
    assert not any(g["actions"] for g in json.loads(plan.read_text())["gpus"])
    assert exported(plan, cm) == (CONFIG, REAL_ENTRIES)  # the same config: nothing to relabel
    inferred = tmp_path / "inferred.json"
    cli("propose", "-i", str(nodes), "--pods", str(pods_file), "--out", str(inferred))
    assert exported(inferred, cm)[0] != CONFIG  # the inference's per-GPU config is another one


# --- what the config cannot tell: the labels' counts split as before, with a note -----------------------------

def test_a_config_that_disagrees_with_the_labels_is_a_note_and_the_inference(tmp_path: Path) -> None:
    nodes, _, cm = files(tmp_path, text=REAL.replace('{"1g.5gb": 7}', '{"1g.5gb": 6}'))
    out, err = cli("inventory", "check", "-i", str(nodes), "--mig-configmap", str(cm), "-o", "json")
    assert (f"note: node '{NODE}': nvidia.com/mig.config='{CONFIG}' of {WHO} gives GPU 0: 3g.20gb x2; GPU 1: 1g.5gb "
            "x6, but its labels count 1g.5gb x7, 3g.20gb x2 and 0 GPU(s) with MIG off, of 2: the labels win") in err
    assert out == cli("inventory", "check", "-i", str(nodes), "-o", "json")[0]  # as inferred without the ConfigMap


@pytest.mark.parametrize(("labels", "text", "want", "note"), [
    # the label names a config the ConfigMap lacks: a note
    ({"nvidia.com/mig.config": "all-balanced"}, REAL, None, "'all-balanced' is not a config of " + WHO),
    # the MIG manager has not applied it (yet), or failed: the config says nothing of the GPUs, and no note
    ({"nvidia.com/mig.config.state": "pending"}, REAL, None, None),
    ({"nvidia.com/mig.config.state": "failed"}, REAL, None, None),
    # an entry selects GPU 0 only: GPU 1 gets what is left of the labels' counts, with a note
    ({}, REAL.replace('    - devices: [1]\n      mig-enabled: true\n      mig-devices: {"1g.5gb": 7}\n', ""),
     REAL_GPUS, "no entry of that config of " + WHO + " selects GPU(s) 1"),
    # device-filters, as NVIDIA's own configs have them: the A100-40GB one selects, the H100 one does not
    ({}, REAL.replace("- devices: [0]", '- device-filter: ["0x233010DE"]\n      devices: all\n      mig-enabled: true\n'
                      '      mig-devices: {"1g.10gb": 7}\n    - device-filter: "0x20B010DE"\n      devices: [0]'),
     REAL_GPUS, None),
    # two entries give GPU 0 different devices: which one mig-parted ended with is not known here
    ({}, REAL + '    - devices: all\n      mig-enabled: false\n', None, "GPU 0 is selected by entries of " + WHO),
])
def test_what_the_config_cannot_tell_is_inferred(tmp_path: Path, labels: dict[str, str], text: str,
                                                 want: dict[int, dict[str, int]] | None, note: str | None) -> None:
    nodes, _, cm = files(tmp_path, labels=labels, text=text)
    read = mig_parted.read_configmap(yamljson.parse(cm.read_text(), str(cm)))  # type: ignore[arg-type]
    inv = load_inventory(nodes, CAT, read)
    assert counts(inv) == (want or counts(load_inventory(nodes, CAT)))
    assert [n for n in inv.notes if note is not None and note in n] == ([] if note is None else [inv.notes[0]])
    assert len(inv.notes) == (0 if note is None else 1)


# --- hostile ConfigMaps: one error naming the ConfigMap and the key ---------------------------------------------

@pytest.mark.parametrize(("doc", "needle"), [
    (configmap("version: v1\nmig-configs: {a: [\n"), f"{WHO} data.config.yaml:3: not valid YAML"),
    (configmap("- 1\n- 2\n"), f"{WHO} data.config.yaml:1: a mig-parted config is a mapping"),
    (configmap("version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: maybe\n"),
     f"{WHO} data.config.yaml:5: mig-configs.x[0].mig-enabled: expected true or false"),
    (configmap("version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n      mig-devices: "
               '{"1g.5gb": 99999}\n'), f"{WHO} data.config.yaml:6: mig-configs.x[0].mig-devices.1g.5gb"),
    (configmap("version: v2\nmig-configs: {}\n"), f"{WHO} data.config.yaml:1: version: unknown version"),
    (configmap("# " + "x" * (1 << 20) + "\n"), f"data.config.yaml: {WHO}: data.config.yaml is 1048579 characters, "
                                                "more than the 1 MiB a ConfigMap holds"),
    (configmap("version: v1\x07\n"), f"{WHO} data.config.yaml:1: unacceptable character #x0007"),
    (configmap("a: &a [*a]\n"), f"{WHO} data.config.yaml:1:"),
    (configmap({"version": "v1"}), f"data.config.yaml: {WHO}: data.config.yaml must be text"),
    (configmap(""), f"data.config.yaml: {WHO}: data.config.yaml is empty"),
    ({**configmap(), "data": {"other.yaml": REAL}}, f"{WHO} has no data.config.yaml"),
    ({**configmap(), "data": ["config.yaml"]}, f"data: {WHO} has no data.config.yaml"),
    (configmap(kind="Pod"), "kind: expected kind: ConfigMap, not 'Pod'"),
    ({"apiVersion": "v1", "kind": "List", "items": [configmap()]}, "kind: expected kind: ConfigMap, not 'List'"),
    ([configmap()], "expected a ConfigMap (kind: ConfigMap) with data.config.yaml"),
    ("{", "cm.json:1: not valid YAML"),
])
def test_a_hostile_configmap_is_one_clear_error(tmp_path: Path, doc: Any, needle: str) -> None:
    nodes, _, _ = files(tmp_path)
    cm = write(tmp_path, "cm.json", doc)
    _, err = cli("inventory", "check", "-i", str(nodes), "--mig-configmap", str(cm), code=2)
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and needle in lines[0], err


def test_a_configmap_only_with_a_node_list_and_live_names_checked(tmp_path: Path) -> None:
    _, _, cm = files(tmp_path)
    native = write(tmp_path, "inventory.yaml",
                   "version: 1\nhosts:\n  gpu01:\n    gpus: {model: A100-SXM4-40GB, count: 1}\n")
    _, err = cli("inventory", "check", "-i", str(native), "--mig-configmap", str(cm), code=2)
    assert f"{WHO} tells the MIG layouts of Kubernetes nodes" in err and "kubectl get nodes -o json" in err
    nodes, _, _ = files(tmp_path)
    for bad in ("kubectl:Gpu_Operator/x", "kubectl:default-mig-parted-config", "kubectl:ns/-x"):
        _, err = cli("inventory", "check", "-i", str(nodes), "--mig-configmap", bad, code=2)
        assert "error: --mig-configmap:" in err and "kubectl:NAMESPACE/NAME" in err, err


# --- live: through the adapter (played answers) ---------------------------------------------------------------

class Played:
    """kubectl's answers: `get nodes` and the ConfigMap (None: NotFound; a string: kubectl's stderr, exit 1)."""

    def __init__(self, cm: dict[str, Any] | str | None) -> None:
        self.cm = cm
        self.calls: list[list[str]] = []

    def run(self, argv: list[str], *, timeout: float, stdin: bytes | None = None) -> Completed:
        args = argv[next(i for i, a in enumerate(argv) if a.startswith("--request-timeout")) + 1:]
        self.calls.append(args)
        if args[:2] == ["get", "nodes"]:
            return Completed(tuple(argv), 0, json.dumps({"apiVersion": "v1", "kind": "List", "items": [node()]}), "")
        assert args[:2] == ["get", "configmaps"], args
        if self.cm is None:
            return Completed(tuple(argv), 1, "", f'Error from server (NotFound): configmaps "{args[2]}" not found')
        if isinstance(self.cm, str):
            return Completed(tuple(argv), 1, "", self.cm)
        return Completed(tuple(argv), 0, json.dumps(self.cm), "")


def test_the_live_read_takes_the_configmap_through_the_adapter() -> None:
    played = Played(configmap())
    _, inv = read_nodes(None, CAT, kube=Kubectl(runner=played), configmap=LiveConfigMap())
    assert counts(inv) == REAL_GPUS and inv.notes == ()
    assert played.calls == [["get", "nodes", "-o", "json"],
                            ["get", "configmaps", "default-mig-parted-config", "-n", "gpu-operator", "-o", "json"]]


@pytest.mark.parametrize("answer", [None, 'Error from server (Forbidden): configmaps "default-mig-parted-config" is '
                                          'forbidden: User "u" cannot get resource "configmaps"'])
def test_a_configmap_that_is_not_there_is_inferred_quietly_noted_or_an_error(answer: str | None) -> None:
    """`-i kubectl` looks for the GPU Operator's default quietly (as without one); replan notes its own missing; one
    named by the operator is an error."""
    _, inv = read_nodes(None, CAT, kube=Kubectl(runner=Played(answer)), configmap=LiveConfigMap())
    assert counts(inv) == {0: {"1g.5gb": 7}, 1: {"3g.20gb": 2}} and inv.notes == ()  # inferred, as before
    _, inv = read_nodes(None, CAT, kube=Kubectl(runner=Played(answer)), configmap=LiveConfigMap(missing="note"))
    assert len(inv.notes) == 1 and inv.notes[0].startswith(f"the MIG manager's {WHO} ")
    with pytest.raises(InputError, match="kubectl get configmap -n gpu-operator default-mig-parted-config: Error"):
        read_nodes(None, CAT, kube=Kubectl(runner=Played(answer)), configmap=LiveConfigMap(missing="error"))


def test_a_hostile_live_configmap_is_one_error_naming_it() -> None:
    with pytest.raises(InputError) as err:
        read_nodes(None, CAT, kube=Kubectl(runner=Played(configmap("version: v1\nmig-configs: [1]\n"))),
                   configmap=LiveConfigMap())
    assert str(err.value).startswith(f"kubectl get configmap -n gpu-operator default-mig-parted-config: {WHO} "
                                     "data.config.yaml:2: mig-configs")


# --- live: the real kubectl against the stand-in, and the simulated MIG manager (slow) ---------------------------

@pytest.mark.slow
def test_live_a_change_on_one_gpu_leaves_the_other_gpu_to_the_mig_manager_as_it_is(
        k8s_cluster: Any, tmp_path: Path) -> None:
    """`propose -i kubectl --pods kubectl` reads the ConfigMap by itself; applied through the MIG manager, only GPU 1
    changes (the simulated manager applies per GPU, as mig-parted walks the entries; it does not know which GPU a pod
    holds, so its refusal of a node with GPU pods is off here: the pods hold GPU 0's devices, which stay). A second
    plan finds the node as planned: nothing is written."""
    cluster = k8s_cluster([node()], pods=pods(), configmaps=[configmap()])
    cluster.mig_manager.refuse_busy = False
    kc = ["--kubeconfig", str(cluster.kubeconfig), "--context", "stand-in"]
    out, _ = cli("inventory", "check", "-i", "kubectl", *kc, "-o", "json")
    gpus = json.loads(out)["hosts"][0]["gpus"]
    assert [sorted(i.split("@")[0] for i in g["layout"]) for g in gpus] == [["3g.20gb"] * 2, ["1g.5gb"] * 7]
    before = list(cluster.mig_manager.applied[NODE])
    plan = tmp_path / "plan.json"
    cli("propose", "-i", "kubectl", "--pods", "kubectl", *kc, "--out", str(plan))
    apply = ["apply", str(plan), "--via", "gpu-operator", *kc, "--allow-disrupt", "--drain", "never", "--yes",
             "--configmap-settle", "0", "--mig-timeout", "8", "-o", "json"]
    out, _ = cli(*apply)
    assert json.loads(out)["hosts"][0]["gpus"][1]["outcome"] == "applied", out
    after = cluster.mig_manager.applied[NODE]
    assert after[0] == before[0] and after[1] != before[1]  # GPU 0 as it was; GPU 1 reconfigured
    seen = len(cluster.requests)
    again = tmp_path / "again.json"
    cli("propose", "-i", "kubectl", "--pods", "kubectl", *kc, "--out", str(again))
    assert not any(g["actions"] for g in json.loads(again.read_text())["gpus"])
    cli(*[str(again) if a == str(plan) else a for a in apply])
    assert [r for r in cluster.requests[seen:] if r.verb not in ("get", "list", "")] == []


@pytest.mark.slow
def test_live_without_the_configmap_the_nodes_are_inferred_as_before(k8s_cluster: Any) -> None:
    cluster = k8s_cluster([node()], mig_manager=False)
    kc = ["--kubeconfig", str(cluster.kubeconfig), "--context", "stand-in"]
    out, err = cli("inventory", "check", "-i", "kubectl", *kc, "-o", "json")
    assert "note:" not in err
    gpus = json.loads(out)["hosts"][0]["gpus"]
    assert [sorted(i.split("@")[0] for i in g["layout"]) for g in gpus] == [["1g.5gb"] * 7, ["3g.20gb"] * 2]
    _, err = cli("inventory", "check", "-i", "kubectl", *kc, "--mig-configmap", "kubectl:gpu-operator/mine", code=2)
    assert "error: kubectl get configmap -n gpu-operator mine:" in err and "NotFound" in err
