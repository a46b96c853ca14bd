"""`migplan propose`: plan a MIG layout for every GPU and an instance for every workload."""

from __future__ import annotations

from collections import defaultdict
from typing import Annotated, Any

import typer

from migplan.adapters.kubectl import KubectlOptions
from migplan.catalog.layout import picture
from migplan.cli.k8s_options import ContextOpt, KubeconfigOpt, MigConfigMapOpt
from migplan.cli.options import (
    MAX_SECONDS,
    CatalogOpt,
    ConfigOpt,
    InventoryOpt,
    OutputOpt,
    ProfilesOpt,
    TargetOomOpt,
    finite,
)
from migplan.cli.progress import Reporter
from migplan.cli.progress import reporter as progress_reporter
from migplan.cli.render import emit, grid, handle_errors, info
from migplan.commands.context import build_context
from migplan.commands.propose import DEFAULT_GAP, DEFAULT_SOLVER, DEFAULT_TIME_LIMIT_S, WRITING, ProposeRequest
from migplan.commands.propose import propose as run_propose
from migplan.config import PERCENTILES
from migplan.errors import EXIT_FALLBACK, MigplanError
from migplan.files import check_output_options
from migplan.planner import Plan, Policy, plan_to_dict
from migplan.planner.demand import policy_from_mapping, spare_rule
from migplan.planner.milp import SOLVERS

_P = Policy()  # the planner's defaults, as the help states them


def _with_vgpu(p: Plan, catalog: Any) -> str:
    """The MIG table, then the hypervisor hosts' vGPUs when the plan has any (issue 26; cli/vgpu_render.py)."""
    text = _table(p, catalog) if p.gpus or p.vgpu is None else ""
    if p.vgpu is None:
        return text
    from migplan.cli.vgpu_render import render_vgpu

    return "\n\n".join(x for x in (text, render_vgpu(p, catalog)) if x)


def _table(p: Plan, catalog: Any) -> str:
    if p.models:  # GPUs planned with their host's own profile table (e.g. no driver: in the inventory)
        from migplan.catalog import Catalog

        catalog = Catalog((*p.models, *catalog.models))
    by_gpu: dict[tuple[str | None, int | None], list[str]] = defaultdict(list)
    for w in p.workloads:
        if w.on_gpu:
            mark = " (at risk)" if w.status == "at_risk" else "" if w.kept else (" (moved)" if w.moved else " (new)")
            by_gpu[(w.host, w.gpu)].append(f"{w.name}@{w.instance.split('@')[0] if w.instance else 'whole'}{mark}")
    rows = []
    for g in p.gpus:
        model = catalog.get(g.model)
        change = g.hold or ("change" if g.actions else "")
        rows.append([g.host, g.index, g.model, picture(model, g.current), picture(model, g.target), change,
                     ", ".join(by_gpu.get((g.host, g.index), []))])
    out = [grid(rows, ["HOST", "GPU", "MODEL", "CURRENT", "TARGET", "", "WORKLOADS"])]
    risky = [w for w in p.workloads if w.status == "at_risk"]
    if risky:
        out.append("\nKept at risk (running where they are: the peak fits, peak + headroom does not):\n" + grid(
            [[w.name, f"{w.host}/{w.gpu}", w.instance or "whole GPU", w.instance_mib, w.peak_mib, w.memory_mib,
              w.margin_mib] for w in risky],
            ["WORKLOAD", "HOST/GPU", "INSTANCE", "INSTANCE MiB", "PEAK MiB", "NEEDS MiB", "MARGIN MiB"]))
    left = [w for w in p.workloads if not w.on_gpu]
    if left:
        out.append("\nLeft out:\n" + grid([[w.name, w.memory_mib, w.peak_mib, w.reason] for w in left],
                                          ["WORKLOAD", "NEEDS MiB", "PEAK MiB", "REASON"]))
    below = [w for w in p.workloads if w.on_gpu and w.margin_mib is not None and w.margin_mib < 0]
    if below:
        out.append("\nBelow their observed memory peak (an out-of-memory kill at that peak):\n" + grid(
            [[w.name, f"{w.host}/{w.gpu}", w.instance or "whole GPU", w.instance_mib, w.peak_mib, w.margin_mib]
             for w in below], ["WORKLOAD", "HOST/GPU", "INSTANCE", "INSTANCE MiB", "PEAK MiB", "MARGIN MiB"]))
    out += _migration_table(p)
    s, v = p.summary, p.solve
    gap = f"{v.gap:.2%}" if v.gap is not None else "n/a"
    pct = str(p.policy.get("memory_percentile", "?"))
    stat = "max (observed peak)" if pct == "max" else pct
    least = f"{s.min_margin_mib} MiB" if s.min_margin_mib is not None else "n/a"
    out.append(
        f"\nGPUs used {s.gpus_used} of {s.gpus_planned} planned (lower bound {s.gpus_lower_bound}), "
        f"free whole GPUs {s.free_whole_gpus}, stranded slices {s.stranded_slices}\n"
        f"workloads placed {s.workloads_placed}, kept at risk {s.workloads_at_risk}, left out {s.workloads_unplaced}, "
        f"disrupted {s.workloads_disrupted}"
        + (f" (+{s.busy_disrupted} busy without a profile)" if s.busy_disrupted else "") + "\n"
        f"memory sized from {stat}, headroom {s.headroom_rule}; below peak {s.below_peak}, least margin {least}\n"
        + (f"{p.sizing.line()}\n" if p.sizing is not None else "")
        + (f"warning: {s.memory_warning}\n" if s.memory_warning else "")
        + f"GPUs changed {s.gpus_changed}, instances destroyed {s.instances_destroyed}, created {s.instances_created}\n"
        + _idle_line(p)
        + _solve_line(p, gap))
    return "\n".join(out)


