"""Profiles from history and backtests: read the history (CSV file, on-host store or Prometheus), roll it up,
write.

  profiles build [--history PATH | --csv FILE | --prometheus URL] [--window 7d] [--until T] --out DIR
  profiles import FILE.csv [--window 7d] [--until T] --out DIR   (the same, from a CSV file)
  backtest (--csv FILE | --history PATH | --prometheus URL) --train 7d --test 7d --policy max+10% ...

The window ends at `--until`, else at the history's last sample; for Prometheus, which has no "last
sample" to find, at `--until` or now, and only the window is asked for (build: `--window` back from
the end; backtest: `--train` + `--test`), through migplan.commands.collect_prometheus (chunked
`query_range`, bounded memory; each pass asks again). For a CSV file that last sample
is found without a second pass where the file is in time order: the last MiB of the file is read first
and its latest time taken as the end; the pass then checks that no row was later, and when one was
(a file not in time order) the file is read a second time with the true end (a note says so).

The CSV file is read in binary, one line at a time with a bounded `readline`, so a line without a
newline for a gigabyte costs MAX_LINE_BYTES of memory and is rejected, not loaded.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import stat
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from migplan import yamldoc
from migplan.catalog import Catalog
from migplan.commands import Report, quiet
from migplan.commands.context import Context
from migplan.commands.profiles_dir import check_out_dir, write_profiles
from migplan.errors import InputError
from migplan.files import write_atomic
from migplan.history import csv_series
from migplan.history.backtest import DEFAULT_RULES, Backtest, backtest
from migplan.history.csv_series import CsvSeries, CsvStats, RowError
from migplan.history.rollup import Rollup, Window, iso, last_timestamp, rollup
from migplan.history.samples import Sample
from migplan.history.series import SeriesStore
from migplan.history.sweep import DEFAULT_FAMILIES, DEFAULT_SPLITS, DEFAULT_TARGET, Sweep, rules_of, sweep
from migplan.history.sweep import load as sweep_load
from migplan.planner import Policy
from migplan.planner.sizing import SizingRule, parse_share

if TYPE_CHECKING:  # imported when --prometheus is given
    from migplan.commands.collect_prometheus import PromRequest

TAIL_BYTES = 1 << 20
_DURATION = re.compile(r"(?a)([0-9]+(?:\.[0-9]+)?)\s*(s|m|h|d|w)")
_UNIT_S = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}


def parse_duration(text: str, option: str) -> float | None:
    """`7d`, `12h`, `30m`, `90s`, `2w` -> seconds; `all` -> None (no limit)."""
    t = text.strip().lower()
    if t == "all":
        return None
    m = _DURATION.fullmatch(t)
    if m is None or float(m.group(1)) <= 0:
        raise InputError(f"{text!r} is not a duration", key=option,
                         hint="write a number and a unit: 90s, 30m, 12h, 7d, 2w (or 'all')")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def parse_time(text: str, option: str) -> float:
    try:
        return csv_series.parse_timestamp(text)
    except RowError as err:
        raise InputError(str(err), key=option, hint="unix seconds or ISO 8601 such as 2026-11-01T00:00:00Z") from None


# --- reading a CSV file ---------------------------------------------------------------------------

def _check_regular(path: str, option: str) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError("no such file", source=path, key=option, hint="check the path") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError("not a regular file (a directory, device or FIFO)", source=path, key=option,
                         hint="give the path of a CSV file")


PROGRESS_BYTES = 256 << 20  # a progress line per 256 MiB read


def csv_lines(path: str, report: Report = quiet) -> Iterator[bytes]:
    """The file's lines as bytes; a line longer than MAX_LINE_BYTES is cut to MAX_LINE_BYTES + 1 bytes
    (the parser rejects it) and the rest of it skipped without being held in memory. A large file
    reports its progress every PROGRESS_BYTES."""
    limit = csv_series.MAX_LINE_BYTES + 1
    with open(path, "rb") as fh:
        total = os.fstat(fh.fileno()).st_size
        done, mark = 0, PROGRESS_BYTES
        while True:
            line = fh.readline(limit)
            if not line:
                return
            done += len(line)
            if done >= mark:
                report(f"{path}: read {done >> 20} of {total >> 20} MiB")
                mark += PROGRESS_BYTES
            if len(line) == limit and not line.endswith(b"\n"):
                while True:  # skip to the end of the overlong line
                    rest = fh.readline(limit)
                    if not rest or rest.endswith(b"\n"):
                        break
            yield line


@dataclass
class CsvSource:
    """A CSV file as a re-readable history: each `samples()` call is a new pass with fresh statistics."""

    path: str
    stats: CsvStats | None = None
    report: Report = quiet

    def samples(self) -> Iterator[Sample]:
        parser = CsvSeries(self.path)
        self.stats = parser.stats
        return parser.samples(csv_lines(self.path, self.report))

    def tail_latest(self) -> float | None:
        """The latest timestamp in the file's last MiB (the end of a file in time order)."""
        parser = CsvSeries(self.path)
        with open(self.path, "rb") as fh:
            first = fh.readline(csv_series.MAX_LINE_BYTES + 1)
            parser.read_header(first, 1)
            size = fh.seek(0, os.SEEK_END)
            start = max(len(first), size - TAIL_BYTES)
            fh.seek(start)
            chunk = fh.read(TAIL_BYTES)
        lines = chunk.split(b"\n")
        if start > len(first):
            lines = lines[1:]  # the first piece may be the end of a line
        best = None
        for raw in lines:
            s = parser.parse_line(raw, 0)
            if s is not None and (best is None or s.timestamp > best):
                best = s.timestamp
        return best


