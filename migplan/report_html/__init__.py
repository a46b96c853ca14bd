"""The plan as one self-contained HTML page: per host and GPU the current and target layout drawn slot by
slot as SVG, a summary, search and sorting (pure: a Plan and the catalog in, a string out).

Nothing is loaded from anywhere: the CSS, the script and every picture are inline, so the page works
from a file, a mail attachment or an air-gapped laptop, and shows nothing an outside server could
change. All text from the plan (workload and host names are untrusted input) is HTML-escaped; the
script reads only `data-*` attributes and `textContent`, never builds HTML.

Geometry is the catalog's: a GPU is `memory_slices` cells wide (one per memory slice, in slot order as
`nvidia-smi mig -lgipp` numbers them); an instance PROFILE@START covers cells START..START+size-1, with
one small square per compute slice it owns (compute slices have no fixed positions, NVIDIA's MIG user
guide, "Placements", so they are counted, not placed). The bar at an instance's foot is the observed
memory peak of its workload against the instance's memory.

Every instance rectangle carries `data-side` (current|target), `data-profile`, `data-start`,
`data-slices` and `data-workload`, so tests (and people) can check the drawing against the plan.

Pure: no files, processes or clock. May import: catalog, model, planner.
"""

from __future__ import annotations

import hashlib
import html
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from migplan.catalog import Catalog
from migplan.catalog.geometry import GpuModel
from migplan.catalog.layout import NO_MIG_PICTURE, Instance, Layout
from migplan.model.gpu_plan import GpuPlan, WorkloadPlan
from migplan.planner import Plan

SLOT_PX = 60  # width of one memory slice
NO_MIG_SLOTS = 8  # a GPU without MIG is drawn as wide as an 8-slice GPU (one whole device)
GAP_PX = 2
SVG_HEIGHT = 58
OPEN_HOSTS_UP_TO = 24  # GPUs: a small plan opens every host; a large one starts collapsed


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def colour(name: str) -> str:
    """A stable colour per workload (the same name is the same colour on every page)."""
    h = int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big")
    return f"hsl({h % 360}, {55 + h // 360 % 25}%, {72 + h // 9000 % 10}%)"


@dataclass(frozen=True)
class _Cell:
    """One instance as drawn."""

    inst: Instance
    slices: int
    compute: int
    memory_mib: int
    workloads: tuple[WorkloadPlan, ...]
    change: str  # kept | created | destroyed
    busy: bool  # processes run on it now (not placed by this plan: e.g. a workload left out keeps running)


def _model(plan: Plan, catalog: Catalog, model_id: str) -> GpuModel:
    for m in plan.models:
        if m.id == model_id:
            return m
    return catalog.get(model_id)


def _cells(model: GpuModel, layout: Layout, other: Layout | None, ws: dict[str, list[WorkloadPlan]],
           side: str, busy: frozenset[Instance]) -> list[_Cell]:
    keep = set(other.instances) if other is not None else set()
    out = []
    for inst in layout.instances:
        p = model.profile(inst.profile)
        change = "kept" if inst in keep else ("destroyed" if side == "current" else "created")
        out.append(_Cell(inst, min(p.memory_slices, model.memory_slices - inst.start), p.compute_slices,
                         p.memory_mib, tuple(ws.get(str(inst), ())), change, inst in busy))
    return out


def _text(x: float, y: float, text: str, cls: str, width_px: float) -> str:
    # about 6.2 px per character at 10 px: cut to what fits, the full text is in the <title>
    room = max(1, int(width_px / 6.2))
    shown = text if len(text) <= room else text[: max(1, room - 1)] + "\u2026"
    return f'<text x="{x:.0f}" y="{y:.0f}" class="{cls}">{esc(shown)}</text>'