FALLBACK_WARNING = ("the solver found no plan within its time limit; this is the greedy fallback: every layout "
                    "kept, nothing running moved or stopped, new demand only in idle instances it fits (checked as "
                    "any plan). Give the solver more time (--time-limit) for a plan that changes layouts.")


def _solve_line(p: Plan, gap: str) -> str:
    v = p.solve
    if v.fallback is not None:
        return (f"solver {v.solver}: {v.status} in {v.time_s:.2f}s; plan: the {v.fallback} fallback "
                "(every layout kept, nothing running moved, new demand in idle instances)")
    return f"solver {v.solver}: {v.status}, gap {gap}, {v.time_s:.2f}s"


def _spare_option(values: list[str] | None) -> dict[str, int] | None:
    """`--spare PROFILE=N` (repeatable) as the `spare` mapping; None when not given."""
    if not values:
        return None
    out: dict[str, int] = {}
    for v in values:
        key, sep, count = v.partition("=")
        if not sep or not count.strip().isdigit():
            raise typer.BadParameter(f"{v!r}: expected [MODEL/]PROFILE=N, e.g. 1g.10gb=4", param_hint="--spare")
        out[key.strip()] = int(count)
    return out


def _idle_line(p: Plan) -> str:
    """Idle instances kept and removed, and why (the spare-capacity policy), as one line."""
    s = p.summary
    try:
        rule = spare_rule(policy_from_mapping(dict(p.policy), source="plan"))
    except MigplanError:  # a plan's policy is checked when it is read: this is only the words for it
        rule = "policy as recorded in the plan"
    removed = (f"{s.idle_removed} removed ({s.idle_removed_freeing} to free whole GPUs, "
               f"{s.idle_removed - s.idle_removed_freeing} to make room)")
    return f"idle instances {s.idle_kept} kept free, {removed}; {rule}\n"


def _migration_table(p: Plan) -> list[str]:
    """The ordered migration, the GPUs it frees and (with --consolidate) GPUs freed per move budget."""
    out = []
    if p.migrations:
        rows = [[m.step, m.workload, str(m.source), str(m.target) if m.target else "(stops)",
                 "make-before-break" if m.make_before_break else "stop first", ", ".join(m.stops), m.reason]
                for m in p.migrations]
        out.append("\nMigration (in this order):\n" + grid(
            rows, ["STEP", "WORKLOAD", "FROM", "TO", "HOW", "STOPS FIRST", "WHY"]))
    if p.freed:
        shown = ", ".join(f"{h}:{i}" for h, i in p.freed[:20]) + (" ..." if len(p.freed) > 20 else "")
        out.append(f"\nGPUs freed ({len(p.freed)}): {shown}")
    c = p.consolidation
    if c is not None:
        rows = [[pt.max_moves if pt.max_moves is not None else "any", pt.moves, pt.gpus_used, pt.gpus_freed]
                for pt in c.curve]
        bound = f", at most {c.gpus_freeable} freeable (lower bound)" if c.gpus_freeable is not None else ""
        new = (f" and bring {c.gpus_newly_used} idle GPU(s) into use (net {c.gpus_freed - c.gpus_newly_used})"
               if c.gpus_newly_used else "")
        out.append(f"\nConsolidation: {c.moves} moves free {c.gpus_freed} of {c.gpus_in_use} GPUs in use{new}{bound}; "
                   "GPUs freed per move budget:\n" + grid(rows, ["MAX MOVES", "MOVES", "GPUS USED", "GPUS FREED"]))
    return out


