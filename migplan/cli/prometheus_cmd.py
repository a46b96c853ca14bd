"""`migplan collect --prometheus URL`: the Prometheus options, declared once, and the command.

`prometheus_options()` adds the options to any command (the `collect` command delegates to `run` when
`--prometheus` is given; `profiles build` and `backtest` read Prometheus as their history, with
`without=RANGE_AND_OUT`: their own window options say what time range is asked for, and `build` has its
own `--out`); `collect_prometheus` is the same as a command of its own.
Credentials only from files: there is deliberately no option that takes a password or token.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from migplan.adapters.prometheus import DEFAULT_TIMEOUT_S
from migplan.cli.options import MAX_SECONDS, CatalogOpt, ConfigOpt, OutputOpt, finite
from migplan.cli.render import emit, grid, handle_errors, info
from migplan.commands.context import build_context

if TYPE_CHECKING:  # imported when a collection runs: `collect --local` from cron must start fast
    from migplan.commands import collect_prometheus as cp

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class PromOptions:
    prometheus: str | None = None
    start: str | None = None
    end: str | None = None
    window: str | None = None
    step: str = "60s"
    selector: str = ""
    basic_auth_file: str | None = None
    bearer_token_file: str | None = None
    ca_file: str | None = None
    http_timeout: float = DEFAULT_TIMEOUT_S
    unattributed: str = "skip"
    workload_name: str = "pod"
    out: str | None = None


def _param(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


_S = str | None
_PARAMS = (
    _param("prometheus", Annotated[_S, typer.Option(
        "--prometheus", metavar="URL", help="Prometheus base URL (scraping dcgm-exporter), e.g. "
                                            "http://prometheus:9090.", show_default=False)], None),
    _param("start", Annotated[_S, typer.Option("--start", help="Start: unix seconds or ISO 8601 (UTC if no zone).",
                                               show_default=False, metavar="TIME")], None),
    _param("end", Annotated[_S, typer.Option("--end", help="End, as --start [default: now].", show_default=False,
                                             metavar="TIME")], None),
    _param("window", Annotated[_S, typer.Option("--window", help="Length back from --end, e.g. 12h, 7d "
                                                "[default: 7d].", show_default=False, metavar="DURATION")], None),
    _param("step", Annotated[str, typer.Option("--step", help="Resolution: one sample per step per series "
                                               "(memory: the max within it).", metavar="DURATION")], "60s"),
    _param("selector", Annotated[str, typer.Option("--selector", help='Extra label matchers for every query, '
                                                   'e.g. cluster="a" [default: none].', show_default=False,
                                                   metavar="MATCHERS")], ""),
    _param("basic_auth_file", Annotated[_S, typer.Option(
        "--basic-auth-file", help="File with USER:PASSWORD on its first line.", show_default=False,
        metavar="FILE")], None),
    _param("bearer_token_file", Annotated[_S, typer.Option(
        "--bearer-token-file", help="File holding a bearer token.", show_default=False, metavar="FILE")], None),
    _param("ca_file", Annotated[_S, typer.Option("--ca-file", help="CA bundle to verify the server's TLS "
                                                 "certificate [default: the system's].", show_default=False,
                                                 metavar="FILE")], None),
    _param("http_timeout", Annotated[float, typer.Option("--http-timeout", min=1.0, max=MAX_SECONDS, callback=finite,
                                                         metavar="SECONDS", help="Seconds each query may take.")],
           DEFAULT_TIMEOUT_S),
    _param("unattributed", Annotated[str, typer.Option(
        "--unattributed", metavar="skip|gpu", help="Series without pod labels (idle GPUs, the old exporter): skip, "
                                                   "or gpu (one profile per GPU/instance).")], "skip"),
    _param("workload_name", Annotated[str, typer.Option(
        "--workload-name", metavar="pod|owner",
        help="pod (namespace/pod) or owner (Kubernetes' generated pod suffixes removed).")], "pod"),
    _param("out", Annotated[_S, typer.Option("--out", help="Output directory (with --prometheus: one profiles file "
                                             "per host, written atomically, as 'profiles build' writes them).",
                                             show_default=False, metavar="DIR")], None),
)


# The options a command with its own time window (and --out) leaves out: profiles build, backtest.
RANGE_AND_OUT = ("start", "end", "window", "out")


def prometheus_options(*, without: tuple[str, ...] = ()) -> Callable[[F], F]:
    """Add the Prometheus options (all but `without`) to a command; it receives `prom: PromOptions`
    instead (the options left out keep their defaults there)."""
    unknown = set(without) - {p.name for p in _PARAMS}
    if unknown:
        raise ValueError(f"no such Prometheus option: {sorted(unknown)}")
    params = [p for p in _PARAMS if p.name not in without]

    def decorate(fn: F) -> F:
        sig = inspect.signature(fn, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != "prom"]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            kwargs["prom"] = PromOptions(**{p.name: kwargs.pop(p.name) for p in params})
            return fn(*args, **kwargs)

        wrapper.__signature__ = sig.replace(parameters=[*own, *params])  # type: ignore[attr-defined]  # read by typer
        return wrapper  # type: ignore[return-value]  # an F to its callers, typer reads the new signature

    return decorate


def request(prom: PromOptions) -> cp.PromRequest:
    from migplan.commands import collect_prometheus as cp

    if not prom.prometheus:
        raise typer.BadParameter("give the Prometheus URL", param_hint="--prometheus")
    return cp.PromRequest(url=prom.prometheus, start=prom.start, end=prom.end, window=prom.window, step=prom.step,
                          selector=prom.selector, basic_auth_file=prom.basic_auth_file,
                          bearer_token_file=prom.bearer_token_file, ca_file=prom.ca_file, timeout=prom.http_timeout,
                          unattributed=prom.unattributed, naming=prom.workload_name)


def history_request(prom: PromOptions) -> cp.PromRequest | None:
    """The Prometheus request of a command that reads a history (`--prometheus` given), else None."""
    return None if prom.prometheus is None else request(prom)


def _iso(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _where(p: Any) -> str:
    gpu = "?" if p.gpu is None else str(p.gpu)
    return f"{p.host or '?'}/{gpu}" + (f" {p.mig_profile}" if p.mig_profile else "") + (
        f" ({p.gpu_model})" if p.gpu_model else "")


def result_data(url: str, r: cp.PromResult) -> dict[str, Any]:
    ro = r.rollup
    return {
        "source": url, "window": {"start": _iso(r.start), "end": _iso(r.end), "step_s": r.step},
        "summary": r.tally.as_dict(),
        "workloads": [{
            "name": w.workload, "samples": w.samples, "memory_samples": w.memory_samples,
            "util_samples": w.util_samples, "memory_max_mib": w.memory_max, "util_max_pct": w.util_max,
            "first": _iso(w.first), "last": _iso(w.last),
            "places": [{"host": p.host, "gpu": p.gpu, "gpu_model": p.gpu_model, "mig_profile": p.mig_profile}
                       for p in sorted(w.places, key=_where)],
        } for w in sorted(r.workloads.values(), key=lambda w: w.workload)],
        "profiles": [{"name": p.name, "file": p.host, **p.document} for p in ro.profiles] if ro else [],
        "skipped": list(ro.skipped) if ro else [],
        "written": [{"file": f, "workloads": n} for f, n in r.written],
    }


def _table(r: cp.PromResult) -> str:
    rows = []
    ro = r.rollup
    for p in ro.profiles if ro else []:
        w = p.workload
        places = sorted(_where(pl) for pl in r.workloads[p.name].places) if p.name in r.workloads else []
        rows.append([p.name, ", ".join(places[:2]) + (f" +{len(places) - 2}" if len(places) > 2 else ""),
                     w.observed.samples, w.memory.p50, w.memory.p99, w.memory.max,
                     f"{w.compute.p95:.4f}" if w.compute.known else "?", "; ".join(p.notes)])
    t = r.tally
    out = [f"window {_iso(r.start)} .. {_iso(r.end)}, step {r.step:g}s", "",
           grid(rows, ["WORKLOAD", "PLACES", "SAMPLES", "MEM p50", "MEM p99", "MEM max", "GPU SHARE p95", "NOTES"]),
           "",
           f"{len(rows)} profiles, {t.samples} samples from {t.series_used} series ({t.series_unattributed} "
           f"unattributed, {t.series_rejected} rejected; {t.points_rejected} of {t.points_read} points rejected)"]
    if ro and ro.skipped:
        out.append(f"{len(ro.skipped)} workloads without a memory sample: {', '.join(ro.skipped[:5])}")
    out += [f"written {f} ({n} workloads)" for f, n in r.written]
    return "\n".join(out)


def run(prom: PromOptions, *, output: Any = None, config: str | None = None, catalog: list[str] | None = None) -> None:
    """Collect from Prometheus and print the per-workload summary (the `collect` command calls this)."""
    from migplan.commands import collect_prometheus as cp

    ctx = build_context(config, catalog, output)

    def model_of(name: str) -> str | None:
        found = ctx.catalog.find(name)
        return found.id if found is not None else None

    req = request(prom)
    p = cp.plan(req, model_of=model_of, report=info)
    info(f"querying {p.client.base} from {_iso(p.start)} to {_iso(p.end)}, step {p.step:g}s")
    result = cp.collect_prometheus(p, report=info, catalog=ctx.catalog, out=prom.out)
    for problem in result.tally.problems:
        info(f"warning: {problem}")
    for w in result.tally.warnings:
        info(f"warning: Prometheus: {w}")
    emit(result_data(p.client.base, result), ctx.output, lambda: _table(result))


@handle_errors
@prometheus_options()
def collect_prometheus(prom: PromOptions, output: OutputOpt = None, config: ConfigOpt = None,
                       catalog: CatalogOpt = None) -> None:
    """Workload samples from Prometheus (dcgm-exporter or nvidia_gpu_prometheus_exporter metrics)."""
    run(prom, output=output, config=config, catalog=catalog)
