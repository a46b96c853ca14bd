"""Discovery of vGPU hosts over the real sshd against the vGPU host simulator (tests/sim_vgpu; issue 26, Discovery):
an A100 with MIG-backed vGPUs on SR-IOV virtual functions, an L4 time-sliced, a T4 on mdev devices; a host without
the vGPU manager; the driver gone mid-read, bad output, a sysfs that cannot be read, hostile VM names."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Fleet
from sim_vgpu import fleet as vf
from simhosts import state, write

from migplan.adapters.ssh import SshFleet
from migplan.catalog import builtin_catalog
from migplan.documents import load_snapshot, write_snapshot
from migplan.fleet.discover import discover_fleet
from migplan.fleet.snapshot import Snapshot, snapshot_to_dict
from migplan.inventory import load_inventory

pytestmark = pytest.mark.slow

CATALOG = builtin_catalog()
VM_UUID = "11111111-2222-3333-4444-555555555555"
# everything discovery may ask the simulator's nvidia-smi (its log, without "nvidia-smi"): the MIG reads and the
# read-only vGPU ones; never -shm, never a MIG change
READ_ONLY = {("--query-gpu=index,uuid,name,pci.bus_id,memory.total,mig.mode.current,mig.mode.pending,pci.device_id",
              "--format=csv,noheader,nounits"), ("-L",),
             ("--query-compute-apps=pid,gpu_uuid,used_memory,process_name", "--format=csv,noheader,nounits"),
             ("--query-gpu=index,driver_version", "--format=csv,noheader,nounits"), (),
             *(("mig", x) for x in ("-lgi", "-lci", "-lgip", "-lgipp")),
             ("vgpu",), ("vgpu", "-q"), ("vgpu", "-s", "-v"), ("vgpu", "-c")}


def discover(fleet: Fleet, hosts: dict[str, dict[str, object]], sysfs_root: str | None = None) -> Snapshot:
    inv = load_inventory(fleet.inventory(hosts), CATALOG)
    (first,) = {Path(str(e["state_dir"])).parent for e in list(hosts.values())[:1]}
    root = sysfs_root or str(vf.sysroot(first / "state.json"))
    with SshFleet(fleet.options()) as ssh:
        return discover_fleet(inv, CATALOG, ssh.runner, parallel=4, vgpu=True, sysfs_root=root)


def kvm_host(fleet: Fleet, i: int = 0, **kw: object) -> Path:
    """A KVM host: GPU 0 an A100 in MIG mode with two MIG-backed vGPUs (one a VM runs), GPU 1 an L4 with a running
    L4-8C on a VF, GPU 2 a T4 with a running T4-4C on an mdev device."""
    h = fleet.host(i)
    vf.shims(h.bin)
    p = vf.write_host(h.state, ["A100-SXM4-40GB", "L4", "T4"], vfs_enabled=True, hostname="kvm01",
                      layouts=[["3g.20gb@4", "2g.10gb@0", "2g.10gb@2"], None, None], **kw)  # type: ignore[arg-type]
    a = vf.add_vgpu(p, 0, "A100X-3-20C")
    vf.vm_start(p, a, "llm-01", fb_used_mib=15000, uuid=VM_UUID)
    vf.add_vgpu(p, 0, "A100X-2-10C")
    vf.vm_start(p, vf.add_vgpu(p, 1, "L4-8C"), "inference-02", fb_used_mib=6144)
    vf.vm_start(p, vf.add_vgpu(p, 2, "T4-4C"), "t4-vm", fb_used_mib=1000)
    return p


def test_a100_mig_backed_l4_time_sliced_and_t4_mdev(fleet: Fleet, tmp_path: Path) -> None:
    p = kvm_host(fleet)
    snap = discover(fleet, {"kvm01": fleet.host_entry(fleet.host(0))})
    (rec,) = snap.hosts
    assert rec.ok, rec.error
    a100, l4, t4 = rec.gpus
    # the A100: MIG-backed vGPUs on SR-IOV VFs, each on its GPU instance; the one a VM runs with its frame buffer
    assert a100.model == "A100-SXM4-40GB" and a100.mig_current and a100.vgpu is not None
    v = a100.vgpu
    assert (v.host_mode, v.board, v.total_vfs, len(v.devices)) == ("sr-iov", "A100-HGX-40GB", 16, 16)
    assert "A100X-3-20C" in v.supported and v.creatable == ("A100X-2-10C",)  # one 2g.10gb left free
    assert [(d.address, d.type_name, d.gpu_instance_id) for d in v.held] == [
        ("0000:17:00.4", "A100X-3-20C", 1), ("0000:17:00.5", "A100X-2-10C", 3)]
    (vm,) = v.vgpus
    assert (vm.type_name, vm.vm_name, vm.vm_uuid, vm.device, vm.gpu_instance_id, vm.fb_used_mib, vm.fb_total_mib) == (
        "A100X-3-20C", "llm-01", VM_UUID, "0000:17:00.4", 1, 15000, 20480)
    held = {i.instance for i in a100.instances if i.gi_id in (1, 3)}
    assert set(a100.busy_instances) == held  # a GPU instance a vGPU sits on is never taken as idle
    # the L4: time-sliced on a VF; the T4: an mdev device on the GPU itself
    assert l4.vgpu is not None and (l4.vgpu.host_mode, l4.vgpu.board) == ("sr-iov", "L4")
    assert [(a.type_name, a.vm_name, a.device, a.fb_used_mib) for a in l4.vgpu.vgpus] == [
        ("L4-8C", "inference-02", vf.vfs(p, 1)[0], 6144)]
    assert t4.vgpu is not None and (t4.vgpu.host_mode, t4.vgpu.board, t4.vgpu.total_vfs) == ("non-sr-iov", "T4", None)
    (dev,) = t4.vgpu.devices
    assert dev.kind == "mdev" and dev.type_id == 319 and dev.type_name == "T4-4C"
    assert [(a.type_name, a.device) for a in t4.vgpu.vgpus] == [("T4-4C", dev.address)]
    assert not any("vGPU type" in n or "sysfs" in n for n in rec.notes), rec.notes
    # discovery only read: the simulator saw no write and only read-only nvidia-smi commands
    st = vf.read_state(p)
    assert not st["vgpu"].get("bypassed") and len(st["vgpu"]["writes"]) == 4  # the set-up's four add_vgpu
    assert {tuple(a) for a in st["log"]} <= READ_ONLY, {tuple(a) for a in st["log"]} - READ_ONLY
    # the snapshot: version 2, read back equal; status draws it from the file
    out = tmp_path / "snap.json"
    write_snapshot(out, snap)
    assert json.loads(out.read_text())["version"] == 2
    back = load_snapshot(out, CATALOG)
    assert back.hosts[0].gpus == rec.gpus
    env = {k: v for k, v in os.environ.items() if not k.startswith("MIGPLAN_")}
    shown = subprocess.run([sys.executable, "-c", "from migplan.cli.app import main; main()", "status",
                            "--snapshot", str(out)], capture_output=True, text=True, env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "|2g.10|2g.10|3g.20gb    |" in text and "3g.20gb@4 (vGPU A100X-3-20C)" in text
    assert "A100X-3-20C 0000:17:00.4 on 3g.20gb@4: VM llm-01, FB 15000 of 20480 MiB used" in text
    assert "A100X-2-10C 0000:17:00.5 on 2g.10gb@0: no VM" in text
    assert "|L4-8C          |" in text and "L4-8C 0000:27:00.4: VM inference-02, FB 6144 of 8192 MiB used" in text
    assert "|T4-4C      |" in text and "vGPU (time-sliced, mdev, T4)" in text
    # the plan's view: the A100's held instances are busy, the vGPU-only L4 and T4 are not MIG GPUs to plan
    fs = snap.fleet_state()
    g0 = fs.gpu("kvm01", 0)
    assert g0 is not None and set(g0.busy) == held and fs.gpu("kvm01", 1) is None


def test_the_discover_command_reads_vgpus_and_counts_them(fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    """`migplan discover` itself asks for vGPUs (sysfs at the real `/`, where the simulated GPUs are not: a note, and
    the active vGPUs from `nvidia-smi vgpu -q` all the same)."""
    from typer.testing import CliRunner

    from migplan.cli.app import app

    for var in ("MIGPLAN_OUTPUT", "MIGPLAN_CONFIG", "MIGPLAN_INVENTORY", "MIGPLAN_CATALOG"):
        monkeypatch.delenv(var, raising=False)
    kvm_host(fleet)
    write(fleet.host(1).state, state("A100-SXM4-40GB", 1, hostname="mig"))
    inv = fleet.inventory({"kvm01": fleet.host_entry(fleet.host(0)), "mig": fleet.host_entry(fleet.host(1))})
    args = ["discover", "-i", str(inv), "--known-hosts", str(fleet.known_hosts), "--ssh-config", "none"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    head, _, kvm, mig = r.stdout.splitlines()[:4]
    assert head.split() == ["HOST", "GPUS", "MIG", "ON", "INSTANCES", "ACTIVE", "VGPUS", "STATUS"]
    assert kvm.split() == ["kvm01", "3", "1", "3", "3", "ok"] and mig.split() == ["mig", "1", "1", "0", "0", "ok"]
    doc = json.loads(CliRunner().invoke(app, [*args, "-o", "json"]).stdout)
    assert doc["version"] == 2 and [len(g["vgpu"]["vgpus"]) for g in doc["hosts"][0]["gpus"]] == [1, 1, 1]


def test_a_host_without_the_vgpu_manager_and_a_mig_host_are_as_before(fleet: Fleet) -> None:
    h0, h1 = fleet.host(0), fleet.host(1)
    vf.shims(h0.bin)
    vf.write_host(h0.state, "L4", vfs_enabled=True, manager=False, hostname="plain")
    write(h1.state, state("A100-SXM4-40GB", 1, hostname="mig"))  # the MIG simulator alone: no `vgpu` command
    snap = discover(fleet, {"plain": fleet.host_entry(h0), "mig": fleet.host_entry(h1)})
    assert all(h.ok for h in snap.hosts), [h.error for h in snap.hosts]
    assert all(g.vgpu is None for h in snap.hosts for g in h.gpus)
    assert snapshot_to_dict(snap)["version"] == 1 and not any("vGPU" in n for h in snap.hosts for n in h.notes)
    with SshFleet(fleet.options()) as ssh:  # the same hosts without asking for vGPUs: the same records
        inv = load_inventory(fleet.inventory({"plain": fleet.host_entry(h0), "mig": fleet.host_entry(h1)}), CATALOG)
        without = discover_fleet(inv, CATALOG, ssh.runner, parallel=2)
    assert [(h.gpus, h.notes) for h in without.hosts] == [(h.gpus, h.notes) for h in snap.hosts]


def test_mdev_devices_on_virtual_functions(fleet: Fleet) -> None:
    """vGPU 16 and earlier on SR-IOV boards: an mdev device on each VF, no nvidia/ directory on the VFs."""
    h = fleet.host(0)
    vf.shims(h.bin)
    p = vf.write_host(h.state, "L4", vfs_enabled=True, interface="mdev-sriov", hostname="kvm16")
    running = vf.add_vgpu(p, 0, "L4-8C")
    idle = vf.add_vgpu(p, 0, "L4-8C")
    vf.vm_start(p, running, "vm-16", fb_used_mib=4096)
    (rec,) = discover(fleet, {"kvm16": fleet.host_entry(h)}).hosts
    assert rec.ok, rec.error
    v = rec.gpus[0].vgpu
    assert v is not None and (v.host_mode, v.board, v.total_vfs) == ("sr-iov", "L4", 32)
    assert sorted((d.kind, d.address, d.type_name) for d in v.devices) == sorted(
        [("mdev", running, "L4-8C"), ("mdev", idle, "L4-8C")])
    assert [(a.device, a.vm_name, a.fb_used_mib) for a in v.vgpus] == [(running, "vm-16", 4096)]
    assert not any("sysfs" in n for n in rec.notes), rec.notes


def test_types_the_catalog_does_not_know_are_a_note(fleet: Fleet) -> None:
    """The L40S's Q types (migplan ships C types) and a P4 (no board of the vGPU catalog): noted, kept as the host
    names them, drawn against the GPU's memory where no board gives the frame buffer."""
    h = fleet.host(0)
    vf.shims(h.bin)
    p = vf.write_host(h.state, ["L40S", "P4"], vfs_enabled=True, hostname="kvmq")
    vf.vm_start(p, vf.add_vgpu(p, 0, "L40S-12Q"), "desk-1", fb_used_mib=100)
    vf.vm_start(p, vf.add_vgpu(p, 1, "P4-4Q"), "desk-2", fb_used_mib=200)
    (rec,) = discover(fleet, {"kvmq": fleet.host_entry(h)}).hosts
    assert rec.ok, rec.error
    l40s, p4 = (g.vgpu for g in rec.gpus)
    assert l40s is not None and p4 is not None
    assert l40s.board == "L40S" and [a.type_name for a in l40s.vgpus] == ["L40S-12Q"]
    assert p4.board is None and [(a.type_name, a.vm_name) for a in p4.vgpus] == [("P4-4Q", "desk-2")]
    ours = [n for n in rec.notes if "vGPU type(s)" in n]
    assert len(ours) == 2 and "not in the catalog's L40S" in ours[0] and "L40S-12Q" in ours[0]
    assert "in no board of migplan's vGPU catalog" in ours[1] and "P4-4Q" in ours[1]
    from migplan.commands.fleet import vgpu_picture, vgpu_slices

    assert vgpu_picture(vgpu_slices(rec.gpus[1])).startswith("|P4-4Q" + " " * 18 + "|")  # 4 of the P4's 8 GiB


