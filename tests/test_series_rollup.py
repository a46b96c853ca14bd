"""A history held in memory (history/series.py) and rolled up from there in bulk (`rollup.rollup_store`): the same
profiles, notes and counts as `rollup.rollup` over the same samples in the same window, whatever the order the
samples came in, several places, unknown compute, unknown models, memory not measured."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from migplan.catalog import builtin_catalog
from migplan.history.rollup import Window, rollup, rollup_store
from migplan.history.samples import Place, Sample
from migplan.history.series import SeriesStore

CAT = builtin_catalog()
PLACES = (Place(host="h1", gpu=0, gpu_model="A100-SXM4-40GB", mig_profile="3g.20gb", mig_start=4),
          Place(host="h2", gpu=1, gpu_model="A100-SXM4-40GB"),
          Place(host="h3", gpu=0, gpu_model="H100-SXM5-80GB", mig_profile="1g.10gb", mig_start=2),
          Place(host="h4", gpu=0, gpu_model="NOT-A-GPU"),
          Place(host=None, gpu=None, gpu_model=None))


def _history(seed: int, n: int) -> list[Sample]:
    rnd = random.Random(seed)
    out = []
    for _ in range(n):
        w = f"w{rnd.randrange(6)}"
        t = 1_790_000_000.0 + rnd.randrange(0, 5000) * 30  # ties in time happen
        mem = None if rnd.random() < 0.05 else rnd.choice([rnd.uniform(0, 40000), float(rnd.randrange(9000, 9100))])
        util = None if rnd.random() < 0.3 else rnd.uniform(0, 100)
        place = PLACES[rnd.randrange(len(PLACES))] if rnd.random() < 0.3 else PLACES[int(w[1:]) % 2]
        out.append(Sample(t, w, mem, util, place))
    return out


def _docs(r):  # type: ignore[no-untyped-def]
    return ([(p.name, p.host, p.document, p.notes) for p in r.profiles], r.skipped, r.samples_seen,
            r.samples_in_window)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 3000), st.sampled_from([(None, None, False), (0, 80_000, False),
                                                                      (0, 80_000, True), (60_000, None, False)]))
def test_rollup_store_is_rollup(seed: int, n: int, window: tuple[int | None, int | None, bool]) -> None:
    samples = _history(seed, n)
    start, end, open_ = window
    t0 = 1_790_000_000.0
    win = Window(None if start is None else t0 + start, None if end is None else t0 + end, open_)
    assert _docs(rollup_store(SeriesStore.of(samples), CAT, win)) == _docs(rollup(samples, CAT, win))


def test_the_store_keeps_time_order_and_the_span() -> None:
    s = [Sample(30.0, "a", 1.0), Sample(10.0, "a", 2.0), Sample(20.0, "b", None, 5.0), Sample(10.0, "a", 3.0)]
    store = SeriesStore.of(s)
    assert (store.first, store.last, store.samples) == (10.0, 30.0, 4)
    a = store.series["a"]
    assert list(a.ts) == [10.0, 10.0, 30.0] and list(a.mem) == [2.0, 3.0, 1.0]  # stable among equal times
    assert [x.memory_mib for x in store.window_samples(10.0, 20.0)] == [2.0, 3.0, None]
    assert a.bounds(10.0, 30.0, True) == (0, 2) and a.bounds(10.0, 30.0, False) == (0, 3)
