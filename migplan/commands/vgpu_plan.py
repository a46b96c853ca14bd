"""Hypervisor hosts in `propose` and `replan` (issue 26): their GPUs taken out of the MIG plan and planned as vGPUs for
the VM workloads of the profiles, in the same run (docs/vgpu.md, "Planning").

`split` decides which hosts are hypervisor hosts (`fleet.vgpu_state.hypervisor_hosts`: an inventory `vgpu` setting, or
GPUs in vGPU mode in the snapshot), takes their GPUs out of the MIG fleet state and the VMs out of the profiles;
`plan_vms` plans them (`planner.vgpu_solve.plan_vgpus`). Without hypervisor hosts a profile's VMs are listed as not
planned (commands/vms.py), as before, and the plan is the MIG plan alone, byte for byte.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from migplan.catalog import Catalog, builtin_vgpu_catalog
from migplan.commands import Report
from migplan.fleet.snapshot import Snapshot
from migplan.fleet.vgpu_state import declared_states, discovered_states, hypervisor_hosts, split_fleet
from migplan.inventory import Inventory
from migplan.model.state import FleetState
from migplan.model.vgpu import VgpuGpuState, VgpuPlan
from migplan.planner import Plan, Policy, plan
from migplan.planner.milp import Solver
from migplan.planner.plan import PLAN_VERSION_VGPU
from migplan.planner.vgpu_solve import plan_vgpus
from migplan.planner.vm_demand import check_pins
from migplan.profiles import ProfileSet, Workload
from migplan.replan.decide import Decision


@dataclass(frozen=True)
class Split:
    mig_state: FleetState  # the MIG fleet without the hypervisor hosts' GPUs
    vgpu_gpus: tuple[VgpuGpuState, ...]
    hypervisors: frozenset[str]


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
             report: Report, held: frozenset[tuple[str, int]] = frozenset()) -> VgpuPlan:
    vcat = builtin_vgpu_catalog()
    check_pins(vms, vcat)
    result = plan_vgpus(sp.vgpu_gpus, vms, policy, solver, vcat, catalog, held=held)
    placed = sum(1 for v in result.vms if v.status == "placed")
    kept = sum(1 for v in result.vms if v.status == "kept")
    left = [v for v in result.vms if v.status == "unplaced"]
    report(f"note: vGPU plan ({result.status}): {len(sp.vgpu_gpus)} GPU(s) of {len(sp.hypervisors)} hypervisor "
           f"host(s), {placed} VM(s) placed, {kept} kept where they run, {len(left)} left out; "
           f"{result.gpus_used} GPU(s) used, at least {result.gpu_lower_bound} needed")
    for v in left:
        report(f"warning: VM {v.name} left out: {v.reason}")
    return result


def replan_vms(sp: Split, vms: tuple[Workload, ...], chosen: Plan, decision: Decision, policy: Policy,
               solver: Solver, catalog: Catalog, report: Report,
               cooling: frozenset[tuple[str, int]] = frozenset()) -> tuple[Plan, Plan | None, Decision]:
    """`replan`'s vGPU part: the VMs planned with the run's policy (running VMs move only inside a disruption
    window), added to the run's plan. A vGPU plan without actions changes nothing. With actions, they go with the
    MIG plan when that is applied; when it is not (not worth it), they are applied alone, in a plan whose MIG part
    is empty (the second value): placing VMs is what a hypervisor host is for, and the vGPU program already weighs
    every change (a replan with the same demand finds none). GPUs in `cooling` (changed within the cool-down) are
    held as they are."""
    vplan = plan_vms(sp, vms, policy, solver, catalog, report, held=cooling)
    chosen = dataclasses.replace(chosen, vgpu=vplan, version=PLAN_VERSION_VGPU)
    changing = [g for g in vplan.gpus if g.actions]
    if not changing:
        return chosen, None, decision
    line = (f"vGPU: {len(changing)} GPU(s) change, {sum(1 for v in vplan.vms if v.status == 'placed')} VM(s) "
            f"placed, {sum(1 for v in vplan.vms if v.status == 'unplaced')} left out")
    if decision.apply:
        return chosen, None, dataclasses.replace(decision, line=f"{decision.line}; {line}")
    empty = plan(FleetState(()), ProfileSet(()), catalog, policy, solver)
    alone = dataclasses.replace(empty, vgpu=vplan, version=PLAN_VERSION_VGPU, created_at=chosen.created_at,
                                sizing=chosen.sizing)
    return chosen, alone, dataclasses.replace(decision, apply=True, reasons=(*decision.reasons, "vgpu"),
                                              line=f"applied: {line} (MIG {decision.line})")
