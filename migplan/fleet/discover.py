"""Discovery: read each host's GPUs, MIG mode, instances, MIG devices and processes over a runner.

Per host (one connection, commands from `migplan.smi` builders only; `--query-gpu` first, then the
rest in one round trip, `READS`):
  nvidia-smi --query-gpu=...            GPUs, MIG mode current/pending  -> catalog model
  nvidia-smi -L                         MIG device UUIDs
  nvidia-smi --query-compute-apps=...   processes (pid, GPU UUID, memory)
  nvidia-smi mig -lgi / -lci            GPU instances with placements, compute instances (MIG GPUs)
  nvidia-smi mig -lgip / -lgipp         each MIG GPU's own profile table
  nvidia-smi                            the Processes table: each process's GPU index, GI and CI id

Everything a host prints is parsed as data by `migplan.smi` (bounded, validated) and checked
against the catalog; nothing from it is ever put on a command line. `--query-compute-apps` names
only the GPU a process runs on (docs/nvidia-smi.md §13: it has no GI/CI field); plain `nvidia-smi`
prints the GI and CI id of each process (§12), so a process is put on the GPU instance with that
GI id (its CI one of that instance's compute instances). Where that table says nothing (N/A outside
MIG mode, no table, a process it does not list, a read that failed: noted), a process is put on a
GPU instance only when that is unambiguous (a MIG device UUID, or a single instance with a compute
instance); otherwise it is kept as unattributed and every instance of that GPU counts as busy, so
nothing that may be in use is destroyed without consent. An instance without a process is idle.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from migplan import smi
from migplan.adapters.pool import HostResult, for_each_host
from migplan.adapters.runner import (
    DEFAULT_TIMEOUT,
    BadCommand,
    BecomeError,
    CommandRunner,
    HostError,
    OutputTooLarge,
    RemoteFileMissing,
    TransferError,
)
from migplan.adapters.smi_session import BatchedReads, SmiSession
from migplan.catalog import Catalog, GpuModel
from migplan.catalog.layout import Instance, Layout, check_layout
from migplan.errors import CatalogError
from migplan.fleet.host_table import HostTable, differences, host_model, table_from_smi
from migplan.fleet.inflight import INFLIGHT_FILE, MAX_INFLIGHT_BYTES, BadInFlight, InFlight, parse_inflight
from migplan.fleet.snapshot import (
    ComputeInstance,
    DiscoveredGpu,
    DiscoveredHost,
    DiscoveredInstance,
    GpuProcess,
    HostFailure,
    Snapshot,
)
from migplan.fleet.vgpu_discover import read_vgpu
from migplan.inventory import Host, Inventory
from migplan.model.assigned import (
    ASSIGNMENTS_FILE,
    MAX_ASSIGNMENTS_BYTES,
    BadAssignments,
    HostAssignments,
    parse_assignments,
)
from migplan.smi import usage


class DiscoveryError(HostError):
    """The host answered, but with something that does not fit the catalog or itself."""

    code = "discovery-failed"


class UnknownModelError(HostError):
    code = "unknown-model"


# --- one host ---------------------------------------------------------------------------------

def discover_host(runner: CommandRunner, host: Host, catalog: Catalog, *,
                  timeout: float = DEFAULT_TIMEOUT, assignments: bool = True, vgpu: bool = False,
                  sysfs_root: str = "/") -> DiscoveredHost:
    """Everything discovery reports about one host; raises a HostError/SmiError when it cannot. With
    `assignments`, also the host's `assignments.json` (what the last apply placed there: `model.assigned`);
    apply's own re-read does without it (its checks depend on the GPUs alone). With `vgpu`, also each GPU's vGPUs
    where the host is a vGPU host (`vgpu_discover.read_vgpu`; `sysfs_root` is for tests only: module notes there)."""
    s, infos = _first_reads(runner, timeout)
    listing = {g.index: g for g in s.gpu_listing()}
    apps = s.compute_apps()
    notes: list[str] = []
    processes = functools.cache(lambda: _process_table(s, notes))  # plain nvidia-smi, once
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
        gpu = _discovered_gpu(host, info, model, instances, apps, notes, processes)
        gpus.append(dataclasses.replace(gpu, driver_version=drivers.get(info.index), table=table))
    if vgpu and gpus:
        gpus = read_vgpu(runner, host.name, gpus, notes, timeout=timeout, sysfs_root=sysfs_root)
    placed = read_assignments(runner, host, notes, timeout) if assignments else None
    inflight = read_inflight(runner, host, notes, timeout)  # before the notes are taken: it may add one
    return DiscoveredHost(host.name, host.address, tuple(gpus), notes=tuple(notes), assignments=placed,
                          inflight=inflight)


def read_assignments(runner: CommandRunner, host: Host, notes: list[str],
                     timeout: float = DEFAULT_TIMEOUT) -> HostAssignments | None:
    """The host's `<state_dir>/assignments.json` (None: there is none, or it cannot be used: then a note says
    why and the host is planned as if it had none, as before any apply)."""
    return _host_file(runner, host, ASSIGNMENTS_FILE, MAX_ASSIGNMENTS_BYTES, parse_assignments, BadAssignments,
                      notes, timeout, "planned without the assignments")


def read_inflight(runner: CommandRunner, host: Host, notes: list[str],
                  timeout: float = DEFAULT_TIMEOUT) -> InFlight | None:
    """The host's `<state_dir>/inflight.json`: the change an apply had under way (None: none, or unusable)."""
    return _host_file(runner, host, INFLIGHT_FILE, MAX_INFLIGHT_BYTES, parse_inflight, BadInFlight, notes, timeout,
                      "an interrupted change cannot be recognised from it")


