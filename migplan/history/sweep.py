"""Sizing rules swept over a grid, evaluated at several split points; the OOM-versus-GPUs frontier, the
recommendation and the correlated-burst indicator (pure apart from the injected solver).

Rolling origin: the last K x `test` of the history are K test windows back to back; each is preceded by a
training window of `train` (split i: train [s_i - train, s_i), test [s_i, s_i + test), s_i = end - (K - i) x test).
At each split every rule sizes every workload from its training window as `backtest` does (the planner itself on
one empty GPU per workload, of the model it was measured on: `backtest.one_gpu_each`), and the test window is
replayed against the instance it would have got. Per rule and split:

* workloads out of memory (OOM): those with at least one test sample above their instance's memory, as a share of
  the workloads sized that have test samples; OOM samples and minutes as `backtest` counts them;
* GPUs: the plan's GPUs used, plus one for each workload no instance holds (its need is above the largest
  instance: it would need a GPU of its own, and is replayed against that GPU's memory); the ratio to whole GPUs is
  GPUs / workloads sized (one whole GPU per workload is 1.0);
* the correlated-burst indicator (`Burst`).

Over the splits each figure has a mean and a worst. A rule is on the frontier when no other rule has a mean OOM
rate and a mean GPU ratio both at most its own, one of them lower. The recommendation is the cheapest rule (lowest
mean GPU ratio; then lowest mean OOM rate, worst OOM rate, text) whose mean OOM rate is at most the target; it is
on the frontier by construction. When no rule meets the target there is no recommendation, and the reason says
which rule came closest.

The replay is by sorting: each workload's test samples are sorted once per split by memory, with suffix sums of
the time each stands for and prefix sums of memory, so a rule's OOM samples, minutes and unused memory are two
binary searches whatever the number of rules.
"""

from __future__ import annotations

import bisect
import dataclasses
import math
import random
import statistics
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from migplan.catalog import Catalog
from migplan.errors import InputError
from migplan.history.backtest import durations, given_instances, measured, one_gpu_each, pinned, with_model
from migplan.history.rollup import Window, rollup_store
from migplan.history.samples import Sample
from migplan.history.series import Series, SeriesStore
from migplan.planner import Policy, Solver, plan
from migplan.planner.demand import headroom_rule
from migplan.planner.sizing import DEFAULT_FLOOR_MIB, SizingRule, expand, parse_rule
from migplan.profiles import ProfileSet

# The default grid: fixed percentages, headroom in proportion to each workload's spread, p99 with headroom, and
# the two combined; 21 rules
DEFAULT_FAMILIES = ("max+{0,5,10,15,25,40,60,100}%", "max+{0.25,0.5,0.75,1,1.5,2,3}spread", "p99+{10,25,50}%",
                    "max+5%+{0.5,1,2}spread")
DEFAULT_SPLITS = 3
DEFAULT_TARGET = 0.01  # 1% of workloads out of memory, mean over the splits
BUCKET_S = 600.0  # the burst indicator's time buckets: out of memory within the same 10 minutes
SHUFFLES = 20  # random time shifts the observed peak is compared with
MIN_TRAIN_COVER = 0.9  # the first training window must be at least this much covered by the history
EPS = 1e-12

Report = Callable[[str], None]


class TooShort(InputError):
    """The history is shorter than the training window and the test windows together."""


def _span(seconds: float) -> str:
    d, rest = divmod(int(round(seconds)), 86400)
    h, rest = divmod(rest, 3600)
    m = rest // 60
    parts = [f"{d}d" if d else "", f"{h}h" if h else "", f"{m}m" if m and not d else ""]
    return " ".join(p for p in parts if p) or f"{int(round(seconds))}s"


@dataclass(frozen=True)
class Split:
    index: int
    train: Window
    test: Window


