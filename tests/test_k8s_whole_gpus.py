"""Kubernetes clusters with GPUs without MIG, and the driver from GFD's labels (issue 24).

The fixture tests/data/k8s/mixed-nodes.json (see that folder's README) is a mixed cluster: an A100 under
mig.strategy=mixed, an H100 under single, an A30 with every GPU MIG-disabled, a T4 node and an L4 node
(`nvidia.com/mig.capable=false`, as GFD's newMigCapabilityLabeler writes it for a node without MIG-capable GPUs),
a control plane and a CPU worker. The plans are made by the real planner with CBC.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout
from migplan.catalog.loader import parse_catalog
from migplan.catalog.whole_gpus import whole_gpu_model
from migplan.catalog.writer import models_to_list
from migplan.cli.app import app
from migplan.commands import export as ex
from migplan.documents import load_plan
from migplan.errors import InputError
from migplan.inventory import Inventory, load_inventory
from migplan.model.state import state_from_inventory
from migplan.planner.demand import Demand, fitting_profiles, whole_fits
from migplan.planner.patterns import candidates
from migplan.profiles import WHOLE_GPU
from migplan.report_html import page_data, render
from migplan.yamldoc import parse

CAT = builtin_catalog()
MIXED = Path(__file__).resolve().parent / "data" / "k8s" / "mixed-nodes.json"

PROFILES = """\
version: 1
workloads:
- name: t4-infer            # pinned to the T4 node: it can only run there as the whole GPU
  observed: {gpu_model: A100-SXM4-40GB}
  memory_mib: {p50: 7000, p95: 8000, p99: 8500, max: 9000}
  compute: {p50: 0.1, p95: 0.2, max: 0.3}
  pin: {host: t4-node}
- name: l4-video
  memory_mib: {p50: 15000, p95: 17000, p99: 18000, max: 19000}
  compute: {p50: 0.3, p95: 0.5, max: 0.6}
  pin: {host: l4-node}
- name: small-a
  memory_mib: {p50: 2000, p95: 2500, p99: 2800, max: 3000}
  compute: {p50: 0.01, p95: 0.02, max: 0.03}
- name: big-70b             # 38.5 GiB with headroom: more than a T4 or an L4 has
  memory_mib: {p50: 30000, p95: 33000, p99: 34000, max: 35000}
  compute: {p50: 0.2, p95: 0.3, max: 0.4}
"""


def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(MIXED.read_text())
    return doc


def _labels(doc: dict[str, Any], node: str) -> dict[str, str]:
    labels: dict[str, str] = next(i for i in doc["items"] if i["metadata"]["name"] == node)["metadata"]["labels"]
    return labels


def _load(tmp_path: Path, doc: dict[str, Any]) -> Inventory:
    f = tmp_path / "nodes.json"
    f.write_text(json.dumps(doc))
    return load_inventory(f, CAT)


def _model(inv: Inventory, model_id: str) -> Any:
    return next(m for m in inv.models if m.id == model_id)


# --- the node reader -----------------------------------------------------------------------------

def test_mixed_cluster_gpu_nodes_become_hosts_and_whole_gpus_are_not_refused() -> None:
    inv = load_inventory(MIXED, CAT)
    assert [h.name for h in inv.hosts] == ["a100-mixed", "h100-single", "a30-disabled", "t4-node", "l4-node"]
    t4, l4 = inv.host("t4-node"), inv.host("l4-node")
    assert t4 is not None and l4 is not None
    assert [(g.model, g.mig_enabled, g.layout) for g in t4.gpus] == [("T4", False, None)]
    assert [(g.model, g.mig_enabled, g.layout) for g in l4.gpus] == [("L4", False, None)] * 2
    assert dict(t4.labels)["k8s.mig.capable"] == "false"
    m_t4, m_l4 = _model(inv, "T4"), _model(inv, "L4")
    assert not m_t4.mig and not m_t4.profiles and m_t4.memory_mib == 15360 and m_t4.sm_total == 40
    assert not m_t4.verified  # its SM count is from third-party pages, marked unverified
    assert m_l4.memory_mib == 23034 and m_l4.compute_unknown and "SM count unknown" in m_l4.source
    a30 = inv.host("a30-disabled")
    assert a30 is not None and [(g.model, g.mig_enabled) for g in a30.gpus] == [("A30", False)] * 2


def test_driver_version_from_the_new_and_the_deprecated_labels() -> None:
    inv = load_inventory(MIXED, CAT)
    drivers = {h.name: h.driver for h in inv.hosts}
    assert drivers == {"a100-mixed": "550.90.07", "h100-single": "535.183.01", "a30-disabled": "535.183.01",
                       "t4-node": "535.104.05", "l4-node": "550.90.07"}


def test_driver_labels_resolve_driver_dependent_geometry(tmp_path: Path) -> None:
    """With the driver known, the A100 is the catalog model (1g.10gb needs R525); without it, the oldest
    driver's model `A100-SXM4-40GB@host-<digest>`."""
    with_driver = state_from_inventory(load_inventory(MIXED, CAT), CAT)
    g = with_driver.gpu("a100-mixed", 0)
    assert g is not None and g.model == "A100-SXM4-40GB"
    doc = _doc()
    for k in [k for k in _labels(doc, "a100-mixed") if "driver" in k]:
        del _labels(doc, "a100-mixed")[k]
    without = state_from_inventory(_load(tmp_path, doc), CAT).gpu("a100-mixed", 0)
    assert without is not None and without.model.startswith("A100-SXM4-40GB@host-")


