"""`migplan collect --prometheus URL`: workload samples from a Prometheus that scrapes dcgm-exporter
(or the older nvidia_gpu_prometheus_exporter), over `query_range`, chunk by chunk.

`iter_samples` is the source other commands call (profiles build, backtest): it yields the `Sample`s
of one time chunk at a time, so a long window is never held in memory at once. `collect_prometheus`
runs it and adds the per-workload summary the CLI prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from migplan.adapters.prometheus import (
    DEFAULT_TIMEOUT_S,
    Credentials,
    PrometheusClient,
    basic_auth,
    bearer_token,
    loose_permissions,
)
from migplan.catalog import Catalog
from migplan.commands import Report, quiet
from migplan.commands.profiles_dir import check_out_dir, write_profiles
from migplan.errors import InputError
from migplan.history import prom_series as ps
from migplan.history.rollup import Rollup, Window, rollup
from migplan.history.samples import Place, Sample


@dataclass(frozen=True)
class PromRequest:
    url: str
    start: str | None = None
    end: str | None = None
    window: str | None = None  # default 7d when neither --start nor --window
    step: str = "60s"
    selector: str = ""
    basic_auth_file: str | None = None
    bearer_token_file: str | None = None
    ca_file: str | None = None
    timeout: float = DEFAULT_TIMEOUT_S
    unattributed: str = "skip"  # "skip" | "gpu"
    naming: str = "pod"  # "pod" | "owner"
    chunk_points: int = ps.CHUNK_POINTS


@dataclass(frozen=True)
class Plan:
    """The request resolved: the time grid, the queries and the client."""

    start: float
    end: float
    step: float
    selector: str
    client: PrometheusClient
    options: ps.Options
    chunk_points: int


def credentials(req: PromRequest, report: Report = quiet) -> Credentials | None:
    if req.basic_auth_file and req.bearer_token_file:
        raise InputError("--basic-auth-file and --bearer-token-file exclude each other")
    path = req.basic_auth_file or req.bearer_token_file
    if path is None:
        return None
    creds = basic_auth(path) if req.basic_auth_file else bearer_token(path)
    if loose_permissions(path):
        report(f"warning: {path} is readable by group or others; chmod 600 it")
    return creds


def plan(req: PromRequest, *, now: float | None = None, model_of: Callable[[str], str | None] | None = None,
         client: PrometheusClient | None = None, report: Report = quiet) -> Plan:
    if req.unattributed not in ("skip", "gpu"):
        raise InputError(f"{req.unattributed!r} is not skip or gpu", key="--unattributed")
    if req.naming not in ("pod", "owner"):
        raise InputError(f"{req.naming!r} is not pod or owner", key="--workload-name")
    step = ps.parse_duration(req.step, "--step")
    start, end = ps.time_range(time.time() if now is None else now, start=req.start, end=req.end, window=req.window)
    ps.chunks(start, end, step, req.chunk_points)  # validates the grid before anything is sent
    selector = ps.check_selector(req.selector)
    if client is None:
        client = PrometheusClient(req.url, credentials=credentials(req, report), timeout=req.timeout,
                                  ca_file=req.ca_file)
    return Plan(start, end, step, selector, client, ps.Options(req.unattributed, req.naming, model_of),
                req.chunk_points)


def iter_samples(p: Plan, tally: ps.Tally, report: Report = quiet) -> Iterator[list[Sample]]:
    """The samples of each time chunk in turn (sorted by workload, then time within a chunk). A chunk
    whose answer is over the client's size limit is asked again in two halves."""
    grid = ps.chunks(p.start, p.end, p.step, p.chunk_points)
    todo = list(reversed(grid))
    done = 0
    while todo:
        c_start, c_end = todo.pop()
        part = ps.Tally()
        try:
            results = _query_chunk(p, c_start, c_end, part)
        except ps.AnswerTooLarge:
            parts = ps.halves(c_start, c_end, p.step)
            if len(parts) < 2:
                raise
            report(f"answer too large for {_iso(c_start)} .. {_iso(c_end)}: asking for half the range at a time")
            todo.extend(reversed(parts))
            continue
        tally.points_read += part.points_read  # counted only for the chunks that were used
        tally.points_rejected += part.points_rejected
        tally.warnings.extend(w for w in part.warnings if w not in tally.warnings)
        del tally.warnings[ps.MAX_ERRORS_KEPT:]
        done += 1
        if len(grid) > 1 or todo:
            report(f"chunk {done}: {_iso(c_start)} .. {_iso(c_end)}")
        yield ps.to_samples(results, p.options, tally)


