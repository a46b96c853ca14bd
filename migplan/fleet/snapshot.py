"""What discovery saw, host by host, and the snapshot document that records it (pure).

A snapshot records, per host, every GPU with its model, MIG mode (current and pending), GPU
instances with their placements, compute instances, MIG device UUIDs and processes; or the error
that host failed with; on a vGPU host (`nvidia-smi vgpu` answers) each GPU in vGPU mode also carries its vGPUs
(`GpuVgpu`: supported and creatable types, SR-IOV virtual functions or mdev devices, active vGPUs with their VM and
frame-buffer use). A snapshot with vGPU records is version 2 (`SNAPSHOT_VERSION_VGPU`); one without is written
as version 1, byte for byte as before, and both are read. `Snapshot.fleet_state` turns it into the `FleetState`
that `propose` plans from, in place of the layouts an inventory declares. `snapshot_to_dict` and `parse_snapshot` are
the document's two directions; reading and writing files is `migplan.documents`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from migplan import names, yamldoc
from migplan.catalog import Catalog, Engines, GpuModel
from migplan.catalog.layout import Instance, Layout, check_layout
from migplan.errors import CatalogError
from migplan.fleet.host_table import HostTable, TableRow, host_model
from migplan.fleet.inflight import InFlight
from migplan.model.assigned import ASSIGNMENTS_KIND, BadAssignments, HostAssignments, parse_assignments
from migplan.model.state import FleetState, GpuState
from migplan.yamldoc import Node

SNAPSHOT_VERSION = 1
SNAPSHOT_VERSION_VGPU = 2  # a snapshot with any GPU's `vgpu` record; a migplan that reads only version 1 refuses it
VGPU_DEVICE_KINDS = ("vf", "mdev")
HOST_VGPU_MODES = ("sr-iov", "non-sr-iov")
SNAPSHOT_KIND = "migplan/snapshot"
LEGACY_KINDS = ("migplan-snapshot",)  # written by migplan 0.1 before document kinds were unified


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str | None = None
    used_memory_mib: int | None = None


@dataclass(frozen=True)
class ComputeInstance:
    ci_id: int
    profile: str
    uuid: str | None = None  # the MIG device UUID (`nvidia-smi -L`)


@dataclass(frozen=True)
class DiscoveredInstance:
    """A GPU instance as discovered: placement, ids, compute instances and the processes on it."""

    instance: Instance
    gi_id: int | None = None
    compute_instances: tuple[ComputeInstance, ...] = ()
    processes: tuple[GpuProcess, ...] = ()

    @property
    def busy(self) -> bool:
        return bool(self.processes)


@dataclass(frozen=True)
class VgpuDevice:
    """What carries a vGPU on a KVM host: an SR-IOV virtual function (`vf`, its PCI address; `type_id` 0 when it
    holds none) or an mdev device (`mdev`, its UUID)."""

    kind: str
    address: str
    type_id: int = 0
    type_name: str | None = None  # NVIDIA's name without the nvidia-smi prefix: A100X-2-10C
    gpu_instance_id: int | None = None  # a MIG-backed vGPU's GPU instance


@dataclass(frozen=True)
class ActiveVgpu:
    """A vGPU a running VM holds (`nvidia-smi vgpu -q`)."""

    vgpu_id: int
    type_name: str  # without the prefix: A100X-2-10C
    type_id: int | None = None
    vm_name: str | None = None
    vm_uuid: str | None = None
    device: str | None = None  # the VF address or mdev UUID that carries it, where that is known
    gpu_instance_id: int | None = None
    fb_total_mib: int | None = None
    fb_used_mib: int | None = None


@dataclass(frozen=True)
class GpuVgpu:
    """One GPU in vGPU mode. `board` is the vGPU catalog's board (None: its types are not in the catalog)."""

    host_mode: str  # sr-iov (virtual functions) | non-sr-iov (mdev devices)
    board: str | None = None
    supported: tuple[str, ...] = ()
    creatable: tuple[str, ...] = ()
    total_vfs: int | None = None
    devices: tuple[VgpuDevice, ...] = ()
    vgpus: tuple[ActiveVgpu, ...] = ()

    @property
    def held(self) -> tuple[VgpuDevice, ...]:
        """The devices that hold a vGPU (a VF with a type, every mdev device)."""
        return tuple(d for d in self.devices if d.type_id)