def test_only_a_revision_less_driver_may_leave_the_rev_label_empty(tmp_path: Path) -> None:
    doc = _doc()
    labels = _labels(doc, "h100-single")
    labels["nvidia.com/cuda.driver.rev"] = ""  # GFD writes "" for a driver version X.Y
    assert _load(tmp_path, doc).host("h100-single").driver == "535.183"  # type: ignore[union-attr]


def test_a_known_product_without_the_mig_capable_label_is_still_a_whole_gpu(tmp_path: Path) -> None:
    doc = _doc()
    labels = _labels(doc, "t4-node")
    del labels["nvidia.com/mig.capable"], labels["nvidia.com/gpu.memory"]
    inv = _load(tmp_path, doc)
    assert _model(inv, "T4").memory_mib == 15360  # the table's, sourced
    assert inv.host("t4-node").gpus[0].model == "T4"  # type: ignore[union-attr]


def test_an_unknown_product_without_mig_is_a_whole_gpu_host_with_a_note(tmp_path: Path) -> None:
    doc = _doc()
    _labels(doc, "l4-node")["nvidia.com/gpu.product"] = "NVIDIA-Z9-Inference"
    inv = _load(tmp_path, doc)
    m = _model(inv, "Z9-Inference")
    assert not m.mig and m.memory_mib == 23034 and m.compute_unknown
    assert "not in migplan's table of GPUs without MIG" in m.source
    assert [g.model for g in inv.host("l4-node").gpus] == ["Z9-Inference"] * 2  # type: ignore[union-attr]


def test_a_mig_model_labelled_without_mig_never_takes_the_catalog_name(tmp_path: Path) -> None:
    doc = _doc()
    _labels(doc, "l4-node")["nvidia.com/gpu.product"] = "NVIDIA-A30"
    inv = _load(tmp_path, doc)
    assert [g.model for g in inv.host("l4-node").gpus] == ["A30-no-MIG"] * 2  # type: ignore[union-attr]
    assert not _model(inv, "A30-no-MIG").mig


def test_a_gpu_without_mig_from_a_catalog_file_is_used_as_it_is(tmp_path: Path) -> None:
    doc = _doc()
    _labels(doc, "l4-node")["nvidia.com/gpu.product"] = "Tesla-K80"
    k80 = parse(json.dumps({"version": 1, "models": [{"id": "K80", "mig": False, "memory_mib": 11441,
                                                      "smi_names": ["Tesla K80"]}]}), "k80.yaml")
    assert k80 is not None
    catalog = CAT.merged(parse_catalog(k80))
    f = tmp_path / "nodes.json"
    f.write_text(json.dumps(doc))
    inv = load_inventory(f, catalog)
    assert [g.model for g in inv.host("l4-node").gpus] == ["K80"] * 2  # type: ignore[union-attr]
    assert "K80" not in {m.id for m in inv.models}  # the catalog's own, not one built from the labels
    g = state_from_inventory(inv, catalog).gpu("l4-node", 0)
    assert g is not None and g.model == "K80" and not g.mig_enabled


def test_one_product_with_two_memory_sizes_is_two_models(tmp_path: Path) -> None:
    doc = _doc()
    other = json.loads(json.dumps(next(i for i in doc["items"] if i["metadata"]["name"] == "l4-node")))
    other["metadata"]["name"] = "l4-node-b"
    other["metadata"]["labels"]["nvidia.com/gpu.memory"] = "22000"
    other["status"]["addresses"][0]["address"] = "10.240.2.26"
    doc["items"].append(other)
    inv = _load(tmp_path, doc)
    assert {m.id: m.memory_mib for m in inv.models if m.id.startswith("L4")} == {
        "L4-23034MiB": 23034, "L4-22000MiB": 22000}
    assert inv.host("l4-node-b").gpus[0].model == "L4-22000MiB"  # type: ignore[union-attr]


