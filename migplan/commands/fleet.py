"""Commands that read live hosts over SSH: discover, status and catalog learn.

Each takes a `FleetRequest` (which hosts, how to reach them) and a `Report` for progress, and returns
data; per-host failures are part of the result (`Snapshot.failed`), never an exception.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from migplan import host_patterns, smi
from migplan.adapters.pool import HostResult
from migplan.adapters.runner import DEFAULT_TIMEOUT, CommandRunner, LocalRunner
from migplan.adapters.smi_session import SmiSession
from migplan.adapters.ssh_options import SshOptions
from migplan.catalog import Catalog, GpuModel, VgpuCatalog, VgpuModel, builtin_vgpu_catalog
from migplan.catalog.catalog import pci_device
from migplan.catalog.layout import picture
from migplan.commands import DEFAULT_PARALLEL, Report, quiet
from migplan.commands.context import Context
from migplan.errors import CatalogError, InputError
from migplan.fleet.discover import discover_fleet, inventory_drift
from migplan.fleet.snapshot import DiscoveredGpu, DiscoveredHost, Snapshot, host_dict
from migplan.inventory import Host, Inventory, LeftOut
from migplan.text import printable


@dataclass(frozen=True)
class FleetRequest:
    """Which hosts to contact and how."""

    inventory: str | None = None
    limit: tuple[str, ...] = ()  # host or group names, wildcards; empty: every host
    parallel: int = DEFAULT_PARALLEL
    timeout: float = DEFAULT_TIMEOUT  # seconds per remote command
    ssh: SshOptions = field(default_factory=SshOptions)


def limit_patterns(limit: tuple[str, ...] | list[str] | None) -> list[str]:
    """`["a,b", "c"]` -> `["a", "b", "c"]`."""
    return [p.strip() for item in (limit or ()) for p in item.split(",") if p.strip()]


def select_hosts(inventory: Inventory, limit: tuple[str, ...] | list[str] | None) -> Inventory:
    """`--limit` as an Ansible host pattern (`gpu_nodes:!drained`, `a100*,&rack12`, `~regex`; each
    --limit value is one pattern string): migplan.host_patterns, over host names and groups. The service hosts an
    Ansible inventory without `migplan_limit` holds back (`LeftOut.host`) are candidates too: a pattern that
    selects one asks for it. The hosts the pattern leaves out join `left_out`, with that reason."""
    patterns = limit_patterns(limit)
    if not patterns:
        if not inventory.hosts and inventory.left_out:  # say so, rather than contact nothing and succeed
            first = inventory.left_out[0]
            raise InputError(f"no host of {inventory.source} is selected: all {len(inventory.left_out)} are left out "
                             f"({first.name}: {first.reason}{', ...' if len(inventory.left_out) > 1 else ''})",
                             hint="'migplan inventory check' lists them and why; --limit PATTERN selects hosts")
        return inventory
    spare = [lo.host for lo in inventory.left_out if lo.host is not None]
    candidates = (*inventory.hosts, *spare)
    pinv = host_patterns.from_membership((h.name, h.groups) for h in candidates)
    keep = set(host_patterns.select(pinv, [item for item in limit or () if item.strip()]))
    shown = ",".join(item for item in limit or () if item.strip())
    left = (*(lo for lo in inventory.left_out if lo.host is None),
            *(LeftOut(h.name, h.groups, f"not in --limit {shown!r}") for h in candidates if h.name not in keep))
    asked = [h.name for h in spare if h.name in keep]
    how = f"--limit {shown!r}" + (f" (selecting service hosts without GPUs: {', '.join(asked)})" if asked else "")
    chosen = dataclasses.replace(inventory, hosts=tuple(h for h in candidates if h.name in keep), left_out=left,
                                 selected_by=(*inventory.selected_by, how))
    if not chosen.hosts:
        raise InputError(f"--limit {','.join(patterns)} matches no host of {inventory.source}",
                         hint="list the hosts with 'migplan inventory check'")
    return chosen


def _progress(report: Report) -> Callable[[int, int, HostResult[DiscoveredHost]], None]:
    def on_done(done: int, total: int, result: HostResult[DiscoveredHost]) -> None:
        if result.error is None and result.value is not None:
            n = len(result.value.gpus)
            report(f"[{done}/{total}] {result.host}: ok, {n} GPU{'s' if n != 1 else ''} ({result.duration_s:.1f} s)")
        elif result.error is not None:
            report(f"[{done}/{total}] {result.host}: FAILED ({result.error.code}) "
                   f"{printable(result.error.detail, 200)}")
    return on_done


def runner_for(ssh: Any, host: Host) -> CommandRunner:
    """The host's runner: this machine's processes for `connection: local`, else its SSH connection."""
    if host.connection == "local":
        return LocalRunner(become=host.become, host=host.name)
    runner: CommandRunner = ssh.runner(host)
    return runner


def discover_hosts(ctx: Context, inventory: Inventory, req: FleetRequest, report: Report = quiet) -> Snapshot:
    """Discover the given hosts (already selected) over SSH."""
    from migplan.adapters.ssh import SshFleet  # paramiko only for commands that connect

    report(f"discovering {len(inventory.hosts)} host(s), {req.parallel} at a time")
    with SshFleet(req.ssh) as ssh:
        return discover_fleet(inventory, ctx.catalog, lambda h: runner_for(ssh, h), parallel=req.parallel,
                              timeout=req.timeout,
                              on_done=_progress(report), vgpu=True)


def discover(ctx: Context, req: FleetRequest, report: Report = quiet) -> Snapshot:
    """Every selected inventory host's GPUs, MIG mode, instances and processes."""
    return discover_hosts(ctx, select_hosts(ctx.inventory(req.inventory), req.limit), req, report)