@dataclass(frozen=True)
class DiscoveredGpu:
    """One GPU of a host. `model` is None only for a GPU without MIG that the catalog does not know."""

    index: int
    model: str | None
    name: str
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_total_mib: int | None = None
    mig_capable: bool = True
    mig_current: bool = False
    mig_pending: bool = False
    instances: tuple[DiscoveredInstance, ...] = ()
    processes: tuple[GpuProcess, ...] = ()  # processes not attributed to one GPU instance
    reserved: bool = False
    excluded: bool = False
    driver_version: str | None = None
    table: HostTable | None = None  # the host's own -lgip/-lgipp (read for MIG-enabled GPUs)
    vgpu: GpuVgpu | None = None  # a GPU in vGPU mode on a vGPU host

    @property
    def layout(self) -> Layout | None:
        return Layout.of(i.instance for i in self.instances) if self.mig_current else None

    @property
    def busy_instances(self) -> tuple[Instance, ...]:
        """Instances with processes, or that a vGPU sits on; with unattributed processes on a MIG GPU, all of them
        (to be safe)."""
        if self.mig_current and self.processes:
            return tuple(sorted(i.instance for i in self.instances))
        held = self.vgpu_instances
        return tuple(sorted(i.instance for i in self.instances if i.busy or i.gi_id in held))

    @property
    def vgpu_instances(self) -> frozenset[int]:
        """The GPU instance ids MIG-backed vGPUs sit on (a device holding the type, or an active vGPU)."""
        if self.vgpu is None:
            return frozenset()
        return frozenset({d.gpu_instance_id for d in self.vgpu.held if d.gpu_instance_id is not None}
                         | {a.gpu_instance_id for a in self.vgpu.vgpus if a.gpu_instance_id is not None})

    @property
    def mode_change_pending(self) -> bool:
        return self.mig_capable and self.mig_current != self.mig_pending

    def planning_model(self, catalog: Catalog) -> GpuModel | None:
        """The model to plan this GPU with: built from its own table where that differs from the catalog, and
        with its driver's rules (`GpuModel.for_driver`; an unknown driver is taken as the oldest): the profiles
        an older driver lacks are left out where the GPU printed no table of its own (its table says what it
        offers), and the combinations an older driver refuses are enforced (MIG User Guide, "Concepts": 4g.20gb
        with 3g.20gb before R510). A combination the GPU's current layout holds is evidently allowed by its driver
        (which made it; an unknown driver, an old snapshot): it is planned as the driver that lifted it."""
        if self.model is None:
            return None
        base = catalog.get(self.model)
        own = host_model(base, self.table) if self.table is not None else base
        holding = [i.profile for i in self.layout.instances] if self.layout is not None else []
        return own.for_host(self.driver_version, holding, own_table=self.table is not None)

    def state(self, host: str, model: str | None = None) -> GpuState | None:
        if self.model is None or not self.mig_capable:
            return None
        return GpuState(host=host, index=self.index, model=model or self.model, uuid=self.uuid,
                        mig_enabled=self.mig_current,
                        mig_pending=self.mig_pending if self.mode_change_pending else None,
                        layout=self.layout, busy=self.busy_instances, reserved=self.reserved,
                        excluded=self.excluded, whole_gpu_busy=not self.mig_current and (
                            bool(self.processes) or self.holds_vgpus))

    @property
    def holds_vgpus(self) -> bool:
        """Whether any vGPU exists on this GPU (held by a device, or active)."""
        return self.vgpu is not None and bool(self.vgpu.held or self.vgpu.vgpus)


@dataclass(frozen=True)
class HostFailure:
    code: str
    message: str
    hint: str | None = None


