"""A plan's vGPU part as VMware vSphere takes it: per ESXi host and GPU, each VM's vGPU profile, and the setting
each GPU needs (pure: a `VgpuPlan` in, dicts and text out; nothing calls vSphere). docs/vsphere.md.

* **Profile names.** vSphere names an NVIDIA vGPU type as a *vGPU profile*: `grid_` and the type in lower case
  (`A100-10C` is `grid_a100-10c`: VMware Cloud Director reads that profile name from vCenter, e.g. the vcd
  provider's `getVgpuProfile({name: "grid_a100-10c"})`, pulumi.com registry, vcd/api-docs/vmvgpupolicy).
  Newer vGPU managers are said to name them `nvidia_<type>` (`nvidia_l4-8c`): that spelling is NOT verified
  here (no source read showed it), so `grid_` is the default and `--profile-prefix nvidia_` the alternative; check
  the names a host offers (the VM's "Add New Device > PCI Device > NVIDIA GRID vGPU" list, or the vSphere API's
  `ConfigTarget.vgpuProfileInfo[].profileName`, vSphere API 7.0.3) before importing.
* **The GPU's setting.** Each GPU used for vGPU is a graphics device of type *Shared Direct* ("vendor shared
  passthrough graphics", vSphere Resource Management 6.5/6.7, "Configuring Graphics Devices": Configure > Graphics
  > Graphics Devices > Edit, VMs powered off). Time-sliced vGPUs of different sizes on one GPU need vSphere 8.0 U3
  or later and the GPU's vGPU mode set to mixed size (NVIDIA's heterogeneous mode, docs/vgpu.md "Modes"); equal
  size is the default. MIG-backed vGPUs need MIG mode enabled on the GPU (`nvidia-smi -i N -mig 1` on the ESXi
  host, NVIDIA AI Enterprise "Configuring a GPU for MIG-Backed vGPUs"); the vGPU manager creates each VM's GPU
  instance when it powers on, at a placement of its choosing, not necessarily the plan's.
* **Which GPU.** vSphere chooses the physical GPU of a host when a VM powers on (the host's shared passthrough GPU
  assignment policy: spread or consolidate); the export names the plan's GPU (PCI bus id when the plan knows it,
  else its index) so that the operator can check or pin it, and so that the totals per GPU can be checked.

`build` makes the export; `to_dict` is its JSON/YAML form, `csv_text` the `VMName,VGPUProfile,Host,GPU` rows that
PowerShell's `Import-Csv` reads (one per VM's vGPU; vGPUs of no VM of the plan left out, with a note).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from migplan.catalog.vgpu import MIG_BACKED, TIME_SLICED, TIME_SLICED_MIXED, VgpuCatalog
from migplan.errors import CatalogError, InputError
from migplan.model.vgpu import VgpuGpuPlan, VgpuPlan, VgpuSlot, VmPlan

KIND = "migplan/export-vsphere"
PROFILE_PREFIXES = ("grid_", "nvidia_")
DEFAULT_PREFIX = "grid_"
GRAPHICS_TYPE = "Shared Direct"  # vSphere: "Vendor shared passthrough graphics"
CSV_HEADER = ("VMName", "VGPUProfile", "Host", "GPU")
MODE_TEXT = {TIME_SLICED: "time-sliced, equal size", TIME_SLICED_MIXED: "time-sliced, mixed size",
             MIG_BACKED: "MIG-backed"}
# vSphere's vGPU mode of a GPU for each of migplan's modes (what to set on the graphics device)
GPU_MODE = {TIME_SLICED: "equal size", TIME_SLICED_MIXED: "mixed size", MIG_BACKED: "MIG"}
SETTING = {
    TIME_SLICED: f"graphics type {GRAPHICS_TYPE}; vGPU mode equal size (the default)",
    TIME_SLICED_MIXED: f"graphics type {GRAPHICS_TYPE}; vGPU mode mixed size (vSphere 8.0 U3 or later)",
    MIG_BACKED: f"graphics type {GRAPHICS_TYPE}; MIG mode enabled on the GPU (nvidia-smi -i INDEX -mig 1 on the "
                "ESXi host, then reset the GPU or reboot the host)",
}
NO_VGPU_SETTING = "no vGPU in the plan: leave as it is"
_VM_SUFFIX = re.compile(r":vgpu[0-9]+\Z")  # `vm:NAME:vgpu2`: the second vGPU of VM NAME (collect --vgpu)


def profile_name(type_name: str, prefix: str = DEFAULT_PREFIX) -> str:
    """vSphere's vGPU profile for an NVIDIA vGPU type: `A100X-3-20C` -> `grid_a100x-3-20c` (module notes)."""
    if prefix not in PROFILE_PREFIXES:
        raise InputError(f"vGPU profile prefix {prefix!r} is not one of {', '.join(PROFILE_PREFIXES)}")
    return prefix + type_name.lower()


