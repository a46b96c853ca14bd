"""The vGPU host simulator (tests/sim_vgpu): NVIDIA's texts byte for byte where public samples exist
(tests/data/vgpu_sim, sources in its README), the rules that refuse what NVIDIA refuses with the kernel's errno text,
VMs holding vGPUs, faults, and the simulator behind the real sshd."""

from __future__ import annotations

import getpass
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sim_vgpu import fleet as vf
from sim_vgpu import vgpu_sim as vsim
from sim_vgpu import vgpu_table as table

DATA = Path(__file__).parent / "data" / "vgpu_sim"
TS_LINE = re.compile(r"^[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}       $")


def sample(name: str) -> str:
    return (DATA / name).read_text()


def smi(path: Path, *args: str) -> tuple[int, str, str]:
    return vf.call(["nvidia-smi", *args], path)


def tee(path: Path, target: str | Path, data: str) -> tuple[int, str, str]:
    return vf.call(["tee", str(target)], path, data)


def attr(path: Path, rel: str) -> Path:
    return vf.sysfs(path) / rel


# --- verbatim samples ---------------------------------------------------------------------------------------

def test_creatable_vgpu_types_of_a_fresh_vf_is_the_l40s_capture(tmp_path: Path) -> None:
    p = vf.write_host(tmp_path / "h.json", "L40S", vfs_enabled=True, bus_ids=["00000000:26:00.0"])
    nvidia = attr(p, "bus/pci/devices/0000:26:00.4/nvidia")
    assert (nvidia / "creatable_vgpu_types").read_bytes() == (DATA / "creatable_vgpu_types_l40s.txt").read_bytes()
    assert (nvidia / "current_vgpu_type").read_text() == "0\n"  # the capture's current_vgpu_type
    assert (nvidia / "gpu_instance_id").read_text() == (nvidia / "vgpu_params").read_text() == ""


@pytest.mark.slow  # some 1,100 sysfs files: over a second on two busy cores
def test_mdev_types_of_a_vf_are_the_a2_capture(tmp_path: Path) -> None:
    """A real A2 VF (harvester/pcidevices testdata): with one 4 GB vGPU on a sibling VF, only the 4 GB types have an
    instance left on this VF -- every file of every type byte for byte."""
    p = vf.write_host(tmp_path / "h.json", "A2", bus_ids=["00000000:08:00.0"])
    assert tee(p, attr(p, "bus/pci/devices/0000:08:00.0/sriov_numvfs"), "12\n")[0] == 0  # up to 0000:08:01.7
    vf.add_vgpu(p, 0, "A2-4C")  # on the first VF, 0000:08:00.4
    types = attr(p, "bus/pci/devices/0000:08:01.7/mdev_supported_types")
    captured = sorted(d.name for d in (DATA / "mdev_supported_types_a2_vf").iterdir())
    assert sorted(d.name for d in types.iterdir()) == captured
    for name in captured:
        for f in ("name", "description", "available_instances", "device_api"):
            assert (types / name / f).read_bytes() == (DATA / "mdev_supported_types_a2_vf" / name / f).read_bytes(), \
                f"{name}/{f}"
    assert os.readlink(vf.sysfs(p) / "class/mdev_bus/0000:08:01.7") == "../../bus/pci/devices/0000:08:01.7"


def test_mdev_types_of_the_525_host_are_mdevctls_values(tmp_path: Path) -> None:
    """[AKB-525]'s `mdevctl types` with one RTXA6000-2Q running: every type's name, description, device API and
    available instances (23 of 24 for the other 2 GB types, 0 for every other size)."""
    p = replay_525(tmp_path)
    parsed: dict[str, dict[str, str]] = {}
    current: dict[str, str] = {}
    for line in sample("mdevctl_types_525.txt").splitlines()[1:]:
        if line.startswith("  nvidia-"):
            current = parsed.setdefault(line.strip(), {})
        else:
            key, _, value = line.strip().partition(": ")
            current[key] = value
    types = attr(p, "bus/pci/devices/0000:01:00.0/mdev_supported_types")
    assert sorted(parsed) == sorted(d.name for d in types.iterdir())
    for name, fields in parsed.items():
        assert (types / name / "available_instances").read_text() == fields["Available instances"] + "\n", name
        assert (types / name / "device_api").read_text() == fields["Device API"] + "\n"
        assert (types / name / "name").read_text() == fields["Name"] + "\n"
        assert (types / name / "description").read_text() == fields["Description"] + "\n"


