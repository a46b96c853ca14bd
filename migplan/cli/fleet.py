"""`migplan discover`, `migplan status` and `migplan catalog learn`: read live hosts over SSH.

Exit codes: 0 every host answered, 1 some host failed (the others are still reported), 2 bad input.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any, Optional

import typer

from migplan import smi
from migplan.adapters.pool import HostResult
from migplan.adapters.runner import printable
from migplan.adapters.ssh import DEFAULT_KNOWN_HOSTS, DEFAULT_SSH_CONFIG, SshFleet, SshOptions
from migplan.catalog import Catalog
from migplan.cli import catalog_cmd
from migplan.cli.context import Context, build_context
from migplan.cli.options import CatalogOpt, ConfigOpt, InventoryOpt, OutputOpt
from migplan.cli.render import emit, grid, handle_errors, info
from migplan.discover import DEFAULT_COMMAND_TIMEOUT, discover_fleet, inventory_drift
from migplan.errors import EXIT_FAILURE, InputError
from migplan.files import write_atomic
from migplan.inventory import Host, Inventory
from migplan.layout import picture
from migplan.snapshot import (
    GpuRecord,
    HostRecord,
    Snapshot,
    host_dict,
    load_snapshot_file,
    snapshot_dict,
    write_snapshot,
)

# --- shared options --------------------------------------------------------------------------------

ParallelOpt = Annotated[int, typer.Option("--parallel", "-j", min=1, max=512,
                                          help="Hosts contacted at the same time.")]
AcceptNewOpt = Annotated[bool, typer.Option("--accept-new-host-keys",
                                            help="Record the host key of a host not yet in known_hosts "
                                                 "(a changed key is always refused).")]
KnownHostsOpt = Annotated[str, typer.Option("--known-hosts", help="known_hosts file to verify (and record) "
                                            "host keys.", envvar="MIGPLAN_KNOWN_HOSTS")]
SshConfigOpt = Annotated[str, typer.Option("--ssh-config", help="ssh_config file for Host/HostName/User/Port/"
                                           "IdentityFile/ProxyJump ('none' to read none).",
                                           envvar="MIGPLAN_SSH_CONFIG")]
LimitOpt = Annotated[Optional[list[str]],  # noqa: UP045 - typer needs Optional at runtime on 3.10
                     typer.Option("--limit", "-l", help="Only these hosts or groups (names, wildcards, "
                                  "comma-separated; repeatable).", show_default=False)]
TimeoutOpt = Annotated[float, typer.Option("--timeout", min=1.0, help="Seconds each remote command may take.")]
ConnectTimeoutOpt = Annotated[float, typer.Option("--connect-timeout", min=0.5,
                                                  help="Seconds to connect and log in to a host.")]


def ssh_options(known_hosts: str, ssh_config: str, accept_new: bool, connect_timeout: float) -> SshOptions:
    return SshOptions(known_hosts=known_hosts, accept_new_host_keys=accept_new,
                      ssh_config=None if ssh_config.lower() == "none" else ssh_config,
                      connect_timeout=connect_timeout)


def select_hosts(inventory: Inventory, limit: list[str] | None) -> Inventory:
    patterns = [p.strip() for item in (limit or []) for p in item.split(",") if p.strip()]
    chosen = inventory.select(patterns)
    if not chosen.hosts:
        raise InputError(f"--limit {','.join(patterns)} matches no host of {inventory.source}",
                         hint="list the hosts with 'migplan inventory check'")
    return chosen


class _StderrLog(logging.Handler):
    """Warnings from the SSH layer (a recorded host key, an ignored Include) as 'warning:' lines."""

    def emit(self, record: logging.LogRecord) -> None:
        info(f"warning: {record.getMessage()}")


@contextmanager
def _warnings_to_stderr() -> Iterator[None]:
    logger = logging.getLogger("migplan")
    handler = _StderrLog(logging.WARNING)
    logger.addHandler(handler)
    old = logger.level
    if logger.level == logging.NOTSET or logger.level > logging.WARNING:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old)


def _progress(done: int, total: int, result: HostResult[HostRecord]) -> None:
    if result.error is None and result.value is not None:
        n = len(result.value.gpus)
        info(f"[{done}/{total}] {result.host}: ok, {n} GPU{'s' if n != 1 else ''} ({result.duration_s:.1f} s)")
    elif result.error is not None:
        info(f"[{done}/{total}] {result.host}: FAILED ({result.error.code}) {printable(result.error.detail, 200)}")


def run_discovery(ctx: Context, inventory: Inventory, options: SshOptions, *, parallel: int,
                  timeout: float) -> Snapshot:
    info(f"discovering {len(inventory.hosts)} host(s), {parallel} at a time")
    with _warnings_to_stderr(), SshFleet(options) as ssh:
        return discover_fleet(inventory, ctx.catalog, ssh.runner, parallel=parallel, timeout=timeout,
                              on_done=_progress)


def _finish(snapshot: Snapshot) -> None:
    if snapshot.failed:
        info(f"{len(snapshot.failed)} of {len(snapshot.hosts)} host(s) failed:")
        for h in snapshot.failed:
            assert h.error is not None
            info(f"  {h.name}: {printable(h.error.message, 400)}"
                 + (f"\n    hint: {h.error.hint}" if h.error.hint else ""))
        raise typer.Exit(EXIT_FAILURE)


# --- discover -----------------------------------------------------------------------------------

@handle_errors
def discover(
    inventory: InventoryOpt = None,
    out: Annotated[Optional[str], typer.Option("--out", help="Write the snapshot here (JSON; YAML for "  # noqa: UP045
                                                ".yaml/.yml) for 'propose --snapshot'.", show_default=False)] = None,
    parallel: ParallelOpt = 8,
    accept_new_host_keys: AcceptNewOpt = False,
    known_hosts: KnownHostsOpt = DEFAULT_KNOWN_HOSTS,
    ssh_config: SshConfigOpt = DEFAULT_SSH_CONFIG,
    limit: LimitOpt = None,
    timeout: TimeoutOpt = DEFAULT_COMMAND_TIMEOUT,
    connect_timeout: ConnectTimeoutOpt = 10.0,
    output: OutputOpt = None,
    config: ConfigOpt = None,
    catalog: CatalogOpt = None,
) -> None:
    """Read every host's GPUs, MIG mode, instances and processes over SSH; write a snapshot."""
    ctx = build_context(config, catalog, output)
    inv = select_hosts(ctx.inventory(inventory), limit)
    options = ssh_options(known_hosts, ssh_config, accept_new_host_keys, connect_timeout)
    snapshot = run_discovery(ctx, inv, options, parallel=parallel, timeout=timeout)
    if out:
        write_snapshot(out, snapshot)
        info(f"snapshot written to {out}")

    def table() -> str:
        rows: list[list[Any]] = []
        for h in snapshot.hosts:
            if h.error is not None:
                rows.append([h.name, "-", "-", "-", f"FAILED ({h.error.code})"])
                continue
            mig = sum(1 for g in h.gpus if g.mig_current)
            inst = sum(len(g.instances) for g in h.gpus)
            rows.append([h.name, len(h.gpus), mig, inst, "ok"])
        return grid(rows, ["HOST", "GPUS", "MIG ON", "INSTANCES", "STATUS"])

    emit(snapshot_dict(snapshot), ctx.output, table)
    _finish(snapshot)


