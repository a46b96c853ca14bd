"""The `migplan` command: wires the command groups together and owns the one exit path."""

from __future__ import annotations

from typing import Annotated

import typer

from migplan import __version__
from migplan.cli import catalog_cmd, fleet, inventory_cmd, profiles_cmd, propose

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
fleet.register(app)  # discover, status, catalog learn


def _version(value: bool) -> None:
    if value:
        typer.echo(f"migplan {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """migplan: plan MIG layouts for a GPU fleet."""


def main() -> None:
    app()


if __name__ == "__main__":
    main()