def replay_525(tmp_path: Path, running: bool = True) -> Path:
    """The akb486/vgpu host: driver 525.147.01, RTXA6000 types on the physical function 0000:01:00.0."""
    p = vf.write_host(tmp_path / "h525.json", "RTXA6000-525", driver_version="525.147.01", clock=0,
                      bus_ids=["00000000:01:00.0"], names=["NVIDIA GeForce RTX 4088"])
    dev = vf.add_vgpu(p, 0, "RTXA6000-2Q", uuid="00000000-0000-0000-0000-000000000101")
    if running:
        with vf.edit(p) as state:
            state["vgpu"]["next_vgpu_id"] = 3251634190
            vsim.vm_start(state, dev, "win10test,debug-threads=on", vm_id="f2673e1c")
    return p


def test_summary_is_nvidias_text(tmp_path: Path) -> None:
    """`nvidia-smi vgpu` byte for byte after the time line (its clock is the host's): [AKB-525] without and with a
    VM, PolloLoco's driver 450 sample."""
    p = replay_525(tmp_path, running=False)
    code, out, _ = smi(p, "vgpu")
    first, rest = out.split("\n", 1)
    assert code == 0 and TS_LINE.match(first), first
    assert rest == sample("vgpu_summary_525_idle.txt").split("\n", 1)[1]
    p = replay_525(tmp_path)
    assert smi(p, "vgpu")[1].split("\n", 1)[1] == sample("vgpu_summary_525_active.txt")
    p450 = vf.write_host(tmp_path / "h450.json", "P4", driver_version="450.156", bus_ids=["00000000:01:00.0"],
                         names=["T1000"])
    assert smi(p450, "vgpu")[1].split("\n", 1)[1] == sample("vgpu_summary_450_idle.txt").split("\n", 1)[1]


def test_query_and_supported_lists_are_nvidias_text(tmp_path: Path) -> None:
    assert smi(replay_525(tmp_path), "vgpu", "-q") == (0, sample("vgpu_q_525.txt"), "")
    p4 = vf.write_host(tmp_path / "p4.json", "P4", bus_ids=["00000000:01:00.0"])
    assert smi(p4, "vgpu", "-s") == (0, sample("vgpu_s_p4_460.txt"), "")


def test_sriov_manage_says_what_nvidias_script_says(tmp_path: Path) -> None:
    p = vf.write_host(tmp_path / "h.json", ["L4", "T4"], bus_ids=["00000000:41:00.0"])
    assert vf.call(["sriov-manage", "-e", "0000:41:00.0"], p) == (0, "Enabling VFs on 0000:41:00.0\n", "")
    assert vf.call(["sriov-manage", "-e", "41:00.0"], p) == (0, "GPU at 0000:41:00.0 already has VFs enabled.\n", "")
    pf = vf.sysfs(p) / "bus/pci/devices/0000:41:00.0"
    # OpenNebula's guide: virtfn0 -> ../0000:41:00.4, virtfn10 -> ../0000:41:01.6, virtfn31 -> ../0000:41:04.3
    assert [os.readlink(pf / f"virtfn{k}") for k in (0, 10, 31)] == ["../0000:41:00.4", "../0000:41:01.6",
                                                                      "../0000:41:04.3"]
    assert (pf / "sriov_numvfs").read_text() == "32\n"
    assert os.readlink(vf.sysfs(p) / "bus/pci/devices/0000:41:01.6/physfn") == "../0000:41:00.0"
    assert vf.call(["sriov-manage", "-e", "0000:27:00.0"], p) == (0, "", "")  # the T4: no SR-IOV, nothing said
    assert vf.call(["sriov-manage", "-e", "0000:99:00.0"], p)[0] == 1
    code, _, err = vf.call(["sriov-manage"], p)
    assert code == 1 and err.startswith("Usage:\n    /usr/lib/nvidia/sriov-manage <-e|-d> <ssss:bb:dd.f|ALL>\n")
    assert vf.call(["sriov-manage", "-d", "ALL"], p)[1] == "Disabling VFs on 0000:41:00.0\n"
    assert not list(pf.glob("virtfn*")) and (pf / "sriov_numvfs").read_text() == "0\n"


