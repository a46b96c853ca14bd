"""`migplan propose` with hypervisor hosts (issue 26): the inventory's `vgpu` setting, the plan's `vgpu` section
(version 6) written and read back strictly, hostile inventories and plan edits refused with the file, key and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import migplan_cli

from migplan.catalog import builtin_catalog
from migplan.documents import load_plan
from migplan.errors import InputError
from migplan.inventory.load import load_inventory
from migplan.inventory.model import VgpuHost


@pytest.fixture()
def run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    return migplan_cli(monkeypatch, tmp_path)


INVENTORY = """\
version: 1
hosts:
  kvm-l4:
    vgpu: {board: L4, count: 2}
  kvm-t4:
    vgpu: {board: T4, count: 1}
  kvm-a100:
    vgpu: {board: A100X, modes: [mig_backed], count: 2}
  bm:
    gpus: [{index: 0, model: A100-SXM4-40GB, mig: false}]
"""


def _vm(name: str, mib: int, typ: str) -> dict[str, object]:
    return {"name": name, "kind": "vm", "observed": {"vgpu_type": typ},
            "memory_mib": {"p50": mib * 8 // 10, "p95": mib * 9 // 10, "p99": mib, "max": mib}}


def _fleet(tmp_path: Path) -> tuple[Path, Path]:
    inv = tmp_path / "inv.yaml"
    inv.write_text(INVENTORY)
    workloads = [_vm(f"vm:l4-{i}", 6000, "L4-8C") for i in range(4)] + [_vm("vm:t4", 3000, "T4-4C")] + [
        _vm(f"vm:a-{i}", 9000, "A100X-3-20C") for i in range(3)] + [
        {"name": "proc", "memory_mib": {"p50": 4000, "p95": 4500, "p99": 4800, "max": 5000}}]
    prof = tmp_path / "profiles.yaml"
    prof.write_text(yaml.safe_dump({"version": 1, "workloads": workloads}))
    return inv, prof


def test_propose_plans_vms_on_hypervisor_hosts_and_processes_on_bare_metal(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    inv, prof = _fleet(tmp_path)
    res = run("propose", "-i", str(inv), "-p", str(prof), "-o", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["version"] == 6
    assert [g["host"] for g in doc["gpus"]] == ["bm"]  # hypervisor GPUs are not MIG GPUs of the plan
    assert [w["name"] for w in doc["workloads"]] == ["proc"]
    vg = doc["vgpu"]
    assert {v["name"]: v["status"] for v in vg["vms"]} == {
        **{f"vm:l4-{i}": "placed" for i in range(4)}, "vm:t4": "placed", **{f"vm:a-{i}": "placed" for i in range(3)}}
    assert vg["solve"]["gpus_used"] == 4 and vg["solve"]["gpu_lower_bound"] <= 4
    hosts = {v["host"] for v in vg["vms"]}
    assert hosts == {"kvm-l4", "kvm-t4", "kvm-a100"}
    assert "vGPU plan" in res.stderr


def test_a_written_plan_reads_back_with_its_vgpu_section(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    inv, prof = _fleet(tmp_path)
    out = tmp_path / "plan.yaml"
    assert run("propose", "-i", str(inv), "-p", str(prof), "--out", str(out)).exit_code == 0
    plan = load_plan(out)
    assert plan.version == 6 and plan.vgpu is not None
    assert plan.vgpu.gpus_used == 4
    assert {a.kind for g in plan.vgpu.gpus for a in g.actions} >= {"create", "gi-create", "mig-enable"}


def test_a_plan_without_hypervisor_hosts_stays_version_5_without_a_vgpu_key(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    inv, prof = _fleet(tmp_path)
    inv.write_text("version: 1\nhosts:\n  bm:\n    gpus: [{index: 0, model: A100-SXM4-40GB, mig: false}]\n")
    res = run("propose", "-i", str(inv), "-p", str(prof), "-o", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["version"] == 5 and "vgpu" not in doc
    assert "not planned" in res.stderr  # the VMs, listed as before


def _edit(run, tmp_path: Path, change: str) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    inv, prof = _fleet(tmp_path)
    out = tmp_path / "plan.yaml"
    assert run("propose", "-i", str(inv), "-p", str(prof), "--out", str(out)).exit_code == 0
    doc = yaml.safe_load(out.read_text())
    used = next(g for g in doc["vgpu"]["gpus"] if g["target"]["slots"])
    exec(change, {"doc": doc, "g": used})
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(doc, sort_keys=False))
    try:
        load_plan(edited)
    except InputError as err:
        return 1, str(err)
    return 0, ""


@pytest.mark.parametrize(("change", "says"), [
    ("g['actions'].pop()", "are not the actions"),
    ("g['target']['slots'][0]['type_name'] = 'A100X-7-40C'", "are not the actions"),
    ("g['observed']['vfs'] = 3", "does not match the GPU's observed state"),
    ("g['target']['slots'][0]['type_name'] = 'Z9-3C'", "no type 'Z9-3C'"),
    ("g['target']['mode'] = 'turbo'", "vGPU mode 'turbo'"),
    ("g['board'] = 'NOPE'", "no vGPU board"),
    ("g['target']['slots'][0]['device'] = '../../etc'", "not a VF PCI address"),
    ("g['target']['slots'][0]['placement'] = '3g.20gb@4; rm -rf /'", "not PROFILE@START"),
    ("doc['vgpu']['solve']['gpus_used'] = 1", "the targets use 4"),
    ("doc['vgpu']['gpus'].append(g)", "lists a GPU twice"),
    ("doc['vgpu']['vms'][0]['status'] = 'placed'; doc['vgpu']['vms'][0]['name'] = 'vm:ghost'", "no GPU's target"),
    ("doc['version'] = 5", "has no 'vgpu' section"),
    ("del doc['vgpu']", "needs a 'vgpu' section"),
])
def test_an_edited_vgpu_section_is_refused_naming_the_key(run, tmp_path: Path, change: str, says: str) -> None:  # type: ignore[no-untyped-def]
    code, message = _edit(run, tmp_path, change)
    assert code == 1 and says in message, message
    assert "Traceback" not in message


@pytest.mark.parametrize(("setting", "says"), [
    ("vgpu: {board: Z9, count: 1}", "no vGPU board for 'Z9'"),
    ("vgpu: {board: T4, modes: [mig_backed], count: 1}", "T4 has no vGPU mode 'mig_backed'"),
    ("vgpu: {board: L4, modes: [], count: 1}", "at least one vGPU mode"),
    ("vgpu: {board: L4, modes: [time_sliced, time_sliced], count: 1}", "listed twice"),
    ("vgpu: {board: L4, count: 0}", "must be at least 1"),
    ("vgpu: {board: L4}", "declares no GPUs"),
    ("vgpu: {board: L4, count: 1, extra: 1}", "extra"),
    ("vgpu: {board: L4, count: 1}\n    gpus: [{index: 0, model: A100-SXM4-40GB}]", "not with 'gpus'"),
    ("vgpu: {board: L4, count: 1}\n    discover: true", "drop 'count' or 'discover'"),
])
def test_a_bad_vgpu_setting_is_refused_with_its_line(tmp_path: Path, setting: str, says: str) -> None:
    inv = tmp_path / "inv.yaml"
    inv.write_text(f"version: 1\nhosts:\n  kvm:\n    {setting}\n")
    with pytest.raises(InputError) as err:
        load_inventory(inv, builtin_catalog())
    assert says in str(err.value), str(err.value)
    assert str(inv) in str(err.value) and ":4" in str(err.value) or "line 4" in str(err.value)


def test_the_shipped_vgpu_example_places_every_vm_at_the_lower_bound(run) -> None:  # type: ignore[no-untyped-def]
    root = Path(__file__).resolve().parent.parent / "examples" / "vgpu"
    res = run("propose", "-i", str(root / "inventory.yaml"), "-p", str(root / "profiles.yaml"), "-o", "json")
    assert res.exit_code == 0, res.output
    vg = json.loads(res.stdout)["vgpu"]
    assert {v["status"] for v in vg["vms"]} == {"placed"}
    assert vg["solve"]["gpus_used"] == vg["solve"]["gpu_lower_bound"]
    modes = {(g["host"], g["target"]["mode"]) for g in vg["gpus"] if g["target"]["slots"]}
    assert {m for h, m in modes if h == "kvm-a100-01"} == {"mig_backed"}
    assert {m for h, m in modes if h == "kvm-t4-01"} == {"time_sliced"}


def test_an_ansible_inventorys_migplan_vgpu_declares_a_hypervisor_host(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text("all:\n  children:\n    kvm:\n      hosts:\n        kvm01:\n"
                   "          migplan_vgpu: {board: L4, count: 2}\n        kvm02:\n"
                   "          migplan_vgpu: {board: A100X, modes: [mig_backed]}\n")
    hosts = {h.name: h for h in load_inventory(inv, builtin_catalog()).hosts}
    assert (hosts["kvm01"].vgpu, hosts["kvm01"].discover) == (VgpuHost("L4", ("time_sliced",), 2), False)
    assert (hosts["kvm02"].vgpu, hosts["kvm02"].discover) == (VgpuHost("A100-HGX-40GB", ("mig_backed",), 0), True)
