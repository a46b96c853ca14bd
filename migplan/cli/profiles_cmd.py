"""`migplan profiles show`: the workload profiles migplan plans from.

Compute is a share (0..1) of the whole GPU the workload was measured on, not an SM count, hence the
column "GPU SHARE p95"; `compute.p99` is null in the JSON when the profile does not record it."""

from __future__ import annotations

from typing import Any

import typer

from migplan.cli.options import CatalogOpt, ConfigOpt, OutputOpt, ProfilesOpt
from migplan.cli.render import emit, grid, handle_errors
from migplan.commands.context import build_context
from migplan.profiles import Workload

app = typer.Typer(help="Workload profiles.", no_args_is_help=True)


def workload_data(w: Workload) -> dict[str, Any]:
    o = w.observed
    return {
        "name": w.name,
        "observed": {"host": o.host, "gpu": o.gpu, "gpu_model": o.gpu_model, "mig_profile": o.mig_profile,
                     "mig_start": o.mig_start, "window": {"start": o.window_start, "end": o.window_end},
                     "samples": o.samples},
        "memory_mib": {"p50": w.memory.p50, "p95": w.memory.p95, "p99": w.memory.p99, "max": w.memory.max},
        "compute": {"p50": w.compute.p50, "p95": w.compute.p95, "p99": w.compute.p99, "max": w.compute.max},
        "priority": w.priority,
        "pin": {"host": w.pin.host, "gpu": w.pin.gpu} if w.pin else None,
        "anti_affinity": w.anti_affinity,
        "min_profile": w.min_profile,
        "replicas": w.replicas,
        "source": w.source,
    }


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
            extra = " ".join(x for x in (
                f"pin={w.pin.host}{'/' + str(w.pin.gpu) if w.pin.gpu is not None else ''}" if w.pin else "",
                f"anti={w.anti_affinity}" if w.anti_affinity else "",
                f"min={w.min_profile}" if w.min_profile else "",
                f"x{w.replicas}" if w.replicas > 1 else "") if x)
            rows.append([w.name, where, o.gpu_model or "?", inst, w.memory.p50, w.memory.p99, w.memory.max,
                         f"{w.compute.p95:.2f}", w.priority, extra])
        return (grid(rows, ["WORKLOAD", "HOST/GPU", "MODEL", "INSTANCE", "MEM p50", "MEM p99", "MEM max",
                            "GPU SHARE p95", "PRIO", "CONSTRAINTS"])
                + f"\n\n{len(rows)} workloads from {len(pset.sources)} file(s)")

    emit(data, ctx.output, table)