def test_no_vgpu_manager_says_so(tmp_path: Path) -> None:
    p = vf.write_host(tmp_path / "h.json", "T4", manager=False)
    assert smi(p, "vgpu", "-q") == (3, "No supported devices in vGPU mode\n", "")


# --- the rules ----------------------------------------------------------------------------------------------

def test_equal_size_mode_takes_one_size_up_to_its_maximum(tmp_path: Path) -> None:
    p = vf.write_host(tmp_path / "h.json", "A100-SXM4-40GB", vfs_enabled=True)
    vfs = vf.vfs(p)
    creatable = attr(p, f"bus/pci/devices/{vfs[1]}/nvidia/creatable_vgpu_types")
    assert creatable.read_text().count("\n") == 7  # the header and the six time-sliced C types
    assert tee(p, attr(p, f"bus/pci/devices/{vfs[0]}/nvidia/current_vgpu_type"), "459\n")[0] == 0  # A100X-8C
    assert creatable.read_text() == "ID    : vGPU Name\n459   : GRID A100X-8C\n"
    code, _, err = tee(p, attr(p, f"bus/pci/devices/{vfs[1]}/nvidia/current_vgpu_type"), "457\n")  # a 4C
    assert code == 1 and err.endswith("/current_vgpu_type: Invalid argument\n")
    for k in range(1, 5):  # A100X-8C: at most 5 per GPU in equal-size mode
        vf.write(p, str(attr(p, f"bus/pci/devices/{vfs[k]}/nvidia/current_vgpu_type")), "459\n")
    assert attr(p, f"bus/pci/devices/{vfs[5]}/nvidia/creatable_vgpu_types").read_text() == "ID    : vGPU Name\n"
    assert tee(p, attr(p, f"bus/pci/devices/{vfs[5]}/nvidia/current_vgpu_type"), "459\n")[2].endswith(
        ": No space left on device\n")
    assert smi(p, "vgpu", "-c")[1] == "GPU 00000000:17:00.0\n"
    assert attr(p, f"bus/pci/devices/{vfs[0]}/nvidia/current_vgpu_type").read_text() == "459\n"
    assert attr(p, f"bus/pci/devices/{vfs[0]}/nvidia/creatable_vgpu_types").read_text() == "ID    : vGPU Name\n"


def test_current_vgpu_type_refuses_what_the_driver_refuses(tmp_path: Path) -> None:
    p = vf.write_host(tmp_path / "h.json", "L4", vfs_enabled=True)
    cur = attr(p, f"bus/pci/devices/{vf.vfs(p)[0]}/nvidia/current_vgpu_type")
    cases = [("abc\n", "Invalid argument"), ("0\n", "Operation not permitted"), ("99999\n", "No such device"),
             ("1201\n", None), ("1201\n", "Operation not permitted"), ("0\n", None)]
    for data, error in cases:
        code, _, err = tee(p, cur, data)
        assert (code, err) == ((0, "") if error is None else (1, f"tee: {cur}: {error}\n")), data
    assert cur.read_text() == "0\n"
    code, _, err = tee(p, attr(p, f"bus/pci/devices/{vf.vfs(p)[0]}/nvidia/creatable_vgpu_types"), "1201\n")
    assert code == 1 and err.endswith(": Permission denied\n")  # read-only attribute
    assert tee(p, attr(p, "bus/pci/devices/0000:17:00.9/nvidia/current_vgpu_type"), "1\n")[2].endswith(
        ": No such file or directory\n")


