"""Rendering: data to stdout as a table, JSON or YAML; messages and progress to stderr."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import typer

from migplan.errors import EXIT_FAILURE, EXIT_USAGE, MigplanError
from migplan.text import printable

F = TypeVar("F", bound=Callable[..., Any])


def emit(data: Any, fmt: str, table: Callable[[], str], ready: Callable[[], None] | None = None) -> None:
    """Print `data` as JSON/YAML, or the text `table()` builds, on stdout; `ready` is called once the text is
    made, before it is written (a live progress line on the same terminal is cleared there)."""
    if fmt == "json":
        import json

        text = json.dumps(data, indent=2) + "\n"
    elif fmt == "yaml":
        import yaml  # imported when used: start-up time of every command counts

        text = yaml.safe_dump(data, sort_keys=False, width=120)
    else:
        text = table().rstrip("\n") + "\n"
    if ready is not None:
        ready()
    sys.stdout.write(text)


def grid(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str:
    """tabulate's "simple" table of `rows`. Large tables of plain cells (a 200,000-workload profiles import, a
    7,000-GPU plan) are laid out by `_plain_grid`, the same text at a tenth of tabulate's cost (its per-cell type
    and width inference was a fifth of such an import); anything else goes to tabulate itself."""
    if len(rows) >= _PLAIN_GRID_MIN_ROWS:
        text = _plain_grid(rows, headers)
        if text is not None:
            return text
    from tabulate import tabulate

    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


_PLAIN_GRID_MIN_ROWS = 200  # below this tabulate's cost does not matter


def _plain(c: str) -> bool:
    """Printable ASCII without surrounding blanks (tabulate strips them): one pass of str's C methods each."""
    return c.isascii() and c.isprintable() and (not c or (c[0] != " " and c[-1] != " "))


def _plain_grid(rows: Sequence[Sequence[Any]], headers: Sequence[str]) -> str | None:
    """tabulate(rows, headers, tablefmt="simple", disable_numparse=True) byte for byte, for rows as long as the
    headers whose cells are plain printable ASCII strings, ints or None (tests/test_render_grid.py compares the
    two on random tables); None for anything else."""
    n = len(headers)
    if not all(type(h) is str and _plain(h) for h in headers):
        return None
    table: list[list[str]] = []
    for row in rows:
        if len(row) != n:
            return None
        cells: list[str] = []
        for c in row:
            t = type(c)
            if t is str:
                if not _plain(c):
                    return None
                cells.append(c)
            elif t is int:
                cells.append(str(c))
            elif c is None:
                cells.append("")
            else:
                return None
        table.append(cells)
    widths = [len(h) + 2 for h in headers]
    for cells in table:
        for i, c in enumerate(cells):
            if len(c) > widths[i]:
                widths[i] = len(c)
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip() for cells in table]
    return "\n".join(lines)


def info(message: str) -> None:
    """Progress and notes for people: stderr, never mixed into data."""
    typer.echo(message, err=True)


def handle_errors(fn: F) -> F:
    """Map migplan's errors to a message on stderr and exit 1 (failure) or 2 (input); no traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MigplanError as err:
            typer.echo(f"error: {err}", err=True)
            raise typer.Exit(err.exit_code) from None
        except BrokenPipeError:  # `migplan ... | head`: the reader left; nothing to report
            raise typer.Exit(EXIT_FAILURE) from None
        except OSError as err:
            # A file we were asked to read or write (--out on a read-only path, a full disk): say which.
            where = f": {err.filename}" if err.filename else ""
            typer.echo(f"error: {err.strerror or err}{where}", err=True)
            raise typer.Exit(EXIT_FAILURE) from None
        except KeyboardInterrupt:
            typer.echo("interrupted", err=True)
            raise typer.Exit(130) from None

    return wrapper  # type: ignore[return-value]  # wraps(fn) keeps fn's signature: an F


__all__ = ["EXIT_FAILURE", "EXIT_USAGE", "emit", "grid", "handle_errors", "info"]


def finish_hosts(outcomes: Sequence[Any]) -> None:
    """Per-host failures on stderr (message and hint), then exit with the code the outcomes add up to
    (`migplan.commands.results.exit_code`): the fleet commands' one ending."""
    from migplan.commands.results import Outcome, exit_code

    failed = [o for o in outcomes if o.outcome is not Outcome.OK]
    if failed:
        info(f"{len(failed)} of {len(outcomes)} host(s) failed:")
        for o in failed:
            info(f"  {o.host}: {printable(o.message or '', 400)}"
                 + (f"\n    hint: {printable(o.hint, 400)}" if o.hint else ""))
    code = exit_code(outcomes)
    if code:
        raise typer.Exit(code)
