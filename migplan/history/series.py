"""A history held compactly in memory, each workload's samples in time order (pure): what a sweep reads once and
then cuts into many training and test windows.

A pass over a CSV file, a store or Prometheus costs far more than the windows a sweep needs (several split
points, each a training and a test window), so the samples are read once into `SeriesStore`: per workload, its
timestamps, memory and utilisation as arrays of doubles (NaN where a sample did not measure it) and the index of
its place, 28 bytes a sample (a 1,000-workload, 14-day history at one sample a minute is 20 million samples,
about 560 MB; at one every five minutes, 113 MB). `finish` puts each workload's samples in time order (a stable
sort: samples with the same time keep the order they came in, as a pass over them would see them), and a window
is then two binary searches.

`rollup.rollup_store` rolls a window up from here into exactly the profiles `rollup.rollup` makes from the same
samples (tests/test_sweep.py checks both on the same histories).
"""

from __future__ import annotations

import bisect
import math
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from migplan.history.samples import Place, Sample

NAN = math.nan


@dataclass
class Series:
    """One workload's samples: times, memory (MiB, NaN: not measured), utilisation (%, NaN) and place index."""

    ts: array[float] = field(default_factory=lambda: array("d"))
    mem: array[float] = field(default_factory=lambda: array("d"))
    util: array[float] = field(default_factory=lambda: array("d"))
    where: array[int] = field(default_factory=lambda: array("I"))
    places: list[Place] = field(default_factory=list)
    _index: dict[Place, int] = field(default_factory=dict)

    def add(self, s: Sample) -> None:
        i = self._index.get(s.place)
        if i is None:
            i = self._index[s.place] = len(self.places)
            self.places.append(s.place)
        self.ts.append(s.timestamp)
        self.mem.append(NAN if s.memory_mib is None else s.memory_mib)
        self.util.append(NAN if s.util_pct is None else s.util_pct)
        self.where.append(i)

    def sort(self) -> None:
        """Time order, stable."""
        ts = self.ts
        if all(ts[i] <= ts[i + 1] for i in range(len(ts) - 1)):
            return
        order = sorted(range(len(ts)), key=ts.__getitem__)
        self.ts = array("d", (ts[i] for i in order))
        self.mem = array("d", (self.mem[i] for i in order))
        self.util = array("d", (self.util[i] for i in order))
        self.where = array("I", (self.where[i] for i in order))

    def bounds(self, start: float | None, end: float | None, end_open: bool) -> tuple[int, int]:
        """The index range [lo, hi) of the samples with start <= t <= end (t < end when `end_open`)."""
        lo = 0 if start is None else bisect.bisect_left(self.ts, start)
        if end is None:
            return lo, len(self.ts)
        return lo, (bisect.bisect_left(self.ts, end) if end_open else bisect.bisect_right(self.ts, end))

    def samples(self, name: str, lo: int, hi: int) -> Iterator[Sample]:
        for i in range(lo, hi):
            m, u = self.mem[i], self.util[i]
            yield Sample(self.ts[i], name, None if m != m else m, None if u != u else u, self.places[self.where[i]])


@dataclass
class SeriesStore:
    """Every workload's `Series`, and the span of the history (first and last sample time)."""

    series: dict[str, Series] = field(default_factory=dict)
    first: float | None = None
    last: float | None = None
    samples: int = 0
    finished: bool = False

    @classmethod
    def of(cls, samples: Iterable[Sample]) -> SeriesStore:
        store = cls()
        store.extend(samples)
        store.finish()
        return store

    def extend(self, samples: Iterable[Sample]) -> None:
        series = self.series
        first, last, n = self.first, self.last, self.samples
        for s in samples:
            ser = series.get(s.workload)
            if ser is None:
                ser = series[s.workload] = Series()
            ser.add(s)
            t = s.timestamp
            if first is None or t < first:
                first = t
            if last is None or t > last:
                last = t
            n += 1
        self.first, self.last, self.samples = first, last, n
        self.finished = False

    def finish(self) -> None:
        for ser in self.series.values():
            ser.sort()
        self.finished = True

    def names(self) -> list[str]:
        return sorted(self.series)

    def window_samples(self, start: float | None, end: float | None, end_open: bool = False) -> Iterator[Sample]:
        """The samples in the window, workload by workload (sorted by name), each in time order."""
        for name in self.names():
            ser = self.series[name]
            lo, hi = ser.bounds(start, end, end_open)
            yield from ser.samples(name, lo, hi)
