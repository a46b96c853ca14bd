"""From counts to concrete GPUs and workloads (pure, deterministic).

GPUs of a group take the group's patterns in pattern order, in (host, index) order. Running items
whose instance the pattern keeps stay on it; the rest join their class's queue. Then, in this order:

1. classes planned per group (pinned ones, and those of sets the planner refined): scarcest profile
   first, lowest free start on the first GPU of the group that breaks no spread rule;
2. anti-affine classes (per model), one set at a time, the most constrained first: a maximum matching
   of its members to distinct GPUs (host scope: hosts) with a free instance of the member's profile and
   no member of its sets, the GPUs with the most free instances of that profile preferred;
3. every other class fills free instances of its profile model-wide in GPU order;
4. a pinned, eligible-on-some-hosts or anti-affine member still without a place takes any free instance it fits
   on a GPU that breaks no pin, eligibility or spread rule (smallest profile first), or one freed by moving an
   item placed here to a free instance elsewhere; one that finds none is reported, never misplaced.

A GPU (host scope: host) where a member of a set runs now, kept or not, takes no other member of that
set: the rule the model counts with.

Each GPU's target is its kept instances plus the instances that received a workload; a GPU whose
pattern is its current layout keeps that layout as it is. A GPU whose rule (`GpuState.allowed`) that target
would break (a MIG GPU left without an instance) gets its pattern's instances instead.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from migplan.catalog.geometry import GpuModel
from migplan.catalog.layout import Instance, Layout
from migplan.model.state import GpuKey, GpuState
from migplan.planner.formulation import Formulation, PatternInfo, spare_models
from migplan.planner.groups import Group, Klass, class_key
from migplan.planner.patterns import WHOLE, Key, key, keys
from migplan.planner.problem import Item
from migplan.profiles import WHOLE_GPU, may_use

Where = tuple[GpuKey, Instance | None]
WHOLE_PLACE = Instance(0, WHOLE_GPU)  # the one place a MIG-disabled GPU offers (placed as instance None)


@dataclass
class Mapped:
    targets: dict[GpuKey, Layout | None] = field(default_factory=dict)
    placed: dict[str, Where] = field(default_factory=dict)
    unplaced: dict[str, str] = field(default_factory=dict)
    kept: set[str] = field(default_factory=set)  # items that stay where they run
    at_risk: dict[str, str] = field(default_factory=dict)  # running items at risk where they run -> why (Split)


@dataclass
class _Slots:
    gpu: GpuState
    keep: list[Instance]  # current instances that stay
    free: dict[str, list[Instance]]  # profile -> free instances, lowest start first
    used: list[Instance] = field(default_factory=list)
    whole: bool = False
    same: bool = False  # pattern is the current layout: keep it as it is
    spare: list[Instance] = field(default_factory=list)  # free instances kept as spare capacity (Policy.spare)
    pattern: Layout | None = None  # the pattern it was given (None: WHOLE)


def _slots(model: GpuModel, g: Group, gpu: GpuState, info: PatternInfo, running: list[Item],
           m: Mapped, queue: dict[int, list[Item]], klass: dict[tuple[object, ...], Klass], skip: set[str]) -> _Slots:
    if info.pattern is WHOLE:
        for it in running:
            if it.name in m.placed or it.name in m.unplaced or it.name in skip:
                continue
            if it.running_on is None and not info.evict:
                m.placed[it.name] = (gpu.key, None)
                m.kept.add(it.name)
            elif class_key(it) in klass:
                queue[klass[class_key(it)].idx].append(it)  # its instance goes with MIG: it moves
        return _Slots(gpu, [], {WHOLE_GPU: [WHOLE_PLACE]} if info.free[WHOLE_GPU] else {}, whole=True)
    pk = keys(model, info.pattern)
    current = {key(model, i): i for i in (gpu.current.instances if gpu.current else ())}
    occupied: set[Key] = set(g.hard) | (set(g.soft_busy) & pk)
    for it in running:
        if it.name in m.placed or it.name in m.unplaced or it.name in skip:
            continue
        k = key(model, it.running_on) if it.running_on else None
        if k is not None and k in pk and class_key(it) in klass:
            m.placed[it.name] = (gpu.key, it.running_on)
            m.kept.add(it.name)
            occupied.add(k)
        elif class_key(it) in klass:
            queue[klass[class_key(it)].idx].append(it)
    free: dict[str, list[Instance]] = defaultdict(list)
    for inst in info.pattern.instances:
        if key(model, inst) not in occupied:
            free[key(model, inst)[1]].append(inst)
    keep = [current[k] for k in sorted(occupied) if k in current]
    return _Slots(gpu, keep, dict(free), same=not info.change and len(info.pattern) > 0, pattern=info.pattern)


Spots = dict[str, Counter[object]]  # anti-affinity set -> members per GPU (or host)


def _spot(gpu: GpuState, scope: str) -> object:
    return gpu.host if scope == "host" else gpu.key


def _conflict(it: Item, gpu: GpuState, where: Spots, scope: str, own: object = None) -> bool:
    """A member of one of its sets is on this GPU (host) already; `own`: it is itself there, not counted."""
    spot = _spot(gpu, scope)
    mine = 1 if own is not None and own == spot else 0
    return any(where[a][spot] > mine for a in it.groups)


def _pin_ok(it: Item, gpu: GpuState) -> bool:
    return it.pin_host is None or (it.pin_host == gpu.host and (it.pin_gpu is None or it.pin_gpu == gpu.index))


def _may(it: Item, gpu: GpuState, q: str) -> bool:
    """Its pin and its eligibility let it take a `q` instance (or the whole GPU) of this GPU."""
    return _pin_ok(it, gpu) and may_use(it.eligible, q, gpu.host)


def _set_name(a: str) -> str:
    """'aa:web' -> "anti-affinity set 'web'", 'replicas:db' -> "the replicas of 'db'"."""
    kind, _, name = a.partition(":")
    return f"the replicas of '{name}'" if kind == "replicas" else f"anti-affinity set '{name}'"


def _take(slots: _Slots, q: str, inst: Instance | None = None) -> Instance:
    """The lowest free q-instance (or `inst`) of the GPU, now used."""
    inst = slots.free[q].pop(0) if inst is None else slots.free[q].pop(slots.free[q].index(inst))
    slots.used.append(inst)
    return inst


def _give_back(slots: _Slots, q: str, inst: Instance) -> None:
    slots.used.remove(inst)
    slots.free.setdefault(q, []).append(inst)
    slots.free[q].sort(key=lambda i: i.start)


Req = tuple[int, str, str]  # (class, model, profile): one member the solver placed
MATCH_MAX = 64  # members of one set matched exactly (augmenting paths); larger sets greedily
Free = dict[tuple[str, str], list[_Slots]]  # (model, profile) -> GPUs that had a free instance of it
REPAIR_BUDGET = 200_000  # candidate places the repair step looks at, at most (it is rarely needed)


class _MappingState:
    """What the mapping has decided so far and what it still has to place: the result being built (`mapped`), the
    items of each class still waiting for a place (`waiting`), each group's GPUs with their free instances
    (`slots`), how many members of each anti-affinity set are on each GPU or host (`spread`), and the items this
    mapping placed on each GPU (`placed_here`, which the repair may move). The steps below (`_place_per_group`,
    `_SpreadMatcher`, `_fill_pools`, `_Repairer`) change it only through `place` and `unplace`."""

    def __init__(self, formulation: Formulation, values: tuple[float, ...]) -> None:
        self.formulation = formulation
        self.values = values  # the solver's value of each variable
        self.mapped = Mapped()
        self.waiting: dict[int, list[Item]] = defaultdict(list)  # class idx -> items without a place, in order
        self.classes_by_key = {c.key: c for c in formulation.split.classes}
        self.slots: dict[int, list[_Slots]] = {}  # group idx -> its GPUs, in (host, index) order
        self.spread: Spots = defaultdict(Counter)
        self.scope = formulation.problem.policy.anti_affinity_scope
        self.placed_here: dict[GpuKey, list[tuple[Item, Instance, str]]] = defaultdict(list)  # placed here, may move

    def count(self, var: int) -> int:
        """The solver's value of variable `var`, as the whole number it stands for."""
        return int(round(self.values[var]))

    def lay_out(self) -> None:
        """The kept and unplaced items of the split, every class's free items waiting, each group's GPUs given the
        group's patterns in pattern order (running items their pattern keeps stay), and where each set's
        members run now."""
        problem, split = self.formulation.problem, self.formulation.split
        for name, where in split.kept.items():
            self.mapped.placed[name] = where
            self.mapped.kept.add(name)
        self.mapped.unplaced.update(split.unplaced)
        self.mapped.at_risk.update(split.at_risk)
        for c in split.classes:
            self.waiting[c.idx].extend(c.free)
        for g in split.groups:
            pats = self.formulation.patterns[g.idx]
            order = [pi for pi in range(len(pats)) for _ in range(self.count(self.formulation.x[(g.idx, pi)]))]
            gpus = sorted(g.gpus, key=lambda x: x.key)
            self.slots[g.idx] = [
                _slots(problem.models[g.model], g, gpu, pats[pi], split.running.get(gpu.key, []), self.mapped,
                       self.waiting, self.classes_by_key, set(split.forced))
                for gpu, pi in zip(gpus, order, strict=True)]
        for gk, items in split.running.items():  # where a member runs now (kept, outgrown or moving), no other goes:
            for it in items:  # the rule the model counts with (groups.Group.present)
                for a in it.groups:
                    self.spread[a][gk[0] if self.scope == "host" else gk] += 1

    def by_model(self) -> dict[str, list[_Slots]]:
        """Every group's GPUs, per GPU model, in group order."""
        by_model: dict[str, list[_Slots]] = defaultdict(list)
        for g in self.formulation.split.groups:
            by_model[g.model].extend(self.slots[g.idx])
        return by_model

    def spot(self, gpu: GpuState) -> object:
        """What a spread rule counts members per: the GPU, or its host (host scope)."""
        return _spot(gpu, self.scope)

    def conflicts(self, it: Item, gpu: GpuState, own: object = None) -> bool:
        """Whether a member of one of `it`'s sets is on this GPU (host) already (`own`: `it` itself is there)."""
        return _conflict(it, gpu, self.spread, self.scope, own)

    def place(self, it: Item, sl: _Slots, q: str, inst: Instance | None = None) -> None:
        """`it` on the GPU's lowest free `q` instance (or `inst`)."""
        inst = _take(sl, q, inst)
        self.mapped.placed[it.name] = (sl.gpu.key, None if q == WHOLE_GPU else inst)
        self.placed_here[sl.gpu.key].append((it, inst, q))
        for a in it.groups:
            self.spread[a][self.spot(sl.gpu)] += 1

    def unplace(self, it: Item, sl: _Slots) -> Instance:
        """Take back an item this mapping placed on the GPU; its instance is free again."""
        k = next(i for i, (x, _, _) in enumerate(self.placed_here[sl.gpu.key]) if x.name == it.name)
        _, inst, q = self.placed_here[sl.gpu.key].pop(k)
        _give_back(sl, q, inst)
        del self.mapped.placed[it.name]
        for a in it.groups:
            self.spread[a][self.spot(sl.gpu)] -= 1
        return inst

    def finish(self) -> Mapped:
        """The result: every item still waiting reported as left out, and each GPU's target layout."""
        where = "host" if self.scope == "host" else "GPU"
        for items in self.waiting.values():
            for it in items:
                spread = (f" on a {where} without another member of {', '.join(map(_set_name, it.groups))}"
                          if it.groups else "")
                self.mapped.unplaced.setdefault(it.name, f"left out: not enough room next to higher-priority demand"
                                                         f"{spread} (priority {it.priority})")
        problem = self.formulation.problem
        keep_idle = not problem.policy.reclaim_idle
        self.reserve_spare(keep_idle)
        for gpu in problem.gpus:
            if gpu.hold:
                self.mapped.targets[gpu.key] = gpu.current
        for sls in self.slots.values():
            for sl in sls:
                self.mapped.targets[sl.gpu.key] = _target(problem.models[sl.gpu.model], sl, keep_idle)
        return self.mapped

    def reserve_spare(self, keep_idle: bool) -> None:
        """Per `spare` entry, free instances of its profile kept in the targets until there are N: first those
        the target keeps anyway (an unchanged layout, an idle instance kept), then others of the chosen
        patterns, in GPU order (the spare rows made the patterns offer that many)."""
        problem = self.formulation.problem
        for entry, n in problem.policy.spare:
            q, models = spare_models(problem, entry)
            slots = [sl for g in self.formulation.split.groups if g.model in models for sl in self.slots[g.idx]]
            have = 0
            for sl in slots:
                cur = sl.gpu.current.instances if sl.gpu.current else ()
                have += sum(1 for i in sl.free.get(q, []) if sl.same or (keep_idle and i in cur)) + sum(
                    1 for i in sl.spare if i.profile == q)
            for sl in slots:
                if have >= n:
                    break
                cur = sl.gpu.current.instances if sl.gpu.current else ()
                for inst in [i for i in sl.free.get(q, []) if not (sl.same or (keep_idle and i in cur))]:
                    if have >= n:
                        break
                    sl.free[q].remove(inst)
                    sl.spare.append(inst)
                    have += 1


