"""vGPU records in the snapshot document and in `migplan status` (issue 26, Discovery): version 2 only where a GPU has
one, strict reading, each vGPU drawn as its share of the GPU's frame buffer."""

from __future__ import annotations

import json

import pytest

from migplan import yamldoc
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Instance
from migplan.cli.fleet import status_table
from migplan.commands.fleet import status_data, vgpu_picture, vgpu_slices
from migplan.errors import MigplanError
from migplan.fleet.snapshot import (
    ActiveVgpu,
    DiscoveredGpu,
    DiscoveredHost,
    DiscoveredInstance,
    GpuVgpu,
    Snapshot,
    VgpuDevice,
    parse_snapshot,
    snapshot_to_dict,
)

CATALOG = builtin_catalog()
UUID = "ae61c4f4-cf84-aae6-3c4b-6728a89ea4ed"


def l4(*types: str) -> DiscoveredGpu:
    devices = tuple(VgpuDevice("vf", f"0000:27:00.{4 + n}", 1200 + n, t) for n, t in enumerate(types))
    vgpus = (ActiveVgpu(3251634178, types[0], 1200, "vm-a", None, devices[0].address, None, 8192, 6144),) \
        if types else ()
    return DiscoveredGpu(1, None, "NVIDIA L4", pci_bus_id="00000000:27:00.0", memory_total_mib=23034,
                         mig_capable=False, vgpu=GpuVgpu("sr-iov", "L4", ("L4-4C", "L4-8C"), ("L4-8C",), 32,
                                                         devices, vgpus))


def a100() -> DiscoveredGpu:
    inst = (DiscoveredInstance(Instance(0, "2g.10gb"), 3), DiscoveredInstance(Instance(4, "3g.20gb"), 1))
    v = GpuVgpu("sr-iov", "A100-HGX-40GB", ("A100X-3-20C",), (), 16,
                (VgpuDevice("vf", "0000:17:00.4", 465, "A100X-3-20C", 1),),
                (ActiveVgpu(3251634177, "A100X-3-20C", 465, "llm", "11111111-2222-3333-4444-555555555555",
                            "0000:17:00.4", 1, 20480, 15000),))
    return DiscoveredGpu(0, "A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", mig_current=True, mig_pending=True,
                         instances=inst, vgpu=v)


def t4() -> DiscoveredGpu:
    return DiscoveredGpu(2, None, "Tesla T4", mig_capable=False, memory_total_mib=15360,
                         vgpu=GpuVgpu("non-sr-iov", "T4", devices=(VgpuDevice("mdev", UUID, 319, "T4-4C"),)))


def reread(snap: Snapshot) -> Snapshot:
    text = json.dumps(snapshot_to_dict(snap))
    node = yamldoc.parse(text, "snap.json")
    assert node is not None
    return parse_snapshot(node, CATALOG)


def test_a_snapshot_with_vgpus_is_version_2_and_reads_back_equal() -> None:
    host = DiscoveredHost("kvm01", "10.0.0.1", (a100(), l4("L4-8C", "L4-8C"), t4()))
    snap = Snapshot((host,), "2026-12-07T00:00:00Z")
    assert snapshot_to_dict(snap)["version"] == 2
    assert reread(snap) == snap


def test_a_snapshot_without_vgpus_is_version_1_without_a_vgpu_key() -> None:
    gpu = DiscoveredGpu(0, "A30", "NVIDIA A30", mig_current=False)
    doc = snapshot_to_dict(Snapshot((DiscoveredHost("gpu01", None, (gpu,)),)))
    assert doc["version"] == 1 and "vgpu" not in doc["hosts"][0]["gpus"][0]


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda d: d.update(version=1), "version 1 snapshot has no vGPU records"),
    (lambda d: d["hosts"][0]["gpus"][0]["vgpu"].update(host_mode="magic"), "host_mode must be"),
    (lambda d: d["hosts"][0]["gpus"][0]["vgpu"]["devices"][0].update(address="0000:17:00.4; reboot"),
     "not a PCI address or an mdev UUID"),
    (lambda d: d["hosts"][0]["gpus"][0]["vgpu"]["vgpus"][0].update(type_name="$(id)"), "not a vGPU type name"),
    (lambda d: d["hosts"][0]["gpus"][0]["vgpu"]["vgpus"].append(d["hosts"][0]["gpus"][0]["vgpu"]["vgpus"][0]),
     "vGPU ID is listed twice"),
    (lambda d: d["hosts"][0]["gpus"][0]["vgpu"].update(colour="red"), "colour"),
])
def test_bad_vgpu_records_are_refused_naming_the_key(edit: object, needle: str) -> None:
    doc = snapshot_to_dict(Snapshot((DiscoveredHost("kvm01", None, (a100(),)),)))
    edit(doc)  # type: ignore[operator]
    node = yamldoc.parse(json.dumps(doc), "snap.json")
    assert node is not None
    with pytest.raises(MigplanError, match=needle) as err:
        parse_snapshot(node, CATALOG)
    assert "snap.json" in str(err.value)


