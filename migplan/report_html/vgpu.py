"""The vGPU part of a plan on the report page (issue 26): one foldable section, drawn here as static HTML and
inline SVG (no script: the page's data block and drawing code are the MIG GPUs' and stay as they are).

Each hypervisor GPU is drawn as the MIG GPUs are, current above target: a time-sliced GPU is a bar as wide as its
board's frame buffer (`VgpuModel.capacity_mib`), each vGPU a rectangle as wide as its type's frame buffer (its
share of the GPU), labelled with the type and its VM; a MIG-backed GPU is its MIG slot picture (one cell per memory
slice of the MIG model), each vGPU on the GPU instance it sits on. Rectangles carry `data-side`, `data-type`,
`data-vm` and, MIG-backed, `data-placement`, and the classes of the MIG drawing (`inst kept|created|destroyed`).
Under each GPU: its mode before and after, the setting it needs, its actions; then the VMs' table.

A plan without a `vgpu` section gets "" (the page is exactly what it was)."""

from __future__ import annotations

import html

from migplan.catalog import Catalog, VgpuCatalog, builtin_vgpu_catalog
from migplan.catalog.geometry import GpuModel
from migplan.catalog.vgpu import VgpuModel, smi_type_name
from migplan.model.vgpu import VgpuGpuPlan, VgpuPlan, VgpuSlot
from migplan.planner import Plan

WIDTH = 480  # px: a GPU's bar, whatever its memory (shares, not sizes, are compared)
HEIGHT = 34
MODE_TEXT = {"time_sliced": "time-sliced, equal size", "time_sliced_mixed": "time-sliced, mixed size",
             "mig_backed": "MIG-backed", None: "no vGPU"}
STYLE = ("svg.vgpu{display:block;background:#fff;margin:2px 0}svg.vgpu rect.inst{fill:#dfe8f1}"
         "svg.vgpu rect.inst.destroyed{fill:#f6dede}svg.vgpu text{font:11px sans-serif;fill:#222}"
         ".vgpu-gpu{margin:.6em 0 1em}.vgpu-gpu h3{font-size:1em;margin:.2em 0}.vgpu-gpu ol{margin:.2em 0}")


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _board(vcat: VgpuCatalog, board: str) -> VgpuModel | None:
    return next((b for b in vcat if b.id == board), None)


def _fb(board: VgpuModel | None, type_name: str) -> int:
    if board is None:
        return 0
    name = smi_type_name(type_name)
    return next((t.frame_buffer_mib for t in board.types if t.name == name), 0)


def _mig_model(catalog: Catalog, model_id: str) -> GpuModel | None:
    return next((m for m in catalog.models if m.id == model_id), None)


def _label(s: VgpuSlot) -> str:
    who = s.vm or (s.vm_uuid and f"running {s.vm_uuid}") or ("running" if s.running else "no VM")
    return f"{s.type_name} {who}"


def _rect(x: float, w: float, cls: str, side: str, s: VgpuSlot, fb: int) -> str:
    label = _label(s)
    attrs = (f'class="inst {cls}" data-side="{side}" data-type="{esc(s.type_name)}" data-vm="{esc(s.vm or "")}"'
             + (f' data-placement="{esc(s.placement)}"' if s.placement else ""))
    text = label if len(label) * 6.2 <= w - 6 else label[:max(0, int((w - 6) / 6.2) - 1)] + "…" if w > 20 else ""
    tip = f"{label}, {fb} MiB" + (f" on {s.placement}" if s.placement else "") if fb else label
    return (f'<g><title>{esc(tip)}</title><rect {attrs} x="{x:.1f}" y="2" width="{max(w - 1, 2):.1f}" '
            f'height="{HEIGHT - 4}"/><text x="{x + 4:.1f}" y="{HEIGHT / 2 + 4:.0f}">{esc(text)}</text></g>')


def _classes(side: str, slots: tuple[VgpuSlot, ...], other: tuple[VgpuSlot, ...]) -> list[str]:
    """kept (the same device on both sides), created (target, no device yet), destroyed (current, not kept)."""
    kept = {s.device for s in other if s.device is not None}
    if side == "target":
        return ["kept" if s.device is not None else "created" for s in slots]
    return ["kept" if s.device in kept else "destroyed" for s in slots]