_Doc = TypeVar("_Doc")


def _host_file(runner: CommandRunner, host: Host, name: str, most: int, parse: Callable[[bytes, str], _Doc],
               bad: type[ValueError], notes: list[str], timeout: float, without: str) -> _Doc | None:
    path = f"{host.state_dir}/{name}"
    try:
        data = runner.get_file(path, max_bytes=most, timeout=timeout)
    except RemoteFileMissing:
        return None
    except (TransferError, OutputTooLarge, BecomeError) as err:  # a lost connection is the host's failure
        # BecomeError: a sudoers rule that allows nvidia-smi alone refuses the read (`sudo -n head ...`)
        notes.append(f"{path} not read ({err.detail}); {without}")
        return None
    except BadCommand as err:  # a state_dir no remote path can be (the inventory checks it; kept as a note)
        notes.append(f"{path} not read ({err}); {without}")
        return None
    try:
        return parse(data, host.name)
    except bad as err:
        notes.append(f"{path} not used: {err}; {without}")
        return None


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


# What a host's discovery reads after `--query-gpu`, in one round trip (`_first_reads`; apply's FIRST_READS holds
# them all): a per-GPU listing `mig -i N -lgi/-lci/-lgip/-lgipp` is answered by the host-wide one (`BatchedReads`;
# without -i they list every MIG-enabled GPU, docs/nvidia-smi.md §3, §4, §6, §9), and plain `nvidia-smi` is the one
# text that names each process's GPU and compute instance (its Processes table, §12; §13 has no such field).
MIG_READS: tuple[tuple[str, ...], ...] = (tuple(usage.plain()), *((smi.NVIDIA_SMI, "mig", listing) for listing in
                                                                  ("-lgi", "-lci", "-lgip", "-lgipp")))
READS: tuple[tuple[str, ...], ...] = (tuple(smi.query_gpus()), tuple(smi.list_gpus()), tuple(smi.query_compute_apps()),
                                      tuple(smi.query_driver_versions()), *MIG_READS)