# --- the history a command reads ------------------------------------------------------------------

@dataclass
class History:
    """Where samples come from: `passes()` is one fresh pass; `csv` keeps the CSV statistics."""

    label: str
    passes: Callable[[], Iterable[Sample]]
    csv: CsvSource | None = None
    latest_hint: Callable[[], float | None] | None = None


def check_one_source(history: str | None, csv: str | None, prometheus: PromRequest | None = None) -> None:
    given = [n for n, v in (("--history", history), ("--csv", csv), ("--prometheus", prometheus)) if v is not None]
    if len(given) != 1:
        raise InputError("give exactly one of --history PATH and --csv FILE, or --prometheus URL alone"
                         + (f" (not {' and '.join(given)})" if given else ""),
                         hint="--csv reads a CSV time series (docs/profiles.md); --history the on-host store; "
                              "--prometheus a Prometheus scraping dcgm-exporter (docs/collect-prometheus.md)")


def open_history(history: str | None, csv: str | None, report: Report = quiet, *,
                 prometheus: PromRequest | None = None, span: tuple[float, float] | None = None,
                 catalog: Catalog | None = None) -> History:
    """The one history a command reads. Prometheus needs the time `span` to ask for, and the catalog to
    name the GPU models its `modelName` labels carry."""
    check_one_source(history, csv, prometheus)
    if prometheus is not None:
        if span is None or catalog is None:
            raise ValueError("a Prometheus history needs its time span and the catalog")
        return prometheus_history(prometheus, span, catalog, report)
    if csv is not None:
        _check_regular(csv, "--csv")
        src = CsvSource(csv, report=report)
        return History(csv, src.samples, src, src.tail_latest)
    assert history is not None
    return History(history, _store_reader(history))