@handle_errors
def propose(
    inventory: InventoryOpt = None,
    profiles: ProfilesOpt = None,
    output: OutputOpt = None,
    config: ConfigOpt = None,
    catalog: CatalogOpt = None,
    out: Annotated[str | None, typer.Option("--out", metavar="FILE",
                                            help="Write the plan document here (JSON).")] = None,
    report_html: Annotated[str | None, typer.Option("--report", metavar="FILE",
                                                    help="Also write the plan as one self-contained HTML page here (as "
                                                         "'migplan report').")] = None,
    snapshot: Annotated[str | None, typer.Option("--snapshot", metavar="FILE",
                                                 help="Plan from a discovery snapshot instead of the inventory's "
                                                      "layouts.")] = None,
    pods: Annotated[str | None, typer.Option("--pods", metavar="FILE|-|kubectl",
                                             help="Demand from 'kubectl get pods -A -o json' (a file, stdin, or "
                                                  "'kubectl': read live): running pods where they run, pending "
                                                  "pods as new demand, merged with --profiles "
                                                  "(docs/kubernetes.md).")] = None,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    mig_configmap: MigConfigMapOpt = None,
    solver: Annotated[str | None, typer.Option("--solver", metavar="|".join(SOLVERS), help="MILP solver "
                                               f"[default: planner.solver, else {DEFAULT_SOLVER}].")] = None,
    time_limit: Annotated[float | None, typer.Option("--time-limit", min=0.1, max=MAX_SECONDS, callback=finite,
                                                     metavar="SECONDS", help="Solver time limit [default: "
                                                     f"planner.time_limit, else {DEFAULT_TIME_LIMIT_S:g}].")] = None,
    gap: Annotated[float | None, typer.Option("--gap", min=0.0, max=0.99, callback=finite, metavar="FRACTION",
                                              help="Relative MIP gap to stop at [default: planner.gap, else "
                                                   f"{DEFAULT_GAP:g}].")] = None,
    allow_disrupt: Annotated[bool | None, typer.Option("--allow-disrupt/--no-allow-disrupt",
                                                       help="Allow moving running workloads (each move is "
                                                            "counted) [default: planner.allow_disrupt, else "
                                                            "no].")] = None,
    consolidate: Annotated[bool | None, typer.Option("--consolidate/--no-consolidate",
                                                     help="Move running workloads to free GPUs (a freed GPU is worth "
                                                          "more than a move); reports GPUs freed per move "
                                                          "budget [default: planner.consolidate, else no].")] = None,
    max_moves: Annotated[int | None, typer.Option("--max-moves", min=0, metavar="N",
                                                  help="With --consolidate: at most N running workloads change "
                                                       "instance [default: planner.max_moves, else no "
                                                       "limit].")] = None,
    keep_free: Annotated[int | None, typer.Option("--keep-free", min=0, metavar="N", help="Keep N whole GPUs free "
                                                  f"[default: planner.keep_free, else {_P.keep_free}].")] = None,
    memory_percentile: Annotated[str | None, typer.Option("--memory-percentile", metavar="|".join(PERCENTILES),
                                                          help="Memory statistic to size for: max (the observed peak) "
                                                               "or p50|p95|p99, which size below the peak and risk an "
                                                               "out-of-memory kill [default: planner.memory_percentile,"
                                                               f" else {_P.memory_percentile}].")] = None,
    compute_percentile: Annotated[str | None, typer.Option("--compute-percentile", metavar="|".join(PERCENTILES),
                                                           help="Compute statistic to size for; p99 needs compute.p99 "
                                                                "in the profiles [default: planner.compute_percentile, "
                                                                f"else {_P.compute_percentile}].")] = None,
    headroom: Annotated[float | None, typer.Option("--headroom", min=0.0, max=10.0, callback=finite,
                                                   metavar="FRACTION",
                                                   help="Memory headroom fraction; need = the larger of statistic x (1 "
                                                        "+ headroom) and statistic + --headroom-min-mib [default: "
                                                        f"planner.headroom, else {_P.headroom:.2f}].")] = None,
    sizing: Annotated[str | None, typer.Option("--sizing", metavar="RULE|auto",
                                               help="The whole memory rule, STAT[+PCT%][+Kspread][+FLOORMiB]"
                                                    "[,cap=CAPMiB], e.g. max+1spread, or auto: the rule 'backtest "
                                                    "--sweep' recommends for this fleet (docs/profiles.md); replaces "
                                                    "the other memory options [default: sizing in the config, else "
                                                    "the options below: max+10%].")] = None,
    target_oom: TargetOomOpt = None,
    sizing_history: Annotated[str | None, typer.Option("--sizing-history", metavar="PATH|FILE.csv|URL",
                                                       help="With --sizing auto: the history to calibrate from: a "
                                                            "history store, a CSV file or a Prometheus URL [default: "
                                                            "sizing.history, else none: the calibration kept in "
                                                            "--state-dir].")] = None,
    state_dir: Annotated[str | None, typer.Option("--state-dir", metavar="DIR",
                                                  help="With --sizing auto: where its calibration is kept (replan's "
                                                       "state directory) [default: replan.state_dir, else "
                                                       "/var/lib/migplan].")] = None,
    headroom_min_mib: Annotated[int | None, typer.Option("--headroom-min-mib", min=0, metavar="MIB",
                                                         help="Least memory headroom; applies even with --headroom 0; "
                                                              "0 turns it off [default: planner.headroom_min_mib, else "
                                                              f"{_P.headroom_min_mib}].")] = None,
    anti_affinity_scope: Annotated[str | None, typer.Option("--anti-affinity-scope", metavar="gpu|host",
                                                            help="Where the members of an anti-affinity group must "
                                                                 "differ [default: planner.anti_affinity_scope, else "
                                                                 f"{_P.anti_affinity_scope}].")] = None,
    reclaim_idle: Annotated[bool | None, typer.Option("--reclaim-idle/--keep-idle",
                                                      help="Let idle instances go wherever the plan gains, or keep "
                                                           "them unless removing them frees a whole GPU or makes "
                                                           "room for demand [default: planner.reclaim_idle, else "
                                                           "--keep-idle].")] = None,
    spare: Annotated[list[str] | None, typer.Option("--spare", metavar="[MODEL/]PROFILE=N",
                                                    help="Keep at least N free instances of PROFILE (of MODEL "
                                                         "only, when given), e.g. --spare 1g.10gb=4; repeatable; "
                                                         "replaces the config file's planner.spare.")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only warnings and errors on stderr (for "
                                        "cron).")] = False,
    progress: Annotated[bool | None, typer.Option("--progress/--no-progress",
                                                  help="Phases, their times and the solver's incumbent and "
                                                       "bound on stderr [default: when stderr is a terminal, "
                                                       "once the run takes over a second].",
                                                  show_default=False)] = None,
) -> None:
    """Propose a MIG layout per GPU and an instance per workload (an integer program)."""
    req = ProposeRequest(
        inventory=inventory, profiles=profiles, snapshot=snapshot, out=out, solver=solver, time_limit=time_limit,
        pods=pods, sizing=sizing,
        gap=gap, policy={"allow_disrupt": allow_disrupt, "keep_free": keep_free, "headroom": headroom,
                         "consolidate": consolidate, "max_moves": max_moves,
                         "memory_percentile": memory_percentile, "compute_percentile": compute_percentile,
                         "headroom_min_mib": headroom_min_mib, "anti_affinity_scope": anti_affinity_scope,
                         "reclaim_idle": reclaim_idle, "spare": _spare_option(spare)})
    live = KubectlOptions(kubeconfig=kubeconfig, context=context)  # -i kubectl, --pods kubectl
    from migplan.commands.sizing import AutoRequest

    auto = AutoRequest(sizing=sizing, target_oom=target_oom, history=sizing_history, state_dir=state_dir)
    with progress_reporter(quiet, progress) as rep:  # migplan/cli/progress.py: who sees what
        _propose(rep, config, catalog, output, report_html, req, live, mig_configmap, auto)