# --- status ------------------------------------------------------------------------------------

def _picture(catalog: Catalog, g: DiscoveredGpu) -> str:
    if g.vgpu is not None and not g.mig_current:
        return vgpu_picture(vgpu_slices(g))
    if g.model is None or not g.mig_capable:
        return "(no MIG)"
    return picture(catalog.get(g.model), g.layout)


VGPU_PICTURE_WIDTH = 47  # as wide as two 8-slice MIG pictures: a 4 GB vGPU of a 24 GB L4 still shows its type


def vgpu_slices(g: DiscoveredGpu, vcat: VgpuCatalog | None = None) -> tuple[int, list[tuple[str, int]]]:
    """A time-sliced vGPU GPU's frame buffer (the vGPU board's nominal one, else the GPU's memory) and each vGPU
    that holds part of it (type, MiB): the devices holding a type, else (sysfs not read) the active vGPUs."""
    assert g.vgpu is not None
    v = g.vgpu
    board: VgpuModel | None = None
    if v.board is not None:
        try:
            board = (vcat or builtin_vgpu_catalog()).get(v.board)
        except CatalogError:
            board = None
    fb_of = {a.type_name: a.fb_total_mib for a in v.vgpus if a.fb_total_mib}

    def fb(name: str | None) -> int:
        if name is None:
            return 0
        if board is not None:
            try:
                return board.vgpu_type(name).frame_buffer_mib
            except CatalogError:
                pass
        return fb_of.get(name) or 0

    held = [(d.type_name or f"id {d.type_id}", fb(d.type_name)) for d in v.held] or \
        [(a.type_name, a.fb_total_mib or fb(a.type_name)) for a in v.vgpus]
    capacity = board.capacity_mib if board is not None else (g.memory_total_mib or sum(m for _, m in held) or 1)
    return capacity, held


def vgpu_picture(slices: tuple[int, list[tuple[str, int]]], width: int = VGPU_PICTURE_WIDTH) -> str:
    """Each vGPU as its share of the GPU's frame buffer, as a MIG picture draws instances: `|L4-8C        |   |`
    (blank: frame buffer no vGPU holds). A vGPU of unknown size gets one narrow cell."""
    capacity, held = slices
    cells: list[str] = []
    used = 0
    for name, mib in held:
        share = max(2, round(mib / capacity * (width + 1))) if capacity > 0 else 2
        share = min(share, width + 1 - used) if used < width + 1 else 0
        if share < 2:
            break
        cells.append(name[:share - 1].ljust(share - 1))
        used += share
    if used < width + 1:
        cells.append(" " * (width - used))
    return "|" + "|".join(cells) + "|"


