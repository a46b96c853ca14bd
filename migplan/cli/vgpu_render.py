"""The vGPU part of a plan as text, for `migplan propose`'s table (issue 26): each hypervisor GPU drawn as `status`
draws observed vGPUs (time-sliced types as shares of the GPU's frame buffer, `commands.fleet.vgpu_picture`;
MIG-backed ones on the MIG slot picture, `catalog.layout.picture`), its mode before and after, each vGPU's VM and
type, and the actions; then the VMs and a line with the GPUs used against the lower bound.

`render_vgpu(plan)` is the hook: "" for a plan without a `vgpu` section, so propose prints exactly what it printed
before for such a plan."""

from __future__ import annotations

from migplan.catalog import Catalog, VgpuCatalog, builtin_catalog, builtin_vgpu_catalog
from migplan.catalog.layout import Layout, picture
from migplan.cli.render import grid
from migplan.commands.fleet import vgpu_picture
from migplan.errors import CatalogError
from migplan.model.vgpu import VgpuGpuPlan, VgpuGpuState, VgpuPlan, VgpuSlot
from migplan.planner import Plan
from migplan.text import printable

MODE_SHORT = {"time_sliced": "equal-size", "time_sliced_mixed": "mixed-size", "mig_backed": "MIG-backed", None: "none"}


def _fb(vcat: VgpuCatalog, board: str, type_name: str) -> int:
    try:
        return vcat.get(board).vgpu_type(type_name).frame_buffer_mib
    except CatalogError:
        return 0


def _capacity(vcat: VgpuCatalog, board: str) -> int:
    try:
        return vcat.get(board).capacity_mib
    except CatalogError:
        return 0


def slot_picture(state: VgpuGpuState, mode: str | None, slots: tuple[VgpuSlot, ...], catalog: Catalog,
                 vcat: VgpuCatalog) -> str:
    """One GPU's vGPUs: MIG-backed ones on the MIG slot picture (their GPU instances), time-sliced ones as shares of
    the frame buffer (`|L4-12C           |L4-4C |         |`), nothing as an empty bar."""
    if mode == "mig_backed" or (mode is None and state.mig_enabled):
        placements = [s.placement for s in slots if s.placement] or (list(state.layout) if mode is None else [])
        try:
            return picture(catalog.get(state.model), Layout.parse(sorted(placements)))
        except CatalogError:
            return " ".join(placements) or "(MIG, no instance)"
    capacity = _capacity(vcat, state.board) or sum(_fb(vcat, state.board, s.type_name) for s in slots) or 1
    return vgpu_picture((capacity, [(s.type_name, _fb(vcat, state.board, s.type_name)) for s in slots]))


def _vms(slots: tuple[VgpuSlot, ...]) -> str:
    out = []
    for s in slots:
        who = s.vm or (f"running {s.vm_uuid}" if s.vm_uuid else "running" if s.running else "no VM")
        out.append(f"{printable(who, 80)} {s.type_name}" + (f"@{s.placement.rsplit('@', 1)[1]}" if s.placement else ""))
    return ", ".join(out) or "-"


def _gpu_row(g: VgpuGpuPlan, catalog: Catalog, vcat: VgpuCatalog) -> list[object]:
    o = g.observed
    mode = MODE_SHORT.get(o.mode, str(o.mode))
    after = MODE_SHORT.get(g.mode, str(g.mode))
    return [f"{printable(o.host, 80)}:{o.index}", o.board, mode if mode == after else f"{mode} -> {after}",
            slot_picture(o, o.mode, o.slots, catalog, vcat), slot_picture(o, g.mode, g.slots, catalog, vcat),
            "change" if g.changed else "", _vms(g.slots)]


def render_vgpu(plan: Plan, catalog: Catalog | None = None, vcat: VgpuCatalog | None = None) -> str:
    """The vGPU section of propose's table ("" without a vGPU part): GPUs, actions, VMs, GPUs used."""
    v: VgpuPlan | None = plan.vgpu
    if v is None:
        return ""
    catalog = Catalog((*plan.models, *(catalog or builtin_catalog()).models)) if plan.models else \
        (catalog or builtin_catalog())
    vcat = vcat or builtin_vgpu_catalog()
    out = ["vGPU hosts (VMs):",
           grid([_gpu_row(g, catalog, vcat) for g in v.gpus],
                ["HOST:GPU", "BOARD", "MODE", "CURRENT", "TARGET", "", "VGPUS (VM TYPE[@SLOT])"])]
    changed = [g for g in v.gpus if g.actions]
    if changed:
        out.append("\nvGPU actions (in the order apply runs them):")
        for g in changed:
            out.append(f"  {printable(g.observed.host, 80)}:{g.observed.index}: "
                       + "; ".join(printable(str(a), 200) for a in g.actions))
    if v.vms:
        rows = [[printable(m.name, 80), m.status, m.need_mib, m.vgpu_type or "-", m.frame_buffer_mib or "-",
                 f"{printable(m.host, 80)}:{m.gpu}" if m.host is not None else "-",
                 "moved" if m.moved else "", printable(m.reason or "", 200)] for m in v.vms]
        out.append("\n" + grid(rows, ["VM", "STATUS", "NEED MiB", "TYPE", "FRAME BUFFER MiB", "HOST:GPU", "MOVED",
                                      "REASON"]))
    count = {s: sum(1 for m in v.vms if m.status == s) for s in ("placed", "kept", "unplaced")}
    out.append(f"\nvGPU GPUs used {v.gpus_used} of {len(v.gpus)} (lower bound {v.gpu_lower_bound}); VMs placed "
               f"{count['placed']}, kept {count['kept']}, unplaced {count['unplaced']}; GPUs changed {len(changed)}; "
               f"vGPU solve {v.status}")
    return "\n".join(out) + "\n"
