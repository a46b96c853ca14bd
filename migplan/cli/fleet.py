"""`migplan discover`, `migplan status` and `migplan catalog learn`: read live hosts over SSH.

Exit codes: 0 every host answered, 1 some host failed (the others are still reported), 2 bad input.
The work is `migplan.commands.fleet`; this module parses options and renders.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer

from migplan import documents, smi
from migplan.catalog.geometry import ARCHITECTURES
from migplan.cli import catalog_cmd
from migplan.cli.options import CatalogOpt, ConfigOpt, FleetOptions, InventoryOpt, OutputOpt, fleet_options
from migplan.cli.render import emit, finish_hosts, grid, handle_errors, info
from migplan.commands import fleet as run
from migplan.commands.context import build_context
from migplan.commands.results import discovery_outcomes
from migplan.files import write_atomic
from migplan.fleet.snapshot import Snapshot, snapshot_to_dict
from migplan.text import printable


class _StderrLog(logging.Handler):
    """Warnings from the SSH layer (a recorded host key, an ignored Include) as 'warning:' lines."""

    def emit(self, record: logging.LogRecord) -> None:
        info(f"warning: {printable(record.getMessage(), 400)}")


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


def _finish(snapshot: Snapshot) -> None:
    finish_hosts(discovery_outcomes(snapshot))


# --- discover -----------------------------------------------------------------------------------

@handle_errors
@fleet_options()
def discover(
    inventory: InventoryOpt = None,
    out: Annotated[str | None, typer.Option("--out", help="Write the snapshot here (JSON; YAML for "
                                             ".yaml/.yml) for 'propose --snapshot'.", show_default=False,
                                             metavar="FILE")] = None,
    plan: Annotated[str | None, typer.Option("--plan", help="Also say where GPUs differ from this plan's "
                                             "targets (on stderr).", show_default=False, metavar="PLAN")] = None,
    output: OutputOpt = None,
    config: ConfigOpt = None,
    catalog: CatalogOpt = None,
    *,
    fleet: FleetOptions,
) -> None:
    """Read every host's GPUs, MIG mode, instances and processes over SSH; write a snapshot."""
    ctx = build_context(config, catalog, output)
    req = fleet.request(inventory)
    with _warnings_to_stderr():
        snapshot = run.discover(ctx, req, info)
    if plan:  # after the MIG manager ran: GPUs not as planned (other placements), on stderr
        for host, lines in run.plan_drift(snapshot, plan, ctx.catalog).items():
            for line in lines:
                info(f"{host}: differs from plan: {printable(line, 300)}")
    if out:
        documents.write_snapshot(out, snapshot, forbid=[ctx.inventory_path(inventory)])
        info(f"snapshot written to {out}")

    def table() -> str:
        vgpu = any(g.vgpu is not None for h in snapshot.hosts for g in h.gpus)  # the column only on vGPU fleets
        rows: list[list[Any]] = []
        for h in snapshot.hosts:
            if h.error is not None:
                failed = f"FAILED ({printable(h.error.code, 40)})"
                rows.append([h.name, "-", "-", "-", *(["-"] if vgpu else []), failed])
                continue
            mig = sum(1 for g in h.gpus if g.mig_current)
            inst = sum(len(g.instances) for g in h.gpus)
            vms = sum(len(g.vgpu.vgpus) for g in h.gpus if g.vgpu is not None)
            rows.append([h.name, len(h.gpus), mig, inst, *([vms] if vgpu else []), "ok"])
        return grid(rows, ["HOST", "GPUS", "MIG ON", "INSTANCES", *(["ACTIVE VGPUS"] if vgpu else []), "STATUS"])

    emit(snapshot_to_dict(snapshot), ctx.output, table)
    _finish(snapshot)


# --- status -------------------------------------------------------------------------------------

def status_table(data: dict[str, Any]) -> str:
    parts = []
    for h in data["hosts"]:
        if not h["ok"]:
            err = h["error"]
            parts.append(f"{h['name']} ({printable(str(h['address']), 100)}): FAILED ({printable(err['code'], 40)}) "
                         f"{printable(err['message'], 300)}"
                         + (f"\n  hint: {printable(err['hint'], 300)}" if err.get("hint") else ""))
            continue
        rows = []
        for g in h["gpus"]:
            flags = "".join([" reserved" if g["reserved"] else "", " excluded" if g["excluded"] else ""])
            model = g["model"] or printable(g["name"], 40)
            busy = "; ".join(_busy_text(g)) or "-"
            rows.append([g["index"], model + flags, _mode_text(g), g["picture"], busy])
        head = f"{h['name']} ({printable(str(h['address']), 100)}): {len(h['gpus'])} GPU(s)"
        lines = [head, _indent(grid(rows, ["GPU", "MODEL", "MIG", "LAYOUT (memory slices)", "BUSY"]))]
        lines += _vgpu_lines(h)
        lines += [f"  differs from inventory: {printable(d, 300)}" for d in h["drift"]]
        lines += [f"  differs from plan: {printable(d, 300)}" for d in h.get("plan_drift", ())]
        lines += [f"  note: {printable(n, 300)}" for n in h["notes"]]
        parts.append("\n".join(lines))
    s = data["summary"]
    foot = (f"{s['hosts']} host(s), {s['gpus']} GPU(s), {len(s['failed'])} failed, "
            f"{s['drift']} difference(s) from the inventory")
    return "\n\n".join([*parts, foot])