def prometheus_history(req: PromRequest, span: tuple[float, float], catalog: Catalog,
                       report: Report = quiet) -> History:
    """Prometheus over `span` (start, end) as a History: the request's own --start/--end/--window are
    replaced by the span; every pass runs the queries again, chunk by chunk (collect_prometheus.passes:
    bounded memory)."""
    from migplan.commands import collect_prometheus as cp

    def model_of(name: str) -> str | None:
        found = catalog.find(name)
        return found.id if found is not None else None

    start, end = span
    p = cp.plan(dataclasses.replace(req, start=repr(start), end=repr(end), window=None), model_of=model_of,
                report=report)
    report(f"querying {p.client.base} from {iso(p.start)} to {iso(p.end)}, step {p.step:g}s")
    return History(label=p.client.base, passes=lambda: cp.passes(p, report), latest_hint=lambda: p.end)


def _store_reader(path: str) -> Callable[[], Iterable[Sample]]:
    """The on-host history store (migplan.adapters.history_store: a host's SQLite file, or a directory of
    stores fetched from hosts), read oldest first; opened once here so that a bad path fails early."""
    from migplan.adapters.history_store import open_history as open_store
    from migplan.adapters.history_store import read_samples

    store = open_store(path)
    close = getattr(store, "close", None)
    if callable(close):
        close()
    return lambda: read_samples(path)


def _latest(h: History, report: Report) -> float | None:
    """The history's last sample time: the file's tail for a CSV, else one pass."""
    if h.latest_hint is not None:
        try:
            hint = h.latest_hint()
        except InputError:
            hint = None
        if hint is not None:
            return hint
    report(f"finding the end of {h.label} (one pass)")
    return last_timestamp(h.passes())


# --- profiles build / import ----------------------------------------------------------------------

@dataclass(frozen=True)
class BuildRequest:
    history: str | None = None
    csv: str | None = None
    window: str = "7d"
    until: str | None = None
    out: str | None = None  # None: nothing written (the summary and documents are still returned)
    prometheus: PromRequest | None = None


@dataclass
class BuildResult:
    rollup: Rollup
    source: str
    csv: CsvStats | None = None
    written: list[tuple[str, int]] = field(default_factory=list)  # (file, workloads)
    stale: list[str] = field(default_factory=list)  # other .yaml files in --out that this build did not write
    notes: list[str] = field(default_factory=list)


def window_for(h: History, length: float | None, until: str | None, report: Report) -> tuple[Window, float | None]:
    end = parse_time(until, "--until") if until else None
    if length is None and end is None:
        return Window(), None
    if end is None:
        end = _latest(h, report)
        if end is None:
            return Window(), None
    return Window(None if length is None else end - length, end), end


def build_profiles(ctx: Context, req: BuildRequest, *, report: Report = quiet,
                   now: Callable[[], float] = time.time) -> BuildResult:
    check_one_source(req.history, req.csv, req.prometheus)
    length = parse_duration(req.window, "--window")
    span = None
    if req.prometheus is not None:
        if length is None:
            raise InputError("Prometheus is asked for a window: give it a length", key="--window",
                             hint="e.g. --window 7d (ending at --until, else now)")
        end = parse_time(req.until, "--until") if req.until else now()
        span = (end - length, end)
    if req.out:
        check_out_dir(req.out)  # before a long read
    h = open_history(req.history, req.csv, report, prometheus=req.prometheus, span=span, catalog=ctx.catalog)
    win, guessed = window_for(h, length, req.until, report)
    result = _rollup_pass(h, ctx.catalog, win, report)
    notes = []
    if req.until is None and guessed is not None and h.csv is not None and h.csv.stats is not None \
            and h.csv.stats.last is not None and h.csv.stats.last > guessed:
        notes.append(f"{h.label} is not in time order (its last MiB ends before its latest row): read it twice")
        win = dataclasses.replace(win, start=None if length is None else h.csv.stats.last - length,
                                  end=h.csv.stats.last)
        result = _rollup_pass(h, ctx.catalog, win, report)
    out = BuildResult(result, h.label, h.csv.stats if h.csv else None, notes=notes)
    if req.out:
        _write(out, req.out, [p for p in (req.csv, req.history) if p])
    return out