def vgpu_rows(g: DiscoveredGpu) -> list[dict[str, Any]]:
    """Each vGPU of a GPU for `status`: its type, where it sits (VF or mdev device, GPU instance), its VM and the
    frame buffer the VM uses (active vGPUs), or `no VM` (a device that holds a type no VM runs on). Where
    `nvidia-smi vgpu -q` cannot tell which of several VFs holding a type a VM runs on (discovery left its device
    unknown), its `device` is `one of` them, and those VFs' idle ones are one row with `count`."""
    assert g.vgpu is not None
    by_gi = {i.gi_id: i.instance for i in g.instances}
    linked = {a.device for a in g.vgpu.vgpus if a.device}
    loose: dict[int, list[str]] = {}  # type id -> held devices no active vGPU is tied to
    for d in g.vgpu.held:
        if d.address not in linked:
            loose.setdefault(d.type_id, []).append(d.address)
    unknown = {t: sum(1 for a in g.vgpu.vgpus if a.device is None and a.type_id == t) for t in loose}

    def where(gi: int | None) -> str | None:
        inst = by_gi.get(gi) if gi is not None else None
        return str(inst) if inst is not None else None

    out: list[dict[str, Any]] = []
    for a in g.vgpu.vgpus:
        device = a.device
        if device is None and a.type_id in loose and unknown.get(a.type_id):
            device = "one of " + ", ".join(loose[a.type_id])
        out.append({"vgpu_id": a.vgpu_id, "type": a.type_name, "device": device, "instance": where(a.gpu_instance_id),
                    "vm": a.vm_name or a.vm_uuid, "fb_used_mib": a.fb_used_mib, "fb_total_mib": a.fb_total_mib})
    shown: set[int] = set()
    for d in g.vgpu.held:
        if d.address in linked or d.type_id in shown:
            continue
        row: dict[str, Any] = {"vgpu_id": None, "type": d.type_name or f"id {d.type_id}", "device": d.address,
                               "instance": where(d.gpu_instance_id), "vm": None, "fb_used_mib": None,
                               "fb_total_mib": None}
        if unknown.get(d.type_id):
            idle = len(loose[d.type_id]) - unknown[d.type_id]
            shown.add(d.type_id)
            if idle <= 0:
                continue
            row.update(device="one of " + ", ".join(loose[d.type_id]), instance=None, count=idle)
        out.append(row)
    return out


def status_data(snapshot: Snapshot, inventory: Inventory | None, catalog: Catalog) -> dict[str, Any]:
    """The snapshot per host with slot pictures, busy instances, pending mode changes and drift."""
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
            if g.vgpu is not None:
                gd["vgpu_rows"] = vgpu_rows(g)
        hosts.append(entry)
    failed = [h.name for h in snapshot.hosts if not h.ok]
    return {"taken_at": snapshot.taken_at, "hosts": hosts,
            "summary": {"hosts": len(snapshot.hosts), "failed": failed,
                        "gpus": sum(len(h.gpus) for h in snapshot.hosts),
                        "drift": sum(len(h["drift"]) for h in hosts)}}


@dataclass(frozen=True)
class StatusResult:
    snapshot: Snapshot
    data: dict[str, Any]


def status(ctx: Context, req: FleetRequest, *, snapshot_path: str | None = None,
           report: Report = quiet, plan_path: str | None = None) -> StatusResult:
    """Live (over SSH) or from a saved snapshot; compared with the inventory when there is one."""
    inv: Inventory | None = None
    if snapshot_path:
        from migplan import documents

        snap = documents.load_snapshot(snapshot_path, ctx.catalog)
        if req.inventory or ctx.config.inventory:
            inv = ctx.inventory(req.inventory)
        if req.limit:
            if inv is not None:
                keep = {h.name for h in select_hosts(inv, req.limit).hosts}
            else:
                pinv = host_patterns.from_membership((h.name, ()) for h in snap.hosts)
                keep = set(host_patterns.select(pinv, [item for item in req.limit if item.strip()]))
            snap = Snapshot(tuple(h for h in snap.hosts if h.name in keep), snap.taken_at, snap.inventory)
    else:
        inv = select_hosts(ctx.inventory(req.inventory), req.limit)
        snap = discover_hosts(ctx, inv, req, report)
    data = status_data(snap, inv, ctx.catalog)
    if plan_path:  # where the GPUs are not as planned, e.g. other placements after the MIG manager ran
        add_plan_drift(data, snap, plan_path, ctx.catalog)
    return StatusResult(snap, data)


def add_plan_drift(data: dict[str, Any], snap: Snapshot, plan_path: str, catalog: Catalog) -> None:
    """Each host entry gets `plan_drift` (messages) and the summary a count (mig_parted.plan_drift)."""
    drift = plan_drift(snap, plan_path, catalog)
    for entry, h in zip(data["hosts"], snap.hosts, strict=True):
        entry["plan_drift"] = drift.get(h.name, [])
    data["summary"]["plan_drift"] = sum(len(e["plan_drift"]) for e in data["hosts"])


