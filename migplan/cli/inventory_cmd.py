"""`migplan inventory check`: validate the inventory and print the fleet, the hosts a pattern selects and why the
others are left out."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from migplan.catalog import Catalog
from migplan.catalog.layout import picture
from migplan.cli.k8s_options import ContextOpt, KubeconfigOpt, MigConfigMapOpt
from migplan.cli.options import CatalogOpt, ConfigOpt, InventoryOpt, OutputOpt
from migplan.cli.render import emit, grid, handle_errors, info
from migplan.commands.context import build_context
from migplan.commands.fleet import select_hosts
from migplan.inventory import DeclaredGpu, Host, Inventory, SshArgs

app = typer.Typer(help="The fleet inventory.", no_args_is_help=True)


def _gpu_data(g: DeclaredGpu) -> dict[str, Any]:
    return {
        "index": g.index, "model": g.model, "uuid": g.uuid, "mig": g.mig_enabled,
        "layout": g.layout.as_list() if g.layout is not None else None,
        "reserved": g.reserved, "excluded": g.excluded,
        "allowed": list(g.allowed) if g.allowed is not None else None,  # its target's rule (Kubernetes: the strategy)
    }


def _host_data(h: Host) -> dict[str, Any]:
    return {
        "name": h.name, "address": h.address, "port": h.port, "user": h.user, "key_file": h.key_file,
        "become": " ".join(h.become) or None, "groups": list(h.groups), "labels": dict(h.labels),
        "discover": h.discover, "gpus": [_gpu_data(g) for g in h.gpus],
        "hooks": {"pre_apply": list(h.hooks.pre_apply), "post_apply": list(h.hooks.post_apply)},
        "ssh_args": _ssh_data(h.ssh_args) if h.ssh_args else None,
    }


def _ssh_data(a: SshArgs) -> dict[str, Any]:
    return {"proxy": a.proxy, "proxy_jump": [str(j) for j in a.jumps] or None,
            "proxy_command": list(a.command) or None, "known_hosts": a.known_hosts, "notes": list(a.notes)}


def _via(h: Host) -> str:
    """How the inventory says the host is reached (ssh_config's own proxies are applied when connecting)."""
    a = h.ssh_args
    if a is None or a.proxy is None:
        return ""
    if a.proxy == "jump":
        return "jump " + ",".join(str(j) for j in a.jumps)
    if a.proxy == "command":
        return "ProxyCommand " + " ".join(a.command)
    return "direct (proxy none)"


def _slots(catalog: Catalog, g: DeclaredGpu) -> str:
    m = catalog.get(g.model)
    if g.layout is None and g.mig_enabled is None:
        return picture(m, None) + " (MIG off: not declared)"  # how propose takes it (a GPU boots that way)
    return picture(m, g.layout if g.mig_enabled is not False else None)


def fleet_table(inv: Inventory, catalog: Catalog) -> str:
    rows: list[list[Any]] = []
    via = any(_via(h) for h in inv.hosts)  # a VIA column only when the inventory names a proxy
    for h in inv.hosts:
        target = f"{h.user + '@' if h.user else ''}{h.address}{':' + str(h.port) if h.port else ''}"
        extra = [_via(h)] if via else []
        if h.discover and not h.gpus:
            rows.append([h.name, target, *extra, "-", "(discover)", "", ""])
        for g in h.gpus:
            rule = f"only {'/'.join(g.allowed)}" if g.allowed is not None else ""  # e.g. a single-strategy node
            flags = ",".join(f for f, on in (("reserved", g.reserved), ("excluded", g.excluded), (rule, rule)) if on)
            rows.append([h.name, target, *extra, g.index, g.model, _slots(catalog, g), flags])
    gpus = sum(len(h.gpus) for h in inv.hosts)
    heads = ["HOST", "SSH", *(["VIA"] if via else []), "GPU", "MODEL", "LAYOUT", "FLAGS"]
    return grid(rows, heads) + _selection_text(inv) + f"\n\n{len(inv.hosts)} hosts, {gpus} GPUs declared ({inv.source})"


def _selection_text(inv: Inventory) -> str:
    """The hosts left out and why, and how the selection was made (nothing when every host is selected)."""
    if not inv.left_out:
        return ""
    rows = [[lo.name, ", ".join(lo.groups) or "-", lo.reason] for lo in inv.left_out]
    discover = sum(1 for h in inv.hosts if h.discover and not h.gpus)
    reasons: dict[str, int] = {}
    for lo in inv.left_out:
        kind = ("not in the pattern" if lo.reason.startswith("not in ") else
                "service hosts without GPUs" if lo.host is not None else "other")
        reasons[kind] = reasons.get(kind, 0) + 1
    why = ", ".join(f"{n} {kind}" for kind, n in reasons.items())
    ask = ("\n(a service host without GPUs is discovered when --limit selects it or it sets migplan_discover: true)"
           if reasons.get("service hosts without GPUs") else "")
    return (f"\n\nLeft out ({len(inv.left_out)}):\n" + grid(rows, ["HOST", "GROUPS", "REASON"])
            + f"\n\nselected {len(inv.hosts)} of {len(inv.hosts) + len(inv.left_out)} hosts "
            f"({discover} to discover, {len(inv.hosts) - discover} with GPUs declared) by "
            f"{'; then '.join(inv.selected_by) or 'every host'}; left out {len(inv.left_out)}: {why}{ask}")


@app.command("check")
@handle_errors
def check(inventory: InventoryOpt = None, output: OutputOpt = None, config: ConfigOpt = None,
          catalog: CatalogOpt = None,
          limit: Annotated[list[str] | None, typer.Option(
              "--limit", "-l", help="Preview the hosts this Ansible host pattern selects, as discover, status and "
                                    "apply would (comma-separated; repeatable).",
              show_default=False, metavar="HOST-PATTERN")] = None,
          kubeconfig: KubeconfigOpt = None, context: ContextOpt = None, mig_configmap: MigConfigMapOpt = None) -> None:
    """Validate the inventory and print the fleet as a table, with the hosts left out and why."""
    from migplan.adapters.kubectl import KubectlOptions

    ctx = build_context(config, catalog, output, KubectlOptions(kubeconfig=kubeconfig, context=context),
                        mig_configmap)
    inv = select_hosts(ctx.inventory(inventory), limit)
    known = inv.catalog(ctx.catalog)  # with the inventory's GPUs without MIG (Kubernetes labels)
    for m in sorted({known.get(g.model) for _, g in inv.gpus()}, key=lambda m: m.id):
        if not m.mig:
            info(f"note: {m.id} has no MIG: planned as whole GPUs ({m.memory_mib} MiB; {m.source})")
        elif not m.verified:
            info(f"warning: {m.id} is an unverified catalog model; check its profiles with 'migplan catalog show'")
    for note in inv.notes:  # what the source left as it is (Kubernetes: nodes its MIG strategy keeps as they are)
        info(f"note: {note}")
    data = {"source": inv.source, "hosts": [_host_data(h) for h in inv.hosts],
            "left_out": [{"name": lo.name, "groups": list(lo.groups), "reason": lo.reason} for lo in inv.left_out],
            "selected_by": list(inv.selected_by)}
    emit(data, ctx.output, lambda: fleet_table(inv, known))