@dataclass(frozen=True)
class DiscoveredHost:
    name: str
    address: str | None = None
    gpus: tuple[DiscoveredGpu, ...] = ()
    error: HostFailure | None = None
    notes: tuple[str, ...] = ()
    assignments: HostAssignments | None = None  # the host's assignments.json (what the last apply placed here)
    inflight: InFlight | None = None  # the host's inflight.json: a change an apply left unfinished (fleet.inflight)

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(frozen=True)
class Snapshot:
    hosts: tuple[DiscoveredHost, ...]
    taken_at: str = ""  # ISO 8601 UTC
    inventory: str | None = None

    @property
    def failed(self) -> tuple[DiscoveredHost, ...]:
        return tuple(h for h in self.hosts if not h.ok)

    def host(self, name: str) -> DiscoveredHost | None:
        return next((h for h in self.hosts if h.name == name), None)

    def fleet_state(self, source: str = "discovery", catalog: Catalog | None = None) -> FleetState:
        """The MIG-capable GPUs of the hosts that answered (failed hosts contribute nothing). With `catalog`,
        a GPU whose own profile table differs from its catalog model is planned with a model built from
        that table (`FleetState.models` carries those models)."""
        gpus, models, assigned = [], {}, []
        for h in self.hosts:
            if not h.ok:
                continue
            if h.assignments is not None:
                assigned.append((h.name, h.assignments))
            for g in h.gpus:
                own = g.planning_model(catalog) if catalog is not None else None
                st = g.state(h.name, own.id if own is not None else None)
                if st is None:
                    continue
                gpus.append(st)
                if own is not None and own.id != g.model:
                    models[own.id] = own
        return FleetState(tuple(gpus), source=source, models=tuple(models.values()), assigned=tuple(assigned))


# --- writing ----------------------------------------------------------------------------------

def _process(p: GpuProcess) -> dict[str, Any]:
    return {"pid": p.pid, "name": p.name, "used_memory_mib": p.used_memory_mib}


def _gpu_dict(g: DiscoveredGpu) -> dict[str, Any]:
    return {
        "index": g.index, "model": g.model, "name": g.name, "uuid": g.uuid, "pci_bus_id": g.pci_bus_id,
        "memory_total_mib": g.memory_total_mib,
        "mig": {"capable": g.mig_capable, "current": g.mig_current, "pending": g.mig_pending},
        "reserved": g.reserved, "excluded": g.excluded,
        "instances": [{
            "profile": i.instance.profile, "start": i.instance.start, "gi_id": i.gi_id,
            "compute_instances": [{"ci_id": c.ci_id, "profile": c.profile, "uuid": c.uuid}
                                  for c in i.compute_instances],
            "processes": [_process(p) for p in i.processes],
        } for i in g.instances],
        "processes": [_process(p) for p in g.processes],
        "driver_version": g.driver_version,
        "profile_table": None if g.table is None else [_row_dict(r) for r in g.table.rows],
        **({} if g.vgpu is None else {"vgpu": vgpu_dict(g.vgpu)}),
    }


def vgpu_dict(v: GpuVgpu) -> dict[str, Any]:
    return {"host_mode": v.host_mode, "board": v.board, "supported": list(v.supported),
            "creatable": list(v.creatable), "total_vfs": v.total_vfs,
            "devices": [{"kind": d.kind, "address": d.address, "type_id": d.type_id, "type_name": d.type_name,
                         "gpu_instance_id": d.gpu_instance_id} for d in v.devices],
            "vgpus": [{"vgpu_id": a.vgpu_id, "type_name": a.type_name, "type_id": a.type_id, "vm_name": a.vm_name,
                       "vm_uuid": a.vm_uuid, "device": a.device, "gpu_instance_id": a.gpu_instance_id,
                       "fb_total_mib": a.fb_total_mib, "fb_used_mib": a.fb_used_mib} for a in v.vgpus]}