def plan_drift(snap: Snapshot, plan_path: str, catalog: Catalog) -> dict[str, list[str]]:
    """Per host, the GPUs whose observed layout is not the plan's target (mig_parted.plan_drift)."""
    from migplan import documents, mig_parted

    plan = documents.load_plan(plan_path, catalog)
    targets = {g.key: g.target for g in plan.gpus}
    return {h.name: [d.message for d in mig_parted.plan_drift([(h.name, g.index, g.layout) for g in h.gpus],
                                                                targets)] for h in snap.hosts}


# --- catalog learn -------------------------------------------------------------------------------

# Product names nvidia-smi prints (without "NVIDIA ") -> architecture, first match wins. Names seen in real
# output or NVIDIA's product lists (docs/mig-geometry.md §9, §11): B100/B200/B300, GB200/GB300 and the RTX PRO
# Blackwell cards; H100/H200/H20/H800 and GH200; A100/A30/A800 and the PG506 boards (Ampere).
_ARCH_BY_NAME = (
    (re.compile(r"(?ai)\bblackwell\b"), "blackwell"),
    (re.compile(r"(?ai)^(?:GB[123]\d\d|B[123]\d\d)(?:\b|[A-Z-])"), "blackwell"),
    (re.compile(r"(?ai)^(?:GH[12]\d\d|H[12]\d{1,2}|H800)(?:\b|[A-Z-])"), "hopper"),
    (re.compile(r"(?ai)^(?:A100|A30|A800|PG506)(?:\b|[A-Z-])"), "ampere"),
)


def guess_model(name: str) -> tuple[str, str | None]:
    """`NVIDIA H100 80GB HBM3` -> ('H100-80GB-HBM3', 'hopper'); None when the name tells no architecture
    (then `catalog learn` asks for --architecture)."""
    base = re.sub(r"^NVIDIA\s+", "", name.strip())
    model_id = re.sub(r"[^A-Za-z0-9.]+", "-", base).strip("-") or "learned-gpu"
    arch = next((a for pattern, a in _ARCH_BY_NAME if pattern.search(base)), None)
    return model_id, arch


@dataclass(frozen=True)
class LearnRequest:
    host: str
    gpu: int = 0
    model_id: str | None = None
    architecture: str | None = None


def learn(ctx: Context, req: FleetRequest, what: LearnRequest) -> GpuModel:
    """A catalog model learned from one host's `nvidia-smi mig -lgip`/`-lgipp`."""
    inv = ctx.inventory(req.inventory)
    target: Host | None = inv.host(what.host)
    if target is None:
        raise InputError(f"host {what.host!r} is not in {inv.source}",
                         hint="list the hosts with 'migplan inventory check'")
    from migplan.adapters.ssh import SshFleet

    with SshFleet(req.ssh) as ssh:
        session = SmiSession(runner_for(ssh, target), timeout=req.timeout)
        infos = {i.index: i for i in session.gpus()}
        if what.gpu not in infos:
            raise InputError(f"{what.host} has no GPU {what.gpu} (GPUs: {sorted(infos)})")
        gi = infos[what.gpu]
        if not gi.mig_current:
            raise InputError(f"{what.host} GPU {what.gpu} ({printable(gi.name, 60)}) is not in MIG mode; nvidia-smi "
                             "lists MIG profiles only for MIG-enabled GPUs",
                             hint="enable MIG on that GPU first, or pick another --gpu")
        lgip = session.gi_profiles_text(what.gpu)
        lgipp = session.gi_placements_text(what.gpu)
    guessed_id, guessed_arch = guess_model(gi.name)
    arch = what.architecture or guessed_arch
    if arch is None:
        raise InputError(f"cannot tell the architecture of {printable(gi.name, 60)!r}", hint="pass --architecture")
    pci = [pci_device(gi.pci_device_id)] if gi.pci_device_id else []
    return smi.learn_model(lgip, lgipp, what.model_id or guessed_id, architecture=arch, gpu=what.gpu,
                           smi_names=[gi.name], pci_device_ids=pci,
                           source=f"learned from {what.host} GPU {what.gpu} with nvidia-smi mig -lgip/-lgipp")
