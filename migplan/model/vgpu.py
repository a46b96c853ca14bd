"""vGPU GPUs of a plan: what a hypervisor host's GPU holds (observed) and what it is to hold (target), and the
actions between them (pure; issue 26).

The same types serve observed and desired state, as for MIG (`state.GpuState`, `diff.Action`), so the difference
is a pure function (`vgpu_actions`) and apply executes exactly the plan's actions.

* `VgpuSlot`: one vGPU of a GPU: its type, the VM workload it is for, whether a running VM holds it, the device that
  carries it (an SR-IOV virtual function's PCI address or an mdev device's UUID; None in a target: apply creates
  it) and, MIG-backed, the GPU instance it sits on (`PROFILE@START`).
* `VgpuGpuState`: one GPU of a hypervisor host as observed (a snapshot's `vgpu` record) or declared (the
  inventory's `vgpu` setting, no vGPU yet): its board, vGPU mode, MIG mode and layout, and the modes the host may use.
* `VgpuGpuPlan`: a GPU's target mode and slots, and the `VgpuAction`s from the observed state to it.
* `VmPlan`: where one VM workload goes. `VgpuPlan`: all of it, with the solve's figures.

Modes are the vGPU catalog's (`catalog.vgpu.MODES`): `time_sliced` (equal-size), `time_sliced_mixed`,
`mig_backed`. A GPU holding no vGPU has mode None.

Action kinds, in the order apply runs them (`ACTION_ORDER`): a device is removed before its GPU changes mode; GPU
instances no vGPU needs are destroyed before MIG mode is disabled; VFs are enabled and mixed-size mode set before a
time-sliced vGPU is created; GPU instances are created before the MIG-backed vGPUs on them:

  remove       DEVICE               the vGPU (type) on a VF is cleared (`current_vgpu_type` 0) or the mdev removed
  gi-destroy   PLACEMENT            a GPU instance no vGPU will sit on
  mig-disable / mig-enable          the GPU's MIG mode (NVIDIA AI Enterprise, "Disabling MIG Mode")
  vfs-enable                        SR-IOV virtual functions (`sriov-manage -e`), when none are enabled
  mixed-on / mixed-off              mixed-size (heterogeneous) mode, `nvidia-smi vgpu -shm 1|0`
  gi-create    PLACEMENT            a GPU instance for a MIG-backed vGPU
  create       TYPE [PLACEMENT] VM  a vGPU of that type (on that GPU instance), for that VM
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import asdict, dataclass

from migplan.catalog.vgpu import PLANNED_MODES

VGPU_MODES = PLANNED_MODES  # catalog.vgpu's modes that migplan plans
ACTION_ORDER = ("remove", "gi-destroy", "mig-disable", "mig-enable", "vfs-enable", "mixed-off", "mixed-on",
                "gi-create", "create")
VM_STATUSES = ("placed", "kept", "unplaced")  # kept: a running VM left where it runs with its type


@dataclass(frozen=True)
class VgpuSlot:
    """One vGPU of a GPU (module notes)."""

    type_name: str  # NVIDIA's name without nvidia-smi's prefix: A100X-3-20C
    vm: str | None = None  # the VM workload (its profile name, vm:NAME) it is for; None: no VM of the profiles
    vm_uuid: str | None = None
    running: bool = False  # a running VM holds it: never removed or retyped without --allow-disrupt
    device: str | None = None  # VF PCI address or mdev UUID; None in a target: apply creates one
    placement: str | None = None  # MIG-backed: the GPU instance, PROFILE@START

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class VgpuGpuState:
    """One GPU of a hypervisor host as observed or declared (module notes)."""

    host: str
    index: int
    model: str  # the physical GPU's catalog model (A100-SXM4-40GB, L4, T4)
    board: str  # the vGPU catalog's board (A100-HGX-40GB, L4)
    host_mode: str  # sr-iov (VFs) | non-sr-iov (mdev devices)
    allowed: tuple[str, ...]  # the vGPU modes this host may use (inventory), within the board's
    mode: str | None = None  # the GPU's vGPU mode now; None: it holds no vGPU
    mig_enabled: bool = False
    layout: tuple[str, ...] = ()  # MIG enabled: its GPU instances, PROFILE@START, sorted
    slots: tuple[VgpuSlot, ...] = ()  # the vGPUs it holds, with the devices that carry them
    vfs: int = 0  # SR-IOV virtual functions enabled (0 on an mdev host)
    uuid: str | None = None
    pci_bus_id: str | None = None

    @property
    def key(self) -> tuple[str, int]:
        return (self.host, self.index)

    @property
    def running(self) -> tuple[VgpuSlot, ...]:
        return tuple(s for s in self.slots if s.running)

    def canonical(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    def fingerprint(self) -> str:
        """sha256 of what this GPU's actions depend on: a plan made against another state is refused (apply)."""
        return "sha256:" + hashlib.sha256(self.canonical().encode()).hexdigest()


