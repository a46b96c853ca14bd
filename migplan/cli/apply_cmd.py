"""`migplan apply PLAN`: turn each GPU from its current into its planned layout over SSH.

Without `--yes`, apply first shows the commands it would run (a dry run from the same code path) and
asks on a terminal; without a terminal it refuses. `--last` (no PLAN) re-applies, on this machine, the layout
applied here last (`<state dir>/last-applied.json`; a boot unit runs it, docs/apply.md). The work is
`migplan.commands.apply`.
"""

from __future__ import annotations

import dataclasses
import sys
from enum import Enum
from typing import Annotated, Any

import typer

from migplan.adapters.kubectl import KubectlOptions
from migplan.cli.k8s_options import (
    DEFAULT_CONFIGMAP,
    DEFAULT_NAMESPACE,
    DEFAULT_SETTLE_S,
    DEFAULT_TIMEOUT_S,
    ConfigMapOpt,
    ContextOpt,
    Drain,
    DrainOpt,
    KubeconfigOpt,
    MigTimeoutOpt,
    NamespaceOpt,
    SettleOpt,
    Via,
    ViaOpt,
)
from migplan.cli.options import (
    MAX_AGE_HOURS,
    CatalogOpt,
    ConfigOpt,
    FleetOptions,
    InventoryOpt,
    choices,
    finite,
    fleet_options,
)
from migplan.cli.render import emit, grid, handle_errors, info
from migplan.commands.apply import DEFAULT_MAX_AGE_H, ApplyRequest, ApplyResult, LastRequest, apply_last
from migplan.commands.apply import apply as run_apply
from migplan.commands.context import build_context
from migplan.commands.gpu_operator import GpuOperatorRequest, GpuOperatorResult, apply_gpu_operator
from migplan.errors import InputError
from migplan.files import check_ancestors, check_output_options
from migplan.text import printable


