"""The planner's frozen input, built from the observed state, the workload profiles and the catalog (pure).

One `Item` per workload replica (replica 0 keeps the workload's name, replica k is `name#k`); the GPUs
are the observed `GpuState`s themselves (`current`, `hold`, `busy`, `whole_busy`, `allowed`). Whatever cannot
be planned at all (a workload larger than any instance of any model in the fleet, or one whose eligibility and
the GPUs' rules leave it no GPU the plan may change) is set aside in `rejected` with its reason.

Eligibility (`Workload.eligible`, `Item.eligible`): the profiles an item may use and on which hosts. Its fits keep
only the profiles a rule names; a profile named on its own (not through ANY_MIG) is another form of the same
request and is offered even where sizing alone would pick a smaller one (a whole GPU for a pod's
`nvidia.com/gpu` next to the MIG device of a single-strategy node), where it holds the demand.
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Mapping
from dataclasses import dataclass

from migplan.catalog import Catalog
from migplan.catalog.geometry import GpuModel
from migplan.catalog.layout import Instance
from migplan.errors import InputError
from migplan.model.state import FleetState, GpuKey, GpuState
from migplan.planner.demand import (
    Demand,
    Policy,
    demand_of,
    fitting_profiles,
    misfit_reason,
    slices_needed,
    whole_fits,
)
from migplan.profiles import ANY_MIG, WHOLE_GPU, Eligible, ProfileSet, Workload, eligible_for


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
    eligible: tuple[Eligible, ...] = ()  # where it may use which profile (Workload.eligible); empty: anywhere

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
        return (self.fits, self.need, round(self.value, 6), self.pin_host, self.pin_gpu, self.groups, self.eligible)


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


Place = tuple[GpuKey | None, Instance | None]  # (GPU, instance; None: the whole GPU); (None, None): nowhere


def _exists(gpus: Mapping[GpuKey, GpuState], host: str | None, index: int | None, inst: Instance | None) -> Place:
    """(GPU, instance) when that place exists in the current state, else (None, None)."""
    if host is None or index is None or (host, index) not in gpus:
        return None, None
    gpu = gpus[(host, index)]
    if inst is None:
        return (gpu.key, None) if gpu.current is None else (None, None)
    return (gpu.key, inst) if gpu.current is not None and inst in gpu.current.instances else (None, None)


def _observed(w: Workload, gpus: Mapping[GpuKey, GpuState]) -> Place:
    """Where the workload was measured, if that place exists in the current state."""
    o = w.observed
    if o.mig_profile is not None and o.mig_start is None:
        return None, None
    inst = Instance(o.mig_start, o.mig_profile) if o.mig_profile is not None and o.mig_start is not None else None
    return _exists(gpus, o.host, o.gpu, inst)


def _seen_at(w: Workload) -> float | None:
    """When the workload was last measured where `observed` says (unix seconds; None: not recorded)."""
    text = w.observed.last_seen or w.observed.window_end
    if not text:
        return None
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return (when if when.tzinfo is not None else when.replace(tzinfo=dt.timezone.utc)).timestamp()


@dataclass(frozen=True)
class AssignedPlace:
    host: str
    gpu: int
    instance: Instance | None
    written_at: float | None


def assigned_places(state: FleetState) -> dict[str, AssignedPlace]:
    """Each workload's place as the hosts' assignments.json say; a workload two hosts claim (a move the old host
    never heard of) is where the newer file puts it."""
    out: dict[str, AssignedPlace] = {}
    for host, found in state.assigned:
        when = found.when()
        for a in found.items:
            old = out.get(a.workload)
            if old is None or (when or 0.0) > (old.written_at or 0.0):
                out[a.workload] = AssignedPlace(host, a.gpu, a.instance, when)
    return out


def _running(w: Workload, gpus: Mapping[GpuKey, GpuState], assigned: AssignedPlace | None) -> Place:
    """Where the workload runs now: where it was measured, or where the last apply assigned it (its processes
    may not have started yet: fleet/assigned.py), when that place exists now. When both exist and differ,
    the later wins: a measurement after the assignment (the workload kept running where it was), else the
    assignment (a measurement without a time, or from before the apply that moved it)."""
    seen = _observed(w, gpus)
    told = _exists(gpus, assigned.host, assigned.gpu, assigned.instance) if assigned is not None else (None, None)
    if seen[0] is None or told[0] is None or seen == told:
        return seen if seen[0] is not None else told
    assert assigned is not None
    at = _seen_at(w)
    return seen if at is not None and assigned.written_at is not None and at > assigned.written_at else told


def _items(w: Workload, policy: Policy, catalog: Catalog, models: list[GpuModel],
           gpus: Mapping[GpuKey, GpuState], places: Mapping[str, Place] | None = None) -> list[Item]:
    measured = catalog.find(w.observed.gpu_model) if w.observed.gpu_model else None
    if measured is None and w.observed.host is not None and w.observed.gpu is not None:
        here = gpus.get((w.observed.host, w.observed.gpu))
        measured = catalog.find(here.model) if here else None
    fits, need = [], []
    demand = demand_of(w, policy, measured, models[0])
    named = {e.profile for e in w.eligible} - {ANY_MIG}  # forms of its request named on their own
    for m in models:
        # with a measured model the demand is the same for every model (the fallback is not used)
        d = demand if measured is not None or m is models[0] else demand_of(w, policy, measured, m)
        g = slices_needed(d, m)
        profs = fitting_profiles(d, m, w.min_profile, slices=g)
        if w.eligible:  # only what its rules name; a whole GPU named on its own wherever it holds the demand
            if WHOLE_GPU in named and WHOLE_GPU not in profs and whole_fits(d, m):
                profs += (WHOLE_GPU,)
            profs = tuple(p for p in profs if eligible_for(w.eligible, p) is not None)
        if w.requested is not None:  # a pod can use only the resource it requests (migplan/pods.py)
            profs = tuple(p for p in profs if p == w.requested or p in named)
        if profs:
            fits.append((m.id, profs))
            need.append((m.id, g))
    groups = tuple(sorted(({f"aa:{w.anti_affinity}"} if w.anti_affinity else set())
                          | ({f"replicas:{w.name}"} if w.replicas > 1 else set())))
    out = []
    for k in range(w.replicas):
        name = w.name if k == 0 else f"{w.name}#{k}"
        running, running_on = (places or {}).get(name, (None, None))
        out.append(Item(
            name=name, workload=w.name, priority=w.priority, demand=demand,
            fits=tuple(fits), need=tuple(need), pin_host=w.pin.host if w.pin else None,
            pin_gpu=w.pin.gpu if w.pin else None, groups=groups,
            running=running, running_on=running_on, movable=w.movable, eligible=w.eligible))
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
    places = _places(profiles, gpus, assigned_places(state))
    offers = _Offers(gpus)
    for w in sorted(profiles.workloads, key=lambda w: w.name):
        for it in _items(w, policy, catalog, models, gpus, places) if models else []:
            if it.running is not None:
                _check_alone(w, it, where)
            why = _pin_reason(it, gpus)
            if why is None and not it.fits and it.running is None:
                why = ("too large: " + misfit_reason(it.demand, models) if w.requested is None else
                       f"requests {'a whole GPU' if w.requested == WHOLE_GPU else w.requested}, which no GPU the "
                       "plan may change offers (all GPUs of models with it are reserved or excluded)")
            if why is None and it.running is None and (it.eligible or offers.ruled):
                why = offers.nowhere(it, w.requested is not None)
            if why is None:
                items.append(it)
            else:
                rejected.append((it.name, why))
                rejected_items.append(it)
    all_models = {g.model: catalog.get(g.model) for g in gpus.values()}
    return Problem(tuple(gpus.values()), tuple(items), all_models, policy, state.fingerprint(), tuple(rejected),
                   tuple(rejected_items))


def _places(profiles: ProfileSet, gpus: Mapping[GpuKey, GpuState],
            assigned: Mapping[str, AssignedPlace]) -> dict[str, Place]:
    """Each workload's (and replica's, by item name) place now (`_running`). A place taken from an assignment never
    displaces a workload measured there (measured processes are facts; two workloads measured in one place stay
    the input error they are)."""
    out: dict[str, Place] = {}
    measured = set()
    for w in profiles.workloads:
        seen = _observed(w, gpus)
        if seen[0] is not None:
            measured.add(seen)
    for w in profiles.workloads:
        place = _running(w, gpus, assigned.get(w.name))
        if place[0] is not None and place != _observed(w, gpus) and place in measured:
            place = _observed(w, gpus)  # its assigned place is where another workload was measured
        out[w.name] = place
        for k in range(1, w.replicas):  # replica k (`name#k`) has no measured place of its own: its assignment
            a = assigned.get(f"{w.name}#{k}")
            spot = _exists(gpus, a.host, a.gpu, a.instance) if a is not None else (None, None)
            out[f"{w.name}#{k}"] = spot if spot not in measured else (None, None)
    return out


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


class _Offers:
    """Which hosts have a GPU the plan may change that may hold each (model, profile), under the GPUs' rules
    (`GpuState.allowed`); made the first time an item with eligibility (or a fleet with rules) asks."""

    def __init__(self, gpus: Mapping[GpuKey, GpuState]) -> None:
        self.gpus = gpus
        self.ruled = any(g.allowed is not None for g in gpus.values())
        self._hosts: dict[tuple[str, tuple[str, ...] | None], set[str]] | None = None
        self._offering: dict[tuple[str, str], frozenset[str]] = {}
        self._said: dict[tuple[object, ...], str | None] = {}  # the answer per (fits, eligibility, requested)

    def hosts(self, model: str, q: str) -> frozenset[str]:
        """Hosts with a planned GPU of `model` whose rule lets it hold `q` (a plain profile, or WHOLE_GPU)."""
        if self._hosts is None:
            self._hosts = {}
            for g in self.gpus.values():
                if g.hold is None:
                    self._hosts.setdefault((g.model, g.allowed), set()).add(g.host)
        if (model, q) not in self._offering:
            self._offering[(model, q)] = frozenset(h for (m, rule), hosts in self._hosts.items()
                                                   if m == model and (rule is None or q in rule) for h in hosts)
        return self._offering[(model, q)]  # WHOLE_GPU is the rule's "whole"

    def nowhere(self, it: Item, requested: bool) -> str | None:
        """Why a new item has no GPU at all that it may use (its eligibility, the GPUs' rules), or None: once per
        kind of item (items of one class ask alike)."""
        k = (it.fits, it.eligible, requested)
        if k not in self._said:
            self._said[k] = self._nowhere(it, requested)
        return self._said[k]

    def _nowhere(self, it: Item, requested: bool) -> str | None:
        for model, profs in it.fits:
            for q in profs:
                rule = eligible_for(it.eligible, q) if it.eligible else None
                hosts = self.hosts(model, q)
                if hosts and (rule is None or rule.hosts is None or not hosts.isdisjoint(rule.hosts)):
                    return None
        shown = sorted({q for _, profs in it.fits for q in profs})
        what = ", ".join("a whole GPU" if q == WHOLE_GPU else q for q in shown)
        rules = [eligible_for(it.eligible, q) for q in shown] if it.eligible else []
        where = sorted({(r.why or "some hosts") + (f" ({_few(r.hosts)})" if r.hosts is not None else "")
                        for r in rules if r is not None and r.hosts is not None})
        verb = "requests" if requested else "fits"
        if where:
            return (f"{verb} {what}, which it may use only on {'; '.join(where)}, and no GPU there the plan may "
                    "change offers it (reserved or excluded, a model without it, or a rule that allows other profiles)")
        return (f"{verb} {what}, which no GPU the plan may change may hold (reserved or excluded, or their rules "
                "allow other profiles only)")


def _few(hosts: tuple[str, ...], n: int = 5) -> str:
    return ", ".join(hosts[:n]) + (f" and {len(hosts) - n} more" if len(hosts) > n else "") if hosts else "none"


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
