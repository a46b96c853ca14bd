"""`migplan replan` (one unattended run, for cron or a systemd timer) and `migplan schedule`.

Exit codes of replan: 0 nothing to do, 5 applied, 1 partial, 3 failed, 4 locked, 2 bad input
(migplan.commands.replan). Events go to stderr one line each (`level: event=... host=...`), which journald
and syslog keep as they are; `--quiet` prints only warnings and errors.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer

from migplan.cli.k8s_options import (
    DEFAULT_CONFIGMAP,
    DEFAULT_NAMESPACE,
    DEFAULT_SETTLE_S,
    DEFAULT_TIMEOUT_S,
    ConfigMapOpt,
    ContextOpt,
    Drain,
    DrainOpt,
    KubeconfigOpt,
    MigTimeoutOpt,
    NamespaceOpt,
    SettleOpt,
    Via,
    ViaOpt,
)
from migplan.cli.options import (
    CatalogOpt,
    ConfigOpt,
    FleetOptions,
    InventoryOpt,
    OutputOpt,
    ProfilesOpt,
    TargetOomOpt,
    fleet_options,
)
from migplan.cli.render import emit, grid, handle_errors, info
from migplan.commands.context import build_context
from migplan.errors import InputError
from migplan.files import check_output_options
from migplan.text import printable


@handle_errors
@fleet_options()
def replan(
    inventory: InventoryOpt = None,
    profiles: ProfilesOpt = None,
    state_dir: Annotated[str | None, typer.Option("--state-dir", help="Lock, runs, plans and GPU change "
                                                  "times [default: replan.state_dir, else /var/lib/migplan].",
                                                  show_default=False, metavar="DIR")] = None,
    metrics_file: Annotated[str | None, typer.Option("--metrics-file", help="Write node_exporter textfile "
                                                     "metrics here (e.g. /var/lib/node_exporter/textfile/"
                                                     "migplan.prom).", show_default=False, metavar="FILE")] = None,
    store: Annotated[str | None, typer.Option("--history-store", help="Profiles from this history instead of "
                                              "--profiles: a host's store or a directory of <host>.sqlite "
                                              "('migplan collect --inventory --out DIR').",
                                              show_default=False, metavar="PATH")] = None,
    collect: Annotated[bool, typer.Option("--collect", help="First fetch every host's history (as 'migplan collect "
                                          "--inventory') into STATE_DIR/fetched and plan from it.")] = False,
    pods: Annotated[str | None, typer.Option("--pods", metavar="FILE|kubectl", help="Demand from 'kubectl get pods "
                                             "-A -o json' (a file, or 'kubectl': read live) merged with the profiles, "
                                             "as 'propose --pods' (docs/kubernetes.md); --via gpu-operator reads "
                                             "them live.", show_default=False)] = None,
    sizing: Annotated[str | None, typer.Option("--sizing", metavar="RULE|auto",
                                               help="The whole memory rule, STAT[+PCT%][+Kspread][+FLOORMiB]"
                                                    "[,cap=CAPMiB], e.g. max+1spread, or auto: the rule 'backtest "
                                                    "--sweep' recommends, recalibrated at most once per "
                                                    "sizing.cooldown_h (docs/profiles.md) [default: sizing in the "
                                                    "config, else planner's memory settings: max+10%].")] = None,
    target_oom: TargetOomOpt = None,
    sizing_history: Annotated[str | None, typer.Option("--sizing-history", metavar="PATH|FILE.csv|URL",
                                                       help="With --sizing auto: the history to calibrate from: a "
                                                            "history store, a CSV file or a Prometheus URL [default: "
                                                            "sizing.history, else the --history-store or --collect "
                                                            "history].")] = None,
    window: Annotated[str, typer.Option("--window", help="With --history-store: the history to roll up, back "
                                        "from now (e.g. 7d, 24h).", metavar="DURATION")] = "7d",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Decide and show the commands; change nothing.")] = False,
    history: Annotated[bool, typer.Option("--history", help="Show the last runs and why each applied or not; "
                                          "run nothing.")] = False,
    last: Annotated[int, typer.Option("--last", min=1, metavar="N", help="With --history: how many runs.")] = 20,
    quiet: Annotated[bool, typer.Option("--quiet", "-q",
                                        help="Only warnings and errors on stderr (for cron).")] = False,
    output: OutputOpt = None,
    config: ConfigOpt = None,
    catalog: CatalogOpt = None,
    via: ViaOpt = Via.ssh,
    kubeconfig: KubeconfigOpt = None,
    context: ContextOpt = None,
    configmap: ConfigMapOpt = DEFAULT_CONFIGMAP,
    namespace: NamespaceOpt = DEFAULT_NAMESPACE,
    drain: DrainOpt = Drain.when_busy,
    mig_timeout: MigTimeoutOpt = DEFAULT_TIMEOUT_S,
    configmap_settle: SettleOpt = DEFAULT_SETTLE_S,
    *,
    fleet: FleetOptions,
) -> None:
    """Re-plan from cron: read the live state, plan, apply only when worth it and safe, record why."""
    from migplan.adapters.kubectl import KubectlOptions
    from migplan.adapters.state_dir import DEFAULT_STATE_DIR, StateDir, state_dir_option
    from migplan.commands.replan import ReplanRequest
    from migplan.commands.replan import replan as run_replan

    ctx = build_context(config, catalog, output.value if output else None,
                        KubectlOptions(kubeconfig=kubeconfig, context=context, request_timeout=fleet.timeout))
    where = state_dir or str(ctx.config.replan.get("state_dir") or DEFAULT_STATE_DIR)
    if history:
        runs = StateDir(where, state_dir_option(state_dir, ctx.config.replan.get("state_dir"))).runs(last)
        emit(runs, ctx.output, lambda: grid([[r.get("at", r.get("id")), r.get("result", "?"),
                                              printable(str(r.get("line") or r.get("error") or ""), 160)]
                                             for r in runs], ["WHEN", "RESULT", "WHY"]))
        return

    # before any host is touched (--metrics-file too: migplan.commands.replan); only the directory named is created
    check_output_options((where, "--state-dir" if state_dir else "replan.state_dir", "dir"))

    def report(line: str) -> None:
        if not quiet or line.startswith(("warning", "error")):
            info(line)

    from migplan.commands.history import parse_duration

    span = parse_duration(window, "--window")  # None: 'all'
    span = float("inf") if span is None else span
    req = ReplanRequest(fleet=fleet.request(inventory), profiles=profiles, state_dir=where, metrics_file=metrics_file,
                        dry_run=dry_run, history=store, window_s=span, collect=collect, pods=pods, sizing=sizing,
                        target_oom=target_oom, sizing_history=sizing_history)
    if via is Via.gpu_operator:  # nodes and pods read live, applied through the MIG manager (docs/kubernetes.md)
        from migplan.commands.replan_k8s import K8sReplan, replan_gpu_operator

        k8s = K8sReplan(kubectl=ctx.kubectl or KubectlOptions(), configmap=configmap, namespace=namespace,
                        drain=drain.value, mig_timeout=mig_timeout, settle_s=configmap_settle)
        res = replan_gpu_operator(ctx, req, k8s, report=report)
    else:
        res = run_replan(ctx, req, report=report)
    level = "info" if res.exit_code in (0, 5) else "warning" if res.exit_code == 4 else "error"
    if not quiet or level != "info":
        info(f"{level}: event=replan result={res.result} exit={res.exit_code} {res.line}")
    if output is not None:
        emit(res.to_dict(), ctx.output, lambda: "")
    if res.exit_code:
        raise typer.Exit(res.exit_code)


schedule_app = typer.Typer(help="Run replan on a schedule (cron or a systemd timer); restore layouts at boot.",
                           no_args_is_help=True)


def _replan_command() -> Any:
    """`replan`'s click command, built as `migplan replan` builds it (migplan.cli.app), to parse with."""
    from migplan.cli.app import app

    # -h and --help, and no completion options, as under `migplan` (app._LazyGroup._load)
    single = typer.Typer(context_settings=app.info.context_settings, add_completion=False, rich_markup_mode=None)
    single.command("replan")(replan)
    return typer.main.get_command(single)


