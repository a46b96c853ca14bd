"""`migplan report PLAN [--out plan.html]`: the plan as one self-contained HTML page (docs/report.md).

Exit codes: 0 written, 2 the plan file does not validate (or --out names the plan itself)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from migplan.cli.options import CatalogOpt, ConfigOpt
from migplan.cli.render import handle_errors, info
from migplan.commands.context import build_context
from migplan.commands.report import report as run_report


@handle_errors
def report(
    plan: Annotated[str, typer.Argument(help="Plan document written by 'migplan propose --out'.", metavar="PLAN")],
    out: Annotated[str | None, typer.Option("--out", help="Write the page here [default: stdout].",
                                            show_default=False, metavar="FILE")] = None,
    title: Annotated[str | None, typer.Option("--title", help="Page title [default: the plan's path].",
                                              show_default=False, metavar="TITLE")] = None,
    snapshot: Annotated[str | None, typer.Option(
        "--snapshot", metavar="FILE", show_default=False,
        help="Discovery snapshot whose GPU instance ids make the destroy commands exact [default: the plan's own "
             "snapshot, when it was made from one].")] = None,
    config: ConfigOpt = None,
    catalog: CatalogOpt = None,
) -> None:
    """Write a plan as one self-contained HTML page: every GPU's layout drawn slot by slot."""
    ctx = build_context(config, catalog, None)
    page = run_report(ctx, plan, out, title=title, snapshot=snapshot, report=info)
    if out:
        info(f"report written to {out}")
    else:
        sys.stdout.write(page)