def _svg(model: GpuModel, g: GpuPlan, layout: Layout | None, other: Layout | None, side: str,
         ws: dict[str, list[WorkloadPlan]], whole: list[WorkloadPlan]) -> str:
    width = (model.memory_slices if model.mig else NO_MIG_SLOTS) * SLOT_PX
    parts = [f'<svg class="gpu" data-side="{side}" data-slots="{model.memory_slices}" width="{width}" '
             f'height="{SVG_HEIGHT}" viewBox="0 0 {width} {SVG_HEIGHT}" role="img" '
             f'aria-label="{esc(g.host)} GPU {g.index} {side}">']
    if layout is None:
        label = ", ".join(w.name for w in whole) or ("MIG disabled (whole GPU)" if model.mig else NO_MIG_PICTURE)
        fill = colour(whole[0].name) if whole else "#e4e4e4"
        parts.append(f'<g class="whole"><title>{esc(label)}</title><rect class="whole" x="1" y="1" '
                     f'width="{width - GAP_PX}" height="{SVG_HEIGHT - 2}" rx="4" style="fill:{fill}"/>'
                     + _text(8, 30, label, "name", width - 16) + "</g>")
        parts.append("</svg>")
        return "".join(parts)
    taken: set[int] = set()
    cells = _cells(model, layout, other, ws, side, frozenset(g.observed.busy))
    for c in cells:
        taken.update(range(c.inst.start, c.inst.start + c.slices))
    for slot in range(model.memory_slices):
        if slot not in taken:
            parts.append(f'<rect class="free" data-slot="{slot}" x="{slot * SLOT_PX + 1}" y="1" '
                         f'width="{SLOT_PX - GAP_PX}" height="{SVG_HEIGHT - 2}" rx="3"/>')
    for c in cells:
        x, w = c.inst.start * SLOT_PX + 1, c.slices * SLOT_PX - GAP_PX
        names = ", ".join(wl.name for wl in c.workloads)
        peak = max((wl.peak_mib for wl in c.workloads), default=0)
        fill = colour(c.workloads[0].name) if c.workloads else "#f2f2f2"
        tip = f"{c.inst} ({c.memory_mib} MiB, {c.compute} compute slice{'s' if c.compute != 1 else ''}): " + (
            f"{names}, peak {peak} MiB" if c.workloads else
            "busy: processes run on it" if c.busy else "no workload of this plan") + f"; {c.change}"
        parts.append(f'<g class="cell {c.change}"><title>{esc(tip)}</title>'
                     f'<rect class="inst {c.change}" data-side="{side}" data-profile="{esc(c.inst.profile)}" '
                     f'data-start="{c.inst.start}" data-slices="{c.slices}" data-workload="{esc(names)}" '
                     f'x="{x}" y="1" width="{w}" height="{SVG_HEIGHT - 2}" rx="4" style="fill:{fill}"/>')
        for k in range(c.compute):  # one square per compute slice
            parts.append(f'<rect class="sm" x="{x + 4 + k * 7}" y="5" width="5" height="5"/>')
        parts.append(_text(x + 4, 24, c.inst.profile, "prof", w - 6))
        parts.append(_text(x + 4, 37, names or ("busy" if c.busy else "-"), "name", w - 6))
        if c.workloads and c.memory_mib:
            used = min(1.0, peak / c.memory_mib)
            parts.append(f'<rect class="mem" x="{x + 3}" y="{SVG_HEIGHT - 12}" width="{w - 6}" height="6"/>'
                         f'<rect class="memused{" over" if peak > c.memory_mib else ""}" x="{x + 3}" '
                         f'y="{SVG_HEIGHT - 12}" width="{(w - 6) * used:.1f}" height="6"/>')
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


def _workload_line(w: WorkloadPlan) -> str:
    mark = "at-risk" if w.status == "at_risk" else "kept" if w.kept else ("moved" if w.moved else "new")
    mem = f"{w.peak_mib} / {w.instance_mib} MiB" if w.instance_mib else f"{w.peak_mib} MiB"
    margin = f", margin {w.margin_mib} MiB" if w.margin_mib is not None else ""
    return (f'<li><span class="swatch" style="background:{colour(w.name)}"></span>{esc(w.name)} '
            f'<code>{esc(w.instance or "whole GPU")}</code> <span class="{mark}">{mark}</span> '
            f'<span class="mem-text">peak {esc(mem)}{esc(margin)}</span></li>')


