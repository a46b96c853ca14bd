"""Applying the vGPU part of a plan on KVM hosts over the real sshd, against the vGPU host simulator (tests/sim_vgpu;
issue 26, "Apply on KVM hosts"): time-sliced vGPUs on an L4's SR-IOV virtual functions (enabled first), mdev devices
on a T4, MIG-backed vGPUs on an A100 (MIG enabled, GPU instances made, each VF pointed at its instance); a stale plan
refused, a running VM's vGPU never touched, faults mid-apply rolled back to the state before, a dry run that changes
nothing. Plans are built here from `VgpuGpuState`/`VgpuGpuPlan` (the planner is not needed). The simulator is the
oracle: its state and its record of sysfs writes say what happened, and `vgpu.bypassed` (writes that went around its
`tee`) stays empty."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import Fleet
from sim_vgpu import fleet as vf

from migplan.adapters.ssh import SshFleet
from migplan.catalog import builtin_catalog, builtin_vgpu_catalog
from migplan.fleet.discover import discover_host
from migplan.fleet.outcomes import ApplyOptions, GpuOutcome, HostApplyResult
from migplan.fleet.vgpu_apply import apply_vgpu_host
from migplan.fleet.vgpu_state import discovered_states
from migplan.inventory import Host, load_inventory
from migplan.model.vgpu import VgpuGpuPlan, VgpuGpuState, VgpuSlot, vgpu_actions

pytestmark = pytest.mark.slow

CATALOG = builtin_catalog()
VCAT = builtin_vgpu_catalog()
UUIDS = iter(f"aaaaaaaa-bbbb-4ccc-8ddd-{n:012x}" for n in range(1, 10_000))


class Kvm:
    """One simulated KVM host behind the sshd: its state file, inventory host and SSH connection."""

    def __init__(self, fleet: Fleet, ssh: SshFleet, state: Path, host: Host) -> None:
        self.fleet, self.ssh, self.state, self.host = fleet, ssh, state, host
        self.root = str(vf.sysroot(state))
        self.journal: list[dict[str, Any]] = []

    def observe(self) -> dict[int, VgpuGpuState]:
        """The host's vGPU GPUs as the planner sees them (discovery's reads, then `discovered_states`)."""
        rec = discover_host(self.ssh.runner(self.host), self.host, CATALOG, assignments=False, vgpu=True,
                            sysfs_root=self.root)
        assert rec.ok, rec.error
        settings = {self.host.name: self.host.vgpu} if self.host.vgpu is not None else {}
        return {s.index: s for s in discovered_states([rec], VCAT, settings, [])}

    def apply(self, plans: Sequence[VgpuGpuPlan], *, dry_run: bool = False) -> HostApplyResult:
        return apply_vgpu_host(self.ssh.runner(self.host), self.host, plans, CATALOG, ApplyOptions(dry_run=dry_run),
                               self.journal.append, vcat=VCAT, sysfs_root=self.root, sriov_manage="sriov-manage",
                               new_uuid=lambda: next(UUIDS))

    def sim(self) -> dict[str, Any]:
        return vf.read_state(self.state)


@contextmanager
def kvm(fleet: Fleet, models: list[str], vgpu: dict[str, object] | None = None, **kw: Any) -> Iterator[Kvm]:
    h = fleet.host(0)
    vf.shims(h.bin)
    p = vf.write_host(h.state, models, hostname="kvm01", **kw)
    entry = fleet.host_entry(h, **({"vgpu": vgpu} if vgpu else {}))
    inv = load_inventory(fleet.inventory({"kvm01": entry}), CATALOG)
    with SshFleet(fleet.options()) as ssh:
        yield Kvm(fleet, ssh, p, inv.hosts[0])


def plan_for(observed: VgpuGpuState, mode: str | None, slots: Sequence[VgpuSlot]) -> VgpuGpuPlan:
    return VgpuGpuPlan(observed, mode, tuple(slots), vgpu_actions(observed, mode, tuple(slots)))


def sim_vgpus(k: Kvm, gpu: int = 0) -> list[tuple[str, int, int | None, str | None]]:
    """The simulator's own record of a GPU's vGPUs: (device, type id, GPU instance id, running VM name)."""
    g = k.sim()["gpus"][gpu]
    return sorted((v["dev"], int(v["type"]), v.get("gi"), (v.get("vm") or {}).get("name")) for v in g["vgpu"]["vgpus"])


def writes(k: Kvm) -> list[tuple[str, str, str]]:
    """Every sysfs write the simulator saw: (path under the sysroot, value, ok or errno)."""
    return [(w[0], w[1].strip(), w[2]) for w in k.sim()["vgpu"].get("writes", [])]


def no_bypass(k: Kvm) -> None:
    assert not k.sim()["vgpu"].get("bypassed"), k.sim()["vgpu"]["bypassed"]


def events(k: Kvm, kind: str) -> list[dict[str, Any]]:
    return [e for e in k.journal if e["event"] == kind]


def test_l4_time_sliced_enables_the_vfs_then_sets_each_vf_type_and_a_dry_run_changes_nothing(fleet: Fleet) -> None:
    with kvm(fleet, ["L4"], vgpu={"board": "L4", "modes": ["time_sliced"]}) as k:
        obs = k.observe()[0]
        assert (obs.host_mode, obs.vfs, obs.slots) == ("sr-iov", 0, ())
        plan = plan_for(obs, "time_sliced", [VgpuSlot("L4-8C", vm=f"vm:v{i}") for i in range(3)])
        assert [a.kind for a in plan.actions] == ["vfs-enable", "create", "create", "create"]
        before = k.sim()
        dry = k.apply([plan], dry_run=True)
        (g,) = dry.gpus
        assert g.outcome is GpuOutcome.WOULD_APPLY, g.reason
        assert dry.commands[0] == "sriov-manage -e 0000:17:00.0"
        assert len(dry.commands) == 4 and all("nvidia/current_vgpu_type" in c and c.startswith("echo <id of L4-8C")
                                              for c in dry.commands[1:])
        after = k.sim()
        assert after["gpus"] == before["gpus"] and after["vgpu"].get("writes", []) == before["vgpu"].get("writes", [])
        assert not [a for a in after["log"] if a[0] == "sriov-manage" or "-shm" in a]
        assert not events(k, "locked")  # a dry run takes no lock

        k.journal.clear()
        res = k.apply([plan])
        (g,) = res.gpus
        assert g.outcome is GpuOutcome.APPLIED and g.reason.startswith("as planned"), g.reason
        vfs = vf.vfs(k.state, 0)
        assert len(vfs) == 32  # sriov-manage -e enabled them, before any vGPU
        got = sim_vgpus(k)
        assert [d for d, *_ in got] == vfs[:3] and {t for _, t, *_ in got} == {1203}  # the L4-8C id the host lists
        assert g.layout == [f"L4-8C {d}" for d in vfs[:3]]  # each created device's address reported
        assert [w[1:] for w in writes(k)] == [("1203", "ok")] * 3
        assert all(w[0].endswith("/nvidia/current_vgpu_type") for w in writes(k))
        no_bypass(k)
        kinds = [e["kind"] for e in events(k, "command") if not e["dry_run"]]
        assert kinds == ["vfs-enable", "create", "create", "create"]
        assert [e["event"] for e in k.journal if e["event"] in ("locked", "checkpoint", "verify", "unlocked")] == [
            "locked", "checkpoint", "verify", "unlocked"]
        # applied again: nothing to do (the GPU already holds the target)
        again = k.apply([plan])
        assert [x.outcome for x in again.gpus] == [GpuOutcome.UNCHANGED]
        assert len(writes(k)) == 3


def test_t4_mdev_devices_are_removed_and_created_and_the_running_vm_kept(fleet: Fleet) -> None:
    with kvm(fleet, ["T4"], vgpu={"board": "T4", "modes": ["time_sliced"]}) as k:
        stopped = vf.add_vgpu(k.state, 0, "T4-4C")
        running = vf.add_vgpu(k.state, 0, "T4-4C")
        vf.vm_start(k.state, running, "t4-vm", fb_used_mib=1000)
        obs = k.observe()[0]
        assert obs.host_mode == "non-sr-iov"
        keep = next(s for s in obs.slots if s.device == running)
        assert keep.running and {s.device for s in obs.slots} == {stopped, running}
        plan = plan_for(obs, "time_sliced", [keep, VgpuSlot("T4-4C", vm="vm:n1"), VgpuSlot("T4-4C", vm="vm:n2")])
        assert [a.kind for a in plan.actions] == ["remove", "create", "create"]
        res = k.apply([plan])
        (g,) = res.gpus
        assert g.outcome is GpuOutcome.APPLIED, g.reason
        got = sim_vgpus(k)
        assert stopped not in [d for d, *_ in got]
        assert (running, 319, None, "t4-vm") in got  # the running VM's vGPU untouched
        new = [d for d, _, _, vm in got if d != running]
        assert len(new) == 2 and all(d.startswith("aaaaaaaa-bbbb-4ccc-8ddd-") for d in new)
        assert {t for _, t, *_ in got} == {319}
        paths = [w[0] for w in writes(k)[2:]]  # after the set-up's two creates
        assert paths[0] == f"sys/bus/mdev/devices/{stopped}/remove" or paths[0].endswith(f"{stopped}/remove")
        assert all(p.endswith("mdev_supported_types/nvidia-319/create") for p in paths[1:])
        assert not any(running in w[0] for w in writes(k))
        no_bypass(k)


def test_a100_mig_backed_enables_mig_and_vfs_creates_instances_and_points_vfs_at_them(fleet: Fleet) -> None:
    with kvm(fleet, ["A100-SXM4-40GB"], vgpu={"board": "A100-HGX-40GB", "modes": ["mig_backed"]}) as k:
        obs = k.observe()[0]
        assert (obs.mig_enabled, obs.vfs, obs.slots) == (False, 0, ())
        slots = [VgpuSlot("A100X-3-20C", vm="vm:big", placement="3g.20gb@4"),
                 VgpuSlot("A100X-2-10C", vm="vm:small", placement="2g.10gb@0")]
        plan = plan_for(obs, "mig_backed", slots)
        assert [a.kind for a in plan.actions] == ["mig-enable", "vfs-enable", "gi-create", "gi-create", "create",
                                                  "create"]
        dry = k.apply([plan], dry_run=True)
        assert dry.gpus[0].outcome is GpuOutcome.WOULD_APPLY
        assert dry.commands[:4] == ("nvidia-smi -i 0 -mig 1", "sriov-manage -e 0000:17:00.0",
                                    "nvidia-smi mig -i 0 -cgi 14:0", "nvidia-smi mig -i 0 -cgi 9:4")
        assert not k.sim()["gpus"][0]["mig_current"] and not k.sim()["gpus"][0]["vgpu"]["vfs"]
        res = k.apply([plan])
        (g,) = res.gpus
        assert g.outcome is GpuOutcome.APPLIED, g.reason
        st = k.sim()["gpus"][0]
        assert st["mig_current"] and st["vgpu"]["vfs"] == 16
        gis = {gi["id"]: gi for gi in st["gpu_instances"]}
        assert len(gis) == 2 and not any(gi.get("compute_instances") for gi in gis.values())  # no CI on the host
        now = k.observe()[0]
        assert now.layout == ("2g.10gb@0", "3g.20gb@4")
        # each vGPU on its planned instance, its type named (a full GPU lists nothing creatable: discovery names the
        # ids from `nvidia-smi vgpu -s -v`)
        assert sorted((s.type_name, s.placement) for s in now.slots) == [
            ("A100X-2-10C", "2g.10gb@0"), ("A100X-3-20C", "3g.20gb@4")]
        assert g.layout == [f"A100X-2-10C {vf.vfs(k.state, 0)[0]} on 2g.10gb@0",
                            f"A100X-3-20C {vf.vfs(k.state, 0)[1]} on 3g.20gb@4"]
        attrs = [w[0].rsplit("/", 1)[-1] for w in writes(k)]
        assert attrs == ["gpu_instance_id", "current_vgpu_type"] * 2
        smi_log = [a for a in k.sim()["log"] if a and a[0] in ("-i", "-r", "mig") and not a[-1].startswith("-l")]
        assert ["-i", "0", "-mig", "1"] in smi_log
        no_bypass(k)


def _l4_with(k: Kvm, n: int) -> list[str]:
    return [vf.add_vgpu(k.state, 0, "L4-8C") for _ in range(n)]


def test_a_plan_made_before_a_vm_started_is_refused_as_stale(fleet: Fleet) -> None:
    with kvm(fleet, ["L4"], vfs_enabled=True) as k:
        a, b = _l4_with(k, 2)
        obs = k.observe()[0]
        plan = plan_for(obs, "time_sliced", [s for s in obs.slots if s.device == b])
        assert [(x.kind, x.device) for x in plan.actions] == [("remove", a)]
        vf.vm_start(k.state, a, "late-vm")
        res = k.apply([plan])
        (g,) = res.gpus
        assert g.outcome is GpuOutcome.REFUSED and g.reason.startswith("refused (stale)"), g.reason
        assert "late-vm" in g.reason and g.commands == ()
        assert len(writes(k)) == 2  # the set-up's; nothing written by the apply
        assert (a, 1203, None, "late-vm") in sim_vgpus(k)
        no_bypass(k)


def test_a_vm_that_starts_during_the_apply_keeps_its_vgpu_and_the_gpu_is_rolled_back(fleet: Fleet) -> None:
    """The re-check right before each remove: a VM starts on the second device after the first was removed; that
    device is never written, and the first is re-created with its type on the same VF."""
    with kvm(fleet, ["L4"], vfs_enabled=True) as k:
        a, b = _l4_with(k, 2)
        obs = k.observe()[0]
        plan = plan_for(obs, None, [])
        assert [(x.kind, x.device) for x in plan.actions] == [("remove", a), ("remove", b)]
        started: list[str] = []

        def journal(e: dict[str, Any]) -> None:
            k.journal.append(e)
            if e["event"] == "command" and e["kind"] == "remove" and not started:
                started.append(str(vf.vm_start(k.state, b, "started-now")))

        res = apply_vgpu_host(k.ssh.runner(k.host), k.host, [plan], CATALOG, ApplyOptions(), journal, vcat=VCAT,
                              sysfs_root=k.root, sriov_manage="sriov-manage")
        (g,) = res.gpus
        assert started and g.outcome is GpuOutcome.ROLLED_BACK, g.reason
        assert "started-now" in g.reason and "rolled back" in g.reason
        assert sim_vgpus(k) == [(a, 1203, None, None), (b, 1203, None, "started-now")]  # a re-created on its VF
        assert not any(b in w[0] for w in writes(k)[2:])  # b was never written
        assert [(w[0].split("/")[-3], w[1]) for w in writes(k)[2:]] == [(a, "0"), (a, "1203")]
        assert k.observe()[0].fingerprint() != obs.fingerprint()  # the VM runs now; the rest is as before
        no_bypass(k)


@pytest.mark.parametrize("fault", ["errno", "errno_after"])
def test_a_failed_sysfs_write_mid_apply_rolls_the_gpu_back(fleet: Fleet, fault: str) -> None:
    """The third write (the second create) fails with EIO: before it takes effect (`errno`) or after (`errno_after`,
    the client never learns it worked). The GPU ends exactly as before: the first created vGPU removed (and the
    second, after), the removed L4-8C re-created on its own VF."""
    with kvm(fleet, ["L4"], vfs_enabled=True,
             faults=[{"match": "sysfs write current_vgpu_type", fault: "EIO", "skip": 3, "times": 1}]) as k:
        (a,) = _l4_with(k, 1)  # the set-up's write is the first that matches
        obs = k.observe()[0]
        plan = plan_for(obs, "time_sliced", [VgpuSlot("L4-12C", vm="vm:x"), VgpuSlot("L4-12C", vm="vm:y")])
        assert [x.kind for x in plan.actions] == ["remove", "create", "create"]
        res = k.apply([plan])
        (g,) = res.gpus
        assert g.outcome is GpuOutcome.ROLLED_BACK, g.reason
        assert "EIO" in g.reason or "Input/output error" in g.reason, g.reason
        assert sim_vgpus(k) == [(a, 1203, None, None)]
        assert k.observe()[0].fingerprint() == obs.fingerprint()
        assert events(k, "rolled-back") and not events(k, "rollback-failed")
        no_bypass(k)


def test_a_failed_mig_backed_create_puts_mig_vfs_and_instances_back(fleet: Fleet) -> None:
    with kvm(fleet, ["A100-SXM4-40GB"], vgpu={"board": "A100-HGX-40GB", "modes": ["mig_backed"]},
             faults=[{"match": "sysfs write current_vgpu_type", "errno": "EIO", "skip": 1, "times": 1}]) as k:
        obs = k.observe()[0]
        plan = plan_for(obs, "mig_backed", [VgpuSlot("A100X-3-20C", vm="vm:big", placement="3g.20gb@4"),
                                            VgpuSlot("A100X-2-10C", vm="vm:small", placement="2g.10gb@0")])
        res = k.apply([plan])
        (g,) = res.gpus
        assert g.outcome is GpuOutcome.ROLLED_BACK, g.reason
        st = k.sim()["gpus"][0]
        assert (st["mig_current"], st["gpu_instances"], st["vgpu"]["vfs"], st["vgpu"]["vgpus"]) == (False, [], 0, [])
        assert k.observe()[0].fingerprint() == obs.fingerprint()
        no_bypass(k)


def test_migplan_apply_applies_the_plans_vgpu_section_on_its_hypervisor_host(fleet: Fleet, tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """`commands.apply.apply` (what `migplan apply PLAN` runs) with a version 6 plan: the host of its `vgpu` section
    is applied by vgpu_apply, its result per GPU "as planned"; exit code 0; the journal file has the steps."""
    from dataclasses import replace

    from planner_fixtures import fleet as mig_fleet
    from planner_fixtures import profiles, run

    from migplan.commands.apply import ApplyRequest
    from migplan.commands.apply import apply as run_apply
    from migplan.commands.context import build_context
    from migplan.commands.fleet import FleetRequest
    from migplan.documents import write_plan
    from migplan.model.vgpu import VgpuPlan
    from migplan.planner.plan import PLAN_VERSION_VGPU

    for key in [k for k in os.environ if k.startswith("MIGPLAN_")]:
        monkeypatch.delenv(key)
    with kvm(fleet, ["T4"], vgpu={"board": "T4", "modes": ["time_sliced"]}) as k:
        obs = k.observe()[0]
        gp = plan_for(obs, "time_sliced", [VgpuSlot("T4-8C", vm="vm:a"), VgpuSlot("T4-8C", vm="vm:b")])
        plan = replace(run(mig_fleet(), profiles()), vgpu=VgpuPlan((gp,), (), gpus_used=1),
                       version=PLAN_VERSION_VGPU)  # no MIG GPU: a fleet of one hypervisor host
        path = tmp_path / "plan.json"
        write_plan(path, plan)
        inv = str(k.fleet.tmp / "inventory.yaml")
        req = ApplyRequest(plan=str(path), fleet=FleetRequest(inventory=inv, ssh=fleet.options()),
                           journal=str(tmp_path / "journal.jsonl"), force_stale=True)
        ctx = build_context(None, None, "json")
        dry = run_apply(ctx, replace(req, dry_run=True), sysfs_root=k.root, sriov_manage="sriov-manage")
        assert dry.exit_code == 0 and [g.outcome for g in dry.hosts[0].gpus] == [GpuOutcome.WOULD_APPLY]
        assert [c.split(" | ")[0] for c in dry.hosts[0].commands] == ["echo <a new UUID>"] * 2
        assert sim_vgpus(k) == []
        res = run_apply(ctx, req, sysfs_root=k.root, sriov_manage="sriov-manage")
        assert res.exit_code == 0, res.to_dict()
        (h,) = res.hosts
        (g,) = h.gpus
        assert g.outcome is GpuOutcome.APPLIED and g.reason.startswith("as planned"), g.reason
        assert [t for _, t, *_ in sim_vgpus(k)] == [320, 320]  # T4-8C's id, read from mdev_supported_types
        lines = [json.loads(x) for x in (tmp_path / "journal.jsonl").read_text().splitlines()]
        assert [e["event"] for e in lines if e["event"] in ("start", "locked", "checkpoint", "verify", "end")] == [
            "start", "locked", "checkpoint", "verify", "end"]
        no_bypass(k)