def test_no_vgpu_without_virtual_functions_and_none_on_a_gpu_without_vgpu_files(tmp_path: Path) -> None:
    p = vf.write_host(tmp_path / "h.json", "L4")
    assert not attr(p, "bus/pci/devices/0000:17:00.4").exists()
    assert (attr(p, "bus/pci/devices/0000:17:00.0/sriov_numvfs")).read_text() == "0\n"
    assert tee(p, attr(p, "bus/pci/devices/0000:17:00.0/sriov_numvfs"), "33\n")[2].endswith(
        ": Numerical result out of range\n")
    assert tee(p, attr(p, "bus/pci/devices/0000:17:00.0/sriov_numvfs"), "4\n")[0] == 0
    assert len(vf.vfs(p)) == 4


def test_mixed_size_mode_mixes_sizes_within_the_frame_buffer(tmp_path: Path) -> None:
    p = vf.write_host(tmp_path / "h.json", ["L4", "T4"], vfs_enabled=True)
    assert smi(p, "vgpu", "-i", "0", "-shm", "1") == (
        0, "Enabled vGPU heterogeneous mode for GPU 00000000:17:00.0\nAll done.\n", "")
    for name in ("L4-12C", "L4-8C", "L4-4C"):  # 24 GB together: all of the L4's
        vf.add_vgpu(p, 0, name)
    assert smi(p, "vgpu", "-i", "0", "-c")[1] == "GPU 00000000:17:00.0\n"
    with pytest.raises(vsim.SimError) as err:
        vf.add_vgpu(p, 0, "L4-4C")
    assert err.value.errno == "ENOSPC"
    assert smi(p, "vgpu", "-i", "0", "-shm", "0")[0] == 19  # vGPUs exist: in use
    assert smi(p, "vgpu", "-i", "1", "-shm", "1") == (
        3, "Unable to set vGPU heterogeneous mode for GPU 00000000:27:00.0: Not Supported\n", "")  # T4
    q = vf.write_host(tmp_path / "q.json", "L4", vfs_enabled=True, mixed=True)
    for _ in range(4):  # L4-4C: 6 in equal-size mode, 4 in mixed-size mode
        vf.add_vgpu(q, 0, "L4-4C")
    assert "L4-4C" not in smi(q, "vgpu", "-c")[1] and "L4-8C" in smi(q, "vgpu", "-c")[1]
    assert vf.call(["sriov-manage", "-d", "ALL"], q)[2].endswith("echo: write error: Device or resource busy\n")


