"""Backtest a sizing rule (pure apart from the injected solver): size from one window, replay the next.

For each rule (`max+10%`, `p99+10%`, ...): the training window is rolled up into profiles
(`rollup.rollup`), every workload is sized with the planner's own code (`planner.demand` via
`planner.plan`: the memory statistic, the headroom and the MiB floor, exactly as `propose` sizes it),
and the planner is run on a fleet of one empty MIG-enabled GPU per workload, of the model the
workload was measured on (the model of its latest training sample; `default_model` where the history
names none). The instance the plan gives each workload is what it "would have got", and the GPUs that
plan uses are the GPUs the rule costs (`Summary.gpus_used`, with the planner's lower bound).

The test window is then replayed against that instance, per workload and in total:

* OOM samples: test samples whose memory is above the instance's memory (an out-of-memory kill on a
  MIG instance); OOM minutes: the time those samples stand for (see `durations`);
* memory left unused: the mean over test samples of instance MiB - used MiB (0 when above);
* compute slices short: samples whose compute, converted to slices of the target model as the
  planner converts it (`demand.slices_needed`), exceeds the instance's compute slices, and the largest
  shortfall; samples without utilisation count as unknown, not as fine;
* workloads seen only in the test window are listed as not sized (no training history).

Memory: the training pass is the rollup's (bounded by distinct values); the test pass keeps 24 bytes
per test sample of the sized workloads (time, memory, SMs as doubles) so each workload's samples can be
put in time order.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from migplan.catalog import Catalog
from migplan.catalog.geometry import GpuModel
from migplan.catalog.layout import Instance, Layout
from migplan.errors import InputError
from migplan.history.rollup import Rollup, Window, place_sm, rollup
from migplan.history.samples import Place, Sample
from migplan.model.state import FleetState, GpuState
from migplan.planner import Plan, Policy, Solver, plan, sizing
from migplan.planner.demand import headroom_rule, sm_per_slice
from migplan.planner.sizing import SizingRule
from migplan.profiles import Observation, Pin, ProfileSet, Workload

DEFAULT_RULES = ("max+10%", "max+25%", "p99+10%")
DEFAULT_INTERVAL_S = 60.0  # a workload with one test sample: it stands for a minute


def parse_rule(text: str, base: Policy | None = None) -> SizingRule:
    """`max+10%`, `p99+25%`, `max+0%+0MiB`, `max+1spread`, `p95` (headroom 0, the floor of `base`) -> SizingRule
    (the one grammar: planner/sizing.py)."""
    return sizing.parse_rule(text, (base or Policy()).headroom_min_mib, key="--policy")


@dataclass(frozen=True)
class WorkloadResult:
    workload: str
    rule: str
    status: str  # placed | unplaced | not sized
    model: str | None = None
    instance: str | None = None  # PROFILE@START; None with status placed: the whole GPU
    instance_mib: int | None = None
    instance_slices: int | None = None
    need_mib: int | None = None
    train_peak_mib: int | None = None
    train_samples: int = 0
    test_samples: int = 0
    test_peak_mib: int | None = None
    oom_samples: int = 0
    oom_minutes: float = 0.0
    unused_mib_mean: float | None = None
    compute_short_samples: int = 0
    compute_short_slices_max: int = 0
    compute_unknown_samples: int = 0
    reason: str | None = None


@dataclass(frozen=True)
class RuleTotals:
    rule: str
    memory_percentile: str
    headroom_rule: str
    workloads: int  # sized from the training window
    placed: int
    unplaced: int
    oom_workloads: int
    oom_samples: int
    oom_minutes: float
    test_samples: int
    memory_allocated_mib: int  # sum of the placed workloads' instance memory
    unused_mib_mean: float  # sum over placed workloads of their mean unused MiB
    slices_allocated: int
    compute_short_samples: int
    compute_unknown_samples: int
    gpus_used: int
    gpus_lower_bound: int | None
    solver_status: str


@dataclass
class Backtest:
    train: Window
    test: Window
    totals: list[RuleTotals]
    workloads: list[WorkloadResult]
    untrained: dict[str, int] = field(default_factory=dict)  # workload -> test samples, no training history
    notes: list[str] = field(default_factory=list)
    vms: list[str] = field(default_factory=list)  # kind: vm workloads, not backtested (vGPUs are not planned yet)

    def to_dict(self) -> dict[str, object]:
        vms: dict[str, object] = {"vms": list(self.vms)} if self.vms else {}  # only with VMs: as it was without
        return {"kind": "migplan/backtest", "version": 1, **vms,
                "train": {"start": self.train.start, "end": self.train.end},
                "test": {"start": self.test.start, "end": self.test.end},
                "totals": [dataclasses.asdict(t) for t in self.totals],
                "workloads": [dataclasses.asdict(w) for w in self.workloads],
                "untrained": dict(sorted(self.untrained.items())), "notes": list(self.notes)}


# --- sizing: the planner on a fleet of one GPU per workload ------------------------------------

def measured(rolled: Rollup, default_model: str | None, catalog: Catalog) -> list[Workload]:
    """The training profiles as new workloads (no running place) on the model they were measured on. VMs (`kind: vm`,
    issue 26) are left out: a VM is given a vGPU type, not a MIG instance, and vGPUs are not planned yet."""
    fallback = catalog.get(default_model).id if default_model else None
    out, unknown = [], []
    for p in rolled.profiles:
        w = p.workload
        if w.is_vm:
            continue
        model = w.observed.gpu_model or fallback
        if model is None:
            unknown.append(w.name)
            continue
        out.append(dataclasses.replace(w, observed=Observation(gpu_model=model, samples=w.observed.samples)))
    if unknown:
        raise InputError(f"{len(unknown)} workload(s) have no GPU model in their history: "
                         + ", ".join(unknown[:5]) + (" ..." if len(unknown) > 5 else ""),
                         key="--gpu-model", hint="add a gpu_model column, or give --gpu-model MODEL for them")
    return out


def with_model(samples: Iterable[Sample], model: str | None) -> Iterator[Sample]:
    """The samples, those whose place names no GPU model placed on `model` (the --gpu-model fallback).

    The model of a place is what turns its utilisation into SMs (`rollup.place_sm`): without it every
    utilisation sample of the history would count as compute unknown, in the training window (so the
    rule sizes on memory alone) and in the test replay alike, although the GPU model was given."""
    if model is None:
        yield from samples
        return
    filled: dict[Place, Place] = {}  # a history repeats the same few places
    for s in samples:
        if s.place.gpu_model is None:
            place = filled.get(s.place)
            if place is None:
                place = filled[s.place] = dataclasses.replace(s.place, gpu_model=model)
            s = dataclasses.replace(s, place=place)
        yield s


def model_host(model: str) -> str:
    return f"backtest-{model}"


def one_gpu_each(workloads: list[Workload]) -> FleetState:
    """One empty MIG-enabled GPU per workload, of its measured model: the GPUs of a model on one host
    (`backtest-MODEL`), so workloads of one model may share a GPU and `pinned` keeps each on its model."""
    count: dict[str, int] = {}
    gpus = []
    for w in sorted(workloads, key=lambda w: w.name):
        model = str(w.observed.gpu_model)
        gpus.append(GpuState(host=model_host(model), index=count.get(model, 0), model=model, mig_enabled=True,
                             layout=Layout()))
        count[model] = count.get(model, 0) + 1
    return FleetState(tuple(gpus), source="backtest")


def pinned(workloads: list[Workload]) -> list[Workload]:
    """Each workload pinned to the host of its measured model: sized on the GPU it was measured on, never on
    another model's instance (the planner may otherwise put it wherever it packs best)."""
    return [dataclasses.replace(w, pin=Pin(host=model_host(str(w.observed.gpu_model)))) if w.pin is None else w
            for w in workloads]


