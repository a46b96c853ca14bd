"""Hypervisor hosts in `propose` and `replan` (issue 26): their GPUs taken out of the MIG plan and planned as vGPUs for
the VM workloads of the profiles, in the same run (docs/vgpu.md, "Planning").

`split` decides which hosts are hypervisor hosts (`fleet.vgpu_state.hypervisor_hosts`: an inventory `vgpu` setting, or
GPUs in vGPU mode in the snapshot), takes their GPUs out of the MIG fleet state and the VMs out of the profiles;
`plan_vms` plans them (`planner.vgpu_solve.plan_vgpus`). Without hypervisor hosts a profile's VMs are listed as not
planned (commands/vms.py), as before, and the plan is the MIG plan alone, byte for byte.
"""

from __future__ import annotations

from dataclasses import dataclass

from migplan.catalog import Catalog, builtin_vgpu_catalog
from migplan.commands import Report
from migplan.fleet.snapshot import Snapshot
from migplan.fleet.vgpu_state import declared_states, discovered_states, hypervisor_hosts, split_fleet
from migplan.inventory import Inventory
from migplan.model.state import FleetState
from migplan.model.vgpu import VgpuGpuState, VgpuPlan
from migplan.planner import Policy
from migplan.planner.milp import Solver
from migplan.planner.vgpu_solve import plan_vgpus
from migplan.planner.vm_demand import check_pins, split_vms
from migplan.profiles import ProfileSet, Workload


@dataclass(frozen=True)
class Split:
    mig_state: FleetState  # the MIG fleet without the hypervisor hosts' GPUs
    vgpu_gpus: tuple[VgpuGpuState, ...]
    hypervisors: frozenset[str]


def has_vgpu(snapshot: Snapshot) -> bool:
    """Whether discovery found a GPU in vGPU mode on any host of the snapshot."""
    return any(g.vgpu is not None for h in snapshot.hosts for g in h.gpus)


def split(state: FleetState, inventory: Inventory | None, snapshot: Snapshot | None, report: Report) -> Split:
    vcat = builtin_vgpu_catalog()
    hosts = inventory.hosts if inventory is not None else ()
    discovered = snapshot.hosts if snapshot is not None else ()
    names = hypervisor_hosts(hosts, discovered)
    if not names:
        return Split(state, (), frozenset())
    settings = {h.name: h.vgpu for h in hosts if h.vgpu is not None}
    notes: list[str] = []
    gpus = discovered_states(discovered, vcat, settings, notes) if snapshot is not None else []
    seen = {g.host for g in gpus}
    gpus += [g for g in declared_states(hosts, vcat) if g.host not in seen]
    for n in notes:
        report(f"note: {n}")
    return Split(split_fleet(state, names), tuple(gpus), frozenset(names))


def plan_vms(sp: Split, vms: tuple[Workload, ...], policy: Policy, solver: Solver, catalog: Catalog,
             report: Report) -> VgpuPlan:
    vcat = builtin_vgpu_catalog()
    check_pins(vms, vcat)
    result = plan_vgpus(sp.vgpu_gpus, vms, policy, solver, vcat, catalog)
    placed = sum(1 for v in result.vms if v.status == "placed")
    kept = sum(1 for v in result.vms if v.status == "kept")
    left = [v for v in result.vms if v.status == "unplaced"]
    report(f"note: vGPU plan ({result.status}): {len(sp.vgpu_gpus)} GPU(s) of {len(sp.hypervisors)} hypervisor "
           f"host(s), {placed} VM(s) placed, {kept} kept where they run, {len(left)} left out; "
           f"{result.gpus_used} GPU(s) used, at least {result.gpu_lower_bound} needed")
    for v in left:
        report(f"warning: VM {v.name} left out: {v.reason}")
    return result


def vm_profiles(profiles: ProfileSet) -> tuple[ProfileSet, tuple[Workload, ...]]:
    return split_vms(profiles)
