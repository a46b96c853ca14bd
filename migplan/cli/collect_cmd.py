"""`migplan collect`: workload samples from NVML on this host (`--local`), from every inventory host over SSH
(`--inventory`), or from Prometheus (`--prometheus`, migplan/cli/prometheus_cmd.py); `collect install`.

Exit codes: 0 done (every host collected); 1 NVML or the history store failed (`--local`), or some host
failed (`--inventory`; the others are collected and reported); 2 bad input. The work is
`migplan.commands.collect`; this module parses options and renders.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated

import typer

from migplan.adapters.history_store import DEFAULT_DIR, DEFAULT_MAX_MB, DEFAULT_RETENTION_DAYS, FILE_NAME
from migplan.cli import prometheus_cmd
from migplan.cli.options import (
    MAX_RETENTION_DAYS,
    CatalogOpt,
    ConfigOpt,
    FleetOptions,
    InventoryOpt,
    OutputOpt,
    finite,
    fleet_options,
)
from migplan.cli.render import emit, finish_hosts, grid, handle_errors, info
from migplan.commands import collect as run
from migplan.commands import quiet
from migplan.commands.context import build_context
from migplan.errors import InputError
from migplan.text import printable

app = typer.Typer(help="Collect workload memory and compute samples: NVML on this host, the fleet over SSH, or "
                       "Prometheus.", no_args_is_help=False, invoke_without_command=True)

_S = str | None
DEFAULT_OUT = "history"


def _iso(ts: float | None) -> str:
    return "-" if ts is None else dt.datetime.fromtimestamp(ts, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@app.callback(invoke_without_command=True)
@handle_errors
@prometheus_cmd.prometheus_options()
@fleet_options()
def collect(
    ctx: typer.Context,
    local: Annotated[bool, typer.Option("--local", help="Sample this host through NVML once and append to its "
                                        "history (run it every minute from cron or a systemd timer).")] = False,
    inventory: InventoryOpt = None,
    history: Annotated[str, typer.Option("--history", help="The history store directory on this host (--local), "
                                         "and where it is on each host (--inventory).",
                                         envvar="MIGPLAN_HISTORY", metavar="DIR")] = DEFAULT_DIR,
    host_name: Annotated[_S, typer.Option("--host-name", help="Host name the samples carry [default: this "
                                          "machine's name].", show_default=False, metavar="NAME")] = None,
    retention_days: Annotated[float, typer.Option(
        "--retention-days", min=0.01, max=MAX_RETENTION_DAYS, callback=finite, metavar="DAYS",
        help="Samples older than this are dropped.")] = DEFAULT_RETENTION_DAYS,
    max_mb: Annotated[int, typer.Option("--max-mb", min=1, metavar="MB", help="Size cap of the history store; the "
                                        "oldest samples go first.")] = DEFAULT_MAX_MB,
    workload_rules: Annotated[_S, typer.Option("--workload-rules", help="YAML file of rules naming workloads "
                                               "from their command line (docs/collect.md).",
                                               show_default=False, metavar="FILE")] = None,
    vgpu: Annotated[bool, typer.Option("--vgpu", help="--local on a vGPU host: also record each VM's vGPU "
                                       "(frame buffer used, utilisation, type) from 'nvidia-smi vgpu -q' as workload "
                                       "vm:<VM name> (docs/vgpu.md, 'Demand').")] = False,
    quiet_run: Annotated[bool, typer.Option("--quiet", "-q", help="--local: print nothing unless it fails "
                                            "(for cron and timers).")] = False,
    sample_seconds: Annotated[int, typer.Option("--sample-seconds", min=1, max=60, metavar="SECONDS",
                                                help="Length of the short nvidia-smi sample on a host without "
                                                     "history (pmon -c N).")] = 5,
    output: OutputOpt = None,
    config: ConfigOpt = None,
    catalog: CatalogOpt = None,
    *,
    fleet: FleetOptions,
    prom: prometheus_cmd.PromOptions,
) -> None:
    """Collect workload memory and compute samples: NVML on this host, the fleet over SSH, or Prometheus."""
    if ctx.invoked_subcommand is not None:
        return
    if vgpu and not local:
        raise InputError("--vgpu goes with --local (it samples this host's vGPUs)",
                         hint="run 'migplan collect --local --vgpu' on the vGPU host (from cron)")
    chosen = [n for n, on in (("--local", local), ("--inventory", inventory is not None),
                              ("--prometheus", prom.prometheus is not None)) if on]
    if len(chosen) != 1:
        raise InputError("give one of --local, --inventory FILE or --prometheus URL"
                         + (f" (not {' and '.join(chosen)})" if chosen else ""),
                         hint="'migplan collect --local' on a GPU host; '--inventory FILE' for the fleet over SSH")
    if prom.prometheus is not None:
        prometheus_cmd.run(prom, output=output, config=config, catalog=catalog)
        return
    cctx = build_context(config, catalog, output)
    rules = run.load_rules(workload_rules)
    if local:
        settings = run.LocalSettings(history=history, host=host_name, retention_days=retention_days, max_mb=max_mb,
                                     rules=rules, vgpu=vgpu)
        result = run.collect_local(settings, cctx.catalog, report=quiet if quiet_run else info)
        if quiet_run:
            return
        emit(result.as_dict(), cctx.output, lambda: (
            f"run {result.run}: {result.samples} samples ({len(result.workloads)} workloads, {result.processes} "
            f"processes, {result.gpus} GPUs) -> {result.store}"))
        return
    what = run.FleetCollect(out=prom.out or DEFAULT_OUT, remote_history=f"{history.rstrip('/')}/{FILE_NAME}",
                            pmon_samples=sample_seconds, max_mb=max_mb, rules=rules)
    fleet_result = run.collect_fleet(cctx, fleet.request(inventory), what, report=info)

    def table() -> str:
        rows = []
        for h in fleet_result.as_dict()["hosts"]:
            if not h["ok"]:
                rows.append([h["host"], "-", "-", "-", "-", f"FAILED ({printable(h['error']['code'], 40)})"])
                continue
            rows.append([h["host"], h["mode"] + (" (few samples)" if h["few_samples"] else ""), h["samples"],
                         len(h["workloads"]), f"{_iso(h['first'])} .. {_iso(h['last'])}", "ok"])
        return grid(rows, ["HOST", "FROM", "SAMPLES", "WORKLOADS", "SPAN", "STATUS"]) + \
            f"\n\nhistories in {fleet_result.out}/<host>.sqlite"

    emit(fleet_result.as_dict(), cctx.output, table)
    finish_hosts(fleet_result.outcomes())


@app.command("install")
@handle_errors
@fleet_options()
def install(
    inventory: InventoryOpt = None,
    timer: Annotated[bool, typer.Option("--timer", help="Install a systemd timer instead of /etc/cron.d.")] = False,
    migplan_path: Annotated[str, typer.Option("--migplan-path", metavar="PATH",
                                              help="The migplan command on the hosts.")] = "/usr/local/bin/migplan",
    history: Annotated[str, typer.Option("--history", metavar="DIR",
                                         help="The history store directory on the hosts.")] = DEFAULT_DIR,
    cron_file: Annotated[str, typer.Option("--cron-file", metavar="FILE",
                                           help="The cron file written.")] = run.CRON_FILE,
    systemd_dir: Annotated[str, typer.Option("--systemd-dir", metavar="DIR",
                                             help="Where the timer units go.")] = run.SYSTEMD_DIR,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be written; write nothing.")] = False,
    vgpu: Annotated[bool, typer.Option("--vgpu", help="The hosts are vGPU hosts: the sampler also records each VM's "
                                       "vGPU ('collect --local --vgpu').")] = False,
    output: OutputOpt = None,
    config: ConfigOpt = None,
    catalog: CatalogOpt = None,
    *,
    fleet: FleetOptions,
) -> None:
    """Install the sampler on every host: a cron entry (or systemd timer) running 'migplan collect --local'."""
    cctx = build_context(config, catalog, output)
    req = run.InstallRequest(migplan=migplan_path, history=history, timer=timer, cron_file=cron_file,
                             systemd_dir=systemd_dir, dry_run=dry_run, vgpu=vgpu)
    results = run.install(cctx, fleet.request(inventory), req, report=info)
    data = {"hosts": [{"host": r.host, "ok": True, "files": [{"path": p, "state": s} for p, s in r.value.files],
                       "commands": [list(c) for c in r.value.commands]} if r.value is not None else
                      {"host": r.host, "ok": False, "error": r.error.as_dict() if r.error else None} for r in results]}

    def table() -> str:
        rows = [[r.host, "; ".join(f"{p} {s}" for p, s in r.value.files) if r.value is not None else
                 f"FAILED ({r.error.code if r.error else '?'})"] for r in results]
        return grid(rows, ["HOST", "SAMPLER"])

    emit(data, cctx.output, table)
    from migplan.commands.results import pool_outcomes

    finish_hosts(pool_outcomes(results))
