"""The `migplan` program's entry point: `collect --local` without typer, everything else through app.py
(`propose` with its large profile sets already being read meanwhile: `prefetch_path`).

`migplan collect --local` runs every minute from cron or a systemd timer on every GPU host, so what a
whole process costs matters (issue 11: well under 0.2 s of CPU; bench/collect_cost.py). Typer and
the CLI module tree cost more to import than the run itself, so `main()` first tries `fast_path`: a
small argparse parser that knows exactly the options `collect --local` takes (the same names,
defaults, bounds and environment variables as migplan/cli/collect_cmd.py) and runs the same
`migplan.commands.collect.collect_local` with the same messages and exit codes.

It only takes what it fully understands. Anything else returns None and goes to typer unchanged:
`--help` anywhere, a root option (`-v`, `--version`), another mode or option (`--inventory`,
`--prometheus`, the fleet and Prometheus options, `install`), a value typer would convert in its own
way (only plain decimal numbers are read here), an unknown or malformed token, MIGPLAN_INVENTORY or
MIGPLAN_CATALOG set. So every usage error is typer's own message, and tests/test_collect_fast.py checks
that both paths print the same and exit the same on a matrix of command lines.

May import: migplan.commands.collect, migplan.catalog, migplan.errors (and migplan.commands.context
only when a config file is to be read), migplan.profiles for `propose`; never typer.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

OUTPUT_FORMATS = ("table", "json", "yaml")  # migplan.cli.options.OutputFormat
# The history store's defaults (migplan.adapters.history_store; tests/test_collect_fast.py checks they agree):
# repeated here so that parsing imports nothing but argparse.
DEFAULT_DIR = "/var/lib/migplan/history"
DEFAULT_RETENTION_DAYS = 14.0
DEFAULT_MAX_MB = 256
MAX_RETENTION_DAYS = 3660.0  # migplan.cli.options.MAX_RETENTION_DAYS (typer's bound of --retention-days)
# Environment variables of `collect` options the fast path does not read itself: typer handles these runs.
TYPER_ENV = ("MIGPLAN_INVENTORY", "MIGPLAN_CATALOG")
# Read by typer for options that do nothing with --local (checked against the command's options in the tests).
IGNORED_ENV = ("MIGPLAN_KNOWN_HOSTS", "MIGPLAN_SSH_CONFIG")
_NUMBER = "0123456789"


class _NotMine(Exception):
    """This command line is typer's to parse."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _NotMine(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise _NotMine(message or "")


def _parser() -> _Parser:
    p = _Parser(prog="migplan collect", add_help=False, allow_abbrev=False)
    p.add_argument("--local", action="store_true")
    p.add_argument("--history")
    p.add_argument("--host-name")
    p.add_argument("--retention-days")
    p.add_argument("--max-mb")
    p.add_argument("--workload-rules")
    p.add_argument("--quiet", "-q", action="store_true")
    p.add_argument("--output", "-o")
    p.add_argument("--config")
    p.add_argument("--catalog", action="append")
    return p


def _decimal(text: str, *, whole: bool = False) -> float:
    """A plain decimal number ("14", "0.5"; digits only with `whole`), the only form read here: typer reads
    the rest ("1e3", " 5", "1_000", "inf") its own way."""
    digits, dot, frac = text.partition(".")
    if not digits or any(c not in _NUMBER for c in digits + frac) or (whole and dot):
        raise _NotMine(text)
    return float(text)


def parse(argv: Sequence[str], env: Any = os.environ) -> dict[str, Any] | None:
    """The options of `collect --local ...` as collect_cmd.py receives them, or None: typer's to parse."""
    if len(argv) < 2 or argv[0] != "collect" or any(a in ("-h", "--help") for a in argv):
        return None
    if any(env.get(name) for name in TYPER_ENV):
        return None
    try:
        ns = _parser().parse_args(list(argv[1:]))
        if not ns.local:
            return None
        retention = DEFAULT_RETENTION_DAYS if ns.retention_days is None else _decimal(ns.retention_days)
        max_mb = DEFAULT_MAX_MB if ns.max_mb is None else _decimal(ns.max_mb, whole=True)
    except _NotMine:
        return None
    if not 0.01 <= retention <= MAX_RETENTION_DAYS or max_mb < 1:  # the options' bounds: typer says so
        return None
    output = ns.output if ns.output is not None else (env.get("MIGPLAN_OUTPUT") or None)
    if output is not None and output not in OUTPUT_FORMATS:
        return None
    history = ns.history if ns.history is not None else (env.get("MIGPLAN_HISTORY") or DEFAULT_DIR)
    config = ns.config if ns.config is not None else (env.get("MIGPLAN_CONFIG") or None)
    return {"history": history, "host_name": ns.host_name, "retention_days": retention, "max_mb": int(max_mb),
            "workload_rules": ns.workload_rules, "quiet": ns.quiet, "output": output, "config": config,
            "catalog": ns.catalog}


def default_config_file(env: Any = os.environ) -> str:
    """migplan.config.default_config_path() without importing it (it imports the planner)."""
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "migplan", "config.yaml")


def _echo(message: str) -> None:
    sys.stderr.write(message + "\n")
    sys.stderr.flush()


def _emit(data: Any, fmt: str, text: str) -> None:
    """migplan.cli.render.emit, which imports typer (the tests check both print the same)."""
    if fmt == "json":
        from migplan import jsontext

        sys.stdout.write(jsontext.dumps(data) + "\n")
    elif fmt == "yaml":
        import yaml

        sys.stdout.write(yaml.safe_dump(data, sort_keys=False, width=120))
    else:
        sys.stdout.write(text.rstrip("\n") + "\n")
    sys.stdout.flush()


