"""Roll samples up into workload profiles over a window (pure): what `migplan profiles build` writes.

Per workload: memory p50/p95/p99/max in whole MiB, compute p50/p95/p99/max as a share of the whole
GPU, sample counts, first and last seen, every place it ran on, and notes (few samples, unknown
compute). A workload seen on several hosts is one profile; its `observed` place is where its latest
sample ran (where it runs now, which the planner keeps it on), and `observed.places` lists them all.

Percentiles are exact, by nearest rank: the p-th percentile of n values is the ceil(p/100 x n)-th
smallest (1-based), the max is the largest. Memory is rounded UP to a whole MiB per sample first
(rounding up is monotone, so this equals rounding the percentile up). Compute is kept as SMs on a
grid of 1/100 SM, each sample rounded up, then divided by the SM count of the reference model and
rounded up to 1/10000 of a GPU: exact on that grid, never below the measured value by more than 0 and
above it by at most 0.0001 of a GPU plus 0.01 SM.

Streamable with bounded memory: each workload keeps counts per distinct value (`Counts`: sorted
value and count arrays, 8 bytes per distinct value, compacted from an 8192-value buffer), so the memory
grows with the number of distinct MiB values a workload used, not with the number of samples.

Compute conversion (`Sample.util_pct` is of the place it ran on): SMs used = util/100 x SMs of the
place (the MIG profile's SM count from the catalog, or its compute-slice share of the GPU's SMs when
the catalog lists no SM count; the whole GPU's SMs with MIG off); the profile's share is SMs used /
SMs of the reference model (the model of the `observed` place, else the model seen most), at most 1.
A sample without util, or on a GPU model the catalog does not know, leaves compute unknown (never an
invented number); a profile with no compute sample at all omits `compute` (profiles.UNKNOWN_COMPUTE).
"""

from __future__ import annotations

import bisect
import datetime as dt
import functools
import math
from array import array
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from migplan.catalog import Catalog
from migplan.catalog.geometry import GpuModel
from migplan.history.samples import Place, Sample
from migplan.history.series import Series, SeriesStore
from migplan.profiles import (
    KIND_PROCESS,
    KIND_VM,
    PROFILES_VERSION,
    UNKNOWN_COMPUTE,
    ComputeStats,
    MemoryStats,
    Observation,
    Workload,
)

DAY_S = 86_400.0
DEFAULT_WINDOW_S = 7 * DAY_S
FEW_SAMPLES = 60  # fewer memory samples than this (an hour at one a minute): the profile says so
SM_GRID = 100  # compute kept in 1/100 SM
SHARE_GRID = 10_000  # shares written in 1/10000 of a GPU
PERCENTILES = (("p50", 50.0), ("p95", 95.0), ("p99", 99.0))
_RANKS = tuple(p for _, p in PERCENTILES)
NO_HOST = "no-host"  # the file for workloads whose samples name no host
_BUFFER = 8192


@functools.lru_cache(maxsize=1024)  # workloads share their sample counts
def _ranks(n: int, pcts: tuple[float, ...]) -> list[int]:
    return [max(1, math.ceil(round(p / 100 * n, 9))) for p in pcts]