@pytest.mark.parametrize("node,label,value,needle", [
    ("a100-mixed", "nvidia.com/cuda.driver-version.full", "abc", "not a driver version"),
    ("a100-mixed", "nvidia.com/cuda.driver-version.full", "570", "not a driver version"),
    ("a100-mixed", "nvidia.com/cuda.driver-version.full", "570.1.2.3", "not a driver version"),
    ("a100-mixed", "nvidia.com/cuda.driver-version.full", "570.1\n$(reboot)", "not a driver version"),
    ("h100-single", "nvidia.com/cuda.driver.major", "5x5", "not a part of a driver version"),
    ("h100-single", "nvidia.com/cuda.driver.minor", "", "not a part of a driver version"),
    ("h100-single", "nvidia.com/cuda.driver.rev", "01;rm", "not a part of a driver version"),
    ("h100-single", "nvidia.com/cuda.driver.minor", "1234567", "not a part of a driver version"),
    ("t4-node", "nvidia.com/mig.capable", "maybe", "must be 'true' or 'false'"),
    ("t4-node", "nvidia.com/gpu.memory", "0", "memory of GPU"),
    ("t4-node", "nvidia.com/gpu.memory", "-1", "whole number"),
    ("t4-node", "nvidia.com/gpu.memory", "9999999", "whole number"),
    ("t4-node", "nvidia.com/gpu.count", "65", "more than the 64"),
    ("t4-node", "nvidia.com/gpu.product", "Tesla-T4-MIG-1g.5gb", "names a MIG device"),
    ("t4-node", "nvidia.com/mig-1g.5gb.count", "1", "MIG devices"),
    ("l4-node", "nvidia.com/gpu.product", "Evil-GPU/../x", "must be letters, digits"),
    ("l4-node", "nvidia.com/mig.strategy", "both", "unknown MIG strategy"),
])
def test_hostile_labels_are_clear_errors_naming_node_and_label(tmp_path: Path, node: str, label: str, value: str,
                                                               needle: str) -> None:
    doc = _doc()
    _labels(doc, node)[label] = value
    with pytest.raises(InputError) as err:
        _load(tmp_path, doc)
    msg = str(err.value)
    assert needle in msg and f"node {node!r}" in msg and label in msg and "nodes.json" in msg


def test_an_unknown_product_without_memory_label_is_an_error_naming_the_label(tmp_path: Path) -> None:
    doc = _doc()
    labels = _labels(doc, "l4-node")
    del labels["nvidia.com/gpu.memory"]  # L4: no sourced memory in the table
    with pytest.raises(InputError) as err:
        _load(tmp_path, doc)
    assert "node 'l4-node'" in str(err.value) and "nvidia.com/gpu.memory is missing" in str(err.value)


def test_inventory_check_prints_whole_gpu_hosts() -> None:
    r = CliRunner().invoke(app, ["inventory", "check", "-i", str(MIXED)])
    assert r.exit_code == 0, r.output
    rows = [line for line in r.output.splitlines() if line.startswith(("t4-node", "l4-node"))]
    assert len(rows) == 3 and all("whole GPU (no MIG)" in line for line in rows)
    assert "note: T4 has no MIG: planned as whole GPUs" in r.output


# --- the catalog and the planner's view of a GPU without MIG ------------------------------------------

def test_a_gpu_without_mig_offers_the_whole_gpu_only() -> None:
    t4 = whole_gpu_model("T4", 15360)
    assert candidates(t4, None, frozenset()) == [Layout()]  # the empty layout: nothing planned, MIG stays off
    assert fitting_profiles(Demand(9900, 19.6), t4) == (WHOLE_GPU,)
    assert fitting_profiles(Demand(9900, 19.6), t4, "3g.40gb") == ()  # 40 GB asked, a T4 has 15
    assert fitting_profiles(Demand(9900, 19.6), t4, "1g.10gb") == (WHOLE_GPU,)
    assert fitting_profiles(Demand(16000, 1.0), t4) == ()  # memory is a hard limit
    assert not whole_fits(Demand(1000, 41.0), t4)  # more SMs than the T4's 40
    unknown = whole_gpu_model("Z9", 20000)
    assert whole_fits(Demand(1000, 500.0), unknown)  # SMs unknown: compute not checked, only memory