# --- status -------------------------------------------------------------------------------------

def _picture(catalog: Catalog, g: GpuRecord) -> str:
    if g.model is None or not g.mig_capable:
        return "(no MIG)"
    return picture(catalog.get(g.model), g.layout)


def status_data(snapshot: Snapshot, inventory: Inventory | None, catalog: Catalog) -> dict[str, Any]:
    hosts = []
    for h in snapshot.hosts:
        entry = host_dict(h)
        declared = inventory.host(h.name) if inventory is not None else None
        entry["ok"] = h.ok
        entry["drift"] = inventory_drift(declared, h) if declared is not None else []
        for gd, g in zip(entry["gpus"], h.gpus, strict=True):
            gd["layout"] = g.layout.as_list() if g.layout is not None else None
            gd["picture"] = _picture(catalog, g)
            gd["busy"] = [str(i) for i in g.busy_instances]
            gd["mode_change_pending"] = g.mode_change_pending
        hosts.append(entry)
    failed = [h.name for h in snapshot.hosts if not h.ok]
    return {"taken_at": snapshot.taken_at, "hosts": hosts,
            "summary": {"hosts": len(snapshot.hosts), "failed": failed,
                        "gpus": sum(len(h.gpus) for h in snapshot.hosts),
                        "drift": sum(len(h["drift"]) for h in hosts)}}