def vm_name(workload: str) -> str:
    """The vSphere VM name of a VM workload: `vm:infer-01` -> `infer-01`, `vm:db:vgpu2` -> `db` (its 2nd vGPU)."""
    name = workload[3:] if workload.startswith("vm:") else workload
    return _VM_SUFFIX.sub("", name) or workload


@dataclass(frozen=True)
class VmRow:
    """One vGPU of the target of one GPU, for one VM (or for none: a vGPU no VM of the plan is given)."""

    workload: str | None  # the plan's VM workload (vm:NAME); None: no VM of the plan
    vm: str | None  # the vSphere VM name
    vm_uuid: str | None
    vgpu_type: str
    profile: str
    frame_buffer_mib: int
    placement: str | None
    status: str  # placed | kept | running (a running VM no profile names) | spare
    moved: bool

    def to_dict(self) -> dict[str, Any]:
        return {"vm": self.vm, "workload": self.workload, "vm_uuid": self.vm_uuid, "vgpu_type": self.vgpu_type,
                "profile": self.profile, "frame_buffer_mib": self.frame_buffer_mib, "placement": self.placement,
                "status": self.status, "moved": self.moved}


@dataclass(frozen=True)
class GpuRow:
    host: str
    index: int
    pci_bus_id: str | None
    board: str
    model: str
    mode_before: str | None
    mode: str | None
    capacity_mib: int
    changed: bool
    actions: tuple[str, ...]
    vms: tuple[VmRow, ...]

    @property
    def gpu(self) -> str:
        """How the CSV names the GPU: its PCI bus id when known, else its index."""
        return self.pci_bus_id or str(self.index)

    @property
    def setting(self) -> str:
        return SETTING[self.mode].replace("INDEX", str(self.index)) if self.mode is not None else NO_VGPU_SETTING

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "pci_bus_id": self.pci_bus_id, "board": self.board, "model": self.model,
                "mode_before": self.mode_before, "mode": self.mode,
                "mode_text": MODE_TEXT.get(self.mode or "", "no vGPU"),
                "graphics_type": GRAPHICS_TYPE if self.mode is not None else None,
                "gpu_mode": GPU_MODE.get(self.mode or ""), "setting": self.setting,
                "frame_buffer_mib": self.capacity_mib,
                "frame_buffer_used_mib": sum(v.frame_buffer_mib for v in self.vms),
                "changed": self.changed, "actions": list(self.actions), "vms": [v.to_dict() for v in self.vms]}


@dataclass(frozen=True)
class VsphereExport:
    gpus: tuple[GpuRow, ...]  # by host, then index
    unplaced: tuple[VmPlan, ...]
    prefix: str
    plan_fingerprint: str
    notes: tuple[str, ...]

    @property
    def hosts(self) -> dict[str, list[GpuRow]]:
        out: dict[str, list[GpuRow]] = {}
        for g in self.gpus:
            out.setdefault(g.host, []).append(g)
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"kind": KIND, "plan": self.plan_fingerprint, "profile_prefix": self.prefix,
                "hosts": [{"host": h, "gpus": [g.to_dict() for g in gs]} for h, gs in self.hosts.items()],
                "unplaced": [{"vm": vm_name(v.name), "workload": v.name, "need_mib": v.need_mib, "reason": v.reason}
                             for v in self.unplaced],
                "notes": list(self.notes)}