def _row_dict(r: TableRow) -> dict[str, Any]:
    e = r.engines
    return {"name": r.name, "id": r.id, "memory_gib": r.memory_gib, "max_count": r.max_count, "sm_count": r.sm_count,
            "starts": list(r.starts), "size": r.size,
            "engines": {"ce": e.ce, "dec": e.dec, "enc": e.enc, "jpeg": e.jpeg, "ofa": e.ofa}}


def host_dict(h: DiscoveredHost) -> dict[str, Any]:
    out: dict[str, Any] = {"name": h.name, "address": h.address}
    if h.error is not None:
        out["error"] = {"code": h.error.code, "message": h.error.message, "hint": h.error.hint}
    out["notes"] = list(h.notes)
    out["gpus"] = [_gpu_dict(g) for g in h.gpus]
    if h.assignments is not None:
        a = h.assignments
        out["assignments"] = {"plan": a.plan, "written_at": a.written_at, "workloads": [
            {"name": x.workload, "gpu": x.gpu, "instance": str(x.instance) if x.instance else None} for x in a.items]}
    return out


def snapshot_to_dict(s: Snapshot) -> dict[str, Any]:
    vgpu = any(g.vgpu is not None for h in s.hosts for g in h.gpus)
    return {"version": SNAPSHOT_VERSION_VGPU if vgpu else SNAPSHOT_VERSION, "kind": SNAPSHOT_KIND,
            "taken_at": s.taken_at, "inventory": s.inventory, "hosts": [host_dict(h) for h in s.hosts]}


# --- reading ----------------------------------------------------------------------------------

def _opt(f: dict[str, Node], key: str) -> Node | None:
    n = f.get(key)
    return None if n is None or n.is_null else n


def _opt_str(f: dict[str, Node], key: str) -> str | None:
    n = _opt(f, key)
    return None if n is None else n.str()


def _opt_int(f: dict[str, Node], key: str) -> int | None:
    n = _opt(f, key)
    return None if n is None else n.int(minimum=0)


def _processes(node: Node | None) -> tuple[GpuProcess, ...]:
    if node is None:
        return ()
    out = []
    for n in node.list():
        f = n.fields({"pid", "name", "used_memory_mib"}, {"pid"})
        out.append(GpuProcess(pid=f["pid"].int(minimum=0), name=_opt_str(f, "name"),
                               used_memory_mib=_opt_int(f, "used_memory_mib")))
    return tuple(out)


def _instance(node: Node) -> DiscoveredInstance:
    f = node.fields({"profile", "start", "gi_id", "compute_instances", "processes"}, {"profile", "start"})
    cis = []
    for n in (f["compute_instances"].list() if _opt(f, "compute_instances") else []):
        cf = n.fields({"ci_id", "profile", "uuid"}, {"ci_id", "profile"})
        cis.append(ComputeInstance(cf["ci_id"].int(minimum=0), cf["profile"].str(), _opt_str(cf, "uuid")))
    return DiscoveredInstance(Instance(f["start"].int(minimum=0), f["profile"].str()), _opt_int(f, "gi_id"),
                        tuple(cis), _processes(_opt(f, "processes")))


_GPU_KEYS = {"index", "model", "name", "uuid", "pci_bus_id", "memory_total_mib", "mig", "reserved", "excluded",
             "instances", "processes", "driver_version", "profile_table", "vgpu"}
_VGPU_KEYS = {"host_mode", "board", "supported", "creatable", "total_vfs", "devices", "vgpus"}
_DEVICE_KEYS = {"kind", "address", "type_id", "type_name", "gpu_instance_id"}
_ACTIVE_KEYS = {"vgpu_id", "type_name", "type_id", "vm_name", "vm_uuid", "device", "gpu_instance_id", "fb_total_mib",
                "fb_used_mib"}
_VGPU_TYPE = re.compile(r"(?a)[A-Za-z0-9][A-Za-z0-9 .]{0,60}-[0-9][A-Za-z0-9-]{0,20}")
_DEVICE_ADDRESS = re.compile(r"(?a)[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]"
                             r"|[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}")