def _gpu_row(plan: Plan, catalog: Catalog, g: GpuPlan, placed: list[WorkloadPlan],
             named: dict[str, WorkloadPlan]) -> tuple[str, int]:
    model = _model(plan, catalog, g.model)
    by_inst: dict[str, list[WorkloadPlan]] = defaultdict(list)
    whole = []
    for w in placed:
        if w.instance is None:
            whole.append(w)
        else:
            by_inst[w.instance].append(w)
    kept: dict[str, list[WorkloadPlan]] = defaultdict(list)  # what runs on the current layout now
    for inst, wl in by_inst.items():
        kept[inst] = [w for w in wl if w.kept]
    whole_now = [w for w in whole if w.kept]
    for m in plan.migrations:  # moved (or stopped) workloads: where they run now
        mover = named.get(m.workload)
        if mover is not None and m.source.key == g.key:
            (kept[m.source.instance] if m.source.instance is not None else whole_now).append(mover)
    changes = len(g.actions)
    state = g.hold or ("change" if changes else "unchanged")
    actions = "".join(f"<li><code>{esc(a)}</code></li>" for a in g.actions) or "<li>nothing to do</li>"
    current = _svg(model, g, g.current, g.target, "current", kept, whole_now)
    target = _svg(model, g, g.target, g.current, "target", by_inst, whole)
    row = (f'<section class="gpu-row" data-gpu="{g.index}" data-model="{esc(g.model)}" data-changes="{changes}">'
           f'<h3>GPU {g.index} <span class="model">{esc(g.model)}</span> <span class="state {esc(state)}">'
           f'{esc(state)}</span></h3><div class="pair"><figure><figcaption>current</figcaption>{current}</figure>'
           f'<figure><figcaption>target</figcaption>{target}</figure><div class="changes"><b>changes</b>'
           f'<ul>{actions}</ul></div></div><ul class="wl">{"".join(_workload_line(w) for w in placed)}</ul></section>')
    return row, changes


def _summary(plan: Plan) -> str:
    s, v = plan.summary, plan.solve
    whole_baseline = len(plan.workloads)  # one whole GPU per workload (replica), the way without MIG
    moves = len(plan.migrations) or sum(1 for w in plan.workloads if w.moved)
    gap = f"{v.gap:.2%}" if v.gap is not None else "n/a"
    rows = [
        ("GPUs used", f"{s.gpus_used} of {s.gpus_planned} planned ({s.gpus_total} in the fleet)"),
        ("lower bound", "n/a" if s.gpus_lower_bound is None else str(s.gpus_lower_bound)),
        ("whole-GPU baseline", f"{whole_baseline} GPUs (one per workload, no MIG)"),
        ("free whole GPUs", str(s.free_whole_gpus)),
        ("stranded slices", str(s.stranded_slices)),
        ("workloads", f"{s.workloads_placed} placed, {s.workloads_at_risk} kept at risk, "
                      f"{s.workloads_unplaced} left out, {s.workloads_disrupted} disrupted"),
        ("moves", f"{moves} workload(s) moved"),
        ("changes", f"{s.gpus_changed} GPU(s) changed, {s.instances_destroyed} instance(s) destroyed, "
                    f"{s.instances_created} created"),
        ("memory", f"headroom {s.headroom_rule}; below peak {s.below_peak}"
                   + (f"; least margin {s.min_margin_mib} MiB" if s.min_margin_mib is not None else "")),
        ("solver", f"{v.solver}: {v.status}, gap {gap}, {v.time_s:.2f} s" if v.fallback is None else
         f"{v.solver}: {v.status} in {v.time_s:.2f} s; plan: the {v.fallback} fallback"),
    ]
    out = ['<table class="summary">'] + [f"<tr><th>{esc(k)}</th><td>{esc(val)}</td></tr>" for k, val in rows]
    out.append("</table>")
    if v.fallback is not None:
        out.append(f'<p class="warning">warning: the solver found no plan within its time limit; this is the '
                   f'{esc(v.fallback)} fallback: every layout kept, nothing running moved, new demand only in idle '
                   'instances. A longer time limit gives a plan that changes layouts.</p>')
    if s.memory_warning:
        out.append(f'<p class="warning">warning: {esc(s.memory_warning)}</p>')
    if plan.migrations:
        out.append('<h2>Moves (in this order)</h2><table class="moves"><tr><th>step</th><th>workload</th><th>from'
                   '</th><th>to</th><th>how</th><th>why</th></tr>')
        out += [f"<tr><td>{m.step}</td><td>{esc(m.workload)}</td><td>{esc(m.source)}</td>"
                f"<td>{esc(m.target) if m.target else 'stops'}</td>"
                f"<td>{'make before break' if m.make_before_break else 'stop first'}</td><td>{esc(m.reason)}</td></tr>"
                for m in plan.migrations]
        out.append("</table>")
    risky = [w for w in plan.workloads if w.status == "at_risk"]
    if risky:
        out.append(_listing("Kept at risk", "running where they are: the peak fits, peak + headroom does not", risky,
                            ("workload", "host/GPU", "instance", "instance MiB", "peak MiB", "needs MiB", "margin MiB"),
                            lambda w: (w.name, f"{w.host}/{w.gpu}", w.instance or "whole GPU", w.instance_mib,
                                       w.peak_mib, w.memory_mib, w.margin_mib)))
    left = [w for w in plan.workloads if not w.on_gpu]
    if left:
        out.append(_listing("Left out", "no place at all", left, ("workload", "needs MiB", "peak MiB", "reason"),
                            lambda w: (w.name, w.memory_mib, w.peak_mib, w.reason or "")))
    return "".join(out)


