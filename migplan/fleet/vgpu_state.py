"""The vGPU GPUs of a fleet, as the vGPU planner and apply see them (`model.vgpu.VgpuGpuState`), from what discovery
read on each hypervisor host or, offline, from the inventory's `vgpu` setting (issue 26; docs/vgpu.md "Planning").

A host is a **hypervisor host** when the inventory gives it a `vgpu` setting, or when discovery found GPUs in vGPU
mode on it (a snapshot's `vgpu` records). Its GPUs are planned as vGPUs for VMs and never as MIG for processes:
`split_fleet` takes them out of the MIG fleet state.

Each GPU's slots are what discovery saw: one per active vGPU (a running VM holds it: `running`; its device the VF or
mdev device that carries it, or `vgpu:<vGPU ID>` where discovery could not tell which), one per device holding a
type no running VM has (a stopped VM's, or one no VM uses). A running VM's slot is named as `collect` names its
workload (`history.identity.vm_workload`: `vm:<VM name>`, `vm:NAME:vgpu2` for a VM's second vGPU), so the plan
knows which VM of the profiles runs where.

Pure: the snapshot and the inventory are already read.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from migplan.catalog.vgpu import MIG_BACKED, TIME_SLICED, TIME_SLICED_MIXED, VgpuCatalog
from migplan.errors import CatalogError
from migplan.fleet.snapshot import DiscoveredGpu, DiscoveredHost
from migplan.history.identity import vm_workload
from migplan.inventory.model import Host, VgpuHost
from migplan.model.state import FleetState
from migplan.model.vgpu import VGPU_MODES, VgpuGpuState, VgpuSlot


def hypervisor_hosts(inventory_hosts: Iterable[Host], discovered: Iterable[DiscoveredHost] = ()) -> set[str]:
    """Hosts planned as vGPU hosts: an inventory `vgpu` setting, or a GPU in vGPU mode that discovery read."""
    names = {h.name for h in inventory_hosts if h.vgpu is not None}
    names |= {h.name for h in discovered if h.ok and any(g.vgpu is not None for g in h.gpus)}
    return names


def split_fleet(state: FleetState, hypervisors: set[str]) -> FleetState:
    """The MIG fleet state without the hypervisor hosts' GPUs (the same object when there are none)."""
    if not hypervisors or not any(g.host in hypervisors for g in state.gpus):
        return state
    return FleetState(tuple(g for g in state.gpus if g.host not in hypervisors), source=state.source,
                      models=state.models, assigned=tuple(a for a in state.assigned if a[0] not in hypervisors))


def default_modes(vcat: VgpuCatalog, board: str) -> tuple[str, ...]:
    """The modes a hypervisor host without an inventory setting may use: its board's equal-size and MIG-backed
    modes (mixed-size needs the host's own placements, which migplan does not read: docs/vgpu.md)."""
    return tuple(m for m in vcat.get(board).modes if m in VGPU_MODES and m != TIME_SLICED_MIXED)


def declared_states(hosts: Iterable[Host], vcat: VgpuCatalog) -> list[VgpuGpuState]:
    """Offline: the GPUs a hypervisor host declares (`vgpu: {count: N}`), holding no vGPU, VFs not yet enabled."""
    out: list[VgpuGpuState] = []
    for h in hosts:
        v = h.vgpu
        if v is None or not v.count:
            continue
        board = vcat.get(v.board)
        out.extend(VgpuGpuState(host=h.name, index=i, model=board.gpu, board=board.id,
                                host_mode=board.host_vgpu_mode, allowed=v.modes) for i in range(v.count))
    return out


def _placements(g: DiscoveredGpu) -> dict[int, str]:
    return {i.gi_id: str(i.instance) for i in g.instances if i.gi_id is not None}


def _running_names(g: DiscoveredGpu) -> dict[int, str]:
    """vGPU ID -> its VM's workload name, as `collect --vgpu` names it (a VM's vGPUs numbered in vGPU ID order)."""
    assert g.vgpu is not None
    per_vm: dict[str, list[int]] = defaultdict(list)
    for a in g.vgpu.vgpus:
        per_vm[a.vm_name or a.vm_uuid or f"#{a.vgpu_id}"].append(a.vgpu_id)
    out = {}
    for a in g.vgpu.vgpus:
        ids = sorted(per_vm[a.vm_name or a.vm_uuid or f"#{a.vgpu_id}"])
        nth = ids.index(a.vgpu_id) + 1 if len(ids) > 1 else 0
        out[a.vgpu_id] = vm_workload(a.vm_name, a.vm_uuid, a.vgpu_id, nth=nth)
    return out