def _first_reads(runner: CommandRunner, timeout: float) -> tuple[SmiSession, list[smi.GpuQueryRow]]:
    """The host's session and GPUs: `--query-gpu` on its own first (a host that cannot answer fails there, after one
    connection attempt), then the rest of `READS` in one round trip (`BatchedReads.prefetch`; the MIG reads only when
    a GPU has MIG on). A `BatchedReads` runner is the caller's own batch (apply's) and is used as it is."""
    if isinstance(runner, BatchedReads):
        s = SmiSession(runner, timeout=timeout)
        return s, s.gpus()
    reads = BatchedReads(runner)
    s = SmiSession(reads, timeout=timeout)
    infos = s.gpus()
    mig = any(i.mig_current for i in infos)
    reads.prefetch([a for a in READS[1:] if mig or a not in MIG_READS], timeout=timeout)  # False: read one by one
    return s, infos


def _process_table(s: SmiSession, notes: list[str]) -> list[usage.ProcessRow] | None:
    """The rows of plain `nvidia-smi`'s Processes table ([] when it lists none, or prints no such table). None when
    it cannot be read: that is noted, and the processes are placed as without it (it is never the host's failure)."""
    without = "processes are placed on GPU instances without its Processes table"
    try:
        done = s.run(usage.plain())
    except HostError as err:  # e.g. a timeout: the host's other reads stand
        notes.append(f"plain 'nvidia-smi' not read ({err.detail}); {without}")
        return None
    if not done.ok:
        notes.append(f"plain 'nvidia-smi' failed (exit {done.exit_code}); {without}")
        return None
    try:
        return usage.parse_processes(done.stdout)
    except smi.SmiError as err:
        notes.append(f"plain 'nvidia-smi': {err.message}; {without}")
        return None


def placed_processes(gpu: int, uuid: str | None, mig: bool, instances: Sequence[DiscoveredInstance],
                     apps: Sequence[smi.ComputeApp], rows: Sequence[usage.ProcessRow] | None = None,
                     notes: list[str] | None = None) -> tuple[dict[Instance, list[GpuProcess]], list[GpuProcess]]:
    """One GPU's processes: by GPU instance where that is known, else unattributed (a MIG GPU's every instance then
    counts as busy). Known: from a MIG device UUID in `--query-compute-apps`; else from the GI and CI id plain
    `nvidia-smi` prints for the PID on this GPU (`rows`, docs/nvidia-smi.md §12); else when the GPU has one instance
    with a compute instance. Without `rows` (not read, N/A, or the PID not in them), the other two rules alone."""
    by_uuid = {c.uuid: i.instance for i in instances for c in i.compute_instances if c.uuid}
    with_ci = [i.instance for i in instances if i.compute_instances]
    in_table = _by_table(gpu, instances, rows, notes) if mig and rows else {}
    placed: dict[Instance, list[GpuProcess]] = {}
    loose: list[GpuProcess] = []
    for a in apps:
        proc = GpuProcess(a.pid, a.process_name, a.used_memory_mib)
        mine = uuid is not None and a.gpu_uuid == uuid
        if a.gpu_uuid in by_uuid:
            where: tuple[Instance, ...] = (by_uuid[a.gpu_uuid],)
        else:
            where = in_table.get(a.pid, ()) if mine else ()
        if not where and mine and mig and len(with_ci) == 1:
            where = (with_ci[0],)
        for inst in where:
            here = placed.setdefault(inst, [])
            if all(p.pid != proc.pid for p in here):  # one entry per process and instance
                here.append(proc)
        if mine and not where:
            loose.append(proc)
    return placed, loose


