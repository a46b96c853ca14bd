"""Baselines, re-implemented here from the documented behaviour of other tools (labelled as such).

All use migplan's right-sizing (the same `Item.fits`), so only the packing differs:

* whole-gpu       one whole GPU per workload (MIG disabled).
* uniform         the best of every configuration NVIDIA's mig-parted ships (`MIG_PARTED`: each `all-<profile>` and
                  `all-balanced`, with its device filters and counts), one per "role" across the fleet: each GPU model
                  gets its own label of that role (all-1g: all-1g.5gb on A100-40GB, all-1g.10gb on A100-80GB, ...; see
                  `role`), as an operator labels every node of a model alike; workloads largest first into the smallest
                  free fitting instance, first GPU first. `all-disabled` is the whole-gpu baseline; `all-enabled` (MIG
                  on, no instances) places nothing and is left out.
* hami-ff         HAMi-style first fit: workloads in arrival order, the smallest-memory profile that fits, fixed
                  preference placement (1g/3g highest start first, others lowest start first), first GPU that takes it.
* nos-greedy      nos-style: walk GPUs by host name; give each GPU the enumerated maximal layout that provides the
                  most of the still-missing profiles (each workload's smallest fitting profile), then fill it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from migplan.catalog.geometry import GpuModel
from migplan.catalog.layout import Instance, Layout
from migplan.model.state import GpuState
from migplan.planner.patterns import maximal
from migplan.planner.problem import Item, Problem
from migplan.profiles import WHOLE_GPU


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
            if {g.model.full_profile.name, WHOLE_GPU} & set(it.profiles(g.model.id)):
                g.whole = True
                r.placed[it.name] = (gi, None)
                free.pop(k)
                break
    return r


# Every configuration in NVIDIA mig-parted's deployments/systemd/config-default.yaml (github.com/NVIDIA/mig-parted at
# commit bd7160f4, 2026): label -> entries of (device filter as PCI device ids, or None for "devices: all";
# mig-devices).
# `all-disabled` and `all-enabled` are left out (see the module docstring).
MIG_PARTED: dict[str, tuple[tuple[tuple[str, ...] | None, dict[str, int]], ...]] = {
    "all-1g.5gb": ((None, {"1g.5gb": 7}),),
    "all-1g.5gb.me": ((None, {"1g.5gb+me": 1}),),
    "all-2g.10gb": ((None, {"2g.10gb": 3}),),
    "all-3g.20gb": ((None, {"3g.20gb": 2}),),
    "all-4g.20gb": ((None, {"4g.20gb": 1}),),
    "all-7g.40gb": ((None, {"7g.40gb": 1}),),
    "all-1g.24gb.gfx": ((None, {"1g.24gb+gfx": 4}),),
    "all-1g.24gb.me.all": ((None, {"1g.24gb+me.all": 1}),),
    "all-1g.24gb-me": ((None, {"1g.24gb-me": 4}),),
    "all-2g.48gb": ((None, {"2g.48gb": 2}),),
    "all-2g.48gb.gfx": ((None, {"2g.48gb+gfx": 2}),),
    "all-2g.48gb.me.all": ((None, {"2g.48gb+me.all": 1}),),
    "all-2g.48gb-me": ((None, {"2g.48gb-me": 2}),),
    "all-4g.96gb": ((None, {"4g.96gb": 1}),),
    "all-4g.96gb.gfx": ((None, {"4g.96gb+gfx": 1}),),
    "all-1g.10gb": (
        (("0x2330", "0x2331", "0x2322", "0x20b2", "0x20b5", "0x20f3", "0x20f5", "0x2324"), {"1g.10gb": 7}),
        (("0x20b0", "0x20b1", "0x20f1", "0x20f6"), {"1g.10gb": 4}),
    ),
    "all-1g.10gb.me": ((None, {"1g.10gb+me": 1}),),
    "all-1g.20gb": ((None, {"1g.20gb": 4}),),
    "all-2g.20gb": ((None, {"2g.20gb": 3}),),
    "all-3g.40gb": ((None, {"3g.40gb": 2}),),
    "all-4g.40gb": ((None, {"4g.40gb": 1}),),
    "all-7g.80gb": ((None, {"7g.80gb": 1}),),
    "all-1g.6gb": ((None, {"1g.6gb": 4}),),
    "all-1g.6gb.me": ((None, {"1g.6gb+me": 1}),),
    "all-2g.12gb": ((None, {"2g.12gb": 2}),),
    "all-2g.12gb.me": ((None, {"2g.12gb+me": 1}),),
    "all-4g.24gb": ((None, {"4g.24gb": 1}),),
    "all-1g.12gb": ((None, {"1g.12gb": 7}),),
    "all-1g.12gb.me": ((None, {"1g.12gb+me": 1}),),
    "all-1g.24gb": ((None, {"1g.24gb": 4}),),
    "all-2g.24gb": ((None, {"2g.24gb": 3}),),
    "all-1g.24gb.me": ((None, {"1g.24gb+me": 1}),),
    "all-1g.47gb": ((None, {"1g.47gb": 4}),),
    "all-2g.47gb": ((None, {"2g.47gb": 3}),),
    "all-3g.93gb": ((None, {"3g.93gb": 2}),),
    "all-4g.93gb": ((None, {"4g.93gb": 1}),),
    "all-7g.186gb": ((None, {"7g.186gb": 1}),),
    "all-3g.47gb": ((None, {"3g.47gb": 2}),),
    "all-4g.47gb": ((None, {"4g.47gb": 1}),),
    "all-7g.94gb": ((None, {"7g.94gb": 1}),),
    "all-3g.48gb": ((None, {"3g.48gb": 2}),),
    "all-4g.48gb": ((None, {"4g.48gb": 1}),),
    "all-7g.96gb": ((None, {"7g.96gb": 1}),),
    "all-balanced": (
        (("0x2941",), {"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1}),
        (("0x31c2",), {"1g.35gb": 2, "2g.70gb": 1, "3g.139gb": 1}),
        (("0x2bb5",), {"1g.24gb": 2, "2g.48gb": 1}),
        (("0x2901",), {"1g.23gb": 2, "2g.45gb": 1, "3g.90gb": 1}),
        (("0x3182",), {"1g.34gb": 2, "2g.67gb": 1, "3g.135gb": 1}),
        (("0x2348",), {"1g.18gb": 2, "2g.36gb": 1, "3g.72gb": 1}),
        (("0x2335", "0x233b"), {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}),
        (("0x2321", "0x233a"), {"1g.12gb": 2, "2g.24gb": 1, "3g.47gb": 1}),
        (("0x2330", "0x2331", "0x2322", "0x20b2", "0x20b5", "0x20f3", "0x20f5", "0x2324"), {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}),  # noqa: E501
        (("0x20b0", "0x20b1", "0x20f1", "0x20f6"), {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}),
        (("0x20b7",), {"1g.6gb": 2, "2g.12gb": 1}),
        (("0x2342", "0x233d", "0x20b6", "0x2329"), {"1g.12gb": 2, "2g.24gb": 1, "3g.48gb": 1}),
    ),
    "all-1g.18gb": ((None, {"1g.18gb": 7}),),
    "all-1g.18gb.me": ((None, {"1g.18gb+me": 1}),),
    "all-1g.23gb": ((None, {"1g.23gb": 7}),),
    "all-1g.23gb.me": ((None, {"1g.23gb+me": 1}),),
    "all-1g.35gb": ((("0x2335",), {"1g.35gb": 4}), (("0x31c2",), {"1g.35gb": 7})),
    "all-2g.35gb": ((None, {"2g.35gb": 3}),),
    "all-3g.71gb": ((None, {"3g.71gb": 2}),),
    "all-4g.71gb": ((None, {"4g.71gb": 1}),),
    "all-7g.141gb": ((None, {"7g.141gb": 1}),),
    "all-1g.34gb": ((None, {"1g.34gb": 7}),),
    "all-1g.34gb.me": ((None, {"1g.34gb+me": 1}),),
    "all-1g.35gb.me": ((None, {"1g.35gb+me": 1}),),
    "all-1g.36gb": ((None, {"1g.36gb": 4}),),
    "all-1g.45gb": ((None, {"1g.45gb": 4}),),
    "all-1g.67gb": ((None, {"1g.67gb": 4}),),
    "all-1g.70gb": ((None, {"1g.70gb": 4}),),
    "all-2g.36gb": ((None, {"2g.36gb": 3}),),
    "all-2g.45gb": ((None, {"2g.45gb": 3}),),
    "all-2g.67gb": ((None, {"2g.67gb": 3}),),
    "all-2g.70gb": ((None, {"2g.70gb": 3}),),
    "all-3g.72gb": ((None, {"3g.72gb": 2}),),
    "all-3g.90gb": ((None, {"3g.90gb": 2}),),
    "all-3g.95gb": ((None, {"3g.95gb": 2}),),
    "all-3g.135gb": ((None, {"3g.135gb": 2}),),
    "all-3g.139gb": ((None, {"3g.139gb": 2}),),
    "all-4g.72gb": ((None, {"4g.72gb": 1}),),
    "all-4g.90gb": ((None, {"4g.90gb": 1}),),
    "all-4g.95gb": ((None, {"4g.95gb": 1}),),
    "all-4g.135gb": ((None, {"4g.135gb": 1}),),
    "all-4g.139gb": ((None, {"4g.139gb": 1}),),
    "all-7g.144gb": ((None, {"7g.144gb": 1}),),
    "all-7g.180gb": ((None, {"7g.180gb": 1}),),
    "all-7g.189gb": ((None, {"7g.189gb": 1}),),
    "all-7g.269gb": ((None, {"7g.269gb": 1}),),
    "all-7g.278gb": ((None, {"7g.278gb": 1}),),
}


def _devices(model: GpuModel, label: str) -> dict[str, int] | None:
    """What mig-parted creates on a GPU of `model` for `label` (the first entry whose filter matches), or None
    when the label does not apply (no matching filter, or a profile the model lacks)."""
    for flt, devices in MIG_PARTED[label]:
        if flt is not None and not set(flt) & set(model.pci_device_ids):
            continue
        return devices if all(model.has_profile(q) for q in devices) else None
    return None


def role(model: GpuModel, label: str) -> str:
    """The label's role, the same on every model: `all-balanced`, or `all-<g>g` plus `-2slice` for a 1g profile with
    twice the smallest 1g's memory (1g.10gb on A100-40GB, 1g.20gb on A100-80GB) plus the profile's variant
    (`.me`, `.gfx`, `.me.all`, `-me`), e.g. all-1g, all-1g-2slice, all-3g, all-1g.me; `all-full` for the profile
    that takes the whole GPU (all-7g.40gb on A100-40GB, all-4g.24gb on A30)."""
    devices = _devices(model, label) or {}
    if len(devices) != 1:
        return "all-balanced"
    p = model.profile(next(iter(devices)))
    variant = p.variant.replace("+", ".")
    if p.memory_slices == model.memory_slices:  # the whole GPU as one instance: 7g on A100/H100, 4g on A30
        return "all-full" + variant
    ones = [q.memory_slices for q in model.plain_profiles if q.compute_slices == 1]
    double = p.compute_slices == 1 and bool(ones) and p.memory_slices > min(ones)
    return f"all-{p.compute_slices}g" + ("-2slice" if double else "") + variant


_PLACED: dict[tuple[str, str], list[tuple[str, int]] | None] = {}


def _config_layout(model: GpuModel, label: str) -> list[tuple[str, int]] | None:
    """Explicit placements for the label's instances on `model` (a small search over starts, largest first; mig-parted
    leaves placement to the driver), or None when the label does not apply or its instances do not fit."""
    key = (model.id, label)
    if key not in _PLACED:
        devices = _devices(model, label)
        wanted = sorted((q for q, n in (devices or {}).items() for _ in range(n)),
                        key=lambda q: (-model.profile(q).memory_slices, q))
        _PLACED[key] = _place(Gpu(GpuState("x", 0, model.id), model), wanted) if devices else None
    return _PLACED[key]


def _place(g: Gpu, wanted: list[str]) -> list[tuple[str, int]] | None:
    if not wanted:
        return []
    q = wanted[0]
    for s in g.model.profile(q).starts:
        if g.fits(q, s):
            trial = Gpu(g.pg, g.model, g.mask, g.compute, Counter(g.counts))
            trial.add(q, s)
            rest = _place(trial, wanted[1:])
            if rest is not None:
                return [(q, s), *rest]
    return None


def roles(problem: Problem) -> dict[str, dict[str, str]]:
    """role -> {model id: mig-parted label} for the models of `problem` (a label whose instances do not fit is left
    out; a role with no label for some model leaves that model's GPUs unused, as a wrong label would)."""
    out: dict[str, dict[str, str]] = {}
    for model in {g.model: problem.models[g.model] for g in problem.gpus}.values():
        for label in MIG_PARTED:
            if _config_layout(model, label) is not None:
                out.setdefault(role(model, label), {}).setdefault(model.id, label)
    return out


def uniform(problem: Problem, kind: str, labels: dict[str, str] | None = None) -> Result:
    """Every GPU in the mig-parted configuration of role `kind` for its model (`labels`: model id -> label)."""
    chosen = labels if labels is not None else roles(problem).get(kind, {})
    r = Result(f"uniform-{kind}", _gpus(problem))
    free: list[dict[str, list[Instance]]] = []
    for g in r.gpus:
        slots: dict[str, list[Instance]] = {}
        label = chosen.get(g.model.id)
        for q, s in (_config_layout(g.model, label) or []) if label else []:
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
    """The best role (placed demand, then fewest GPUs); its name says which (`uniform-all-3g`)."""
    items = {i.name: i for i in problem.items}
    results = [uniform(problem, kind, labels) for kind, labels in sorted(roles(problem).items())]
    return max(results, key=lambda r: (round(r.value(items), 6), -r.used()))


def _smallest_memory(it: Item, model: GpuModel) -> str | None:
    profs = [q for q in it.profiles(model.id) if q != WHOLE_GPU]  # MIG baselines: instances only
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
