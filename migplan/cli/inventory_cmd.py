"""`migplan inventory check`: validate the inventory and print the fleet."""

from __future__ import annotations

from typing import Any

import typer

from migplan.catalog import Catalog
from migplan.catalog.layout import picture
from migplan.cli.options import CatalogOpt, ConfigOpt, InventoryOpt, OutputOpt
from migplan.cli.render import emit, grid, handle_errors, info
from migplan.commands.context import build_context
from migplan.inventory import DeclaredGpu, Host, Inventory

app = typer.Typer(help="The fleet inventory.", no_args_is_help=True)


def _gpu_data(g: DeclaredGpu) -> dict[str, Any]:
    return {
        "index": g.index, "model": g.model, "uuid": g.uuid, "mig": g.mig_enabled,
        "layout": g.layout.as_list() if g.layout is not None else None,
        "reserved": g.reserved, "excluded": g.excluded,
    }


def _host_data(h: Host) -> dict[str, Any]:
    return {
        "name": h.name, "address": h.address, "port": h.port, "user": h.user, "key_file": h.key_file,
        "become": " ".join(h.become) or None, "groups": list(h.groups), "labels": dict(h.labels),
        "discover": h.discover, "gpus": [_gpu_data(g) for g in h.gpus],
        "hooks": {"pre_apply": list(h.hooks.pre_apply), "post_apply": list(h.hooks.post_apply)},
    }


def _slots(catalog: Catalog, g: DeclaredGpu) -> str:
    m = catalog.get(g.model)
    if g.layout is None and g.mig_enabled is None:
        return picture(m, None) + " (MIG off: not declared)"  # how propose takes it (a GPU boots that way)
    return picture(m, g.layout if g.mig_enabled is not False else None)


def fleet_table(inv: Inventory, catalog: Catalog) -> str:
    rows: list[list[Any]] = []
    for h in inv.hosts:
        target = f"{h.user + '@' if h.user else ''}{h.address}{':' + str(h.port) if h.port else ''}"
        if h.discover and not h.gpus:
            rows.append([h.name, target, "-", "(discover)", "", ""])
        for g in h.gpus:
            flags = ",".join(f for f, on in (("reserved", g.reserved), ("excluded", g.excluded)) if on)
            rows.append([h.name, target, g.index, g.model, _slots(catalog, g), flags])
    gpus = sum(len(h.gpus) for h in inv.hosts)
    return (grid(rows, ["HOST", "SSH", "GPU", "MODEL", "LAYOUT", "FLAGS"])
            + f"\n\n{len(inv.hosts)} hosts, {gpus} GPUs declared ({inv.source})")


@app.command("check")
@handle_errors
def check(inventory: InventoryOpt = None, output: OutputOpt = None, config: ConfigOpt = None,
          catalog: CatalogOpt = None) -> None:
    """Validate the inventory and print the fleet as a table."""
    ctx = build_context(config, catalog, output)
    inv = ctx.inventory(inventory)
    known = inv.catalog(ctx.catalog)  # with the inventory's GPUs without MIG (Kubernetes labels)
    for m in sorted({known.get(g.model) for _, g in inv.gpus()}, key=lambda m: m.id):
        if not m.mig:
            info(f"note: {m.id} has no MIG: planned as whole GPUs ({m.memory_mib} MiB; {m.source})")
        elif not m.verified:
            info(f"warning: {m.id} is an unverified catalog model; check its profiles with 'migplan catalog show'")
    data = {"source": inv.source, "hosts": [_host_data(h) for h in inv.hosts]}
    emit(data, ctx.output, lambda: fleet_table(inv, known))