def _rollup_pass(h: History, catalog: Catalog, win: Window, report: Report) -> Rollup:
    """One pass, the cyclic garbage collector paused: the accumulators and documents of 200,000 workloads are
    millions of objects that stay alive, and its full collections rescanned them all (a fifth of a 200,000-
    workload import, bench/scale_bounds.py). Samples and rows make no cycles, so nothing piles up meanwhile."""
    report(f"reading {h.label}")
    with yamldoc.paused_gc():
        return rollup(h.passes(), catalog, win)


def _write(out: BuildResult, directory: str, inputs: list[str]) -> None:
    out.written, out.stale = write_profiles(out.rollup, directory, forbid=inputs)
    try:
        cap = yamldoc.max_file_bytes()
    except InputError:  # a bad MIGPLAN_MAX_FILE_MB: reading the files back says so
        return
    for f, _ in out.written:
        size = os.stat(f).st_size
        if size > cap:  # the files are written, but `--profiles` reads at most `cap` bytes of a file
            out.notes.append(f"{f} is {size / 2**20:.1f} MiB, above the {cap / 2**20:g} MiB migplan reads of a file: "
                             f"set {yamldoc.MAX_FILE_ENV} to at least {math.ceil(size / 2**20)} to read it back")


# --- backtest -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BacktestRequest:
    history: str | None = None
    csv: str | None = None
    train: str = "7d"
    test: str = "7d"
    until: str | None = None
    policies: tuple[str, ...] = ()
    gpu_model: str | None = None
    compute_percentile: str | None = None
    prometheus: PromRequest | None = None


def run_backtest(ctx: Context, req: BacktestRequest, *, report: Report = quiet,
                 now: Callable[[], float] = time.time) -> Backtest:
    from migplan.commands.propose import ProposeRequest, planner_policy, planner_solver

    check_one_source(req.history, req.csv, req.prometheus)
    train = parse_duration(req.train, "--train")
    test = parse_duration(req.test, "--test")
    if train is None or test is None:
        raise InputError("--train and --test need a length, not 'all'", key="--train/--test")
    span = None
    if req.prometheus is not None:  # only the two windows are asked for, ending at --until or now
        end_at = parse_time(req.until, "--until") if req.until else now()
        span = (end_at - test - train, end_at)
    h = open_history(req.history, req.csv, report, prometheus=req.prometheus, span=span, catalog=ctx.catalog)
    base: Policy = planner_policy(ctx, {"compute_percentile": req.compute_percentile})
    rules: list[SizingRule] = rules_of(req.policies or DEFAULT_RULES, base.headroom_min_mib)
    end = parse_time(req.until, "--until") if req.until else _latest(h, report)
    if end is None:
        raise InputError("the history has no samples", source=h.label)
    test_w = Window(end - test, end)
    train_w = Window(end - test - train, end - test, end_open=True)
    if req.gpu_model is not None:
        ctx.catalog.get(req.gpu_model)
    solver = planner_solver(ctx, ProposeRequest(), base)
    report(f"training on {h.label}: {len(rules)} rule(s)")
    result = backtest(h.passes(), _Lazy(h, report), ctx.catalog, rules, solver, train_window=train_w,
                      test_window=test_w, base=base, default_model=req.gpu_model)
    last = h.csv.stats.last if h.csv is not None and h.csv.stats is not None else None
    if req.until is None and last is not None and last > end:  # not in time order: the tail was not the end
        report(f"{h.label} is not in time order: reading it again with the windows ending at its latest row")
        return run_backtest(ctx, dataclasses.replace(req, until=repr(last)), report=report)
    return result


@dataclass(frozen=True)
class SweepRequest:
    """`backtest --sweep`: rule families over a grid at several split points (history/sweep.py)."""

    history: str | None = None
    csv: str | None = None
    train: str = "7d"
    test: str = "1d"  # each split's test window
    splits: int = DEFAULT_SPLITS
    until: str | None = None
    policies: tuple[str, ...] = ()  # rule families (`max+{5,10}%`); none: DEFAULT_FAMILIES
    gpu_model: str | None = None
    compute_percentile: str | None = None
    target_oom: str | float = DEFAULT_TARGET
    prometheus: PromRequest | None = None


