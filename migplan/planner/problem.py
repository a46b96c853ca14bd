"""The planner's frozen input, built from the observed state, the workload profiles and the catalog (pure).

One `Item` per workload replica (replica 0 keeps the workload's name, replica k is `name#k`); the GPUs
are the observed `GpuState`s themselves (`current`, `hold`, `busy`, `whole_busy`). Whatever cannot
be planned at all (a workload larger than any instance of any model in the fleet) is set aside in
`rejected` with its reason.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

from migplan.catalog import Catalog
from migplan.catalog.geometry import GpuModel
from migplan.errors import InputError
from migplan.fleet.state import FleetState, GpuKey, GpuState
from migplan.layout import Instance
from migplan.planner.demand import Demand, Policy, demand_of, fitting_profiles, misfit_reason, slices_needed
from migplan.profiles import ProfileSet, Workload


@dataclass(frozen=True)
class Item:
    """One workload replica with its right-sized demand."""

    name: str
    workload: str
    priority: int
    demand: Demand
    fits: tuple[tuple[str, tuple[str, ...]], ...]  # (model id, fitting profiles smallest first)
    need: tuple[tuple[str, int], ...]  # (model id, compute slices needed)
    pin_host: str | None = None
    pin_gpu: int | None = None
    groups: tuple[str, ...] = ()  # anti-affinity sets: members go to different GPUs (or hosts)
    running: GpuKey | None = None  # the GPU it runs on now
    running_on: Instance | None = None  # its instance now (None with `running`: the whole GPU)
    movable: bool = True  # profile `movable: false`: stays where it runs even with --consolidate

    def profiles(self, model: str) -> tuple[str, ...]:
        return next((p for m, p in self.fits if m == model), ())

    def slices(self, model: str) -> int:
        return next((g for m, g in self.need if m == model), 0)

    @property
    def value(self) -> float:
        """Priority-weighted demand: priority x the fewest compute slices that hold it (priority 0 counts 1%)."""
        size = min(g for _, g in self.need) if self.need else 1
        return max(float(self.priority), 0.01) * size

    @functools.cached_property
    def class_key(self) -> tuple[object, ...]:
        """What makes two items interchangeable for the program (`groups.class_key`), made once per item:
        the planner asks for it several times per item and hashes it each time."""
        return (self.fits, self.need, round(self.value, 6), self.pin_host, self.pin_gpu, self.groups)


@dataclass(frozen=True)
class Problem:
    gpus: tuple[GpuState, ...]
    items: tuple[Item, ...]
    models: Mapping[str, GpuModel]
    policy: Policy
    fingerprint: str
    rejected: tuple[tuple[str, str], ...] = ()  # (item name, reason)
    rejected_items: tuple[Item, ...] = ()  # the same items, for their demand in the plan

    @functools.cached_property
    def _by_key(self) -> dict[GpuKey, GpuState]:
        return {g.key: g for g in self.gpus}

    def gpu(self, key: GpuKey) -> GpuState | None:
        return self._by_key.get(key)


def _running(w: Workload, gpus: Mapping[GpuKey, GpuState]) -> tuple[GpuKey | None, Instance | None]:
    """Where the workload runs now, if the observed place exists in the current state."""
    o = w.observed
    if o.host is None or o.gpu is None or (o.host, o.gpu) not in gpus:
        return None, None
    gpu = gpus[(o.host, o.gpu)]
    if o.mig_profile is None:
        return (gpu.key, None) if gpu.current is None else (None, None)
    if gpu.current is None or o.mig_start is None:
        return None, None
    inst = Instance(o.mig_start, o.mig_profile)
    return (gpu.key, inst) if inst in gpu.current.instances else (None, None)


def _items(w: Workload, policy: Policy, catalog: Catalog, models: list[GpuModel],
           gpus: Mapping[GpuKey, GpuState]) -> list[Item]:
    measured = catalog.find(w.observed.gpu_model) if w.observed.gpu_model else None
    if measured is None and w.observed.host is not None and w.observed.gpu is not None:
        here = gpus.get((w.observed.host, w.observed.gpu))
        measured = catalog.find(here.model) if here else None
    fits, need = [], []
    demand = demand_of(w, policy, measured, models[0])
    for m in models:
        # with a measured model the demand is the same for every model (the fallback is not used)
        d = demand if measured is not None or m is models[0] else demand_of(w, policy, measured, m)
        g = slices_needed(d, m)
        profs = fitting_profiles(d, m, w.min_profile, slices=g)
        if profs:
            fits.append((m.id, profs))
            need.append((m.id, g))
    groups = tuple(sorted(({f"aa:{w.anti_affinity}"} if w.anti_affinity else set())
                          | ({f"replicas:{w.name}"} if w.replicas > 1 else set())))
    running, running_on = _running(w, gpus)
    out = []
    for k in range(w.replicas):
        out.append(Item(
            name=w.name if k == 0 else f"{w.name}#{k}", workload=w.name, priority=w.priority, demand=demand,
            fits=tuple(fits), need=tuple(need), pin_host=w.pin.host if w.pin else None,
            pin_gpu=w.pin.gpu if w.pin else None, groups=groups,
            running=running if k == 0 else None, running_on=running_on if k == 0 else None, movable=w.movable))
    return out


def build_problem(state: FleetState, profiles: ProfileSet, catalog: Catalog, policy: Policy) -> Problem:
    """Items and GPUs sorted by name and (host, index), so the same input always gives the same problem."""
    gpus = {g.key: g for g in sorted(state.gpus, key=lambda g: g.key)}
    model_ids = sorted({g.model for g in gpus.values() if g.hold is None})
    models = [catalog.get(m) for m in model_ids] or [catalog.get(g.model) for g in gpus.values()][:1]
    items: list[Item] = []
    rejected: list[tuple[str, str]] = []
    rejected_items: list[Item] = []
    where: dict[tuple[GpuKey, Instance | None], Workload] = {}
    for w in sorted(profiles.workloads, key=lambda w: w.name):
        for it in _items(w, policy, catalog, models, gpus) if models else []:
            if it.running is not None:
                _check_alone(w, it, where)
            why = _pin_reason(it, gpus)
            if why is None and not it.fits and it.running is None:
                why = "too large: " + misfit_reason(it.demand, models)
            if why is None:
                items.append(it)
            else:
                rejected.append((it.name, why))
                rejected_items.append(it)
    all_models = {g.model: catalog.get(g.model) for g in gpus.values()}
    return Problem(tuple(gpus.values()), tuple(items), all_models, policy, state.fingerprint(), tuple(rejected),
                   tuple(rejected_items))


def _check_alone(w: Workload, it: Item, where: dict[tuple[GpuKey, Instance | None], Workload]) -> None:
    """The planner gives each workload its own instance (or whole GPU): two workloads observed running in
    one place are an input error in the profiles, not a plan that fails validation later."""
    assert it.running is not None
    spot = (it.running, it.running_on)
    other = where.get(spot)
    if other is not None:
        place = f"{it.running[0]} GPU {it.running[1]} " + (str(it.running_on) if it.running_on else "(whole GPU)")
        raise InputError(
            f"workloads {other.name!r} ({other.source or 'profiles'}) and {w.name!r} ({w.source or 'profiles'}) "
            f"are both observed running on {place}",
            hint="migplan plans one workload per MIG instance or whole GPU: merge them into one workload "
                 "profile, or correct 'observed' in one of them")
    where[spot] = w


def _pin_reason(it: Item, gpus: Mapping[GpuKey, GpuState]) -> str | None:
    """A pin to a host or GPU the fleet does not have (or only has reserved/excluded) can never be met."""
    if it.pin_host is None:
        return None
    mine = [g for g in gpus.values() if g.host == it.pin_host and (it.pin_gpu is None or g.index == it.pin_gpu)]
    where = it.pin_host + (f" GPU {it.pin_gpu}" if it.pin_gpu is not None else "")
    if not mine:
        return f"pinned to {where}, which is not in the fleet (check the pin or the inventory)"
    if it.running is None and all(g.hold for g in mine):
        return f"pinned to {where}, whose GPUs are all reserved or excluded"
    return None