@dataclass(frozen=True)
class _Given:
    """What one workload got under one rule."""

    status: str
    model: GpuModel | None
    instance: str | None
    mib: int | None
    slices: int | None
    need: int
    reason: str | None


def given_instances(p: Plan, state: FleetState, catalog: Catalog) -> dict[str, _Given]:
    models = {g.host: catalog.get(g.model) for g in state.gpus}
    out = {}
    for w in p.workloads:
        if not w.on_gpu or w.host is None:
            out[w.workload] = _Given("unplaced", None, None, None, None, w.memory_mib, w.reason)
            continue
        model = models[w.host]
        slices = (model.compute_slices if w.instance is None
                  else model.profile(Instance.parse(w.instance).profile).compute_slices)
        out[w.workload] = _Given("placed", model, w.instance, w.instance_mib, slices, w.memory_mib, None)
    return out


# --- replay ---------------------------------------------------------------------------------------

@dataclass
class _Series:
    ts: array[float] = field(default_factory=lambda: array("d"))
    mem: array[float] = field(default_factory=lambda: array("d"))
    sm: array[float] = field(default_factory=lambda: array("d"))  # SMs used; -1: unknown


def collect_test(samples: Iterable[Sample], window: Window, sized: set[str],
                 catalog: Catalog) -> tuple[dict[str, _Series], Counter[str]]:
    """The test window's samples of the sized workloads; the others counted by workload."""
    series: dict[str, _Series] = {}
    others: Counter[str] = Counter()
    cache: dict[object, tuple[GpuModel, float] | None] = {}
    for s in samples:
        if s.timestamp not in window or s.memory_mib is None:
            continue
        if s.workload not in sized:
            others[s.workload] += 1
            continue
        ser = series.get(s.workload)
        if ser is None:
            ser = series[s.workload] = _Series()
        if s.place not in cache:
            cache[s.place] = place_sm(catalog, s.place)
        where = cache[s.place]
        ser.ts.append(s.timestamp)
        ser.mem.append(s.memory_mib)
        ser.sm.append(s.util_pct / 100 * where[1] if s.util_pct is not None and where is not None else -1.0)
    return series, others


