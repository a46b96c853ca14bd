"""Baselines, re-implemented here from the documented behaviour of other tools (labelled as such).

All use migplan's right-sizing (the same `Item.fits`), so only the packing differs:

* whole-gpu       one whole GPU per workload (MIG disabled).
* uniform-*       the best single mig-parted-style uniform layout (all-1g, all-2g, all-3g, all-balanced) on every
                  GPU, workloads largest first into the smallest free fitting instance, first GPU first.
* hami-ff         HAMi-style first fit: workloads in arrival order, the smallest-memory profile that fits, fixed
                  preference placement (1g/3g highest start first, others lowest start first), first GPU that takes it.
* nos-greedy      nos-style: walk GPUs by host name; give each GPU the enumerated maximal layout that provides the
                  most of the still-missing profiles (each workload's smallest fitting profile), then fill it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from migplan.catalog.geometry import GpuModel
from migplan.fleet.state import GpuState
from migplan.layout import Instance, Layout
from migplan.planner.patterns import maximal
from migplan.planner.problem import Item, Problem


@dataclass
class Gpu:
    """Free/used bookkeeping with bit masks (fast enough for 10,240 GPUs)."""

    pg: GpuState
    model: GpuModel
    mask: int = 0
    compute: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    instances: list[Instance] = field(default_factory=list)
    whole: bool = False

    def fits(self, q: str, start: int) -> bool:
        p = self.model.profile(q)
        m = ((1 << p.memory_slices) - 1) << start
        return (not self.whole and not self.mask & m and self.compute + p.compute_slices <= self.model.compute_slices
                and self.counts[q] < p.max_count)

    def add(self, q: str, start: int) -> Instance:
        p = self.model.profile(q)
        self.mask |= ((1 << p.memory_slices) - 1) << start
        self.compute += p.compute_slices
        self.counts[q] += 1
        inst = Instance(start, q)
        self.instances.append(inst)
        return inst


@dataclass
class Result:
    name: str
    gpus: list[Gpu]
    placed: dict[str, tuple[int, Instance | None]] = field(default_factory=dict)  # item -> (gpu idx, instance)

    def used(self) -> int:
        return len({g for g, _ in self.placed.values()})

    def value(self, items: dict[str, Item]) -> float:
        return sum(items[n].value for n in self.placed)

    def disrupted(self, items: dict[str, Item]) -> int:
        """Running workloads not left where they run (moved, or not placed at all)."""
        n = 0
        for name, it in items.items():
            if it.running is None:
                continue
            where = self.placed.get(name)
            n += int(where is None or (self.gpus[where[0]].pg.key, where[1]) != (it.running, it.running_on))
        return n

    def churn(self) -> int:
        """GPUs whose layout differs from the current one (a GPU left alone keeps its layout)."""
        n = 0
        for g in self.gpus:
            if not g.instances and not g.whole:
                continue
            target = None if g.whole else Layout.of(g.instances)
            n += int(target != g.pg.current)
        return n


def _gpus(problem: Problem) -> list[Gpu]:
    return [Gpu(g, problem.models[g.model]) for g in problem.gpus if g.hold is None]


def whole_gpu(problem: Problem) -> Result:
    r = Result("whole-gpu", _gpus(problem))
    free = list(range(len(r.gpus)))
    for it in sorted(problem.items, key=lambda i: (-i.value, i.name)):
        for k, gi in enumerate(free):
            g = r.gpus[gi]
            if g.model.full_profile.name in it.profiles(g.model.id):
                g.whole = True
                r.placed[it.name] = (gi, None)
                free.pop(k)
                break
    return r


def _uniform_layout(model: GpuModel, kind: str) -> list[tuple[str, int]]:
    plain = model.plain_profiles
    by_g: dict[int, list[str]] = {}
    for p in sorted(plain, key=lambda p: (p.memory_slices, p.name)):
        by_g.setdefault(p.compute_slices, []).append(p.name)
    wanted = {"all-1g": [1] * 7, "all-2g": [2] * 3, "all-3g": [3] * 2, "all-balanced": [3, 2, 1, 1]}[kind]
    g = Gpu(GpuState("x", 0, model.id), model)
    out = []
    for size in wanted:
        for q in by_g.get(size, [])[:1]:
            start = next((s for s in model.profile(q).starts if g.fits(q, s)), None)
            if start is not None:
                g.add(q, start)
                out.append((q, start))
    return out


def uniform(problem: Problem, kind: str) -> Result:
    r = Result(f"uniform-{kind}", _gpus(problem))
    free: list[dict[str, list[Instance]]] = []
    for g in r.gpus:
        slots: dict[str, list[Instance]] = {}
        for q, s in _uniform_layout(g.model, kind):
            slots.setdefault(q, []).append(g.add(q, s))
        free.append(slots)
    first: dict[tuple[str, str], int] = {}  # (model, profile) -> first GPU that may still have a free one
    for it in sorted(problem.items, key=lambda i: (-max(g for _, g in i.need) if i.need else 0, i.name)):
        best: tuple[int, str] | None = None
        for model_id, profs in it.fits:
            for q in profs:
                k = first.get((model_id, q), 0)
                while k < len(r.gpus) and (r.gpus[k].model.id != model_id or not free[k].get(q)):
                    k += 1
                first[(model_id, q)] = k
                if k < len(r.gpus) and (best is None or k < best[0]):
                    best = (k, q)
                    break
        if best is not None:
            gi, q = best
            r.placed[it.name] = (gi, free[gi][q].pop(0))
    return r


def best_uniform(problem: Problem) -> Result:
    items = {i.name: i for i in problem.items}
    results = [uniform(problem, k) for k in ("all-1g", "all-2g", "all-3g", "all-balanced")]
    return max(results, key=lambda r: (round(r.value(items), 6), -r.used()))


def _smallest_memory(it: Item, model: GpuModel) -> str | None:
    profs = it.profiles(model.id)
    if not profs:
        return None
    return min(profs, key=lambda q: (model.profile(q).memory_mib, model.profile(q).compute_slices))


def _preferred_starts(model: GpuModel, q: str) -> list[int]:
    p = model.profile(q)
    high = p.compute_slices in (1, 3)
    return sorted(p.starts, reverse=high)


def hami_first_fit(problem: Problem) -> Result:
    r = Result("hami-ff", _gpus(problem))
    by_model: dict[str, list[int]] = {}
    for gi, g in enumerate(r.gpus):
        by_model.setdefault(g.model.id, []).append(gi)
    first: dict[tuple[str, str], int] = {}  # (model, profile) -> position in by_model of the first GPU that may fit
    for it in problem.items:  # arrival order; the lowest-numbered GPU of any model that takes it
        best: tuple[int, str, int] | None = None
        for m, gis in by_model.items():
            q = _smallest_memory(it, r.gpus[gis[0]].model)
            if q is None:
                continue
            k = first.get((m, q), 0)
            while k < len(gis) and _hami_start(r.gpus[gis[k]], q) is None:
                k += 1  # instances are only added, so a GPU that cannot take q now never will
            first[(m, q)] = k
            if k < len(gis) and (best is None or gis[k] < best[0]):
                best = (gis[k], q, 0)
        if best is not None:
            g = r.gpus[best[0]]
            start_slot = _hami_start(g, best[1])
            assert start_slot is not None
            r.placed[it.name] = (best[0], g.add(best[1], start_slot))
    return r


def _hami_start(g: Gpu, q: str) -> int | None:
    return next((s for s in _preferred_starts(g.model, q) if g.fits(q, s)), None)


def nos_greedy(problem: Problem) -> Result:
    r = Result("nos-greedy", _gpus(problem))
    waiting = sorted(problem.items, key=lambda i: (-i.priority, min((g for _, g in i.need), default=0), i.name))
    models = {g.model.id: g.model for g in r.gpus}
    queues: dict[tuple[str, str], list[Item]] = {}  # (model, smallest profile) -> waiting items, in order
    for it in waiting:
        for m, model in models.items():
            q = _smallest_memory(it, model)
            if q is not None:
                queues.setdefault((m, q), []).append(it)
    heads = dict.fromkeys(queues, 0)
    lacking: dict[str, Counter[str]] = {m: Counter() for m in models}
    for (m, q), items in queues.items():
        lacking[m][q] = len(items)
    counts = {m: [(lay, lay.profile_counts()) for lay in maximal(model)] for m, model in models.items()}
    for gi in sorted(range(len(r.gpus)), key=lambda k: r.gpus[k].pg.key):
        g = r.gpus[gi]
        need = lacking[g.model.id]
        if not +need:
            continue
        best = max(counts[g.model.id], key=lambda lc: sum(min(n, need[q]) for q, n in lc[1].items()))[0]
        for inst in best.instances:
            it = _next(queues, heads, (g.model.id, inst.profile), r.placed)
            if it is None:
                continue
            g.add(inst.profile, inst.start)
            r.placed[it.name] = (gi, inst)
            for m, model in models.items():
                q = _smallest_memory(it, model)
                if q is not None:
                    lacking[m][q] -= 1
    return r


def _next(queues: dict[tuple[str, str], list[Item]], heads: dict[tuple[str, str], int], key: tuple[str, str],
          placed: dict[str, tuple[int, Instance | None]]) -> Item | None:
    items = queues.get(key, [])
    k = heads.get(key, 0)
    while k < len(items) and items[k].name in placed:
        k += 1
    heads[key] = k
    return items[k] if k < len(items) else None


BASELINES = {"whole-gpu": whole_gpu, "uniform": best_uniform, "hami-ff": hami_first_fit, "nos-greedy": nos_greedy}