def test_mig_backed_vgpus_sit_on_free_gpu_instances(tmp_path: Path) -> None:
    p = vf.write_host(tmp_path / "h.json", "A100-SXM4-40GB", vfs_enabled=True,
                      layouts=[["3g.20gb@4", "2g.10gb@0", "2g.10gb@2"]])
    assert "GRID A100X-1-5C" in smi(p, "vgpu", "-s")[1] and "GRID A100X-4C" not in smi(p, "vgpu", "-s")[1]
    assert smi(p, "vgpu", "-c")[1] == "GPU 00000000:17:00.0\n    GRID A100X-2-10C\n    GRID A100X-3-20C\n"
    vfs = vf.vfs(p)
    assert tee(p, attr(p, f"bus/pci/devices/{vfs[0]}/nvidia/current_vgpu_type"), "457\n")[2].endswith(
        "Invalid argument\n")  # a time-sliced type on a GPU in MIG mode
    instances = vf.read_state(p)["gpus"][0]["gpu_instances"]
    gi3 = next(gi["id"] for gi in instances if gi["profile_id"] == 9)  # the 3g.20gb instance
    assert tee(p, attr(p, f"bus/pci/devices/{vfs[0]}/nvidia/gpu_instance_id"), f"{gi3}\n")[0] == 0
    assert attr(p, f"bus/pci/devices/{vfs[0]}/nvidia/creatable_vgpu_types").read_text() == (
        "ID    : vGPU Name\n465   : GRID A100X-3-20C\n")
    assert tee(p, attr(p, f"bus/pci/devices/{vfs[0]}/nvidia/current_vgpu_type"), "465\n")[0] == 0
    first, second = vf.add_vgpu(p, 0, "A100X-2-10C"), vf.add_vgpu(p, 0, "A100X-2-10C")
    assert smi(p, "vgpu", "-c")[1] == "GPU 00000000:17:00.0\n"
    with pytest.raises(vsim.SimError):
        vf.add_vgpu(p, 0, "A100X-2-10C")  # two 2g.10gb instances: both taken
    state = vf.read_state(p)
    gis = sorted(v["gi"] for v in state["gpus"][0]["vgpu"]["vgpus"])
    assert gis == sorted(gi["id"] for gi in instances) and state["gpus"][0]["vgpu_holds"] == [*gis, "gpu"]
    vf.vm_start(p, second, "vm-b", fb_used_mib=512)
    assert "        GPU Instance ID                   : 4\n" in smi(p, "vgpu", "-q")[1]
    # the MIG simulator, same state: a GPU instance a vGPU sits on is in use; so is the GPU for a reset
    code, out, _ = smi(p, "mig", "-dci")
    assert code == 0
    code, out, _ = smi(p, "mig", "-dgi", "-gi", str(gi3))
    assert code == 19 and out.endswith("Failed to destroy GPU instances: In use by another client\n")
    assert smi(p, "-r")[0] == 19
    vf.write(p, str(attr(p, f"bus/pci/devices/{vfs[0]}/nvidia/current_vgpu_type")), "0\n")
    assert smi(p, "mig", "-dgi", "-gi", str(gi3))[0] == 0
    assert "GRID A100X-3-20C" not in smi(p, "vgpu", "-c")[1]  # its GPU instance is gone
    assert (first, second) == (vfs[1], vfs[2])


def test_mdev_types_count_down_and_refuse_what_mdev_refuses(tmp_path: Path) -> None:
    p = vf.write_host(tmp_path / "h.json", "T4")
    types = attr(p, "bus/pci/devices/0000:17:00.0/mdev_supported_types")
    assert (types / "nvidia-319/name").read_text() == "GRID T4-4C\n"
    assert (types / "nvidia-319/description").read_text() == (
        "num_heads=1, frl_config=60, framebuffer=4096M, max_resolution=4096x2400, max_instance=4\n")
    uuid = "4d0a9c1e-0000-4000-8000-000000000001"
    assert tee(p, types / "nvidia-319/create", uuid + "\n")[0] == 0
    assert [(types / f"nvidia-{t}/available_instances").read_text() for t in (319, 320, 321)] == ["3\n", "0\n", "0\n"]
    assert os.readlink(vf.sysfs(p) / f"bus/mdev/devices/{uuid}") == f"../../pci/devices/0000:17:00.0/{uuid}"
    assert os.readlink(types / f"nvidia-319/devices/{uuid}") == f"../../../{uuid}"
    assert tee(p, types / "nvidia-319/create", uuid + "\n")[2].endswith(": File exists\n")
    assert tee(p, types / "nvidia-320/create", "4d0a9c1e-0000-4000-8000-000000000002\n")[2].endswith(
        ": Invalid argument\n")  # no instance left of another size
    assert tee(p, types / "nvidia-319/create", "not-a-uuid\n")[2].endswith(": Invalid argument\n")
    assert tee(p, f"/sys/bus/mdev/devices/{uuid}/remove", "1\n")[0] == 0  # the documented path, mapped
    assert (types / "nvidia-320/available_instances").read_text() == "2\n"
    assert not (vf.sysfs(p) / f"bus/mdev/devices/{uuid}").exists()