def test_a_gpu_without_mig_round_trips_through_a_catalog_document() -> None:
    for m in (whole_gpu_model("T4", 15360), whole_gpu_model("Z9", 20000, name="NVIDIA-Z9")):
        doc = parse(json.dumps({"version": 1, "models": models_to_list([m])}), "t.json")
        assert doc is not None
        assert parse_catalog(doc) == [m]
    bad = parse(json.dumps({"version": 1, "models": [{"id": "X", "mig": True, "memory_mib": 1}]}), "t.json")
    assert bad is not None
    with pytest.raises(InputError, match="list their slices and profiles"):
        parse_catalog(bad)


# --- propose, plan document, export, report ---------------------------------------------------------

@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("plan")
    (d / "profiles.yaml").write_text(PROFILES)
    plan = d / "plan.json"
    r = CliRunner().invoke(app, ["propose", "-i", str(MIXED), "-p", str(d / "profiles.yaml"), "--out", str(plan),
                                 "--solver", "cbc"])
    assert r.exit_code == 0, r.output
    assert "note: T4 has no MIG: planned as whole GPUs only" in r.output
    assert "whole GPU (no MIG)" in r.output
    return plan


def test_propose_places_a_whole_gpu_workload_on_the_t4_and_never_mig_there(planned: Path) -> None:
    plan = load_plan(planned, CAT)  # read back strictly: the plan is re-validated against its own models
    by_gpu = {(g.host, g.index): g for g in plan.gpus}
    for g in plan.gpus:
        if g.model in ("T4", "L4"):
            assert g.target is None and g.current is None and not g.actions, g  # never a MIG action
    t4 = by_gpu[("t4-node", 0)]
    assert t4.target is None and not t4.actions
    w = {x.name: x for x in plan.workloads}
    assert (w["t4-infer"].host, w["t4-infer"].gpu, w["t4-infer"].instance) == ("t4-node", 0, None)
    assert w["t4-infer"].status == "placed"
    assert (w["l4-video"].host, w["l4-video"].instance) == ("l4-node", None)
    # 38.5 GiB: not on a T4 or an L4, nor a 3g.40gb on the single-strategy H100 (1g.10gb only there): a whole A100
    assert w["big-70b"].host not in ("t4-node", "l4-node", "h100-single", None)
    assert {m.id for m in plan.models} == {"T4", "L4"} and not any(m.mig for m in plan.models)
    doc = json.loads(planned.read_text())
    assert {m["id"]: m["mig"] for m in doc["host_models"]} == {"L4": False, "T4": False}


def test_export_gives_no_config_and_no_label_for_gpus_without_mig(planned: Path) -> None:
    plan = load_plan(planned, CAT)
    export = ex.build_gpu_operator(plan, CAT)
    labelled = dict(export.nodes)
    assert "t4-node" not in labelled and "l4-node" not in labelled
    assert set(labelled) == {"a100-mixed", "h100-single", "a30-disabled"}
    assert "T4" not in ex.config_text(export) and "L4" not in ex.config_text(export)
    with pytest.raises(InputError, match="has no MIG: nothing for mig-parted"):
        ex.build_mig_parted(plan, CAT, "t4-node")


def test_report_draws_a_gpu_without_mig_as_a_whole_gpu(planned: Path) -> None:
    """The page's data block (the script draws a GPU from it: tests/test_report_html.py in Chromium): the T4 and
    the L4 as whole GPUs of models without MIG, the T4's workload on the whole GPU."""
    plan = load_plan(planned, CAT)
    data = page_data(plan, CAT)
    rows = {(data["hosts"][r[0]], r[1]): r for r in data["gpus"]}
    for key in (("t4-node", 0), ("l4-node", 1)):
        row = rows[key]
        assert row[5] is None and data["models"][row[2]][3] is False  # no layout, a model without MIG
    assert [w[0] for w in rows[("t4-node", 0)][9] if w[1] == -1] == ["t4-infer"]
    assert data["nomig"] == "whole GPU (no MIG)" and "t4-node" in render(plan, CAT)


def test_a_plan_may_not_carry_a_gpu_without_mig_under_a_catalog_name(planned: Path, tmp_path: Path) -> None:
    doc = json.loads(planned.read_text())
    doc["host_models"][0]["id"] = "A30"
    bad = tmp_path / "plan.json"
    bad.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="has the name of a catalog model"):
        load_plan(bad, CAT)