def sweep_windows(req: SweepRequest) -> tuple[float, float, float]:
    """(train, test, all the windows together) in seconds; InputError for 'all' or a bad duration."""
    train = parse_duration(req.train, "--train")
    test = parse_duration(req.test, "--test")
    if train is None or test is None:
        raise InputError("--train and --test need a length, not 'all'", key="--train/--test")
    if isinstance(req.splits, bool) or not 1 <= req.splits <= 50:
        raise InputError(f"--splits {req.splits!r}: give 1 to 50 split points", key="--splits")
    return train, test, train + req.splits * test


def load_store(h: History, need_s: float, until: float | None, report: Report, default_model: str | None,
               hint: float | None = None) -> SeriesStore:
    """The history in memory (history/series.py), one pass: only the samples the windows can use, those from
    `need_s` before the end (--until, else the file's tail where it has one) to --until. A row later than the tail
    (a file not in time order) moves the end later, so the samples kept still hold every window."""
    end = until if until is not None else hint
    start = None if end is None else end - need_s

    def wanted() -> Iterator[Sample]:
        for s in h.passes():
            t = s.timestamp
            if (start is None or t >= start) and (until is None or t <= until):
                yield s

    report(f"reading {h.label}")
    with yamldoc.paused_gc():
        return sweep_load(wanted(), default_model)


def run_sweep(ctx: Context, req: SweepRequest, *, report: Report = quiet,
              now: Callable[[], float] = time.time) -> Sweep:
    from migplan.commands.propose import ProposeRequest, planner_policy, planner_solver

    check_one_source(req.history, req.csv, req.prometheus)
    train, test, need = sweep_windows(req)
    target = parse_share(req.target_oom, key="--target-oom")
    until = parse_time(req.until, "--until") if req.until else None
    span = None
    if req.prometheus is not None:  # only the windows are asked for, ending at --until or now
        until = until if until is not None else now()
        span = (until - need, until)
    h = open_history(req.history, req.csv, report, prometheus=req.prometheus, span=span, catalog=ctx.catalog)
    base: Policy = planner_policy(ctx, {"compute_percentile": req.compute_percentile})
    rules = rules_of(req.policies or DEFAULT_FAMILIES, base.headroom_min_mib)
    if req.gpu_model is not None:
        ctx.catalog.get(req.gpu_model)
    hint = None
    if until is None and h.latest_hint is not None:
        try:
            hint = h.latest_hint()
        except InputError:
            hint = None
    store = load_store(h, need, until, report, req.gpu_model, hint)
    solver = planner_solver(ctx, ProposeRequest(), base)
    report(f"sweeping {len(rules)} rule(s) at {req.splits} split point(s) of {h.label}")
    return sweep(store, ctx.catalog, rules, solver, train_s=train, test_s=test, splits=req.splits, target=target,
                 base=base, default_model=req.gpu_model, end=until, report=report)


def write_sweep_page(sw: Sweep, out: str, *, source: str = "", forbid: Iterable[str | None] = (),
                     report: Report = quiet) -> None:
    """`backtest --sweep --report FILE`: the frontier page (report_html/frontier.py), written atomically; never over
    a file this run reads (`forbid`)."""
    from migplan.report_html.frontier import sweep_page

    write_atomic(out, sweep_page(sw.to_dict(), source=source, iso=iso), forbid=[f for f in forbid if f])
    report(f"report written to {out}")


class _Lazy:
    """The second pass, started only when the backtest iterates it (after the training pass ended)."""

    def __init__(self, history: History, report: Report) -> None:
        self.history, self.report = history, report

    def __iter__(self) -> Iterator[Sample]:
        self.report(f"replaying the test window of {self.history.label}")
        return iter(self.history.passes())