class Counts:
    """Exact counts of non-negative integers, compact: sorted distinct values with their counts.

    Values are buffered (8 bytes each) and compacted into the sorted arrays when the buffer fills; a workload
    with fewer samples than the buffer (most) is never compacted: its percentiles are read from the sorted
    buffer, and the arrays are never made."""

    __slots__ = ("_buf", "_cnts", "_vals", "total")

    def __init__(self) -> None:
        self._vals: array[int] | None = None  # made by the first compaction
        self._cnts: array[int] | None = None
        self._buf = array("Q")
        self.total = 0

    def add(self, value: int) -> None:
        self._buf.append(value)
        self.total += 1
        if len(self._buf) >= _BUFFER:
            self._compact()

    def add_many(self, value: int, count: int) -> None:
        self._merge(((value, count),))
        self.total += count

    def _compact(self) -> tuple[array[int], array[int]]:
        if self._buf:
            new = sorted(Counter(self._buf).items())
            self._buf = array("Q")
            self._merge(new)
        elif self._vals is None or self._cnts is None:
            self._vals, self._cnts = array("Q"), array("Q")
        return self._vals, self._cnts  # type: ignore[return-value]  # both set just above (by _merge or here)

    @classmethod
    def of(cls, counts: dict[int, int]) -> Counts:
        """The counts of a {value: count} mapping."""
        out = cls()
        keys = sorted(counts)
        out._vals = array("Q", keys)
        out._cnts = array("Q", [counts[v] for v in keys])
        out.total = sum(out._cnts)
        return out

    def _merge(self, pairs: Iterable[tuple[int, int]]) -> None:
        if self._vals is None or self._cnts is None:
            self._vals, self._cnts = array("Q"), array("Q")
        vals, cnts = self._vals, self._cnts
        for v, c in pairs:
            i = bisect.bisect_left(vals, v)
            if i < len(vals) and vals[i] == v:
                cnts[i] += c
            else:
                vals.insert(i, v)
                cnts.insert(i, c)

    def distinct(self) -> int:
        if self._vals is None:
            return len(set(self._buf))
        return len(self._compact()[0])

    def items(self) -> list[tuple[int, int]]:
        """(value, count) pairs, ascending."""
        if self._vals is None:
            return sorted(Counter(self._buf).items())
        vals, cnts = self._compact()
        return list(zip(vals, cnts, strict=True))

    def counted(self) -> Iterable[tuple[int, int]]:
        """(value, count) pairs in any order."""
        if self._vals is None:
            return Counter(self._buf).items()
        return self.items()

    def nearest_rank(self, pcts: Iterable[float]) -> list[int]:
        """The nearest-rank percentiles (each 0 < p <= 100) of the values added; n must be > 0."""
        ranks = _ranks(self.total, tuple(pcts))
        if self._vals is None:
            ordered = sorted(self._buf)
            return [ordered[rank - 1] for rank in ranks]
        vals, cnts = self._compact()
        out, seen, i = [], 0, 0
        for rank in ranks:  # ascending ranks: one walk of the cumulative counts
            while seen + cnts[i] < rank:
                seen += cnts[i]
                i += 1
            out.append(int(vals[i]))
        return out

    def max(self) -> int:
        if self._vals is None:
            return max(self._buf)
        return int(self._compact()[0][-1])


@dataclass(slots=True)  # millions of attribute updates in a pass
class _PlaceAcc:
    samples: int = 0
    first: float = math.inf
    last: float = -math.inf


@dataclass(slots=True)  # millions of attribute updates in a pass
class _Acc:
    memory: Counts = field(default_factory=Counts)
    compute: dict[str, Counts] = field(default_factory=dict)  # model id -> SMs used (1/100 SM)
    samples: int = 0
    compute_unknown: int = 0  # no util in the sample
    compute_unconverted: int = 0  # util on a model the catalog does not know
    unknown_models: Counter[str] = field(default_factory=Counter)
    first: float = math.inf
    last: float = -math.inf
    latest_place: Place = Place()
    places: dict[Place, _PlaceAcc] = field(default_factory=dict)
    # the previous sample's place (by identity: sources hand the same Place object for a repeated place),
    # its accumulator and model, so a run of samples at one place hashes no Place
    prev: tuple[Place, _PlaceAcc, tuple[GpuModel, float] | None] | None = None


@dataclass(frozen=True)
class Window:
    """Samples with start <= timestamp <= end (None: unbounded); `end_open` makes it start <= t < end."""

    start: float | None = None
    end: float | None = None
    end_open: bool = False

    def __contains__(self, ts: float) -> bool:
        if self.start is not None and ts < self.start:
            return False
        if self.end is None:
            return True
        return ts < self.end if self.end_open else ts <= self.end


@dataclass(frozen=True)
class Profile:
    """One workload's rolled-up history: the profile document entry and the planner's `Workload` (made from the
    document when first asked for: an import that only writes the files never needs it)."""

    name: str
    host: str  # the file it goes in: the host of its latest sample, or NO_HOST
    document: dict[str, object]
    notes: tuple[str, ...] = ()

    @functools.cached_property
    def workload(self) -> Workload:
        doc: dict[str, Any] = self.document
        o, mem, cpu = doc["observed"], doc["memory_mib"], doc.get("compute")
        obs = Observation(host=o.get("host"), gpu=o.get("gpu"), gpu_model=o.get("gpu_model"),
                          mig_profile=o.get("mig_profile"), mig_start=o.get("mig_start"),
                          window_start=o["window"]["start"], window_end=o["window"]["end"], samples=o["samples"],
                          first_seen=o["first_seen"], last_seen=o["last_seen"], compute_samples=o["compute_samples"],
                          notes=self.notes, vgpu_type=o.get("vgpu_type"), vm_uuid=o.get("vm_uuid"))
        memory = MemoryStats(p50=mem["p50"], p95=mem["p95"], p99=mem["p99"], max=mem["max"])
        compute = UNKNOWN_COMPUTE if cpu is None else ComputeStats(p50=cpu["p50"], p95=cpu["p95"], p99=cpu["p99"],
                                                                   max=cpu["max"])
        return Workload(name=self.name, observed=obs, memory=memory, compute=compute, source="rollup",
                        kind=doc.get("kind", KIND_PROCESS))


