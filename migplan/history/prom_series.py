"""Prometheus as a history source (pure): the PromQL queries, the time chunks, the `query_range` JSON
parsed as untrusted input, and the series labels mapped to `Sample`s.

What is read (docs/collect-prometheus.md lists the same):

* NVIDIA dcgm-exporter, `etc/default-counters.csv` (NVIDIA/dcgm-exporter at d5e5f51, tag 4.5.3-4.8.2):
  `DCGM_FI_DEV_FB_USED` "Framebuffer memory used (in MiB)", `DCGM_FI_PROF_GR_ENGINE_ACTIVE` "Ratio of
  time the graphics engine is active" (0..1), `DCGM_FI_DEV_GPU_UTIL` "GPU utilization (in %)". The
  latter is not reported for MIG instances (maintainers in dcgm-exporter #216, #430, #50; reference
  ecosystem.md §3.1), so it is only a fallback for whole GPUs without GR_ENGINE_ACTIVE.
* dcgm-exporter's labels, `internal/pkg/rendermetrics/render_metrics.go` line 47: `gpu` (index), `UUID`
  (`uuid` with --use-old-namespace), `modelName`, `GPU_I_PROFILE` and `GPU_I_ID` (only on MIG
  instances), `Hostname` in releases up to 4.5.3-4.8.2 and `hostname` since commit d5e5f51
  (2026-05-12, "Rename Hostname label to hostname (#655)"): both are read.
  Workload labels from `internal/pkg/transformation/const.go`: `pod`, `namespace`, `container`
  (`pod_name`, `pod_namespace`, `container_name` with --use-old-namespace) and `hpc_job`. Prometheus
  renames a scraped label that collides with a target label to `exported_<name>` when
  `honor_labels: false`, the default of dcgm-exporter's Helm ServiceMonitor (ecosystem.md §3.2), so
  `exported_pod` etc. win over `pod`; and in a scrape job where they occur, a plain `pod` is the
  exporter's own pod (a target label), not a workload.
* The older mindprince/nvidia_gpu_prometheus_exporter (`main.go`, last commit 0d52cd2, 2018):
  `nvidia_gpu_memory_used_bytes` (bytes) and `nvidia_gpu_duty_cycle` ("Percent of time over the past
  sample period during which one or more kernels were executing", 0..100), labels `minor_number`,
  `uuid`, `name`. It knows no pods and no MIG: its series are per GPU.

Queries use `max_over_time(M[step])` for memory (an OOM is decided by the peak, not by the value that
happens to fall on the step) and `avg_over_time(M[step])` for activity. The time range is cut into
chunks below Prometheus' limit of 11,000 points per series (`web/api/v1/api.go`: "exceeded maximum
resolution of 11,000 points per timeseries").
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from migplan import names
from migplan.errors import InputError, MigplanError
from migplan.history.samples import Place, Sample
from migplan.text import printable

# Prometheus refuses (end - start) / step > 11000 (web/api/v1/api.go); stay well below it.
PROMETHEUS_MAX_POINTS = 11_000
CHUNK_POINTS = 10_000
MIN_STEP_S = 1.0
MAX_STEP_S = 86_400.0
MAX_SERIES = 200_000  # per response: a Prometheus answering more is not answering our query
MAX_LABELS = 200  # per series
MAX_LABEL_CHARS = 4_096
MAX_ERRORS_KEPT = 10  # rejection reasons kept for the report

DCGM_FB_USED = "DCGM_FI_DEV_FB_USED"
DCGM_GR_ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
DCGM_GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"
LEGACY_MEMORY_USED = "nvidia_gpu_memory_used_bytes"
LEGACY_DUTY_CYCLE = "nvidia_gpu_duty_cycle"

# Label names, first match wins (see the module docstring for where each comes from).
HOST_LABELS = ("hostname", "Hostname", "exported_hostname", "exported_Hostname", "node", "kubernetes_node")
POD_LABELS = ("exported_pod", "pod", "pod_name")
NAMESPACE_LABELS = ("exported_namespace", "namespace", "pod_namespace")
CONTAINER_LABELS = ("exported_container", "container", "container_name")
_EXPORTED = ("exported_pod", "exported_namespace", "exported_container")

_LABEL_MATCHER = re.compile(
    r'\s*[A-Za-z_][A-Za-z0-9_]*\s*(?:=~|!~|!=|=)\s*"(?:[^"\\\n]|\\.){0,512}"\s*')
# Kubernetes' generated name suffixes use apimachinery's SafeEncodeString alphabet (no vowels, no 0/1/3).
_SAFE = "[bcdfghjklmnpqrstvwxz2456789]"
_DEPLOYMENT_POD = re.compile(rf"\A(.+)-{_SAFE}{{6,10}}-{_SAFE}{{5}}\Z")
_GENERATED_POD = re.compile(rf"\A(.+)-{_SAFE}{{5}}\Z")


class PrometheusError(MigplanError):
    """Prometheus refused the query, could not be reached, or answered something that is not a
    `query_range` result. Exit code 1: the input on our side was fine."""


class AnswerTooLarge(PrometheusError):
    """An answer over the size limit: the caller asks again for half the time range."""


@dataclass(frozen=True, slots=True)
class MetricQuery:
    """One metric read: `kind` is what it measures, `scale` turns its unit into MiB or percent."""

    metric: str
    kind: str  # "memory" | "activity" | "util"  (util: a whole-GPU fallback for activity)
    exporter: str  # "dcgm" | "legacy"
    scale: float
    low: float  # valid range of the raw value
    high: float

    def promql(self, step_s: float, selector: str = "") -> str:
        fn = "max_over_time" if self.kind == "memory" else "avg_over_time"
        return f"{fn}({self.metric}{{{selector}}}[{_duration(step_s)}])"


QUERIES: tuple[MetricQuery, ...] = (
    MetricQuery(DCGM_FB_USED, "memory", "dcgm", 1.0, 0.0, float(names.MAX_MEMORY_MIB)),
    MetricQuery(DCGM_GR_ENGINE_ACTIVE, "activity", "dcgm", 100.0, 0.0, 1.0),
    MetricQuery(DCGM_GPU_UTIL, "util", "dcgm", 1.0, 0.0, 100.0),
    MetricQuery(LEGACY_MEMORY_USED, "memory", "legacy", 1.0 / (1 << 20), 0.0, float(names.MAX_MEMORY_MIB) * (1 << 20)),
    MetricQuery(LEGACY_DUTY_CYCLE, "activity", "legacy", 1.0, 0.0, 100.0),
)


def _duration(seconds: float) -> str:
    """PromQL duration: whole seconds as `60s`, else milliseconds (`1500ms`)."""
    ms = round(seconds * 1000)
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def check_selector(selector: str) -> str:
    """Extra label matchers (`cluster="a",namespace=~"prod-.*"`) added to every query, validated so
    that no PromQL can be smuggled in through them."""
    text = selector.strip().removeprefix("{").removesuffix("}").strip()
    if not text:
        return ""
    rest = text
    parts = []
    while rest:
        m = _LABEL_MATCHER.match(rest)
        if not m:
            raise InputError(f"{printable(selector, 200)!r} is not a list of label matchers", key="--selector",
                             hint='write matchers such as cluster="a",namespace=~"prod-.*"')
        parts.append(m.group(0).strip())
        rest = rest[m.end():]
        if rest.startswith(","):
            rest = rest[1:]
        elif rest:
            raise InputError(f"{printable(selector, 200)!r}: matchers must be separated by commas",
                             key="--selector", hint='write matchers such as cluster="a",namespace=~"prod-.*"')
    return ",".join(parts)


def chunks(start: float, end: float, step: float, max_points: int = CHUNK_POINTS) -> list[tuple[float, float]]:
    """[start, end] cut into ranges of at most `max_points` evaluation times each, on one grid
    (start + k*step), so that chunk boundaries neither repeat nor skip a point."""
    for name, v in (("start", start), ("end", end), ("step", step)):
        if not math.isfinite(v):
            raise InputError(f"{name} must be a finite number")
    if not MIN_STEP_S <= step <= MAX_STEP_S:
        raise InputError(f"step must be between {MIN_STEP_S:g}s and {MAX_STEP_S:g}s, got {step:g}s", key="--step")
    if end <= start:
        raise InputError("the end of the time range must be after its start", key="--end")
    if not 1 <= max_points <= PROMETHEUS_MAX_POINTS:
        raise InputError(f"points per query must be 1..{PROMETHEUS_MAX_POINTS}")
    total = int((end - start) // step) + 1
    if total > 10_000_000:
        raise InputError(f"{total} points per series is too many", key="--step",
                         hint="use a larger --step or a shorter --window")
    out = []
    for first in range(0, total, max_points):
        last = min(first + max_points, total) - 1
        out.append((start + first * step, start + last * step))
    return out


_DURATION = re.compile(r"\A([0-9]{1,9}(?:\.[0-9]{1,6})?)(ms|s|m|h|d|w)?\Z")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86_400.0, "w": 604_800.0, None: 1.0}


def parse_duration(text: str, option: str) -> float:
    """`90`, `15s`, `5m`, `1.5h`, `7d`, `2w` -> seconds (Prometheus' units; a bare number is seconds)."""
    m = _DURATION.fullmatch(text.strip())
    if not m:
        raise InputError(f"{printable(text, 60)!r} is not a duration", key=option,
                         hint="write a number with a unit: 30s, 5m, 12h, 7d, 2w")
    seconds = float(m.group(1)) * _UNIT_S[m.group(2)]
    if seconds <= 0:
        raise InputError("must be more than zero", key=option)
    return seconds


def parse_time(text: str, option: str) -> float:
    """Unix seconds (`1764547200`, `1764547200.5`) or ISO 8601 (`2026-11-01T00:00:00Z`; no zone: UTC)."""
    raw = text.strip()
    try:
        value = float(raw)
    except ValueError:
        try:
            when = dt.datetime.fromisoformat(raw.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise InputError(f"{printable(text, 60)!r} is not a time", key=option,
                             hint="write unix seconds or ISO 8601 such as 2026-11-01T00:00:00Z") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        value = when.timestamp()
    if not math.isfinite(value) or not 0 <= value < 1e11:
        raise InputError(f"{printable(text, 60)!r} is out of the range of times", key=option)
    return value


def time_range(now: float, *, start: str | None, end: str | None, window: str | None) -> tuple[float, float]:
    """--start/--end, or --window back from --end (default: now); --window and --start exclude each other."""
    if start and window:
        raise InputError("--start and --window exclude each other", hint="give --start (and --end), or --window")
    t_end = parse_time(end, "--end") if end else now
    t_start = parse_time(start, "--start") if start else t_end - parse_duration(window or "7d", "--window")
    if t_end <= t_start:
        raise InputError("the end of the time range must be after its start", key="--end")
    return t_start, t_end


def halves(start: float, end: float, step: float) -> list[tuple[float, float]]:
    """A chunk split in two on its grid (for an answer too large); a single point stays one chunk."""
    n = round((end - start) / step) + 1
    if n < 2:
        return [(start, end)]
    mid = start + (n // 2) * step
    return [(start, mid - step), (mid, end)]


# --- the JSON, untrusted ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Series:
    labels: Mapping[str, str]
    values: tuple[tuple[float, float], ...]  # (unix time, value); NaN/Inf dropped


@dataclass
class Tally:
    """What was read and what was left out, and why (the report of a collection)."""

    series_read: int = 0
    series_used: int = 0
    series_unattributed: int = 0
    series_rejected: int = 0
    points_read: int = 0
    points_rejected: int = 0
    samples: int = 0
    by_metric: dict[str, int] = field(default_factory=dict)  # series per metric
    warnings: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # first MAX_ERRORS_KEPT rejection reasons

    def problem(self, text: str) -> None:
        if len(self.problems) < MAX_ERRORS_KEPT:
            self.problems.append(text)

    def as_dict(self) -> dict[str, object]:
        return {"series_read": self.series_read, "series_used": self.series_used,
                "series_unattributed": self.series_unattributed, "series_rejected": self.series_rejected,
                "points_read": self.points_read, "points_rejected": self.points_rejected,
                "samples": self.samples, "series_by_metric": dict(self.by_metric),
                "warnings": list(self.warnings), "problems": list(self.problems)}


def _fail(what: str, source: str) -> PrometheusError:
    return PrometheusError(f"{source}: not a Prometheus query_range answer: {what}",
                           hint="check that the URL is the Prometheus server (or its API prefix), "
                                "e.g. http://prometheus:9090")


def _loads(body: bytes | str, source: str) -> object:
    try:
        return json.loads(body)
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError and int-digit limits are ValueErrors
        raise _fail(f"invalid JSON ({printable(str(err), 120)})", source) from None


def error_message(body: bytes | str) -> str | None:
    """`errorType: error` from a Prometheus error envelope, printable, or None if it is not one."""
    try:
        doc = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("status") != "error":
        return None
    kind, text = doc.get("errorType"), doc.get("error")
    parts = [printable(v, 400) for v in (kind, text) if isinstance(v, str)]
    return ": ".join(parts) or None


def parse_matrix(body: bytes | str, *, source: str, start: float | None = None, end: float | None = None,
                 tally: Tally | None = None) -> list[Series]:
    """The series of a `query_range` answer (resultType matrix). Structure errors fail the whole
    answer; a value that is not a finite number (`"NaN"`, `"+Inf"`) or a time outside [start, end]
    is dropped and counted."""
    t = tally if tally is not None else Tally()
    doc = _loads(body, source)
    if not isinstance(doc, dict):
        raise _fail("the top level is not an object", source)
    status = doc.get("status")
    if status == "error":
        raise PrometheusError(f"{source}: Prometheus answered an error: {error_message(body) or 'no message'}")
    if status != "success":
        raise _fail(f"status is {printable(repr(status), 60)}, not 'success'", source)
    warnings = doc.get("warnings")
    for w in warnings if isinstance(warnings, list) else []:
        if isinstance(w, str) and len(t.warnings) < MAX_ERRORS_KEPT:
            t.warnings.append(printable(w, 300))
    data = doc.get("data")
    if not isinstance(data, dict):
        raise _fail("'data' is not an object", source)
    if data.get("resultType") != "matrix":
        raise _fail(f"resultType is {printable(repr(data.get('resultType')), 60)}, not 'matrix'", source)
    result = data.get("result")
    if not isinstance(result, list):
        raise _fail("'data.result' is not a list", source)
    if len(result) > MAX_SERIES:
        raise PrometheusError(f"{source}: {len(result)} series in one answer (at most {MAX_SERIES})",
                              hint="narrow the query with --selector, e.g. cluster=\"a\"")
    lo = -math.inf if start is None else start - 1e-3
    hi = math.inf if end is None else end + 1e-3
    return [_series(i, item, source, lo, hi, t) for i, item in enumerate(result)]


def _series(i: int, item: object, source: str, lo: float, hi: float, t: Tally) -> Series:
    where = f"series {i}"
    if not isinstance(item, dict):
        raise _fail(f"{where} is not an object", source)
    metric, values = item.get("metric"), item.get("values")
    if not isinstance(metric, dict) or not isinstance(values, list):
        raise _fail(f"{where} lacks 'metric' (object) or 'values' (list)", source)
    if len(metric) > MAX_LABELS:
        raise _fail(f"{where} has {len(metric)} labels (at most {MAX_LABELS})", source)
    labels: dict[str, str] = {}
    for k, v in metric.items():
        if not isinstance(v, str) or len(k) > MAX_LABEL_CHARS or len(v) > MAX_LABEL_CHARS:
            raise _fail(f"{where}: label {printable(str(k), 60)!r} is not a string of at most "
                        f"{MAX_LABEL_CHARS} characters", source)
        labels[k] = v
    points: list[tuple[float, float]] = []
    for j, pair in enumerate(values):
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[1], str)
                and isinstance(pair[0], int | float) and not isinstance(pair[0], bool)):
            raise _fail(f"{where} value {j} is not a pair [time, \"value\"]", source)
        t.points_read += 1
        try:
            ts = float(pair[0])
        except OverflowError:  # a JSON integer past float's range (400 digits): not a time, dropped below
            ts = math.inf
        value = _number(pair[1])
        if value is None or not math.isfinite(ts) or not lo <= ts <= hi:
            t.points_rejected += 1
            continue
        points.append((ts, value))
    points.sort()
    return Series(labels, tuple(points))


def _number(text: str) -> float | None:
    if len(text) > 64:
        return None
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


# --- labels to workloads and places --------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Options:
    """How series become workloads.

    unattributed: "skip" drops series without pod/hpc_job labels (idle GPUs, the old exporter);
    "gpu" names them after the GPU (`HOST/gpuN`, `HOST/gpuN/giID`). naming: "pod" keeps
    `namespace/pod`; "owner" strips Kubernetes' generated suffixes (`web-7d9f8c6b5d-x2x4z` -> `web`)
    so that a Deployment's pods, replaced on every rollout, make one profile."""

    unattributed: str = "skip"
    naming: str = "pod"
    model_of: Callable[[str], str | None] | None = None  # modelName -> catalog id


@dataclass(frozen=True, slots=True)
class Identity:
    workload: str
    place: Place
    mig: bool


def _first(labels: Mapping[str, str], keys: Sequence[str]) -> str | None:
    for k in keys:
        v = labels.get(k)
        if v:
            return v
    return None


def owner_name(pod: str) -> str:
    """`web-7d9f8c6b5d-x2x4z` -> `web` (Deployment), `job-x2x4z` -> `job` (Job, DaemonSet); a
    StatefulSet's `db-0` and any other name stay as they are."""
    for pattern in (_DEPLOYMENT_POD, _GENERATED_POD):
        m = pattern.fullmatch(pod)
        if m:
            return m.group(1)
    return pod


def _host(labels: Mapping[str, str]) -> str | None:
    host = _first(labels, HOST_LABELS)
    if host is None:
        inst = labels.get("instance", "")
        # `instance` is host:port of the scrape target; the port is not part of the host name.
        host = inst.rsplit(":", 1)[0] if inst.count(":") == 1 else inst or None
    return host if host and names.HOST_NAME.fullmatch(host) else None


def identify(q: MetricQuery, labels: Mapping[str, str], renaming_jobs: set[str], opts: Options) -> Identity | str:
    """The workload and place of a series, or a reason (str) why it has none: "unattributed" or a problem."""
    host = _host(labels)
    gpu_text = labels.get("gpu") if q.exporter == "dcgm" else labels.get("minor_number")
    gpu: int | None = None
    if gpu_text is not None:
        if not names.is_ascii_digits(gpu_text) or int(gpu_text) > names.MAX_GPU_INDEX:
            return f"GPU index {printable(gpu_text, 40)!r} is not 0..{names.MAX_GPU_INDEX}"
        gpu = int(gpu_text)
    model_name = labels.get("modelName" if q.exporter == "dcgm" else "name")
    model = None
    if model_name:
        model = (opts.model_of(model_name) if opts.model_of else None) or printable(model_name, 80)
    profile = labels.get("GPU_I_PROFILE") if q.exporter == "dcgm" else None
    gi = labels.get("GPU_I_ID") if q.exporter == "dcgm" else None
    if profile is not None and not names.PROFILE_NAME.fullmatch(profile):
        return f"GPU_I_PROFILE {printable(profile, 40)!r} is not a MIG profile name"
    if gi is not None and not (names.is_ascii_digits(gi) and int(gi) < 1000):
        return f"GPU_I_ID {printable(gi, 40)!r} is not a GPU instance ID"
    # dcgm-exporter's render template adds both labels or neither; mig_start stays unknown: GI IDs
    # are not placements (docs/mig-geometry.md).
    place = Place(host=host, gpu=gpu, gpu_model=model, mig_profile=profile, mig_start=None)
    workload = _workload(q, labels, renaming_jobs, opts)
    if workload is None:
        if opts.unattributed != "gpu":
            return "unattributed"
        if host is None or gpu is None:
            return "no pod labels, and no host or GPU label to name it after"
        workload = f"{host}/gpu{gpu}" + (f"/gi{gi}" if gi is not None else "")
    if not names.WORKLOAD_NAME.fullmatch(workload):
        return f"workload name {printable(workload, 80)!r} is not valid"
    return Identity(workload, place, profile is not None)


def _workload(q: MetricQuery, labels: Mapping[str, str], renaming_jobs: set[str], opts: Options) -> str | None:
    if q.exporter != "dcgm":
        return None  # the old exporter attributes nothing: its pod/namespace are the exporter's own
    if labels.get("job") in renaming_jobs:
        pod, ns = labels.get("exported_pod"), labels.get("exported_namespace")
    else:
        pod, ns = _first(labels, POD_LABELS), _first(labels, NAMESPACE_LABELS)
    if pod:
        if opts.naming == "owner":
            pod = owner_name(pod)
        return f"{ns}/{pod}" if ns else pod
    return labels.get("hpc_job") or None


def renaming_jobs(series: Iterable[Series]) -> set[str]:
    """Scrape jobs whose series carry `exported_*` labels: there, a plain `pod` names the exporter."""
    return {s.labels.get("job", "") for s in series if any(k in s.labels for k in _EXPORTED)}


# --- series to samples -------------------------------------------------------------------------------------

def to_samples(results: Sequence[tuple[MetricQuery, Sequence[Series]]], opts: Options, tally: Tally,
               source: str = "prometheus") -> list[Sample]:
    """Join the metrics of one time chunk into `Sample`s, one per workload, place and time.

    Several series landing on the same workload, place and time (two scrape jobs, or time-sliced pods
    that dcgm-exporter labels with the same GPU) are combined by their maximum: memory is a hard limit.
    Activity is GR_ENGINE_ACTIVE where a place has it in this chunk; GPU_UTIL only for whole GPUs
    without it (not reported for MIG instances)."""
    jobs = renaming_jobs(s for _, group in results for s in group)
    # (identity) -> kind -> time -> value
    acc: dict[Identity, dict[str, dict[float, float]]] = {}
    for q, group in results:
        for s in group:
            tally.series_read += 1
            tally.by_metric[q.metric] = tally.by_metric.get(q.metric, 0) + 1
            ident = identify(q, s.labels, jobs, opts)
            if isinstance(ident, str):
                if ident == "unattributed":
                    tally.series_unattributed += 1
                else:
                    tally.series_rejected += 1
                    tally.problem(f"{q.metric}: {ident}")
                continue
            if q.kind == "util" and ident.mig:
                tally.series_rejected += 1
                tally.problem(f"{q.metric}: reported for a MIG instance, where it is not supported; ignored")
                continue
            tally.series_used += 1
            by_time = acc.setdefault(ident, {}).setdefault(q.kind, {})
            for ts, raw in s.values:
                if not q.low <= raw <= q.high:
                    tally.points_rejected += 1
                    continue
                v = raw * q.scale
                by_time[ts] = max(v, by_time.get(ts, v))
    out = []
    for ident, kinds in acc.items():
        mem = kinds.get("memory", {})
        act = kinds.get("activity") or kinds.get("util", {})
        for ts in sorted(set(mem) | set(act)):
            out.append(Sample(timestamp=ts, workload=ident.workload, memory_mib=mem.get(ts),
                              util_pct=act.get(ts), place=ident.place, source=source))
    out.sort(key=lambda s: (s.workload, s.timestamp))
    tally.samples += len(out)
    return out
