"""Solver latency over many identical solves:  python -m bench.solver_latency [-n 300] [--instance NAME].

Builds one realistic planner model once, then solves it `-n` times through `PulpSolver` (the same
adapter `migplan propose` uses, with propose's defaults: 60 s limit, gap 0.0001, absolute early stop
just under one GPU's weight) and prints the latency distribution: p50, p99, max and how many solves
took longer than 1 s. It also counts the distinct answers (the plan must be deterministic: one).

Instances (`--instance`):

* `bench` (default): `bench.generate` 64g-133w-single-bimodal-empty-s1, 133 workloads, ~10 ms a solve;
* `example`: the example fleet (`inventory/example.yaml` + `profiles/example`), ~50 ms a solve;
* any other `GPUSg-WORKLOADSw-MODELS-MIX-STATE-sSEED` name for `bench.generate` (state empty or random).

`--plan` times the whole planner (`plan_problem`: main solve, re-check, LP lower bound, validation)
instead of the main solve alone. Nothing here is asserted; the unit test is
tests/test_solver_robustness.py.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench.generate import Spec, generate
from migplan.adapters.solver import PulpSolver
from migplan.catalog import builtin_catalog
from migplan.planner import Policy, build_problem, plan_problem
from migplan.planner.formulation import formulate
from migplan.planner.groups import split
from migplan.planner.problem import Problem

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_BENCH = "64g-133w-single-bimodal-empty-s1"
_SPEC = re.compile(r"^(\d+)g-(\d+)w-(single|mixed)-(small|large|bimodal|inference)-(empty|random)-s(\d+)$")


def _example_problem() -> tuple[Problem, PulpSolver]:
    from migplan.commands.context import build_context
    from migplan.commands.propose import ProposeRequest, planner_policy, planner_solver, planner_state

    ctx = build_context(None, None, "table")
    req = ProposeRequest(inventory=os.path.join(ROOT, "inventory", "example.yaml"),
                         profiles=os.path.join(ROOT, "profiles", "example"))
    policy = planner_policy(ctx, {})
    state = planner_state(ctx, req.inventory, None)
    return build_problem(state, ctx.profiles(req.profiles), ctx.catalog, policy), planner_solver(ctx, req, policy)


def _bench_problem(name: str) -> tuple[Problem, PulpSolver]:
    m = _SPEC.match(name)
    if m is None:
        raise SystemExit(f"unknown instance {name!r}: use 'example', 'bench' or e.g. {DEFAULT_BENCH}")
    spec = Spec(int(m[1]), int(m[2]), m[3], m[4], m[5], int(m[6]))
    state, ps = generate(spec)
    policy = Policy()
    # propose's solver settings (commands/propose.py), built here without a config file
    from migplan.commands import propose as cmd

    gap_abs = getattr(cmd, "DEFAULT_GAP_ABS_GPUS", 0.99) * policy.weights.gpu
    solver = PulpSolver(time_limit=cmd.DEFAULT_TIME_LIMIT_S, gap=cmd.DEFAULT_GAP, gap_abs=gap_abs)
    return build_problem(state, ps, builtin_catalog(), policy), solver


def _pct(sorted_ts: list[float], q: float) -> float:
    return sorted_ts[min(len(sorted_ts) - 1, max(0, round(q * (len(sorted_ts) - 1))))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=300, help="number of solves [300]")
    ap.add_argument("--instance", default="bench", help="bench | example | a bench.generate name [bench]")
    ap.add_argument("--plan", action="store_true", help="time the whole planner, not only the main solve")
    ap.add_argument("--slow", type=float, default=1.0, help="a solve slower than this (s) counts as slow [1]")
    args = ap.parse_args(argv)

    name = DEFAULT_BENCH if args.instance == "bench" else args.instance
    problem, solver = _example_problem() if name == "example" else _bench_problem(name)
    sp = split(problem)
    milp = formulate(problem, sp).milp
    print(f"instance {name}: {len(problem.items)} workloads, {len(milp.names)} variables, {len(milp.rows)} rows; "
          f"solver {solver.name} threads={solver.threads} gap={solver.gap} gap_abs={solver.gap_abs}; "
          f"{args.n} x {'plan_problem' if args.plan else 'solve'}", flush=True)

    times: list[float] = []
    answers: dict[tuple[float, ...], int] = {}
    statuses: dict[str, int] = {}
    for i in range(args.n):
        t0 = time.perf_counter()
        if args.plan:
            p = plan_problem(problem, solver)
            key: tuple[float, ...] = tuple(hash(str(g.target)) for g in p.gpus)
            status = p.solve.status
        else:
            res = solver.solve(milp)
            key, status = res.values, res.status.value
        dt = time.perf_counter() - t0
        times.append(dt)
        answers[key] = answers.get(key, 0) + 1
        statuses[status] = statuses.get(status, 0) + 1
        if dt > args.slow:
            print(f"  solve {i}: {dt:.2f} s", flush=True)

    ts = sorted(times)
    print(f"p50 {_pct(ts, 0.50) * 1000:.1f} ms  p99 {_pct(ts, 0.99) * 1000:.1f} ms  max {ts[-1] * 1000:.1f} ms  "
          f"mean {statistics.fmean(ts) * 1000:.1f} ms  >{args.slow:g} s: {sum(t > args.slow for t in ts)}/{len(ts)}  "
          f"total {sum(ts):.1f} s")
    print(f"statuses {statuses}; distinct answers {len(answers)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
