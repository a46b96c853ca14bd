"""`migplan report` and `propose --report`: the plan as one self-contained HTML page (migplan.report_html)."""

from __future__ import annotations

from collections.abc import Iterable

from migplan import documents
from migplan.commands import Report, quiet
from migplan.commands.context import Context
from migplan.files import write_atomic
from migplan.planner import Plan
from migplan.report_html import render


def plan_page(ctx: Context, plan: Plan, *, title: str | None = None) -> str:
    return render(plan, ctx.catalog, title=title or "migplan plan")


def write_page(ctx: Context, plan: Plan, out: str, *, forbid: Iterable[str | None] = (), title: str | None = None,
               report: Report = quiet) -> None:
    """`propose --report`: write the page atomically; `forbid`: the files this run reads or writes
    (the report never overwrites one of them)."""
    write_atomic(out, plan_page(ctx, plan, title=title), forbid=[f for f in forbid if f])
    report(f"report written to {out}")


def report(ctx: Context, plan_path: str, out: str | None = None, *, title: str | None = None) -> str:
    """The page of a plan file (validated as strictly as `apply` reads it); written to `out` when given."""
    plan = documents.load_plan(plan_path, ctx.catalog)
    page = plan_page(ctx, plan, title=title or f"migplan plan {plan_path}")
    if out:
        write_atomic(out, page, forbid=[plan_path])
    return page
