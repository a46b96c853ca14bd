"""`migplan backtest`: what a sizing rule would have cost on this history (docs/profiles.md, "backtest").

The history is the on-host store (`--history`), a CSV file (`--csv`) or Prometheus (`--prometheus URL` with
the options of `collect --prometheus` but its time range: `--train` + `--test` ending at `--until` or now).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from migplan.cli import prometheus_cmd
from migplan.cli.options import CatalogOpt, ConfigOpt, OutputOpt
from migplan.cli.render import emit, grid, handle_errors, info
from migplan.commands.context import build_context
from migplan.config import PERCENTILES

_S = str | None


def _table(bt: Any, all_workloads: bool) -> str:
    from migplan.history.rollup import iso

    rows = [[t.rule, t.headroom_rule, t.placed, t.unplaced, t.oom_workloads, t.oom_samples, f"{t.oom_minutes:g}",
             t.memory_allocated_mib, f"{t.unused_mib_mean:.0f}", t.slices_allocated, t.compute_short_samples,
             f"{t.gpus_used} ({t.gpus_lower_bound if t.gpus_lower_bound is not None else '?'})"] for t in bt.totals]
    out = [f"train {iso(bt.train.start)} .. {iso(bt.train.end)}, test {iso(bt.test.start)} .. {iso(bt.test.end)}",
           "",
           grid(rows, ["RULE", "HEADROOM", "PLACED", "UNPLACED", "OOM WORKLOADS", "OOM SAMPLES", "OOM MIN",
                       "ALLOC MiB", "UNUSED MiB", "SLICES", "COMPUTE SHORT", "GPUS (LB)"])]
    shown = [w for w in bt.workloads if all_workloads or w.oom_samples or w.compute_short_samples
             or w.status != "placed"]
    if shown:
        out += ["", "per workload" + ("" if all_workloads else " (those out of memory, short of compute or unplaced; "
                                      "--all-workloads for every one)") + ":",
                grid([[w.workload, w.rule, w.instance or ("whole GPU" if w.status == "placed" else w.status),
                       w.instance_mib, w.train_peak_mib, w.test_peak_mib, w.test_samples, w.oom_samples,
                       f"{w.oom_minutes:g}", w.unused_mib_mean, w.compute_short_samples, w.reason or ""]
                      for w in shown],
                     ["WORKLOAD", "RULE", "INSTANCE", "INSTANCE MiB", "TRAIN PEAK", "TEST PEAK", "TEST SAMPLES",
                      "OOM SAMPLES", "OOM MIN", "UNUSED MiB", "COMPUTE SHORT", "REASON"])]
    if bt.untrained:
        out += ["", f"not sized (no sample in the training window): {len(bt.untrained)} workload(s): "
                + ", ".join(sorted(bt.untrained)[:10]) + (" ..." if len(bt.untrained) > 10 else "")]
    return "\n".join(out)


@handle_errors
@prometheus_cmd.prometheus_options(without=prometheus_cmd.RANGE_AND_OUT)
def backtest(
    csv: Annotated[_S, typer.Option("--csv", help="A CSV time series (docs/profiles.md).", show_default=False,
                                    metavar="FILE")] = None,
    history: Annotated[_S, typer.Option("--history", help="The on-host history store (or a directory of stores "
                                        "fetched by 'collect --inventory').", show_default=False,
                                        metavar="PATH")] = None,
    train: Annotated[str, typer.Option("--train", help="Training window length (sized from it).",
                                       metavar="DURATION")] = "7d",
    test: Annotated[str, typer.Option("--test", help="Test window length, ending at --until (replayed).",
                                      metavar="DURATION")] = "7d",
    until: Annotated[_S, typer.Option("--until", help="End of the test window: unix seconds or ISO 8601 [default: "
                                      "the history's last sample].", show_default=False, metavar="TIME")] = None,
    policy: Annotated[list[str] | None, typer.Option(
        "--policy", help="Sizing rule STAT[+PCT%][+MIBMiB], STAT one of p50, p95, p99, max (repeatable) [default: "
                         "max+10%, max+25%, p99+10%].", show_default=False, metavar="RULE")] = None,
    gpu_model: Annotated[_S, typer.Option("--gpu-model", help="GPU model for workloads whose history names none.",
                                          show_default=False, metavar="MODEL")] = None,
    compute_percentile: Annotated[_S, typer.Option("--compute-percentile", help="Compute statistic, as in propose "
                                                   "[default: p95].", show_default=False,
                                                   metavar="|".join(PERCENTILES))] = None,
    all_workloads: Annotated[bool, typer.Option("--all-workloads", help="List every workload in the table.")] = False,
    output: OutputOpt = None, config: ConfigOpt = None, catalog: CatalogOpt = None,
    *,
    prom: prometheus_cmd.PromOptions,
) -> None:
    """Backtest sizing rules: size from a training window, replay the next, count OOMs and waste."""
    from migplan.commands.history import BacktestRequest, run_backtest

    ctx = build_context(config, catalog, output)
    req = BacktestRequest(history=history, csv=csv, train=train, test=test, until=until,
                          policies=tuple(policy or ()), gpu_model=gpu_model, compute_percentile=compute_percentile,
                          prometheus=prometheus_cmd.history_request(prom))
    bt = run_backtest(ctx, req, report=info)
    emit(bt.to_dict(), ctx.output, lambda: _table(bt, all_workloads))
