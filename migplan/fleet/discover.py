"""Discovery: read each host's GPUs, MIG mode, instances, MIG devices and processes over a runner.

Per host (one connection, commands from `migplan.smi` builders only):
  nvidia-smi --query-gpu=...            GPUs, MIG mode current/pending  -> catalog model
  nvidia-smi -L                         MIG device UUIDs
  nvidia-smi --query-compute-apps=...   processes (pid, GPU UUID, memory)
  nvidia-smi mig -i N -lgi / -lci       GPU instances with placements, compute instances (MIG GPUs)

Everything a host prints is parsed as data by `migplan.smi` (bounded, validated) and checked
against the catalog; nothing from it is ever put on a command line. `--query-compute-apps` names
only the GPU a process runs on (docs/nvidia-smi.md §13: it has no GI/CI field), so a process is
put on a GPU instance when that is unambiguous (a MIG device UUID, or a single instance with a
compute instance); otherwise it is kept as unattributed and every instance of that GPU counts as
busy, so nothing that may be in use is destroyed without consent.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Sequence

from migplan import smi
from migplan.adapters.pool import HostResult, for_each_host
from migplan.adapters.runner import DEFAULT_TIMEOUT, CommandRunner, HostError
from migplan.adapters.smi_session import SmiSession
from migplan.catalog import Catalog, GpuModel
from migplan.errors import CatalogError
from migplan.fleet.host_table import HostTable, differences, host_model, table_from_smi
from migplan.fleet.snapshot import (
    ComputeInstance,
    DiscoveredGpu,
    DiscoveredHost,
    DiscoveredInstance,
    GpuProcess,
    HostFailure,
    Snapshot,
)
from migplan.inventory import Host, Inventory
from migplan.layout import Instance, Layout, check_layout


class DiscoveryError(HostError):
    """The host answered, but with something that does not fit the catalog or itself."""

    code = "discovery-failed"


class UnknownModelError(HostError):
    code = "unknown-model"


# --- one host ---------------------------------------------------------------------------------

def discover_host(runner: CommandRunner, host: Host, catalog: Catalog, *,
                  timeout: float = DEFAULT_TIMEOUT) -> DiscoveredHost:
    """Everything discovery reports about one host; raises a HostError/SmiError when it cannot."""
    s = SmiSession(runner, timeout=timeout)
    infos = s.gpus()
    listing = {g.index: g for g in s.gpu_listing()}
    apps = s.compute_apps()
    notes: list[str] = []
    drivers = _drivers(s, notes) if infos else {}
    if not infos:
        notes.append("nvidia-smi lists no GPUs")
    gpus = []
    for info in sorted(infos, key=lambda i: i.index):
        model = _model(host, info, catalog, notes)
        instances: tuple[DiscoveredInstance, ...] = ()
        table = None
        if model is not None and info.mig_current:
            gi_rows = s.gpu_instances(info.index)
            ci_rows = s.compute_instances(info.index) if gi_rows else []
            table = _table(s, info.index, model, notes)  # after the listings: a broken -lgi fails first
            own = host_model(model, table) if table is not None else model
            devices = listing[info.index].mig_devices if info.index in listing else ()
            instances = _instances(host, info.index, own, gi_rows, ci_rows, devices, notes)
        gpu = _discovered_gpu(host, info, model, instances, apps, notes)
        gpus.append(dataclasses.replace(gpu, driver_version=drivers.get(info.index), table=table))
    return DiscoveredHost(host.name, host.address, tuple(gpus), notes=tuple(notes))


MAX_DIFFERENCES_SHOWN = 8


def _drivers(s: SmiSession, notes: list[str]) -> dict[int, str]:
    """Driver version per GPU; what cannot be read is a note, not a failed host (the version only informs)."""
    try:
        return s.driver_versions()
    except smi.SmiError as err:
        notes.append(f"driver version not read: {err.message}")
        return {}


def _table(s: SmiSession, gpu: int, model: GpuModel, notes: list[str]) -> HostTable | None:
    """The GPU's own -lgip/-lgipp, and a note per difference from the catalog (the host is the truth).
    A table without the whole-GPU profile is not a real one: noted, and the catalog is used."""
    table = table_from_smi(smi.parse_gi_profiles(s.gi_profiles_text(gpu)),
                           smi.parse_gi_placements(s.gi_placements_text(gpu)), gpu)
    if not any(r.size == model.memory_slices for r in table.rows):
        notes.append(f"GPU {gpu}: 'nvidia-smi mig -lgip/-lgipp' list no whole-GPU profile; planned with the "
                     f"catalog's {model.id}")
        return None
    found = differences(model, table)
    if found:
        shown = "; ".join(found[:MAX_DIFFERENCES_SHOWN])
        more = f"; and {len(found) - MAX_DIFFERENCES_SHOWN} more" if len(found) > MAX_DIFFERENCES_SHOWN else ""
        notes.append(f"GPU {gpu}: its MIG profile table differs from the catalog's {model.id} (planned with the "
                     f"host's own numbers): {shown}{more}")
    return table


def _model(host: Host, info: smi.GpuQueryRow, catalog: Catalog, notes: list[str]) -> GpuModel | None:
    try:
        return catalog.match(info.name, memory_total_mib=info.memory_total_mib, pci_device_id=info.pci_device_id)
    except CatalogError:
        if not info.mig_capable:
            notes.append(f"GPU {info.index} ({info.name}) does not support MIG; it is left out of planning")
            return None
        pci = f", PCI device {info.pci_device_id}" if info.pci_device_id else ""
        raise UnknownModelError(
            host.name, f"GPU {info.index} ({info.name}{pci}, {info.memory_total_mib} MiB) is a MIG GPU that the "
            "catalog does not know",
            hint=f"learn it with 'migplan catalog learn --host {host.name} --gpu {info.index} --out FILE' and pass "
                 "FILE with --catalog, or add the model in a catalog override file") from None


def _instances(host: Host, gpu: int, model: GpuModel, gi_rows: Sequence[smi.GpuInstanceRow],
               ci_rows: Sequence[smi.ComputeInstanceRow], devices: Sequence[smi.MigDevice],
               notes: list[str]) -> tuple[DiscoveredInstance, ...]:
    """GPU instances checked against the catalog, with their compute instances and MIG device UUIDs."""
    uuids = _device_uuids(gpu, ci_rows, devices, notes)
    out = []
    for r in gi_rows:
        if not model.has_profile(r.profile_name):
            raise DiscoveryError(host.name, f"GPU {gpu}: GPU instance {r.gi_id} has profile {r.profile_name!r}, "
                                 f"unknown to catalog model {model.id}",
                                 hint=f"check the model with 'migplan catalog learn --host {host.name}'")
        prof = model.profile(r.profile_name)
        if (prof.id, prof.memory_slices) != (r.profile_id, r.size):
            raise DiscoveryError(host.name, f"GPU {gpu}: {r.profile_name} is profile id {r.profile_id} of size "
                                 f"{r.size} here, but id {prof.id} of size {prof.memory_slices} in the catalog "
                                 f"({model.id})", hint=f"re-learn the model with 'migplan catalog learn --host "
                                                       f"{host.name}' and use it with --catalog")
        cis = tuple(ComputeInstance(c.ci_id, c.profile_name, uuids.get((c.gi_id, c.ci_id)))
                    for c in sorted(ci_rows, key=lambda c: c.ci_id) if c.gi_id == r.gi_id)
        out.append(DiscoveredInstance(Instance(r.start, r.profile_name), r.gi_id, cis))
    if len({r.gi_id for r in gi_rows}) != len(gi_rows):
        raise DiscoveryError(host.name, f"GPU {gpu}: nvidia-smi lists a GPU instance id twice")
    conflicts = check_layout(model, Layout.of(i.instance for i in out))
    if conflicts:
        raise DiscoveryError(host.name, f"GPU {gpu}: the reported instances are not a valid {model.id} layout: "
                             + "; ".join(c.message for c in conflicts))
    return tuple(sorted(out, key=lambda i: i.instance))


def _device_uuids(gpu: int, ci_rows: Sequence[smi.ComputeInstanceRow], devices: Sequence[smi.MigDevice],
                  notes: list[str]) -> dict[tuple[int, int], str]:
    """(gi, ci) -> MIG device UUID. `-L` lists devices by ascending GI then CI id (docs/nvidia-smi.md §11); old drivers
    put gi/ci in the UUID itself."""
    if all(d.gi_id is not None and d.ci_id is not None for d in devices) and devices:
        return {(d.gi_id, d.ci_id): d.uuid for d in devices if d.gi_id is not None and d.ci_id is not None}
    cis = sorted(ci_rows, key=lambda c: (c.gi_id, c.ci_id))
    ordered = sorted(devices, key=lambda d: d.device)
    if len(cis) != len(ordered) or any(c.profile_name != d.profile_name for c, d in zip(cis, ordered, strict=False)):
        if devices or cis:
            notes.append(f"GPU {gpu}: 'nvidia-smi -L' and '-lci' disagree; MIG device UUIDs left out")
        return {}
    return {(c.gi_id, c.ci_id): d.uuid for c, d in zip(cis, ordered, strict=True)}


def _discovered_gpu(host: Host, info: smi.GpuQueryRow, model: GpuModel | None,
                    instances: tuple[DiscoveredInstance, ...], apps: Sequence[smi.ComputeApp],
                    notes: list[str]) -> DiscoveredGpu:
    mine = [a for a in apps if a.gpu_uuid == info.uuid]
    by_uuid = {c.uuid: i for i in instances for c in i.compute_instances if c.uuid}
    with_ci = [i for i in instances if i.compute_instances]
    placed: dict[Instance, list[GpuProcess]] = {}
    loose: list[GpuProcess] = []
    for a in apps:
        proc = GpuProcess(a.pid, a.process_name, a.used_memory_mib)
        if a.gpu_uuid in by_uuid:
            placed.setdefault(by_uuid[a.gpu_uuid].instance, []).append(proc)
        elif a in mine and info.mig_current and len(with_ci) == 1:
            placed.setdefault(with_ci[0].instance, []).append(proc)
        elif a in mine:
            loose.append(proc)
    instances = tuple(DiscoveredInstance(i.instance, i.gi_id, i.compute_instances, tuple(placed.get(i.instance, ())))
                      for i in instances)
    if loose and info.mig_current and instances:
        notes.append(f"GPU {info.index}: {len(loose)} process(es) cannot be placed on one GPU instance; "
                     "all its instances count as busy")
    if info.mig_change_pending:
        notes.append(f"GPU {info.index}: MIG mode change pending ({_mode(info.mig_current)} now, "
                     f"{_mode(info.mig_pending)} after a GPU reset)")
    return DiscoveredGpu(
        index=info.index, model=model.id if model else None, name=info.name, uuid=info.uuid,
        pci_bus_id=info.pci_bus_id, memory_total_mib=info.memory_total_mib, mig_capable=info.mig_capable,
        mig_current=bool(info.mig_current), mig_pending=bool(info.mig_pending), instances=instances,
        processes=tuple(loose), reserved=host.is_reserved(info.index), excluded=host.is_excluded(info.index))


def _mode(on: bool | None) -> str:
    return "enabled" if on else "disabled"


# --- the fleet --------------------------------------------------------------------------------

def discover_fleet(
    inventory: Inventory,
    catalog: Catalog,
    connect: Callable[[Host], CommandRunner],
    *,
    parallel: int = 8,
    timeout: float = DEFAULT_TIMEOUT,
    on_done: Callable[[int, int, HostResult[DiscoveredHost]], None] | None = None,
    now: dt.datetime | None = None,
) -> Snapshot:
    """Discover every inventory host (at most `parallel` at once); failed hosts carry their error."""
    taken = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    results = for_each_host(list(inventory.hosts),
                            lambda h: discover_host(connect(h), h, catalog, timeout=timeout),
                            parallel=parallel, on_done=on_done)
    records = []
    for host, res in zip(inventory.hosts, results, strict=True):
        if res.value is not None:
            records.append(res.value)
        else:
            err = res.error
            assert err is not None  # a result has a value or an error
            records.append(DiscoveredHost(host.name, host.address, error=HostFailure(err.code, err.detail, err.hint)))
    return Snapshot(tuple(records), taken_at=taken, inventory=inventory.source)


# --- discovered vs declared -------------------------------------------------------------------

def inventory_drift(host: Host, record: DiscoveredHost) -> list[str]:
    """What the host has that its inventory entry does not say (empty when they agree)."""
    if not record.ok:
        return []
    out = []
    found = {g.index: g for g in record.gpus}
    for spec in host.gpus:
        g = found.get(spec.index)
        if g is None:
            out.append(f"GPU {spec.index}: declared ({spec.model}) but not found")
            continue
        if g.model != spec.model:
            out.append(f"GPU {spec.index}: model is {g.model or g.name}, inventory says {spec.model}")
        if spec.uuid and g.uuid and spec.uuid.lower() != g.uuid.lower():
            out.append(f"GPU {spec.index}: UUID is {g.uuid}, inventory says {spec.uuid}")
        if spec.mig_enabled is not None and spec.mig_enabled != g.mig_current:
            out.append(f"GPU {spec.index}: MIG is {_mode(g.mig_current)}, inventory says {_mode(spec.mig_enabled)}")
        if spec.layout is not None and g.layout is not None and spec.layout != g.layout:
            out.append(f"GPU {spec.index}: layout is {g.layout}, inventory says {spec.layout}")
    if host.gpus and not host.discover:
        declared = {s.index for s in host.gpus}
        out += [f"GPU {g.index}: found ({g.model or g.name}) but not in the inventory"
                for g in record.gpus if g.index not in declared]
    return out
