"""The sizing sweep on generated fleets with known ground truth, and its cost:
python -m bench.sweep [--workloads 1000] [--days 14] [--interval 300] [--seed 1] [--cost-only | --fleets-only]
[--csv]

Generated, seeded histories on A100-SXM4-80GB, one sample every `--interval` seconds, in four shapes whose answer
is known by construction:

* steady: a flat level with 0.3% noise: its peak never moves; the 512 MiB floor is all the headroom it needs;
* volatile: a flat level with spikes (one sample in 30) whose size is exponential with a scale of the workload's
  own swing (10-50% of its level): a later window's peak exceeds the training peak by a multiple of that swing, so
  headroom in proportion to the spread (max - p50) fits it and a fixed percentage does not;
* trending: memory grows 1-5% of its level a day: a later window's peak is above the training peak by the growth,
  which the spread (half the training window's growth) sees and a fixed percentage sees only where it is large;
* bursty: a flat level with noise, plus fleet-wide bursts: at a few times (`BURSTS`) every bursty workload jumps
  by the same factor for 30 minutes. No per-workload statistic foresees a burst larger than the history holds: the
  workloads run out of memory together, and the sweep's burst indicator says so.

Printed (markdown): the frontier of a mixed fleet (steady, volatile, trending) and of the same fleet with bursty
workloads, each with the recommendation's out-of-sample OOM rate (trained on the sweep's history, replayed on the
next days, which the sweep never saw); then the cost of a sweep of `--workloads` workloads over `--days` days
(wall time of loading and of the sweep; nothing is asserted).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import time
from collections.abc import Iterator

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from migplan.adapters.solver import PulpSolver
from migplan.catalog import builtin_catalog
from migplan.history.samples import Place, Sample
from migplan.history.sweep import DEFAULT_FAMILIES, Sweep, load, rules_of, sweep

MODEL = "A100-SXM4-80GB"
T0 = 1_790_000_000.0
DAY = 86_400.0
SHAPES = ("steady", "volatile", "trending", "bursty")
# fleet-wide bursts of the bursty workloads: (day, factor); each of the last two larger than any before it
BURSTS = ((2.3, 1.2), (5.6, 1.25), (10.4, 1.7), (12.5, 2.3))
BURST_S = 1800.0


def _level(rnd: random.Random) -> float:
    return math.exp(rnd.uniform(math.log(2_000), math.log(25_000)))


def series(shape: str, rnd: random.Random, n: int, interval: float) -> Iterator[float]:
    """Memory (MiB) of one workload, sample by sample."""
    level = _level(rnd)
    swing = rnd.uniform(0.10, 0.50)
    growth = rnd.uniform(0.01, 0.05) / DAY
    for i in range(n):
        t = i * interval
        m = level * (1 + rnd.gauss(0, 0.003))
        if shape == "volatile" and rnd.random() < 1 / 30:
            m += level * swing * rnd.expovariate(1.0)
        elif shape == "trending":
            m += level * growth * t
        elif shape == "bursty":
            for day, factor in BURSTS:
                if 0 <= t - day * DAY < BURST_S:
                    m *= factor
        yield max(0.0, m)


def history(counts: dict[str, int], days: float, interval: float, seed: int) -> Iterator[Sample]:
    """The fleet's samples, workload by workload (`counts`: workloads per shape)."""
    n = int(days * DAY / interval)
    k = 0
    for shape in SHAPES:
        for w in range(counts.get(shape, 0)):
            rnd = random.Random(f"{seed}-{shape}-{w}")
            place = Place(host=f"h{k // 8:04d}", gpu=k % 8, gpu_model=MODEL)
            name = f"{shape}-{w:04d}"
            for i, m in enumerate(series(shape, rnd, n, interval)):
                yield Sample(T0 + i * interval, name, m, 5.0, place)
            k += 1


