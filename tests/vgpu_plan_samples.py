"""A small vGPU plan built from the dataclasses (the vGPU planner is not needed): three GPUs on two ESXi hosts, one
turned from time-sliced to MIG-backed, one empty L4 turned mixed-size, one L4 kept as it runs; five VMs (placed,
kept, moved, unplaced). Shared by tests/test_export_vsphere.py, test_vgpu_render.py and test_report_vgpu.py."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from planner_fixtures import fleet, gpu, profiles, run, wl

from migplan.documents import write_plan
from migplan.model.vgpu import VgpuGpuPlan, VgpuGpuState, VgpuPlan, VgpuSlot, VmPlan, vgpu_actions
from migplan.planner import Plan
from migplan.planner.plan import PLAN_VERSION_VGPU

ALL_MODES = ("time_sliced", "time_sliced_mixed", "mig_backed")


def gpu_plan(observed: VgpuGpuState, mode: str | None, slots: tuple[VgpuSlot, ...]) -> VgpuGpuPlan:
    return VgpuGpuPlan(observed, mode, slots, vgpu_actions(observed, mode, slots))


def sample_vgpu() -> VgpuPlan:
    a100 = VgpuGpuState(host="esx01", index=0, model="A100-SXM4-40GB", board="A100-HGX-40GB", host_mode="sr-iov",
                        allowed=ALL_MODES, mode="time_sliced", vfs=16, pci_bus_id="00000000:3B:00.0",
                        slots=(VgpuSlot("A100X-10C", vm="vm:old", device="0000:3b:00.4"),))
    l4_new = VgpuGpuState(host="esx01", index=1, model="L4", board="L4", host_mode="sr-iov",
                          allowed=ALL_MODES[:2], pci_bus_id="00000000:5E:00.0")
    kept_slots = (VgpuSlot("L4-8C", vm="vm:db", running=True, device="0000:3b:00.5"),
                  VgpuSlot("L4-8C", vm="vm:db:vgpu2", running=True, device="0000:3b:00.6"))
    l4_kept = VgpuGpuState(host="esx02", index=0, model="L4", board="L4", host_mode="sr-iov", allowed=ALL_MODES[:2],
                           mode="time_sliced", vfs=32, slots=kept_slots)
    gpus = (
        gpu_plan(a100, "mig_backed", (VgpuSlot("A100X-3-20C", vm="vm:infer-01", placement="3g.20gb@4"),
                                      VgpuSlot("A100X-2-10C", vm="vm:chat", placement="2g.10gb@0"))),
        gpu_plan(l4_new, "time_sliced_mixed", (VgpuSlot("L4-12C", vm="vm:train"), VgpuSlot("L4-4C", vm="vm:old"))),
        gpu_plan(l4_kept, "time_sliced", kept_slots),
    )
    vms = (
        VmPlan("vm:infer-01", "placed", 13200, "esx01", 0, "A100X-3-20C", 20480, "3g.20gb@4"),
        VmPlan("vm:chat", "placed", 7000, "esx01", 0, "A100X-2-10C", 10240, "2g.10gb@0"),
        VmPlan("vm:train", "placed", 11000, "esx01", 1, "L4-12C", 12288),
        VmPlan("vm:old", "placed", 3000, "esx01", 1, "L4-4C", 4096, moved=True),
        VmPlan("vm:db", "kept", 6000, "esx02", 0, "L4-8C", 8192),
        VmPlan("vm:db:vgpu2", "kept", 6000, "esx02", 0, "L4-8C", 8192),
        VmPlan("vm:huge", "unplaced", 90000, reason="no vGPU type of its board holds 90000 MiB"),
    )
    return VgpuPlan(gpus, vms, status="optimal", objective=3.0, bound=3.0, gpus_used=3, gpu_lower_bound=2)


def base_plan() -> Plan:
    """A MIG plan of one GPU (what propose makes beside the vGPU part)."""
    return run(fleet(gpu("h", 0)), profiles(wl("a", 4000)))


def sample_plan() -> Plan:
    return replace(base_plan(), vgpu=sample_vgpu(), version=PLAN_VERSION_VGPU)


def write_sample(path: Path, plan: Plan | None = None) -> Path:
    write_plan(path, plan or sample_plan())
    return path
