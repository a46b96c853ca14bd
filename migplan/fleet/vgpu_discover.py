"""Discovery of a vGPU host: each GPU in vGPU mode with its types, virtual functions or mdev devices, active vGPUs.

Over the host's runner, after the GPUs are read (`discover.discover_host(..., vgpu=True)`), in four round trips:

  nvidia-smi vgpu                     is this a vGPU host? (`No supported devices in vGPU mode`: no; a
                                      nvidia-smi without the `vgpu` command: no) -> GPUs in vGPU mode
  nvidia-smi vgpu -q / -s / -c        active vGPUs (type, VM, frame buffer), supported and creatable types
  ls -1 <sysfs>/bus/pci/devices/PF    SR-IOV (sriov_totalvfs, virtfnN) or mdev (mdev_supported_types)
  ls -1 <sysfs>/bus/mdev/devices      the host's mdev devices
  readlink virtfnN..., mdev devices   each VF's address; each mdev device's parent and type
  cat VF/nvidia/current_vgpu_type, gpu_instance_id, creatable_vgpu_types; mdev type names

Commands are argv from `migplan.smi.vgpu` and `migplan.smi.sysfs` builders; what the host prints is parsed by
them (bounded; an `SmiParseError` names the command). Once the summary says the host is a vGPU host, output of
`-q`, `-s` or `-c` that cannot be read, or a failure (the driver gone mid-read), fails the host with that error: a
vGPU host is not planned from half its vGPUs. A summary that fails or cannot be read is a note (the probe runs on
every host, and a bare-metal host must not fail on it); a sysfs read that fails or cannot be read is a note (the
devices are then not known: status says so), since `nvidia-smi vgpu -q` alone says which vGPUs run.

`sysfs_root` is where `/sys` is: `/` on every real host. It is a keyword of the Python API only (no option, no
inventory key, no environment variable): tests point it at the vGPU simulator's tree (tests/sim_vgpu, whose `ls`
and `readlink` are the real programs). Types are matched against migplan's vGPU catalog; a type it does not know
is a note, never a failure.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from migplan import smi
from migplan.adapters.runner import DEFAULT_TIMEOUT, BecomeError, CommandRunner, Completed, run_many
from migplan.catalog import VgpuCatalog, VgpuModel, builtin_vgpu_catalog
from migplan.catalog.vgpu import parse_type_name, smi_type_name
from migplan.errors import CatalogError
from migplan.fleet.snapshot import ActiveVgpu, DiscoveredGpu, GpuVgpu, VgpuDevice
from migplan.smi import sysfs
from migplan.smi import vgpu as sv
from migplan.text import printable

MAX_NOTES_PER_GPU = 6
MAX_VFS = 256  # per GPU (sriov_totalvfs is 16 to 64 on the boards migplan knows): a bound on what a host makes us read
MAX_MDEVS = 512  # per host


def read_vgpu(runner: CommandRunner, host: str, gpus: Sequence[DiscoveredGpu], notes: list[str], *,
              timeout: float = DEFAULT_TIMEOUT, sysfs_root: str = "/",
              catalog: VgpuCatalog | None = None) -> list[DiscoveredGpu]:
    """`gpus` with the `vgpu` record of each GPU in vGPU mode (unchanged where the host is no vGPU host)."""
    root = sysfs.check_root(sysfs_root)
    done = runner.run(sv.vgpu_summary(), timeout=timeout)
    try:
        if not _answers(done):
            return list(gpus)
    except smi.SmiError as err:  # the probe runs on every host: its failure is a note, never the host's failure
        notes.append(f"'nvidia-smi vgpu' failed ({err.message}); vGPUs not read")
        return list(gpus)
    try:
        summary = sv.parse_vgpu_summary(done.stdout)
    except smi.SmiParseError as err:  # the probe itself: a host it cannot tell is read as a host without vGPUs
        notes.append(f"'nvidia-smi vgpu' printed what is not its vGPU summary ({err.message}); vGPUs not read")
        return list(gpus)
    by_bus = {sysfs.bdf(g.pci_bus_id): g for g in gpus if g.pci_bus_id}
    chosen: list[tuple[DiscoveredGpu, str]] = []
    for s in summary.gpus:
        pf = sysfs.bdf(s.pci_bus_id)
        g = by_bus.get(pf)
        if g is None:
            notes.append(f"'nvidia-smi vgpu' lists GPU {s.index} at {s.pci_bus_id}, which --query-gpu does not")
            continue
        chosen.append((g, pf))
    if not chosen:
        return list(gpus)
    reader = _Reader(runner, timeout)
    fixed = [sv.vgpu_query(), sv.vgpu_supported(), sv.vgpu_creatable()]
    pf_dirs = [sysfs.list_dir(sysfs.pci_path(root, pf)) for _, pf in chosen]
    mdev_dir = sysfs.list_dir(sysfs.mdev_devices_path(root))
    first = reader.batch([*fixed, *pf_dirs, mdev_dir])
    q, sup, cre = (reader.smi(a, d) for a, d in zip(fixed, first[:3], strict=True))
    active = {sysfs.bdf(x.pci_bus_id): x.vgpus for x in sv.parse_vgpu_query(q)}
    supported = {sysfs.bdf(x.pci_bus_id): x.types for x in sv.parse_vgpu_types(sup, "nvidia-smi vgpu -s -v")}
    creatable = {sysfs.bdf(x.pci_bus_id): x.types for x in sv.parse_vgpu_types(cre, "nvidia-smi vgpu -c")}
    entries = {pf: reader.listing(a, d, notes, f"GPU {g.index}: {a[-1]}")
               for (g, pf), a, d in zip(chosen, pf_dirs, first[3:3 + len(chosen)], strict=True)}
    mdevs = reader.listing(mdev_dir, first[-1], notes, "/sys/bus/mdev/devices", missing_ok=True) or []
    layout = _Layout(root, chosen, entries, mdevs)
    layout.read(reader, notes)
    vcat = catalog if catalog is not None else builtin_vgpu_catalog()
    out = []
    for g in gpus:
        mine = next((p for c, p in chosen if c is g), None)
        if mine is None:
            out.append(g)
            continue
        record = _record(g, mine, layout, active.get(mine, ()), supported.get(mine, ()), creatable.get(mine, ()), vcat,
                         notes)
        out.append(dataclasses.replace(g, vgpu=record))
    return out


def _answers(done: Completed) -> bool:
    """Whether `nvidia-smi vgpu` answered as on a vGPU host; False where no GPU is in vGPU mode or nvidia-smi has
    no `vgpu` command (a host without the vGPU manager); the typed error for any other failure."""
    if done.ok and not sv.is_no_vgpu(done.stdout):
        return True
    text = f"{done.stdout}\n{done.stderr}"
    if sv.NO_VGPU in text:
        return False
    err = smi.classify_failure(sv.vgpu_summary(), done.exit_code, done.stdout, done.stderr)
    if isinstance(err, smi.InvalidArgumentError | smi.NotSupportedError):
        return False
    raise err


class _Reader:
    """Batches of reads over one runner (one round trip each where the runner can)."""

    def __init__(self, runner: CommandRunner, timeout: float) -> None:
        self.runner = runner
        self.timeout = timeout

    def batch(self, argvs: Sequence[Sequence[str]]) -> list[Completed]:
        """The commands' results. A become prefix that refuses some of them (a sudoers rule for nvidia-smi alone
        refuses `sudo -n ls`) fails the whole batch: then each runs on its own, a refused one read as failed."""
        if not argvs:
            return []
        try:
            return run_many(self.runner, argvs, timeout=self.timeout)
        except BecomeError:
            out = []
            for a in argvs:
                try:
                    out.append(self.runner.run(list(a), timeout=self.timeout))
                except BecomeError as err:
                    if a[0] == smi.NVIDIA_SMI:
                        raise
                    out.append(Completed(tuple(a), 126, "", err.detail))
            return out

    @staticmethod
    def smi(argv: Sequence[str], done: Completed) -> str:
        if not done.ok:
            raise smi.classify_failure(argv, done.exit_code, done.stdout, done.stderr)
        return done.stdout

    @staticmethod
    def listing(argv: Sequence[str], done: Completed, notes: list[str], what: str, *,
                missing_ok: bool = False) -> list[str] | None:
        """A directory's names; None and a note where it cannot be read (no note for a missing one if `missing_ok`:
        /sys/bus/mdev/devices exists only where mdev is loaded)."""
        if not done.ok:
            if not missing_ok:
                notes.append(f"{what}: not read ({printable(done.stderr or done.stdout, 160) or 'no output'}); "
                             "its virtual functions and mdev devices are not known")
            return None
        try:
            return sysfs.parse_listing(done.stdout, " ".join(argv))
        except smi.SmiParseError as err:
            notes.append(f"{what}: {err.message}; its virtual functions and mdev devices are not known")
            return None

    @staticmethod
    def text(done: Completed) -> str | None:
        return done.stdout if done.ok else None


class _Layout:
    """The sysfs side of the vGPU GPUs: VFs with their types, mdev devices with their parents and types."""

    def __init__(self, root: str, chosen: Sequence[tuple[DiscoveredGpu, str]], entries: dict[str, list[str] | None],
                 mdevs: list[str]) -> None:
        self.root = root
        self.chosen = chosen
        self.entries = entries
        self.problems: dict[str, list[str]] = {}  # PF ("" for the host's mdev devices) -> what could not be read
        self.mdev_uuids = [m for m in mdevs if _is_uuid(m)][:MAX_MDEVS]
        if len([m for m in mdevs if _is_uuid(m)]) > MAX_MDEVS:
            self._problem("", f"more than {MAX_MDEVS} mdev devices; the first {MAX_MDEVS} are read")
        self.vfs: dict[str, list[str]] = {}  # PF -> its VFs, by virtfn number
        self.total_vfs: dict[str, int] = {}
        self.vf_type: dict[str, int] = {}
        self.vf_gi: dict[str, int | None] = {}
        self.names: dict[str, dict[int, str]] = {}  # PF -> type id -> name, as the host prints it
        self.mdev_parent: dict[str, str] = {}  # mdev UUID -> parent (the PF or one of its VFs)
        self.mdev_type: dict[str, int] = {}

    def _problem(self, pf: str, text: str) -> None:
        self.problems.setdefault(pf, []).append(text)

    def read(self, reader: _Reader, notes: list[str]) -> None:
        root = self.root
        second: list[list[str]] = []
        keys: list[tuple[str, str]] = []
        for _, pf in self.chosen:
            names = self.entries.get(pf) or []
            fns = sysfs.virtfns(names)
            if len(fns) > MAX_VFS:
                self._problem(pf, f"{len(fns)} virtual functions listed; the first {MAX_VFS} are read")
                fns = fns[:MAX_VFS]
            if fns:
                second.append(sysfs.read_links([sysfs.pci_path(root, pf, n) for _, n in fns]))
                keys.append(("virtfn", pf))
            if "sriov_totalvfs" in names:
                second.append(sysfs.read_file(sysfs.pci_path(root, pf, "sriov_totalvfs")))
                keys.append(("total", pf))
            if "mdev_supported_types" in names:
                second.append(sysfs.list_dir(sysfs.pci_path(root, pf, "mdev_supported_types")))
                keys.append(("types", pf))
        if self.mdev_uuids:
            paths = [p for u in self.mdev_uuids for p in (sysfs.mdev_devices_path(root, u),
                                                           sysfs.mdev_devices_path(root, u, "mdev_type"))]
            second.append(sysfs.read_links(paths))
            keys.append(("mdevs", ""))
        type_dirs: dict[str, list[int]] = {}
        for (kind, pf), argv, done in zip(keys, second, reader.batch(second), strict=True):
            what = " ".join(argv[:2] + argv[2:3]) + (" ..." if len(argv) > 3 else "")
            if not done.ok:
                self._problem(pf, f"'{what}' failed ({printable(done.stderr or done.stdout, 120) or 'no output'})")
                continue
            try:
                self._take(kind, pf, argv, done.stdout, what, type_dirs)
            except smi.SmiError as err:
                self._problem(pf, err.message)
        self._third(reader, type_dirs)
        for pf in ["", *(pf for _, pf in self.chosen)]:
            for text in self.problems.get(pf, [])[:MAX_NOTES_PER_GPU]:
                notes.append(f"sysfs of {pf or 'the mdev devices'}: {text}")

    def _take(self, kind: str, pf: str, argv: Sequence[str], out: str, what: str,
              type_dirs: dict[str, list[int]]) -> None:
        if kind == "virtfn":
            links = sysfs.parse_links(out, len(argv) - 2, what)
            self.vfs[pf] = [sysfs.link_bdf(sysfs.component(x), what) for x in links]
        elif kind == "total":
            self.total_vfs[pf] = sysfs.parse_count(out, what, 4096)
        elif kind == "types":
            type_dirs[pf] = sysfs.mdev_type_ids(sysfs.parse_listing(out, what))
        else:
            links = sysfs.parse_links(out, len(argv) - 2, what)
            for n, uuid in enumerate(self.mdev_uuids):  # ../../pci/devices/<parent>/<uuid>
                if sysfs.component(links[2 * n]) != uuid:
                    raise smi.SmiParseError(f"{what}: mdev device {uuid} links to {links[2 * n][:80]!r}")
                self.mdev_parent[uuid] = sysfs.link_bdf(sysfs.component(links[2 * n], 2), what)
                self.mdev_type[uuid] = sysfs.link_type_id(sysfs.component(links[2 * n + 1]), what)


    def _third(self, reader: _Reader, type_dirs: dict[str, list[int]]) -> None:
        """Each VF's current_vgpu_type, gpu_instance_id and creatable_vgpu_types; each mdev type's name (a VF without
        an `nvidia/` directory, mdev on each VF, is left out with a note: not read yet)."""
        root = self.root
        third: list[list[str]] = []
        keys: list[tuple[str, str, str, int]] = []
        for pf, vfs in self.vfs.items():
            for vf in vfs:
                for attr in ("current_vgpu_type", "gpu_instance_id", "creatable_vgpu_types"):
                    third.append(sysfs.read_file(sysfs.pci_path(root, vf, "nvidia", attr)))
                    keys.append((attr, pf, vf, 0))
        for pf, ids in type_dirs.items():
            for tid in ids:
                third.append(sysfs.read_file(sysfs.mdev_type_path(root, pf, tid, "name")))
                keys.append(("name", pf, pf, tid))
        unread: dict[str, list[tuple[str, str]]] = {}  # PF -> (VF, stderr) whose current_vgpu_type was not read
        for (attr, pf, dev, tid), argv, done in zip(keys, third, reader.batch(third), strict=True):
            what = argv[-1].rsplit("/sys/", 1)[-1]
            if not done.ok:
                if attr == "current_vgpu_type":
                    unread.setdefault(pf, []).append((dev, done.stderr))
                continue
            try:
                if attr == "current_vgpu_type":
                    self.vf_type[dev] = sysfs.parse_current_vgpu_type(done.stdout, what)
                elif attr == "gpu_instance_id":
                    self.vf_gi[dev] = sysfs.parse_gpu_instance_id(done.stdout, what)
                elif attr == "creatable_vgpu_types":
                    for i, name in sysfs.parse_creatable_vgpu_types(done.stdout, what):
                        self.names.setdefault(pf, {})[i] = name
                else:
                    self.names.setdefault(pf, {})[tid] = sysfs.parse_one_line(done.stdout, what)
            except smi.SmiError as err:
                self._problem(pf, err.message)
        for pf, missed in unread.items():
            self._unread(pf, missed)

    def _unread(self, pf: str, missed: list[tuple[str, str]]) -> None:
        """One note for the VFs whose `nvidia/current_vgpu_type` could not be read: without that file (mdev
        devices on each VF, vGPU 16 and earlier) their vGPUs are the mdev devices whose parent they are."""
        absent = [vf for vf, err in missed if "No such file" in err]
        if absent and len(absent) == len(missed):
            if not any(self.mdev_parent.get(u) in absent for u in self.mdev_uuids):
                self._problem(pf, f"{len(absent)} virtual function(s) have no nvidia/current_vgpu_type and hold no "
                                  "mdev device; what they may hold is not known")
            return
        vf, err = next((m for m in missed if m[0] not in absent), missed[0])
        self._problem(pf, f"nvidia/current_vgpu_type of {len(missed)} virtual function(s) not read ({vf}: "
                          f"{printable(err.rsplit(': ', 1)[-1], 80) or 'no output'}); what they hold is not known")


def _is_uuid(name: str) -> bool:
    try:
        sysfs.mdev_uuid(name)
    except smi.SmiCommandError:
        return False
    return True


def _name(raw: str) -> str:
    return smi_type_name(raw)


def _board(vcat: VgpuCatalog, names: Sequence[str]) -> VgpuModel | None:
    """The vGPU board whose prefix the types' names carry (`A100X-2-10C` -> A100-HGX-40GB), None if none or several."""
    boards = set()
    for n in names:
        try:
            boards.add(parse_type_name(n).board)
        except CatalogError:
            continue
    found = [m for b in sorted(boards) for m in vcat.find(b) if m.board == b]
    return found[0] if len(found) == 1 else None