def frontier_table(s: Sweep) -> str:
    lines = ["| rule | OOM workloads % mean (worst) | OOM minutes mean | GPUs mean | x whole GPUs mean (worst) | "
             "frontier | burst peak / independent |", "|" + "---|" * 7]
    for r in sorted(s.rules, key=lambda r: (r.ratio["mean"], r.oom_rate["mean"])):
        b = r.worst_burst
        mark = ("**recommended**" if s.recommended is r else "yes") if r.frontier else ""
        bursts = f"{b.peak} / {b.independent}{' correlated' if b.correlated else ''}" if b else ""
        lines.append(f"| {r.rule.text} | {r.oom_rate['mean'] * 100:.2f} ({r.oom_rate['worst'] * 100:.2f}) | "
                     f"{statistics_mean([x.oom_minutes for x in r.splits]):.0f} | "
                     f"{statistics_mean([x.gpus for x in r.splits]):.1f} | {r.ratio['mean']:.3f} "
                     f"({r.ratio['worst']:.3f}) | {mark} | {bursts} |")
    return "\n".join(lines)


def statistics_mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def out_of_sample(samples: list[Sample], rule: str, train_s: float, start: float, end: float) -> tuple[int, int]:
    """(workloads out of memory, workloads replayed) when `rule` sizes from [start - train, start) and the window
    [start, end], which the sweep never saw, is replayed."""
    from migplan.history.backtest import backtest, parse_rule
    from migplan.history.rollup import Window

    bt = backtest(samples, samples, builtin_catalog(), [parse_rule(rule)], PulpSolver(time_limit=60),
                  train_window=Window(start - train_s, start, end_open=True), test_window=Window(start, end))
    replayed = [w for w in bt.workloads if w.test_samples]
    return sum(1 for w in replayed if w.oom_samples), len(replayed)


def fleet(counts: dict[str, int], args: argparse.Namespace, title: str) -> None:
    days_seen = args.days - args.holdout
    every = list(history(counts, args.days, args.interval, args.seed))
    seen = [s for s in every if s.timestamp < T0 + days_seen * DAY]
    t = time.perf_counter()
    s = sweep(load(seen), builtin_catalog(), rules_of(DEFAULT_FAMILIES), PulpSolver(time_limit=60),
              train_s=args.train * DAY, test_s=args.test * DAY, splits=args.splits)
    took = time.perf_counter() - t
    print(f"\n### {title} ({sum(counts.values())} workloads, {len(seen)} samples, {took:.1f}s)\n")
    print(frontier_table(s))
    print(f"\nrecommended: {s.recommended.rule.text if s.recommended else 'none'}: {s.reason}")
    if s.recommended is not None:
        start = T0 + days_seen * DAY
        oom, n = out_of_sample(every, s.recommended.rule.text, args.train * DAY, start, T0 + args.days * DAY)
        print(f"out of sample (days {days_seen:g}-{args.days:g}, never seen by the sweep): {oom} of {n} workloads "
              f"out of memory ({oom / n * 100:.2f}%; target {s.target * 100:g}%)")
    for r in s.correlated[:3]:
        b = r.worst_burst
        assert b is not None
        print(f"correlated bursts under {r.rule.text}: {b.peak} workloads out of memory in the same "
              f"{b.bucket_s / 60:g} minutes (independent OOMs at the same rates: at most {b.independent})")


