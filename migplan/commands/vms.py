"""VM workloads in the profiles (`kind: vm`, issue 26): taken out of the MIG plan and listed, until vGPUs are planned.

`propose` and `replan` call `without_vms` on the profiles they plan: VM workloads are not planned as processes
(planner/vm_demand.py says why), their vGPU pins are checked against the vGPU catalog (an unknown type is an input
error naming the file, the line and the key), and each is reported as not planned with the frame buffer the sizing
rule gives it and the vGPU type that comes to. Profiles without VMs pass through untouched (the same object), so
their plans are byte for byte what they were.
"""

from __future__ import annotations

from migplan.catalog import Catalog, builtin_vgpu_catalog
from migplan.commands import Report
from migplan.planner import Policy
from migplan.planner.vm_demand import NOT_PLANNED, VmDemand, check_pins, split_vms, vm_demands
from migplan.profiles import ProfileSet
from migplan.text import printable


def describe(d: VmDemand) -> str:
    w = d.workload
    where = f"{w.observed.host or '?'}/{w.observed.gpu if w.observed.gpu is not None else '?'}"
    runs = f" as {w.observed.vgpu_type}" if w.observed.vgpu_type else ""
    gets = f"{d.vgpu_type} ({d.board})" if d.vgpu_type and d.board else d.vgpu_type or "no type"
    extra = f"; {d.note}" if d.note and d.note != "pinned" else " (pinned)" if d.note == "pinned" else ""
    return f"{printable(w.name, 120)} on {where}{runs}: needs {d.need_mib} MiB of frame buffer: {gets}{extra}"


def without_vms(profiles: ProfileSet, policy: Policy | None, catalog: Catalog,
                report: Report) -> tuple[ProfileSet, list[VmDemand]]:
    """The profiles to plan (without VMs) and each VM's demand, reported as not planned. Without a `policy`
    (replan, from cron) the pins are checked and the VMs named in one `info: event=vms-not-planned` line."""
    rest, vms = split_vms(profiles)
    if not vms:
        return profiles, []
    vcat = builtin_vgpu_catalog()
    if policy is None:
        check_pins(vms, vcat)
        names = " ".join(printable(w.name, 80) for w in vms[:10])
        report(f"info: event=vms-not-planned workloads={len(vms)} {names}{' ...' if len(vms) > 10 else ''}")
        return rest, []
    demands = vm_demands(vms, policy, vcat, catalog)
    report(f"note: {len(demands)} VM workload(s) (kind: vm) {NOT_PLANNED}; the MIG plan leaves them out "
           "(docs/vgpu.md, 'Demand'):")
    for d in demands:
        report(f"note:   {describe(d)}")
    return rest, demands