def test_a_running_vm_holds_its_vgpu(tmp_path: Path) -> None:
    p = vf.write_host(tmp_path / "h.json", ["L4", "T4"], vfs_enabled=True)
    dev = vf.add_vgpu(p, 0, "L4-8C")
    uuid = vf.add_vgpu(p, 1, "T4-16C")
    vid = vf.vm_start(p, dev, "inference-01", uuid="8c1d0e2f-1111-4222-8333-944455556666", fb_used_mib=6144)
    vf.vm_start(p, uuid, "batch-02")
    cur = attr(p, f"bus/pci/devices/{dev}/nvidia/current_vgpu_type")
    assert tee(p, cur, "0\n")[2] == f"tee: {cur}: Device or resource busy\n"
    assert tee(p, cur, "1202\n")[2] == f"tee: {cur}: Operation not permitted\n"
    remove = attr(p, f"bus/pci/devices/0000:27:00.0/{uuid}/remove")
    assert tee(p, remove, "1\n")[2] == f"tee: {remove}: Device or resource busy\n"
    out = smi(p, "vgpu", "-q", "-i", "0")[1]
    for line in ("    Active vGPUs                          : 1", f"    vGPU ID                               : {vid}",
                 "        VM Name                           : inference-01",
                 "        VM UUID                           : 8c1d0e2f-1111-4222-8333-944455556666",
                 "            Total                         : 8192 MiB",
                 "            Used                          : 6144 MiB",
                 "            Free                          : 2048 MiB"):
        assert line + "\n" in out, line
    vf.vm_set(p, dev, fb_used_mib=8000)
    assert "            Used                          : 8000 MiB\n" in smi(p, "vgpu", "-q", "-i", "0")[1]
    with pytest.raises(vsim.SimError):
        vf.vm_set(p, dev, fb_used_mib=9000)
    summary = smi(p, "vgpu")[1]
    assert f"|      {vid}  NVIDIA L4-8... | 8c1d...  inference-01        |      0%    |\n" in summary
    assert f"{uuid}" in smi(p, "vgpu", "-q", "-i", "1")[1]  # the mdev UUID
    vf.vm_stop(p, dev)
    assert smi(p, "vgpu", "-q", "-i", "0")[1] == "GPU 00000000:17:00.0\n    Active vGPUs                          : 0\n"
    assert tee(p, cur, "0\n")[0] == 0


@pytest.mark.slow  # seven processes
def test_vm_control_and_sysfs_through_real_processes(tmp_path: Path) -> None:
    """The bin/ programs as processes: a client that writes `echo N | tee /sys/...` (the documented path: the
    wrapper maps it into the host's sysroot, never the real /sys) and reads with `cat`."""
    p = vf.write_host(tmp_path / "h.json", "L4", vfs_enabled=True)
    vf0 = vf.vfs(p)[0]
    script = (f"echo 1205 | tee /sys/bus/pci/devices/{vf0}/nvidia/current_vgpu_type >/dev/null && "
              f"cat /sys/bus/pci/devices/{vf0}/nvidia/current_vgpu_type && "
              f"cat \"$MIGPLAN_SIM_SYSROOT/sys/bus/pci/devices/{vf0}/nvidia/creatable_vgpu_types\" && "
              f"vgpu-sim vm start {vf0} vm-x --fb-used 1024 && nvidia-smi vgpu -q | grep Used")
    done = vf.run(["sh", "-c", script], p)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[:2] == ["1205", "ID    : vGPU Name"]
    assert done.stdout.splitlines()[-1] == "            Used                          : 1024 MiB"
    refused = vf.run(["sh", "-c", f"echo 0 | tee /sys/bus/pci/devices/{vf0}/nvidia/current_vgpu_type"], p)
    assert refused.returncode == 1 and refused.stderr.endswith("current_vgpu_type: Device or resource busy\n")
    assert vf.run(["vgpu-sim", "vm", "stop", vf0], p).returncode == 0
    assert vf.run(["vgpu-sim", "vm", "stop", vf0], p).returncode == 1


def test_an_unprivileged_user_cannot_write_sysfs(tmp_path: Path) -> None:
    p = vf.write_host(tmp_path / "h.json", "L4", vfs_enabled=True, root=False)
    cur = attr(p, f"bus/pci/devices/{vf.vfs(p)[0]}/nvidia/current_vgpu_type")
    assert tee(p, cur, "1201\n") == (1, "1201\n", f"tee: {cur}: Permission denied\n")
    assert smi(p, "vgpu", "-shm", "1")[0] == 4