# replan options that make a scheduled run do something else than a run
_NOT_SCHEDULED = {"help": "prints replan's help instead of running it",
                  "history": "lists past runs instead of running"}


def check_replan_args(args: list[str]) -> None:
    """Parse the options to schedule with replan's own parser, running nothing; InputError (exit 2) naming
    an option replan does not have, a value it refuses, or an argument it takes no place for.

    Not `make_context(resilient_parsing=True)`: a resilient parse passes over unknown options and missing
    values. The parser alone reads neither the environment nor runs a callback; each option given is then
    converted as replan converts it (its only callback, --help's, is refused before)."""
    cmd = _replan_command()
    usage_error: type[Any] = typer.BadParameter.__bases__[0]  # click's UsageError (typer >= 0.2x has its own)
    ctx = cmd.context_class(cmd, info_name="replan", **cmd.context_settings)
    try:
        opts, extra, order = cmd.make_parser(ctx).parse_args(list(args))
    except usage_error as e:
        if hasattr(e, "possibilities"):  # NoSuchOption
            hint = f" (did you mean {' or '.join(sorted(e.possibilities))}?)" if e.possibilities else ""
            raise InputError(f"replan has no option {e.option_name}{hint}: remove it from the options after -- "
                             "('migplan replan --help' lists them)") from None
        raise InputError(f"the replan options after --: {e.format_message()}") from None  # a value missing
    if extra:
        raise InputError(f"replan takes no argument {extra[0]!r}: after -- give replan's options only, e.g. -i "
                         "/etc/migplan/inventory.yaml")
    for param in order:
        if param.name in _NOT_SCHEDULED:
            names = "/".join(sorted(param.opts, key=lambda o: (len(o), o)))  # click keeps help's names in a set
            raise InputError(f"replan {names} {_NOT_SCHEDULED[param.name]}: leave it out of the options after --")
    for param in dict.fromkeys(order):
        try:
            param.process_value(ctx, opts[param.name])
        except usage_error as e:
            raise InputError(f"the replan options after --: {e.format_message()}") from None