def cost(args: argparse.Namespace) -> None:
    """The sweep's cost in this process: the history generated straight into the store (`load`, no list of
    samples held), then the sweep; wall and CPU times, and the process's peak memory."""
    import resource

    per = args.workloads // 4
    counts = {"steady": args.workloads - 3 * per, "volatile": per, "trending": per, "bursty": per}
    c0 = time.process_time()
    t0 = time.perf_counter()
    store = load(history(counts, args.days, args.interval, args.seed))
    t1 = time.perf_counter()
    loaded_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rules = rules_of(DEFAULT_FAMILIES)
    s = sweep(store, builtin_catalog(), rules, PulpSolver(time_limit=60), train_s=args.train * DAY,
              test_s=args.test * DAY, splits=args.splits)
    t2 = time.perf_counter()
    cpu = time.process_time() - c0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\n### cost: {args.workloads} workloads, {args.days:g} days, one sample every {args.interval:g}s "
          f"({store.samples:,} samples)\n")
    print("| rules | splits | plans | generate + load (s) | sweep (s) | CPU of this process (s) | peak RSS after load "
          "(MB) | peak RSS (MB) | recommended |\n|---|---|---|---|---|---|---|---|---|")
    print(f"| {len(rules)} | {args.splits} | {len(rules) * args.splits} | {t1 - t0:.1f} | {t2 - t1:.1f} | {cpu:.1f} | "
          f"{loaded_mb:.0f} | {peak_mb:.0f} | {s.recommended.rule.text if s.recommended else 'none'} |")


def cost_csv(args: argparse.Namespace) -> None:
    """The whole command on a CSV file of the cost run's history: `migplan backtest --sweep --csv FILE` in a child
    process (wall time and its peak memory)."""
    import resource
    import subprocess
    import tempfile

    per = args.workloads // 4
    counts = {"steady": args.workloads - 3 * per, "volatile": per, "trending": per, "bursty": per}
    with tempfile.TemporaryDirectory(prefix="sweep-") as tmp:
        path = os.path.join(tmp, "fleet.csv")
        with open(path, "w") as fh:
            fh.write("timestamp,workload,host,memory_used_mib,util_pct,gpu_model\n")
            for x in history(counts, args.days, args.interval, args.seed):
                fh.write(f"{x.timestamp:.0f},{x.workload},{x.place.host},{x.memory_mib:.1f},{x.util_pct:g},{MODEL}\n")
        size = os.path.getsize(path)
        t = time.perf_counter()
        # /usr/bin/time reports the command's own peak: getrusage(RUSAGE_CHILDREN) would count the memory of this
        # process that the child held between fork and exec
        timer = ["/usr/bin/time", "-f", "maxrss-kb %M"] if os.access("/usr/bin/time", os.X_OK) else []
        out = subprocess.run([*timer, sys.executable, "-m", "migplan.cli.app", "backtest", "--sweep", "--csv", path,
                              "--train", f"{args.train:g}d", "--test", f"{args.test:g}d", "--splits", str(args.splits),
                              "-o", "json"], capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t
        found = [ln.split()[1] for ln in out.stderr.splitlines() if ln.startswith("maxrss-kb ")]
        rss = int(found[-1]) / 1024 if found else resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    import json

    rec = json.loads(out.stdout)["recommended"]
    print(f"\n`migplan backtest --sweep --csv` on the same history ({size / 2**20:.0f} MiB of CSV): {wall:.1f} s wall, "
          f"peak RSS {rss:.0f} MiB; recommended {rec}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", type=int, default=1000, help="the cost run's workloads")
    ap.add_argument("--fleet", type=int, default=40, help="workloads per shape in the frontier runs")
    ap.add_argument("--days", type=float, default=14.0)
    ap.add_argument("--holdout", type=float, default=2.0, help="days after the sweep's history, replayed out of "
                                                               "sample (frontier runs)")
    ap.add_argument("--interval", type=float, default=300.0, help="seconds between samples")
    ap.add_argument("--train", type=float, default=7.0, help="days")
    ap.add_argument("--test", type=float, default=1.0, help="days")
    ap.add_argument("--splits", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--cost-only", action="store_true")
    ap.add_argument("--fleets-only", action="store_true")
    ap.add_argument("--csv", action="store_true", help="also time the command on a CSV file of the cost run")
    args = ap.parse_args(argv)
    if not args.cost_only:
        n = args.fleet
        fleet({"steady": n, "volatile": n, "trending": n}, args, "steady, volatile and trending")
        fleet({"steady": n, "volatile": n, "trending": n, "bursty": n}, args, "the same with bursty-together")
    if not args.fleets_only:
        cost(args)
        if args.csv:
            cost_csv(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