_VM_UUID = re.compile(r"(?a)[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12}")
MAX_VGPU_DEVICES = 1024
_GIB = re.compile(r"(?a)[0-9]{1,5}\.[0-9]{2}")
_DRIVER = re.compile(r"(?a)[0-9]{2,4}(?:\.[0-9]{1,4}){1,3}")
_ROW_KEYS = {"name", "id", "memory_gib", "max_count", "sm_count", "starts", "size", "engines"}


def _row(node: Node) -> TableRow:
    f = node.fields(_ROW_KEYS, _ROW_KEYS)
    name = f["name"].str()
    if not names.PROFILE_NAME.fullmatch(name):
        f["name"].fail(f"{name!r} is not a MIG profile name")
    gib = f["memory_gib"].str()
    if not _GIB.fullmatch(gib):
        f["memory_gib"].fail(f"{gib!r} is not a size in GiB with two decimals, as -lgip prints it")
    size = f["size"].int(minimum=1, maximum=names.MAX_MIG_SLICES)
    starts = tuple(n.int(minimum=0, maximum=names.MAX_MIG_SLICES - size) for n in f["starts"].list())
    ef = f["engines"].fields({"ce", "dec", "enc", "jpeg", "ofa"}, {"ce", "dec", "enc", "jpeg", "ofa"})
    engines = Engines(**{k: v.int(minimum=0, maximum=64) for k, v in ef.items()})
    return TableRow(name=name, id=f["id"].int(minimum=0, maximum=255), memory_gib=gib,
                    max_count=f["max_count"].int(minimum=0, maximum=names.MAX_MIG_SLICES),
                    sm_count=f["sm_count"].int(minimum=0, maximum=1024), starts=starts, size=size, engines=engines)


def _table(node: Node | None) -> HostTable | None:
    if node is None:
        return None
    rows = tuple(_row(n) for n in node.list())
    if len({r.name for r in rows}) != len(rows) or len({r.id for r in rows}) != len(rows):
        node.fail("a profile name or id is listed twice")
    return HostTable(rows)


def _type_name(node: Node) -> str:
    v = node.str()
    if not _VGPU_TYPE.fullmatch(v):
        node.fail(f"{v[:60]!r} is not a vGPU type name")
    return v


def _opt_type(f: dict[str, Node], key: str) -> str | None:
    n = _opt(f, key)
    return None if n is None else _type_name(n)


def _matching(f: dict[str, Node], key: str, pattern: re.Pattern[str], what: str) -> str | None:
    v = _opt_str(f, key)
    if v is not None and not pattern.fullmatch(v):
        f[key].fail(f"{v[:60]!r} is not {what}")
    return v


def _vgpu(node: Node) -> GpuVgpu:
    f = node.fields(_VGPU_KEYS, {"host_mode"})
    mode = f["host_mode"].str()
    if mode not in HOST_VGPU_MODES:
        f["host_mode"].fail(f"host_mode must be one of {', '.join(HOST_VGPU_MODES)}, not {mode!r}")
    devices = []
    for n in (f["devices"].list() if _opt(f, "devices") else []):
        df = n.fields(_DEVICE_KEYS, {"kind", "address"})
        kind = df["kind"].str()
        if kind not in VGPU_DEVICE_KINDS:
            df["kind"].fail(f"kind must be vf or mdev, not {kind!r}")
        address = _matching(df, "address", _DEVICE_ADDRESS, "a PCI address or an mdev UUID")
        assert address is not None  # required
        tid = _opt_int(df, "type_id")
        devices.append(VgpuDevice(kind, address, tid or 0, _opt_type(df, "type_name"),
                                  _opt_int(df, "gpu_instance_id")))
    if len(devices) > MAX_VGPU_DEVICES or len({d.address for d in devices}) != len(devices):
        f["devices"].fail("a device is listed twice, or there are too many")
    vgpus = []
    for n in (f["vgpus"].list() if _opt(f, "vgpus") else []):
        af = n.fields(_ACTIVE_KEYS, {"vgpu_id", "type_name"})
        vgpus.append(ActiveVgpu(af["vgpu_id"].int(minimum=0, maximum=2**32 - 1), _type_name(af["type_name"]),
                                _opt_int(af, "type_id"), _opt_str(af, "vm_name"),
                                _matching(af, "vm_uuid", _VM_UUID, "a VM UUID"),
                                _matching(af, "device", _DEVICE_ADDRESS, "a PCI address or an mdev UUID"),
                                _opt_int(af, "gpu_instance_id"), _opt_int(af, "fb_total_mib"),
                                _opt_int(af, "fb_used_mib")))
    if len({a.vgpu_id for a in vgpus}) != len(vgpus):
        f["vgpus"].fail("a vGPU ID is listed twice")
    names = {k: tuple(_type_name(n) for n in f[k].list()) if _opt(f, k) else () for k in ("supported", "creatable")}
    return GpuVgpu(mode, _opt_str(f, "board"), names["supported"], names["creatable"], _opt_int(f, "total_vfs"),
                   tuple(devices), tuple(vgpus))