def gpu_svg(g: VgpuGpuPlan, side: str, catalog: Catalog, vcat: VgpuCatalog) -> str:
    o = g.observed
    mode, slots, other = (o.mode, o.slots, g.slots) if side == "current" else (g.mode, g.slots, o.slots)
    board = _board(vcat, o.board)
    out = [f'<svg class="gpu vgpu" data-side="{side}" width="{WIDTH}" height="{HEIGHT}" role="img" '
           f'aria-label="{esc(o.host)}:{o.index} {side}"><rect class="free" x="0.5" y="2" width="{WIDTH - 1}" '
           f'height="{HEIGHT - 4}"/>']
    classes = _classes(side, slots, other)
    model = _mig_model(catalog, o.model)
    if mode == "mig_backed" and model is not None and model.mig:
        cell = WIDTH / model.memory_slices
        for k in range(1, model.memory_slices):  # the memory slices, as the MIG drawing shows them
            out.append(f'<line x1="{k * cell:.1f}" y1="2" x2="{k * cell:.1f}" y2="{HEIGHT - 2}" stroke="#ddd"/>')
        for s, cls in zip(slots, classes, strict=True):
            if not s.placement:
                continue
            profile, _, start = s.placement.rpartition("@")
            size = model.profile(profile).memory_slices if model.has_profile(profile) else 1
            out.append(_rect(int(start) * cell, size * cell, cls, side, s, _fb(board, s.type_name)))
    else:
        capacity = (board.capacity_mib if board is not None else 0) or \
            sum(_fb(board, s.type_name) for s in slots) or 1
        x = 0.0
        for s, cls in zip(slots, classes, strict=True):
            w = max(_fb(board, s.type_name) / capacity * WIDTH, 14.0)
            out.append(_rect(x, min(w, WIDTH - x), cls, side, s, _fb(board, s.type_name)))
            x += w
    out.append("</svg>")
    return "".join(out)


def _setting(mode: str | None) -> str:
    return {"time_sliced": "vGPU, equal size (the default)",
            "time_sliced_mixed": "vGPU mixed-size (heterogeneous) mode on: nvidia-smi vgpu -shm 1; vSphere 8.0 U3: "
                                 "the GPU's mixed size mode",
            "mig_backed": "MIG mode on; one GPU instance per vGPU"}.get(mode or "", "no vGPU")


def _gpu(n: int, g: VgpuGpuPlan, catalog: Catalog, vcat: VgpuCatalog) -> str:
    o = g.observed
    before, after = MODE_TEXT.get(o.mode, str(o.mode)), MODE_TEXT.get(g.mode, str(g.mode))
    mode = before if before == after else f"{before} → {after}"
    acts = "".join(f"<li>{esc(a)}</li>" for a in g.actions)
    bus = f" · {esc(o.pci_bus_id)}" if o.pci_bus_id else ""
    return (f'<div class="vgpu-gpu{" x" if g.changed else ""}" id="v{n}" data-host="{esc(o.host)}" '
            f'data-gpu="{o.index}"><h3>{esc(o.host)}:{o.index} · {esc(o.board)} ({esc(o.model)}){bus} · {esc(mode)}'
            f'</h3><span class="meta">current</span>{gpu_svg(g, "current", catalog, vcat)}'
            f'<span class="meta">target</span>{gpu_svg(g, "target", catalog, vcat)}'
            f'<p class="meta">setting: {esc(_setting(g.mode))}</p>'
            + (f"<ol>{acts}</ol>" if acts else '<p class="meta">no change</p>') + "</div>")


def _vm_table(v: VgpuPlan) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("VM", "status", "needs MiB", "type", "frame buffer MiB", "host:GPU",
                                              "moved", "reason"))
    rows = "".join(
        f"<tr><td>{esc(m.name)}</td><td>{esc(m.status)}</td><td>{m.need_mib}</td><td>{esc(m.vgpu_type or '')}</td>"
        f"<td>{m.frame_buffer_mib or ''}</td><td>{esc(f'{m.host}:{m.gpu}' if m.host is not None else '')}</td>"
        f"<td>{'moved' if m.moved else ''}</td><td>{esc(m.reason or '')}</td></tr>" for m in v.vms)
    return f'<table class="vgpu-vms"><tr>{head}</tr>{rows}</table>'


def section(plan: Plan, catalog: Catalog, vcat: VgpuCatalog | None = None) -> str:
    """The page's vGPU section; "" for a plan without one."""
    v = plan.vgpu
    if v is None:
        return ""
    vcat = vcat or builtin_vgpu_catalog()
    if plan.models:
        catalog = Catalog((*plan.models, *catalog.models))
    placed = sum(1 for m in v.vms if m.status in ("placed", "kept"))
    meta = (f"{len(v.gpus)} GPU(s), {placed} of {len(v.vms)} VM(s) placed or kept; GPUs used {v.gpus_used} "
            f"(lower bound {v.gpu_lower_bound}); each VM's slice of its GPU's frame buffer (time-sliced) or its GPU "
            "instance (MIG-backed)")
    gpus = "".join(_gpu(n, g, catalog, vcat) for n, g in enumerate(v.gpus))
    return (f'<details class="sec" id="s-vgpu" open><summary><h2>vGPU hosts (VMs)</h2> <span class="meta">'
            f"{esc(meta)}</span></summary><style>{STYLE}</style>{gpus}{_vm_table(v)}</details>")
