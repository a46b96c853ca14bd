"""Idle MIG instances a plain `propose` destroys, by the spare-capacity policy (issue 23):
python -m bench.idle_instances [--gpus 320] [--workloads 400] [--mix small]

A bench.generate fleet in the `random` state (30% of GPUs MIG-disabled, the rest a valid layout drawn at random,
nothing running: every instance idle, as in a cluster whose instances wait for pods), planned three ways:
`reclaim_idle: true` (the behaviour before the policy), the default (idle instances kept unless removing them
frees a whole GPU or makes room for demand) and the default with `spare: {1g.10gb: 8}`. Reported per run: GPUs
used, GPUs changed, instances destroyed and created, idle instances kept and removed (to free GPUs / to make
room), solve status and time. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import time

from bench.generate import MIXES, Spec, generate
from migplan.adapters.solver import PulpSolver
from migplan.catalog import builtin_catalog
from migplan.planner import Policy, plan


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=320)
    ap.add_argument("--workloads", type=int, default=400)
    ap.add_argument("--mix", default="small", choices=MIXES)
    ap.add_argument("--models", default="mixed", choices=("single", "mixed"))
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    cat = builtin_catalog()
    state, ps = generate(Spec(a.gpus, a.workloads, a.models, a.mix, "random", a.seed))
    idle = sum(len(g.layout) for g in state.gpus if g.layout is not None)
    print(f"{a.gpus} GPUs ({a.models}), {idle} idle instances, {a.workloads} new workloads ({a.mix}), seed {a.seed}")
    print("| policy | GPUs used | GPUs changed | destroyed | created | idle kept | idle removed (to free GPUs) | "
          "solve |")
    print("|---|---|---|---|---|---|---|---|")
    for name, policy in (("reclaim_idle: true (before)", Policy(reclaim_idle=True)), ("default", Policy()),
                         ("default + spare 1g.10gb: 8", Policy(spare={"1g.10gb": 8}))):
        t0 = time.perf_counter()
        p = plan(state, ps, cat, policy, PulpSolver(time_limit=60), lower_bound=False)
        s = p.summary
        print(f"| {name} | {s.gpus_used} | {s.gpus_changed} | {s.instances_destroyed} | {s.instances_created} | "
              f"{s.idle_kept} | {s.idle_removed} ({s.idle_removed_freeing}) | {p.solve.status}, "
              f"{time.perf_counter() - t0:.2f} s |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
