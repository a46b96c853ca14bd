"""The sizing sweep as one self-contained HTML page, its frontier drawn as SVG by this module (pure: the sweep's
document in, a string out; `backtest --sweep --report FILE`).

The picture: one point per rule, x the GPUs it costs as a multiple of one whole GPU per workload (mean over the
splits), y the share of workloads out of memory (mean over the splits), a whisker up to the worst split; the
rules on the frontier joined by a line, the target as a dashed line, the recommended rule ringed and named. Rules
are coloured by family (`max+PCT%`, `max+Kspread`, ...). Every figure is from the document; every text from it
(rule names come from the command line) is HTML-escaped. Nothing is loaded from anywhere and there is no script (a
Content-Security-Policy allows only the inline style), so the page works from a file or a mail attachment.
"""

from __future__ import annotations

import html
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

W, H = 760, 440
LEFT, RIGHT, TOP, BOTTOM = 72, 24, 20, 52
COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f")
CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1100px;padding:0 16px 40px;color:#222}
h1{font-size:20px;margin:18px 0 4px}h2{font-size:16px;margin:22px 0 8px}.meta{color:#666}
table{border-collapse:collapse;margin:8px 0}th,td{padding:3px 8px;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child{text-align:left}tr.front td{font-weight:600}tr.rec td{background:#fff3c4}
.warning{background:#fde8e8;border-left:4px solid #d62728;padding:6px 10px}
.ok{background:#e8f5e9;border-left:4px solid #2ca02c;padding:6px 10px}
svg text{font:11px system-ui,sans-serif;fill:#333}svg .axis{stroke:#333}svg .grid{stroke:#eee}
svg .front{fill:none;stroke:#333;stroke-width:1.5}svg .target{stroke:#d62728;stroke-dasharray:5 4}
svg .whisker{stroke:#999}svg .rec{fill:none;stroke:#000;stroke-width:2}
"""


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def _pct(share: float) -> str:
    return f"{round(share * 100, 2):g}%"


def _nice(span: float) -> float:
    """A tick step of 1, 2 or 5 x 10^k giving about five ticks over `span`."""
    raw = max(span, 1e-9) / 5
    mag = 10.0 ** math.floor(math.log10(raw))
    return float(next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw))


def _ticks(lo: float, hi: float) -> list[float]:
    step = _nice(hi - lo)
    start = math.ceil(lo / step - 1e-9) * step
    return [round(start + i * step, 10) for i in range(int((hi - start) / step + 1e-9) + 1)]


def frontier_svg(rules: Sequence[Mapping[str, Any]], target: float, recommended: str | None) -> str:
    """The frontier picture of a sweep's `rules` (each with rule, family, frontier, oom_rate and whole_gpu_ratio
    {mean, worst})."""
    if not rules:
        return ""
    xs = [float(r["whole_gpu_ratio"]["mean"]) for r in rules]
    ys = [float(r["oom_rate"]["mean"]) * 100 for r in rules]
    worst = [float(r["oom_rate"]["worst"]) * 100 for r in rules]
    x0, x1 = min(xs), max(xs)
    pad = max((x1 - x0) * 0.06, 0.01)
    x0, x1 = max(0.0, x0 - pad), x1 + pad
    y1 = max([*worst, target * 100 * 1.5, 0.5]) * 1.08
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def px(x: float) -> float:
        return round(LEFT + (x - x0) / (x1 - x0) * pw, 1)

    def py(y: float) -> float:
        return round(TOP + ph - y / y1 * ph, 1)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}" role="img" '
           'aria-label="share of workloads out of memory against GPUs, one point per rule">']
    for t in _ticks(x0, x1):
        out.append(f'<line class="grid" x1="{px(t)}" y1="{TOP}" x2="{px(t)}" y2="{TOP + ph}"/>'
                   f'<text x="{px(t)}" y="{TOP + ph + 16}" text-anchor="middle">{t:g}</text>')
    for t in _ticks(0.0, y1):
        out.append(f'<line class="grid" x1="{LEFT}" y1="{py(t)}" x2="{LEFT + pw}" y2="{py(t)}"/>'
                   f'<text x="{LEFT - 6}" y="{py(t) + 4}" text-anchor="end">{t:g}%</text>')
    out.append(f'<line class="axis" x1="{LEFT}" y1="{TOP + ph}" x2="{LEFT + pw}" y2="{TOP + ph}"/>'
               f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + ph}"/>'
               f'<text x="{LEFT + pw / 2}" y="{H - 12}" text-anchor="middle">GPUs as a multiple of one whole GPU per '
               'workload (mean over the splits)</text>'
               f'<text transform="translate(16 {TOP + ph / 2}) rotate(-90)" text-anchor="middle">workloads out of '
               'memory (mean; whisker: worst split)</text>')
    out.append(f'<line class="target" x1="{LEFT}" y1="{py(target * 100)}" x2="{LEFT + pw}" y2="{py(target * 100)}"/>'
               f'<text x="{LEFT + pw - 4}" y="{py(target * 100) - 4}" text-anchor="end">target {esc(_pct(target))}'
               '</text>')
    front = sorted((x, y) for r, x, y in zip(rules, xs, ys, strict=True) if r.get("frontier"))
    if len(front) > 1:
        out.append('<polyline class="front" points="' + " ".join(f"{px(x)},{py(y)}" for x, y in front) + '"/>')
    families = list(dict.fromkeys(str(r["family"]) for r in rules))
    for r, x, y, w in zip(rules, xs, ys, worst, strict=True):
        colour = COLOURS[families.index(str(r["family"])) % len(COLOURS)]
        tip = (f'{r["rule"]}: {_pct(y / 100)} of workloads out of memory (worst {_pct(w / 100)}), {x:.3f}x whole '
               f"GPUs{', on the frontier' if r.get('frontier') else ''}")
        if w > y:
            out.append(f'<line class="whisker" x1="{px(x)}" y1="{py(y)}" x2="{px(x)}" y2="{py(w)}"/>')
        stroke = ' stroke="#000"' if r.get("frontier") else ""
        out.append(f'<circle cx="{px(x)}" cy="{py(y)}" r="4.5" fill="{colour}"{stroke}><title>{esc(tip)}</title>'
                   "</circle>")
        if r.get("frontier") or r["rule"] == recommended:
            out.append(f'<text x="{px(x) + 7}" y="{py(y) - 6}">{esc(r["rule"])}</text>')
        if r["rule"] == recommended:
            out.append(f'<circle class="rec" cx="{px(x)}" cy="{py(y)}" r="9"/>')
    for i, fam in enumerate(families):
        lx, ly = LEFT + pw - 170, TOP + 14 + 16 * i
        out.append(f'<circle cx="{lx}" cy="{ly - 4}" r="4.5" fill="{COLOURS[i % len(COLOURS)]}"/>'
                   f'<text x="{lx + 9}" y="{ly}">{esc(fam)}</text>')
    out.append("</svg>")
    return "".join(out)


def _n(v: float) -> str:
    return f"{round(float(v), 2):g}"


def _rows(rules: Iterable[Mapping[str, Any]], recommended: str | None) -> str:
    out = []
    for r in sorted(rules, key=lambda r: (r["whole_gpu_ratio"]["mean"], r["oom_rate"]["mean"])):
        cls = "rec" if r["rule"] == recommended else "front" if r.get("frontier") else ""
        b = r.get("burst") or {}
        burst = (f'{b.get("peak", 0)} / {b.get("independent", 0)}' + (" correlated" if b.get("correlated") else "")
                 if b else "")
        out.append(f'<tr class="{cls}"><td>{esc(r["rule"])}</td><td>{esc(r["headroom_rule"])}</td>'
                   f'<td>{_n(r["oom_workloads"]["mean"])} ({_n(r["oom_workloads"]["worst"])})</td>'
                   f'<td>{_pct(r["oom_rate"]["mean"])} ({_pct(r["oom_rate"]["worst"])})</td>'
                   f'<td>{_n(r["oom_minutes"]["mean"])} ({_n(r["oom_minutes"]["worst"])})</td>'
                   f'<td>{_n(r["gpus"]["mean"])} ({_n(r["gpus"]["worst"])})</td>'
                   f'<td>{r["whole_gpu_ratio"]["mean"]:.3f} ({r["whole_gpu_ratio"]["worst"]:.3f})</td>'
                   f'<td>{"yes" if r.get("frontier") else ""}</td><td>{esc(burst)}</td></tr>')
    return "".join(out)


def sweep_page(doc: Mapping[str, Any], *, title: str = "migplan sizing sweep", source: str = "",
               iso: Any = str) -> str:
    """The page of a sweep document (`Sweep.to_dict()`); `iso` formats unix times."""
    rules = list(doc.get("rules", []))
    rec = doc.get("recommended")
    target = float(doc.get("target_oom", 0.01))
    splits = doc.get("splits", [])
    days = f'--train {float(doc["train_s"]) / 86400:g}d, --test {float(doc["test_s"]) / 86400:g}d'
    meta = f"{len(rules)} rules at {len(splits)} split point(s) ({days})" + (f" of {source}" if source else "")
    verdict = (f'<p class="ok">Recommended: <b>{esc(rec)}</b>: {esc(doc.get("reason", ""))}</p>' if rec else
               f'<p class="warning">No recommendation: {esc(doc.get("reason", ""))}</p>')
    bursts = ""
    by_rule = {r["rule"]: r for r in rules}
    for name in doc.get("correlated_bursts", [])[:5]:
        b = by_rule[name]["burst"]
        bursts += (f'<p class="warning">Correlated bursts under {esc(name)}: {b["peak"]} workloads out of memory in '
                   f'the same {b["bucket_s"] / 60:g} minutes (at {esc(iso(b["peak_at"]))}); independent OOMs at the '
                   f'same rates give at most {b["independent"]}. No per-workload rule foresees these.</p>')
    split_rows = "".join(
        f'<tr><td>{s["index"] + 1}</td><td>{esc(iso(s["train"]["start"]))} .. {esc(iso(s["train"]["end"]))}</td>'
        f'<td>{esc(iso(s["test"]["start"]))} .. {esc(iso(s["test"]["end"]))}</td><td>{s["workloads"]}</td>'
        f'<td>{s["replayed"]}</td><td>{s["untrained"]}</td></tr>' for s in splits)
    notes = "".join(f"<li>{esc(n)}</li>" for n in doc.get("notes", [])[:50])
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'">'
        '<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f'<h1>{esc(title)}</h1><p class="meta">{esc(meta)}</p>{verdict}{bursts}'
        f"<h2>The frontier: workloads out of memory against GPUs</h2>"
        f"{frontier_svg(rules, target, rec)}"
        "<h2>Rules</h2><table><thead><tr><th>rule</th><th>headroom</th><th>OOM workloads mean (worst)</th>"
        "<th>OOM share mean (worst)</th><th>OOM minutes mean (worst)</th><th>GPUs mean (worst)</th>"
        "<th>x whole GPUs mean (worst)</th><th>frontier</th><th>burst peak / independent</th></tr></thead>"
        f"<tbody>{_rows(rules, rec)}</tbody></table>"
        "<h2>Split points</h2><table><thead><tr><th>split</th><th>training window</th><th>test window</th>"
        f"<th>workloads sized</th><th>replayed</th><th>not sized</th></tr></thead><tbody>{split_rows}</tbody></table>"
        + (f"<h2>Notes</h2><ul>{notes}</ul>" if notes else "") + "</body></html>\n")
