"""Aggregation: identical GPUs into groups and identical movable workloads into classes (pure).

Two GPUs share a group when the model sees no difference between them: same model, current layout,
instances that must stay, running workloads (by class) on which instances, the same pin / host
tag, the same rule for their target (`GpuState.allowed`) and the same *zone*: membership of their host in
each host set the items' eligibility names (`Item.eligible`), so that a group is wholly inside or outside
every such set. Two items share a class when they fit the same profiles, need the same slices, have the
same value, pin, anti-affinity sets and eligibility. The integer program then counts GPUs per (group, pattern) and
items per (class, model, profile), or per (class, group, profile) for pinned classes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from migplan.catalog.geometry import GpuModel
from migplan.catalog.layout import Instance, Layout
from migplan.model.state import GpuKey, GpuState
from migplan.planner.patterns import Key, key
from migplan.planner.problem import Item, Problem
from migplan.profiles import WHOLE_GPU, eligible_for, may_use

ClassKey = tuple[object, ...]


@dataclass
class Klass:
    idx: int
    key: ClassKey
    sample: Item
    free: list[Item] = field(default_factory=list)  # movable items not running anywhere kept

    @property
    def special(self) -> bool:
        """Pinned classes are planned per GPU group (the groups on their host), the rest per model."""
        return self.sample.pin_host is not None

    @property
    def restricted(self) -> bool:
        """Eligible on some hosts only (`Item.eligible`): planned per GPU group, as pinned classes are."""
        return any(e.hosts is not None for e in self.sample.eligible)

    @property
    def anti(self) -> bool:
        """Members of anti-affinity sets: planned per model like ordinary classes, spread by counting rows
        per set (never per set and GPU group: that product is what made the model explode)."""
        return bool(self.sample.groups)


@dataclass
class Group:
    idx: int
    model: str
    current: Layout | None
    hard: frozenset[Key]  # instances that must stay (running workloads, busy) without --allow-disrupt/--consolidate
    hard_whole: bool  # a workload runs on the whole GPU and must stay
    soft: tuple[tuple[Key, int], ...]  # (instance, class idx) of running workloads that may move
    soft_busy: frozenset[Key]  # busy instances that may be destroyed (with --allow-disrupt)
    soft_whole: int  # class idx of a movable whole-GPU workload, or -1
    busy_whole: bool  # processes run on the MIG-disabled GPU; enabling MIG is one disruption (--allow-disrupt)
    host: str | None  # set when the group is tied to one host
    gpu: int | None  # set when the group is tied to one GPU
    present: frozenset[str]  # anti-affinity sets with a member running here (kept, outgrown or movable)
    risky: frozenset[Key] = frozenset()  # soft instances whose workload is at risk there (it may stay, priced)
    risky_whole: bool = False  # the soft whole-GPU workload is at risk there
    idle: frozenset[Key] = frozenset()  # current instances where nothing runs and nothing is busy
    allowed: tuple[str, ...] | None = None  # the GPUs' rule for their target (GpuState.allowed)
    zone: frozenset[int] = frozenset()  # the eligibility host sets its GPUs' host is in (`zones`)
    gpus: list[GpuState] = field(default_factory=list)

    @property
    def host_of(self) -> str:
        """A host of the group's GPUs: every one is in the same eligibility host sets (the group key's zone)."""
        return self.gpus[0].host


@dataclass
class Split:
    """Every item and GPU, sorted into what the program decides and what it does not."""

    classes: list[Klass]
    groups: list[Group]
    kept: dict[str, tuple[GpuKey, Instance | None]]  # hard-kept items and items on frozen GPUs
    unplaced: dict[str, str]  # item -> reason, decided before solving
    forced: list[str]  # running items that must move (counted as disruptions)
    running: dict[GpuKey, list[Item]]  # items running per GPU
    # running items at risk where they run (their peak fits there, their sized demand or pin does not) -> why:
    # kept there when they may not move (also in `kept`), else soft: they stay or move, as the objective prices it
    at_risk: dict[str, str] = field(default_factory=dict)
    # formulation's candidate patterns per group index, made once and read (never changed) by every
    # formulation of this split: the plan, the lower bound, refinement rounds and the consolidation curve
    patterns: dict[int, list[Any]] = field(default_factory=dict, repr=False, compare=False)


def class_key(it: Item) -> ClassKey:
    return it.class_key


def eligible_here(it: Item, host: str) -> bool:
    """Its eligibility lets it run where it runs on `host` (its instance's profile, or the whole GPU)."""
    q = WHOLE_GPU if it.running_on is None else it.running_on.profile.removesuffix("+me")
    return may_use(it.eligible, q, host)


def fits_where_it_runs(it: Item, gpu: GpuState, model_full: str) -> bool:
    """Its instance (or the whole GPU: where the full profile or WHOLE_GPU fits it) is a profile it fits,
    and its pin and eligibility allow this GPU."""
    if it.pin_host is not None and (it.pin_host != gpu.host or (it.pin_gpu is not None and it.pin_gpu != gpu.index)):
        return False
    if it.eligible and not eligible_here(it, gpu.host):
        return False
    profs = it.profiles(gpu.model)
    if it.running_on is None:
        return WHOLE_GPU in profs or model_full in profs
    return it.running_on.profile.removesuffix("+me") in profs


def runs_in_mib(gpu_model: GpuModel, it: Item) -> int:
    """MiB of where a running item runs: its instance's profile, or the whole MIG-disabled GPU."""
    return gpu_model.memory_mib if it.running_on is None else gpu_model.profile(it.running_on.profile).memory_mib


def at_risk_reason(it: Item, gpu: GpuState, gpu_model: GpuModel) -> str | None:
    """Why a running item that does not fit where it runs is still kept there at risk, or None when its observed
    peak no longer fits there either (it is then outgrown: it must move, or is left out)."""
    mib = runs_in_mib(gpu_model, it)
    if it.demand.peak_mib > mib:
        return None
    where = f"{it.running_on or 'the whole GPU'} ({mib} MiB)"
    if it.pin_host is not None and (it.pin_host != gpu.host or (it.pin_gpu is not None and it.pin_gpu != gpu.index)):
        pinned = it.pin_host if it.pin_gpu is None else f"{it.pin_host}/{it.pin_gpu}"
        return f"runs on {where}, not where its pin asks ({pinned})"
    if it.eligible and not eligible_here(it, gpu.host):
        q = WHOLE_GPU if it.running_on is None else it.running_on.profile.removesuffix("+me")
        rule = eligible_for(it.eligible, q)
        why = rule.why if rule is not None and rule.why else "not among the hosts it may use"
        return f"runs on {where} of {gpu.host}, where it may not run ({why})"
    if it.demand.memory_mib > mib:
        return (f"peak {it.demand.peak_mib} MiB fits {where}, margin {mib - it.demand.peak_mib} MiB; "
                f"peak + headroom needs {it.demand.memory_mib} MiB")
    return f"needs {it.slices(gpu.model)} compute slices; {where} has fewer"


def zones(problem: Problem) -> dict[str, frozenset[int]]:
    """Per host, the indices of the distinct eligibility host sets of the items (`Item.eligible`) it is in: GPUs
    are grouped only with GPUs of the same zone. Empty when no item is eligible on some hosts only."""
    sets: dict[tuple[str, ...], int] = {}
    for it in problem.items:
        for e in it.eligible:
            if e.hosts is not None and e.hosts not in sets:
                sets[e.hosts] = len(sets)
    if not sets:
        return {}
    members = [frozenset(hs) for hs in sets]
    hosts = {g.host for g in problem.gpus}
    return {h: frozenset(j for j, m in enumerate(members) if h in m) for h in hosts}


def _tags(problem: Problem) -> tuple[set[str], set[GpuKey]]:
    hosts = {it.pin_host for it in problem.items if it.pin_host and it.pin_gpu is None}
    gpus = {(it.pin_host, it.pin_gpu) for it in problem.items if it.pin_host and it.pin_gpu is not None}
    if problem.policy.anti_affinity_scope == "host" and any(it.groups for it in problem.items):
        hosts |= {g.host for g in problem.gpus}
    return hosts, {(h, i) for h, i in gpus if h is not None and i is not None}


class _Splitter:
    def __init__(self, problem: Problem, still: str | None = None) -> None:
        self.problem = problem
        self.still = still  # set: why no running item may move (the todo text its reasons give)
        self.classes: dict[ClassKey, Klass] = {}
        self.kept: dict[str, tuple[GpuKey, Instance | None]] = {}
        self.unplaced: dict[str, str] = {}
        self.forced: list[str] = []
        self.running: dict[GpuKey, list[Item]] = defaultdict(list)
        self.soft: dict[GpuKey, list[tuple[Key | None, int]]] = defaultdict(list)
        self.hard: dict[GpuKey, set[Key | None]] = defaultdict(set)
        self.risky: dict[GpuKey, set[Key | None]] = defaultdict(set)
        self.at_risk: dict[str, str] = {}

    def klass(self, it: Item) -> Klass:
        k = class_key(it)
        if k not in self.classes:
            self.classes[k] = Klass(len(self.classes), k, it)
        return self.classes[k]

    def item(self, it: Item) -> None:
        gpu = self.problem.gpu(it.running) if it.running else None
        if gpu is None:
            self.klass(it).free.append(it)
            return
        self.running[gpu.key].append(it)
        model = self.problem.models[gpu.model]
        ikey = key(model, it.running_on) if it.running_on else None
        movable = self.problem.policy.movable_running and it.movable  # `movable: false` in its profile: never moved
        if gpu.hold:
            self.kept[it.name] = (gpu.key, it.running_on)
        elif fits_where_it_runs(it, gpu, model.full_profile.name):
            if movable:
                self.soft[gpu.key].append((ikey, self.klass(it).idx))
            else:
                self.kept[it.name] = (gpu.key, it.running_on)
                self.hard[gpu.key].add(ikey)
        elif (risk := at_risk_reason(it, gpu, model)) is not None:
            # its peak still fits where it runs: kept there at risk, never stopped just to restore headroom;
            # when it may move, the program weighs a move to a place that fits against staying (Weights.risk)
            self.at_risk[it.name] = risk
            if movable:
                self.soft[gpu.key].append((ikey, self.klass(it).idx))
                self.risky[gpu.key].add(ikey)
            else:
                todo = self.still or ("its profile says movable: false" if self.problem.policy.movable_running
                                      else "moving it needs --allow-disrupt or --consolidate")
                self.at_risk[it.name] = f"{risk}; {todo}"
                self.kept[it.name] = (gpu.key, it.running_on)
                self.hard[gpu.key].add(ikey)
        elif movable:
            self.forced.append(it.name)
            self.klass(it).free.append(it)
        else:
            self.hard[gpu.key].add(ikey)
            where = it.running_on or "the whole GPU"
            todo = self.still or ("its profile says movable: false" if self.problem.policy.movable_running
                                  else "moving it needs --allow-disrupt")
            self.unplaced[it.name] = (f"outgrown: its peak {it.demand.peak_mib} MiB no longer fits {where} "
                                      f"({runs_in_mib(model, it)} MiB); {todo}")


def split(problem: Problem, *, still: str | None = None) -> Split:
    """The problem's items and GPUs sorted (see `Split`). `still`: the reason, given in the texts of running items
    that do not fit where they run, why they may not move; the problem's policy must then move nothing
    (planner.greedy's fallback plan)."""
    s = _Splitter(problem, still)
    for it in problem.items:
        s.item(it)
    host_tags, gpu_tags = _tags(problem)
    zone = zones(problem)
    groups: dict[tuple[object, ...], Group] = {}
    for gpu in problem.gpus:
        if gpu.hold:
            continue
        g = _group_of(problem, s, gpu, host_tags, gpu_tags, groups, zone.get(gpu.host, frozenset()))
        g.gpus.append(gpu)
    return Split(sorted(s.classes.values(), key=lambda k: k.idx), list(groups.values()), s.kept, s.unplaced,
                 s.forced, dict(s.running), at_risk=s.at_risk)


def _group_of(problem: Problem, s: _Splitter, gpu: GpuState, host_tags: set[str], gpu_tags: set[GpuKey],
              groups: dict[tuple[object, ...], Group], zone: frozenset[int]) -> Group:
    model = problem.models[gpu.model]
    busy = frozenset(key(model, i) for i in gpu.busy)
    hard = {k for k in s.hard.get(gpu.key, set()) if k is not None}
    hard_whole = None in s.hard.get(gpu.key, set()) or (gpu.whole_busy and not problem.policy.allow_disrupt)
    soft = tuple(sorted((k, c) for k, c in s.soft.get(gpu.key, []) if k is not None))
    soft_whole = next((c for k, c in s.soft.get(gpu.key, []) if k is None), -1)
    # The processes on a MIG-disabled GPU where a profiled workload runs are taken to be that workload's
    # (discovery sees processes, not whose they are): its move is charged as a move, not a second time as
    # stopping unprofiled work, which would make freeing such a GPU never worth it.
    explained = soft_whole >= 0 or any(it.running_on is None for it in s.running.get(gpu.key, []))
    busy_whole = gpu.whole_busy and problem.policy.allow_disrupt and not explained
    if not problem.policy.allow_disrupt:
        hard |= busy
    soft_busy = busy if problem.policy.allow_disrupt else frozenset()
    host = gpu.host if gpu.host in host_tags or gpu.key in gpu_tags else None
    idx = gpu.index if gpu.key in gpu_tags else None
    present = frozenset(grp for it in s.running.get(gpu.key, []) for grp in it.groups)
    risky = s.risky.get(gpu.key, set())
    risky_keys, risky_whole = frozenset(k for k in risky if k is not None), None in risky
    gk = (gpu.model, gpu.current, frozenset(hard), hard_whole, soft, soft_busy, soft_whole, busy_whole, host, idx,
          present, risky_keys, risky_whole, gpu.allowed, zone)
    if gk not in groups:
        # idle: a function of what the key holds (current layout, kept, soft and busy instances)
        taken = {k for k in s.hard.get(gpu.key, set()) if k is not None} | {k for k, _ in soft} | busy
        idle = frozenset(key(model, i) for i in (gpu.current.instances if gpu.current else ())) - taken
        groups[gk] = Group(len(groups), gpu.model, gpu.current, frozenset(hard), hard_whole, soft, soft_busy,
                           soft_whole, busy_whole, host, idx, present, risky_keys, risky_whole, idle,
                           gpu.allowed, zone)
    return groups[gk]
