"""Sizing rules compared on generated histories:  python -m bench.backtest [--workloads 60] [--seed 1].

Generates, seeded, 14 days of one sample a minute per workload on A100-SXM4-80GB, in four shapes:

* steady: a flat level with noise;
* growth: memory grows linearly, 2-12% a week (a cache or a model that gets bigger);
* spikes: a flat level plus rare spikes of 10-40% (about 1 sample in 2000: long prompts, batch peaks);
* daily: a daily cycle of 20-50% with noise (traffic by hour of day).

Each is backtested (`migplan.history.backtest`) with a 7-day training and a 7-day test window for
max+10%, max+25%, p99+10%, p95+10% and p50+25%, through the real planner (CBC) on one GPU per
workload, and the totals printed as a markdown table per shape and for all together. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from migplan.adapters.solver import PulpSolver
from migplan.catalog import builtin_catalog
from migplan.history.backtest import backtest, parse_rule
from migplan.history.rollup import Window
from migplan.history.samples import Place, Sample

MODEL = "A100-SXM4-80GB"
T0 = 1_790_000_000.0
DAY = 86_400.0
MINUTES = 14 * 1440
RULES = ("max+10%", "max+25%", "p99+10%", "p95+10%", "p50+25%")
SHAPES = ("steady", "growth", "spikes", "daily")


def series(shape: str, rnd: random.Random) -> list[tuple[float, float]]:
    """(memory MiB, util %) per minute for 14 days."""
    level = math.exp(rnd.uniform(math.log(2_000), math.log(40_000)))
    util = rnd.uniform(3, 40)
    growth = rnd.uniform(0.02, 0.12) / (7 * 1440)
    cycle = rnd.uniform(0.2, 0.5)
    phase = rnd.uniform(0, 2 * math.pi)
    out = []
    for i in range(MINUTES):
        noise = rnd.gauss(0, 0.01)
        if shape == "steady":
            m = level * (1 + noise)
        elif shape == "growth":
            m = level * (1 + growth * i + noise)
        elif shape == "spikes":
            m = level * (1 + noise) * (1 + rnd.uniform(0.1, 0.4) if rnd.random() < 1 / 2000 else 1)
        else:
            m = level * (1 + cycle * (0.5 + 0.5 * math.sin(2 * math.pi * i / 1440 + phase)) + noise)
        u = min(100.0, max(0.0, util * (m / level) + rnd.gauss(0, 2)))
        out.append((max(0.0, m), round(u)))
    return out


def history(shape: str, n: int, seed: int) -> list[Sample]:
    rnd = random.Random(f"{shape}-{seed}")
    out = []
    for w in range(n):
        place = Place(host=f"h{w // 8:03d}", gpu=w % 8, gpu_model=MODEL)
        for i, (m, u) in enumerate(series(shape, rnd)):
            out.append(Sample(T0 + 60 * i, f"{shape}-{w:03d}", m, u, place))
    return out


def run(samples: list[Sample]) -> list[dict[str, object]]:
    cat = builtin_catalog()
    split = T0 + 7 * DAY
    bt = backtest(samples, samples, cat, [parse_rule(r) for r in RULES], PulpSolver(time_limit=60),
                  train_window=Window(T0, split, end_open=True), test_window=Window(split, None))
    return [{"rule": t.rule, "workloads": t.workloads, "oom_workloads": t.oom_workloads,
             "oom_samples": t.oom_samples, "oom_minutes": t.oom_minutes,
             "alloc_gib": round(t.memory_allocated_mib / 1024, 1), "unused_gib": round(t.unused_mib_mean / 1024, 1),
             "slices": t.slices_allocated, "compute_short": t.compute_short_samples,
             "gpus": t.gpus_used, "gpus_lb": t.gpus_lower_bound} for t in bt.totals]


def table(rows: list[dict[str, object]]) -> str:
    head = "| rule | workloads OOM | OOM samples | OOM minutes | allocated GiB | unused GiB (mean) | slices | " \
           "compute-short samples | GPUs (lower bound) |"
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        lines.append(f"| {r['rule']} | {r['oom_workloads']} of {r['workloads']} | {r['oom_samples']} | "
                     f"{r['oom_minutes']} | {r['alloc_gib']} | {r['unused_gib']} | {r['slices']} | "
                     f"{r['compute_short']} | {r['gpus']} ({r['gpus_lb']}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", type=int, default=60, help="per shape")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    every: list[Sample] = []
    for shape in SHAPES:
        samples = history(shape, args.workloads // len(SHAPES) or 1, args.seed)
        every += samples
        t = time.perf_counter()
        rows = run(samples)
        print(f"\n### {shape} ({len(samples)} samples, {time.perf_counter() - t:.1f}s)\n\n{table(rows)}")
    t = time.perf_counter()
    rows = run(every)
    print(f"\n### all shapes together ({len(every)} samples, {time.perf_counter() - t:.1f}s)\n\n{table(rows)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
