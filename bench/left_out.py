"""Who a plain `propose` lists as left out on a generated fleet whose demand grew (issue 23):
python -m bench.left_out [--gpus 504] [--workloads 479] [--changed 0.5]

The fleet: bench.generate's mixed inference instance planned from empty and applied (bench.replay), then a
share of the workloads' demand scaled by 0.5-1.6 (`change_demand`), as in bench/run.py's "previous" state.
A plain propose (no --allow-disrupt) then places, keeps at risk or leaves out each workload. Reported: the
counts per state, and of the workloads left out how many run now and how many of those still fit their
peak where they run (must be 0: such a workload is kept at risk, not left out). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import time

from bench.generate import Spec, change_demand, generate
from migplan.adapters.solver import PulpSolver
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Instance
from migplan.planner import Policy, plan
from migplan.planner.replay import applied


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=504)
    ap.add_argument("--workloads", type=int, default=479)
    ap.add_argument("--changed", type=float, default=0.5, help="share of workloads whose demand changes")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    cat = builtin_catalog()
    state, ps = generate(Spec(a.gpus, a.workloads, "mixed", "inference", "empty", a.seed))
    first = plan(state, ps, cat, Policy(), PulpSolver(time_limit=60), lower_bound=False)
    state, ps = applied(state, ps, first)
    ps = change_demand(ps, a.changed, a.seed)
    t0 = time.perf_counter()
    p = plan(state, ps, cat, Policy(), PulpSolver(time_limit=60), lower_bound=False)
    secs = time.perf_counter() - t0
    states = {s: sum(1 for w in p.workloads if w.status == s) for s in ("placed", "at_risk", "unplaced")}
    by_name = {w.name: w for w in ps.workloads}
    running_left = fits_left = 0
    for w in p.workloads:
        if w.status != "unplaced":
            continue
        obs = by_name[w.workload].observed
        if obs is None or obs.host is None:
            continue
        running_left += 1
        gpu = next(g for g in state.gpus if (g.host, g.index) == (obs.host, obs.gpu))
        model = cat.get(gpu.model)
        mib = model.memory_mib if obs.mig_profile is None else model.profile(
            Instance(obs.mig_start or 0, obs.mig_profile).profile).memory_mib
        fits_left += int(w.peak_mib <= mib)
    print(f"{a.gpus} GPUs, {len(p.workloads)} workloads ({a.changed:.0%} with changed demand), plain propose "
          f"in {secs:.2f} s ({p.solve.status}): placed {states['placed']}, kept at risk {states['at_risk']}, "
          f"left out {states['unplaced']} (of them running now {running_left}, whose peak still fits where they "
          f"run {fits_left})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