def _place_per_group(state: _MappingState) -> None:
    """Items planned per group (pinned, or of a refined set), scarcest profile first (fewest GPUs offering
    it), each on the first GPU of its group with a free instance where it breaks no spread rule."""

    def scarcity(req: tuple[int, int, str]) -> tuple[int, int, int, str]:
        c, gi, q = req
        return (sum(1 for x in state.slots[gi] if x.free.get(q)), c, gi, q)

    reqs = [k for k, var in sorted(state.formulation.y_group.items()) for _ in range(state.count(var))]
    for c, gi, q in sorted(reqs, key=scarcity):
        if state.waiting[c]:
            it = state.waiting[c][0]
            sl = next((x for x in state.slots[gi] if x.free.get(q) and not state.conflicts(it, x.gpu)), None)
            if sl is not None:
                state.waiting[c].pop(0)
                state.place(it, sl, q)


Heaps = dict[tuple[str, str], list[tuple[int, int]]]  # (model, profile) -> (-free instances, slot) of its GPUs


class _SpreadMatcher:
    """Anti-affine items (per model), one set at a time, the most constrained set first: a maximum matching
    of its members (each with the profile the solver gave it) to distinct GPUs (hosts) with a free instance
    of that profile and no member of its sets, preferring those with the most free instances (augmenting
    paths over the best few candidates, then over more). What no matching places is left to `_Repairer`."""

    def __init__(self, state: _MappingState) -> None:
        self.state = state
        self.by_model = state.by_model()
        self.heaps: Heaps = {}  # GPUs with a free instance, most free first (entries may be stale: checked on use)

    def run(self) -> None:
        state = self.state
        classes = {c.idx: c for c in state.formulation.split.classes}
        units: dict[str, list[Req]] = defaultdict(list)
        for (c, model_id, q), var in sorted(state.formulation.y_pool.items()):
            if classes[c].anti:
                if (model_id, q) not in self.heaps:
                    self.heaps[(model_id, q)] = [(-len(sl.free[q]), i) for i, sl in enumerate(self.by_model[model_id])
                                                 if sl.free.get(q)]
                    heapq.heapify(self.heaps[(model_id, q)])
                if state.count(var):
                    units[min(classes[c].sample.groups)].extend([(c, model_id, q)] * state.count(var))

        def scarce(r: Req) -> int:
            return len(self.heaps[(r[1], r[2])])
        for a in sorted(units, key=lambda a: (min(map(scarce, units[a])), -len(units[a]), a)):
            reqs = sorted(units[a], key=lambda r: (scarce(r), r))
            picks = self._match(reqs, 2 * len(reqs) + 8)
            if len(picks) < len(reqs):
                picks = self._match(reqs, max(256, 8 * len(reqs)))
            for r, i in sorted(picks.items()):
                c, model_id, q = reqs[r]
                if state.waiting[c]:
                    sl = self.by_model[model_id][i]
                    state.place(state.waiting[c].pop(0), sl, q)
                    if sl.free.get(q):
                        heapq.heappush(self.heaps[(model_id, q)], (-len(sl.free[q]), i))

    def _candidates(self, req: Req, limit: int) -> list[tuple[object, int]]:
        """Up to `limit` (spot, slot) for the request, one slot per GPU (host), most free instances first."""
        c, model_id, q = req
        state = self.state
        if not state.waiting[c]:
            return []
        it, heap, slots = state.waiting[c][0], self.heaps[(model_id, q)], self.by_model[model_id]
        out: list[tuple[object, int]] = []
        seen: set[object] = set()
        popped = []
        while heap and len(out) < limit:
            neg, i = heapq.heappop(heap)
            if -neg != len(slots[i].free.get(q, ())):
                continue  # stale: the count changed since this entry was pushed
            popped.append((neg, i))
            spot = state.spot(slots[i].gpu)
            if spot not in seen and not state.conflicts(it, slots[i].gpu):
                seen.add(spot)
                out.append((spot, i))
        for e in popped:
            heapq.heappush(heap, e)
        return out

    def _match(self, reqs: list[Req], limit: int) -> dict[int, int]:
        """Request index -> slot: a maximum matching to distinct spots (Kuhn's augmenting paths; for a set of
        more than MATCH_MAX members, each in turn takes its best candidate)."""
        cache: dict[Req, list[tuple[object, int]]] = {}
        cands = [cache.setdefault(r, self._candidates(r, limit)) for r in reqs]
        owner: dict[object, int] = {}
        pick: dict[int, tuple[object, int]] = {}

        def augment(r: int, seen: set[object]) -> bool:
            for spot, i in cands[r]:
                if spot in seen:
                    continue
                seen.add(spot)
                if spot not in owner or augment(owner[spot], seen):
                    owner[spot], pick[r] = r, (spot, i)
                    return True
            return False
        for r in range(len(reqs)):
            if len(reqs) <= MATCH_MAX:
                augment(r, set())
            else:
                free = next(((spot, i) for spot, i in cands[r] if spot not in owner), None)
                if free is not None:
                    owner[free[0]], pick[r] = r, free
        return {r: i for r, (spot, i) in pick.items() if owner.get(spot) == r}


