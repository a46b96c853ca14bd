"""`migplan profiles show | build | import`: the workload profiles migplan plans from.

Compute is a share (0..1) of the whole GPU the workload was measured on, not an SM count, hence the
column "GPU SHARE p95"; `compute.p99` is null in the JSON when the profile does not record it, and
`compute` is null (the table shows "?") when compute was never measured.

`build` and `import` roll a history up into one profiles file per host (docs/profiles.md); their
logic is in migplan.commands.history, imported when they run. `build` reads the on-host store, a CSV
file or Prometheus (`--prometheus URL` with the options of `collect --prometheus`, the time range being
`--window` back from `--until` or now).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from migplan.cli import prometheus_cmd
from migplan.cli.options import CatalogOpt, ConfigOpt, OutputOpt, ProfilesOpt
from migplan.cli.render import emit, grid, handle_errors
from migplan.commands.context import build_context
from migplan.errors import EXIT_FAILURE
from migplan.profiles import Workload

if TYPE_CHECKING:
    from migplan.commands.history import BuildResult

app = typer.Typer(help="Workload profiles.", no_args_is_help=True)


def workload_data(w: Workload) -> dict[str, Any]:
    o = w.observed
    data: dict[str, Any] = {
        "name": w.name,
        "observed": {"host": o.host, "gpu": o.gpu, "gpu_model": o.gpu_model, "mig_profile": o.mig_profile,
                     "mig_start": o.mig_start, "window": {"start": o.window_start, "end": o.window_end},
                     "samples": o.samples},
        "memory_mib": {"p50": w.memory.p50, "p95": w.memory.p95, "p99": w.memory.p99, "max": w.memory.max},
        "compute": ({"p50": w.compute.p50, "p95": w.compute.p95, "p99": w.compute.p99, "max": w.compute.max}
                    if w.compute.known else None),
        "priority": w.priority,
        "pin": {"host": w.pin.host, "gpu": w.pin.gpu} if w.pin else None,
        "anti_affinity": w.anti_affinity,
        "min_profile": w.min_profile,
        "replicas": w.replicas,
        "source": w.source,
    }
    if w.is_vm:  # issue 26: a VM's keys, only for a VM (a process's output is as it was)
        data.update(kind=w.kind, vgpu_type=w.vgpu_type, min_vgpu_type=w.min_vgpu_type)
        data["observed"].update(vgpu_type=o.vgpu_type, vm_uuid=o.vm_uuid)
    return data


@app.command("show")
@handle_errors
def show(profiles: ProfilesOpt = None, output: OutputOpt = None, config: ConfigOpt = None,
         catalog: CatalogOpt = None) -> None:
    """Print the workload profiles."""
    ctx = build_context(config, catalog, output)
    pset = ctx.profiles(profiles)
    data = [workload_data(w) for w in pset]

    def table() -> str:
        rows = []
        for w in pset:
            o = w.observed
            where = f"{o.host or '?'}/{o.gpu if o.gpu is not None else '?'}"
            inst = o.mig_profile + (f"@{o.mig_start}" if o.mig_start is not None else "") if o.mig_profile else "-"
            if w.is_vm:
                inst = f"vGPU {o.vgpu_type or '?'}"
            extra = " ".join(x for x in (
                f"pin={w.pin.host}{'/' + str(w.pin.gpu) if w.pin.gpu is not None else ''}" if w.pin else "",
                f"anti={w.anti_affinity}" if w.anti_affinity else "",
                f"min={w.min_profile}" if w.min_profile else "",
                "vm" if w.is_vm else "",
                f"vgpu={w.vgpu_type}" if w.vgpu_type else "",
                f"min={w.min_vgpu_type}" if w.min_vgpu_type else "",
                f"x{w.replicas}" if w.replicas > 1 else "") if x)
            rows.append([w.name, where, o.gpu_model or "?", inst, w.memory.p50, w.memory.p99, w.memory.max,
                         f"{w.compute.p95:.2f}" if w.compute.known else "?", w.priority, extra])
        return (grid(rows, ["WORKLOAD", "HOST/GPU", "MODEL", "INSTANCE", "MEM p50", "MEM p99", "MEM max",
                            "GPU SHARE p95", "PRIO", "CONSTRAINTS"])
                + f"\n\n{len(rows)} workloads from {len(pset.sources)} file(s)")

    emit(data, ctx.output, table)


# --- build / import ---------------------------------------------------------------------------------

_S = str | None
WindowOpt = Annotated[str, typer.Option("--window", help="Window length ending at --until: 90s, 30m, 12h, 7d, 2w, "
                                        "or 'all'.", metavar="DURATION")]
UntilOpt = Annotated[_S, typer.Option("--until", help="End of the window: unix seconds or ISO 8601 [default: the "
                                      "history's last sample].", show_default=False, metavar="TIME")]
OutDirOpt = Annotated[_S, typer.Option("--out", help="Directory for the profiles files (one per host, written "
                                       "atomically).", show_default=False, metavar="DIR")]
DryRunOpt = Annotated[bool, typer.Option("--dry-run", help="Print the summary and write nothing.")]


def _build_data(r: BuildResult) -> dict[str, Any]:
    ro = r.rollup
    return {
        "source": r.source,
        "csv": r.csv.to_dict() if r.csv else None,
        "window": {"start": ro.window.start, "end": ro.window.end},
        "samples_seen": ro.samples_seen, "samples_in_window": ro.samples_in_window,
        "profiles": [{"name": p.name, "file": p.host, **p.document} for p in ro.profiles],
        "skipped": ro.skipped,
        "written": [{"file": f, "workloads": n} for f, n in r.written],
        "stale": r.stale, "notes": r.notes,
    }


def _csv_lines(r: BuildResult) -> list[str]:
    st = r.csv
    if st is None:
        return []
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(st.kinds.items()))
    out = [f"{st.source}: rows read {st.rows_read}, kept {st.rows_kept}, rejected {st.rows_rejected}"
           + (f" ({kinds})" if kinds else "")]
    if st.ignored_columns:
        out.append(f"columns ignored: {', '.join(st.ignored_columns)}")
    out += [f"  line {x.line}: {x.reason}" for x in st.rejected]
    if st.rows_rejected > len(st.rejected):
        out.append(f"  ... and {st.rows_rejected - len(st.rejected)} more rejected rows")
    return out


def _build_table(r: BuildResult) -> str:
    from migplan.history.rollup import iso

    ro = r.rollup
    rows = []
    for p in ro.profiles:
        # the document's own figures (what Profile.workload is made from): building 200,000 Workloads only to
        # print them was a tenth of a large import
        doc: dict[str, Any] = p.document
        observed, mem, cpu = doc["observed"], doc["memory_mib"], doc.get("compute")
        rows.append([p.name, p.host, len(observed["places"]), observed["samples"], mem["p50"], mem["p99"],
                     mem["max"], f"{cpu['p95']:.4f}" if cpu is not None else "?", "; ".join(p.notes)])
    win = ro.window
    span = (f"{iso(win.start) if win.start is not None else 'start'} .. "
            f"{iso(win.end) if win.end is not None else 'end'}")
    out = _csv_lines(r) + [
        f"window {span}: {ro.samples_in_window} of {ro.samples_seen} samples",
        "",
        grid(rows, ["WORKLOAD", "FILE", "PLACES", "SAMPLES", "MEM p50", "MEM p99", "MEM max", "GPU SHARE p95",
                    "NOTES"]),
        "",
        f"{len(ro.profiles)} profiles" + (f", {len(ro.skipped)} workloads without a memory sample skipped"
                                          if ro.skipped else ""),
    ]
    out += [f"written {f} ({n} workloads)" for f, n in r.written]
    out += [f"note: {n}" for n in r.notes]
    if r.stale:
        out.append(f"warning: {len(r.stale)} other profiles file(s) in the directory were not written by this build "
                   f"and are read with it: {', '.join(r.stale[:5])}")
    return "\n".join(out)


def _run_build(history: str | None, csv: str | None, window: str, until: str | None, out: str | None,
               dry_run: bool, output: Any, config: str | None, catalog: list[str] | None,
               prom: prometheus_cmd.PromOptions | None = None) -> None:
    from migplan.cli.render import info
    from migplan.commands.history import BuildRequest, build_profiles
    from migplan.errors import InputError

    if not out and not dry_run:
        raise InputError("--out DIR is required (or --dry-run to write nothing)", key="--out")
    ctx = build_context(config, catalog, output)
    result = build_profiles(ctx, BuildRequest(history=history, csv=csv, window=window, until=until,
                                              out=None if dry_run else out,
                                              prometheus=prometheus_cmd.history_request(prom) if prom else None),
                            report=info)
    emit(_build_data(result), ctx.output, lambda: _build_table(result))
    if result.csv is not None and result.csv.rows_rejected:
        info(f"warning: {result.csv.rows_rejected} rows of {result.csv.source} rejected (listed above)")
    if not result.rollup.profiles:
        info("error: no profile built: no workload has a memory sample in the window")
        raise typer.Exit(EXIT_FAILURE)


@app.command("build")
@handle_errors
@prometheus_cmd.prometheus_options(without=prometheus_cmd.RANGE_AND_OUT)
def build(
    history: Annotated[_S, typer.Option("--history", help="The on-host history store (written by 'migplan collect "
                                        "--local').", show_default=False, metavar="PATH")] = None,
    csv: Annotated[_S, typer.Option("--csv", help="A CSV time series (docs/profiles.md).", show_default=False,
                                    metavar="FILE")] = None,
    window: WindowOpt = "7d", until: UntilOpt = None, out: OutDirOpt = None, dry_run: DryRunOpt = False,
    output: OutputOpt = None, config: ConfigOpt = None, catalog: CatalogOpt = None,
    *,
    prom: prometheus_cmd.PromOptions,
) -> None:
    """Roll a history up into workload profiles: one file per host."""
    _run_build(history, csv, window, until, out, dry_run, output, config, catalog, prom)


@app.command("import")
@handle_errors
def import_csv(
    file: Annotated[str, typer.Argument(help="CSV time series: timestamp, workload, [host], memory_used_bytes or "
                                        "memory_used_mib, [util_pct], [gpu_model].", show_default=False,
                                        metavar="FILE")],
    window: WindowOpt = "7d", until: UntilOpt = None, out: OutDirOpt = None, dry_run: DryRunOpt = False,
    output: OutputOpt = None, config: ConfigOpt = None, catalog: CatalogOpt = None,
) -> None:
    """Import a CSV time series from monitoring as workload profiles: one file per host."""
    _run_build(None, file, window, until, out, dry_run, output, config, catalog)
