"""`migplan propose`: plan a MIG layout for every GPU and an instance for every workload."""

from __future__ import annotations

from collections import defaultdict
from typing import Annotated, Any, Optional

import typer

from migplan.cli.options import CatalogOpt, ConfigOpt, InventoryOpt, OutputOpt, ProfilesOpt
from migplan.cli.render import emit, grid, handle_errors, info
from migplan.commands.context import build_context
from migplan.commands.propose import ProposeRequest
from migplan.commands.propose import propose as run_propose
from migplan.layout import picture
from migplan.planner import Plan, plan_to_dict
from migplan.planner.milp import SOLVERS


def _table(p: Plan, catalog: Any) -> str:
    by_gpu: dict[tuple[str | None, int | None], list[str]] = defaultdict(list)
    for w in p.workloads:
        if w.status == "placed":
            mark = "" if w.kept else (" (moved)" if w.moved else " (new)")
            by_gpu[(w.host, w.gpu)].append(f"{w.name}@{w.instance.split('@')[0] if w.instance else 'whole'}{mark}")
    rows = []
    for g in p.gpus:
        model = catalog.get(g.model)
        change = g.hold or ("change" if g.actions else "")
        rows.append([g.host, g.index, g.model, picture(model, g.current), picture(model, g.target), change,
                     ", ".join(by_gpu.get((g.host, g.index), []))])
    out = [grid(rows, ["HOST", "GPU", "MODEL", "CURRENT", "TARGET", "", "WORKLOADS"])]
    left = [w for w in p.workloads if w.status != "placed"]
    if left:
        out.append("\nLeft out:\n" + grid([[w.name, w.memory_mib, w.peak_mib, w.reason] for w in left],
                                          ["WORKLOAD", "NEEDS MiB", "PEAK MiB", "REASON"]))
    below = [w for w in p.workloads if w.status == "placed" and w.margin_mib is not None and w.margin_mib < 0]
    if below:
        out.append("\nBelow their observed memory peak (an out-of-memory kill at that peak):\n" + grid(
            [[w.name, f"{w.host}/{w.gpu}", w.instance or "whole GPU", w.instance_mib, w.peak_mib, w.margin_mib]
             for w in below], ["WORKLOAD", "HOST/GPU", "INSTANCE", "INSTANCE MiB", "PEAK MiB", "MARGIN MiB"]))
    s, v = p.summary, p.solve
    gap = f"{v.gap:.2%}" if v.gap is not None else "n/a"
    pct = str(p.policy.get("memory_percentile", "?"))
    stat = "max (observed peak)" if pct == "max" else pct
    least = f"{s.min_margin_mib} MiB" if s.min_margin_mib is not None else "n/a"
    out.append(
        f"\nGPUs used {s.gpus_used} of {s.gpus_planned} planned (lower bound {s.gpus_lower_bound}), "
        f"free whole GPUs {s.free_whole_gpus}, stranded slices {s.stranded_slices}\n"
        f"workloads placed {s.workloads_placed}, left out {s.workloads_unplaced}, disrupted {s.workloads_disrupted}"
        + (f" (+{s.busy_disrupted} busy without a profile)" if s.busy_disrupted else "") + "\n"
        f"memory sized from {stat}, headroom {s.headroom_rule}; below peak {s.below_peak}, least margin {least}\n"
        + (f"warning: {s.memory_warning}\n" if s.memory_warning else "")
        + f"GPUs changed {s.gpus_changed}, instances destroyed {s.instances_destroyed}, created {s.instances_created}\n"
        f"solver {v.solver}: {v.status}, gap {gap}, {v.time_s:.2f}s")
    return "\n".join(out)


@handle_errors
def propose(
    inventory: InventoryOpt = None,
    profiles: ProfilesOpt = None,
    output: OutputOpt = None,
    config: ConfigOpt = None,
    catalog: CatalogOpt = None,
    out: Annotated[Optional[str], typer.Option("--out", help="Write the plan document here (JSON).")] = None,  # noqa: UP045
    snapshot: Annotated[Optional[str], typer.Option("--snapshot", help="Plan from a discovery snapshot instead of the inventory's layouts.")] = None,  # noqa: UP045, E501
    solver: Annotated[Optional[str], typer.Option("--solver", help=f"MILP solver: {' or '.join(SOLVERS)}.")] = None,  # noqa: UP045, E501
    time_limit: Annotated[Optional[float], typer.Option("--time-limit", min=0.1, help="Solver time limit, seconds [60].")] = None,  # noqa: UP045, E501
    gap: Annotated[Optional[float], typer.Option("--gap", min=0.0, max=0.99, help="Relative MIP gap to stop at [0.0001].")] = None,  # noqa: UP045, E501
    allow_disrupt: Annotated[Optional[bool], typer.Option("--allow-disrupt/--no-allow-disrupt", help="Allow moving running workloads (each move is counted).")] = None,  # noqa: UP045, E501
    keep_free: Annotated[Optional[int], typer.Option("--keep-free", min=0, help="Keep N whole GPUs free.")] = None,  # noqa: UP045
    memory_percentile: Annotated[Optional[str], typer.Option("--memory-percentile", help="Memory statistic to size for: max (the observed peak) or p50|p95|p99, which size below the peak and risk an out-of-memory kill (default max).")] = None,  # noqa: UP045, E501
    compute_percentile: Annotated[Optional[str], typer.Option("--compute-percentile", help="Compute statistic to size for: p50|p95|p99|max; p99 needs compute.p99 in the profiles (default p95).")] = None,  # noqa: UP045, E501
    headroom: Annotated[Optional[float], typer.Option("--headroom", min=0.0, max=10.0, help="Memory headroom fraction; need = the larger of statistic x (1 + headroom) and statistic + --headroom-min-mib (default 0.10).")] = None,  # noqa: UP045, E501
    headroom_min_mib: Annotated[Optional[int], typer.Option("--headroom-min-mib", min=0, help="Least memory headroom, MiB; applies even with --headroom 0; 0 turns it off (default 512).")] = None,  # noqa: UP045, E501
    anti_affinity_scope: Annotated[Optional[str], typer.Option("--anti-affinity-scope", help="gpu|host (default gpu).")] = None,  # noqa: UP045, E501
) -> None:
    """Propose a MIG layout per GPU and an instance per workload (an integer program)."""
    ctx = build_context(config, catalog, output)
    req = ProposeRequest(
        inventory=inventory, profiles=profiles, snapshot=snapshot, out=out, solver=solver, time_limit=time_limit,
        gap=gap, policy={"allow_disrupt": allow_disrupt, "keep_free": keep_free, "headroom": headroom,
                         "memory_percentile": memory_percentile, "compute_percentile": compute_percentile,
                         "headroom_min_mib": headroom_min_mib, "anti_affinity_scope": anti_affinity_scope})
    result = run_propose(ctx, req, report=info)
    emit(plan_to_dict(result), ctx.output, lambda: _table(result, ctx.catalog))