def _vgpu_lines(h: dict[str, Any]) -> list[str]:
    """Each vGPU GPU's vGPUs under the host's table: type, where it sits, VM and frame buffer used."""
    out = []
    for g in h["gpus"]:
        if "vgpu_rows" not in g:
            continue
        v = g["vgpu"]
        board = printable(str(v["board"]), 40) if v["board"] else "no catalog board"
        how = "MIG-backed" if g["mig"]["current"] else "time-sliced"
        head = (f"  GPU {g['index']}: vGPU ({how}, {'SR-IOV' if v['host_mode'] == 'sr-iov' else 'mdev'}, {board}): "
                f"{len(v['vgpus'])} active, creatable {', '.join(printable(c, 40) for c in v['creatable']) or '-'}")
        out.append(head)
        for r in g["vgpu_rows"]:
            where = " on ".join(printable(str(x), 200) for x in (r["device"], r["instance"]) if x) or "?"
            fb = "" if r["fb_total_mib"] is None else f", FB {r['fb_used_mib']} of {r['fb_total_mib']} MiB used"
            vm = f"VM {printable(str(r['vm']), 80)}" if r["vm"] else "no VM" + (
                f" ({r['count']} of them)" if r.get("count") else "")
            out.append(f"    {printable(r['type'], 40)} {where}: {vm}{fb}")
    return out


def _mode_text(g: dict[str, Any]) -> str:
    if "vgpu_rows" in g and not g["mig"]["capable"]:
        return "vGPU"
    m = g["mig"]
    if not m["capable"]:
        return "n/a"
    now = "on" if m["current"] else "off"
    return f"{now}->{'on' if m['pending'] else 'off'} pending" if g["mode_change_pending"] else now


def _busy_text(g: dict[str, Any]) -> list[str]:
    out = []
    vgpu = {r["instance"]: r for r in g.get("vgpu_rows", ()) if r["instance"]}
    for i in g["instances"]:
        where = f"{i['profile']}@{i['start']}"
        if i["processes"]:
            out.append(f"{where} (pid {','.join(str(p['pid']) for p in i['processes'])})")
        elif where in vgpu:
            out.append(f"{where} (vGPU {printable(vgpu[where]['type'], 40)})")
    if g["processes"]:
        pids = ",".join(str(p["pid"]) for p in g["processes"])
        out.append(f"all instances (pid {pids}, not placed)" if g["instances"] else f"whole GPU (pid {pids})")
    if not g["mig"]["current"] and g.get("vgpu_rows"):
        out.append(f"whole GPU ({len(g['vgpu_rows'])} vGPU(s))")
    return out


def _indent(text: str) -> str:
    return "\n".join("  " + ln for ln in text.splitlines())


@handle_errors
@fleet_options()
def status(
    inventory: InventoryOpt = None,
    snapshot: Annotated[str | None, typer.Option("--snapshot", help="Show a saved snapshot instead of "
                                                  "connecting to the hosts.", show_default=False,
                                                  metavar="FILE")] = None,
    plan: Annotated[str | None, typer.Option("--plan", help="Also show where GPUs differ from this plan's "
                                             "targets (e.g. other placements after the MIG manager ran).",
                                             show_default=False, metavar="PLAN")] = None,
    output: OutputOpt = None,
    config: ConfigOpt = None,
    catalog: CatalogOpt = None,
    *,
    fleet: FleetOptions,
) -> None:
    """Per host and GPU: layout, busy instances, pending MIG mode changes, differences from the inventory."""
    ctx = build_context(config, catalog, output)
    with _warnings_to_stderr():
        result = run.status(ctx, fleet.request(inventory), snapshot_path=snapshot, report=info, plan_path=plan)
    emit(result.data, ctx.output, lambda: status_table(result.data))
    _finish(result.snapshot)


# --- catalog learn ---------------------------------------------------------------------------------

@handle_errors
@fleet_options(parallel=False, limit=False)
def learn(
    host: Annotated[str, typer.Option("--host", metavar="HOST", help="Inventory host to read the model from.")],
    gpu: Annotated[int, typer.Option("--gpu", min=0, max=255, metavar="N",
                                     help="GPU index (must be in MIG mode).")] = 0,
    model_id: Annotated[str | None, typer.Option("--id", help="Model id [default: from the GPU name].",
                                                 show_default=False, metavar="MODEL")] = None,
    architecture: Annotated[str | None, typer.Option("--architecture", help="GPU architecture [default: from the "
                                                     "GPU name].", show_default=False,
                                                     metavar="|".join(ARCHITECTURES))] = None,
    out: Annotated[str | None, typer.Option("--out", help="Write the catalog file here [default: stdout].",
                                            show_default=False, metavar="FILE")] = None,
    inventory: InventoryOpt = None,
    config: ConfigOpt = None,
    catalog: CatalogOpt = None,
    *,
    fleet: FleetOptions,
) -> None:
    """Learn a GPU model from a host ('nvidia-smi mig -lgip/-lgipp') as a catalog override file."""
    ctx = build_context(config, catalog, None)
    with _warnings_to_stderr():
        model = run.learn(ctx, fleet.request(inventory),
                          run.LearnRequest(host=host, gpu=gpu, model_id=model_id, architecture=architecture))
    text = smi.render_catalog_yaml([model])
    if out:
        write_atomic(out, text, forbid=[ctx.inventory_path(inventory), *ctx.config.catalog, *(catalog or [])])
        info(f"catalog model {model.id} written to {out}; use it with --catalog {out}")
    else:
        typer.echo(text, nl=False)


# --- registration ------------------------------------------------------------------------------

def register(app: typer.Typer) -> None:
    """Add `discover` and `status` to the root app, and `learn` to `migplan catalog`."""
    app.command("discover")(discover)
    app.command("status")(status)
    catalog_cmd.app.command("learn")(learn)