def _files(kind: str, every: str, at_boot: bool, migplan: str, args: list[str]) -> dict[str, str]:
    from migplan.replan import schedule as s

    check_replan_args(args)
    argv = (migplan, "replan", "--quiet", *args)
    try:
        plan = s.Schedule(every=every, argv=s.check_argv(argv))
        out: dict[str, str] = {}
        if kind == "cron":
            out[s.CRON_PATH] = s.cron_entry(plan)
        else:
            out.update({f"{s.UNIT_DIR}/{k}": v for k, v in s.replan_units(plan).items()})
        if at_boot:
            out[f"{s.UNIT_DIR}/{s.RESTORE_SERVICE}"] = s.restore_unit(migplan)
    except ValueError as e:
        raise InputError(str(e)) from None
    return out


KindOpt = Annotated[str, typer.Option("--with", help="cron (/etc/cron.d/migplan) or systemd (service + timer).",
                                      metavar="cron|systemd")]
EveryOpt = Annotated[str, typer.Option("--every", help="How often: 15m, 1h, 6h (a divisor of an hour or a day).",
                                       metavar="DURATION")]
BootOpt = Annotated[bool, typer.Option("--at-boot", help="Also install migplan-restore.service: 'migplan apply "
                                       "--last' before the container runtime and kubelet start.")]
RootOpt = Annotated[str, typer.Option("--root", help="Install under this directory instead of / (packaging, "
                                      "tests).", metavar="DIR")]
ReplanArgs = Annotated[list[str] | None, typer.Argument(help="Extra replan options after --, e.g. -- -i "
                                                        "/etc/migplan/inventory.yaml.", show_default=False,
                                                        metavar="REPLAN-OPTION")]


def _migplan_path() -> str:
    import os
    import shutil

    return os.path.abspath(shutil.which("migplan") or sys.argv[0])  # ExecStart= needs an absolute path


def _kind(kind: str) -> str:
    if kind not in ("cron", "systemd"):
        raise InputError(f"--with {kind!r}: give cron or systemd")
    return kind


@schedule_app.command("install")
@handle_errors
def schedule_install(kind: KindOpt = "systemd", every: EveryOpt = "1h", at_boot: BootOpt = False,
                     root: RootOpt = "/", args: ReplanArgs = None) -> None:
    """Write the cron entry or the systemd units (idempotent: unchanged files are left alone)."""
    from migplan.commands.schedule import install

    files = _files(_kind(kind), every, at_boot, _migplan_path(), list(args or []))
    for line in install(files, root=root, systemd=kind == "systemd" or at_boot):
        info(line)


@schedule_app.command("show")
@handle_errors
def schedule_show(kind: KindOpt = "systemd", every: EveryOpt = "1h", at_boot: BootOpt = False,
                  args: ReplanArgs = None) -> None:
    """Print what 'schedule install' would write, file by file."""
    files = _files(_kind(kind), every, at_boot, _migplan_path(), list(args or []))
    for path, text in files.items():
        typer.echo(f"# {path}\n{text}")


@schedule_app.command("remove")
@handle_errors
def schedule_remove(root: RootOpt = "/") -> None:
    """Remove every file 'schedule install' writes (those that exist)."""
    from migplan.commands.schedule import remove

    for line in remove(root=root):
        info(line)
