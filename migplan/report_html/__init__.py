"""The plan as one self-contained HTML page for a whole fleet (docs/report.md; pure: a Plan and the catalog in, a
string out).

The page holds, in this order, each section foldable (`<details>`): the fleet summary; the overview, one cell per
GPU grouped by host, coloured by the memory its workloads use (their observed peaks against the GPU's memory),
changed GPUs ringed, GPUs with a workload at risk or a left-out workload's processes marked, each cell a link to its
GPU's detail; the moves; the workloads kept at risk and left out; and the GPUs by host. Filters ("changes only",
"at risk", "left out"), a search box and the sort order act on the overview and the hosts alike.

It scales by drawing on demand: the overview and the summary are HTML; every GPU's detail (its current and target
layout slot by slot as SVG, its nvidia-smi commands, its workloads) is in one compact JSON block (`page_data`) that
the page's script draws when the GPU's host is opened (all hosts open on a plan of at most 24 GPUs). Nothing is
loaded from anywhere: the CSS, the script and every picture are inline (a Content-Security-Policy forbids the
rest), so the page works from a file, a mail attachment or an air-gapped laptop. Text from the plan (workload and
host names are untrusted) is HTML-escaped in the HTML and JSON-escaped in the data block (no `<`, `>` or `&` in
it); the script writes only `textContent` and attributes, never HTML.

The commands of each GPU are `fleet.steps.to_commands` of its actions, the one builder apply uses, so they read as
`migplan apply --dry-run -o sh` prints them. Destroying an instance needs its live GPU instance id: with the ids a
discovery snapshot recorded (`gi_ids`, passed in by the command that read the snapshot) the commands are exact;
without them the destroy step is a comment naming the instances (apply reads their ids on the host).

Geometry is the catalog's: a GPU is `memory_slices` cells wide (one per memory slice, in slot order as
`nvidia-smi mig -lgipp` numbers them); an instance PROFILE@START covers cells START..START+size-1, with one small
square per compute slice it owns (compute slices have no fixed positions, NVIDIA's MIG user guide, "Placements").

  __init__.py  the page: the summary, the overview and the data block
  assets.py    its stylesheet and script
  frontier.py  `backtest --sweep --report`: the sizing sweep's page, its frontier drawn as SVG (no script)
  vgpu.py      the vGPU hosts' section (issue 26): each VM's slice of its GPU, drawn as static SVG

Pure: no files, processes or clock. May import: catalog, model, planner, fleet (steps.py: the commands), smi (the
read-only `-lgi` named where ids are not known).
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from migplan import smi
from migplan.catalog import Catalog
from migplan.catalog.geometry import GpuModel
from migplan.catalog.layout import NO_MIG_PICTURE, Instance, Layout
from migplan.fleet.steps import StepError, to_commands
from migplan.model.diff import Op
from migplan.model.gpu_plan import GpuPlan, WorkloadPlan
from migplan.model.state import GpuKey
from migplan.planner import Plan
from migplan.report_html.assets import CSS, SCRIPT
from migplan.report_html.vgpu import section as vgpu_section

OPEN_HOSTS_UP_TO = 24  # GPUs: a small plan opens (and draws) every host; a large one starts collapsed
LISTING_OPEN_UP_TO = 20  # rows: a longer list of workloads starts folded, so it never pushes the hosts off the page
BIG_CELLS_UP_TO = 256  # GPUs: a small fleet's overview cells are drawn larger
MEMORY_STEPS = (0.25, 0.5, 0.75)  # the overview's colour steps of used memory: u1 <25%, u2 <50%, u3 <75%, u4 above

# A GPU's flags in the data block (and the overview cell's classes)
CHANGED, AT_RISK, LEFT_OUT, RESERVED, EXCLUDED, MOVES = 1, 2, 4, 8, 16, 32
# A workload's mark on its GPU
NEW, KEPT, MOVED, RISK = 0, 1, 2, 3
MARKS = ("new", "kept", "moved", "at-risk")
DESTROYS = (Op.DESTROY_CI, Op.DESTROY_GI)

GiIds = Mapping[GpuKey, Mapping[Instance, int]]


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


@dataclass(frozen=True)
class _Gpu:
    """One GPU as the page shows it: its plan, model, workloads (placed and kept at risk) and flags."""

    position: int  # its position in the data block (the overview cell links to #g<n>)
    plan: GpuPlan
    model: GpuModel
    workloads: tuple[WorkloadPlan, ...]
    movers: tuple[tuple[WorkloadPlan, str | None], ...]  # workloads leaving this GPU, from which instance
    flags: int
    used_mib: int


def _model(plan: Plan, catalog: Catalog, model_id: str) -> GpuModel:
    for m in plan.models:
        if m.id == model_id:
            return m
    return catalog.get(model_id)


def _gpus(plan: Plan, catalog: Catalog) -> list[_Gpu]:
    """Every GPU, by host then index, with what the page needs of it."""
    placed: dict[GpuKey, list[WorkloadPlan]] = defaultdict(list)
    for w in plan.workloads:
        if w.on_gpu and w.host is not None and w.gpu is not None:
            placed[(w.host, w.gpu)].append(w)
    named = {w.name: w for w in plan.workloads}
    movers: dict[GpuKey, list[tuple[WorkloadPlan, str | None]]] = defaultdict(list)
    in_moves: set[GpuKey] = set()
    for m in plan.migrations:
        in_moves.add(m.source.key)
        if m.target is not None:
            in_moves.add(m.target.key)
        mover = named.get(m.workload)
        if mover is not None:
            movers[m.source.key].append((mover, m.source.instance))
    out = []
    for n, g in enumerate(sorted(plan.gpus, key=lambda x: (x.host, x.index))):
        ws = placed.get(g.key, [])
        model = _model(plan, catalog, g.model)
        held = {w.instance for w in ws} | {inst for _, inst in movers.get(g.key, [])}
        flags = (CHANGED if g.actions else 0) | (AT_RISK if any(w.status == "at_risk" for w in ws) else 0)
        # processes run there that no workload of the plan holds: where a running workload left out stays
        if any(str(i) not in held for i in g.observed.busy) or (g.observed.whole_busy and None not in held):
            flags |= LEFT_OUT
        flags |= (RESERVED if g.hold == "reserved" else 0) | (EXCLUDED if g.hold == "excluded" else 0)
        flags |= MOVES if g.key in in_moves else 0
        out.append(_Gpu(n, g, model, tuple(ws), tuple(movers.get(g.key, ())), flags, sum(w.peak_mib for w in ws)))
    return out


def gpu_commands(g: GpuPlan, model: GpuModel, gi_ids: Mapping[Instance, int] | None) -> list[str]:
    """The GPU's nvidia-smi commands as `migplan apply --dry-run -o sh` prints them (`fleet.steps.to_commands`).
    Without the live GPU instance id of every instance destroyed, the destroy step is one comment naming them."""
    if not g.actions:
        return []
    ids = gi_ids or {}
    doomed = list(dict.fromkeys(a.instance for a in g.actions if a.op in DESTROYS and a.instance is not None))
    actions = list(g.actions)
    out = []
    if any(i not in ids for i in doomed):
        listing = " ".join(smi.list_gpu_instances(g.index))
        out.append(f"# destroy {' '.join(map(str, doomed))} by their GPU instance ids (apply reads them: {listing})")
        actions = [a for a in actions if a.op not in DESTROYS]
    try:
        out += [str(step) for step in to_commands(g.index, model, actions, ids)]
    except StepError as err:
        out.append(f"# not expressible as nvidia-smi commands: {err}")
    return out


def _flat(model: GpuModel, layout: Layout | None, index: Mapping[str, int]) -> list[int] | None:
    """A layout as [profile, start, profile, start, ...] (profiles by their index in the model's table)."""
    if layout is None:
        return None
    return [x for i in layout.instances for x in (index[i.profile], i.start)]


def page_data(plan: Plan, catalog: Catalog, gi_ids: GiIds | None = None, ids_from: str = "") -> dict[str, Any]:
    """The data block the page's script draws the details from (docs/report.md, "The data block"):

    hosts: host names; models: [id, memory slices, slots drawn, MIG?, memory MiB, [[profile, memory slices,
    compute slices, MiB], ...]]; gpus: per GPU (by host, then index) [host, index, model, flags, current, target,
    busy, actions, commands, workloads, movers, used MiB]: current and target as [profile, start, ...] (null: MIG
    off), busy as positions in current, workloads as [name, position in target (-1: the whole GPU), peak MiB,
    mark (new, kept, moved, at risk), MiB of the whole GPU (0 on an instance: its profile's)], movers (workloads
    leaving this GPU) as [name, position in current (-1: whole), peak MiB]."""
    gpus = _gpus(plan, catalog)
    hosts = sorted({g.plan.host for g in gpus})
    host_n = {h: n for n, h in enumerate(hosts)}
    models: list[GpuModel] = list(dict.fromkeys(g.model for g in gpus))
    model_n = {m.id: n for n, m in enumerate(models)}
    # only the profiles the plan's layouts use, in the catalog's order
    used: dict[str, set[str]] = {m.id: set() for m in models}
    for g in gpus:
        for layout in (g.plan.current, g.plan.target):
            used[g.model.id].update(i.profile for i in (layout.instances if layout is not None else ()))
    tables = {m.id: [p for p in m.profiles if p.name in used[m.id]] for m in models}
    index = {mid: {p.name: n for n, p in enumerate(t)} for mid, t in tables.items()}
    rows = []
    for g in gpus:
        p, m = g.plan, g.model
        cur, tgt = p.current, p.target
        cur_pos = {str(i): n for n, i in enumerate(cur.instances)} if cur is not None else {}
        tgt_pos = {str(i): n for n, i in enumerate(tgt.instances)} if tgt is not None else {}
        busy = [cur_pos[str(i)] for i in p.observed.busy if str(i) in cur_pos]
        ws = []
        for w in g.workloads:
            mark = RISK if w.status == "at_risk" else KEPT if w.kept else MOVED if w.moved else NEW
            pos = tgt_pos.get(w.instance, -1) if w.instance is not None else -1
            ws.append([w.name, pos, w.peak_mib, mark, (w.instance_mib or 0) if pos < 0 else 0])
        movers = [[w.name, cur_pos.get(inst, -1) if inst is not None else -1, w.peak_mib] for w, inst in g.movers]
        rows.append([host_n[p.host], p.index, model_n[m.id], g.flags, _flat(m, cur, index[m.id]),
                     _flat(m, tgt, index[m.id]), busy, len(p.actions),
                     gpu_commands(p, m, (gi_ids or {}).get(p.key)), ws, movers, g.used_mib])
    return {
        "hosts": hosts,
        "models": [[m.id, m.memory_slices, m.memory_slices if m.mig else 8, m.mig, m.memory_mib,
                    [[q.name, q.memory_slices, q.compute_slices, q.memory_mib] for q in tables[m.id]]]
                   for m in models],
        "gpus": rows,
        "open": len(gpus) <= OPEN_HOSTS_UP_TO,
        "ids": ids_from,
        "nomig": NO_MIG_PICTURE,
    }


def _json(data: object) -> str:
    """JSON for inside a <script> element: no `<`, `>` or `&` (a name cannot close the element or open another)."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return text.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")


def _bucket(g: _Gpu) -> int:
    if g.used_mib <= 0:
        return 0
    share = g.used_mib / g.model.memory_mib if g.model.memory_mib else 1.0
    return 1 + sum(1 for step in MEMORY_STEPS if share >= step)


def _cell_class(g: _Gpu) -> str:
    marks = [f"u{_bucket(g)}"]
    for bit, cls in ((CHANGED, "x"), (AT_RISK, "r"), (LEFT_OUT, "l"), (RESERVED | EXCLUDED, "k")):
        if g.flags & bit:
            marks.append(cls)
    return " ".join(marks)


def _overview(gpus: list[_Gpu]) -> str:
    """One cell per GPU, grouped by host (hosts by name, GPUs by index); each a link to its detail (#g<n>)."""
    by_host: dict[str, list[_Gpu]] = defaultdict(list)
    for g in gpus:
        by_host[g.plan.host].append(g)
    out = [f'<div id="grid"{" class=big" if len(gpus) <= BIG_CELLS_UP_TO else ""}>']
    for n, (host, gs) in enumerate(by_host.items()):
        cells = "".join(f'<a href="#g{g.position}" class="{_cell_class(g)}"></a>' for g in gs)
        out.append(f'<div class="hg" data-h="{n}"><span class="hn">{esc(host)}</span>{cells}</div>')
    out.append("</div>")
    return "".join(out)


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
        *([("sizing", plan.sizing.line())] if plan.sizing is not None else []),
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
    return "".join(out)


def _moves(plan: Plan) -> str:
    if not plan.migrations:
        return ""
    open_attr = " open" if len(plan.migrations) <= LISTING_OPEN_UP_TO else ""
    rows = "".join(f"<tr><td>{m.step}</td><td>{esc(m.workload)}</td><td>{esc(m.source)}</td>"
                   f"<td>{esc(m.target) if m.target else 'stops'}</td>"
                   f"<td>{'make before break' if m.make_before_break else 'stop first'}</td><td>{esc(m.reason)}</td>"
                   "</tr>" for m in plan.migrations)
    return (f'<details class="sec listing moves" id="s-moves"{open_attr}><summary><h2>Moves ({len(plan.migrations)})'
            '</h2> <span class="meta">in this order; apply runs the commands of the GPUs they touch around them'
            '</span></summary><table class="moves"><tr><th>step</th><th>workload</th><th>from</th><th>to</th>'
            f"<th>how</th><th>why</th></tr>{rows}</table></details>")


def _listings(plan: Plan) -> str:
    out = []
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


def _listing(title: str, what: str, rows: list[WorkloadPlan], headers: tuple[str, ...],
             cells: Callable[[WorkloadPlan], tuple[object, ...]]) -> str:
    """One foldable table of workloads, open when short (a 219-row list once filled 6,000 pixels, issue 23)."""
    open_attr = " open" if len(rows) <= LISTING_OPEN_UP_TO else ""
    css = title.lower().replace(" ", "-")
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{esc('' if c is None else str(c))}</td>" for c in cells(w)) + "</tr>"
                   for w in rows)
    return (f'<details class="sec listing {css}" id="s-{css}"{open_attr}><summary><h2>{esc(title)} ({len(rows)})'
            f'</h2> <span class="meta">{esc(what)}</span></summary><table class="{css}"><tr>{head}</tr>{body}</table>'
            "</details>")


def _filters(gpus: list[_Gpu], plan: Plan) -> str:
    n = len(gpus)
    changed = sum(1 for g in gpus if g.flags & CHANGED)
    risky = sum(1 for g in gpus if g.flags & AT_RISK)
    left = sum(1 for g in gpus if g.flags & LEFT_OUT)
    left_out = sum(1 for w in plan.workloads if not w.on_gpu)
    buttons = (("all", f"all GPUs ({n:,})", "every GPU"),
               ("changes", f"changes only ({changed:,})", "GPUs whose layout changes"),
               ("at-risk", f"at risk ({risky:,})", "GPUs with a workload kept at risk"),
               ("left-out", f"left out ({left_out:,} workloads, {left:,} GPUs)",
                "the workloads left out, and the GPUs where processes run that no workload of the plan holds "
                "(where a running workload left out stays)"))
    return ('<div class="filters" role="group" aria-label="filter">' + "".join(
        f'<button type="button" data-filter="{k}" title="{esc(tip)}" aria-pressed="{"true" if k == "all" else "false"}"'
        f">{esc(text)}</button>" for k, text, tip in buttons) + "</div>")


def _legend() -> str:
    cells = " ".join(f'<span><i class="cell {c}"></i>{esc(t)}</span>' for c, t in (
        ("u0", "no workload"), ("u1", "< 25% of its memory used"), ("u2", "< 50%"), ("u3", "< 75%"),
        ("u4", "75% or more"), ("u0 x", "layout changes"), ("u0 r", "a workload at risk"),
        ("u0 l", "processes outside the plan"), ("u0 k", "reserved or excluded")))
    return (f'<p class="legend">{cells} <span class="meta">memory used: the observed peaks of the workloads '
            "the plan places on the GPU, against its memory</span></p>")


def _svg_legend() -> str:
    return ('<p class="legend"><span><svg width="18" height="12"><rect class="inst kept" x="1" y="1" width="16" '
            'height="10"/></svg> kept</span> <span><svg width="18" height="12"><rect class="inst created" x="1" '
            'y="1" width="16" height="10"/></svg> created</span> <span><svg width="18" height="12"><rect '
            'class="inst destroyed" x="1" y="1" width="16" height="10"/></svg> destroyed</span> <span><svg '
            'width="18" height="12"><rect class="free" x="1" y="1" width="16" height="10"/></svg> free slice</span> '
            '<span><svg width="18" height="12"><rect class="sm" x="6" y="3" width="5" height="5"/></svg> compute '
            'slice</span> <span><svg width="30" height="12"><rect class="mem" x="1" y="3" width="28" height="6"/>'
            '<rect class="memused" x="1" y="3" width="18" height="6"/></svg> peak memory / instance (or whole GPU) '
            "memory</span></p>")


def render(plan: Plan, catalog: Catalog, *, title: str = "migplan plan", gi_ids: GiIds | None = None,
           ids_from: str = "") -> str:
    """The whole page. `gi_ids`: the live GPU instance ids per GPU (from the discovery snapshot the plan was made
    from, `ids_from` naming it), for the exact destroy commands."""
    gpus = _gpus(plan, catalog)
    data = page_data(plan, catalog, gi_ids, ids_from)
    meta = " · ".join(esc(x) for x in _meta(plan))
    ids_note = (f"GPU instance ids from {esc(ids_from)}" if ids_from else
                "GPU instance ids not known here: destroy steps name the instances")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'; '
        'script-src \'unsafe-inline\'; img-src data:">'
        '<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f'<header><h1>{esc(title)}</h1><p class="meta">{meta}</p></header>'
        '<div class="bar">' + _filters(gpus, plan) +
        '<input id="q" type="search" placeholder="search hosts, models, workloads" aria-label="search"> '
        '<label>sort hosts by <select id="sort"><option value="host">name</option>'
        '<option value="changes">changes (actions)</option></select></label> '
        '<button id="open" type="button">expand all</button> <button id="close" type="button">collapse all</button> '
        '<span id="count"></span></div><main>'
        '<noscript><p class="warning">The overview and the summary work without JavaScript; the per-GPU drawings, '
        "commands and the filters need it.</p></noscript>"
        f'<details class="sec" id="s-summary" open><summary><h2>Fleet summary</h2></summary>{_summary(plan)}</details>'
        '<details class="sec" id="s-overview" open><summary><h2>Overview</h2> <span class="meta">one cell per GPU, '
        f"grouped by host; click a cell for its GPU</span></summary>{_legend()}{_overview(gpus)}</details>"
        f"{_moves(plan)}{_listings(plan)}{vgpu_section(plan, catalog)}"
        '<details class="sec" id="s-gpus" open><summary><h2>GPUs by host</h2> <span class="meta">current and target '
        f"layout, nvidia-smi commands ({ids_note}), workloads; a host is drawn when opened</span></summary>"
        f'{_svg_legend()}<div id="hosts"></div></details></main>'
        f'<script id="data" type="application/json">{_json(data)}</script><script>{SCRIPT}</script></body></html>\n')


def _meta(plan: Plan) -> Iterable[str]:
    yield f"{len(plan.gpus)} GPU(s) on {len({g.host for g in plan.gpus})} host(s)"
    if plan.created_at:
        yield f"created {plan.created_at}"
    yield f"planned from {plan.source}"
    yield f"state {plan.fingerprint[:19]}"