def _fill_pools(state: _MappingState) -> None:
    """Every other class fills free instances of its profile model-wide, in GPU order."""
    classes = {c.idx: c for c in state.formulation.split.classes}
    by_model = state.by_model()
    # (model, profile) -> the first GPU that may still have a free instance of it: placing only takes instances,
    # so the GPUs before it never have one again (a scan from the first GPU per variable was quadratic)
    first: dict[tuple[str, str], int] = {}
    for (c, model_id, q), var in sorted(state.formulation.y_pool.items()):
        if classes[c].anti:
            continue
        todo = state.count(var)
        sls, k = by_model[model_id], first.get((model_id, q), 0)
        while todo and state.waiting[c] and k < len(sls):
            if sls[k].free.get(q):
                state.place(state.waiting[c].pop(0), sls[k], q)
                todo -= 1
            else:
                k += 1
        first[(model_id, q)] = k


class _Repairer:
    """Pinned or anti-affine items the steps above could not place (the model counts GPUs and instances,
    not which instance of which GPU each set may use): a free instance they fit on a GPU (of their pin)
    that breaks no spread rule, smallest profile first; else an instance of such a GPU whose item can move
    to a free instance elsewhere. A class whose item finds neither is done: the rest would not either. At most
    REPAIR_BUDGET candidate places are looked at in all (`budget`)."""

    def __init__(self, state: _MappingState) -> None:
        self.state = state
        self.by_model = state.by_model()
        self.free: Free = defaultdict(list)  # GPUs with a free instance (entries may be stale: checked on use)
        self.budget = REPAIR_BUDGET

    def run(self) -> None:
        state = self.state
        if not any(state.waiting[c.idx] for c in state.formulation.split.classes
                   if c.anti or c.special or c.restricted):
            return
        for model_id, sls in self.by_model.items():
            for sl in sls:
                for q, insts in sl.free.items():
                    if insts:
                        self.free[(model_id, q)].append(sl)
        for c in state.formulation.split.classes:
            if not (c.anti or c.special or c.restricted):
                continue
            while state.waiting[c.idx]:
                it = state.waiting[c.idx][0]
                spot = self._free_spot(it)
                if spot is not None:
                    state.place(it, *spot)
                elif not self._make_room(it):
                    break
                state.waiting[c.idx].pop(0)

    def _free_spot(self, it: Item, away: _Slots | None = None, own: object = None,
                   not_at: object = None) -> tuple[_Slots, str] | None:
        """The first free instance `it` fits (smallest profile first) on a GPU other than `away` (and not at the
        spot `not_at`) where it breaks no pin or spread rule; `own`: the spot where it is now."""
        state = self.state
        for model_id, profs in it.fits:
            for q in profs:
                for sl in self.free.get((model_id, q), ()):
                    self.budget -= 1
                    if self.budget < 0:
                        return None
                    if sl is not away and sl.free.get(q) and _may(it, sl.gpu, q) and (
                            not_at is None or state.spot(sl.gpu) != not_at) and not state.conflicts(it, sl.gpu, own):
                        return sl, q
        return None

    def _make_room(self, it: Item) -> bool:
        """Move one item this mapping placed on a GPU (of `it`'s pin) to a free instance elsewhere, so that `it`
        can take its instance (or a free one there) without breaking a spread rule: an item on an instance
        `it` fits, or a member of one of `it`'s sets that is in its way (an augmenting path of length two)."""
        state = self.state
        for model_id, profs in it.fits:
            for sl in self.by_model[model_id]:
                self.budget -= 1
                if self.budget < 0:
                    return False
                if not _pin_ok(it, sl.gpu):
                    continue
                spot = state.spot(sl.gpu)
                mine = [p for p in profs if may_use(it.eligible, p, sl.gpu.host)]
                for other, inst, q in list(state.placed_here[sl.gpu.key]):
                    if any(state.spread[a][spot] > (1 if a in other.groups else 0) for a in it.groups):
                        continue  # `it` would break a spread rule here even with `other` gone
                    take = q if q in mine else next((p for p in mine if sl.free.get(p)), None)
                    if take is None:
                        continue
                    in_way = bool(set(it.groups) & set(other.groups))
                    dest = self._free_spot(other, away=sl, own=spot, not_at=spot if in_way else None)
                    if dest is None:
                        continue
                    state.unplace(other, sl)
                    state.place(other, *dest)
                    state.place(it, sl, take, inst if take == q else None)
                    if sl.free.get(q) and sl not in self.free[(model_id, q)]:
                        self.free[(model_id, q)].append(sl)  # `other`'s instance, free now
                    return True
        return False


