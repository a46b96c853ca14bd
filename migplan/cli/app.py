"""The `migplan` command: wires the command groups together and owns the one exit path."""

from __future__ import annotations

import logging
from typing import Annotated

import typer

from migplan import __version__
from migplan.cli import apply_cmd, catalog_cmd, fleet, inventory_cmd, profiles_cmd, propose
from migplan.text import printable

app = typer.Typer(
    name="migplan",
    help="Right-size every GPU in a fleet with MIG: collect, propose, apply, replan.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(catalog_cmd.app, name="catalog")
app.add_typer(inventory_cmd.app, name="inventory")
app.add_typer(profiles_cmd.app, name="profiles")
# Command modules register here, one line each.
app.command("propose")(propose.propose)
app.command("apply")(apply_cmd.apply)
fleet.register(app)  # discover, status, catalog learn


def _version(value: bool) -> None:
    if value:
        typer.echo(f"migplan {__version__}")
        raise typer.Exit()


class _Debug(logging.Handler):
    """--verbose: migplan's debug log (commands run, SSH details, paramiko's own lines) on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        typer.echo(f"debug: {record.name}: {printable(record.getMessage(), 2000)}", err=True)
        if record.exc_info:  # an unexpected error: the traceback a bug report needs
            typer.echo(printable(logging.Formatter().formatException(record.exc_info), 20000, multiline=True),
                       err=True)


@app.callback()
def root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Print debug details on stderr (commands run, "
                                          "SSH negotiation).")] = False,
) -> None:
    """migplan: plan MIG layouts for a GPU fleet."""
    if verbose:
        logger = logging.getLogger("migplan")
        if not any(isinstance(h, _Debug) for h in logger.handlers):
            logger.addHandler(_Debug(logging.DEBUG))
        logger.setLevel(logging.DEBUG)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
