"""A plan's "GPUs freed" figures are one definition: the GPUs in use before the plan that it leaves empty
(`Plan.freed`, listed as "GPUs freed (N)") is also the count `--consolidate` reports (`Consolidation.gpus_freed`,
"moves free N of M GPUs in use") and the count of this plan's own point of the curve.

Issue 23 (894 vs 893 on a large consolidation): the consolidation counted the GPUs in use before minus those in
use after, which is lower by every idle GPU the plan brings into use; those are now `gpus_newly_used`.
Fleet: bench/consolidate.py's whole-GPU
A100-80GB fleet (every GPU runs one workload) plus empty MIG-enabled GPUs on another host, which the
consolidation packs onto."""

from __future__ import annotations

import dataclasses

from bench.consolidate import whole_gpu_fleet
from migplan.adapters.solver import PulpSolver
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout
from migplan.model.state import GpuState
from migplan.planner import Policy, plan
from migplan.planner.plan import in_use


def test_the_freed_list_and_the_consolidation_count_agree() -> None:
    state, ps = whole_gpu_fleet(16, 7)
    idle = tuple(GpuState(host="idle-h", index=i, model="A100-SXM4-80GB", mig_enabled=True, layout=Layout())
                 for i in range(2))
    state = dataclasses.replace(state, gpus=state.gpus + idle)
    p = plan(state, ps, builtin_catalog(), Policy(consolidate=True, max_moves=3), PulpSolver(time_limit=20),
             lower_bound=False)
    before, after = in_use(p.gpus, p.workloads, p.migrations)
    assert after - before, "the fleet must make the plan bring an idle GPU into use, or the test shows nothing"
    c = p.consolidation
    assert c is not None
    own = next(pt for pt in c.curve if pt.max_moves == 3)
    assert len(p.freed) == c.gpus_freed == own.gpus_freed
    # GPUs brought into use are counted apart; the net is what the lower bound bounds
    assert c.gpus_newly_used == len(after - before) and c.gpus_freed - c.gpus_newly_used == c.gpus_in_use - c.gpus_used