def split_points(first: float, last: float, train_s: float, test_s: float, k: int) -> list[Split]:
    """The K rolling-origin splits ending at `last` (module notes); TooShort when the history does not reach back to
    the first training window (90% of it must be covered)."""
    if k < 1 or train_s <= 0 or test_s <= 0:
        raise InputError("a sweep needs a training and a test window and at least one split",
                         key="--train/--test/--splits")
    need = train_s + k * test_s
    if last - first < need - (1 - MIN_TRAIN_COVER) * train_s:
        raise TooShort(f"the history spans {_span(last - first)}; --train {_span(train_s)} + {k} split(s) x --test "
                       f"{_span(test_s)} need {_span(need)}", key="--train/--test/--splits",
                       hint="give a shorter --train or --test, or fewer --splits, or wait for more history")
    out = []
    for i in range(k):
        start = last - (k - i) * test_s
        test = Window(start, start + test_s, end_open=i < k - 1)  # the last one ends at (and keeps) the last sample
        out.append(Split(i, Window(start - train_s, start, end_open=True), test))
    return out


# --- the replay, sorted ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Replay:
    """One workload's test window sorted by memory: per sample its memory, time and the seconds it stands for
    (`backtest.durations`), with suffix sums of seconds and prefix sums of memory."""

    mem: list[float]
    ts: list[float]
    secs_after: list[float]  # secs_after[i]: seconds of the samples i.. (by memory)
    mem_before: list[float]  # mem_before[i]: memory of the samples ..i-1 (by memory)

    @classmethod
    def of(cls, ser: Series, window: Window) -> _Replay | None:
        lo, hi = ser.bounds(window.start, window.end, window.end_open)
        pairs = [(ser.ts[i], ser.mem[i]) for i in range(lo, hi) if ser.mem[i] == ser.mem[i]]
        if not pairs:
            return None
        dur = durations([t for t, _ in pairs])
        order = sorted(range(len(pairs)), key=lambda i: pairs[i][1])
        mem = [pairs[i][1] for i in order]
        secs = [dur[i] for i in order]
        after = [0.0] * (len(mem) + 1)
        for i in range(len(mem) - 1, -1, -1):
            after[i] = after[i + 1] + secs[i]
        before = [0.0] * (len(mem) + 1)
        for i, m in enumerate(mem):
            before[i + 1] = before[i] + m
        return cls(mem, [pairs[i][0] for i in order], after, before)

    def above(self, mib: int) -> int:
        """Index of the first sample above `mib` (the samples from there on are out of memory)."""
        return bisect.bisect_right(self.mem, mib)

    def unused_mean(self, mib: int, first_oom: int) -> float:
        return (mib * first_oom - self.mem_before[first_oom]) / len(self.mem)


# --- the correlated-burst indicator ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Burst:
    """Are the OOMs of a rule bunched in time across workloads? The test window in buckets of `bucket_s`; `peak`:
    the most workloads out of memory in one bucket (at `peak_at`); `independent`: the most that the same OOMs give
    when each workload's OOM times are shifted by its own random offset (SHUFFLES times, seeded: reproducible), which
    keeps each workload's own pattern and removes only their alignment; `in_bursts`: OOM workloads out of memory in
    a bucket shared by more workloads than `independent` (and at least 3); `correlated`: peak >= 3 and above
    `independent`, the fleet-wide bursts a per-workload rule cannot foresee."""

    bucket_s: float
    oom_workloads: int
    peak: int = 0
    peak_at: float | None = None
    independent: int = 0
    in_bursts: int = 0
    correlated: bool = False