def test_a_write_around_the_simulator_is_recorded_and_undone(tmp_path: Path) -> None:
    p = vf.write_host(tmp_path / "h.json", "L4", vfs_enabled=True)
    cur = attr(p, f"bus/pci/devices/{vf.vfs(p)[0]}/nvidia/current_vgpu_type")
    cur.chmod(0o644)
    cur.write_text("1201\n")  # a shell redirection, not tee: a real attribute would have validated it
    smi(p, "vgpu")
    assert cur.read_text() == "0\n"
    assert vf.read_state(p)["vgpu"]["bypassed"] == [str(cur.relative_to(vf.sysroot(p)))]


# --- faults -------------------------------------------------------------------------------------------------

def test_an_injected_errno_fails_the_write_and_changes_nothing(tmp_path: Path) -> None:
    p = vf.write_host(tmp_path / "h.json", "L4", vfs_enabled=True,
                      faults=[{"match": "write current_vgpu_type 1203", "errno": "EIO", "times": 1}])
    cur = attr(p, f"bus/pci/devices/{vf.vfs(p)[0]}/nvidia/current_vgpu_type")
    assert tee(p, cur, "1203\n")[2] == f"tee: {cur}: Input/output error\n"
    assert cur.read_text() == "0\n"
    assert tee(p, cur, "1203\n")[0] == 0  # the fault fired once
    assert vf.read_state(p)["vgpu"]["writes"][-2:] == [
        [str(cur.relative_to(vf.sysroot(p))), "1203\n", "EIO"], [str(cur.relative_to(vf.sysroot(p))), "1203\n", "ok"]]


def test_a_busy_device_and_a_lost_answer(tmp_path: Path) -> None:
    p = vf.write_host(tmp_path / "h.json", "T4", faults=[
        {"match": "write create", "errno": "EBUSY", "times": 1},
        {"match": "write create", "errno_after": "EIO", "times": 1}])
    types = attr(p, "bus/pci/devices/0000:17:00.0/mdev_supported_types")
    uuid = "4d0a9c1e-0000-4000-8000-0000000000aa"
    assert tee(p, types / "nvidia-321/create", uuid)[2].endswith(": Device or resource busy\n")
    assert not vf.read_state(p)["gpus"][0]["vgpu"]["vgpus"]
    assert tee(p, types / "nvidia-321/create", uuid)[2].endswith(": Input/output error\n")
    assert [v["dev"] for v in vf.read_state(p)["gpus"][0]["vgpu"]["vgpus"]] == [uuid]  # it happened anyway


def test_the_driver_disappears_mid_apply(tmp_path: Path) -> None:
    p = vf.write_host(tmp_path / "h.json", "L4", vfs_enabled=True,
                      faults=[{"match": "write current_vgpu_type", "skip": 1, "unload": True}])
    vfs = vf.vfs(p)
    assert tee(p, attr(p, f"bus/pci/devices/{vfs[0]}/nvidia/current_vgpu_type"), "1203\n")[0] == 0
    cur = attr(p, f"bus/pci/devices/{vfs[1]}/nvidia/current_vgpu_type")
    assert tee(p, cur, "1203\n")[2] == f"tee: {cur}: No such file or directory\n"
    assert not (vf.sysfs(p) / f"bus/pci/devices/{vfs[0]}/nvidia").exists()
    code, out, _ = smi(p, "vgpu", "-q")
    assert code == 9 and out.startswith("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver")
    q = vf.write_host(tmp_path / "q.json", "L4", faults=[{"match": "vgpu -c", "unload": True}])
    assert smi(q, "vgpu", "-c")[0] == 0 and smi(q, "vgpu", "-c")[0] == 9  # it answered, then the driver went


def test_nvidia_smi_vgpu_faults_replace_the_answer(tmp_path: Path) -> None:
    p = vf.write_host(tmp_path / "h.json", "L4", faults=[{"match": "vgpu -q", "exit": 255, "stdout": "garbage\n"}])
    assert smi(p, "vgpu", "-q") == (255, "garbage\n", "")
    assert smi(p, "vgpu", "-bogus")[0] == 2