def _record(g: DiscoveredGpu, pf: str, lay: _Layout, active: Sequence[sv.ActiveVgpu],
            supported: Sequence[sv.TypeRow], creatable: Sequence[sv.TypeRow], vcat: VgpuCatalog,
            notes: list[str]) -> GpuVgpu:
    names = dict(lay.names.get(pf, {}))
    for a in active:
        if a.type_id is not None:
            names.setdefault(a.type_id, a.type_name)
    for t in supported:  # `-s -v`: every supported type's ID, also when no VF can create it any more (a full GPU)
        if t.type_id is not None:
            names.setdefault(t.type_id, t.name)
    devices: list[VgpuDevice] = []
    for vf in lay.vfs.get(pf, []):
        if vf not in lay.vf_type:
            continue
        tid = lay.vf_type[vf]
        devices.append(VgpuDevice("vf", vf, tid, _name(names[tid]) if tid in names else None,
                                  lay.vf_gi.get(vf) if tid else None))
    parents = {pf, *lay.vfs.get(pf, [])}
    for uuid in lay.mdev_uuids:
        if lay.mdev_parent.get(uuid) in parents:
            tid = lay.mdev_type.get(uuid, 0)
            mine = next((a for a in active if a.mdev_uuid == uuid), None)
            devices.append(VgpuDevice("mdev", uuid, tid, _name(names[tid]) if tid in names else None,
                                      mine.gpu_instance_id if mine else None))
    vgpus = _active(g, active, devices, notes)
    sup = tuple(_name(t.name) for t in supported)
    cre = tuple(_name(t.name) for t in creatable)
    entries = lay.entries.get(pf) or []
    mode = "sr-iov" if "sriov_totalvfs" in entries or lay.vfs.get(pf) else "non-sr-iov"
    board = _board(vcat, [*sup, *(a.type_name for a in vgpus)])
    known = set() if board is None else {t.name for t in board.types}
    used = sorted({n for n in (*(a.type_name for a in vgpus), *(d.type_name or "" for d in devices))
                   if n and n not in known})
    offered = sorted({n for n in sup if n not in known and n not in used})
    if used or offered:  # the types in use first: they are what a plan must keep
        where = "in no board of migplan's vGPU catalog" if board is None else f"not in the catalog's {board.id}"
        first = used or offered
        shown = ", ".join(printable(n, 60) for n in first[:8]) + (", ..." if len(first) > 8 else "")
        more = f" (and {len(offered)} more it supports)" if used and offered else ""
        notes.append(f"GPU {g.index}: vGPU type(s) {'in use ' if used else ''}{shown}{more} {where}; shown as the "
                     "host reports them")
    for d in devices:
        if d.type_id and d.type_name is None:
            notes.append(f"GPU {g.index}: {d.kind} {d.address} holds vGPU type id {d.type_id}, whose name the host "
                         "did not print")
    return GpuVgpu(mode, board.id if board is not None else None, sup, cre, lay.total_vfs.get(pf), tuple(devices),
                   tuple(vgpus))