@dataclass
class Rollup:
    profiles: list[Profile]
    window: Window
    samples_seen: int = 0
    samples_in_window: int = 0
    skipped: list[str] = field(default_factory=list)  # workloads with no memory sample in the window

    def by_host(self) -> dict[str, list[Profile]]:
        out: dict[str, list[Profile]] = {}
        for p in self.profiles:
            out.setdefault(p.host, []).append(p)
        return dict(sorted(out.items()))

    def documents(self) -> dict[str, dict[str, object]]:
        """One profiles document per host (file name stem -> document)."""
        return {host: {"version": PROFILES_VERSION, "kind": "migplan/profiles",
                       "workloads": [p.document for p in ps]} for host, ps in self.by_host().items()}


@functools.lru_cache(maxsize=4096)  # a rollup writes the same few first/last-seen times for many workloads
def iso(ts: float) -> str:
    """Unix seconds as ISO 8601 UTC (`2026-11-01T00:00:00Z`), whole seconds unless fractional."""
    when = dt.datetime.fromtimestamp(ts, tz=dt.timezone.utc)
    if when.microsecond == 0:
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return when.isoformat().replace("+00:00", "Z")


def place_sm(catalog: Catalog, place: Place) -> tuple[GpuModel, float] | None:
    """The catalog model of the place and the SMs of the place (instance or whole GPU); None if unknown."""
    if place.gpu_model is None:
        return None
    model = catalog.find(place.gpu_model)
    if model is None:
        return None
    if place.mig_profile is None:
        return model, float(model.sm_total)
    if not model.has_profile(place.mig_profile):
        return None
    prof = model.profile(place.mig_profile)
    if prof.sm_count > 0:
        return model, float(prof.sm_count)
    return model, model.sm_total * prof.compute_slices / model.compute_slices


class _Models:
    """catalog lookups per place and per model name, cached (a history repeats the same few places)."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self._cache: dict[Place, tuple[GpuModel, float] | None] = {}
        self._names: dict[str, GpuModel | None] = {}

    def __call__(self, place: Place) -> tuple[GpuModel, float] | None:
        if place not in self._cache:
            self._cache[place] = place_sm(self.catalog, place)
        return self._cache[place]

    def find(self, name: str | None) -> GpuModel | None:
        if name is None or not name:
            return None
        try:
            return self._names[name]
        except KeyError:
            found = self._names[name] = self.catalog.find(name)
            return found


def accumulate(samples: Iterable[Sample], catalog: Catalog, window: Window,
               models: _Models | None = None) -> tuple[dict[str, _Acc], int, int]:
    """One pass over the samples: per-workload accumulators, samples seen, samples in the window."""
    accs: dict[str, _Acc] = {}
    models = models or _Models(catalog)
    seen = kept = 0
    everything = window.start is None and window.end is None  # --window all: no test per sample
    for s in samples:
        seen += 1
        if not everything and s.timestamp not in window:
            continue
        kept += 1
        acc = accs.get(s.workload)
        if acc is None:
            acc = accs[s.workload] = _Acc()
        _add(acc, s, models)
    return accs, seen, kept


def _add(acc: _Acc, s: Sample, models: _Models) -> None:
    acc.samples += 1
    ts = s.timestamp
    if ts < acc.first:
        acc.first = ts
    if ts >= acc.last:
        acc.last = ts
        acc.latest_place = s.place
    prev = acc.prev
    if prev is not None and prev[0] is s.place:
        pa, where = prev[1], prev[2]
    else:
        found = acc.places.get(s.place)
        if found is None:
            found = acc.places[s.place] = _PlaceAcc()
        pa, where = found, models(s.place)
        acc.prev = (s.place, pa, where)
    pa.samples += 1
    if ts < pa.first:
        pa.first = ts
    if ts > pa.last:
        pa.last = ts
    if s.memory_mib is not None:
        acc.memory.add(math.ceil(s.memory_mib))
    if s.util_pct is None:
        acc.compute_unknown += 1
        return
    if where is None:
        acc.compute_unconverted += 1
        if s.place.gpu_model is not None:
            acc.unknown_models[s.place.gpu_model] += 1
        return
    model, sms = where
    counts = acc.compute.get(model.id)
    if counts is None:
        counts = acc.compute[model.id] = Counts()
    counts.add(math.ceil(round(s.util_pct / 100 * sms * SM_GRID, 6)))


def _reference(acc: _Acc, models: _Models) -> GpuModel | None:
    """The model compute shares are written for: the latest place's, else the one with most samples."""
    model = models.find(acc.latest_place.gpu_model)
    if model is not None:
        return model
    known = Counter[str]()
    for place, pa in acc.places.items():
        m = models.find(place.gpu_model)
        if m is not None:
            known[m.id] += pa.samples
    return models.catalog.get(known.most_common(1)[0][0]) if known else None


