"""From counts to concrete GPUs and workloads (pure, deterministic).

GPUs of a group take the group's patterns in pattern order, in (host, index) order. Running items
whose instance the pattern keeps stay on it; the rest join their class's queue. Then, in this order:

1. classes planned per group (pinned ones, and those of sets the planner refined): scarcest profile
   first, lowest free start on the first GPU of the group that breaks no spread rule;
2. anti-affine classes (per model), one set at a time, the most constrained first: a maximum matching
   of its members to distinct GPUs (host scope: hosts) with a free instance of the member's profile and
   no member of its sets, the GPUs with the most free instances of that profile preferred;
3. every other class fills free instances of its profile model-wide in GPU order;
4. a pinned or anti-affine member still without a place takes any free instance it fits on a GPU that
   breaks no spread rule (smallest profile first), or one freed by moving an item placed here to a free
   instance elsewhere; one that finds none is reported, never misplaced.

A GPU (host scope: host) where a member of a set runs now, kept or not, takes no other member of that
set: the rule the model counts with.

Each GPU's target is its kept instances plus the instances that received a workload; a GPU whose
pattern is its current layout keeps that layout as it is.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from migplan.catalog.geometry import GpuModel
from migplan.catalog.layout import Instance, Layout
from migplan.model.state import GpuKey, GpuState
from migplan.planner.formulation import Formulation, PatternInfo
from migplan.planner.groups import Group, Klass, class_key
from migplan.planner.patterns import WHOLE, Key, key, keys
from migplan.planner.problem import Item
from migplan.profiles import WHOLE_GPU

Where = tuple[GpuKey, Instance | None]
WHOLE_PLACE = Instance(0, WHOLE_GPU)  # the one place a MIG-disabled GPU offers (placed as instance None)


@dataclass
class Mapped:
    targets: dict[GpuKey, Layout | None] = field(default_factory=dict)
    placed: dict[str, Where] = field(default_factory=dict)
    unplaced: dict[str, str] = field(default_factory=dict)
    kept: set[str] = field(default_factory=set)  # items that stay where they run


@dataclass
class _Slots:
    gpu: GpuState
    keep: list[Instance]  # current instances that stay
    free: dict[str, list[Instance]]  # profile -> free instances, lowest start first
    used: list[Instance] = field(default_factory=list)
    whole: bool = False
    same: bool = False  # pattern is the current layout: keep it as it is


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
    return _Slots(gpu, keep, dict(free), same=not info.change and len(info.pattern) > 0)


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


class _Mapper:
    def __init__(self, f: Formulation, values: tuple[float, ...]) -> None:
        self.f, self.values = f, values
        self.m = Mapped()
        self.queue: dict[int, list[Item]] = defaultdict(list)
        self.klass = {c.key: c for c in f.split.classes}
        self.slots: dict[int, list[_Slots]] = {}
        self.spots: Spots = defaultdict(Counter)
        self.scope = f.problem.policy.anti_affinity_scope
        self.on: dict[GpuKey, list[tuple[Item, Instance, str]]] = defaultdict(list)  # placed here, may move
        self.budget = REPAIR_BUDGET

    def count(self, var: int) -> int:
        return int(round(self.values[var]))

    def lay_out(self) -> None:
        p, s = self.f.problem, self.f.split
        for name, where in s.kept.items():
            self.m.placed[name] = where
            self.m.kept.add(name)
        self.m.unplaced.update(s.unplaced)
        for c in s.classes:
            self.queue[c.idx].extend(c.free)
        for g in s.groups:
            pats = self.f.patterns[g.idx]
            order = [pi for pi in range(len(pats)) for _ in range(self.count(self.f.x[(g.idx, pi)]))]
            gpus = sorted(g.gpus, key=lambda x: x.key)
            self.slots[g.idx] = [
                _slots(p.models[g.model], g, gpu, pats[pi], s.running.get(gpu.key, []), self.m, self.queue,
                       self.klass, set(s.forced)) for gpu, pi in zip(gpus, order, strict=True)]
        for gk, items in s.running.items():  # where a member runs now (kept, outgrown or moving), no other goes:
            for it in items:  # the rule the model counts with (groups.Group.present)
                for a in it.groups:
                    self.spots[a][gk[0] if self.scope == "host" else gk] += 1

    def place(self, it: Item, sl: _Slots, q: str, inst: Instance | None = None) -> None:
        inst = _take(sl, q, inst)
        self.m.placed[it.name] = (sl.gpu.key, None if q == WHOLE_GPU else inst)
        self.on[sl.gpu.key].append((it, inst, q))
        for a in it.groups:
            self.spots[a][_spot(sl.gpu, self.scope)] += 1

    def unplace(self, it: Item, sl: _Slots) -> Instance:
        """Take back an item this mapping placed on the GPU; its instance is free again."""
        k = next(i for i, (x, _, _) in enumerate(self.on[sl.gpu.key]) if x.name == it.name)
        _, inst, q = self.on[sl.gpu.key].pop(k)
        _give_back(sl, q, inst)
        del self.m.placed[it.name]
        for a in it.groups:
            self.spots[a][_spot(sl.gpu, self.scope)] -= 1
        return inst

    def _scarcity(self, req: tuple[int, int, str]) -> tuple[int, int, int, str]:
        c, gi, q = req
        return (sum(1 for x in self.slots[gi] if x.free.get(q)), c, gi, q)

    def special(self) -> None:
        """Items planned per group (pinned, or of a refined set), scarcest profile first (fewest GPUs offering
        it), each on the first GPU of its group with a free instance where it breaks no spread rule."""
        reqs = [k for k, var in sorted(self.f.y_group.items()) for _ in range(self.count(var))]
        for c, gi, q in sorted(reqs, key=self._scarcity):
            if self.queue[c]:
                it = self.queue[c][0]
                sl = next((x for x in self.slots[gi] if x.free.get(q) and not _conflict(it, x.gpu, self.spots,
                                                                                           self.scope)), None)
                if sl is not None:
                    self.queue[c].pop(0)
                    self.place(it, sl, q)

    def _by_model(self) -> dict[str, list[_Slots]]:
        by_model: dict[str, list[_Slots]] = defaultdict(list)
        for g in self.f.split.groups:
            by_model[g.model].extend(self.slots[g.idx])
        return by_model

    def anti(self) -> None:
        """Anti-affine items (per model), one set at a time, the most constrained set first: a maximum matching
        of its members (each with the profile the solver gave it) to distinct GPUs (hosts) with a free instance
        of that profile and no member of its sets, preferring those with the most free instances (augmenting
        paths over the best few candidates, then over more). What no matching places is left to `repair`."""
        classes = {c.idx: c for c in self.f.split.classes}
        by_model = self._by_model()
        heaps: dict[tuple[str, str], list[tuple[int, int]]] = {}  # (-free instances, slot) per model and profile
        units: dict[str, list[Req]] = defaultdict(list)
        for (c, model_id, q), var in sorted(self.f.y_pool.items()):
            if classes[c].anti:
                if (model_id, q) not in heaps:
                    heaps[(model_id, q)] = [(-len(sl.free[q]), i) for i, sl in enumerate(by_model[model_id])
                                            if sl.free.get(q)]
                    heapq.heapify(heaps[(model_id, q)])
                if self.count(var):
                    units[min(classes[c].sample.groups)].extend([(c, model_id, q)] * self.count(var))

        def scarce(r: Req) -> int:
            return len(heaps[(r[1], r[2])])
        for a in sorted(units, key=lambda a: (min(map(scarce, units[a])), -len(units[a]), a)):
            reqs = sorted(units[a], key=lambda r: (scarce(r), r))
            picks = self._match(reqs, heaps, by_model, 2 * len(reqs) + 8)
            if len(picks) < len(reqs):
                picks = self._match(reqs, heaps, by_model, max(256, 8 * len(reqs)))
            for r, i in sorted(picks.items()):
                c, model_id, q = reqs[r]
                if self.queue[c]:
                    sl = by_model[model_id][i]
                    self.place(self.queue[c].pop(0), sl, q)
                    if sl.free.get(q):
                        heapq.heappush(heaps[(model_id, q)], (-len(sl.free[q]), i))

    def _candidates(self, req: Req, heaps: dict[tuple[str, str], list[tuple[int, int]]],
                    by_model: dict[str, list[_Slots]], limit: int) -> list[tuple[object, int]]:
        """Up to `limit` (spot, slot) for the request, one slot per GPU (host), most free instances first."""
        c, model_id, q = req
        if not self.queue[c]:
            return []
        it, heap, slots = self.queue[c][0], heaps[(model_id, q)], by_model[model_id]
        out: list[tuple[object, int]] = []
        seen: set[object] = set()
        popped = []
        while heap and len(out) < limit:
            neg, i = heapq.heappop(heap)
            if -neg != len(slots[i].free.get(q, ())):
                continue  # stale: the count changed since this entry was pushed
            popped.append((neg, i))
            spot = _spot(slots[i].gpu, self.scope)
            if spot not in seen and not _conflict(it, slots[i].gpu, self.spots, self.scope):
                seen.add(spot)
                out.append((spot, i))
        for e in popped:
            heapq.heappush(heap, e)
        return out

    def _match(self, reqs: list[Req], heaps: dict[tuple[str, str], list[tuple[int, int]]],
               by_model: dict[str, list[_Slots]], limit: int) -> dict[int, int]:
        """Request index -> slot: a maximum matching to distinct spots (Kuhn's augmenting paths; for a set of
        more than MATCH_MAX members, each in turn takes its best candidate)."""
        cache: dict[Req, list[tuple[object, int]]] = {}
        cands = [cache.setdefault(r, self._candidates(r, heaps, by_model, limit)) for r in reqs]
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

    def pool(self) -> None:
        classes = {c.idx: c for c in self.f.split.classes}
        by_model = self._by_model()
        # (model, profile) -> the first GPU that may still have a free instance of it: placing only takes instances,
        # so the GPUs before it never have one again (a scan from the first GPU per variable was quadratic)
        first: dict[tuple[str, str], int] = {}
        for (c, model_id, q), var in sorted(self.f.y_pool.items()):
            if classes[c].anti:
                continue
            todo = self.count(var)
            sls, k = by_model[model_id], first.get((model_id, q), 0)
            while todo and self.queue[c] and k < len(sls):
                if sls[k].free.get(q):
                    self.place(self.queue[c].pop(0), sls[k], q)
                    todo -= 1
                else:
                    k += 1
            first[(model_id, q)] = k

    def repair(self) -> None:
        """Pinned or anti-affine items the steps above could not place (the model counts GPUs and instances,
        not which instance of which GPU each set may use): a free instance they fit on a GPU (of their pin)
        that breaks no spread rule, smallest profile first; else an instance of such a GPU whose item can move
        to a free instance elsewhere. A class whose item finds neither is done: the rest would not either."""
        by_model = self._by_model()
        if not any(self.queue[c.idx] for c in self.f.split.classes if c.anti or c.special):
            return
        free: Free = defaultdict(list)  # GPUs with a free instance (entries may be stale: checked on use)
        for model_id, sls in by_model.items():
            for sl in sls:
                for q, insts in sl.free.items():
                    if insts:
                        free[(model_id, q)].append(sl)
        for c in self.f.split.classes:
            if not (c.anti or c.special):
                continue
            while self.queue[c.idx]:
                it = self.queue[c.idx][0]
                spot = self._free_spot(it, free)
                if spot is not None:
                    self.place(it, *spot)
                elif not self._make_room(it, by_model, free):
                    break
                self.queue[c.idx].pop(0)

    def _free_spot(self, it: Item, free: Free, away: _Slots | None = None, own: object = None,
                   not_at: object = None) -> tuple[_Slots, str] | None:
        """The first free instance `it` fits (smallest profile first) on a GPU other than `away` (and not at the
        spot `not_at`) where it breaks no pin or spread rule; `own`: the spot where it is now."""
        for model_id, profs in it.fits:
            for q in profs:
                for sl in free.get((model_id, q), ()):
                    self.budget -= 1
                    if self.budget < 0:
                        return None
                    if sl is not away and sl.free.get(q) and _pin_ok(it, sl.gpu) and (
                            not_at is None or _spot(sl.gpu, self.scope) != not_at) and not _conflict(
                            it, sl.gpu, self.spots, self.scope, own):
                        return sl, q
        return None

    def _make_room(self, it: Item, by_model: dict[str, list[_Slots]], free: Free) -> bool:
        """Move one item this mapping placed on a GPU (of `it`'s pin) to a free instance elsewhere, so that `it`
        can take its instance (or a free one there) without breaking a spread rule: an item on an instance
        `it` fits, or a member of one of `it`'s sets that is in its way (an augmenting path of length two)."""
        for model_id, profs in it.fits:
            for sl in by_model[model_id]:
                self.budget -= 1
                if self.budget < 0:
                    return False
                if not _pin_ok(it, sl.gpu):
                    continue
                spot = _spot(sl.gpu, self.scope)
                for other, inst, q in list(self.on[sl.gpu.key]):
                    if any(self.spots[a][spot] > (1 if a in other.groups else 0) for a in it.groups):
                        continue  # `it` would break a spread rule here even with `other` gone
                    take = q if q in profs else next((p for p in profs if sl.free.get(p)), None)
                    if take is None:
                        continue
                    in_way = bool(set(it.groups) & set(other.groups))
                    dest = self._free_spot(other, free, away=sl, own=spot, not_at=spot if in_way else None)
                    if dest is None:
                        continue
                    self.unplace(other, sl)
                    self.place(other, *dest)
                    self.place(it, sl, take, inst if take == q else None)
                    if sl.free.get(q) and sl not in free[(model_id, q)]:
                        free[(model_id, q)].append(sl)  # `other`'s instance, free now
                    return True
        return False

    def finish(self) -> Mapped:
        where = "host" if self.scope == "host" else "GPU"
        for items in self.queue.values():
            for it in items:
                spread = (f" on a {where} without another member of {', '.join(map(_set_name, it.groups))}"
                          if it.groups else "")
                self.m.unplaced.setdefault(it.name, f"left out: not enough room next to higher-priority demand"
                                                    f"{spread} (priority {it.priority})")
        p = self.f.problem
        for gpu in p.gpus:
            if gpu.hold:
                self.m.targets[gpu.key] = gpu.current
        for sls in self.slots.values():
            for sl in sls:
                self.m.targets[sl.gpu.key] = _target(p.models[sl.gpu.model], sl)
        return self.m


def _target(model: GpuModel, sl: _Slots) -> Layout | None:
    cur = sl.gpu.current
    if sl.whole:
        return None
    if sl.same:
        return cur
    insts = sl.keep + sl.used
    if not insts:
        return None if cur is None else Layout()
    target = Layout.of(insts)
    if cur is not None and keys(model, cur) == keys(model, target):
        return cur
    return target


def map_solution(f: Formulation, values: tuple[float, ...]) -> Mapped:
    mp = _Mapper(f, values)
    mp.lay_out()
    mp.special()
    mp.anti()
    mp.pool()
    mp.repair()
    return mp.finish()