def _by_table(gpu: int, instances: Sequence[DiscoveredInstance], rows: Sequence[usage.ProcessRow],
              notes: list[str] | None) -> dict[int, tuple[Instance, ...]]:
    """PID -> the GPU instances the Processes table puts it on, for each PID whose every row on this GPU names the GI
    id of an instance `-lgi` lists and the CI id of one of its compute instances (`-lci`). A PID with a row that
    does not is left to the other rules (noted once per GPU: the two listings disagree)."""
    known = {i.gi_id: (i.instance, {c.ci_id for c in i.compute_instances}) for i in instances if i.gi_id is not None}
    found: dict[int, set[Instance]] = {}
    unknown: dict[int, usage.ProcessRow] = {}
    for r in rows:
        if r.gpu != gpu:
            continue
        inst, cis = known.get(r.gi_id, (None, set())) if r.gi_id is not None else (None, set())
        if inst is None or r.ci_id not in cis:
            unknown[r.pid] = r
            continue
        found.setdefault(r.pid, set()).add(inst)
    odd = [r for r in unknown.values() if r.gi_id is not None]
    if odd and notes is not None:
        r = odd[0]
        notes.append(f"GPU {gpu}: plain 'nvidia-smi' lists {len(odd)} process(es) on a GPU or compute instance that "
                     f"'nvidia-smi mig -lgi'/'-lci' do not list (PID {r.pid}: GPU instance {r.gi_id}, compute "
                     f"instance {'N/A' if r.ci_id is None else r.ci_id}); they are placed without it")
    return {pid: tuple(sorted(v)) for pid, v in found.items() if pid not in unknown}


def busy_without_table(gpu: DiscoveredGpu, apps: Sequence[smi.ComputeApp]) -> tuple[Instance, ...]:
    """`gpu`'s busy instances as the rules without plain `nvidia-smi`'s Processes table place `apps` (what a
    discovery that could not read that table, or a migplan before it read it, reported): for apply's stale check."""
    placed, loose = placed_processes(gpu.index, gpu.uuid, gpu.mig_current, gpu.instances, apps)
    return dataclasses.replace(gpu, processes=tuple(loose), instances=tuple(
        dataclasses.replace(i, processes=tuple(placed.get(i.instance, ()))) for i in gpu.instances)).busy_instances


def _discovered_gpu(host: Host, info: smi.GpuQueryRow, model: GpuModel | None,
                    instances: tuple[DiscoveredInstance, ...], apps: Sequence[smi.ComputeApp],
                    notes: list[str],
                    table: Callable[[], Sequence[usage.ProcessRow] | None] | None = None) -> DiscoveredGpu:
    """One GPU as discovered. `table`: plain `nvidia-smi`'s Processes rows, asked only for a MIG GPU with processes."""
    mig = bool(info.mig_current)
    rows = table() if table is not None and mig and instances and any(a.gpu_uuid == info.uuid for a in apps) \
        else None
    placed, loose = placed_processes(info.index, info.uuid, mig, instances, apps, rows, notes)
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

def root_of(sysfs_root: str | Mapping[str, str], host: str) -> str:
    """The sysfs root of one host: the one root, or the host's in a mapping ("/" for a host it does not name)."""
    return sysfs_root if isinstance(sysfs_root, str) else sysfs_root.get(host, "/")


def discover_fleet(
    inventory: Inventory,
    catalog: Catalog,
    connect: Callable[[Host], CommandRunner],
    *,
    parallel: int = 8,
    timeout: float = DEFAULT_TIMEOUT,
    on_done: Callable[[int, int, HostResult[DiscoveredHost]], None] | None = None,
    now: dt.datetime | None = None,
    vgpu: bool = False,
    sysfs_root: str | Mapping[str, str] = "/",
) -> Snapshot:
    """Discover every inventory host (at most `parallel` at once); failed hosts carry their error. `vgpu`: also
    the vGPUs of vGPU hosts (`migplan discover` and `status` ask for them); `sysfs_root`: tests only, one root for
    every host or one per host name (each simulated host has its own tree)."""
    taken = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    results = for_each_host(list(inventory.hosts),
                            lambda h: discover_host(connect(h), h, catalog, timeout=timeout, vgpu=vgpu,
                                                    sysfs_root=root_of(sysfs_root, h.name)),
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