def test_held_instances_are_busy_and_a_gpu_with_time_sliced_vgpus_is_whole_busy() -> None:
    g = a100()
    assert g.busy_instances == (Instance(4, "3g.20gb"),)
    st = g.state("kvm01")
    assert st is not None and st.busy == (Instance(4, "3g.20gb"),)
    whole = DiscoveredGpu(0, "A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", mig_current=False,
                          vgpu=GpuVgpu("sr-iov", "A100-HGX-40GB", devices=(VgpuDevice("vf", "0000:17:00.4", 473,
                                                                                      "A100X-40C"),)))
    ws = whole.state("kvm01")
    assert ws is not None and ws.whole_gpu_busy


def test_pictures_are_shares_of_the_frame_buffer() -> None:
    assert vgpu_picture(vgpu_slices(l4())) == "|" + " " * 47 + "|"
    two = vgpu_picture(vgpu_slices(l4("L4-8C", "L4-8C")))
    assert two == "|L4-8C          |L4-8C          |               |" and len(two) == 49
    # the board's nominal frame buffer (24 GiB), not the GPU's memory, is the whole
    assert vgpu_picture(vgpu_slices(l4("L4-8C", "L4-8C", "L4-8C"))) == "|L4-8C          " * 3 + "|"
    assert vgpu_picture(vgpu_slices(t4())).startswith("|T4-4C      |")


def test_a_vm_on_one_of_several_vfs_of_its_type() -> None:
    """Three VFs hold L4-8C, two VMs run on two of them, and `nvidia-smi vgpu -q` does not say which."""
    g = l4("L4-8C", "L4-8C", "L4-8C")
    assert g.vgpu is not None
    vms = tuple(ActiveVgpu(3251634178 + n, "L4-8C", 1200, f"vm-{n}", None, None, None, 8192, 100) for n in range(2))
    g = DiscoveredGpu(1, None, "NVIDIA L4", mig_capable=False, vgpu=GpuVgpu(
        "sr-iov", "L4", devices=tuple(VgpuDevice("vf", d.address, 1200, "L4-8C") for d in g.vgpu.devices), vgpus=vms))
    data = status_data(Snapshot((DiscoveredHost("kvm01", None, (g,)),)), None, CATALOG)
    text = status_table(data)
    vfs = "one of 0000:27:00.4, 0000:27:00.5, 0000:27:00.6"
    assert f"    L4-8C {vfs}: VM vm-0, FB 100 of 8192 MiB used" in text
    assert f"    L4-8C {vfs}: VM vm-1, FB 100 of 8192 MiB used" in text
    assert f"    L4-8C {vfs}: no VM (1 of them)" in text and text.count("no VM") == 1


def test_status_table_shows_each_vgpu_its_vm_and_frame_buffer() -> None:
    snap = Snapshot((DiscoveredHost("kvm01", "10.0.0.1", (a100(), l4("L4-8C"), t4())),), "2026-12-07T00:00:00Z")
    data = status_data(snap, None, CATALOG)
    gpus = data["hosts"][0]["gpus"]
    assert gpus[0]["vgpu_rows"] == [{"vgpu_id": 3251634177, "type": "A100X-3-20C", "device": "0000:17:00.4",
                                     "instance": "3g.20gb@4", "vm": "llm", "fb_used_mib": 15000,
                                     "fb_total_mib": 20480}]
    assert gpus[2]["vgpu_rows"][0]["vm"] is None and gpus[2]["vgpu_rows"][0]["device"] == UUID
    text = status_table(data)
    assert "3g.20gb@4 (vGPU A100X-3-20C)" in text and "whole GPU (1 vGPU(s))" in text
    assert "  GPU 0: vGPU (MIG-backed, SR-IOV, A100-HGX-40GB): 1 active, creatable -" in text
    assert "    A100X-3-20C 0000:17:00.4 on 3g.20gb@4: VM llm, FB 15000 of 20480 MiB used" in text
    assert "    L4-8C 0000:27:00.4: VM vm-a, FB 6144 of 8192 MiB used" in text
    assert f"    T4-4C {UUID}: no VM" in text
