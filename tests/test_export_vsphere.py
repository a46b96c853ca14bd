"""`migplan export vsphere`: a plan's vGPU part per ESXi host and VM (migplan/vsphere.py, docs/vsphere.md)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from helpers import migplan_cli
from vgpu_plan_samples import base_plan, sample_plan, sample_vgpu, write_sample

from migplan import vsphere
from migplan.catalog import builtin_vgpu_catalog
from migplan.errors import InputError
from migplan.model.vgpu import VgpuSlot

VCAT = builtin_vgpu_catalog()


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    return migplan_cli(monkeypatch, tmp_path)


def _export(**kw: object) -> vsphere.VsphereExport:
    return vsphere.build(sample_vgpu(), VCAT, **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize(("type_name", "prefix", "profile"), [
    ("A100-10C", "grid_", "grid_a100-10c"),  # the name VMware Cloud Director reads from vCenter
    ("A100X-3-20C", "grid_", "grid_a100x-3-20c"),
    ("L4-8C", "nvidia_", "nvidia_l4-8c"),
])
def test_profile_name_is_the_prefix_and_the_type_in_lower_case(type_name: str, prefix: str, profile: str) -> None:
    assert vsphere.profile_name(type_name, prefix) == profile


def test_an_unknown_profile_prefix_is_refused_naming_the_choices() -> None:
    with pytest.raises(InputError, match="grid_, nvidia_"):
        vsphere.profile_name("L4-8C", "vmware_")


@pytest.mark.parametrize(("workload", "vm"), [("vm:infer-01", "infer-01"), ("vm:db:vgpu2", "db"),
                                              ("plain", "plain"), ("vm:a:b", "a:b")])
def test_vm_name_drops_the_vm_prefix_and_the_vgpu_number(workload: str, vm: str) -> None:
    assert vsphere.vm_name(workload) == vm


def test_export_lists_every_gpu_by_host_with_its_vms_profiles() -> None:
    doc = _export().to_dict()
    assert doc["kind"] == "migplan/export-vsphere"
    assert [h["host"] for h in doc["hosts"]] == ["esx01", "esx02"]
    a100 = doc["hosts"][0]["gpus"][0]
    assert (a100["index"], a100["pci_bus_id"], a100["board"]) == (0, "00000000:3B:00.0", "A100-HGX-40GB")
    assert [(v["vm"], v["profile"], v["placement"]) for v in a100["vms"]] == [
        ("infer-01", "grid_a100x-3-20c", "3g.20gb@4"), ("chat", "grid_a100x-2-10c", "2g.10gb@0")]
    assert a100["frame_buffer_mib"] == 40960 and a100["frame_buffer_used_mib"] == 30720


def test_each_gpu_says_its_mode_and_the_vsphere_setting_it_needs() -> None:
    gpus = [g for h in _export().to_dict()["hosts"] for g in h["gpus"]]
    assert [(g["mode_before"], g["mode"], g["gpu_mode"]) for g in gpus] == [
        ("time_sliced", "mig_backed", "MIG"), (None, "time_sliced_mixed", "mixed size"),
        ("time_sliced", "time_sliced", "equal size")]
    assert all(g["graphics_type"] == "Shared Direct" for g in gpus)
    assert "vSphere 8.0 U3" in gpus[1]["setting"] and "mixed size" in gpus[1]["setting"]
    assert "-mig 1" in gpus[0]["setting"]


def test_mixed_size_gpu_gets_a_note_about_vsphere_8u3() -> None:
    assert any("esx01 GPU 1" in n and "8.0 U3" in n for n in _export().notes)


def test_kept_and_moved_vms_keep_their_status_in_the_export() -> None:
    rows = {v["workload"]: v for h in _export().to_dict()["hosts"] for g in h["gpus"] for v in g["vms"]}
    assert rows["vm:db"]["status"] == "kept" and rows["vm:db:vgpu2"]["vm"] == "db"
    assert rows["vm:old"]["moved"] is True and rows["vm:old"]["profile"] == "grid_l4-4c"


def test_unplaced_vms_are_listed_apart_with_their_reason_and_not_in_the_csv() -> None:
    e = _export()
    assert [u["vm"] for u in e.to_dict()["unplaced"]] == ["huge"]
    assert "huge" not in vsphere.csv_text(e)


def test_csv_is_vmname_vgpuprofile_host_gpu_one_row_per_vgpu() -> None:
    rows = list(csv.DictReader(io.StringIO(vsphere.csv_text(_export()))))
    assert list(rows[0]) == ["VMName", "VGPUProfile", "Host", "GPU"]
    assert rows[0] == {"VMName": "infer-01", "VGPUProfile": "grid_a100x-3-20c", "Host": "esx01",
                       "GPU": "00000000:3B:00.0"}
    assert [(r["VMName"], r["GPU"]) for r in rows if r["Host"] == "esx02"] == [("db", "0"), ("db", "0")]


def test_csv_quotes_a_vm_name_with_a_comma_or_quote_and_reads_back_unchanged() -> None:
    v = sample_vgpu()
    g = v.gpus[1]
    odd = 'vm:a,"b"'
    v = replace(v, gpus=(replace(g, slots=(VgpuSlot("L4-12C", vm=odd),)),))
    rows = list(csv.DictReader(io.StringIO(vsphere.csv_text(vsphere.build(v, VCAT)))))
    assert rows[0]["VMName"] == 'a,"b"'


def test_a_vgpu_of_no_vm_is_kept_out_of_the_csv_with_a_note() -> None:
    v = sample_vgpu()
    g = v.gpus[2]
    slots = (VgpuSlot("L4-8C", vm=None, vm_uuid="10a12241-1e83-4b70-bc59-a33d7c6d063c", running=True,
                      device="0000:3b:00.5"),)
    v = replace(v, gpus=(replace(g, observed=replace(g.observed, slots=slots), slots=slots),))
    e = vsphere.build(v, VCAT)
    assert vsphere.csv_text(e) == "VMName,VGPUProfile,Host,GPU\n"
    assert any("no profile names" in n for n in e.notes)


def test_host_option_keeps_that_host_only_and_refuses_an_unknown_one() -> None:
    assert [g.host for g in _export(host="esx02").gpus] == ["esx02"]
    with pytest.raises(InputError, match="no host 'nowhere'"):
        _export(host="nowhere")


def test_cli_writes_json_yaml_and_csv_from_a_plan_file(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plan = write_sample(tmp_path / "plan.json")
    r = cli("export", "vsphere", str(plan))
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["plan"] == sample_plan().fingerprint
    r = cli("export", "vsphere", str(plan), "-o", "yaml")
    assert r.exit_code == 0 and yaml.safe_load(r.stdout) == doc
    out = tmp_path / "vms.csv"
    r = cli("export", "vsphere", str(plan), "-o", "csv", "--profile-prefix", "nvidia_", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert out.read_text().splitlines()[1] == "infer-01,nvidia_a100x-3-20c,esx01,00000000:3B:00.0"


def test_cli_refuses_a_plan_without_a_vgpu_section_with_exit_2(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plan = write_sample(tmp_path / "plan.json", base_plan())
    r = cli("export", "vsphere", str(plan))
    assert r.exit_code == 2
    assert "no 'vgpu' section" in r.output and str(plan) in r.output and "Traceback" not in r.output


def test_cli_refuses_an_unknown_prefix_without_a_traceback(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plan = write_sample(tmp_path / "plan.json")
    r = cli("export", "vsphere", str(plan), "--profile-prefix", "x_")
    assert r.exit_code == 2 and "x_" in r.output and "Traceback" not in r.output


def test_cli_refuses_to_overwrite_the_plan_with_out(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plan = write_sample(tmp_path / "plan.json")
    before = plan.read_text()
    r = cli("export", "vsphere", str(plan), "--out", str(plan))
    assert r.exit_code != 0 and plan.read_text() == before


def test_cli_names_the_key_of_a_damaged_vgpu_section(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    plan = write_sample(tmp_path / "plan.json")
    doc = json.loads(plan.read_text())
    doc["vgpu"]["vms"][0]["status"] = "exploded"
    plan.write_text(json.dumps(doc))
    r = cli("export", "vsphere", str(plan))
    assert r.exit_code == 2 and "status" in r.output and "Traceback" not in r.output
