"""The sample history on a host: SQLite (stdlib `sqlite3`) in WAL mode, one transaction per collect run.

Why SQLite in WAL mode: a run's samples and the state it advances (NVML's utilisation cursors, the
accounting records already read) are committed together or not at all. A crash or `kill -9` mid-run
leaves the uncommitted tail of the WAL, which SQLite discards on the next open; a full disk makes the
write fail with SQLITE_FULL and the transaction is rolled back. Either way earlier runs are untouched
(synchronous=FULL: a committed run survives a power cut too). After each run the WAL is checkpointed
into the main file, so a copy of `history.sqlite` taken between runs (SFTP, `collect --inventory`) holds
everything; a copy taken while a run writes is checked (`PRAGMA quick_check`) and fetched again.

Layout (compact: names and places are stored once and referenced by id):

    runs(id, started, finished, source, few, notes)    one row per collect run
    names(id, name)                                     workload names
    places(id, key, host, gpu, gpu_model, mig_profile, mig_start, vgpu_type, vm_uuid)
    samples(ts, run, workload, place, memory_mib, util_pct, util_peak, util_n, source)
    device_util(ts, run, gpu, util_pct, util_peak, util_n)
    state(key, value)                                   JSON the collector carries from run to run

`vgpu_type` and `vm_uuid` (a VM's vGPU, `collect --local --vgpu`, issue 26) were added after the first stores:
a store without them gets them on its next run (`ALTER TABLE ... ADD COLUMN`, NULL for every place it has), and
a copy without them (fetched from a host running an older migplan) is read with both None.

Retention (default 14 days) and a size cap (default 256 MiB) are applied after each run: the oldest
samples go first, and freed pages are returned to the file system (auto_vacuum=INCREMENTAL).
`iter_samples(since, until)` yields `migplan.history.samples.Sample`s in time order.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from migplan.errors import InputError, MigplanError
from migplan.history.identity import clean
from migplan.history.samples import Place, Sample
from migplan.names import HOST_NAME, PROFILE_NAME

DEFAULT_DIR = "/var/lib/migplan/history"
FILE_NAME = "history.sqlite"
DEFAULT_RETENTION_DAYS = 14.0
DEFAULT_MAX_MB = 256
SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS runs(id INTEGER PRIMARY KEY, started REAL NOT NULL, finished REAL,
    source TEXT NOT NULL, few INTEGER NOT NULL DEFAULT 0, notes TEXT NOT NULL DEFAULT '[]');
CREATE TABLE IF NOT EXISTS names(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS places(id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, host TEXT, gpu INTEGER,
    gpu_model TEXT, mig_profile TEXT, mig_start INTEGER);
CREATE TABLE IF NOT EXISTS samples(ts REAL NOT NULL, run INTEGER NOT NULL, workload INTEGER NOT NULL,
    place INTEGER NOT NULL, memory_mib REAL, util_pct REAL, util_peak REAL, util_n INTEGER, source TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS samples_ts ON samples(ts);
CREATE INDEX IF NOT EXISTS samples_run ON samples(run);
CREATE TABLE IF NOT EXISTS device_util(ts REAL NOT NULL, run INTEGER NOT NULL, gpu INTEGER NOT NULL,
    util_pct REAL, util_peak REAL, util_n INTEGER);
CREATE INDEX IF NOT EXISTS device_util_ts ON device_util(ts);
CREATE TABLE IF NOT EXISTS state(key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


_VM_COLUMNS = {"vgpu_type", "vm_uuid"}
_QUERY = ("SELECT s.ts, n.name, s.memory_mib, s.util_pct, p.host, p.gpu, p.gpu_model, p.mig_profile, p.mig_start, "
          "s.source, s.util_peak, s.util_n, p.vgpu_type, p.vm_uuid FROM samples s JOIN names n ON n.id = s.workload "
          "JOIN places p ON p.id = s.place WHERE s.ts >= ? AND s.ts < ? ORDER BY s.ts, s.rowid")
_QUERY_V1 = _QUERY.replace("p.vgpu_type, p.vm_uuid", "NULL, NULL")  # a store written before the VM columns
_VGPU_TYPE = re.compile(r"(?a)[A-Z0-9][A-Za-z0-9-]{1,60}")  # checked again by the profile reader (NVIDIA's grammar)
_UUID = re.compile(r"(?a)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
MAX_MIB = float(1 << 20)  # migplan.names.MAX_MEMORY_MIB: more is not a real reading


def _number(v: object, low: float = -math.inf, high: float = math.inf) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not low <= v <= high:
        return None
    return float(v)


def _count(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 2**31 else None


def _text(v: object, pattern: re.Pattern[str] | None = None) -> str | None:
    if not isinstance(v, str) or len(v) > 253:
        return None
    return v if pattern is None or pattern.fullmatch(v) else None


class HistoryStoreError(MigplanError):
    code = "history-store"


@dataclass(frozen=True)
class StoredSample:
    """A sample and what the store keeps beside it (the peak and count of the utilisation samples)."""

    sample: Sample
    util_peak: float | None = None
    util_n: int | None = None


@dataclass(frozen=True)
class PruneResult:
    deleted: int
    size_bytes: int


def store_path(location: str | os.PathLike[str]) -> Path:
    """A directory means `<dir>/history.sqlite`; anything else is the file itself."""
    p = Path(location)
    return p / FILE_NAME if p.is_dir() or not p.suffix else p


class HistoryStore:
    """One SQLite history file. `host` (when given) replaces the host of every sample read back: a copy
    fetched from an inventory host is read under the inventory's name for it."""

    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False, host: str | None = None,
                 busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self.host = host
        self.readonly = readonly
        self._names: dict[str, int] = {}
        self._places: dict[str, int] = {}
        self.skipped = 0  # rows read back with values of the wrong type or range (a damaged or hostile file)
        try:
            if readonly:
                if not self.path.is_file():
                    raise InputError(f"{self.path}: no history store here",
                                     hint="run 'migplan collect --local' on the host first")
                self.db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, timeout=busy_timeout_s,
                                          isolation_level=None)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self.db = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None)
                self._init()
            self.db.execute("PRAGMA trusted_schema=OFF")  # a fetched file's triggers/views may not call functions
            self.db.execute("PRAGMA cell_size_check=ON")
            self._check_version()
        except sqlite3.DatabaseError as err:
            raise self._error(err, "open") from None

    # -- opening -------------------------------------------------------------------------------------
    def _init(self) -> None:
        db = self.db
        db.execute("PRAGMA auto_vacuum=INCREMENTAL")  # only takes effect before the first table exists
        mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise HistoryStoreError(f"{self.path}: SQLite cannot use WAL mode here (journal_mode={mode})",
                                    hint="put the history on a local file system (--history DIR)")
        db.execute("PRAGMA synchronous=FULL")
        db.executescript(_SCHEMA)
        for column in sorted(_VM_COLUMNS - self._place_columns()):
            try:
                db.execute(f"ALTER TABLE places ADD COLUMN {column} TEXT")
            except sqlite3.OperationalError as err:  # a run opening the store at the same time added it first
                if "duplicate column" not in str(err):
                    raise
        db.execute("INSERT OR IGNORE INTO meta(key, value) VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        with contextlib.suppress(OSError):  # not ours to change (a copy read by someone else): keep what it has
            os.chmod(self.path, 0o640)

    def _place_columns(self) -> set[str]:
        return {str(r[1]) for r in self.db.execute("PRAGMA table_info(places)")}

    def _check_version(self) -> None:
        try:
            row = self.db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        except sqlite3.OperationalError:
            row = None
        if row is None or row[0] != str(SCHEMA_VERSION):
            raise InputError(f"{self.path}: not a migplan history store (schema {row[0] if row else 'missing'}, "
                             f"expected {SCHEMA_VERSION})", hint="point --history at a directory migplan writes")

    def _error(self, err: sqlite3.Error, what: str) -> MigplanError:
        text = str(err)
        if "disk is full" in text or "database or disk is full" in text:
            return HistoryStoreError(f"{self.path}: the disk is full; this run's samples were not written "
                                     "(earlier samples are intact)",
                                     hint="free space, or lower --max-mb / --retention-days")
        if "locked" in text or "busy" in text:
            return HistoryStoreError(f"{self.path}: another collect run holds the history store",
                                     hint="runs overlap: collect more rarely, or look for a stuck run")
        if isinstance(err, sqlite3.DatabaseError) and "not a database" in text:
            return InputError(f"{self.path}: not a SQLite history store ({text})",
                              hint="point --history at a directory migplan writes")
        return HistoryStoreError(f"{self.path}: cannot {what} the history store: {text}")

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> HistoryStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing one run -------------------------------------------------------------------------------
    @contextmanager
    def run(self, started: float, source: str, *, few: bool = False) -> Iterator[RunWriter]:
        """One collect run: everything written through the writer is committed at the end, or nothing."""
        try:
            self.db.execute("BEGIN IMMEDIATE")  # the write lock first: overlapping runs wait, then read state
            run_id = self.db.execute("INSERT INTO runs(started, source, few) VALUES (?, ?, ?)",
                                     (started, source, int(few))).lastrowid
        except sqlite3.Error as err:
            self._rollback()
            raise self._error(err, "start a run in") from None
        writer = RunWriter(self, int(run_id or 0))
        try:
            yield writer
            self.db.execute("UPDATE runs SET finished=?, notes=? WHERE id=?",
                            (writer.finished or started, json.dumps(writer.notes), run_id))
            self.db.execute("COMMIT")
        except sqlite3.Error as err:
            self._rollback()
            raise self._error(err, "write") from None
        except BaseException:
            self._rollback()
            raise
        finally:
            self._names.clear()  # ids of a rolled-back run must not be reused
            self._places.clear()
        # the main file alone holds every run now; if a reader holds the WAL, the next run catches up
        with contextlib.suppress(sqlite3.Error):
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def _rollback(self) -> None:
        with contextlib.suppress(sqlite3.Error):  # no transaction was open (BEGIN itself failed)
            self.db.execute("ROLLBACK")

    def _name_id(self, name: str) -> int:
        if name not in self._names:
            row = self.db.execute("SELECT id FROM names WHERE name=?", (name,)).fetchone()
            if row is None:
                row = (self.db.execute("INSERT INTO names(name) VALUES (?)", (name,)).lastrowid,)
            self._names[name] = int(row[0])
        return self._names[name]

    def _place_id(self, p: Place) -> int:
        parts: list[object] = [p.host, p.gpu, p.gpu_model, p.mig_profile, p.mig_start]
        if p.vgpu_type is not None or p.vm_uuid is not None:  # a process's key is as it always was
            parts += [p.vgpu_type, p.vm_uuid]
        key = json.dumps(parts)
        if key not in self._places:
            row = self.db.execute("SELECT id FROM places WHERE key=?", (key,)).fetchone()
            if row is None:
                row = (self.db.execute(
                    "INSERT INTO places(key, host, gpu, gpu_model, mig_profile, mig_start, vgpu_type, vm_uuid) "
                    "VALUES (?,?,?,?,?,?,?,?)",
                    (key, p.host, p.gpu, p.gpu_model, p.mig_profile, p.mig_start, p.vgpu_type,
                     p.vm_uuid)).lastrowid,)
            self._places[key] = int(row[0])
        return self._places[key]

    # -- state -------------------------------------------------------------------------------------------
    def state(self, key: str, default: Any = None) -> Any:
        row = self.db.execute("SELECT value FROM state WHERE key=?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    # -- reading -----------------------------------------------------------------------------------------
    def iter_samples(self, since: float | None = None, until: float | None = None) -> Iterator[Sample]:
        """Samples with since <= timestamp < until (None: unbounded), oldest first."""
        for stored in self.iter_stored(since, until):
            yield stored.sample

    def iter_stored(self, since: float | None = None, until: float | None = None) -> Iterator[StoredSample]:
        try:
            query = _QUERY if self._place_columns() >= _VM_COLUMNS else _QUERY_V1
            rows = self.db.execute(query, (-1e300 if since is None else since, 1e300 if until is None else until))
            names: dict[str, str] = {}
            places: dict[tuple[Any, ...], Place] = {}
            for ts, name, mem, util, host, gpu, model, profile, start, source, peak, n, vtype, vm_uuid in rows:
                # a store fetched from a host is untrusted: SQLite columns take any type, so check each value
                t = _number(ts)
                if t is None or not isinstance(name, str):
                    self.skipped += 1
                    continue
                key = (host, gpu, model, profile, start, vtype, vm_uuid)
                place = places.get(key)
                if place is None:
                    place = places[key] = Place(self.host or _text(host, HOST_NAME), _count(gpu), _text(model),
                                                _text(profile, PROFILE_NAME), _count(start), _text(vtype, _VGPU_TYPE),
                                                _text(vm_uuid, _UUID))
                workload = names.get(name) or names.setdefault(name, clean(name))
                yield StoredSample(Sample(t, workload, _number(mem, 0.0, MAX_MIB), _number(util, 0.0, 100.0),
                                          place, _text(source) or ""), _number(peak, 0.0, 100.0), _count(n))
        except sqlite3.DatabaseError as err:
            raise self._error(err, "read") from None

    def runs(self) -> list[dict[str, Any]]:
        rows = self.db.execute("SELECT id, started, finished, source, few, notes FROM runs ORDER BY id").fetchall()
        return [{"id": r[0], "started": r[1], "finished": r[2], "source": r[3], "few": bool(r[4]),
                 "notes": json.loads(r[5])} for r in rows]

    def count(self) -> int:
        return int(self.db.execute("SELECT count(*) FROM samples").fetchone()[0])

    def check(self) -> str:
        """`PRAGMA quick_check`: 'ok' for an intact file."""
        try:
            return str(self.db.execute("PRAGMA quick_check").fetchone()[0])
        except sqlite3.DatabaseError as err:
            return str(err)

    def size_bytes(self) -> int:
        page = self.db.execute("PRAGMA page_size").fetchone()[0]
        used = (self.db.execute("PRAGMA page_count").fetchone()[0]
                - self.db.execute("PRAGMA freelist_count").fetchone()[0])
        return int(page * used)

    # -- retention -----------------------------------------------------------------------------------------
    def prune(self, now: float, *, retention_days: float = DEFAULT_RETENTION_DAYS,
              max_bytes: int = DEFAULT_MAX_MB * 1024 * 1024) -> PruneResult:
        """Drop samples older than the retention, then the oldest until the store is under `max_bytes`."""
        deleted = 0
        try:
            self.db.execute("BEGIN IMMEDIATE")
            cut = now - retention_days * 86400
            deleted += self.db.execute("DELETE FROM samples WHERE ts < ?", (cut,)).rowcount
            self.db.execute("DELETE FROM device_util WHERE ts < ?", (cut,))
            while self.size_bytes() > max_bytes:
                total = self.count()
                if total == 0:
                    break
                chunk = max(1, total // 10)
                deleted += self.db.execute(
                    "DELETE FROM samples WHERE rowid IN (SELECT rowid FROM samples ORDER BY ts LIMIT ?)",
                    (chunk,)).rowcount
                oldest = self.db.execute("SELECT min(ts) FROM samples").fetchone()[0]
                if oldest is not None:
                    self.db.execute("DELETE FROM device_util WHERE ts < ?", (oldest,))
                self.db.execute("PRAGMA incremental_vacuum")
            # runs no sample refers to any more; samples_run makes this a lookup per old run, where a scan of
            # every sample cost about 27 ms a run on a 14-day store (bench/collect_cost.py)
            self.db.execute("DELETE FROM runs WHERE finished IS NOT NULL AND finished < ? AND NOT EXISTS "
                            "(SELECT 1 FROM samples s WHERE s.run = runs.id)", (cut,))
            self.db.execute("COMMIT")
            # hand the free pages back to the file system: execute() steps the pragma once, which frees one
            # page; executescript() runs it to the end (no transaction is open here)
            self.db.executescript("PRAGMA incremental_vacuum;")
            self.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.Error as err:
            self._rollback()
            raise self._error(err, "prune") from None
        return PruneResult(deleted, self.size_bytes())


class RunWriter:
    """What one run writes (inside its transaction)."""

    def __init__(self, store: HistoryStore, run_id: int) -> None:
        self.store = store
        self.run_id = run_id
        self.notes: list[str] = []
        self.finished: float | None = None
        self.written = 0

    def add(self, samples: Iterable[Sample | StoredSample]) -> int:
        rows = []
        for item in samples:
            st = item if isinstance(item, StoredSample) else StoredSample(item)
            s = st.sample
            rows.append((s.timestamp, self.run_id, self.store._name_id(s.workload), self.store._place_id(s.place),
                         s.memory_mib, s.util_pct, st.util_peak, st.util_n, s.source))
        self.store.db.executemany("INSERT INTO samples(ts, run, workload, place, memory_mib, util_pct, util_peak, "
                                  "util_n, source) VALUES (?,?,?,?,?,?,?,?,?)", rows)
        self.written += len(rows)
        return len(rows)

    def add_device(self, ts: float, gpu: int, util_pct: float | None, util_peak: float | None,
                   util_n: int | None) -> None:
        self.store.db.execute("INSERT INTO device_util(ts, run, gpu, util_pct, util_peak, util_n) VALUES (?,?,?,?,?,?)",
                              (ts, self.run_id, gpu, util_pct, util_peak, util_n))

    def state(self, key: str, default: Any = None) -> Any:
        return self.store.state(key, default)

    def set_state(self, key: str, value: Any) -> None:
        self.store.db.execute("INSERT INTO state(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET "
                              "value=excluded.value", (key, json.dumps(value, separators=(",", ":"))))


# --- several hosts' stores ------------------------------------------------------------------------------

class FleetHistory:
    """A directory of stores fetched from hosts (`<host>.sqlite`, as `collect --inventory` writes it):
    their samples merged, each under its host's inventory name."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self.files = sorted(self.directory.glob("*.sqlite"))
        if not self.files:
            raise InputError(f"{self.directory}: no history stores (*.sqlite) here",
                             hint="collect first: 'migplan collect --inventory FILE --out DIR'")

    def iter_samples(self, since: float | None = None, until: float | None = None) -> Iterator[Sample]:
        import heapq

        stores = [HistoryStore(f, readonly=True, host=f.stem) for f in self.files]
        try:
            yield from heapq.merge(*(s.iter_samples(since, until) for s in stores), key=lambda x: x.timestamp)
        finally:
            for s in stores:
                s.close()


def open_history(location: str | os.PathLike[str]) -> HistoryStore | FleetHistory:
    """A host's store (a file, or a directory holding history.sqlite) or a fleet directory of <host>.sqlite."""
    p = Path(location)
    if p.is_dir() and not (p / FILE_NAME).exists():
        return FleetHistory(p)
    return HistoryStore(store_path(p), readonly=True)


def read_samples(location: str | os.PathLike[str], since: float | None = None,
                 until: float | None = None) -> Iterator[Sample]:
    """Every sample of a history (see `open_history`), oldest first: the reader `profiles build` and
    `backtest` use for `--history PATH`."""
    history = open_history(location)
    try:
        yield from history.iter_samples(since, until)
    finally:
        if isinstance(history, HistoryStore):
            history.close()