def test_the_driver_gone_mid_read_fails_the_host_naming_the_command(fleet: Fleet) -> None:
    kvm_host(fleet, faults=[{"match": "vgpu -q", "unload": True}])
    (rec,) = discover(fleet, {"kvm01": fleet.host_entry(fleet.host(0))}).hosts
    assert rec.error is not None, rec
    assert "nvidia-smi vgpu -s" in rec.error.message and "couldn't communicate with the NVIDIA driver" in \
        rec.error.message


@pytest.mark.parametrize(("fault", "code", "text"), [
    ({"match": "vgpu -q", "exit": 0, "stdout": "GPU 00000000:17:00.0\n    Active vGPUs : 1\n\x1b[2J\n"},
     "smi-parse", "nvidia-smi vgpu -q"),
    ({"match": "vgpu -c", "exit": 0, "stdout": "GPU 00000000:17:00.0\n    No types; rm -rf /\n"},
     "smi-parse", "nvidia-smi vgpu -c"),
    ({"match": "vgpu -s", "exit": 255, "stdout": "Unable to query vGPU types: Unknown Error\n"},
     "smi-error", "nvidia-smi vgpu -s"),
])
def test_bad_output_is_one_clear_error_naming_the_host_and_command(fleet: Fleet, fault: dict[str, object],
                                                                      code: str, text: str) -> None:
    kvm_host(fleet, faults=[fault])
    (rec,) = discover(fleet, {"kvm01": fleet.host_entry(fleet.host(0))}).hosts
    assert rec.error is not None and text in rec.error.message, rec
    assert "\x1b" not in rec.error.message and "Traceback" not in rec.error.message
    if code == "smi-parse":
        assert rec.error.code == "smi-parse"


