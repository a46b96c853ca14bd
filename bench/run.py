"""Run the benchmark suite and write bench/RESULTS.md:  python -m bench.run [--quick] [--anti] [--out PATH].

Per instance: GPUs used, placed (priority-weighted) demand, churn (GPUs whose layout changes) and time
for migplan and each re-implemented baseline, the lower bound, and the ratios. Nothing here is asserted.

Anti-affinity at scale (`ANTI_SUITE`, its own section; `--anti` runs only that section and replaces it in
the existing file): each instance planned in a child process of its own (`--anti-one`), which reports
model build and solve time, variables, rows, nonzeros, the peak RSS of the planner and of CBC, GPUs used
against the lower bound, and the anti-affinity members left out; then the same instance without the sets.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.baselines import BASELINES
from bench.generate import MIXES, Spec, change_demand, generate
from bench.topics import with_topics
from migplan.adapters.solver import PulpSolver
from migplan.catalog import builtin_catalog
from migplan.model.state import FleetState
from migplan.planner import Plan, Policy, Weights, build_problem, plan_problem
from migplan.planner.formulation import formulate
from migplan.planner.groups import split
from migplan.planner.planner import gpu_lower_bound
from migplan.planner.replay import applied

CHURN_FIRST = Weights(unplaced=100000, disrupt=100, gpu=1, change=1000, fragment=0, waste=0)


@dataclass
class Row:
    spec: Spec
    lb: int | None
    mig: dict[str, float | int | None]
    base: dict[str, dict[str, Any]] = field(default_factory=dict)  # baseline -> gpus, value, churn, ..., config
    min_churn: int | None = None
    min_churn_gpus: int | None = None  # GPUs the churn-first plan uses: the price of the fewest changes


def _empty(state: FleetState) -> FleetState:
    return FleetState(tuple(dataclasses.replace(g, mig_enabled=False, layout=None, busy=()) for g in state.gpus))


def _solver(spec: Spec) -> PulpSolver:
    return PulpSolver(time_limit=25 if spec.gpus > 2000 else 20, gap=0.0001, gap_abs=0.99 * Weights().gpu)


def _migplan(state, ps, policy, spec: Spec) -> tuple[Plan, float]:
    cat = builtin_catalog()
    t0 = time.perf_counter()
    prob = build_problem(state, ps, cat, policy)
    p = plan_problem(prob, _solver(spec), lower_bound=False)
    return p, time.perf_counter() - t0


def run_one(spec: Spec) -> Row:
    cat = builtin_catalog()
    state, ps = generate(spec)
    policy = Policy()
    if spec.state == "previous":
        first, _ = _migplan(state, ps, policy, spec)
        state, ps = applied(state, ps, first)
        ps = change_demand(ps, 0.10, spec.seed)
        policy = Policy(allow_disrupt=True)
    p, secs = _migplan(state, ps, policy, spec)
    fresh = build_problem(_empty(state), ps, cat, Policy())
    left = sum(1 for w in p.workloads if not w.on_gpu)  # kept at risk is not left out
    if left == 0:  # fewest GPUs for everything, from scratch
        lb = gpu_lower_bound(fresh, split(fresh), PulpSolver(time_limit=60))
    else:  # fewest GPUs placing what migplan placed (the same per-class left-out counts)
        lb = plan_problem(build_problem(state, ps, cat, policy), _solver(spec)).summary.gpus_lower_bound
    items = {i.name: i for i in fresh.items}
    s = p.summary
    row = Row(spec, lb, {"gpus": s.gpus_used, "value": s.placed_value, "churn": s.gpus_changed,
                         "time": round(secs, 2), "gap": p.solve.gap, "unplaced": s.workloads_unplaced,
                         "status": p.solve.status, "disrupted": s.workloads_disrupted})
    problem = build_problem(state, ps, cat, Policy())
    running = {i.name: i for i in problem.items}
    for name, fn in BASELINES.items():
        t0 = time.perf_counter()
        r = fn(problem)
        row.base[name] = {"gpus": r.used(), "value": round(r.value(items), 4), "churn": r.churn(),
                          "disrupted": r.disrupted(running),
                          "time": round(time.perf_counter() - t0, 2), "config": r.name}
    if spec.state == "previous":
        churn_pol = dataclasses.replace(policy, weights=CHURN_FIRST)
        q, _ = _migplan(state, ps, churn_pol, spec)
        row.min_churn = q.summary.gpus_changed
        row.min_churn_gpus = q.summary.gpus_used
    return row


def suite(quick: bool) -> list[Spec]:
    if quick:
        return [Spec(8, 30, "single", "small"), Spec(16, 60, "mixed", "bimodal", "random"),
                Spec(16, 60, "single", "small", "previous")]
    specs = []
    for gpus, wls in ((8, 30), (32, 120), (128, 500), (512, 2000)):
        for models in ("single", "mixed"):
            for mix in MIXES:
                n = {"small": wls, "inference": wls * 2 // 5, "bimodal": wls // 2, "large": wls // 3}[mix]
                for state in ("empty", "random"):
                    specs.append(Spec(gpus, max(10, n), models, mix, state))
                if gpus in (32, 128, 512) and models == "single":
                    specs.append(Spec(gpus, max(10, n), models, mix, "previous"))
    for models in ("single", "mixed"):
        for mix in MIXES:
            n = {"small": 4000, "inference": 1600, "bimodal": 2000, "large": 1300}[mix]
            specs.append(Spec(1024, n, models, mix))
    specs.append(Spec(10240, 40000, "single", "small"))
    specs.append(Spec(10240, 40000, "mixed", "small"))
    return specs


def _worse(row: Row) -> list[str]:
    """Baselines migplan loses to: less placed value, or the same value on more GPUs."""
    out = []
    for name, b in row.base.items():
        mv, bv = float(row.mig["value"] or 0), b["value"]
        if mv < bv - 1e-6 or (abs(mv - bv) <= 1e-6 and int(row.mig["gpus"] or 0) > b["gpus"]):
            out.append(name)
    return out


def _worse_by_objective(row: Row) -> list[str]:
    """Baselines migplan loses to in the objective's own order: placed demand, then (re-plans) running
    workloads disrupted, then GPUs used."""
    replan = row.spec.state == "previous"

    def key(v: float, disrupted: int, gpus: int) -> tuple[float, int, int]:
        return (-round(v, 6), disrupted if replan else 0, gpus)
    mine = key(float(row.mig["value"] or 0), int(row.mig["disrupted"] or 0), int(row.mig["gpus"] or 0))
    return [n for n, b in row.base.items() if key(b["value"], int(b["disrupted"]), int(b["gpus"])) < mine]


# --- anti-affinity at scale ---------------------------------------------------------------------

ANTI_SUITE: tuple[tuple[Spec, str], ...] = (
    (Spec(1024, 4000, "single", "small", "empty", anti=1000), "gpu"),  # target: <= 10 s, <= 1 GB
    (Spec(480, 3000, "single", "small", "random", anti=1000), "gpu"),  # the review's case
    (Spec(40, 300, "single", "small", "random", anti=100), "gpu"),  # the review's small case
    (Spec(1024, 4000, "mixed", "small", "empty", anti=1000), "gpu"),
    (Spec(480, 3000, "single", "small", "random", anti=1000), "host"),
)
ANTI_QUICK: tuple[tuple[Spec, str], ...] = ((Spec(16, 60, "single", "small", "random", anti=20), "gpu"),)
ANTI_TARGET = (1024, 10.0, 1024.0)  # GPUs, seconds, MB
ANTI_MEMORY_CAP = 8 << 30  # address space of each child run: an exploding model stops there
ANTI_HEADING = "## Anti-affinity at scale"
# The previous formulation (one y per anti-affine class, GPU group and profile; one Hall row per set, group
# and profile subset with every pattern's x in it), measured on the same instances before the change (its
# model size, then the whole plan_problem under the same solver settings: time, peak RSS, GPUs used).
ANTI_BEFORE = {
    "1024g-4000w-single-small-empty-aa1000-s1/gpu": "6,092 / 13,307 / 957,489; 15.9 s, 714 MB, 674 GPUs",
    "480g-3000w-single-small-random-aa1000-s1/gpu": "1,310,310 / 3,491,821 / 269,885,551; not run: building "
                                                    "it runs out of a 10 GB address space (review: killed at "
                                                    "24 GB after 7.5 min)",
    "40g-300w-single-small-random-aa100-s1/gpu": "19,180 / 43,127 / 3,319,153; 31 s, 1.5 GB, 40 GPUs",
    "1024g-4000w-mixed-small-empty-aa1000-s1/gpu": "20,020 / 41,779 / 3,054,080; no plan (not solved in 20 s), "
                                                   "2.1 GB",
    "480g-3000w-single-small-random-aa1000-s1/host": "1,925,162 / 16,145 / 7,753,163; not run",
}


def _mb(usage: Any) -> float:
    return round(usage.ru_maxrss / 1024, 1)  # KiB on Linux


def anti_one(spec: Spec, scope: str) -> dict[str, Any]:
    """One planner run, in this process: what the anti-affinity section reports."""
    state, ps = generate(spec)
    policy = Policy(anti_affinity_scope=scope)
    t0 = time.perf_counter()
    prob = build_problem(state, ps, builtin_catalog(), policy)
    t1 = time.perf_counter()
    sp = split(prob)
    f = formulate(prob, sp)
    t2 = time.perf_counter()
    models = []
    plan = plan_problem(prob, _solver(spec), progress=lambda m: models.append(m) if m.startswith("model:") else None)
    t3 = time.perf_counter()
    members = {w.name: w.anti_affinity for w in ps.workloads if w.anti_affinity}
    where: dict[str, list[object]] = defaultdict(list)
    for w in plan.workloads:
        if w.name in members and w.status == "placed":
            where[members[w.name]].append(w.host if scope == "host" else (w.host, w.gpu))
    s = plan.summary
    return {"name": spec.name, "scope": scope, "sets": len(set(members.values())), "members": len(members),
            "build_s": round(t2 - t1, 2), "solve_s": round(plan.solve.time_s, 2),
            "total_s": round((t1 - t0) + (t3 - t2), 2),  # right-sizing + plan_problem (not the extra formulate)
            "variables": len(f.milp.names), "rows": len(f.milp.rows), "nonzeros": f.milp.nonzeros,
            "rounds": len(models), "rss_mb": _mb(resource.getrusage(resource.RUSAGE_SELF)),
            "cbc_mb": _mb(resource.getrusage(resource.RUSAGE_CHILDREN)), "gpus": s.gpus_used,
            "lb": s.gpus_lower_bound, "status": plan.solve.status, "unplaced": s.workloads_unplaced,
            "members_left": sum(1 for w in plan.workloads if w.name in members and w.status != "placed"),
            "spread": all(len(v) == len(set(v)) for v in where.values())}


def run_anti(spec: Spec, scope: str, timeout: float = 600) -> dict[str, Any]:
    """`anti_one` in a child process (a clean peak RSS, and a bound on time and memory)."""
    cmd = [sys.executable, "-m", "bench.run", "--anti-one", json.dumps(dataclasses.asdict(spec)), "--scope", scope]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        out = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"name": spec.name, "scope": scope, "error": f"timed out after {timeout:.0f} s"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        tail = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return {"name": spec.name, "scope": scope, "error": f"exit {out.returncode}: {tail[:200]}"}
    return dict(json.loads(lines[-1]))


def anti_rows(quick: bool = False) -> list[dict[str, Any]]:
    rows = []
    for spec, scope in ANTI_QUICK if quick else ANTI_SUITE:
        row = run_anti(spec, scope)
        row["plain"] = run_anti(dataclasses.replace(spec, anti=0), scope)
        print(f"{spec.name} ({scope}): " + (row.get("error") or f"{row['total_s']} s, {row['variables']} variables, "
              f"{row['rss_mb']} / {row['cbc_mb']} MB, GPUs {row['gpus']} (LB {row['lb']}), "
              f"members left out {row['members_left']}"), file=sys.stderr, flush=True)
        rows.append(row)
    return rows


def render_anti(rows: list[dict[str, Any]]) -> str:
    lines = [ANTI_HEADING, "",
             "`python -m bench.run --anti` (this section only). Each run is a child process of its own (address "
             f"space capped at {ANTI_MEMORY_CAP >> 30} GB): model build (aggregation and formulation) and solve "
             "time, total = right-sizing + the whole `plan_problem` (aggregation, model, solve, mapping, lower "
             "bound, validation), the model's size, the peak RSS of the planner process and of CBC (its child; "
             "the figure includes the planner pages it was forked with), GPUs used and the lower bound, and how "
             "many anti-affinity "
             "members (and workloads in all) are left out. Sets of 2-8 members drawn from the workloads of the "
             "same instance without anti-affinity, which the last column plans for comparison. `rounds` > 1: "
             "the mapping could not spread a set as counted and the sets were planned per GPU group again. "
             "Every plan passed the validator (members of a set on distinct GPUs, or hosts).", "",
             "| instance | scope | sets / members | variables / rows / nonzeros | before: variables / rows / "
             "nonzeros; run | build s | solve s | total s | RSS planner / CBC MB | GPUs (LB) | members left out | "
             "all left out | rounds | without the sets: total s / GPUs / left out |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        before = ANTI_BEFORE.get(f"{r['name']}/{r['scope']}", "-")
        p = r.get("plain", {})
        plain = "-" if "error" in p or not p else f"{p['total_s']} / {p['gpus']} / {p['unplaced']}"
        if "error" in r:
            lines.append(f"| {r['name']} | {r['scope']} | error: {r['error']} | | {before} |" + " |" * 8
                         + f" {plain} |")
            continue
        lines.append(f"| {r['name']} | {r['scope']} | {r['sets']} / {r['members']} | {r['variables']:,} / "
                     f"{r['rows']:,} / {r['nonzeros']:,} | {before} | {r['build_s']} | {r['solve_s']} | "
                     f"{r['total_s']} | {r['rss_mb']:.0f} / {r['cbc_mb']:.0f} | {r['gpus']} ({r['lb']}) | "
                     f"{r['members_left']} | {r['unplaced']} | {r['rounds']} | {plain} |")
    done = [r for r in rows if "error" not in r and "error" not in r.get("plain", {"error": 1})]
    same = sum(1 for r in done if r["unplaced"] == r["plain"]["unplaced"] and r["gpus"] == r["plain"]["gpus"])
    lines += ["", f"With the sets, GPUs used and workloads left out equal those of the same instance without them on "
              f"{same}/{len(done)} instances (the 480- and 40-GPU fleets cannot hold all their workloads; members "
              "left out are reported with the reason naming their set)."]
    gpus, secs, mb = ANTI_TARGET
    for r in rows:
        if "error" not in r and r["name"].startswith(f"{gpus}g-") and r["scope"] == "gpu":
            ok = r["total_s"] <= secs and max(r["rss_mb"], r["cbc_mb"]) <= mb
            lines += ["", f"Target {gpus} GPUs / 4000 workloads, 25% in sets: at most {secs:g} s and {mb / 1024:g} GB; "
                      f"{r['name']}: {r['total_s']} s, {max(r['rss_mb'], r['cbc_mb']):.0f} MB peak: "
                      + ("met." if ok else "NOT met.")]
            break
    return "\n".join(lines) + "\n"


def splice(text: str, section: str) -> str:
    """`text` with its anti-affinity section replaced by `section` (inserted before "## Per instance")."""
    start = text.find(ANTI_HEADING)
    if start >= 0:
        end = text.find("\n## ", start + len(ANTI_HEADING))
        return text[:start] + section + ("\n" + text[end + 1:] if end >= 0 else "")
    at = text.find("## Per instance")
    return text[:at] + section + "\n" + text[at:] if at >= 0 else text.rstrip("\n") + "\n\n" + section


def render(rows: list[Row], wall: float, anti: list[dict[str, Any]] | None = None) -> str:
    with_lb = [r for r in rows if r.lb is not None and r.spec.state != "previous"]
    at_lb = sum(1 for r in with_lb if r.mig["gpus"] == r.lb)
    near = sum(1 for r in with_lb if int(r.mig["gpus"] or 0) <= r.lb + 1)  # type: ignore[operator]
    losses = [(r.spec.name, _worse(r)) for r in rows if _worse(r)]
    churn = [(r.spec.name, r.mig["churn"], r.min_churn) for r in rows if r.min_churn is not None]
    ratios = [int(c or 0) / max(1, m or 0) for _, c, m in churn]
    within = sum(1 for x in ratios if x <= 1.2)
    saved = sum(int(r.min_churn_gpus or 0) - int(r.mig["gpus"] or 0) for r in rows if r.min_churn is not None)
    extra = sum(int(r.mig["churn"] or 0) - int(r.min_churn or 0) for r in rows if r.min_churn is not None)
    obj_losses = [(r.spec.name, _worse_by_objective(r)) for r in rows if _worse_by_objective(r)]
    big = [r for r in rows if r.spec.gpus >= 1024]
    lines = ["# migplan benchmark results", "",
             "Generated by `python -m bench.run` (seeded; see bench/README.md). Machine: "
             f"{os.cpu_count()} CPUs, CBC from PuLP, single thread. Suite wall time {wall:.0f} s.", "",
             "Baselines are re-implementations of the documented behaviour of other tools (bench/baselines.py), "
             "not the tools themselves. All use migplan's right-sizing, so only packing differs.", "",
             "## Summary", "",
             f"- instances: {len(rows)}; compared with the lower bound (all but the churn scenario): {len(with_lb)}",
             f"- GPUs used = lower bound: {at_lb}/{len(with_lb)} ({at_lb / max(1, len(with_lb)):.0%}); "
             f"<= lower bound + 1: {near}/{len(with_lb)} ({near / max(1, len(with_lb)):.0%})",
             f"- instances where a baseline beats migplan (placed demand, then GPUs): {len(losses)}"
             + (f" ({'; '.join(f'{n}: {b}' for n, b in losses[:10])})" if losses else ""),
             f"- ... in the objective's own order (placed demand, then running workloads disrupted in re-plans, "
             f"then GPUs): "
             f"{len(obj_losses)}" + (f" ({'; '.join(f'{n}: {b}' for n, b in obj_losses[:10])})" if obj_losses else ""),
             "- re-plan after 10% demand change (allow-disrupt): GPUs reconfigured / fewest possible: "
             + (f"max {max(ratios):.2f}, mean {sum(ratios) / len(ratios):.2f}, within 1.2x on {within}/{len(ratios)} "
                f"instances; over all re-plans migplan reconfigures {extra} GPUs more than the churn-first plans "
                f"and uses {saved} GPUs fewer (default weights rank GPUs used above layout changes)"
                if ratios else "n/a"),
             ]
    for r in big:
        lines.append(f"- {r.spec.name}: migplan {r.mig['time']} s, gap {_pct(r.mig['gap'])}, "
                     f"GPUs {r.mig['gpus']} (LB {r.lb})")
    if anti:
        lines += ["", render_anti(anti).rstrip("\n")]
    lines += ["", "## Per instance", "",
              "GPUs used / placed value / churn (GPUs changed) / seconds (re-plans add: running workloads moved "
              "or dropped). `LB` = ceil(LP relaxation of the pattern "
              "model: min GPUs placing everything, or, when the fleet cannot hold everything, placing as many "
              "per workload class as migplan placed).", "",
              "`min churn` (re-plans only) = fewest GPUs reconfigured (same model, churn weighted first) and, in "
              "brackets, the GPUs that plan uses. `uniform` names, in brackets, the mig-parted configuration role "
              "that did best (bench/baselines.py: every `all-<profile>` and `all-balanced` label mig-parted ships, "
              "one label per GPU model).", "",
              "| instance | LB | migplan | gap | x LB | " + " | ".join(BASELINES) + " | min churn |",
              "|---|---|---|---|---|" + "---|" * len(BASELINES) + "---|"]
    for r in rows:
        m = r.mig
        ratio = f"{int(m['gpus'] or 0) / r.lb:.3f}" if r.lb else "-"
        replan = r.spec.state == "previous"
        cells = [f"{b['gpus']} / {b['value']:g} / {b['churn']} / {b['time']}"
                 + (f" / moved {b['disrupted']}" if replan else "")
                 + (f" ({str(b['config']).removeprefix('uniform-')})" if name == "uniform" and b.get("config") else "")
                 for name, b in r.base.items()]
        lines.append(f"| {r.spec.name} | {r.lb if r.lb is not None else '-'} | {m['gpus']} / {m['value']:g} / "
                     f"{m['churn']} / {m['time']}" + (f" / moved {m['disrupted']}" if replan else "")
                     + f" | {_pct(m['gap'])} | {ratio} | " + " | ".join(cells)
                     + (f" | {r.min_churn} ({r.min_churn_gpus} GPUs) |" if r.min_churn is not None else " |  |"))
    return "\n".join(lines) + "\n"


def _pct(v: object) -> str:
    return f"{float(v):.2%}" if isinstance(v, (int, float)) else "n/a"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="three tiny instances (smoke test)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md"))
    ap.add_argument("--max-gpus", type=int, default=None, help="skip instances larger than this")
    ap.add_argument("--anti", action="store_true", help="only the anti-affinity section, replaced in --out")
    ap.add_argument("--anti-one", metavar="SPEC_JSON", help=argparse.SUPPRESS)  # one child run, JSON on stdout
    ap.add_argument("--scope", default="gpu", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.anti_one:
        resource.setrlimit(resource.RLIMIT_AS, (ANTI_MEMORY_CAP, ANTI_MEMORY_CAP))
        print(json.dumps(anti_one(Spec(**json.loads(args.anti_one)), args.scope)))
        return 0
    if args.anti:
        old = ""
        if os.path.exists(args.out):
            with open(args.out, encoding="utf-8") as fh:
                old = fh.read()
        _write(args.out, splice(old, render_anti(anti_rows(args.quick))))
        return 0
    t0 = time.perf_counter()
    rows = []
    for spec in suite(args.quick):
        if args.max_gpus and spec.gpus > args.max_gpus:
            continue
        row = run_one(spec)
        print(f"{spec.name}: migplan {row.mig['gpus']} GPUs (LB {row.lb}) in {row.mig['time']}s; "
              + ", ".join(f"{k} {v['gpus']}" for k, v in row.base.items()), file=sys.stderr, flush=True)
        rows.append(row)
    anti = anti_rows(args.quick)
    previous = ""
    if os.path.exists(args.out):
        with open(args.out, encoding="utf-8") as fh:
            previous = fh.read()
    # the topic sections (bench/results/*.md) are kept: each is written by its own script, not by this run
    _write(args.out, with_topics(render(rows, time.perf_counter() - t0, anti), previous))
    return 0


def _write(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
