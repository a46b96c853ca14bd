"""`--inventory` from `kubectl get nodes -o json`: GPUs and MIG state from NVIDIA's node labels.

The fixture tests/data/k8s/nodes.json is written from GFD's label code (see its README); layouts are
checked with the nvidia-smi simulator's geometry (tests/sim/geometry.py), not migplan's rules.
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
from sim import geometry as sim
from typer.testing import CliRunner

from migplan.catalog import builtin_catalog
from migplan.cli.app import app
from migplan.commands import export as ex
from migplan.documents import load_plan
from migplan.errors import InputError
from migplan.inventory import load_inventory
from migplan.model.state import state_from_inventory

CAT = builtin_catalog()
DATA = Path(__file__).resolve().parent / "data" / "k8s"
NODES = DATA / "nodes.json"
PROF = str(Path(__file__).resolve().parent.parent / "profiles" / "example")


def _doc() -> dict[str, Any]:
    return json.loads(NODES.read_text())


def _write(tmp_path: Path, doc: dict[str, Any]) -> Path:
    f = tmp_path / "nodes.json"
    f.write_text(json.dumps(doc))
    return f


def _labels(doc: dict[str, Any], node: str) -> dict[str, str]:
    return next(i for i in doc["items"] if i["metadata"]["name"] == node)["metadata"]["labels"]


def _valid(model_id: str, layout: Any) -> bool:
    return sim.conflicts(sim.find_model(model_id), [(i.profile, i.start) for i in layout.instances]) == []


def test_gpu_nodes_become_hosts_and_the_control_plane_is_left_out() -> None:
    inv = load_inventory(NODES, CAT)
    assert [h.name for h in inv.hosts] == ["a100-mixed", "h100-single", "a100-80-busy"]
    assert [h.address for h in inv.hosts] == ["10.240.1.21", "10.240.1.22", "10.240.1.23"]  # InternalIP
    assert all(h.groups == ("kubernetes",) for h in inv.hosts)


def test_mixed_strategy_counts_are_split_over_the_mig_gpus() -> None:
    host = load_inventory(NODES, CAT).host("a100-mixed")
    assert host is not None and [g.model for g in host.gpus] == ["A100-SXM4-40GB"] * 4
    mig = [g for g in host.gpus if g.mig_enabled]
    assert len(mig) == 2 and [g.mig_enabled for g in host.gpus[2:]] == [False, False]  # nvidia.com/gpu: 2 whole
    total: dict[str, int] = {}
    for g in mig:
        assert g.layout is not None and _valid(g.model, g.layout)
        for p, n in g.layout.profile_counts().items():
            total[p] = total.get(p, 0) + n
    assert total == {"1g.5gb": 9, "3g.20gb": 1, "2g.10gb": 1}
    assert dict(host.labels)["k8s.mig.config"] == "custom-a100"
    assert not any(g.reserved for g in host.gpus)


def test_single_strategy_gpu_count_from_the_mig_device_count() -> None:
    host = load_inventory(NODES, CAT).host("h100-single")
    assert host is not None and len(host.gpus) == 2  # 14 MIG devices / 7 x 1g.10gb per H100
    for g in host.gpus:
        assert g.model == "H100-SXM5-80GB" and g.layout is not None and _valid(g.model, g.layout)
        assert dict(g.layout.profile_counts()) == {"1g.10gb": 7}


def test_pending_node_is_held_and_its_product_name_matches_by_nvidia_smi_name() -> None:
    host = load_inventory(NODES, CAT).host("a100-80-busy")
    assert host is not None
    assert [g.model for g in host.gpus] == ["A100-SXM4-80GB"] * 2  # NVIDIA-A100-80GB-PCIe
    assert all(g.reserved for g in host.gpus) and host.reserved_gpus == (0, 1)
    assert [g.mig_enabled for g in host.gpus] == [False, False]


def test_declared_state_for_the_planner() -> None:
    state = state_from_inventory(load_inventory(NODES, CAT), CAT)
    assert len(list(state)) == 8
    g = state.gpu("a100-80-busy", 0)
    assert g is not None and g.reserved


def test_unknown_product_names_the_node_and_the_label(tmp_path: Path) -> None:
    doc = _doc()
    # a product neither the MIG catalog nor the table of GPUs without MIG knows, on a node GFD calls MIG-capable
    # (a T4 is planned whole: tests/test_k8s_whole_gpus.py)
    _labels(doc, "h100-single")["nvidia.com/gpu.product"] = "NVIDIA-Z200-SXM-96GB"
    with pytest.raises(InputError) as err:
        load_inventory(_write(tmp_path, doc), CAT)
    msg = str(err.value)
    assert "node 'h100-single'" in msg and "nvidia.com/gpu.product" in msg and "Z200-SXM-96GB" in msg
    assert "nodes.json:" in msg and "catalog learn" in msg


@pytest.mark.parametrize("node,label,value,needle", [
    ("h100-single", "nvidia.com/gpu.count", "13", "not a whole number of GPUs"),
    ("h100-single", "nvidia.com/mig.strategy", "both", "unknown MIG strategy"),
    ("a100-mixed", "nvidia.com/gpu.count", "eight", "whole number"),
    ("a100-mixed", "nvidia.com/mig-9g.99gb.count", "1", "no MIG profile '9g.99gb'"),
    ("a100-mixed", "nvidia.com/mig-3g.20gb.count", "5", "cannot be split"),
])
def test_bad_labels_are_clear_errors(tmp_path: Path, node: str, label: str, value: str, needle: str) -> None:
    doc = _doc()
    _labels(doc, node)[label] = value
    if label == "nvidia.com/mig-3g.20gb.count":  # capacity wins over the label: change both
        next(i for i in doc["items"] if i["metadata"]["name"] == node)["status"]["capacity"][
            "nvidia.com/mig-3g.20gb"] = value
    with pytest.raises(InputError) as err:
        load_inventory(_write(tmp_path, doc), CAT)
    assert needle in str(err.value) and f"node {node!r}" in str(err.value)


def test_plus_profiles_in_resource_form(tmp_path: Path) -> None:
    doc = _doc()
    labels = _labels(doc, "a100-mixed")
    labels["nvidia.com/mig-1g.5gb.me.count"] = "1"
    cap = next(i for i in doc["items"] if i["metadata"]["name"] == "a100-mixed")["status"]["capacity"]
    cap["nvidia.com/mig-1g.5gb"] = "8"  # one of the nine 1g.5gb becomes the +me one
    host = load_inventory(_write(tmp_path, doc), CAT).host("a100-mixed")
    assert host is not None
    counts: dict[str, int] = {}
    for g in host.gpus:
        for p, n in (g.layout.profile_counts().items() if g.layout else ()):
            counts[p] = counts.get(p, 0) + n
    assert counts["1g.5gb+me"] == 1 and counts["1g.5gb"] == 8


def test_no_gpu_node_at_all(tmp_path: Path) -> None:
    doc = _doc()
    doc["items"] = doc["items"][:1]
    with pytest.raises(InputError, match="none of the 1 node"):
        load_inventory(_write(tmp_path, doc), CAT)


def test_single_node_document_and_stdin(monkeypatch: pytest.MonkeyPatch) -> None:
    one = copy.deepcopy(_doc()["items"][2])
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(one)))
    inv = load_inventory("-", CAT)
    assert [h.name for h in inv.hosts] == ["h100-single"]


@pytest.mark.slow
def test_plan_from_the_cluster_then_export_labels_those_nodes(tmp_path: Path) -> None:
    plan = tmp_path / "plan.json"
    r = CliRunner().invoke(app, ["propose", "-i", str(NODES), "-p", PROF, "--out", str(plan), "-o", "json"])
    assert r.exit_code == 0, r.output
    export = ex.build_gpu_operator(load_plan(plan, CAT), CAT)
    labelled = dict(export.nodes)
    assert "a100-80-busy" not in labelled  # every GPU held: nothing for the MIG manager there
    assert set(labelled) == {"a100-mixed", "h100-single"}