def test_a_summary_that_cannot_be_read_is_a_note_and_the_host_is_read_without_vgpus(fleet: Fleet) -> None:
    p = kvm_host(fleet, faults=[{"match": "vgpu", "exit": 0, "stdout": "index, name\n0, NVIDIA L4\n", "times": 1}])
    (rec,) = discover(fleet, {"kvm01": fleet.host_entry(fleet.host(0))}).hosts
    assert rec.ok and all(g.vgpu is None for g in rec.gpus), rec
    assert any(n.startswith("'nvidia-smi vgpu' printed what is not its vGPU summary") and "vGPUs not read" in n
               for n in rec.notes), rec.notes
    assert ["vgpu"] in vf.read_state(p)["log"] and ["vgpu", "-q"] not in vf.read_state(p)["log"]


def test_an_unreadable_sysfs_is_a_note_and_the_active_vgpus_still_show(fleet: Fleet, tmp_path: Path) -> None:
    kvm_host(fleet)
    empty = tmp_path / "nosys"
    empty.mkdir()
    (rec,) = discover(fleet, {"kvm01": fleet.host_entry(fleet.host(0))}, sysfs_root=str(empty)).hosts
    assert rec.ok, rec.error
    assert all(g.vgpu is not None and g.vgpu.devices == () for g in rec.gpus)
    assert [a.vm_name for g in rec.gpus for a in (g.vgpu.vgpus if g.vgpu else ())] == [
        "llm-01", "inference-02", "t4-vm"]
    noted = [n for n in rec.notes if "not read" in n]
    assert len(noted) == 3 and all("virtual functions and mdev devices are not known" in n for n in noted), rec.notes


