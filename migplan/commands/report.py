"""`migplan report` and `propose --report`: the plan as one self-contained HTML page (migplan.report_html).

The page's destroy commands need each instance's live GPU instance id, which a plan does not carry. A plan made
from a discovery snapshot names it (`source: snapshot:PATH`); when that snapshot (or the one `--snapshot` names) is
still readable and records exactly the state the plan was made from (the same fingerprint), its ids make the
commands exact, as `apply --dry-run` would read them on the host; otherwise the page names the instances."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from migplan import documents
from migplan.commands import Report, quiet
from migplan.commands.context import Context
from migplan.errors import InputError, MigplanError
from migplan.files import write_atomic
from migplan.planner import Plan
from migplan.report_html import GiIds, render

SNAPSHOT_SOURCE = "snapshot:"


def source_snapshot(plan: Plan) -> str | None:
    """The snapshot the plan was made from (its `source`), if it was."""
    return plan.source[len(SNAPSHOT_SOURCE):] if plan.source.startswith(SNAPSHOT_SOURCE) else None


def snapshot_gi_ids(ctx: Context, plan: Plan, snapshot: str | None = None,
                    report: Report = quiet) -> tuple[GiIds | None, str]:
    """(GPU instance ids per GPU, the snapshot they are from) or (None, "") when no snapshot of the plan's state is
    at hand. `snapshot`: the one to read (an error when it cannot be read or is of another state); default the
    plan's own source, when it is a snapshot (a note when it is gone or changed)."""
    path = snapshot or source_snapshot(plan)
    if not path:
        return None, ""
    try:
        if not os.path.isfile(path):
            raise InputError(f"{path}: no such file")
        snap = documents.load_snapshot(Path(path), ctx.catalog)
        state = snap.fleet_state(source=SNAPSHOT_SOURCE + path, catalog=ctx.catalog)
        if state.fingerprint() != plan.fingerprint:
            raise InputError(f"{path}: not the state this plan was made from (fingerprint {state.fingerprint()[:19]},"
                             f" the plan's {plan.fingerprint[:19]})")
    except MigplanError as err:
        if snapshot:
            raise
        report(f"note: the destroy steps name their instances; their GPU instance ids are not known ({err})")
        return None, ""
    ids = {(h.name, g.index): {i.instance: i.gi_id for i in g.instances if i.gi_id is not None}
           for h in snap.hosts if h.ok for g in h.gpus}
    return ids, path


def plan_page(ctx: Context, plan: Plan, *, title: str | None = None, snapshot: str | None = None,
              report: Report = quiet) -> str:
    ids, where = snapshot_gi_ids(ctx, plan, snapshot, report)
    return render(plan, ctx.catalog, title=title or "migplan plan", gi_ids=ids, ids_from=where)


def write_page(ctx: Context, plan: Plan, out: str, *, forbid: Iterable[str | None] = (), title: str | None = None,
               report: Report = quiet) -> None:
    """`propose --report`: write the page atomically; `forbid`: the files this run reads or writes
    (the report never overwrites one of them)."""
    write_atomic(out, plan_page(ctx, plan, title=title, report=report), forbid=[f for f in forbid if f])
    report(f"report written to {out}")


def report(ctx: Context, plan_path: str, out: str | None = None, *, title: str | None = None,
           snapshot: str | None = None, report: Report = quiet) -> str:
    """The page of a plan file (validated as strictly as `apply` reads it); written to `out` when given.
    `snapshot`: the discovery snapshot whose GPU instance ids make the destroy commands exact (default: the
    plan's source, when it is one)."""
    plan = documents.load_plan(plan_path, ctx.catalog)
    page = plan_page(ctx, plan, title=title or f"migplan plan {plan_path}", snapshot=snapshot, report=report)
    if out:
        write_atomic(out, page, forbid=[f for f in (plan_path, snapshot, source_snapshot(plan)) if f])
    return page