def status_table(data: dict[str, Any]) -> str:
    parts = []
    for h in data["hosts"]:
        if not h["ok"]:
            err = h["error"]
            parts.append(f"{h['name']} ({h['address']}): FAILED ({err['code']}) {printable(err['message'], 300)}"
                         + (f"\n  hint: {err['hint']}" if err.get("hint") else ""))
            continue
        rows = []
        for g in h["gpus"]:
            flags = "".join([" reserved" if g["reserved"] else "", " excluded" if g["excluded"] else ""])
            model = g["model"] or printable(g["name"], 40)
            busy = "; ".join(_busy_text(g)) or "-"
            rows.append([g["index"], model + flags, _mode_text(g), g["picture"], busy])
        head = f"{h['name']} ({h['address']}): {len(h['gpus'])} GPU(s)"
        lines = [head, _indent(grid(rows, ["GPU", "MODEL", "MIG", "LAYOUT (memory slices)", "BUSY"]))]
        lines += [f"  differs from inventory: {d}" for d in h["drift"]]
        lines += [f"  note: {printable(n, 300)}" for n in h["notes"]]
        parts.append("\n".join(lines))
    s = data["summary"]
    foot = (f"{s['hosts']} host(s), {s['gpus']} GPU(s), {len(s['failed'])} failed, "
            f"{s['drift']} difference(s) from the inventory")
    return "\n\n".join([*parts, foot])


def _mode_text(g: dict[str, Any]) -> str:
    m = g["mig"]
    if not m["capable"]:
        return "n/a"
    now = "on" if m["current"] else "off"
    return f"{now}->{'on' if m['pending'] else 'off'} pending" if g["mode_change_pending"] else now


def _busy_text(g: dict[str, Any]) -> list[str]:
    out = []
    for i in g["instances"]:
        if i["processes"]:
            out.append(f"{i['profile']}@{i['start']} (pid {','.join(str(p['pid']) for p in i['processes'])})")
    if g["processes"]:
        pids = ",".join(str(p["pid"]) for p in g["processes"])
        out.append(f"all instances (pid {pids}, not placed)" if g["instances"] else f"whole GPU (pid {pids})")
    return out


def _indent(text: str) -> str:
    return "\n".join("  " + ln for ln in text.splitlines())


@handle_errors
def status(
    inventory: InventoryOpt = None,
    snapshot: Annotated[Optional[str], typer.Option("--snapshot", help="Show a saved snapshot instead of "  # noqa: UP045
                                                     "connecting to the hosts.", show_default=False)] = None,
    parallel: ParallelOpt = 8,
    accept_new_host_keys: AcceptNewOpt = False,
    known_hosts: KnownHostsOpt = DEFAULT_KNOWN_HOSTS,
    ssh_config: SshConfigOpt = DEFAULT_SSH_CONFIG,
    limit: LimitOpt = None,
    timeout: TimeoutOpt = DEFAULT_COMMAND_TIMEOUT,
    connect_timeout: ConnectTimeoutOpt = 10.0,
    output: OutputOpt = None,
    config: ConfigOpt = None,
    catalog: CatalogOpt = None,
) -> None:
    """Per host and GPU: layout, busy instances, pending MIG mode changes, differences from the inventory."""
    ctx = build_context(config, catalog, output)
    inv: Inventory | None = None
    if snapshot:
        snap = load_snapshot_file(snapshot, ctx.catalog)
        if inventory or ctx.config.inventory:
            inv = ctx.inventory(inventory)
        if limit:
            keep = {h.name for h in select_hosts(inv, limit).hosts} if inv else set(_patterns_match(snap, limit))
            snap = Snapshot(tuple(h for h in snap.hosts if h.name in keep), snap.taken_at, snap.inventory)
    else:
        inv = select_hosts(ctx.inventory(inventory), limit)
        options = ssh_options(known_hosts, ssh_config, accept_new_host_keys, connect_timeout)
        snap = run_discovery(ctx, inv, options, parallel=parallel, timeout=timeout)
    data = status_data(snap, inv, ctx.catalog)
    emit(data, ctx.output, lambda: status_table(data))
    _finish(snap)


def _patterns_match(snap: Snapshot, limit: list[str]) -> list[str]:
    import fnmatch

    patterns = [p.strip() for item in limit for p in item.split(",") if p.strip()]
    return [h.name for h in snap.hosts if any(fnmatch.fnmatch(h.name, p) for p in patterns)]


# --- catalog learn ---------------------------------------------------------------------------------

_ARCH_BY_NAME = (("B2", "blackwell"), ("B1", "blackwell"), ("GB", "blackwell"), ("H1", "hopper"),
                 ("H2", "hopper"), ("GH", "hopper"), ("A1", "ampere"), ("A3", "ampere"), ("A8", "ampere"))