def collect_local(opts: dict[str, Any]) -> int:
    """`migplan collect --local` with parsed options: what collect_cmd.collect and render.handle_errors do."""
    from migplan.errors import EXIT_FAILURE, MigplanError

    try:
        from migplan.commands import collect as run
        from migplan.commands import quiet

        catalog, fmt = _context(opts["config"], opts["catalog"], opts["output"])
        rules = run.load_rules(opts["workload_rules"])
        settings = run.LocalSettings(history=opts["history"], host=opts["host_name"],
                                     retention_days=opts["retention_days"], max_mb=opts["max_mb"], rules=rules)
        result = run.collect_local(settings, catalog, report=quiet if opts["quiet"] else _echo)
        if opts["quiet"]:
            return 0
        _emit(result.as_dict(), fmt,
              f"run {result.run}: {result.samples} samples ({len(result.workloads)} workloads, {result.processes} "
              f"processes, {result.gpus} GPUs) -> {result.store}")
        return 0
    except MigplanError as err:
        _echo(f"error: {err}")
        return err.exit_code
    except BrokenPipeError:
        return EXIT_FAILURE
    except OSError as err:
        where = f": {err.filename}" if err.filename else ""
        _echo(f"error: {err.strerror or err}{where}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        _echo("interrupted")
        return 130


def _context(config: str | None, catalog: list[str] | None, output: str | None) -> tuple[Any, str]:
    """The catalog and output format, as migplan.commands.context.build_context resolves them."""
    if config is not None or os.path.exists(default_config_file()):
        from migplan.commands.context import build_context  # a config file to read: the full reader

        ctx = build_context(config, catalog, output)
        return ctx.catalog, ctx.output
    from migplan.catalog import load_catalog

    return load_catalog(catalog or []), output or "table"


def fast_path(argv: Sequence[str]) -> int | None:
    """The exit code of `collect --local ...` run here, or None when typer is to run this command line."""
    opts = parse(argv)
    return None if opts is None else collect_local(opts)


def prefetch_path(argv: Sequence[str], env: Any = os.environ) -> str | None:
    """The profiles `propose` is going to read, as its command line (or MIGPLAN_PROFILES) names them; None
    for any other command line, and for `--help`. A guess is enough: `propose` takes the prefetched read
    over only when the path typer parsed is this one (migplan.profiles.prefetch)."""
    if not argv or argv[0] != "propose" or any(a in ("-h", "--help") for a in argv):
        return None
    path = None
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "--":
            break
        if a in ("-p", "--profiles") and i + 1 < len(argv):
            path = argv[i + 1]  # the last one counts, as in click
            i += 1
        elif a.startswith("--profiles="):
            path = a.partition("=")[2]
        i += 1
    if path is None:
        path = env.get("MIGPLAN_PROFILES")
    return path or None


class _NamedStdout:
    """sys.stdout whose write errors say what failed: `cannot write standard output: File too large` (a `> file`
    under `ulimit -f`, a full disk), not a bare `File too large`; a closed pipe stays the BrokenPipeError it is
    (the reader left: nothing to report). Everything else is the real stream's."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def _named(self, err: OSError) -> OSError:
        from migplan.files import named_oserror

        return named_oserror(err, "cannot write", "standard output")

    def write(self, text: str) -> int:
        try:
            return int(self._inner.write(text))
        except BrokenPipeError:
            raise
        except OSError as err:
            raise self._named(err) from None

    def flush(self) -> None:
        try:
            self._inner.flush()
        except BrokenPipeError:
            raise
        except OSError as err:
            raise self._named(err) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _flush_stdout() -> None:
    """Flush what the command printed while its exit code can still say so: at interpreter exit a failed flush is
    only "Exception ignored" and exit 120. On failure: one error line, exit 1, and stdout pointed at /dev/null so
    the buffered rest is dropped quietly at exit."""
    try:
        sys.stdout.flush()
    except OSError as err:
        if not isinstance(err, BrokenPipeError):
            _echo(f"error: {err.strerror or err}")
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        sys.exit(1)  # EXIT_FAILURE (migplan.errors), not imported here for one constant


def main() -> None:
    """The console script (`migplan = "migplan.cli.entry:main"`); migplan.cli.app.main() is the same."""
    real_stdout = sys.stdout
    sys.stdout = _NamedStdout(real_stdout)  # both paths: a failed write to stdout names it (_NamedStdout)
    try:
        _main()
    finally:
        try:
            _flush_stdout()
        finally:
            sys.stdout = real_stdout  # flushed: a caller in this process (a test) gets its own stream back


def _main() -> None:
    code = fast_path(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    # `propose` on a large fleet: its profiles are read by worker processes from here on, while typer and
    # the command modules load (~0.2 s, one CPU idle otherwise; bench/large_inputs.py)
    early = prefetch_path(sys.argv[1:])
    if early is not None:
        from migplan import profiles

        profiles.prefetch(early)
    from migplan.cli.app import app

    try:
        app()
    finally:
        if early is not None:
            profiles.drop_prefetched()  # a command line that failed before reading them
        # The process is about to exit: its final full garbage collection would only walk and free what
        # the OS takes back anyway (0.11 s after a 7,000-GPU plan, bench/results/startup-large.md).
        # Frozen objects are skipped by it; atexit handlers and weakref finalizers still run.
        import gc

        gc.freeze()