def _query_chunk(p: Plan, start: float, end: float,
                 tally: ps.Tally) -> list[tuple[ps.MetricQuery, list[ps.Series]]]:
    results = []
    for q in ps.QUERIES:
        body = p.client.query_range(q.promql(p.step, p.selector), start, end, p.step)
        source = f"{p.client.base}/api/v1/query_range {q.metric} [{_iso(start)} .. {_iso(end)}]"  # the URL: the answer
        results.append((q, ps.parse_matrix(body, source=source, start=start, end=end, tally=tally)))
    return results


@dataclass
class WorkloadSummary:
    workload: str
    places: set[Place] = field(default_factory=set)
    samples: int = 0
    memory_samples: int = 0
    util_samples: int = 0
    memory_max: float | None = None
    util_max: float | None = None
    first: float | None = None
    last: float | None = None

    def add(self, s: Sample) -> None:
        self.places.add(s.place)
        self.samples += 1
        if s.memory_mib is not None:
            self.memory_samples += 1
            self.memory_max = s.memory_mib if self.memory_max is None else max(self.memory_max, s.memory_mib)
        if s.util_pct is not None:
            self.util_samples += 1
            self.util_max = s.util_pct if self.util_max is None else max(self.util_max, s.util_pct)
        self.first = s.timestamp if self.first is None else min(self.first, s.timestamp)
        self.last = s.timestamp if self.last is None else max(self.last, s.timestamp)


@dataclass
class PromResult:
    start: float
    end: float
    step: float
    tally: ps.Tally
    workloads: dict[str, WorkloadSummary]
    samples: list[Sample] | None = None  # kept only when asked (keep_samples)
    rollup: Rollup | None = None  # the profiles, when a catalog was given
    written: list[tuple[str, int]] = field(default_factory=list)  # (file, workloads) under --out


def collect_prometheus(p: Plan, *, report: Report = quiet, keep_samples: bool = False,
                       catalog: Catalog | None = None, out: str | None = None) -> PromResult:
    """Run the queries and summarise per workload; with a catalog, roll the samples up into profiles
    (migplan.history.rollup, the same as `profiles build`) in the same pass, and write them to `out`
    (one file per host, atomically)."""
    if out is not None and catalog is None:
        raise ValueError("writing profiles needs the catalog")
    tally = ps.Tally()
    summary: dict[str, WorkloadSummary] = {}
    kept: list[Sample] | None = [] if keep_samples else None

    def stream() -> Iterator[Sample]:
        for batch in iter_samples(p, tally, report):
            for s in batch:
                summary.setdefault(s.workload, WorkloadSummary(s.workload)).add(s)
            if kept is not None:
                kept.extend(batch)
            yield from batch

    if out is not None:
        check_out_dir(out)  # before the queries
    if catalog is not None:
        rolled: Rollup | None = rollup(stream(), catalog, Window(p.start, p.end))
    else:
        rolled = None
        for _ in stream():
            pass
    if tally.series_unattributed:
        report(f"note: {tally.series_unattributed} series without pod or hpc_job labels were skipped (idle GPUs, "
               "or an exporter without Kubernetes attribution); --unattributed gpu profiles them per GPU")
    if tally.series_read == 0:
        report("note: Prometheus has none of the metrics migplan reads in this time range "
               f"({', '.join(q.metric for q in ps.QUERIES)})")
    result = PromResult(p.start, p.end, p.step, tally, summary, kept, rolled)
    if out is not None and rolled is not None:
        result.written, _stale = write_profiles(rolled, out)
    return result


def passes(p: Plan, report: Report = quiet) -> Iterator[Sample]:
    """One pass over the plan's range for `profiles build` and `backtest` (a
    `migplan.commands.history.History`): each call runs the queries again, chunk by chunk (bounded memory)."""
    tally = ps.Tally()
    for batch in iter_samples(p, tally, report):
        yield from batch


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
