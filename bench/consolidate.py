"""Consolidating a fleet that already runs: GPUs freed per move budget, against the lower bound.

    python -m bench.consolidate [--gpus 512] [--seed 7] [--out bench/results/consolidation.md]

The fleet (seeded, `random.Random(seed)` only): `gpus` A100-SXM4-80GB GPUs, 8 per host, MIG disabled,
each running one workload on the whole GPU, like an inference fleet an operator inherits:

* memory peak: lognormal with median 20 GiB (sigma 0.35), a long tail cut at 45 GiB, at least 2 GiB;
  p50/p95/p99 at 70/90/96% of the peak;
* compute (share of the GPU, low utilisation): p95 lognormal around 0.08 (sigma 0.6), cut to 0.02-0.45,
  p50 = 0.4 x p95, max = 1.5 x p95 (at most 1);
* priorities 1-10.

`propose --consolidate --max-moves B` is planned for B = 0, 10%, 50% and 100% of the workloads (the
default sizing: observed peak + 10%, at least 512 MiB) and the table written: moves used, GPUs freed,
GPUs freeable by the lower bound (LP relaxation of "every workload placed, moves unlimited"), solve time,
the migration order (steps make-before-break / stop-first) and its computation time. One solve per
budget (no curve re-solves: the table is the curve).
"""

from __future__ import annotations

import argparse
import math
import random
import time
from pathlib import Path

from migplan.adapters.solver import PulpSolver
from migplan.catalog import builtin_catalog
from migplan.commands.propose import CONSOLIDATE_GAP_ABS_GPUS
from migplan.model.state import FleetState, GpuState
from migplan.planner import Policy, build_problem, plan_problem
from migplan.profiles import ComputeStats, MemoryStats, Observation, ProfileSet, Workload

MODEL = "A100-SXM4-80GB"
GIB = 1024
FRACTIONS = (0.0, 0.1, 0.5, 1.0)


def _memory(rng: random.Random) -> int:
    peak = 20 * GIB * math.exp(rng.gauss(0.0, 0.35))
    if rng.random() < 0.05:  # the long tail: one in twenty between 30 and 45 GiB
        peak = rng.uniform(30, 45) * GIB
    return int(min(45 * GIB, max(2 * GIB, peak)))


def whole_gpu_fleet(gpus: int, seed: int = 7) -> tuple[FleetState, ProfileSet]:
    """`gpus` MIG-disabled A100-80GB GPUs, each running one workload on the whole GPU."""
    rng = random.Random(seed)
    states, ws = [], []
    for i in range(gpus):
        host, idx = f"node{i // 8:04d}", i % 8
        states.append(GpuState(host=host, index=idx, model=MODEL))
        peak = _memory(rng)
        p95 = min(0.45, max(0.02, 0.08 * math.exp(rng.gauss(0.0, 0.6))))
        mem = MemoryStats(int(peak * 0.7), int(peak * 0.9), int(peak * 0.96), peak)
        comp = ComputeStats(round(p95 * 0.4, 4), round(p95, 4), round(min(1.0, p95 * 1.5), 4))
        ws.append(Workload(name=f"svc-{i:04d}", observed=Observation(host=host, gpu=idx, gpu_model=MODEL),
                           memory=mem, compute=comp, priority=rng.randint(1, 10)))
    return FleetState(tuple(states), source="bench"), ProfileSet(tuple(ws))


def run(gpus: int, seed: int, time_limit: float) -> list[dict[str, object]]:
    state, ps = whole_gpu_fleet(gpus, seed)
    cat = builtin_catalog()
    rows: list[dict[str, object]] = []
    for frac in FRACTIONS:
        budget = int(round(frac * gpus))
        problem = build_problem(state, ps, cat, Policy(consolidate=True, max_moves=budget))
        t0 = time.perf_counter()
        # the solver settings `propose --consolidate` uses by default (commands.propose.planner_solver):
        # relative gap 0.01%, and stop within just under half a GPU's weight of the bound
        solver = PulpSolver(time_limit=time_limit, gap=0.0001,
                            gap_abs=CONSOLIDATE_GAP_ABS_GPUS * problem.policy.weights.gpu)
        p = plan_problem(problem, solver, curve=False)
        wall = time.perf_counter() - t0
        c = p.consolidation
        assert c is not None
        rows.append({"budget": budget, "frac": frac, "moves": c.moves, "freed": c.gpus_freed,
                     "freeable": c.gpus_freeable, "used": c.gpus_used, "status": p.solve.status,
                     "solve_s": p.solve.time_s, "wall_s": wall,
                     "mbb": sum(1 for m in p.migrations if m.make_before_break),
                     "stop": sum(1 for m in p.migrations if m.stop_first),
                     "unplaced": p.summary.workloads_unplaced,
                     # the solver's distance to its own bound, in objective units (one GPU = weights.gpu)
                     "gap": None if p.solve.objective is None or p.solve.bound is None
                     else round(p.solve.objective - p.solve.bound, 1)})
        print(f"budget {budget}: {c.moves} moves, {c.gpus_freed} freed of {c.gpus_freeable} freeable, "
              f"{p.solve.status}, solve {p.solve.time_s:.2f}s, plan {wall:.2f}s", flush=True)
    return rows


def table(rows: list[dict[str, object]], gpus: int, seed: int) -> str:
    head = (f"## Consolidation ({gpus} whole-GPU workloads on {gpus} MIG-off {MODEL}, seed {seed})\n\n"
            "`python -m bench.consolidate`: memory peak median ~20 GiB (lognormal, tail to 45 GiB), compute p95 "
            "~0.08 of the GPU; sized from the peak + 10% (at least 512 MiB). Freeable = GPUs in use - the GPU "
            "lower bound (LP relaxation, every workload placed, moves unlimited). Plan time includes the "
            "lower bound and the migration order. Gap: the solver's distance to its own bound in objective "
            "units (a GPU weighs 100, a move 5-10 by priority); `feasible` = stopped at the early stop (just "
            "under half a GPU) or the time limit, not proven optimal.\n\n"
            "| move budget | moves | GPUs freed | freeable (bound) | freed / freeable | gap | GPUs used "
            "| left out | make-before-break / stop-first | solver | solve s | plan s |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        freeable = r["freeable"]
        share = f"{100 * int(r['freed']) / int(freeable):.1f}%" if isinstance(freeable, int) and freeable else "n/a"
        lines.append(f"| {r['budget']} ({100 * float(r['frac']):.0f}%) | {r['moves']} | {r['freed']} | {freeable} "
                     f"| {share} | {r['gap'] if r['gap'] is not None else 'n/a'} | {r['used']} | {r['unplaced']} "
                     f"| {r['mbb']} / {r['stop']} | {r['status']} "
                     f"| {float(r['solve_s']):.2f} | {float(r['wall_s']):.2f} |")
    return head + "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=512)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--time-limit", type=float, default=45.0)
    ap.add_argument("--out", default="bench/results/consolidation.md")
    a = ap.parse_args()
    rows = run(a.gpus, a.seed, a.time_limit)
    text = table(rows, a.gpus, a.seed)
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