def test_a_hostile_vm_name_stays_data(fleet: Fleet) -> None:
    p = kvm_host(fleet)
    dev = vf.vfs(p, 1)[0]
    vf.vm_stop(p, dev)
    vf.vm_start(p, dev, "evil\x1b]0;owned\x07$(reboot)`id`;" + "x" * 300, fb_used_mib=10)
    (rec,) = discover(fleet, {"kvm01": fleet.host_entry(fleet.host(0))}).hosts
    assert rec.ok, rec.error
    l4 = rec.gpus[1].vgpu
    assert l4 is not None
    (vm,) = l4.vgpus
    assert vm.vm_name is not None and vm.vm_name.startswith("evil") and "\x1b" not in vm.vm_name
    assert "\x07" not in vm.vm_name and len(vm.vm_name) <= 256


def test_a_full_gpus_devices_are_named_from_the_supported_types_ids(fleet: Fleet) -> None:
    """An L4 holding three L4-8C (equal-size: full) lists no creatable type on any VF, so the type a VF holds is
    named from `nvidia-smi vgpu -s -v`'s type IDs (no VM runs: `-q` names none of them)."""
    h = fleet.host(0)
    vf.shims(h.bin)
    p = vf.write_host(h.state, ["L4"], vfs_enabled=True, hostname="kvm01")
    for _ in range(3):
        vf.add_vgpu(p, 0, "L4-8C")
    snap = discover(fleet, {"kvm01": fleet.host_entry(h)})
    (rec,) = snap.hosts
    assert rec.ok, rec.error
    (g,) = rec.gpus
    assert g.vgpu is not None and g.vgpu.creatable == ()
    assert [d.type_name for d in g.vgpu.held] == ["L4-8C"] * 3
