"""`migplan apply PLAN`: turn each GPU from its current into its planned layout over SSH.

Without `--yes`, apply first shows the commands it would run (a dry run from the same code path) and
asks on a terminal; without a terminal it refuses. The work is `migplan.commands.apply`.
"""

from __future__ import annotations

import dataclasses
import sys
from enum import Enum
from typing import Annotated, Any, Optional

import typer

from migplan.cli.options import CatalogOpt, ConfigOpt, FleetOptions, InventoryOpt, fleet_options
from migplan.cli.render import emit, grid, handle_errors, info
from migplan.commands.apply import DEFAULT_MAX_AGE_H, ApplyRequest, ApplyResult
from migplan.commands.apply import apply as run_apply
from migplan.commands.context import build_context
from migplan.errors import InputError
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
            rows.append([h.host, g.gpu, g.outcome.value, printable(g.reason, 200) or "; ".join(g.commands)])
    head = "DRY RUN: nothing was changed\n\n" if result.dry_run else ""
    return head + grid(rows, ["HOST", "GPU", "RESULT", "DETAIL"])


def _script(result: ApplyResult) -> str:
    """A reviewable shell script: per host, the exact commands in order (run through ssh by the reader)."""
    lines = ["#!/bin/sh", f"# migplan apply --dry-run of plan {result.plan.fingerprint}", "set -eu"]
    for h in result.hosts:
        lines.append(f"\n# host {h.host}" + (f": {printable(h.error, 200)}" if h.error else ""))
        lines += [f"# {h.host}: {c}" if not c.startswith("nvidia-smi") else c for c in h.commands]
    return "\n".join(lines) + "\n"


@handle_errors
@fleet_options()
def apply(
    plan: Annotated[str, typer.Argument(help="Plan document written by 'migplan propose --out'.")],
    inventory: InventoryOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the commands, change nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Apply without asking.")] = False,
    allow_disrupt: Annotated[bool, typer.Option("--allow-disrupt", help="Allow destroying instances with "
                                                "running processes.")] = False,
    fail_fast: Annotated[bool, typer.Option("--fail-fast", help="Start no further host once one fails.")] = False,
    force_stale: Annotated[bool, typer.Option("--force-stale", help="Apply a plan older than --max-age.")] = False,
    max_age: Annotated[float, typer.Option("--max-age", min=0.0, help="Hours a plan stays fresh.")] = DEFAULT_MAX_AGE_H,
    journal: Annotated[Optional[str], typer.Option("--journal", help="Append every command, its output and the "  # noqa: UP045
                                                   "checkpoints here (JSON lines).", show_default=False)] = None,
    output: Annotated[Optional[ApplyOutput], typer.Option("-o", "--output", help="table, json, yaml, or sh (the "  # noqa: UP045
                                                          "dry run as a shell script).", show_default=False)] = None,
    config: ConfigOpt = None,
    catalog: CatalogOpt = None,
    *,
    fleet: FleetOptions,
) -> None:
    """Apply a plan: only what changes, at explicit placements, verified, rolled back on failure."""
    fmt = output.value if output is not None else None
    ctx = build_context(config, catalog, None if fmt == "sh" else fmt)
    req = ApplyRequest(plan=plan, fleet=fleet.request(inventory), dry_run=dry_run or fmt == "sh",
                       allow_disrupt=allow_disrupt, fail_fast=fail_fast, force_stale=force_stale, max_age_h=max_age,
                       journal=journal)
    if not req.dry_run and not yes:
        if not sys.stdin.isatty():
            raise InputError("apply changes GPUs and asks first, but there is no terminal to ask on",
                             hint="review with --dry-run, then pass --yes")
        preview = run_apply(ctx, dataclasses.replace(req, dry_run=True), report=info)
        typer.echo(_script(preview), err=True)
        if not typer.confirm("apply these changes?", default=False, err=True):
            raise typer.Exit(1)
    result = run_apply(ctx, req, report=info)
    if fmt == "sh":
        sys.stdout.write(_script(result))
    else:
        emit(result.to_dict(), ctx.output, lambda: _table(result))
    if result.exit_code:
        raise typer.Exit(result.exit_code)
