"""Small fleets and workloads for the planner tests (built in code, no files)."""

from __future__ import annotations

from migplan.adapters.solver import PulpSolver
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout
from migplan.model.state import FleetState, GpuState
from migplan.planner import Plan, Policy, plan
from migplan.profiles import ComputeStats, MemoryStats, Observation, Pin, ProfileSet, Workload

CAT = builtin_catalog()
A100 = "A100-SXM4-40GB"
H100 = "H100-SXM5-80GB"


def gpu(host: str, index: int, model: str = A100, layout: list[str] | None = None, **kw: object) -> GpuState:
    lay = Layout.parse(layout) if layout is not None else None
    return GpuState(host=host, index=index, model=model, mig_enabled=lay is not None, layout=lay, **kw)  # type: ignore[arg-type]


def fleet(*gpus: GpuState) -> FleetState:
    return FleetState(tuple(gpus))


def wl(name: str, mem: int, share: float = 0.05, *, host: str | None = None, gpu_idx: int | None = None,
       inst: str | None = None, model: str = A100, **kw: object) -> Workload:
    """A workload whose p99 memory is `mem` MiB and p95 compute `share` of an A100."""
    prof, start = (inst.split("@")[0], int(inst.split("@")[1])) if inst else (None, None)
    obs = Observation(host=host, gpu=gpu_idx, gpu_model=model, mig_profile=prof, mig_start=start)
    return Workload(name=name, observed=obs, memory=MemoryStats(mem, mem, mem, mem),
                    compute=ComputeStats(share, share, share), **kw)  # type: ignore[arg-type]


def profiles(*ws: Workload) -> ProfileSet:
    return ProfileSet(tuple(ws))


def pin(host: str, gpu: int | None = None) -> Pin:
    return Pin(host=host, gpu=gpu)


# headroom 0 and no minimum headroom so sizes in the tests are exact
EXACT = Policy(headroom=0.0, headroom_min_mib=0)


def run(state: FleetState, ps: ProfileSet, policy: Policy = EXACT, solver: str = "cbc") -> Plan:
    return plan(state, ps, CAT, policy, PulpSolver(name=solver, time_limit=30))


def placed(p: Plan) -> dict[str, tuple[str | None, int | None, str | None]]:
    return {w.name: (w.host, w.gpu, w.instance) for w in p.workloads if w.status == "placed"}


def targets(p: Plan) -> dict[tuple[str, int], list[str] | None]:
    return {(g.host, g.index): (g.target.as_list() if g.target is not None else None) for g in p.gpus}