def burst(oom_times: dict[str, list[float]], start: float, end: float, bucket_s: float = BUCKET_S,
          seed: str = "") -> Burst:
    buckets = {w: sorted({int((t - start) // bucket_s) for t in ts}) for w, ts in oom_times.items() if ts}
    if not buckets:
        return Burst(bucket_s, 0)
    n = max(1, math.ceil((end - start) / bucket_s), *(b[-1] + 1 for b in buckets.values()))
    counts = Counter(b for bs in buckets.values() for b in bs)
    at, peak = max(counts.items(), key=lambda kv: (kv[1], -kv[0]))
    rnd = random.Random(f"burst:{seed}")  # noqa: S311 - reproducible shuffles for a statistic, no secret
    independent = 0
    for _ in range(SHUFFLES):
        shuffled: Counter[int] = Counter()
        for bs in buckets.values():
            shift = rnd.randrange(n)
            shuffled.update((b + shift) % n for b in bs)
        independent = max(independent, max(shuffled.values()))
    bar = max(3, independent + 1)
    hot = {b for b, c in counts.items() if c >= bar}
    in_bursts = sum(1 for bs in buckets.values() if hot.intersection(bs))
    return Burst(bucket_s, len(buckets), peak, start + at * bucket_s, independent, in_bursts,
                 peak >= 3 and peak > independent)


# --- per rule and split ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RuleSplit:
    """One rule at one split."""

    split: int
    sized: int  # workloads sized from the training window (one whole GPU each is the ratio's denominator)
    workloads: int  # of them, those with test samples (the OOM rate's denominator)
    oom_workloads: int
    oom_samples: int
    oom_minutes: float
    test_samples: int
    unplaced: int  # need above the largest instance: counted as a whole GPU each
    gpus_used: int  # the plan's
    gpus_lower_bound: int | None
    gpus: int  # gpus_used + unplaced
    memory_allocated_mib: int
    unused_mib_mean: float
    solver_status: str
    burst: Burst

    @property
    def oom_rate(self) -> float:
        return self.oom_workloads / self.workloads if self.workloads else 0.0

    @property
    def ratio(self) -> float:
        return self.gpus / self.sized if self.sized else 0.0


def _stat(values: list[float]) -> dict[str, float]:
    return {"mean": round(statistics.fmean(values), 6) if values else 0.0,
            "worst": round(max(values), 6) if values else 0.0}


@dataclass
class RuleResult:
    rule: SizingRule
    headroom_rule: str
    splits: list[RuleSplit] = field(default_factory=list)
    frontier: bool = False
    meets: bool = False

    def _values(self, what: Callable[[RuleSplit], float]) -> list[float]:
        return [what(s) for s in self.splits]

    @property
    def oom_rate(self) -> dict[str, float]:
        return _stat(self._values(lambda s: s.oom_rate))

    @property
    def ratio(self) -> dict[str, float]:
        return _stat(self._values(lambda s: s.ratio))

    @property
    def worst_burst(self) -> Burst | None:
        bursts = [s.burst for s in self.splits]
        return max(bursts, key=lambda b: (b.correlated, b.peak - b.independent, b.peak)) if bursts else None

    def to_dict(self) -> dict[str, Any]:
        b = self.worst_burst
        return {
            "rule": self.rule.text, "canonical": self.rule.canonical, "family": self.rule.family,
            "headroom_rule": self.headroom_rule, "frontier": self.frontier, "meets_target": self.meets,
            "oom_rate": self.oom_rate, "oom_workloads": _stat(self._values(lambda s: s.oom_workloads)),
            "oom_minutes": _stat(self._values(lambda s: s.oom_minutes)),
            "gpus": _stat(self._values(lambda s: s.gpus)), "whole_gpu_ratio": self.ratio,
            "unplaced": _stat(self._values(lambda s: s.unplaced)),
            "burst": dataclasses.asdict(b) if b is not None else None,
            "splits": [{**{k: v for k, v in dataclasses.asdict(s).items() if k != "burst"},
                        "oom_rate": round(s.oom_rate, 6), "whole_gpu_ratio": round(s.ratio, 6),
                        "burst": dataclasses.asdict(s.burst)} for s in self.splits],
        }


@dataclass(frozen=True)
class SplitInfo:
    split: Split
    sized: int
    replayed: int
    untrained: int  # workloads with test samples but none in the training window: not sized


@dataclass
class Sweep:
    train_s: float
    test_s: float
    target: float
    splits: list[SplitInfo]
    rules: list[RuleResult]
    recommended: RuleResult | None
    reason: str
    first: float | None = None  # the history's first and last sample
    last: float | None = None
    notes: list[str] = field(default_factory=list)

    def rule(self, text: str) -> RuleResult:
        return next(r for r in self.rules if text in (r.rule.text, r.rule.canonical))

    @property
    def correlated(self) -> list[RuleResult]:
        """Rules whose OOMs were bunched in time at some split (`Burst.correlated`)."""
        return [r for r in self.rules if any(s.burst.correlated for s in r.splits)]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "migplan/backtest-sweep", "version": 1, "train_s": self.train_s, "test_s": self.test_s,
                "target_oom": self.target, "first": self.first, "last": self.last,
                "splits": [{"index": s.split.index,
                            "train": {"start": s.split.train.start, "end": s.split.train.end},
                            "test": {"start": s.split.test.start, "end": s.split.test.end},
                            "workloads": s.sized, "replayed": s.replayed, "untrained": s.untrained}
                           for s in self.splits],
                "rules": [r.to_dict() for r in self.rules],
                "recommended": self.recommended.rule.text if self.recommended else None, "reason": self.reason,
                "correlated_bursts": [r.rule.text for r in self.correlated], "notes": list(self.notes)}


# --- the calibration record `sizing: auto` keeps (its state directory's sizing.json) ---------------------------------

RECORD_KIND = "migplan/sizing-calibration"
RECORD_MAX_RULES = 10_000


def record(s: Sweep, *, calibrated_at: float, source: str, families: list[str]) -> dict[str, Any]:
    """What `sizing: auto` keeps of a sweep: enough to choose again for another target without sweeping again."""
    return {"kind": RECORD_KIND, "version": 1, "calibrated_at": calibrated_at, "source": source,
            "train_s": s.train_s, "test_s": s.test_s, "splits": len(s.splits), "families": list(families),
            "first": s.first, "last": s.last, "workloads": s.splits[-1].sized if s.splits else 0,
            "correlated_bursts": [r.rule.text for r in s.correlated],
            "rules": [{"rule": r.rule.text, "oom_rate": r.oom_rate, "whole_gpu_ratio": r.ratio} for r in s.rules]}


@dataclass(frozen=True)
class Calibration:
    """A calibration record read back (`read_record`)."""

    calibrated_at: float
    source: str
    train_s: float
    test_s: float
    splits: int
    families: tuple[str, ...]
    figures: tuple[Figures, ...]
    correlated: tuple[str, ...]


def _num(doc: Mapping[str, Any], key: str, lo: float, hi: float) -> float:
    v = doc.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise InputError(f"{key}: expected a number from {lo:g} to {hi:g}, got {v!r}")
    return float(v)


def _text(v: object, what: str) -> str:
    if not isinstance(v, str) or len(v) > 2000 or not v.isprintable():
        raise InputError(f"{what}: expected one printable line of text")
    return v


def read_record(doc: object) -> Calibration:
    """A calibration record, every field checked (InputError naming the first that is not right): the state
    directory is trusted only so far."""
    if not isinstance(doc, dict) or doc.get("kind") != RECORD_KIND or doc.get("version") != 1:
        raise InputError(f"not a version 1 {RECORD_KIND} document")
    rules = doc.get("rules")
    if not isinstance(rules, list) or not 0 < len(rules) <= RECORD_MAX_RULES:
        raise InputError("rules: expected a list of rules")
    splits = int(_num(doc, "splits", 1, 50))
    out = []
    for i, r in enumerate(rules):
        if not isinstance(r, dict) or not isinstance(r.get("oom_rate"), dict) or not isinstance(
                r.get("whole_gpu_ratio"), dict):
            raise InputError(f"rules[{i}]: expected {{rule, oom_rate, whole_gpu_ratio}}")
        text = _text(r.get("rule"), f"rules[{i}].rule")
        parse_rule(text, key=f"rules[{i}].rule")
        oom, ratio = r["oom_rate"], r["whole_gpu_ratio"]
        out.append(Figures(text, _num(oom, "mean", 0, 1), _num(oom, "worst", 0, 1), _num(ratio, "mean", 0, 1e6),
                           _num(ratio, "worst", 0, 1e6), splits))
    fams = doc.get("families")
    corr = doc.get("correlated_bursts", [])
    if not isinstance(fams, list) or not isinstance(corr, list):
        raise InputError("families, correlated_bursts: expected lists")
    return Calibration(_num(doc, "calibrated_at", 0, 1e12), _text(doc.get("source"), "source"),
                       _num(doc, "train_s", 1, 1e9), _num(doc, "test_s", 1, 1e9), splits,
                       tuple(_text(f, "families[]") for f in fams), tuple(out),
                       tuple(_text(c, "correlated_bursts[]") for c in corr))


# --- the frontier and the recommendation ---------------------------------------------------------------------------

def _point(r: RuleResult) -> tuple[float, float]:
    return r.oom_rate["mean"], r.ratio["mean"]


def mark_frontier(rules: list[RuleResult]) -> None:
    points = [_point(r) for r in rules]
    for r, (oom, cost) in zip(rules, points, strict=True):
        r.frontier = not any(o <= oom + EPS and c <= cost + EPS and (o < oom - EPS or c < cost - EPS)
                             for o, c in points)


@dataclass(frozen=True)
class Figures:
    """What the recommendation reads of a rule: its mean and worst OOM share and GPU ratio over the splits (from a
    sweep, or from a calibration record that `sizing: auto` kept)."""

    rule: str
    oom_mean: float
    oom_worst: float
    ratio_mean: float
    ratio_worst: float
    splits: int


def choose(figures: list[Figures], target: float) -> tuple[Figures | None, str]:
    """The cheapest rule whose mean OOM share is at most `target` (module notes), and why, in words; None (and which
    rule came closest) when none is."""
    ok = [f for f in figures if f.oom_mean <= target + EPS]
    if not ok:
        if not figures:
            return None, "no rule was swept"
        best = min(figures, key=lambda f: (f.oom_mean, f.ratio_mean, f.rule))
        return None, (f"no rule keeps the mean share of workloads out of memory at or below {_pct(target)}; the "
                      f"least, {best.rule}, has {_pct(best.oom_mean)}")
    pick = min(ok, key=lambda f: (f.ratio_mean, f.oom_mean, f.oom_worst, len(f.rule), f.rule))
    return pick, (f"the cheapest rule with at most {_pct(target)} of workloads out of memory (mean over {pick.splits} "
                  f"split(s)): {_pct(pick.oom_mean)} mean, {_pct(pick.oom_worst)} worst, {pick.ratio_mean:.2f}x the "
                  "GPUs of one whole GPU per workload")


def figures(r: RuleResult) -> Figures:
    return Figures(r.rule.text, r.oom_rate["mean"], r.oom_rate["worst"], r.ratio["mean"], r.ratio["worst"],
                   len(r.splits))


def recommend(rules: list[RuleResult], target: float) -> tuple[RuleResult | None, str]:
    """`choose` over the swept rules; marks each rule that meets the target."""
    for r in rules:
        r.meets = r.oom_rate["mean"] <= target + EPS
    pick, reason = choose([figures(r) for r in rules], target)
    return next((r for r in rules if pick is not None and r.rule.text == pick.rule), None), reason


def _pct(share: float) -> str:
    return f"{round(share * 100, 2):g}%"


# --- the sweep ----------------------------------------------------------------------------------------------------

def rules_of(patterns: Iterable[str], default_floor: int = DEFAULT_FLOOR_MIB, *, key: str = "--policy") -> list[
        SizingRule]:
    """Every pattern expanded (`sizing.expand`), duplicates (the same rule written twice) kept once, in order."""
    out: dict[str, SizingRule] = {}
    for p in patterns:
        for r in expand(p, default_floor, key=key):
            out.setdefault(r.canonical, r)
    return list(out.values())


def load(samples: Iterable[Sample], default_model: str | None = None) -> SeriesStore:
    """The history in memory, each place without a GPU model on `default_model` (as `backtest.with_model`)."""
    return SeriesStore.of(with_model(samples, default_model))


def _rule_split(rule: SizingRule, policy: Policy, split: Split, workloads: list[Any], state: Any,
                profiles: ProfileSet, replays: dict[str, _Replay], catalog: Catalog, solver: Solver) -> RuleSplit:
    p = plan(state, profiles, catalog, policy, solver)
    given = given_instances(p, state, catalog)
    oom_w = oom_n = tests = unplaced = alloc = 0
    oom_s = unused = 0.0
    times: dict[str, list[float]] = {}
    for w in workloads:
        g = given[w.name]
        mib = g.mib
        if g.status != "placed" or mib is None:
            unplaced += 1
            mib = catalog.get(str(w.observed.gpu_model)).memory_mib  # a GPU of its own
        alloc += mib
        rep = replays.get(w.name)
        if rep is None:
            continue
        tests += len(rep.mem)
        first = rep.above(mib)
        unused += rep.unused_mean(mib, first)
        if first < len(rep.mem):
            oom_w += 1
            oom_n += len(rep.mem) - first
            oom_s += rep.secs_after[first]
            times[w.name] = rep.ts[first:]
    test = split.test
    assert test.start is not None and test.end is not None
    b = burst(times, test.start, test.end, seed=f"{split.index}:{rule.canonical}")
    return RuleSplit(split.index, len(workloads), len(replays), oom_w, oom_n, round(oom_s / 60, 2), tests, unplaced,
                     p.summary.gpus_used, p.summary.gpus_lower_bound, p.summary.gpus_used + unplaced, alloc,
                     round(unused, 1), p.solve.status, b)


def sweep(store: SeriesStore, catalog: Catalog, rules: list[SizingRule], solver: Solver, *, train_s: float,
          test_s: float, splits: int = DEFAULT_SPLITS, target: float = DEFAULT_TARGET, base: Policy | None = None,
          default_model: str | None = None, end: float | None = None, report: Report | None = None) -> Sweep:
    """Every rule at every split (module notes). `store`: the history (`load`); `base`: the rest of the policy
    (compute percentile, weights); `end`: where the last test window ends (default: the last sample); TooShort
    when the history is shorter than the windows."""
    say = report or (lambda _m: None)
    if not rules:
        raise InputError("no sizing rule to sweep", key="--policy", hint="give --policy max+{5,10,25}% (repeatable)")
    if not 0 <= target <= 1:
        raise InputError(f"target {target!r} must be a share of workloads from 0 to 1", key="--target-oom")
    if store.first is None or store.last is None:
        raise TooShort("the history has no samples", key="--csv/--history/--prometheus")
    points = split_points(store.first, store.last if end is None else end, train_s, test_s, splits)
    base = base or Policy()
    results = [RuleResult(r, headroom_rule(r.policy(base))) for r in rules]
    infos: list[SplitInfo] = []
    notes: list[str] = []
    for sp in points:
        rolled = rollup_store(store, catalog, sp.train)
        workloads = measured(rolled, default_model, catalog)
        if not workloads:
            raise TooShort(f"split {sp.index + 1}: no workload has a memory sample in its training window",
                           hint="check --train/--test against the history's time span")
        names = {w.name for w in workloads}
        replays = {}
        untrained = 0
        for name, ser in store.series.items():
            rep = _Replay.of(ser, sp.test)
            if rep is None:
                continue
            if name in names:
                replays[name] = rep
            else:
                untrained += 1
        if not replays:
            raise TooShort(f"split {sp.index + 1}: no workload sized from its training window has a sample in its test "
                           "window", hint="check --train/--test against the history's time span")
        infos.append(SplitInfo(sp, len(workloads), len(replays), untrained))
        say(f"split {sp.index + 1}/{len(points)}: {len(workloads)} workloads sized, {len(replays)} replayed, "
            f"{len(rules)} rule(s)")
        state = one_gpu_each(workloads)
        profiles = ProfileSet(tuple(pinned(workloads)))
        for res in results:
            res.splits.append(_rule_split(res.rule, res.rule.policy(base), sp, workloads, state, profiles, replays,
                                          catalog, solver))
        if sp.index == len(points) - 1:
            notes += [f"{p.name}: {', '.join(p.notes)}" for p in rolled.profiles if p.notes]
    mark_frontier(results)
    best, reason = recommend(results, target)
    return Sweep(train_s, test_s, target, infos, results, best, reason, store.first, store.last, notes)