# --- independence, and the simulator behind the real sshd -------------------------------------------------

def test_the_simulator_imports_nothing_from_migplan() -> None:
    code = ("import sys; sys.path.insert(0, 'tests'); import sim_vgpu.fleet, sim_vgpu.vgpu_sim; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'migplan'))")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[1], capture_output=True,
                          text=True, check=True)
    assert done.stdout.strip() == "[]"
    for src in Path(__file__).with_name("sim_vgpu").glob("*.py"):
        assert "migplan" not in re.sub(r'""".*?"""', "", src.read_text(), flags=re.S).replace("MIGPLAN_", ""), src


def test_the_table_keeps_nvidias_numbers() -> None:
    """Spot checks of the table against its sources' rows ([AIE] Tables 42, 73, 74, 105)."""
    a100, l4, t4 = table.model("A100-SXM4-40GB"), table.model("L4"), table.model("T4")
    assert [(t.short, t.fb_mib, t.max_equal, t.max_mixed) for t in a100.types if not t.mig_backed][0] == (
        "A100X-4C", 4096, 10, 8)
    assert a100.type("A100X-3-20C").mig_profile == "3g.20gb" and a100.type("A100X-1-5CME").max_equal == 1
    assert [(t.fb_mib, t.max_equal, t.max_mixed) for t in l4.types] == [
        (4096, 6, 4), (6144, 4, 4), (8192, 3, 2), (12288, 2, 2), (24576, 1, 1)]
    assert not t4.mixed_size and [t.id for t in t4.types] == [319, 320, 321]


@pytest.fixture(scope="module")
def vgpu_sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    sys.path.insert(0, str(Path(__file__).parent / "fleet"))
    from sshd import SshServer, ensure_sshd  # tests/fleet/sshd.py: the real sshd the fleet tests use

    sshd, reason = ensure_sshd()
    if sshd is None:
        pytest.skip(reason)
    if shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        pytest.skip("the OpenSSH client is not installed (openssh-client)")
    server = SshServer(tmp_path_factory.mktemp("vgpu-sshd"), sshd, count=1)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.slow
def test_nvidia_smi_vgpu_and_sysfs_over_ssh(vgpu_sshd: Any, tmp_path: Path) -> None:
    """A simulated KVM host behind the real sshd (tests/fleet/sshd.py), the simulator's programs in the host's own
    bin: `nvidia-smi vgpu -q` and a sysfs write over SSH, as an unprivileged client would run them."""
    host = vgpu_sshd.hosts[0]
    host.reset()
    vf.shims(host.bin)
    vf.write_state(host.state, vf.host_state("L4", vfs_enabled=True, hostname="kvm01"))
    vf0 = vf.vfs(host.state)[0]

    def ssh(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ssh", "-p", str(vgpu_sshd.port), "-i", str(vgpu_sshd.client_key), "-o", "BatchMode=yes",
             "-o", f"UserKnownHostsFile={vgpu_sshd.known_hosts}", "-o", "StrictHostKeyChecking=yes",
             f"{getpass.getuser()}@{host.address}", command], capture_output=True, text=True, timeout=60)

    done = ssh(f"echo 1203 | tee /sys/bus/pci/devices/{vf0}/nvidia/current_vgpu_type && "
               f"vgpu-sim vm start {vf0} vm-ssh --fb-used 2048 >/dev/null && nvidia-smi vgpu -q")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("1203\nGPU 00000000:17:00.0\n    Active vGPUs                          : 1\n")
    assert "            Used                          : 2048 MiB\n" in done.stdout
    refused = ssh(f"echo 0 | tee /sys/bus/pci/devices/{vf0}/nvidia/current_vgpu_type")
    assert refused.returncode == 1 and refused.stderr.endswith("current_vgpu_type: Device or resource busy\n")
    listed = ssh(f"cat /sys/bus/pci/devices/{vf0}/nvidia/current_vgpu_type; nvidia-smi mig -lgip")
    assert listed.stdout.startswith("1203\n") and "No MIG-supported devices found." in listed.stdout
