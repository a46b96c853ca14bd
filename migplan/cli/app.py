"""The `migplan` command: wires the command groups together and owns the one exit path.

Commands are registered lazily: a command's module (and what it imports: the planner, PuLP,
paramiko, tabulate, YAML) is imported only when that command runs or its own `--help` is asked
for, so `migplan --help` and every command start fast (measured by bench/startup.py).

HOW TO REGISTER A COMMAND: add ONE line to `COMMANDS` below,

    "NAME": ("migplan.cli.MODULE:ATTRIBUTE", "One-line help, as `migplan --help` lists it."),

where ATTRIBUTE is a typer command function (written and decorated as usual, e.g. `@handle_errors`)
or a `typer.Typer()` app for a command group. A NAME with a space adds a command to a group:
"catalog learn", "profiles build". The help text is the first paragraph of the command's docstring
(or the group's help=); tests/test_cli_foundation.py checks that the two agree. Registering eagerly
with `app.command("x")(fn)` still works, but imports `fn`'s module on every run.

Help is plain text, not rich markup (issue 25): with typer's rich markup every bracketed text in a help string
("[default: ...]", "STAT[+PCT%]") was read as a style tag and vanished, and long values were cut with "…".
Arguments show as their metavar in capitals (`PLAN`, `[PLAN]`, `PROFILE@START...`, see `_Command`), and the
completion options stay on `migplan` itself. tests/test_help_texts.py renders every command's help and checks.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
from collections.abc import Iterator
from typing import Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup
from typer.main import get_command, get_group_from_info
from typer.models import TyperInfo

from migplan import __version__
from migplan.cli.console import named_stdout
from migplan.text import printable

COMMANDS: dict[str, tuple[str, str]] = {
    "propose": ("migplan.cli.propose:propose",
                "Propose a MIG layout per GPU and an instance per workload (an integer program)."),
    "apply": ("migplan.cli.apply_cmd:apply",
              "Apply a plan: only what changes, at explicit placements, verified, rolled back on failure."),
    "discover": ("migplan.cli.fleet:discover",
                 "Read every host's GPUs, MIG mode, instances and processes over SSH; write a snapshot."),
    "status": ("migplan.cli.fleet:status", "Per host and GPU: layout, busy instances, pending MIG mode changes, "
               "differences from the inventory."),
    "catalog": ("migplan.cli.catalog_cmd:app", "GPU models, their MIG profiles and valid layouts."),
    "catalog learn": ("migplan.cli.fleet:learn",
                      "Learn a GPU model from a host ('nvidia-smi mig -lgip/-lgipp') as a catalog override file."),
    "inventory": ("migplan.cli.inventory_cmd:app", "The fleet inventory."),
    "profiles": ("migplan.cli.profiles_cmd:app", "Workload profiles."),
    "backtest": ("migplan.cli.backtest_cmd:backtest",
                 "Backtest sizing rules: size from a training window, replay the next, count OOMs and waste."),
    "replan": ("migplan.cli.replan_cmd:replan",
               "Re-plan from cron: read the live state, plan, apply only when worth it and safe, record why."),
    "schedule": ("migplan.cli.replan_cmd:schedule_app",
                 "Run replan on a schedule (cron or a systemd timer); restore layouts at boot."),
    "report": ("migplan.cli.report_cmd:report",
               "Write a plan as one self-contained HTML page: every GPU's layout drawn slot by slot."),
    "collect": ("migplan.cli.collect_cmd:app",
                "Collect workload memory and compute samples: NVML on this host, the fleet over SSH, or Prometheus."),
    "export": ("migplan.cli.export_cmd:app",
               "Export a plan to NVIDIA's MIG tools (the GPU Operator's MIG manager, mig-parted), to Slurm or, for VMs "
               "on vGPU, to vSphere."),
}


def load(path: str) -> Any:
    """The object a registered command names ("module:attribute"), importing its module."""
    module, _, attr = path.partition(":")
    return getattr(importlib.import_module(module), attr)


class _LazyGroup(TyperGroup):
    """A command group whose `COMMANDS` entries are imported when they run.

    `--help` lists them from their registered help text without importing them; resolving a command
    name (running it, or its own `--help`) imports it and builds its click command as typer would."""

    prefix = ""  # "" for `migplan` itself, "catalog " for the `catalog` group, ...

    def _entries(self) -> dict[str, tuple[str, str]]:
        n = len(self.prefix)
        return {k[n:]: v for k, v in COMMANDS.items() if k.startswith(self.prefix) and " " not in k[n:]}

    def _load(self, name: str) -> Any:  # a click command or group
        target = load(self._entries()[name][0])
        if isinstance(target, typer.Typer):
            _plain_help(target)
            group = get_group_from_info(
                TyperInfo(target, name=name, cls=_LazyGroup if _default_cls(target) else None),
                pretty_exceptions_short=target.pretty_exceptions_short, suggest_commands=target.suggest_commands,
                rich_markup_mode=None)
            if isinstance(group, _LazyGroup):
                group.prefix = f"{self.prefix}{name} "
            return group
        single = typer.Typer(add_completion=False, rich_markup_mode=None)  # completion: on `migplan` only
        single.command(name, cls=_Command)(target)
        return get_command(single)

    def list_commands(self, ctx: Any) -> list[str]:
        names = super().list_commands(ctx)
        return names + [n for n in self._entries() if n not in names]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        cmd = super().get_command(ctx, cmd_name)
        entry = self._entries().get(cmd_name)
        if cmd is None and entry is not None:  # listed by --help: its text, not its module
            cmd = _Command(name=cmd_name, help=entry[1], callback=None, rich_markup_mode=None)
        return cmd

    def get_short_help_str(self, limit: int = 45) -> str:
        return _short_help(self)

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        with _plain_usage_errors(parent is None):
            return super().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx: Any) -> Any:
        with _plain_usage_errors(ctx.parent is None):
            return super().invoke(ctx)

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        entries = self._entries()
        name = args[0] if args else None
        if name in entries and name not in self.commands:
            self.add_command(self._load(name), name)
        elif name is not None and name not in self.commands:
            for other, (_, text) in entries.items():  # no such command: "did you mean" knows every name
                self.commands.setdefault(other, TyperCommand(name=other, help=text, callback=None))
        return super().resolve_command(ctx, args)


def _argument_name(param: Any, usage: bool = False) -> str:
    """An argument as help names it: its metavar, else its name in capitals; on the usage line in brackets when
    optional; `...` after it when it takes several (`[ARGS]...`, as click writes it)."""
    name = str(param.metavar or (param.name or "").upper()).removesuffix("...")
    if usage and not param.required:
        name = f"[{name}]"
    return f"{name}..." if param.nargs != 1 else name


def _short_help(cmd: Any) -> str:
    """The first paragraph of a command's help, whole: what its group's command list shows (click cuts it at
    the terminal's width with "...")."""
    text = inspect.cleandoc(cmd.short_help or cmd.help or "").partition("\f")[0]
    return " ".join(text.split("\n\n")[0].split())


class _Command(TyperCommand):
    """A command whose help reads as an operator's CLI: its arguments by their metavar, in capitals, on the usage
    line (`PLAN`, `[PLAN]` when optional, `PROFILE@START...`: not `{plan}`, typer >= 0.28) and in the Arguments
    section (not `plan <str>`), and its whole first paragraph in its group's command list."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            if param.param_type_name == "argument" and not getattr(param, "hidden", False):
                pieces.append(_argument_name(param, usage=True))
        return pieces

    def format_options(self, ctx: Any, formatter: Any) -> None:
        arguments, options = [], []
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                arguments.append((_argument_name(param), record[1]))
            else:
                options.append(record)
        for title, rows in (("Arguments", arguments), ("Options", options)):
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)

    def get_short_help_str(self, limit: int = 45) -> str:
        return _short_help(self)


def _plain_help(target: typer.Typer) -> None:
    """Build a group's commands (and its sub-groups') as `_Command`s, unless one names its own class (typer
    records `TyperCommand` for a command that names none)."""
    for info in target.registered_commands:
        if info.cls is None or info.cls is TyperCommand:
            info.cls = _Command
    for group in target.registered_groups:
        if group.typer_instance is not None:
            _plain_help(group.typer_instance)


@contextlib.contextmanager
def _plain_usage_errors(top: bool) -> Iterator[None]:
    """A usage error (unknown option, bad or missing value, no such command) of any command, as ONE line
    `error: MESSAGE` on stderr plus click's `Try 'migplan CMD -h' for help.`, exit 2 (click's code), instead of
    typer's boxed panel: what every other refusal of migplan prints, and what a cron mail or a log shows whole.
    Only the top group converts (`top`); the typer.Exit raised here is typer's own way to exit."""
    if not top:
        yield
        return
    try:
        yield
    except typer.TyperException as err:  # typer's (vendored) click errors: UsageError, BadParameter, ...
        typer.echo(f"error: {printable(err.format_message(), 1000)}", err=True)
        ctx = getattr(err, "ctx", None)
        if ctx is not None and ctx.command.get_help_option(ctx) is not None:
            typer.echo(f"Try '{ctx.command_path} {ctx.help_option_names[0]}' for help.", err=True)
        raise typer.Exit(err.exit_code) from None


def _default_cls(target: typer.Typer) -> bool:
    from typer.models import DefaultPlaceholder

    return isinstance(target.info.cls, DefaultPlaceholder) or target.info.cls is None


app = typer.Typer(
    name="migplan",
    help="Right-size every GPU in a fleet with MIG: collect, propose, apply, replan.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain help: rich markup ate every "[...]" of the help texts (issue 25)
    add_completion=True,  # --install-completion / --show-completion for bash and zsh (docs/README.md)
    cls=_LazyGroup,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from migplan.adapters.versions import version_text  # asks CBC for its version: only here

        typer.echo(version_text(__version__))
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
    """The console script (`migplan = "migplan.cli.app:main"` in pyproject.toml): every command line through
    typer, standard output named in write errors and flushed while the exit code can still say so."""
    with named_stdout():
        try:
            app()
        finally:
            # The process is about to exit: the interpreter's last full garbage collection would only walk what
            # the OS takes back anyway, 0.19 s after a 7,000-GPU plan on an idle machine (6% of the run;
            # bench/README.md, "Speed measures"). Frozen objects are skipped by it; atexit handlers and weakref
            # finalizers still run.
            import gc

            gc.freeze()


if __name__ == "__main__":
    main()
