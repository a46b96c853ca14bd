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
from migplan.files import check_output_options

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
    if bt.vms:  # issue 26: a VM is given a vGPU type, not a MIG instance
        out += ["", f"not backtested (kind: vm, vGPU types are not planned yet): {len(bt.vms)} workload(s): "
                + ", ".join(bt.vms[:10]) + (" ..." if len(bt.vms) > 10 else "")]
    return "\n".join(out)


def _sweep_table(sw: Any) -> str:
    from migplan.history.rollup import iso

    def mw(stat: dict[str, float], fmt: str = "") -> str:
        def one(v: float) -> str:
            return fmt.format(v) if fmt else f"{round(v, 2):g}"

        return f"{one(stat['mean'])} ({one(stat['worst'])})"

    def pct(share: float) -> str:
        return f"{round(share * 100, 2):g}%"

    out = [f"train {sw.train_s / 86400:g}d and test {sw.test_s / 86400:g}d at {len(sw.splits)} split point(s) (rolling "
           f"origin); target: at most {pct(sw.target)} of workloads out of memory (mean over the splits)"]
    out += [f"  split {s.split.index + 1}: train {iso(s.split.train.start)} .. {iso(s.split.train.end)}, test "
            f"{iso(s.split.test.start)} .. {iso(s.split.test.end)}: {s.sized} workloads sized, {s.replayed} replayed"
            + (f", {s.untrained} not sized (no training sample)" if s.untrained else "") for s in sw.splits]
    rows = []
    for r in sorted(sw.rules, key=lambda r: (r.ratio["mean"], r.oom_rate["mean"])):
        d = r.to_dict()
        b = r.worst_burst
        mark = "<- recommended" if sw.recommended is r else "*" if r.frontier else ""
        share = f"{pct(d['oom_rate']['mean'])} ({pct(d['oom_rate']['worst'])})"
        rows.append([r.rule.text, mw(d["oom_workloads"]), share,
                     mw(d["oom_minutes"]), mw(d["gpus"]), mw(d["whole_gpu_ratio"], "{:.3f}"),
                     (f"{b.peak}/{b.independent}" + (" correlated" if b.correlated else "")) if b else "", mark])
    out += ["", grid(rows, ["RULE", "OOM WORKLOADS", "OOM SHARE", "OOM MIN", "GPUS", "x WHOLE GPUS",
                            "BURST PEAK/INDEP", "FRONTIER"]),
            "", "each figure: mean over the splits (worst split); * on the frontier (no rule both cheaper and with "
                "fewer workloads out of memory)",
            (f"recommended: {sw.recommended.rule.text}: {sw.reason}" if sw.recommended else
             f"no recommendation: {sw.reason}")]
    return "\n".join(out)


def _burst_warnings(sw: Any) -> None:
    from migplan.history.rollup import iso

    for r in sw.correlated[:3]:
        b = r.worst_burst
        info(f"warning: correlated bursts under {r.rule.text}: {b.peak} workloads out of memory in the same "
             f"{b.bucket_s / 60:g} minutes (at {iso(b.peak_at)}); independent OOMs at the same rates give at most "
             f"{b.independent} together: no per-workload rule foresees these (docs/profiles.md, 'What the history "
             "cannot predict')")


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
    test: Annotated[str | None, typer.Option("--test", help="Test window length, ending at --until (replayed); with "
                                             "--sweep, each split's [default: 7d; with --sweep 1d].",
                                             show_default=False, metavar="DURATION")] = None,
    until: Annotated[_S, typer.Option("--until", help="End of the test window: unix seconds or ISO 8601 [default: "
                                      "the history's last sample].", show_default=False, metavar="TIME")] = None,
    policy: Annotated[list[str] | None, typer.Option(
        "--policy", help="Sizing rule STAT[+PCT%][+Kspread][+FLOORMiB][,cap=CAPMiB], or a family with brace lists "
                         "such as max+{5,10,25}% (repeatable; docs/profiles.md) [default: max+10%, max+25%, p99+10%; "
                         "with --sweep: the default grid of 21 rules].", show_default=False, metavar="RULE")] = None,
    sweep: Annotated[bool, typer.Option("--sweep", help="Sweep the rules at several split points (rolling origin) and "
                                        "print the frontier of workloads out of memory against GPUs, and the "
                                        "cheapest rule meeting --target-oom.")] = False,
    splits: Annotated[int, typer.Option("--splits", min=1, max=50, metavar="N",
                                        help="With --sweep: split points; the last N x --test of the history are "
                                             "the test windows.")] = 3,
    target_oom: Annotated[str, typer.Option("--target-oom", metavar="SHARE",
                                            help="With --sweep: the share of workloads that may run out of memory, "
                                                 "mean over the splits (1% or 0.01).")] = "1%",
    state_dir: Annotated[_S, typer.Option("--state-dir", metavar="DIR",
                                          help="With --sweep: keep it as the calibration 'sizing: auto' uses, in "
                                               "this state directory (replan's; docs/profiles.md).",
                                          show_default=False)] = None,
    report_html: Annotated[_S, typer.Option("--report", metavar="FILE",
                                            help="With --sweep: also write the frontier (an SVG), the rules and the "
                                                 "splits as one self-contained HTML page.",
                                            show_default=False)] = None,
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
    from migplan.commands.history import BacktestRequest, SweepRequest, run_backtest, run_sweep, write_sweep_page

    ctx = build_context(config, catalog, output)
    if not sweep:
        for name, given in (("--splits", splits != 3), ("--target-oom", target_oom != "1%"),
                            ("--report", report_html is not None), ("--state-dir", state_dir is not None)):
            if given:
                raise typer.BadParameter("goes with --sweep", param_hint=name)
        req = BacktestRequest(history=history, csv=csv, train=train, test=test or "7d", until=until,
                              policies=tuple(policy or ()), gpu_model=gpu_model, compute_percentile=compute_percentile,
                              prometheus=prometheus_cmd.history_request(prom))
        bt = run_backtest(ctx, req, report=info)
        emit(bt.to_dict(), ctx.output, lambda: _table(bt, all_workloads))
        return
    if report_html:
        check_output_options((report_html, "--report", "file"))  # before the long read
    sreq = SweepRequest(history=history, csv=csv, train=train, test=test or "1d", splits=splits, until=until,
                        policies=tuple(policy or ()), gpu_model=gpu_model, compute_percentile=compute_percentile,
                        target_oom=target_oom, prometheus=prometheus_cmd.history_request(prom))
    sw = run_sweep(ctx, sreq, report=info)
    source = csv or history or prom.prometheus or ""
    if report_html:
        write_sweep_page(sw, report_html, source=source, forbid=[csv, history], report=info)
    if state_dir:
        import time

        from migplan.commands.sizing import keep_sweep

        keep_sweep(ctx, sw, state_dir, source=source, families=tuple(policy or ()), now=time.time(), report=info)
    _burst_warnings(sw)
    emit(sw.to_dict(), ctx.output, lambda: _sweep_table(sw))
