"""`migplan replan` (one unattended run, for cron or a systemd timer) and `migplan schedule`.

Exit codes of replan: 0 nothing to do, 5 applied, 1 partial, 3 failed, 4 locked, 2 bad input
(migplan.commands.replan). Events go to stderr one line each (`level: event=... host=...`), which journald
and syslog keep as they are; `--quiet` prints only warnings and errors.
"""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

from migplan.cli.options import CatalogOpt, ConfigOpt, FleetOptions, InventoryOpt, OutputOpt, ProfilesOpt, fleet_options
from migplan.cli.render import emit, grid, handle_errors, info
from migplan.commands.context import build_context
from migplan.text import printable


@handle_errors
@fleet_options()
def replan(
    inventory: InventoryOpt = None,
    profiles: ProfilesOpt = None,
    state_dir: Annotated[Optional[str], typer.Option("--state-dir", help="Lock, runs, plans and GPU change "  # noqa: UP045
                                                     "times [default: replan.state_dir, else /var/lib/migplan].",
                                                     show_default=False)] = None,
    metrics_file: Annotated[Optional[str], typer.Option("--metrics-file", help="Write node_exporter textfile "  # noqa: UP045
                                                        "metrics here (e.g. /var/lib/node_exporter/textfile/"
                                                        "migplan.prom).", show_default=False)] = None,
    store: Annotated[Optional[str], typer.Option("--history-store", help="Profiles from this history instead of "  # noqa: UP045
                                                 "--profiles: a host's store or a directory of <host>.sqlite "
                                                 "('migplan collect --inventory --out DIR').",
                                                 show_default=False)] = None,
    collect: Annotated[bool, typer.Option("--collect", help="First fetch every host's history (as 'migplan collect "
                                          "--inventory') into STATE_DIR/fetched and plan from it.")] = False,
    window: Annotated[str, typer.Option("--window", help="With --history-store: the history to roll up, back "
                                        "from now (e.g. 7d, 24h).")] = "7d",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Decide and show the commands; change nothing.")] = False,
    history: Annotated[bool, typer.Option("--history", help="Show the last runs and why each applied or not; "
                                          "run nothing.")] = False,
    last: Annotated[int, typer.Option("--last", min=1, help="With --history: how many runs.")] = 20,
    quiet: Annotated[bool, typer.Option("--quiet", "-q",
                                        help="Only warnings and errors on stderr (for cron).")] = False,
    output: OutputOpt = None,
    config: ConfigOpt = None,
    catalog: CatalogOpt = None,
    *,
    fleet: FleetOptions,
) -> None:
    """Re-plan from cron: read the live state, plan, apply only when worth it and safe, record why."""
    from migplan.adapters.state_dir import DEFAULT_STATE_DIR, StateDir
    from migplan.commands.replan import ReplanRequest
    from migplan.commands.replan import replan as run_replan

    ctx = build_context(config, catalog, output.value if output else None)
    where = state_dir or str(ctx.config.replan.get("state_dir") or DEFAULT_STATE_DIR)
    if history:
        runs = StateDir(where).runs(last)
        emit(runs, ctx.output, lambda: grid([[r.get("at", r.get("id")), r.get("result", "?"),
                                              printable(str(r.get("line") or r.get("error") or ""), 160)]
                                             for r in runs], ["WHEN", "RESULT", "WHY"]))
        return

    def report(line: str) -> None:
        if not quiet or line.startswith(("warning", "error")):
            info(line)

    from migplan.commands.history import parse_duration

    span = parse_duration(window, "--window")  # None: 'all'
    span = float("inf") if span is None else span
    res = run_replan(ctx, ReplanRequest(fleet=fleet.request(inventory), profiles=profiles, state_dir=where,
                                        metrics_file=metrics_file, dry_run=dry_run, history=store, window_s=span,
                                        collect=collect),
                     report=report)
    level = "info" if res.exit_code in (0, 5) else "warning" if res.exit_code == 4 else "error"
    if not quiet or level != "info":
        info(f"{level}: event=replan result={res.result} exit={res.exit_code} {res.line}")
    if output is not None:
        emit(res.to_dict(), ctx.output, lambda: "")
    if res.exit_code:
        raise typer.Exit(res.exit_code)


schedule_app = typer.Typer(help="Run replan on a schedule (cron or a systemd timer); restore layouts at boot.",
                           no_args_is_help=True)


def _files(kind: str, every: str, at_boot: bool, migplan: str, args: list[str]) -> dict[str, str]:
    from migplan.replan import schedule as s

    argv = (migplan, "replan", "--quiet", *args)
    plan = s.Schedule(every=every, argv=s.check_argv(argv))
    out: dict[str, str] = {}
    if kind == "cron":
        out[s.CRON_PATH] = s.cron_entry(plan)
    else:
        out.update({f"{s.UNIT_DIR}/{k}": v for k, v in s.replan_units(plan).items()})
    if at_boot:
        out[f"{s.UNIT_DIR}/{s.RESTORE_SERVICE}"] = s.restore_unit(migplan)
    return out


KindOpt = Annotated[str, typer.Option("--with", help="cron (/etc/cron.d/migplan) or systemd (service + timer).")]
EveryOpt = Annotated[str, typer.Option("--every", help="How often: 15m, 1h, 6h (a divisor of an hour or a day).")]
BootOpt = Annotated[bool, typer.Option("--at-boot", help="Also install migplan-restore.service: 'migplan apply "
                                       "--last' before the container runtime and kubelet start.")]
RootOpt = Annotated[str, typer.Option("--root", help="Install under this directory instead of / (packaging, "
                                      "tests).")]


def _migplan_path() -> str:
    import shutil

    return shutil.which("migplan") or sys.argv[0]


@schedule_app.command("install")
@handle_errors
def schedule_install(kind: KindOpt = "systemd", every: EveryOpt = "1h", at_boot: BootOpt = False,
                     root: RootOpt = "/", args: Annotated[Optional[list[str]], typer.Argument(  # noqa: UP045
                         help="Extra replan options, e.g. -- -i /etc/migplan/inventory.yaml.",
                         show_default=False)] = None) -> None:
    """Write the cron entry or the systemd units (idempotent: unchanged files are left alone)."""
    from migplan.commands.schedule import install

    if kind not in ("cron", "systemd"):
        raise typer.BadParameter("--with: cron or systemd")
    try:
        files = _files(kind, every, at_boot, _migplan_path(), list(args or []))
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    for line in install(files, root=root, systemd=kind == "systemd" or at_boot):
        info(line)


@schedule_app.command("show")
@handle_errors
def schedule_show(kind: KindOpt = "systemd", every: EveryOpt = "1h", at_boot: BootOpt = False,
                  args: Annotated[Optional[list[str]], typer.Argument(show_default=False)] = None) -> None:  # noqa: UP045
    """Print what 'schedule install' would write, file by file."""
    try:
        files = _files(kind, every, at_boot, _migplan_path(), list(args or []))
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    for path, text in files.items():
        typer.echo(f"# {path}\n{text}")


@schedule_app.command("remove")
@handle_errors
def schedule_remove(root: RootOpt = "/") -> None:
    """Remove every file 'schedule install' writes (those that exist)."""
    from migplan.commands.schedule import remove

    for line in remove(root=root):
        info(line)