def _active(g: DiscoveredGpu, active: Sequence[sv.ActiveVgpu], devices: Sequence[VgpuDevice],
            notes: list[str]) -> list[ActiveVgpu]:
    """The active vGPUs, each with the device that carries it where that is known: its mdev UUID; a VF holding a
    MIG-backed vGPU on the same GPU instance; the one VF of its type not yet taken."""
    taken: set[str] = set()
    gis = {i.gi_id for i in g.instances}
    out = []
    for a in active:
        dev = None
        if a.mdev_uuid and any(d.address == a.mdev_uuid for d in devices):
            dev = a.mdev_uuid
        elif a.gpu_instance_id is not None:
            hit = [d for d in devices if d.kind == "vf" and d.gpu_instance_id == a.gpu_instance_id]
            dev = hit[0].address if len(hit) == 1 else None
        else:
            hit = [d for d in devices if d.kind == "vf" and d.type_id and d.type_id == a.type_id
                   and d.address not in taken]
            dev = hit[0].address if len(hit) == 1 else None
        if dev is not None:
            taken.add(dev)
        if a.gpu_instance_id is not None and g.mig_current and a.gpu_instance_id not in gis:
            notes.append(f"GPU {g.index}: vGPU {a.vgpu_id} is on GPU instance {a.gpu_instance_id}, which "
                         "'nvidia-smi mig -lgi' does not list")
        out.append(ActiveVgpu(a.vgpu_id, _name(a.type_name), a.type_id, a.vm_name, a.vm_uuid, dev,
                              a.gpu_instance_id, a.fb_total_mib, a.fb_used_mib))
    return out