@dataclass(frozen=True)
class VgpuAction:
    kind: str  # ACTION_ORDER
    type_name: str | None = None
    device: str | None = None
    placement: str | None = None
    vm: str | None = None

    def __str__(self) -> str:
        parts = [self.kind, self.type_name, self.placement and f"on {self.placement}", self.device,
                 self.vm and f"for {self.vm}"]
        return " ".join(p for p in parts if p)

    def as_dict(self) -> dict[str, object]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class VgpuGpuPlan:
    observed: VgpuGpuState
    mode: str | None  # the target vGPU mode; None: no vGPU
    slots: tuple[VgpuSlot, ...]
    actions: tuple[VgpuAction, ...]

    @property
    def key(self) -> tuple[str, int]:
        return self.observed.key

    @property
    def host(self) -> str:
        return self.observed.host

    @property
    def index(self) -> int:
        return self.observed.index

    @property
    def changed(self) -> bool:
        return bool(self.actions)

    @property
    def used(self) -> bool:
        """It holds a vGPU some VM of the plan is given, or a running VM's."""
        return any(s.vm is not None or s.running for s in self.slots)


@dataclass(frozen=True)
class VmPlan:
    """Where one VM workload goes."""

    name: str
    status: str  # VM_STATUSES
    need_mib: int  # frame buffer by the sizing rule
    host: str | None = None
    gpu: int | None = None
    vgpu_type: str | None = None
    frame_buffer_mib: int = 0  # the type's
    placement: str | None = None  # MIG-backed: PROFILE@START
    moved: bool = False  # a VM observed elsewhere or with another type
    reason: str | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class VgpuPlan:
    """The vGPU part of a plan: every hypervisor GPU and every VM workload, and the solve's figures."""

    gpus: tuple[VgpuGpuPlan, ...]
    vms: tuple[VmPlan, ...]
    status: str = "optimal"  # the solver's verdict (planner.milp.SolveStatus values) or "empty"
    objective: float | None = None
    bound: float | None = None
    gpus_used: int = 0
    gpu_lower_bound: int = 0  # GPUs no plan can do with (frame buffer and slots per board: planner.vgpu_bound)

    def gpu(self, host: str, index: int) -> VgpuGpuPlan | None:
        return next((g for g in self.gpus if g.key == (host, index)), None)


def _sort_actions(actions: list[VgpuAction]) -> tuple[VgpuAction, ...]:
    order = {k: i for i, k in enumerate(ACTION_ORDER)}
    return tuple(sorted(actions, key=lambda a: (order[a.kind], a.placement or "", a.device or "", a.type_name or "",
                                                a.vm or "")))


def _gi_profile(placement: str) -> str:
    return placement.rsplit("@", 1)[0]


def _removals(observed: VgpuGpuState, slots: tuple[VgpuSlot, ...]) -> list[VgpuAction]:
    """Every observed vGPU the target does not keep (by device); ValueError for a kept device retyped or moved. A
    running VM's vGPU is removed only by a plan made with --allow-disrupt (the plan check refuses it otherwise), and
    apply refuses it while the VM runs: migplan never stops a VM (docs/vgpu.md, "Apply")."""
    kept = {s.device: s for s in slots if s.device is not None}
    before = {s.device: s for s in observed.slots if s.device is not None}
    for d, new in kept.items():
        old = before.get(d)
        if old is None or old.type_name != new.type_name or old.placement != new.placement:
            raise ValueError(f"{observed.host}:{observed.index}: device {d} is kept as {new.type_name} but holds "
                             f"{old.type_name if old else 'nothing'}")
    out = []
    for s in observed.slots:
        if s.device in kept:
            continue
        out.append(VgpuAction("remove", s.type_name, s.device, s.placement, s.vm))
    return out


def _mode_actions(observed: VgpuGpuState, mode: str | None, keep_gis: set[str]) -> list[VgpuAction]:
    """GPU instances destroyed, MIG mode, VFs and mixed-size mode, for the target `mode`."""
    out = []
    want_mig = mode == "mig_backed"
    if observed.mig_enabled:
        out += [VgpuAction("gi-destroy", placement=p) for p in observed.layout if p not in keep_gis or not want_mig]
    if mode is not None and want_mig != observed.mig_enabled:
        out.append(VgpuAction("mig-enable" if want_mig else "mig-disable"))
    if mode is not None and observed.host_mode == "sr-iov" and observed.vfs == 0:
        out.append(VgpuAction("vfs-enable"))
    if mode == "time_sliced_mixed" and observed.mode != "time_sliced_mixed":
        out.append(VgpuAction("mixed-on"))
    elif mode == "time_sliced" and observed.mode == "time_sliced_mixed":
        out.append(VgpuAction("mixed-off"))
    return out


def vgpu_actions(observed: VgpuGpuState, mode: str | None, slots: tuple[VgpuSlot, ...]) -> tuple[VgpuAction, ...]:
    """The actions from `observed` to (`mode`, `slots`). A target slot with the device of an observed slot keeps
    that vGPU (same type, same GPU instance); every other observed vGPU is removed, every target slot without a
    device created. Raises ValueError for a target that reuses a device as another type or on another GPU instance:
    the planner never makes one."""
    actions = _removals(observed, slots)
    keep_gis = {s.placement for s in slots if s.placement is not None}
    actions += _mode_actions(observed, mode, keep_gis)
    have_gis = set(observed.layout) if observed.mig_enabled and mode == "mig_backed" else set()
    actions += [VgpuAction("gi-create", placement=p) for p in sorted(keep_gis - have_gis)]
    actions += [VgpuAction("create", s.type_name, None, s.placement, s.vm) for s in slots if s.device is None]
    if not any(a.kind != "vfs-enable" for a in actions):
        return ()  # enabling VFs alone changes nothing the plan needs
    return _sort_actions(actions)


def type_counts(slots: tuple[VgpuSlot, ...]) -> Counter[str]:
    return Counter(s.type_name for s in slots)
