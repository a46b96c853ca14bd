"""The argv builders of a KVM vGPU host's changes (migplan/smi/vgpu_commands.py; issue 26, "Apply on KVM hosts"):
sysfs writes as `echo N | tee FILE` (the value on stdin, never on a command line), sriov-manage, `nvidia-smi vgpu
-shm`, and the MIG commands of MIG-backed vGPUs (GPU instances without compute instances); every token validated."""

from __future__ import annotations

import pytest

from migplan.catalog import builtin_catalog
from migplan.fleet.vgpu_apply import back_actions, read_only, stale_reasons
from migplan.model.vgpu import VgpuAction, VgpuGpuState, VgpuSlot
from migplan.smi import SmiCommandError
from migplan.smi import vgpu_commands as vc

A100 = builtin_catalog().get("A100-SXM4-40GB")
VF = "0000:17:00.4"
UUID = "aaaaaaaa-bbbb-4ccc-8ddd-000000000001"


def test_a_vf_type_is_written_through_tee_with_the_value_on_stdin() -> None:
    w = vc.set_vgpu_type("/", VF, 457)
    assert w.argv == ["tee", "/sys/bus/pci/devices/0000:17:00.4/nvidia/current_vgpu_type"]
    assert w.stdin == b"457\n"
    assert str(w) == "echo 457 | tee /sys/bus/pci/devices/0000:17:00.4/nvidia/current_vgpu_type"
    assert vc.clear_vgpu_type("/", VF).stdin == b"0\n"
    g = vc.set_gpu_instance_id("/tmp/sim.sysroot", VF, 3)
    assert g.argv == ["tee", "/tmp/sim.sysroot/sys/bus/pci/devices/0000:17:00.4/nvidia/gpu_instance_id"]
    assert g.stdin == b"3\n" and g.attribute == "gpu_instance_id"


def test_mdev_devices_are_created_with_a_uuid_and_removed_with_1() -> None:
    c = vc.mdev_create("/", "0000:41:00.0", 319, UUID)
    assert c.argv == ["tee", "/sys/bus/pci/devices/0000:41:00.0/mdev_supported_types/nvidia-319/create"]
    assert c.stdin == f"{UUID}\n".encode()
    r = vc.mdev_remove("/", UUID)
    assert r.argv == ["tee", f"/sys/bus/mdev/devices/{UUID}/remove"] and r.stdin == b"1\n"
    assert vc.mdev_types("/", "0000:41:00.0") == ["ls", "-1", "--",
                                                  "/sys/bus/pci/devices/0000:41:00.0/mdev_supported_types"]
    assert vc.mdev_type_names("/", "0000:41:00.0", [319, 320])[2:] == [
        "/sys/bus/pci/devices/0000:41:00.0/mdev_supported_types/nvidia-319/name",
        "/sys/bus/pci/devices/0000:41:00.0/mdev_supported_types/nvidia-320/name"]


def test_sriov_manage_mixed_size_mode_and_vf_reads() -> None:
    assert vc.sriov_manage("00000000:17:00.0", True) == ["/usr/lib/nvidia/sriov-manage", "-e", "0000:17:00.0"]
    assert vc.sriov_manage("0000:17:00.0", False, "sriov-manage") == ["sriov-manage", "-d", "0000:17:00.0"]
    assert vc.mixed_mode(2, True) == ["nvidia-smi", "vgpu", "-i", "2", "-shm", "1"]
    assert vc.mixed_mode(0, False)[-1] == "0"
    assert vc.supported_types(1) == ["nvidia-smi", "vgpu", "-s", "-v", "-i", "1"]
    assert read_only(vc.supported_types(1))  # a listing: a dry run runs it
    assert vc.numvfs("/", "0000:17:00.0") == ["cat", "--", "/sys/bus/pci/devices/0000:17:00.0/sriov_numvfs"]
    assert vc.vf_attributes("/", [VF, "0000:17:00.5"], "current_vgpu_type") == [
        "cat", "--", "/sys/bus/pci/devices/0000:17:00.4/nvidia/current_vgpu_type",
        "/sys/bus/pci/devices/0000:17:00.5/nvidia/current_vgpu_type"]


def test_mig_backed_vgpus_get_gpu_instances_without_compute_instances() -> None:
    assert vc.gi_create(A100, 0, "3g.20gb@4") == ["nvidia-smi", "mig", "-i", "0", "-cgi", "9:4"]
    assert vc.gi_destroy(1, 7) == ["nvidia-smi", "mig", "-i", "1", "-dgi", "-gi", "7"]
    assert vc.ci_destroy(1, 7) == ["nvidia-smi", "mig", "-i", "1", "-dci", "-gi", "7"]
    assert vc.mig_mode(0, True) == ["nvidia-smi", "-i", "0", "-mig", "1"]
    assert vc.gpu_reset(3) == ["nvidia-smi", "-r", "-i", "3"]


