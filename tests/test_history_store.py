"""The on-host history store: runs are all or nothing; kill -9 mid-write and a full disk lose no earlier sample."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from migplan.adapters.history_store import (
    FleetHistory,
    HistoryStore,
    HistoryStoreError,
    open_history,
    read_samples,
    store_path,
)
from migplan.errors import InputError
from migplan.history.samples import Place, Sample

REPO = Path(__file__).resolve().parents[1]
PLACE = Place("h1", 0, "A100-SXM4-40GB", "3g.20gb", 0)


def _run(store: HistoryStore, ts: float, n: int, workload: str = "w") -> None:
    with store.run(ts, "nvml") as run:
        run.add(Sample(ts + i * 1e-3, f"{workload}{i % 5}", 1000.0 + i, 50.0, PLACE, "nvml") for i in range(n))
        run.finished = ts


def test_round_trip_in_time_order_with_bounds(tmp_path: Path) -> None:
    with HistoryStore(store_path(tmp_path)) as s:
        for k in range(3):
            _run(s, 1000.0 + 60 * k, 10)
        assert s.count() == 30
        got = list(s.iter_samples(1060.0, 1120.0))
        assert len(got) == 10 and all(1060.0 <= x.timestamp < 1120.0 for x in got)
        assert got[0].place == PLACE and got[0].source == "nvml"
        assert [x.timestamp for x in s.iter_samples()] == sorted(x.timestamp for x in s.iter_samples())
        assert [r["id"] for r in s.runs()] == [1, 2, 3]
    assert len(list(read_samples(tmp_path))) == 30  # the reader `profiles build --history` uses


def test_a_failing_run_writes_nothing(tmp_path: Path) -> None:
    with HistoryStore(store_path(tmp_path)) as s:
        _run(s, 1000.0, 10)
        with pytest.raises(RuntimeError), s.run(1060.0, "nvml") as run:
            run.add([Sample(1060.0, "x", 1.0, None, PLACE)])
            run.set_state("cursors", {"GPU-x": 99})
            raise RuntimeError("boom")
        assert s.count() == 10 and s.state("cursors") is None and len(s.runs()) == 1


def test_retention_and_size_cap(tmp_path: Path) -> None:
    with HistoryStore(store_path(tmp_path)) as s:
        day = 86400.0
        for k in range(20):
            _run(s, k * day, 200)
        r = s.prune(20 * day, retention_days=14)
        assert r.deleted == 6 * 200
        assert min(x.timestamp for x in s.iter_samples()) >= 6 * day
        before = s.size_bytes()
        r = s.prune(20 * day, retention_days=14, max_bytes=before // 2)
        assert r.size_bytes <= before // 2 and s.count() > 0
        newest = max(x.timestamp for x in s.iter_samples())
        assert newest >= 19 * day  # the oldest went first
    assert os.path.getsize(store_path(tmp_path)) <= before  # pages handed back to the file system


def test_not_a_store_is_an_input_error(tmp_path: Path) -> None:
    bad = tmp_path / "history.sqlite"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(InputError, match="not a SQLite history store"):
        HistoryStore(bad)
    other = tmp_path / "other.sqlite"
    sqlite3.connect(other).execute("CREATE TABLE t(x)").connection.close()
    with pytest.raises(InputError, match="not a migplan history store"):
        HistoryStore(other, readonly=True)


def test_fleet_directory_merges_hosts_under_their_names(tmp_path: Path) -> None:
    for host, ts in (("gpu01", 1000.0), ("gpu02", 1030.0)):
        with HistoryStore(tmp_path / f"{host}.sqlite") as s:
            _run(s, ts, 3)
    history = open_history(tmp_path)
    assert isinstance(history, FleetHistory)
    got = list(history.iter_samples())
    assert [x.place.host for x in got] == ["gpu01"] * 3 + ["gpu02"] * 3


# --- crashes ------------------------------------------------------------------------------------------

WRITER = r"""
import sys, time
from migplan.adapters.history_store import HistoryStore
from migplan.history.samples import Place, Sample
path, per_run, pause = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
place = Place("h1", 0, "A100-SXM4-40GB")
with HistoryStore(path) as s:
    k = len(s.runs())
    while True:
        k += 1
        with s.run(float(k), "nvml") as run:
            run.add(Sample(k + i * 1e-6, "w", float(i), None, place) for i in range(per_run // 2))
            print("writing", k, flush=True)
            time.sleep(pause)
            run.add(Sample(k + 0.5 + i * 1e-6, "w", float(i), None, place) for i in range(per_run - per_run // 2))
            run.set_state("cursor", k)
        print("committed", k, flush=True)
"""


def _child(path: Path, per_run: int, pause: float) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(per_run), str(pause)], stdout=subprocess.PIPE,
                            text=True, env=env)


def _check_whole_runs(path: Path, per_run: int, committed: int) -> int:
    with HistoryStore(path) as s:
        assert s.check() == "ok"
        counts: dict[int, int] = {}
        for row in s.db.execute("SELECT run, count(*) FROM samples GROUP BY run"):
            counts[row[0]] = row[1]
        assert all(c == per_run for c in counts.values()), counts  # never half a run
        assert len(counts) >= committed  # every run reported committed is there
        assert s.state("cursor") == max(counts, default=None)  # the state advanced with its samples, not alone
        return len(counts)


@pytest.mark.slow
def test_kill_9_in_the_middle_of_a_write_loses_no_earlier_run(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite"
    proc = _child(path, 4000, 30.0)
    assert proc.stdout is not None
    committed = 0
    for line in proc.stdout:
        if line.startswith("writing 1"):
            break
    # run 1 is open (half written, WAL holding it): kill -9 now
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _check_whole_runs(path, 4000, committed) == 0
    # and with committed runs before the kill, at random moments (inside writes, commits and checkpoints)
    rng = random.Random(11)
    total_committed = 0
    for _ in range(6):
        proc = _child(path, 3000, 0.0)
        assert proc.stdout is not None
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 2 and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if line.startswith("committed"):
                seen += 1
        time.sleep(rng.uniform(0.0, 0.05))
        os.kill(proc.pid, signal.SIGKILL)
        rest = proc.stdout.read()
        proc.wait()
        total_committed += seen + rest.count("committed")
        assert _check_whole_runs(path, 3000, total_committed) >= total_committed


# --- a full disk ------------------------------------------------------------------------------------------

def _fill_until_full(path: Path) -> tuple[int, str]:
    with HistoryStore(path) as s:
        for k in range(10_000):
            try:
                _run(s, float(k), 500)
            except HistoryStoreError as err:
                return k, err.message
    raise AssertionError("the disk never filled")


def test_full_disk_tmpfs_keeps_earlier_runs(tmp_path: Path) -> None:
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(mnt)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tiny tmpfs here (needs root and CAP_SYS_ADMIN): {done.stderr.strip()}")
    try:
        path = mnt / "history.sqlite"
        filler = mnt / "filler"
        filler.write_bytes(b"\0" * 200_000)  # someone else's file on the same disk
        runs, message = _fill_until_full(path)
        assert runs > 0 and "disk is full" in message and "earlier samples are intact" in message
        with HistoryStore(path, readonly=True) as s:
            assert s.check() == "ok" and s.count() == runs * 500
            assert len(list(s.iter_samples())) == runs * 500
        filler.unlink()  # space again: the next run writes, on top of every earlier one
        with HistoryStore(path) as s:
            _run(s, float(runs + 1), 10)
            assert s.check() == "ok" and s.count() == runs * 500 + 10
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


FSIZE = r"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # write(2) then fails with EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (300_000, 300_000))
from migplan.adapters.history_store import HistoryStore, HistoryStoreError
from migplan.history.samples import Place, Sample
place = Place("h1", 0, "A100-SXM4-40GB")
with HistoryStore(sys.argv[1]) as s:
    for k in range(10_000):
        try:
            with s.run(float(k), "nvml") as run:
                run.add(Sample(k + i * 1e-6, "w", float(i), None, place) for i in range(500))
        except HistoryStoreError as err:
            print("runs", k, "error", err.message, flush=True)
            break
"""


def test_file_size_limit_keeps_earlier_runs(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", FSIZE, str(path)], capture_output=True, text=True, env=env,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    words = done.stdout.split()
    runs = int(words[1])
    assert runs > 0 and "error" in words
    with HistoryStore(path, readonly=True) as s:
        assert s.check() == "ok" and s.count() == runs * 500


def test_a_hostile_store_yields_only_checked_values(tmp_path: Path) -> None:
    path = tmp_path / "history.sqlite"
    with HistoryStore(path) as s:
        _run(s, 1000.0, 3)
        s.db.execute("UPDATE samples SET memory_mib='lots', util_pct=1e9 WHERE rowid=1")
        s.db.execute("UPDATE samples SET ts='soon' WHERE rowid=2")
        s.db.execute("UPDATE names SET name='../../etc passwd' WHERE id=1")
        s.db.execute("UPDATE places SET gpu='zero', mig_profile=7, host='a b'")
    with HistoryStore(path, readonly=True, host="gpu01") as s:
        got = list(s.iter_samples())
        assert len(got) == 2  # the row without a real time is left out
        first = got[0]
        assert first.memory_mib is None and first.util_pct is None  # not a number / out of range: not measured
        assert first.workload == "etc_passwd" and first.place.gpu is None and first.place.mig_profile is None
        assert {x.place.host for x in got} == {"gpu01"}