def _slots(g: DiscoveredGpu, at: dict[int, str], names: dict[int, str]) -> list[VgpuSlot]:
    """One slot per active vGPU and per device holding a type. `nvidia-smi vgpu -q` names no VF, so discovery
    leaves the device of an active vGPU unknown when several devices hold its type (vgpu_discover.py); such vGPUs
    are paired here with the devices of their type (and GPU instance) that no other active vGPU took, in address
    order: which VM has which of them is not known, but that they are held is, and a device of that type beyond
    the active vGPUs cannot be told from a running VM's either, so it is taken as running too (never removed)."""
    assert g.vgpu is not None
    held = [d for d in g.vgpu.held if d.address not in {a.device for a in g.vgpu.vgpus if a.device}]
    slots: list[VgpuSlot] = []
    for a in sorted(g.vgpu.vgpus, key=lambda a: a.vgpu_id):
        device = a.device
        if device is None:
            same = [d for d in held if d.type_name == a.type_name and d.gpu_instance_id == a.gpu_instance_id]
            if same:
                device = same[0].address
                held.remove(same[0])
        slots.append(VgpuSlot(type_name=a.type_name, vm=names[a.vgpu_id], vm_uuid=a.vm_uuid, running=True,
                              device=device or f"vgpu:{a.vgpu_id}",
                              placement=at.get(a.gpu_instance_id) if a.gpu_instance_id is not None else None))
    unsure = {(a.type_name, a.gpu_instance_id) for a in g.vgpu.vgpus if a.device is None}
    for d in held:
        slots.append(VgpuSlot(type_name=d.type_name or f"type-{d.type_id}", device=d.address,
                              running=(d.type_name, d.gpu_instance_id) in unsure,
                              placement=at.get(d.gpu_instance_id) if d.gpu_instance_id is not None else None))
    return slots


def gpu_state(host: str, g: DiscoveredGpu, vcat: VgpuCatalog, setting: VgpuHost | None,
              notes: list[str]) -> VgpuGpuState | None:
    """One discovered GPU in vGPU mode as the planner sees it; None (with a note) when its board is not known."""
    v = g.vgpu
    if v is None:
        return None
    if v.board is None:
        notes.append(f"{host}:{g.index}: its vGPU types are not in migplan's vGPU catalog; left as it is")
        return None
    try:
        board = vcat.get(v.board)
    except CatalogError as err:
        notes.append(f"{host}:{g.index}: {err.message}; left as it is")
        return None
    if setting is not None and setting.board != board.id:
        notes.append(f"{host}:{g.index}: the inventory names board {setting.board} but the host's types are "
                     f"{board.id}'s; planned as {board.id}")
    at = _placements(g)
    slots = _slots(g, at, _running_names(g))
    if not slots:
        mode = None
    elif g.mig_current:
        mode = MIG_BACKED
    else:
        sizes = {s.type_name for s in slots}
        mode = TIME_SLICED if len(sizes) == 1 else TIME_SLICED_MIXED
    allowed = setting.modes if setting is not None else default_modes(vcat, board.id)
    layout = tuple(sorted(at.values())) if g.mig_current else ()
    if g.mig_current and len(at) != len(g.instances):
        layout = tuple(sorted(str(i.instance) for i in g.instances))
    return VgpuGpuState(host=host, index=g.index, model=board.gpu, board=board.id, host_mode=v.host_mode,
                        allowed=allowed, mode=mode, mig_enabled=g.mig_current, layout=layout,
                        slots=tuple(slots), vfs=sum(1 for d in v.devices if d.kind == "vf"), uuid=g.uuid,
                        pci_bus_id=g.pci_bus_id)


def discovered_states(hosts: Sequence[DiscoveredHost], vcat: VgpuCatalog, settings: dict[str, VgpuHost],
                      notes: list[str]) -> list[VgpuGpuState]:
    """Every GPU in vGPU mode of the hosts that answered; a hypervisor host (inventory `vgpu`) whose GPUs are not in
    vGPU mode (no vGPU manager yet) is planned from its setting, each GPU holding nothing."""
    out: list[VgpuGpuState] = []
    for h in hosts:
        if not h.ok:
            continue
        setting = settings.get(h.name)
        got = [s for g in h.gpus if (s := gpu_state(h.name, g, vcat, setting, notes)) is not None]
        if not got and setting is not None:
            board = vcat.get(setting.board)
            got = [VgpuGpuState(host=h.name, index=g.index, model=board.gpu, board=board.id,
                                host_mode=board.host_vgpu_mode, allowed=setting.modes, mig_enabled=g.mig_current,
                                layout=tuple(sorted(str(i.instance) for i in g.instances)) if g.mig_current else (),
                                uuid=g.uuid, pci_bus_id=g.pci_bus_id)
                   for g in h.gpus if not g.excluded]
        out.extend(got)
    return out