def _compute_stats(acc: _Acc, ref: GpuModel | None) -> tuple[dict[str, float] | None, int]:
    """The compute shares of the reference model (merged from every model's SM counts; None: unknown), and how
    many samples.

    SMs of every model are on one grid, and turning SMs into shares (scale, round up, cap at 1) never
    decreases: so the percentiles of the shares are the shares of the SM percentiles, converted four times
    per profile rather than once per distinct value."""
    if ref is None or not acc.compute:
        return None, 0
    parts = list(acc.compute.values())
    sms = parts[0]
    if len(parts) > 1:
        merged: dict[int, int] = {}
        for counts in parts:
            for v, c in counts.counted():
                merged[v] = merged.get(v, 0) + c
        sms = Counts.of(merged)
    scale = SHARE_GRID / (SM_GRID * ref.sm_total)
    p50, p95, p99, top = (min(SHARE_GRID, math.ceil(round(v * scale, 6))) / SHARE_GRID
                          for v in (*sms.nearest_rank(_RANKS), sms.max()))
    return {"p50": p50, "p95": p95, "p99": p99, "max": top}, sms.total


def _place_doc(place: Place, pa: _PlaceAcc, models: _Models) -> dict[str, object]:
    model = models.find(place.gpu_model)
    doc: dict[str, object] = {k: v for k, v in (
        ("host", place.host), ("gpu", place.gpu), ("gpu_model", model.id if model else place.gpu_model),
        ("mig_profile", place.mig_profile), ("mig_start", place.mig_start), ("vgpu_type", place.vgpu_type),
        ("vm_uuid", place.vm_uuid)) if v is not None}
    doc.update(samples=pa.samples, first_seen=iso(pa.first), last_seen=iso(pa.last))
    return doc


def _notes(acc: _Acc, compute_n: int, ref: GpuModel | None) -> list[str]:
    notes = []
    if acc.memory.total < FEW_SAMPLES:
        notes.append(f"rests on few samples: {acc.memory.total} memory samples (fewer than {FEW_SAMPLES}); "
                     "its observed peak may be below its real one")
    if compute_n == 0:
        why = "no sample measured utilisation" if not acc.compute else "no known GPU model to convert it to"
        notes.append(f"compute unknown: {why}; sized by memory alone")
    elif compute_n < acc.samples:
        notes.append(f"compute measured in {compute_n} of {acc.samples} samples")
    for name, n in sorted(acc.unknown_models.items()):
        notes.append(f"GPU model {name!r} is not in the catalog: compute of its {n} samples is unknown")
    if ref is not None and len(acc.compute) > 1:
        notes.append(f"ran on {len(acc.compute)} GPU models: compute is a share of {ref.id}")
    return notes


def profile_of(name: str, acc: _Acc, catalog: Catalog, window: Window, models: _Models | None = None) -> Profile:
    models = models or _Models(catalog)
    p50, p95, p99 = acc.memory.nearest_rank(_RANKS)
    ref = _reference(acc, models)
    compute, compute_n = _compute_stats(acc, ref)
    notes = _notes(acc, compute_n, ref)
    lp = acc.latest_place
    lp_model = models.find(lp.gpu_model)
    model_id = lp_model.id if lp_model else (ref.id if ref else None)
    start = window.start if window.start is not None else acc.first
    end = window.end if window.end is not None else acc.last
    if model_id is None and lp.vgpu_type is not None:  # a VM on a GPU without MIG (L4): the vGPU board's GPU
        model_id = lp.gpu_model
    observed: dict[str, object] = {k: v for k, v in (
        ("host", lp.host), ("gpu", lp.gpu), ("gpu_model", model_id), ("mig_profile", lp.mig_profile),
        ("mig_start", lp.mig_start), ("vgpu_type", lp.vgpu_type), ("vm_uuid", lp.vm_uuid)) if v is not None}
    observed.update(window={"start": iso(start), "end": iso(end)}, samples=acc.memory.total,
                    compute_samples=compute_n, first_seen=iso(acc.first), last_seen=iso(acc.last),
                    places=[_place_doc(p, pa, models) for p, pa in
                            (acc.places.items() if len(acc.places) == 1 else
                             sorted(acc.places.items(), key=lambda kv: (-kv[1].last, _place_key(kv[0]))))])
    if notes:
        observed["notes"] = notes
    doc: dict[str, object] = {"name": name}
    if any(p.vgpu_type is not None for p in acc.places):  # a VM on vGPU (`collect --local --vgpu`): issue 26
        doc["kind"] = KIND_VM
    doc.update(observed=observed, memory_mib={"p50": p50, "p95": p95, "p99": p99, "max": acc.memory.max()})
    if compute is not None:
        doc["compute"] = compute
    return Profile(name, lp.host or NO_HOST, doc, tuple(notes))