def durations(ts: list[float]) -> list[float]:
    """Seconds each sample (in time order) stands for: the time to the next one, at most the workload's
    median interval (a gap in collection is not time spent out of memory); the last one: the median."""
    if len(ts) < 2:
        return [DEFAULT_INTERVAL_S] * len(ts)
    gaps = [b - a for a, b in zip(ts, ts[1:], strict=False)]
    cap = statistics.median(gaps) or DEFAULT_INTERVAL_S
    return [min(g, cap) for g in gaps] + [cap]


def replay(name: str, rule: str, g: _Given, ser: _Series | None, train_peak: int, train_n: int) -> WorkloadResult:
    base = WorkloadResult(workload=name, rule=rule, status=g.status, model=g.model.id if g.model else None,
                          instance=g.instance, instance_mib=g.mib, instance_slices=g.slices, need_mib=g.need,
                          train_peak_mib=train_peak, train_samples=train_n, reason=g.reason)
    if ser is None or not len(ser.ts):
        return base
    order = sorted(range(len(ser.ts)), key=ser.ts.__getitem__)
    ts = [ser.ts[i] for i in order]
    dur = durations(ts)
    peak = math.ceil(max(ser.mem))
    if g.status != "placed" or g.mib is None or g.model is None or g.slices is None:
        return dataclasses.replace(base, test_samples=len(ts), test_peak_mib=peak)
    per_slice = sm_per_slice(g.model)
    oom = short = short_max = unknown = 0
    oom_s = unused = 0.0
    for k, i in enumerate(order):
        used = ser.mem[i]
        if used > g.mib:
            oom += 1
            oom_s += dur[k]
        else:
            unused += g.mib - used
        sm = ser.sm[i]
        if sm < 0:
            unknown += 1
            continue
        need = max(1, math.ceil(sm / per_slice - 1e-9))
        if need > g.slices:
            short += 1
            short_max = max(short_max, need - g.slices)
    return dataclasses.replace(base, test_samples=len(ts), test_peak_mib=peak, oom_samples=oom,
                               oom_minutes=round(oom_s / 60, 2), unused_mib_mean=round(unused / len(ts), 1),
                               compute_short_samples=short, compute_short_slices_max=short_max,
                               compute_unknown_samples=unknown)