class ApplyOutput(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"
    sh = "sh"


def _table(result: ApplyResult) -> str:
    rows: list[list[Any]] = []
    for h in result.hosts:
        if h.error:
            rows.append([h.host, "-", "FAILED", printable(h.error, 200)])
        for g in h.gpus:
            rows.append([h.host, g.gpu, g.outcome.value, printable(g.reason, 400) or "; ".join(g.commands)])
        for m in h.moves:
            rows.append([h.host, ",".join(map(str, m["gpus"])), f"move {m['phase']}",
                         printable(f"{m['workload']}: {m['old_instance']} ({m['old_device'] or '-'}) -> "
                                   f"{m['new_instance'] or '-'} ({m['new_device'] or '-'})", 300)])
    head = "DRY RUN: nothing was changed\n\n" if result.dry_run else ""
    return head + grid(rows, ["HOST", "GPU", "RESULT", "DETAIL"])


def _script(result: ApplyResult) -> str:
    """A reviewable shell script: per host, the exact commands in order (run through ssh by the reader)."""
    lines = ["#!/bin/sh", f"# migplan apply --dry-run of plan {result.plan_fingerprint}", "set -eu"]
    for h in result.hosts:
        lines.append(f"\n# host {h.host}" + (f": {printable(h.error, 200)}" if h.error else ""))
        lines += [f"# {h.host}: {c}" if not c.startswith("nvidia-smi") else c for c in h.commands]
    return "\n".join(lines) + "\n"


@handle_errors
@fleet_options()
def apply(
    plan: Annotated[str | None, typer.Argument(help="Plan document written by 'migplan propose --out'.",
                                               show_default=False, metavar="PLAN")] = None,
    inventory: InventoryOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the commands, change nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Apply without asking.")] = False,
    allow_disrupt: Annotated[bool, typer.Option("--allow-disrupt", help="Allow destroying instances with "
                                                "running processes.")] = False,
    fail_fast: Annotated[bool, typer.Option("--fail-fast", help="Start no further host once one fails.")] = False,
    force_stale: Annotated[bool, typer.Option("--force-stale", help="Apply a plan older than --max-age.")] = False,
    max_age: Annotated[float, typer.Option("--max-age", min=0.0, max=MAX_AGE_HOURS, callback=finite,
                                           metavar="HOURS", help="Hours a plan stays fresh.")] = DEFAULT_MAX_AGE_H,
    journal: Annotated[str | None, typer.Option("--journal", help="Append every command, its output and the "
                                                "checkpoints here (JSON lines).", show_default=False,
                                                metavar="FILE")] = None,
    output: Annotated[ApplyOutput | None, typer.Option("-o", "--output", help="table, json, yaml, or sh (the "
                                                       "dry run as a shell script) [default: the config file's "
                                                       "output, else table].", show_default=False,
                                                       metavar=choices(ApplyOutput))] = None,
    last: Annotated[bool, typer.Option("--last", help="Re-apply, on this machine, the layout applied here last "
                                       "(at boot: MIG instances do not survive a reboot).")] = False,
    state_dir: Annotated[str | None, typer.Option("--state-dir", help="With --last: the host's state directory "
                                                  "[default: /etc/migplan]. With a PLAN: where the fleet's "
                                                  "assignments map is written locally [default: next to PLAN].",
                                                  show_default=False, metavar="DIR")] = None,
    lock_file: Annotated[str | None, typer.Option("--lock-file", help="With --last: the apply lock "
                                                  "[default: /run/lock/migplan-apply.lock].",
                                                  show_default=False, metavar="FILE")] = None,
    host_name: Annotated[str | None, typer.Option("--host-name", help="With --last: the name this machine "
                                                  "has in the inventory, when it is not its host name "
                                                  "[default: this machine's name].", show_default=False,
                                                  metavar="NAME")] = None,
    via: ViaOpt = Via.ssh,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    configmap: ConfigMapOpt = DEFAULT_CONFIGMAP,
    namespace: NamespaceOpt = DEFAULT_NAMESPACE,
    drain: DrainOpt = Drain.when_busy,
    mig_timeout: MigTimeoutOpt = DEFAULT_TIMEOUT_S,
    configmap_settle: SettleOpt = DEFAULT_SETTLE_S,
    config: ConfigOpt = None,
    catalog: CatalogOpt = None,
    *,
    fleet: FleetOptions,
) -> None:
    """Apply a plan: only what changes, at explicit placements, verified, rolled back on failure."""
    fmt = output.value if output is not None else None
    ctx = build_context(config, catalog, None if fmt == "sh" else fmt)
    if via is Via.gpu_operator:
        if last or plan is None or inventory is not None:
            raise InputError("--via gpu-operator applies a PLAN to the cluster's nodes, read live through kubectl",
                             hint="give a PLAN, and no --last or --inventory")
        check_output_options((journal, "--journal", "file"))
        greq = GpuOperatorRequest(
            plan=plan, kubectl=KubectlOptions(kubeconfig=kubeconfig, context=context, request_timeout=fleet.timeout),
            configmap=configmap, namespace=namespace, limit=tuple(fleet.limit) if fleet.limit else None,
            dry_run=dry_run or fmt == "sh", allow_disrupt=allow_disrupt, drain=drain.value, timeout=mig_timeout,
            settle_s=configmap_settle, force_stale=force_stale, max_age_h=max_age, journal=journal)
        if not greq.dry_run and not yes:
            if not sys.stdin.isatty():
                raise InputError("apply changes GPUs and asks first, but there is no terminal to ask on",
                                 hint="review with --dry-run, then pass --yes")
            shown = apply_gpu_operator(ctx, dataclasses.replace(greq, dry_run=True), report=info)
            typer.echo(_k8s_script(shown), err=True)
            if not typer.confirm("apply these changes?", default=False, err=True):
                raise typer.Exit(1)
        _emit_k8s(ctx, fmt, apply_gpu_operator(ctx, greq, report=info))
        return
    if not last:  # options that only --last reads: refused rather than silently ignored
        for value, option in ((host_name, "--host-name"), (lock_file, "--lock-file")):
            if value is not None:
                raise InputError(f"{option} is only for --last (re-applying this machine's last layout); a PLAN "
                                 "is applied to the hosts it names", hint=f"drop {option}, or pass --last and no PLAN")
    # before any host is touched (migplan.files.check_output_option)
    check_output_options((journal, "--journal", "file"), (lock_file, "--lock-file", "file"),
                         (state_dir, "--state-dir", "dir"))
    if last or plan is None:
        if plan is not None or not last:
            raise InputError("give a PLAN to apply, or --last (and no PLAN) to re-apply this host's last layout")
        lreq = LastRequest(dry_run=dry_run or fmt == "sh", allow_disrupt=allow_disrupt, journal=journal,
                           timeout=fleet.request(inventory).timeout, host_name=host_name,
                           **{k: v for k, v in (("state_dir", state_dir), ("lock_file", lock_file)) if v is not None})
        # at boot, as root: no other user may swap a directory above the lock (the state dir's own check covers it)
        check_ancestors(lreq.lock_file, "--lock-file")
        _emit(ctx, fmt, apply_last(ctx, lreq, report=info))
        return
    req = ApplyRequest(plan=plan, fleet=fleet.request(inventory), dry_run=dry_run or fmt == "sh",
                       allow_disrupt=allow_disrupt, fail_fast=fail_fast, force_stale=force_stale, max_age_h=max_age,
                       journal=journal, state_dir=state_dir)
    if not req.dry_run and not yes:
        if not sys.stdin.isatty():
            raise InputError("apply changes GPUs and asks first, but there is no terminal to ask on",
                             hint="review with --dry-run, then pass --yes")
        preview = run_apply(ctx, dataclasses.replace(req, dry_run=True), report=info)
        typer.echo(_script(preview), err=True)
        if not typer.confirm("apply these changes?", default=False, err=True):
            raise typer.Exit(1)
    _emit(ctx, fmt, run_apply(ctx, req, report=info))


def _k8s_script(result: GpuOperatorResult) -> str:
    """The kubectl commands in order, one per line, as a shell script a person can read and paste."""
    lines = ["#!/bin/sh", f"# migplan apply --via gpu-operator --dry-run of plan {result.apply.plan_fingerprint}",
             "set -eu", *result.commands]
    return "\n".join(lines) + "\n"


def _emit_k8s(ctx: Any, fmt: str | None, result: GpuOperatorResult) -> None:
    if fmt == "sh":
        sys.stdout.write(_k8s_script(result))
    else:
        cm = result.configmap
        note = (f"ConfigMap {cm['namespace']}/{cm['name']}: "
                + (f"configs added: {', '.join(cm.get('added') or ()) or 'none'}" if cm.get("written") or
                   result.dry_run else "unchanged") + "\n")

        def table() -> str:
            text = note + "\n" + _table(result.apply)
            if result.dry_run and result.commands:
                text += "\n\n" + _k8s_script(result)
            return text

        emit(result.to_dict(), ctx.output, table)
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def _emit(ctx: Any, fmt: str | None, result: ApplyResult) -> None:
    if fmt == "sh":
        sys.stdout.write(_script(result))
    else:
        emit(result.to_dict(), ctx.output, lambda: _table(result))
    if result.exit_code:
        raise typer.Exit(result.exit_code)