def _place_key(p: Place) -> tuple[str, int, str, str, int]:
    return (p.host or "", p.gpu if p.gpu is not None else -1, p.gpu_model or "", p.mig_profile or "",
            p.mig_start if p.mig_start is not None else -1)


def rollup(samples: Iterable[Sample], catalog: Catalog, window: Window | None = None) -> Rollup:
    """Profiles of every workload with at least one memory sample in the window, sorted by name."""
    win = window or Window()
    models = _Models(catalog)
    accs, seen, kept = accumulate(samples, catalog, win, models)
    out = Rollup([], win, seen, kept)
    for name in sorted(accs):
        acc = accs[name]
        if acc.memory.total == 0:
            out.skipped.append(name)
            continue
        out.profiles.append(profile_of(name, acc, catalog, win, models))
    return out


def _acc_of(ser: Series, lo: int, hi: int, models: _Models) -> _Acc:
    """The accumulator `accumulate` makes from the samples lo..hi-1 of a time-ordered series, in bulk: the same
    counts, places, first/last and latest place (the last of the samples with the latest time, as a pass in that
    order sees it)."""
    acc = _Acc()
    acc.samples = hi - lo
    ts, where, places = ser.ts, ser.where, ser.places
    acc.first, acc.last = ts[lo], ts[hi - 1]
    acc.latest_place = places[where[hi - 1]]
    mem = [math.ceil(m) for m in ser.mem[lo:hi] if m == m]
    if mem:
        acc.memory = Counts.of(Counter(mem))
    idx = where[lo:hi]
    utils = ser.util[lo:hi]
    single = len(places) == 1 or min(idx) == max(idx)
    by_place: dict[int, list[int]] = {idx[0]: list(range(hi - lo))} if single else {}
    if not single:
        for k, i in enumerate(idx):
            by_place.setdefault(i, []).append(k)
    compute: dict[str, Counter[int]] = {}
    for i, ks in by_place.items():
        place = places[i]
        acc.places[place] = _PlaceAcc(len(ks), ts[lo + ks[0]], ts[lo + ks[-1]])
        known = [utils[k] for k in ks if utils[k] == utils[k]]
        acc.compute_unknown += len(ks) - len(known)
        if not known:
            continue
        where_sm = models(place)
        if where_sm is None:
            acc.compute_unconverted += len(known)
            if place.gpu_model is not None:
                acc.unknown_models[place.gpu_model] += len(known)
            continue
        model, sms = where_sm
        grid = compute.setdefault(model.id, Counter())
        grid.update(math.ceil(round(u / 100 * sms * SM_GRID, 6)) for u in known)
    acc.compute = {mid: Counts.of(c) for mid, c in compute.items()}
    return acc


def rollup_store(store: SeriesStore, catalog: Catalog, window: Window | None = None) -> Rollup:
    """`rollup` of the store's samples in the window, from the time-ordered series in bulk (the same profiles)."""
    win = window or Window()
    models = _Models(catalog)
    out = Rollup([], win, store.samples, 0)
    for name in store.names():
        ser = store.series[name]
        lo, hi = ser.bounds(win.start, win.end, win.end_open)
        if hi <= lo:
            continue
        out.samples_in_window += hi - lo
        acc = _acc_of(ser, lo, hi, models)
        if acc.memory.total == 0:
            out.skipped.append(name)
            continue
        out.profiles.append(profile_of(name, acc, catalog, win, models))
    return out


def last_timestamp(samples: Iterable[Sample]) -> float | None:
    """The latest sample time (one pass), to end a window at the end of a history."""
    last: float | None = None
    for s in samples:
        if last is None or s.timestamp > last:
            last = s.timestamp
    return last
