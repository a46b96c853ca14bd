"""Seeded benchmark instances (documented in bench/README.md).

Every instance is a (FleetState, ProfileSet) built from `random.Random(seed)` only, so the same
name and seed always give the same fleet and workloads.

* fleet: `gpus` GPUs, 8 per host; `single` = A100-SXM4-40GB only; `mixed` = hosts cycle through
  A100-SXM4-40GB, A100-SXM4-80GB, H100-SXM5-80GB and A30.
* demand mix (p99 memory in MiB, p95 compute share of an A100-40GB):
    small      80%  1-4.5 GB,  20%  5-9 GB;          compute ~ memory share +-50%
    large      10-38 GB;                              compute ~ memory share +-50%
    bimodal    half 1-4 GB, half 14-36 GB
    inference  memory-bound: 4-30 GB, compute 0.02-0.10
* workloads: `workloads` of them (priorities 1-10).
* anti-affinity: `anti` of them (drawn at random) in anti-affinity sets of 2-8 members each
  (`anti_affinity: setNNNN`; a last member left over joins the previous set). The fleet and the
  workloads are those of the same instance without `anti` (its name has no `-aaN`), so the two
  compare directly; 0 (the default) leaves every instance as it was before the option existed.
* current state: `empty` (MIG disabled everywhere), `random` (30% MIG disabled, the rest a uniformly
  drawn valid layout, nothing running), `previous` (built by the runner: the migplan plan of the empty
  state applied, then 10% of the workloads' demand scaled by 0.5-1.6).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from migplan.catalog import builtin_catalog
from migplan.catalog.layout import enumerate_layouts
from migplan.model.state import FleetState, GpuState
from migplan.profiles import ComputeStats, MemoryStats, Observation, ProfileSet, Workload

MIXED = ("A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB", "A30")
MIXES = ("small", "large", "bimodal", "inference")


@dataclass(frozen=True)
class Spec:
    gpus: int
    workloads: int
    models: str = "single"  # single | mixed
    mix: str = "small"
    state: str = "empty"  # empty | random | previous
    seed: int = 1
    anti: int = 0  # workloads in anti-affinity sets (sizes 2-8)

    @property
    def name(self) -> str:
        aa = f"-aa{self.anti}" if self.anti else ""
        return f"{self.gpus}g-{self.workloads}w-{self.models}-{self.mix}-{self.state}{aa}-s{self.seed}"


def fleet(spec: Spec, rng: random.Random) -> FleetState:
    cat = builtin_catalog()
    gpus = []
    for i in range(spec.gpus):
        host, idx = f"node{i // 8:05d}", i % 8
        model = MIXED[(i // 8) % len(MIXED)] if spec.models == "mixed" else "A100-SXM4-40GB"
        g = GpuState(host=host, index=idx, model=model)
        if spec.state == "random" and rng.random() >= 0.3:
            layouts = _all_layouts(model)
            g = dataclasses.replace(g, mig_enabled=True, layout=layouts[rng.randrange(len(layouts))])
        gpus.append(g)
    _ = cat
    return FleetState(tuple(gpus), source="bench")


_LAYOUTS: dict[str, list] = {}


def _all_layouts(model: str) -> list:
    if model not in _LAYOUTS:
        _LAYOUTS[model] = enumerate_layouts(builtin_catalog().get(model))
    return _LAYOUTS[model]


def _draw(mix: str, rng: random.Random) -> tuple[int, float]:
    if mix == "small":
        mem = rng.uniform(1000, 4500) if rng.random() < 0.8 else rng.uniform(5000, 9000)
    elif mix == "large":
        mem = rng.uniform(10000, 38000)
    elif mix == "bimodal":
        mem = rng.uniform(1000, 4000) if rng.random() < 0.5 else rng.uniform(14000, 36000)
    else:
        return int(rng.uniform(4000, 30000)), rng.uniform(0.02, 0.10)
    share = min(1.0, mem / 40960 * rng.uniform(0.5, 1.5))
    return int(mem), share


def workload(name: str, mem: int, share: float, priority: int) -> Workload:
    return Workload(name=name, observed=Observation(gpu_model="A100-SXM4-40GB"),
                    memory=MemoryStats(int(mem * 0.8), int(mem * 0.95), mem, int(mem * 1.05)),
                    compute=ComputeStats(round(share * 0.6, 4), round(share, 4), round(min(1.0, share * 1.3), 4)),
                    priority=priority)


def profiles(spec: Spec, rng: random.Random) -> ProfileSet:
    ws = []
    for i in range(spec.workloads):
        mem, share = _draw(spec.mix, rng)
        ws.append(workload(f"w{i:05d}", mem, share, rng.randint(1, 10)))
    return ProfileSet(tuple(ws))


def anti_affinity_sets(ws: list[Workload], members: int, rng: random.Random) -> list[Workload]:
    """`members` workloads drawn at random, put into sets of 2-8 (`anti_affinity: setNNNN`)."""
    chosen = sorted(rng.sample(range(len(ws)), min(members, len(ws))))
    rng.shuffle(chosen)
    sets: list[list[int]] = []
    while chosen:
        size = rng.randint(2, 8)
        sets.append(chosen[:size])
        chosen = chosen[size:]
    if len(sets) > 1 and len(sets[-1]) == 1:
        last = sets.pop()
        sets[-1] += last
    label = {i: f"set{k:04d}" for k, members_ in enumerate(sets) for i in members_}
    return [dataclasses.replace(w, anti_affinity=label[i]) if i in label else w for i, w in enumerate(ws)]


def generate(spec: Spec) -> tuple[FleetState, ProfileSet]:
    """The fleet and workloads of `spec`; with `anti`, the same ones as without, then the sets drawn."""
    rng = random.Random(f"{dataclasses.replace(spec, anti=0).name}")
    state, ps = fleet(spec, rng), profiles(spec, rng)
    if spec.anti:
        ps = ProfileSet(tuple(anti_affinity_sets(list(ps.workloads), spec.anti, random.Random(spec.name))))
    return state, ps


def change_demand(ps: ProfileSet, fraction: float, seed: int) -> ProfileSet:
    """Scale the memory and compute of `fraction` of the workloads by 0.5-1.6 (the 'previous' scenario)."""
    rng = random.Random(seed)
    out = []
    for w in ps.workloads:
        if rng.random() < fraction:
            f = rng.uniform(0.5, 1.6)
            m = w.memory
            c = w.compute
            w = dataclasses.replace(
                w, memory=MemoryStats(int(m.p50 * f), int(m.p95 * f), int(m.p99 * f), int(m.max * f)),
                compute=ComputeStats(min(1.0, c.p50 * f), min(1.0, c.p95 * f), min(1.0, c.max * f)))
        out.append(w)
    return ProfileSet(tuple(out))