def _gpu(node: Node, catalog: Catalog, version: int = SNAPSHOT_VERSION) -> DiscoveredGpu:
    f = node.fields(_GPU_KEYS, {"index", "model", "name", "mig"})
    mf = f["mig"].fields({"capable", "current", "pending"}, {"capable", "current", "pending"})
    model = _opt_str(f, "model")
    uuid = _opt_str(f, "uuid")
    if uuid is not None and not names.GPU_UUID.match(uuid):
        f["uuid"].fail(f"{uuid!r} is not a GPU UUID (GPU-xxxxxxxx-...)")
    capable, current = mf["capable"].bool(), mf["current"].bool()
    instances = tuple(_instance(n) for n in (f["instances"].list() if _opt(f, "instances") else []))
    if instances and not current:
        f["instances"].fail("a GPU with MIG disabled has no GPU instances")
    table = _table(_opt(f, "profile_table"))
    if model is not None:
        try:
            gpu_model = catalog.get(model)
        except CatalogError as err:
            f["model"].fail(err.message, hint="pass the catalog file the snapshot was taken with (--catalog)")
        model = gpu_model.id
        if table is not None and not any(r.size == gpu_model.memory_slices for r in table.rows):
            f["profile_table"].fail(f"lists no whole-GPU profile of {gpu_model.id} ({gpu_model.memory_slices} "
                                    "memory slices): not a table nvidia-smi prints")
        own = host_model(gpu_model, table) if table is not None else gpu_model  # the host's rules, if it told us
        conflicts = check_layout(own, Layout.of(i.instance for i in instances))
        if conflicts:
            f["instances"].fail("invalid layout: " + "; ".join(c.message for c in conflicts))
    elif capable:
        f["model"].fail("a MIG-capable GPU needs its catalog model")
    return DiscoveredGpu(
        index=f["index"].int(minimum=0), model=model, name=f["name"].str(), uuid=uuid,
        pci_bus_id=_opt_str(f, "pci_bus_id"), memory_total_mib=_opt_int(f, "memory_total_mib"),
        mig_capable=capable, mig_current=current, mig_pending=mf["pending"].bool(), instances=instances,
        processes=_processes(_opt(f, "processes")),
        reserved=f["reserved"].bool() if "reserved" in f else False,
        excluded=f["excluded"].bool() if "excluded" in f else False,
        driver_version=_driver(_opt(f, "driver_version")), table=table, vgpu=_vgpu_of(f, version))


def _vgpu_of(f: dict[str, Node], version: int) -> GpuVgpu | None:
    node = _opt(f, "vgpu")
    if node is None:
        return None
    if version < SNAPSHOT_VERSION_VGPU:
        f["vgpu"].fail(f"a version {version} snapshot has no vGPU records (they are version {SNAPSHOT_VERSION_VGPU})")
    return _vgpu(node)