@pytest.mark.parametrize("build", [
    lambda: vc.set_vgpu_type("/", "0000:17:00.4; rm -rf /", 457),
    lambda: vc.set_vgpu_type("/", VF, 0),
    lambda: vc.set_vgpu_type("/", VF, True),
    lambda: vc.set_vgpu_type("relative/root", VF, 457),
    lambda: vc.set_vgpu_type("/a/../b", VF, 457),
    lambda: vc.set_gpu_instance_id("/", VF, -1),
    lambda: vc.mdev_create("/", "0000:41:00.0", 319, "not-a-uuid"),
    lambda: vc.mdev_create("/", "0000:41:00.0", 319, UUID.upper() + "\n1"),
    lambda: vc.mdev_remove("/", "../../etc"),
    lambda: vc.sriov_manage("ALL", True),
    lambda: vc.sriov_manage("0000:17:00.0", True, "sriov-manage; reboot"),
    lambda: vc.sriov_manage("0000:17:00.0", True, "/usr/../bin/sh"),
    lambda: vc.mixed_mode(-1, True),
    lambda: vc.mixed_mode(0, 1),  # type: ignore[arg-type]
    lambda: vc.gi_create(A100, 0, "3g.20gb@5"),  # not a placement 3g.20gb takes
    lambda: vc.gi_create(A100, 0, "3g.20gb"),
    lambda: vc.vf_attribute("/", VF, "sriov_numvfs"),
    lambda: vc.vf_attributes("/", [], "current_vgpu_type"),
])
def test_unchecked_tokens_never_reach_a_command(build: object) -> None:
    with pytest.raises(SmiCommandError):
        build()  # type: ignore[operator]


def test_a_dry_run_runs_reads_only() -> None:
    assert read_only(["ls", "-1", "--", "/sys/bus/pci/devices/0000:17:00.0"])
    assert read_only(["cat", "--", "/sys/x"]) and read_only(["nvidia-smi", "vgpu", "-q"])
    assert not read_only(vc.set_vgpu_type("/", VF, 457).argv)
    assert not read_only(vc.sriov_manage("0000:17:00.0", True))
    assert not read_only(vc.mixed_mode(0, True))
    assert not read_only(vc.gi_create(A100, 0, "3g.20gb@4")) and not read_only(vc.mig_mode(0, True))


def _state(**kw: object) -> VgpuGpuState:
    base: dict[str, object] = {"host": "kvm01", "index": 0, "model": "L4", "board": "L4", "host_mode": "sr-iov",
                               "allowed": ("time_sliced",), "vfs": 32, "pci_bus_id": "00000000:17:00.0"}
    base.update(kw)
    return VgpuGpuState(**base)  # type: ignore[arg-type]


def test_the_rollback_removes_what_was_made_and_remakes_what_was_removed_on_its_own_device() -> None:
    before = _state(mode="time_sliced", slots=(VgpuSlot("L4-8C", device=VF),))
    now = _state(mode="time_sliced", slots=(VgpuSlot("L4-12C", device="0000:17:00.5"),))
    assert back_actions(now, before) == [VgpuAction("remove", "L4-12C", "0000:17:00.5"),
                                         VgpuAction("create", "L4-8C", VF)]
    a100 = dict(model="A100-SXM4-40GB", board="A100-HGX-40GB", allowed=("mig_backed",))
    was = _state(vfs=0, **a100)  # type: ignore[arg-type]
    half = _state(vfs=16, mig_enabled=True, layout=("3g.20gb@4",), mode="mig_backed",
                  slots=(VgpuSlot("A100X-3-20C", device=VF, placement="3g.20gb@4"),), **a100)  # type: ignore[arg-type]
    assert [a.kind for a in back_actions(half, was, [VgpuAction("mixed-on")])] == [
        "remove", "gi-destroy", "mig-disable", "vfs-disable"]  # sriov-manage -d clears mixed-size mode itself
    assert back_actions(was, was) == []


def test_the_stale_check_names_what_changed_and_ignores_the_inventory_modes() -> None:
    planned = _state(mode="time_sliced", slots=(VgpuSlot("L4-8C", device=VF),))
    assert stale_reasons(planned, _state(mode="time_sliced", slots=(VgpuSlot("L4-8C", device=VF),),
                                         allowed=("time_sliced", "time_sliced_mixed"))) == []
    started = _state(mode="time_sliced", slots=(VgpuSlot("L4-8C", vm="vm:x", running=True, device=VF),))
    why = stale_reasons(planned, started)
    assert any("vm:x running" in w and "is new" in w for w in why) and any("is gone" in w for w in why)
    assert stale_reasons(planned, _state(mode="time_sliced", vfs=0, slots=planned.slots)) == ["vfs was 32, is 0"]
