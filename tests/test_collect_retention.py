"""Retention in the history store `collect --local` writes every minute: old runs' rows go once no sample
refers to them (through the samples_run index, not a scan), and the freed pages go back to the file system."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from migplan.adapters.history_store import HistoryStore, store_path
from migplan.history.samples import Place, Sample

PLACE = Place("h1", 0, "A100-SXM4-40GB", None, None)
DAY = 86400.0


def _run(store: HistoryStore, ts: float, n: int, *, sample_ts: float | None = None) -> int:
    with store.run(ts, "nvml") as run:
        at = ts if sample_ts is None else sample_ts
        run.add(Sample(at + i * 1e-3, f"w{i % 5}", 1000.0 + i, 50.0, PLACE, "nvml") for i in range(n))
        run.finished = ts
        return run.run_id


def test_old_runs_go_with_their_last_sample_and_runs_still_referred_to_stay(tmp_path: Path) -> None:
    with HistoryStore(store_path(tmp_path)) as s:
        old = [_run(s, k * DAY, 50) for k in range(5)]
        # an old run whose samples are newer than its end (written later for it): it must stay
        keeper = _run(s, 1 * DAY + 10, 20, sample_ts=19 * DAY)
        recent = [_run(s, (15 + k) * DAY, 50) for k in range(5)]
        s.prune(20 * DAY, retention_days=14)
        ids = [r["id"] for r in s.runs()]
        assert ids == [keeper, *recent], ids
        assert all(r not in ids for r in old)
        plan = " ".join(str(row) for row in s.db.execute(
            "EXPLAIN QUERY PLAN DELETE FROM runs WHERE finished IS NOT NULL AND finished < 1 AND NOT EXISTS "
            "(SELECT 1 FROM samples s WHERE s.run = runs.id)"))
        assert "samples_run" in plan, plan  # a lookup per run, not a scan of the samples


def test_pruned_pages_are_handed_back_to_the_file_system(tmp_path: Path) -> None:
    path = store_path(tmp_path)
    with HistoryStore(path) as s:
        for k in range(20):
            _run(s, k * DAY, 400)
        full = os.path.getsize(path)
        s.prune(20 * DAY, retention_days=3)  # keeps 3 of 20 days
        free = s.db.execute("PRAGMA freelist_count").fetchone()[0]
        page = s.db.execute("PRAGMA page_size").fetchone()[0]
        pages = s.db.execute("PRAGMA page_count").fetchone()[0]
    assert free == 0
    assert os.path.getsize(path) == pages * page < full / 3


def test_an_existing_store_gets_the_index_on_its_next_run(tmp_path: Path) -> None:
    path = store_path(tmp_path)
    with HistoryStore(path) as s:
        _run(s, 0.0, 10)
    db = sqlite3.connect(path)
    db.execute("DROP INDEX samples_run")  # a store written before the index existed
    db.commit()
    db.close()
    with HistoryStore(path) as s:
        names = {r[0] for r in s.db.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert "samples_run" in names and s.count() == 10