LISTING_OPEN_UP_TO = 20  # rows: a longer list of workloads starts folded, so it never pushes the hosts off the page


def _listing(title: str, what: str, rows: list[WorkloadPlan], headers: tuple[str, ...],
             cells: Callable[[WorkloadPlan], tuple[object, ...]]) -> str:
    """One foldable table of workloads, open when short (a 219-row list once filled 6,000 pixels, issue 23)."""
    open_attr = " open" if len(rows) <= LISTING_OPEN_UP_TO else ""
    css = title.lower().replace(" ", "-")
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc('' if c is None else str(c))}</td>" for c in cells(w)) + "</tr>"
                   for w in rows)
    return (f'<details class="listing {css}"{open_attr}><summary><h2>{esc(title)} ({len(rows)})</h2> '
            f'<span class="meta">{esc(what)}</span></summary><table class="{css}"><tr>{head}</tr>{body}</table>'
            "</details>")


def render(plan: Plan, catalog: Catalog, *, title: str = "migplan plan") -> str:
    """The whole page."""
    placed: dict[tuple[str | None, int | None], list[WorkloadPlan]] = defaultdict(list)
    for w in plan.workloads:
        if w.on_gpu:
            placed[(w.host, w.gpu)].append(w)
    named = {w.name: w for w in plan.workloads}
    by_host: dict[str, list[GpuPlan]] = defaultdict(list)
    for g in plan.gpus:
        by_host[g.host].append(g)
    open_attr = " open" if len(plan.gpus) <= OPEN_HOSTS_UP_TO else ""
    hosts = []
    for host in sorted(by_host):
        rows, total, changing = [], 0, 0
        words = [host]
        for g in sorted(by_host[host], key=lambda x: x.index):
            ws = placed.get((g.host, g.index), [])
            row, n = _gpu_row(plan, catalog, g, ws, named)
            rows.append(row)
            total += n
            changing += 1 if n else 0
            words += [g.model, *(w.name for w in ws)]
        n_ws = sum(len(placed.get((host, g.index), [])) for g in by_host[host])
        search = " ".join(words).lower()
        hosts.append(f'<details class="host" data-host="{esc(host)}" data-changes="{total}" '
                     f'data-search="{esc(search)}"{open_attr}><summary><b>{esc(host)}</b> '
                     f'<span class="meta">{len(by_host[host])} GPU(s), {n_ws} workload(s), '
                     f'{changing} changing ({total} action(s))</span></summary>{"".join(rows)}</details>')
    meta = " · ".join(esc(x) for x in _meta(plan))
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f'<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; '
            f'script-src \'unsafe-inline\'; img-src data:">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">'
            f'<title>{esc(title)}</title>'
            f"<style>{_CSS}</style></head><body><header><h1>{esc(title)}</h1><p class=\"meta\">{meta}</p></header>"
            f"<main><h2>Summary</h2>{_summary(plan)}<h2>Hosts</h2>"
            f'<div class="controls"><input id="q" type="search" placeholder="search hosts, models, workloads" '
            f'aria-label="search"> <label>sort by <select id="sort"><option value="host">host</option>'
            f'<option value="changes">changes (actions)</option></select></label> '
            f'<button id="open" type="button">expand all</button> '
            f'<button id="close" type="button">collapse all</button> <span id="count"></span></div>'
            f'<div class="legend">{_legend()}</div>'
            f'<div id="hosts">{"".join(hosts)}</div></main><script>{_JS}</script></body></html>\n')


def _meta(plan: Plan) -> Iterable[str]:
    yield f"{len(plan.gpus)} GPU(s) on {len({g.host for g in plan.gpus})} host(s)"
    if plan.created_at:
        yield f"created {plan.created_at}"
    yield f"planned from {plan.source}"
    yield f"state {plan.fingerprint[:19]}"


def _legend() -> str:
    return ('<span><svg width="18" height="12"><rect class="inst kept" x="1" y="1" width="16" height="10"/></svg> '
            'kept</span> <span><svg width="18" height="12"><rect class="inst created" x="1" y="1" width="16" '
            'height="10"/></svg> created</span> <span><svg width="18" height="12"><rect class="inst destroyed" '
            'x="1" y="1" width="16" height="10"/></svg> destroyed</span> <span><svg width="18" height="12"><rect '
            'class="free" x="1" y="1" width="16" height="10"/></svg> free slice</span> <span><svg width="18" '
            'height="12"><rect class="sm" x="6" y="3" width="5" height="5"/></svg> compute slice</span> '
            '<span><svg width="30" height="12"><rect class="mem" x="1" y="3" width="28" height="6"/><rect '
            'class="memused" x="1" y="3" width="18" height="6"/></svg> peak memory / instance memory</span>')


