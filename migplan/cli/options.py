"""Option types shared by every command, so each spells them the same way."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from migplan import names
from migplan.adapters.runner import DEFAULT_TIMEOUT
from migplan.adapters.ssh_options import DEFAULT_KNOWN_HOSTS, DEFAULT_SSH_CONFIG, SshOptions
from migplan.commands import DEFAULT_PARALLEL

if TYPE_CHECKING:
    from migplan.commands.fleet import FleetRequest

F = TypeVar("F", bound=Callable[..., Any])
DEFAULT_CONNECT_TIMEOUT = 10.0
# The upper bounds of the float options (with `finite`, every float option's range): beyond these a value is
# a typo, and `inf` or `1e999` would reach a timer or a date as an OverflowError.
MAX_SECONDS = 86400.0  # --timeout, --connect-timeout, --http-timeout, --time-limit: one day
MAX_AGE_HOURS = 24.0 * 366 * 10  # --max-age: ten years
MAX_RETENTION_DAYS = 3660.0  # --retention-days: ten years


def finite(value: float | None) -> float | None:
    """The one check of every float option (`callback=finite`): `inf`, `-inf`, `nan` and numbers too large
    for a float (`1e999` reads as inf) are refused as a usage error naming the option, exit 2."""
    if value is not None and not names.finite(value):
        raise typer.BadParameter(f"{value!r} is not a finite number; give a plain number such as 30")
    return value


class OutputFormat(str, Enum):
    table = "table"
    json = "json"
    yaml = "yaml"


def choices(values: type[Enum]) -> str:
    """The metavar of an option that takes one of an Enum's values: `table|json|yaml`, in the Enum's order."""
    return "|".join(str(v.value) for v in values)


OutputOpt = Annotated[
    OutputFormat | None,
    typer.Option("-o", "--output", help="Output format [default: the config file's output, else table].",
                 envvar="MIGPLAN_OUTPUT", show_default=False, metavar=choices(OutputFormat)),
]
ConfigOpt = Annotated[
    str | None,
    typer.Option("--config", help="Config file [default: ~/.config/migplan/config.yaml].",
                 envvar="MIGPLAN_CONFIG", show_default=False, metavar="FILE"),
]
CatalogOpt = Annotated[
    list[str] | None,
    typer.Option("--catalog", help="Extra catalog file adding or overriding GPU models (repeatable).",
                 envvar="MIGPLAN_CATALOG", show_default=False, metavar="FILE"),
]
InventoryOpt = Annotated[
    str | None,
    typer.Option("--inventory", "-i", help="Inventory file (migplan or Ansible YAML).",
                 envvar="MIGPLAN_INVENTORY", show_default=False, metavar="PATH"),
]
# `--sizing auto`'s target, on propose and replan (backtest --sweep's own option has a value, not None)
TargetOomOpt = Annotated[str | None, typer.Option(
    "--target-oom", metavar="SHARE", help="With --sizing auto: the share of workloads that may run out of memory in "
    "the backtest, 1% or 0.01 [default: sizing.target_oom, else 1%].")]
ProfilesOpt = Annotated[
    str | None,
    typer.Option("--profiles", "-p", help="Workload profile file or directory.", envvar="MIGPLAN_PROFILES",
                 show_default=False, metavar="PATH"),
]


# --- the options of every command that contacts hosts ------------------------------------------------

def fleet_options(*, parallel: bool = True, limit: bool = True) -> Callable[[F], F]:
    """Add the SSH/fleet options to a command once, here, instead of repeating them on every command.

    The wrapped function receives `fleet: FleetOptions` instead of the individual options (typer reads
    the signature we set on the wrapper, so `--help` lists every option with its help text).
    """
    params = [p for p in _FLEET_PARAMS if (parallel or p.name != "parallel") and (limit or p.name != "limit")]

    def decorate(fn: F) -> F:
        sig = inspect.signature(fn, eval_str=True)  # typer cannot evaluate a set __signature__ itself
        own = [p for p in sig.parameters.values() if p.name != "fleet"]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {p.name: kwargs.pop(p.name) for p in params}
            kwargs["fleet"] = FleetOptions(**values)
            return fn(*args, **kwargs)

        wrapper.__signature__ = sig.replace(parameters=[*own, *params])  # type: ignore[attr-defined]  # read by typer
        return wrapper  # type: ignore[return-value]  # an F to its callers, typer reads the new signature

    return decorate


@dataclass(frozen=True)
class FleetOptions:
    """The fleet options as given on the command line (see `fleet_options`)."""

    parallel: int = DEFAULT_PARALLEL
    accept_new_host_keys: bool = False
    known_hosts: str = DEFAULT_KNOWN_HOSTS
    ssh_config: str = DEFAULT_SSH_CONFIG
    limit: list[str] | None = None
    timeout: float = DEFAULT_TIMEOUT
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT

    def ssh(self) -> SshOptions:
        return SshOptions(known_hosts=self.known_hosts, accept_new_host_keys=self.accept_new_host_keys,
                          ssh_config=None if self.ssh_config.lower() == "none" else self.ssh_config,
                          connect_timeout=self.connect_timeout)

    def request(self, inventory: str | None) -> FleetRequest:
        from migplan.commands.fleet import FleetRequest

        return FleetRequest(inventory=inventory, limit=tuple(self.limit or ()), parallel=self.parallel,
                            timeout=self.timeout, ssh=self.ssh())


def _param(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default)


_FLEET_PARAMS = (
    _param("parallel", Annotated[int, typer.Option("--parallel", "-j", min=1, max=512, metavar="N",
                                                   help="Hosts contacted at the same time.")], DEFAULT_PARALLEL),
    _param("accept_new_host_keys", Annotated[bool, typer.Option(
        "--accept-new-host-keys", help="Record the host key of a host not yet in known_hosts (a changed key is "
                                       "always refused).")], False),
    _param("known_hosts", Annotated[str, typer.Option(
        "--known-hosts", help="known_hosts file to verify (and record) host keys.",
        envvar="MIGPLAN_KNOWN_HOSTS", metavar="FILE")], DEFAULT_KNOWN_HOSTS),
    _param("ssh_config", Annotated[str, typer.Option(
        "--ssh-config", help="ssh_config file for Host/HostName/User/Port/IdentityFile/ProxyJump/ProxyCommand "
                             "('none' to read none).", envvar="MIGPLAN_SSH_CONFIG", metavar="FILE")],
           DEFAULT_SSH_CONFIG),
    _param("limit", Annotated[list[str] | None, typer.Option(
        "--limit", "-l", help="Only these hosts or groups (names, wildcards, comma-separated; repeatable).",
        show_default=False, metavar="HOST-PATTERN")], None),
    _param("timeout", Annotated[float, typer.Option("--timeout", min=1.0, max=MAX_SECONDS, callback=finite,
                                                    metavar="SECONDS", help="Seconds each remote command may take.")],
           DEFAULT_TIMEOUT),
    _param("connect_timeout", Annotated[float, typer.Option(
        "--connect-timeout", min=0.5, max=MAX_SECONDS, callback=finite, metavar="SECONDS",
        help="Seconds to connect and log in to a host.")], DEFAULT_CONNECT_TIMEOUT),
)