def _target(model: GpuModel, sl: _Slots, keep_idle: bool = True) -> Layout | None:
    """The GPU's target: MIG disabled, its layout as it is, or its kept, used and spare instances and (unless
    `reclaim_idle`) its idle current instances the pattern still holds."""
    cur = sl.gpu.current
    if sl.whole:
        return None
    if sl.same:
        return cur
    insts = sl.keep + sl.used + sl.spare
    if keep_idle and cur is not None:
        insts += [i for free in sl.free.values() for i in free if i in cur.instances]
    if not insts:
        empty = None if cur is None else Layout()
        if sl.pattern is None or sl.gpu.may_hold(empty) is None:
            return empty
        insts = list(sl.pattern.instances)  # its rule wants an instance: the pattern's (a device plugin offers them)
    target = Layout.of(insts)
    if cur is not None and keys(model, cur) == keys(model, target):
        return cur
    return target


def map_solution(formulation: Formulation, values: tuple[float, ...]) -> Mapped:
    """The solver's counts (`values` of the formulation's variables) as concrete GPUs and workloads, in the steps
    of the module notes."""
    state = _MappingState(formulation, values)
    state.lay_out()
    _place_per_group(state)
    _SpreadMatcher(state).run()
    _fill_pools(state)
    _Repairer(state).run()
    return state.finish()