_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#222;background:#fafafa}
header{background:#1f3b57;color:#fff;padding:12px 20px}header h1{margin:0;font-size:20px}
header .meta{margin:4px 0 0;color:#cfe0f0}main{padding:8px 20px 40px}
h2{font-size:16px;margin:18px 0 8px}table{border-collapse:collapse;background:#fff}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f0f3f6}
.warning{color:#a40;font-weight:600}.controls{margin:6px 0 10px}.controls input{width:280px;padding:4px}
.legend span{margin-right:14px;font-size:12px;color:#555}.legend svg{vertical-align:middle}
.legend rect.inst{fill:#f2f2f2}
details.host{background:#fff;border:1px solid #d5dbe1;border-radius:6px;margin:6px 0;padding:4px 10px}
details.host summary{cursor:pointer;padding:4px 0}details.host .meta{color:#666;margin-left:8px}
.gpu-row{border-top:1px solid #eee;padding:6px 0}.gpu-row h3{font-size:13px;margin:2px 0 4px}
.model{color:#555;font-weight:400}.state{font-size:11px;padding:1px 6px;border-radius:8px;background:#e8e8e8}
.state.change{background:#ffe2b8}.state.reserved,.state.excluded{background:#d9e6ff}
.pair{display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start}figure{margin:0}
figcaption{font-size:11px;color:#666}.changes{font-size:12px}.changes ul{margin:2px 0;padding-left:16px}
svg.gpu{display:block;background:#fff}rect.free{fill:#fff;stroke:#bbb;stroke-dasharray:3 2}
rect.inst{stroke:#555;stroke-width:1}rect.inst.created{stroke:#0a7d2c;stroke-width:2.5;stroke-dasharray:6 3}
rect.inst.destroyed{stroke:#c0262d;stroke-width:2.5;opacity:.75}rect.whole{stroke:#555}
rect.sm{fill:#36506b}rect.mem{fill:#fff;stroke:#777;stroke-width:.5}rect.memused{fill:#36506b}
rect.memused.over{fill:#c0262d}text{font-size:10px;fill:#111}text.prof{font-weight:600}
ul.wl{list-style:none;margin:4px 0;padding:0;font-size:12px;columns:2 320px}
.swatch{display:inline-block;width:10px;height:10px;border:1px solid #777;margin-right:4px}
.kept{color:#555}.moved{color:#a40;font-weight:600}.new{color:#0a7d2c;font-weight:600}.mem-text{color:#666}
code{font-size:12px}
"""

# Search filters hosts by the words in data-search; sorting re-appends the host elements. Only
# attributes and textContent are read or written: nothing from the plan is ever parsed as HTML.
_JS = """
(function(){
var box=document.getElementById('hosts'),q=document.getElementById('q'),sort=document.getElementById('sort');
var count=document.getElementById('count');
function hosts(){return Array.prototype.slice.call(box.querySelectorAll('details.host'));}
function show(){var t=q.value.trim().toLowerCase(),n=0,all=hosts();
all.forEach(function(h){var ok=!t||h.getAttribute('data-search').indexOf(t)>=0;h.hidden=!ok;if(ok)n++;});
count.textContent=n+' of '+all.length+' host(s)';}
function order(){var by=sort.value,all=hosts();all.sort(function(a,b){
if(by==='changes'){var d=(+b.getAttribute('data-changes'))-(+a.getAttribute('data-changes'));if(d)return d;}
var x=a.getAttribute('data-host'),y=b.getAttribute('data-host');return x<y?-1:x>y?1:0;});
all.forEach(function(h){box.appendChild(h);});}
q.addEventListener('input',show);sort.addEventListener('change',function(){order();show();});
document.getElementById('open').addEventListener('click',function(){hosts().forEach(function(h){if(!h.hidden)h.open=true;});});
document.getElementById('close').addEventListener('click',function(){hosts().forEach(function(h){h.open=false;});});
var p=new URLSearchParams(location.search);if(p.get('sort')){sort.value=p.get('sort');order();}
if(p.get('q')){q.value=p.get('q');}show();document.body.setAttribute('data-ready','1');
})();
"""