def _totals(rule: SizingRule, policy: Policy, results: list[WorkloadResult], p: Plan) -> RuleTotals:
    placed = [r for r in results if r.status == "placed"]
    return RuleTotals(
        rule=rule.text, memory_percentile=rule.memory_percentile, headroom_rule=headroom_rule(policy),
        workloads=len(results), placed=len(placed), unplaced=len(results) - len(placed),
        oom_workloads=sum(1 for r in placed if r.oom_samples), oom_samples=sum(r.oom_samples for r in placed),
        oom_minutes=round(sum(r.oom_minutes for r in placed), 2), test_samples=sum(r.test_samples for r in results),
        memory_allocated_mib=sum(r.instance_mib or 0 for r in placed),
        unused_mib_mean=round(sum(r.unused_mib_mean or 0.0 for r in placed), 1),
        slices_allocated=sum(r.instance_slices or 0 for r in placed),
        compute_short_samples=sum(r.compute_short_samples for r in placed),
        compute_unknown_samples=sum(r.compute_unknown_samples for r in placed),
        gpus_used=p.summary.gpus_used, gpus_lower_bound=p.summary.gpus_lower_bound, solver_status=p.solve.status)


def backtest(train: Iterable[Sample], test: Iterable[Sample], catalog: Catalog, rules: list[SizingRule],
             solver: Solver, *, train_window: Window, test_window: Window, base: Policy | None = None,
             default_model: str | None = None) -> Backtest:
    """Size from `train` (samples in `train_window`) with each rule, replay `test` (in `test_window`).

    `train` and `test` may be the same history read twice: each pass keeps only its window."""
    if not rules:
        raise InputError("no sizing rule given", key="--policy", hint="give --policy max+10% (repeatable)")
    fallback = catalog.get(default_model).id if default_model else None
    rolled = rollup(with_model(train, fallback), catalog, train_window)
    workloads = measured(rolled, default_model, catalog)
    if not workloads:
        raise InputError("no workload has a memory sample in the training window",
                         hint="check --train/--test against the history's time span")
    state = one_gpu_each(workloads)
    profiles = ProfileSet(tuple(pinned(workloads)))
    given, totals_plans = {}, {}
    for rule in rules:
        policy = rule.policy(base or Policy())
        p = plan(state, profiles, catalog, policy, solver)
        given[rule.text] = given_instances(p, state, catalog)
        totals_plans[rule.text] = (policy, p)
    series, others = collect_test(with_model(test, fallback), test_window, {w.name for w in workloads}, catalog)
    out_w: list[WorkloadResult] = []
    totals = []
    for rule in rules:
        results = [replay(w.name, rule.text, given[rule.text][w.name], series.get(w.name), w.memory.max,
                          w.observed.samples) for w in workloads]
        out_w.extend(results)
        policy, p = totals_plans[rule.text]
        totals.append(_totals(rule, policy, results, p))
    notes = [f"{name}: {', '.join(p.notes)}" for name, p in ((p.name, p) for p in rolled.profiles) if p.notes]
    vms = [p.name for p in rolled.profiles if p.workload.is_vm]
    for name in vms:
        others.pop(name, None)  # trained, but not backtested: not "no sample in the training window"
    return Backtest(train_window, test_window, totals, out_w, dict(others), notes, vms)