def _pci_device(raw: str) -> str:
    """`0x20B010DE` (device then vendor, as --query-gpu prints it) -> `0x20b0`, the catalog's form."""
    r = raw.lower().removeprefix("0x")
    return "0x" + (r[:4] if len(r) == 8 and r.endswith("10de") else r)


def _guess(name: str) -> tuple[str, str | None]:
    """`NVIDIA H100 80GB HBM3` -> ('H100-80GB-HBM3', 'hopper')."""
    base = re.sub(r"^NVIDIA\s+", "", name.strip())
    model_id = re.sub(r"[^A-Za-z0-9.]+", "-", base).strip("-") or "learned-gpu"
    arch = next((a for prefix, a in _ARCH_BY_NAME if base.upper().startswith(prefix)), None)
    return model_id, arch


@handle_errors
def learn(
    host: Annotated[str, typer.Option("--host", help="Inventory host to read the model from.")],
    gpu: Annotated[int, typer.Option("--gpu", min=0, help="GPU index (must be in MIG mode).")] = 0,
    model_id: Annotated[Optional[str], typer.Option("--id", help="Model id [default: from the GPU name].",  # noqa: UP045
                                                    show_default=False)] = None,
    architecture: Annotated[Optional[str], typer.Option("--architecture", help="ampere, hopper or blackwell "  # noqa: UP045
                                                        "[default: from the GPU name].", show_default=False)] = None,
    out: Annotated[Optional[str], typer.Option("--out", help="Write the catalog file here (default: stdout).",  # noqa: UP045
                                               show_default=False)] = None,
    inventory: InventoryOpt = None,
    accept_new_host_keys: AcceptNewOpt = False,
    known_hosts: KnownHostsOpt = DEFAULT_KNOWN_HOSTS,
    ssh_config: SshConfigOpt = DEFAULT_SSH_CONFIG,
    timeout: TimeoutOpt = DEFAULT_COMMAND_TIMEOUT,
    connect_timeout: ConnectTimeoutOpt = 10.0,
    config: ConfigOpt = None,
    catalog: CatalogOpt = None,
) -> None:
    """Learn a GPU model from a host ('nvidia-smi mig -lgip/-lgipp') as a catalog override file."""
    ctx = build_context(config, catalog, None)
    inv = ctx.inventory(inventory)
    target: Host | None = inv.host(host)
    if target is None:
        raise InputError(f"host {host!r} is not in {inv.source}", hint="list the hosts with 'migplan inventory check'")
    options = ssh_options(known_hosts, ssh_config, accept_new_host_keys, connect_timeout)
    with _warnings_to_stderr(), SshFleet(options) as ssh:
        runner = ssh.runner(target)

        def output(argv: list[str]) -> str:
            done = runner.run(argv, timeout=timeout)
            if not done.ok:
                raise smi.classify_failure(argv, done.exit_code, done.stdout, done.stderr)
            return done.stdout

        infos = {i.index: i for i in smi.parse_query_gpus(output(smi.query_gpus()))}
        if gpu not in infos:
            raise InputError(f"{host} has no GPU {gpu} (GPUs: {sorted(infos)})")
        gi = infos[gpu]
        if not gi.mig_current:
            raise InputError(f"{host} GPU {gpu} ({gi.name}) is not in MIG mode; nvidia-smi lists MIG profiles "
                             "only for MIG-enabled GPUs", hint="enable MIG on that GPU first, or pick another --gpu")
        lgip = output(smi.list_gi_profiles(gpu))
        lgipp = output(smi.list_gi_placements(gpu))
    guessed_id, guessed_arch = _guess(gi.name)
    arch = architecture or guessed_arch
    if arch is None:
        raise InputError(f"cannot tell the architecture of {gi.name!r}", hint="pass --architecture")
    pci = [_pci_device(gi.pci_device_id)] if gi.pci_device_id else []
    model = smi.learn_model(lgip, lgipp, model_id or guessed_id, architecture=arch, gpu=gpu,
                            smi_names=[gi.name], pci_device_ids=pci,
                            source=f"learned from {host} GPU {gpu} with nvidia-smi mig -lgip/-lgipp")
    text = smi.render_catalog_yaml([model])
    if out:
        write_atomic(out, text)
        info(f"catalog model {model.id} written to {out}; use it with --catalog {out}")
    else:
        typer.echo(text, nl=False)


# --- registration ------------------------------------------------------------------------------

def register(app: typer.Typer) -> None:
    """Add `discover` and `status` to the root app, and `learn` to `migplan catalog`."""
    app.command("discover")(discover)
    app.command("status")(status)
    catalog_cmd.app.command("learn")(learn)