def _driver(node: Node | None) -> str | None:
    if node is None:
        return None
    v = node.str()
    if not _DRIVER.fullmatch(v):
        node.fail(f"{v!r} is not a driver version such as 535.129.03")
    return v


def _host(node: Node, catalog: Catalog, version: int = SNAPSHOT_VERSION) -> DiscoveredHost:
    f = node.fields({"name", "address", "error", "notes", "gpus", "assignments"}, {"name"})
    name = f["name"].str()
    if not names.HOST_NAME.match(name):
        f["name"].fail(f"host name {name!r} must be letters, digits, '.', '_' or '-'")
    error = None
    if _opt(f, "error") is not None:
        ef = f["error"].fields({"code", "message", "hint"}, {"code", "message"})
        error = HostFailure(ef["code"].str(), ef["message"].str(), _opt_str(ef, "hint"))
    gpus: list[DiscoveredGpu] = []
    for n in (f["gpus"].list() if _opt(f, "gpus") else []):
        g = _gpu(n, catalog, version)
        if any(x.index == g.index for x in gpus):
            n.fail(f"GPU index {g.index} listed twice")
        gpus.append(g)
    notes = tuple(n.str() for n in f["notes"].list()) if _opt(f, "notes") else ()
    return DiscoveredHost(name, _opt_str(f, "address"), tuple(gpus), error, notes,
                          _assignments(_opt(f, "assignments"), name))


def _assignments(node: Node | None, host: str) -> HostAssignments | None:
    """The host's assignments as the snapshot recorded them: checked by the reader of the host's own file."""
    if node is None:
        return None
    f = node.fields({"plan", "written_at", "workloads"}, {"plan", "written_at", "workloads"})
    keys = {"name", "gpu", "instance"}
    listed = [{"name": w["name"].str(), "gpu": w["gpu"].int(minimum=0),
               "instance": None if w["instance"].is_null else w["instance"].str()}
              for w in (n.fields(keys, keys) for n in f["workloads"].list())]
    doc = {"version": 1, "kind": ASSIGNMENTS_KIND, "host": host, "plan": f["plan"].str(),
           "written_at": f["written_at"].str(), "workloads": listed}
    try:
        return parse_assignments(json.dumps(doc).encode(), host)
    except BadAssignments as err:
        node.fail(f"assignments: {err}")


def parse_snapshot(root: Node, catalog: Catalog) -> Snapshot:
    if not root.is_map:
        root.fail("a snapshot is a mapping with 'version: 1' and 'hosts:' (written by 'migplan discover')")
    f = root.fields({"version", "kind", "taken_at", "inventory", "hosts"}, {"hosts"})
    version = f["version"].int() if "version" in f else SNAPSHOT_VERSION
    yamldoc.check_version(f, root, SNAPSHOT_VERSION_VGPU if version == SNAPSHOT_VERSION_VGPU else SNAPSHOT_VERSION,
                          "snapshot")
    if "kind" in f and f["kind"].str() not in (SNAPSHOT_KIND, *LEGACY_KINDS):
        f["kind"].fail(f"this is a {f['kind'].str()!r} document, not a {SNAPSHOT_KIND}")
    hosts: list[DiscoveredHost] = []
    for n in f["hosts"].list():
        h = _host(n, catalog, version)
        if any(x.name == h.name for x in hosts):
            n.fail(f"host {h.name!r} listed twice")
        hosts.append(h)
    return Snapshot(tuple(hosts), taken_at=_opt_str(f, "taken_at") or "", inventory=_opt_str(f, "inventory"))


__all__ = [
    "SNAPSHOT_KIND", "SNAPSHOT_VERSION", "SNAPSHOT_VERSION_VGPU", "ActiveVgpu", "ComputeInstance", "GpuVgpu",
    "VgpuDevice", "DiscoveredGpu", "DiscoveredHost", "DiscoveredInstance",
    "GpuProcess", "HostFailure", "Snapshot", "host_dict", "parse_snapshot", "snapshot_to_dict",
]