def _propose(rep: Reporter, config: str | None, catalog: list[str] | None, output: str | None,
             report_html: str | None, req: ProposeRequest, live: KubectlOptions | None = None,
             mig_configmap: str | None = None, auto: Any = None) -> None:
    ctx = build_context(config, catalog, output, live, mig_configmap)
    check_output_options((req.out, "--out", "file"), (report_html, "--report", "file"))  # before the solve
    if auto is not None:  # sizing: auto resolved into its rule (commands/sizing.py; nothing when not auto)
        import time

        from migplan.commands.sizing import prepare_propose

        req = prepare_propose(ctx, req, auto, now=time.time(), report=rep.note)
    result = run_propose(ctx, req, report=rep.note, progress=rep)
    rep.phase(WRITING)
    if report_html:  # migplan/commands/report.py
        from migplan.commands.report import write_page

        write_page(ctx, result, report_html, forbid=[req.out, req.inventory, req.profiles, req.snapshot, config,
                                                     req.pods],
                   report=rep.note)
    emit(plan_to_dict(result), ctx.output, lambda: _with_vgpu(result, ctx.catalog), ready=rep.close)
    if result.solve.fallback is not None:  # a plan, written and printed, but not the solver's: say so, exit 6
        info(f"warning: {FALLBACK_WARNING}")
        raise typer.Exit(EXIT_FALLBACK)
