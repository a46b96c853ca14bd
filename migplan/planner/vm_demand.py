"""VM workloads (`kind: vm`, issue 26 "Demand"): kept out of the MIG plan, their pins checked, their need sized (pure).

A VM's frame buffer is not a MIG instance, and a hypervisor host cannot run bare-metal MIG workloads, so planning a
VM as a process would put it where it cannot run. VMs are planned on hypervisor hosts (`vgpu_solve`); where there is
none, `propose` and `replan` take the VMs out of the profiles (`split_vms`) and list each as not planned, with what
it needs:

* its memory need by the planner's own sizing (`demand.demand_of`: the sizing rule, headroom and floor that size
  every MIG workload), in MiB of frame buffer;
* the vGPU type that need comes to (`smallest_type`): the owner's `vgpu_type` when pinned; else the smallest type of
  the board it runs on (its observed type's board) with at least that frame buffer and at least `min_vgpu_type`'s, of
  the same kind (time-sliced or MIG-backed) and series as the type it runs on.

A profile without VMs is planned exactly as before: `split_vms` returns the same ProfileSet object. `check_pins`
refuses, naming the file, the line and the key, a `vgpu_type` or `min_vgpu_type` that no board of the vGPU catalog
has (the profile reader checks only NVIDIA's grammar: the catalog is the plan's).
"""

from __future__ import annotations

from dataclasses import dataclass

from migplan.catalog import Catalog, GpuModel
from migplan.catalog.vgpu import VgpuCatalog, VgpuModel, VgpuType, parse_type_name
from migplan.errors import CatalogError, InputError
from migplan.planner.demand import Policy, demand_of
from migplan.profiles import ProfileSet, Workload

NOT_PLANNED = "not planned: no hypervisor host (an inventory 'vgpu' setting, or GPUs in vGPU mode in the snapshot)"


@dataclass(frozen=True)
class VmDemand:
    """What one VM needs: frame buffer by the sizing rule, and the vGPU type that comes to (None: none fits)."""

    workload: Workload
    need_mib: int
    board: str | None  # the vGPU board (`A100-HGX-40GB`) the type is of
    vgpu_type: str | None
    note: str = ""  # why there is no type, or a pin smaller than the need

    def as_dict(self) -> dict[str, object]:
        w = self.workload
        return {"name": w.name, "host": w.observed.host, "gpu": w.observed.gpu,
                "observed_vgpu_type": w.observed.vgpu_type, "need_mib": self.need_mib, "board": self.board,
                "vgpu_type": self.vgpu_type, "pinned": w.vgpu_type is not None, "note": self.note,
                "status": NOT_PLANNED}


def split_vms(profiles: ProfileSet) -> tuple[ProfileSet, tuple[Workload, ...]]:
    """(the profiles without VM workloads, the VM workloads); `profiles` itself when it has none."""
    vms = tuple(w for w in profiles if w.is_vm)
    if not vms:
        return profiles, ()
    return ProfileSet(tuple(w for w in profiles if not w.is_vm), profiles.sources), vms


def _board_of(vcat: VgpuCatalog, type_name: str) -> tuple[VgpuModel, VgpuType] | None:
    """The board that has this type (its name's prefix is the board's) and the type; None: no board has it."""
    board = parse_type_name(type_name).board
    for m in vcat.find(board):
        if m.board == board:
            try:
                return m, m.vgpu_type(type_name)
            except CatalogError:
                return None
    return None


def _fail(w: Workload, key: str, message: str, hint: str) -> InputError:
    src, _, line = w.source.rpartition(":")
    return InputError(message, source=src or None, line=int(line) if line.isascii() and line.isdigit() else None,
                      key=f"workload {w.name!r}: {key}", hint=hint)


def check_pins(vms: tuple[Workload, ...], vcat: VgpuCatalog) -> None:
    """Every `vgpu_type` and `min_vgpu_type` must be a type of a board in the vGPU catalog."""
    for w in vms:
        for key in ("vgpu_type", "min_vgpu_type"):
            name = getattr(w, key)
            if name is None or _board_of(vcat, name) is not None:
                continue
            board = parse_type_name(name).board
            boards = [m for m in vcat.find(board) if m.board == board]
            hint = (f"types of {boards[0].id}: {', '.join(t.name for t in boards[0].types)}" if boards else
                    f"no vGPU board has the prefix {board!r}; 'migplan catalog vgpu' lists the boards and their types")
            raise _fail(w, key, f"vGPU type {name!r} is not in migplan's vGPU catalog", hint)


def smallest_type(board: VgpuModel, need_mib: int, like: VgpuType, at_least: int = 0) -> VgpuType | None:
    """The smallest type of `board` of `like`'s kind (time-sliced or MIG-backed) and series holding `need_mib` and at
    least `at_least` MiB; None when none does."""
    fits = [t for t in board.types if t.mig_backed == like.mig_backed and t.series == like.series
            and t.frame_buffer_mib >= max(need_mib, at_least)]
    return min(fits, key=lambda t: (t.frame_buffer_mib, t.name)) if fits else None


def vm_demand(w: Workload, policy: Policy, vcat: VgpuCatalog, fallback: GpuModel) -> VmDemand:
    """One VM's need and type (module notes). `fallback`: any catalog model, for `demand_of`'s compute side (a
    VM's compute is not planned here; only its memory need is used)."""
    need = demand_of(w, policy, None, fallback).memory_mib
    if w.vgpu_type is not None:
        found = _board_of(vcat, w.vgpu_type)
        if found is None:
            return VmDemand(w, need, None, w.vgpu_type, "pinned type not in the vGPU catalog")
        board, t = found
        short = (f"pinned {t.name} holds {t.frame_buffer_mib} MiB, less than the {need} MiB it needs"
                 if t.frame_buffer_mib < need else "pinned")
        return VmDemand(w, need, board.id, t.name, short)
    floor = _board_of(vcat, w.min_vgpu_type) if w.min_vgpu_type is not None else None
    ref = w.observed.vgpu_type or w.min_vgpu_type
    found = _board_of(vcat, ref) if ref is not None else None
    if found is None:
        why = ("its observed type " + repr(ref) + " is not in the vGPU catalog" if ref is not None
               else "no observed vgpu_type or min_vgpu_type names its board")
        return VmDemand(w, need, None, None, why)
    board, like = found
    chosen = smallest_type(board, need, like, floor[1].frame_buffer_mib if floor is not None else 0)
    if chosen is None:
        return VmDemand(w, need, board.id, None, f"no {like.series}-series type of {board.id} holds {need} MiB")
    return VmDemand(w, need, board.id, chosen.name)


def vm_demands(vms: tuple[Workload, ...], policy: Policy, vcat: VgpuCatalog, catalog: Catalog) -> list[VmDemand]:
    """`vm_demand` of each VM, pins checked first (`check_pins`)."""
    check_pins(vms, vcat)
    fallback = next(iter(catalog))
    return [vm_demand(w, policy, vcat, fallback) for w in vms]
