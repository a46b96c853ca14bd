"""The state a plan produces, as if applied: for re-planning, tests and the benchmark (pure)."""

from __future__ import annotations

import dataclasses

from migplan.catalog.layout import Instance
from migplan.model.state import FleetState
from migplan.planner.plan import Plan
from migplan.profiles import Observation, ProfileSet


def applied_state(state: FleetState, plan: Plan) -> FleetState:
    """Every GPU with its target layout (MIG on when the target is a layout)."""
    gpus = []
    for g in state.gpus:
        gp = plan.gpu(g.host, g.index)
        if gp is None or gp.hold is not None:
            gpus.append(g)
            continue
        gpus.append(dataclasses.replace(g, mig_enabled=gp.target is not None, layout=gp.target, busy=()))
    return FleetState(tuple(gpus), source=state.source)


def applied_profiles(profiles: ProfileSet, plan: Plan) -> ProfileSet:
    """Workloads observed where the plan put them (replica 0 carries the observation); left-out ones keep theirs."""
    where = {w.name: w for w in plan.workloads}
    out = []
    for w in profiles.workloads:
        wp = where.get(w.name)
        if wp is None or not wp.on_gpu:
            out.append(w)
            continue
        inst = Instance.parse(wp.instance) if wp.instance else None
        obs = Observation(host=wp.host, gpu=wp.gpu, gpu_model=w.observed.gpu_model,
                          mig_profile=inst.profile if inst else None, mig_start=inst.start if inst else None,
                          window_start=w.observed.window_start, window_end=w.observed.window_end,
                          samples=w.observed.samples)
        out.append(dataclasses.replace(w, observed=obs))
    return ProfileSet(tuple(out), profiles.sources)


def applied(state: FleetState, profiles: ProfileSet, plan: Plan) -> tuple[FleetState, ProfileSet]:
    return applied_state(state, plan), applied_profiles(profiles, plan)