def _fb(vcat: VgpuCatalog, board: str, type_name: str) -> int:
    try:
        return vcat.get(board).vgpu_type(type_name).frame_buffer_mib
    except CatalogError:
        return 0  # a type the catalog lacks (the plan names it by type id): its size is not known here


def _capacity(vcat: VgpuCatalog, board: str) -> int:
    try:
        return vcat.get(board).capacity_mib
    except CatalogError:
        return 0


def _row(s: VgpuSlot, g: VgpuGpuPlan, vms: Mapping[str, VmPlan], vcat: VgpuCatalog, prefix: str) -> VmRow:
    vp = vms.get(s.vm) if s.vm is not None else None
    status = vp.status if vp is not None else "running" if s.running else "spare"
    return VmRow(workload=s.vm, vm=vm_name(s.vm) if s.vm is not None else None, vm_uuid=s.vm_uuid,
                 vgpu_type=s.type_name, profile=profile_name(s.type_name, prefix),
                 frame_buffer_mib=_fb(vcat, g.observed.board, s.type_name), placement=s.placement,
                 status=status, moved=bool(vp and vp.moved))


def build(plan: VgpuPlan, vcat: VgpuCatalog, *, prefix: str = DEFAULT_PREFIX, plan_fingerprint: str = "",
          host: str | None = None) -> VsphereExport:
    """The export of a plan's vGPU part: every hypervisor GPU (or the GPUs of `host`) with its VMs' profiles."""
    profile_name("A", prefix)  # the prefix checked once, before anything else
    gpus = sorted(plan.gpus, key=lambda g: g.key)
    if host is not None:
        gpus = [g for g in gpus if g.observed.host == host]
        if not gpus:
            known = ", ".join(sorted({g.observed.host for g in plan.gpus})[:10]) or "none"
            raise InputError(f"the plan's vgpu section has no host {host!r}", hint=f"vGPU hosts in the plan: {known}")
    vms = {v.name: v for v in plan.vms}
    rows: list[GpuRow] = []
    notes: list[str] = []
    for g in gpus:
        o = g.observed
        vm_rows = tuple(_row(s, g, vms, vcat, prefix) for s in g.slots)
        for r in vm_rows:
            if r.vm is None:
                what = f"a running VM ({r.vm_uuid})" if r.vm_uuid else "no VM"
                notes.append(f"{o.host} GPU {o.index}: a {r.vgpu_type} vGPU of {what} no profile names: kept, not in "
                             "the CSV")
        rows.append(GpuRow(o.host, o.index, o.pci_bus_id, o.board, o.model, o.mode, g.mode, _capacity(vcat, o.board),
                           g.changed, tuple(str(a) for a in g.actions), vm_rows))
        if g.mode == TIME_SLICED_MIXED:
            notes.append(f"{o.host} GPU {o.index}: mixed-size vGPUs need vSphere 8.0 U3 or later and the GPU's vGPU "
                         "mode set to mixed size")
    unplaced = tuple(v for v in plan.vms if v.status == "unplaced")
    if unplaced:
        notes.append(f"{len(unplaced)} VM(s) have no place in the plan: not in the export's rows (listed under "
                     "'unplaced')")
    return VsphereExport(tuple(rows), unplaced, prefix, plan_fingerprint, tuple(notes))


# --- text forms ------------------------------------------------------------------------------------

def _csv_field(text: str) -> str:
    """RFC 4180 quoting (what Import-Csv reads). Names are written as they are, never altered: the file is for
    PowerShell, not a spreadsheet (docs/vsphere.md)."""
    if any(c in text for c in ',"\r\n') or text != text.strip():
        return '"' + text.replace('"', '""') + '"'
    return text


def csv_rows(export: VsphereExport) -> Iterable[tuple[str, str, str, str]]:
    for g in export.gpus:
        for v in g.vms:
            if v.vm is not None:
                yield (v.vm, v.profile, g.host, g.gpu)


def csv_text(export: VsphereExport) -> str:
    """`VMName,VGPUProfile,Host,GPU`, one row per VM's vGPU (CRLF-free: PowerShell reads LF files)."""
    lines = [",".join(CSV_HEADER)]
    lines += [",".join(_csv_field(c) for c in row) for row in csv_rows(export)]
    return "\n".join(lines) + "\n"
