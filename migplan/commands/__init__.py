"""What each command does, as plain functions: settings in, results out, progress through a callback.

The typer modules in `migplan.cli` only parse options, call one function here and render what it
returns; a cron-driven `replan` (or any other caller) uses the same functions without typer.

  context.py   Context: the config file, the catalog and the output format, resolved once
  propose.py   policy and solver settings merged (flag > config > default), state chosen
               (snapshot or inventory), the plan made and written
  fleet.py     host selection, discovery, status and catalog learning over SSH
  results.py   per-host outcomes (ok, partial, failed) and the exit code they add up to

May import everything in migplan except `migplan.cli`; never typer.
"""

from collections.abc import Callable

DEFAULT_PARALLEL = 8  # hosts contacted at the same time (light to import: the CLI reads it for --help)

Report = Callable[[str], None]
"""Progress and notes for people (one line each); the CLI prints them on stderr."""


def quiet(_message: str) -> None:
    """A `Report` that drops everything."""
