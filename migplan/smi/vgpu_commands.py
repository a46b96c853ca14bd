"""The commands that change a KVM vGPU host: argv builders (pure; issue 26, docs/vgpu.md "Apply on KVM hosts").

Every argv is built from validated tokens only: a sysfs root (`sysfs.check_root`), PCI addresses
(`sysfs.bdf`), mdev UUIDs (`sysfs.mdev_uuid`), type ids and GPU instance ids (integers in range), GPU indices and
MIG placements checked against the catalog model. Nothing a host printed reaches a command line unchecked.

* A sysfs attribute is written as NVIDIA documents it, `echo N | sudo tee FILE` (a shell redirection cannot be run
  through a become prefix): the argv is `tee FILE` and the value travels on the command's stdin (`SysfsWrite`;
  the runners feed stdin, adapters/runner.py). `str()` shows the write as the shell line `echo N | tee FILE`.
* SR-IOV, vendor-specific VFIO (Ampere and later; NVIDIA AI Enterprise "Creating a vGPU on a Linux with KVM
  Hypervisor": `echo TYPE > /sys/bus/pci/devices/VF/nvidia/current_vgpu_type`, 0 removes the vGPU):
  `current_vgpu_type`; MIG-backed: the VF's `nvidia/gpu_instance_id` first (the GPU instance the vGPU sits on).
* mdev (the T4, older drivers): `echo UUID > <PF>/mdev_supported_types/nvidia-ID/create`, and
  `echo 1 > /sys/bus/mdev/devices/UUID/remove` (Linux vfio-mediated-device.rst).
* `sriov-manage -e|-d BDF` (NVIDIA's /usr/lib/nvidia/sriov-manage) enables or disables a GPU's virtual functions.
* `nvidia-smi vgpu -i N -shm 1|0`: mixed-size (heterogeneous) mode (AIE "Put a GPU into mixed-size mode").
* MIG for MIG-backed vGPUs (AIE "Configuring a GPU for MIG-Backed vGPUs"): MIG mode and the GPU instances are
  made on the host with `nvidia-smi -i N -mig 1` and `nvidia-smi mig -i N -cgi PROFILE:START` WITHOUT `-C`: the
  compute instances of a MIG-backed vGPU are created inside the VM ("Optional: Creating compute instances in a
  GPU instance" is a guest step there). The vGPU simulator (tests/sim_vgpu/vgpu_sim.py, `free_gis`) needs only the
  GPU instance. These call the `migplan.smi.commands` builders (the one MIG vocabulary, issue 22).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

from migplan.catalog.geometry import GpuModel
from migplan.catalog.layout import Instance
from migplan.errors import InputError
from migplan.smi import commands as mig
from migplan.smi import sysfs
from migplan.smi.errors import SmiCommandError

SRIOV_MANAGE = "/usr/lib/nvidia/sriov-manage"
MAX_GI_ID = 64
_PROGRAM = re.compile(r"(?a)/?(?:[A-Za-z0-9_.+-]+/)*[A-Za-z0-9_.+-]+")


@dataclass(frozen=True)
class SysfsWrite:
    """`echo VALUE | tee PATH`: the argv (`tee PATH`) and its stdin (`VALUE` and a newline)."""

    path: str
    value: str

    @property
    def argv(self) -> list[str]:
        return ["tee", self.path]

    @property
    def stdin(self) -> bytes:
        return f"{self.value}\n".encode()

    @property
    def attribute(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def __str__(self) -> str:
        return f"echo {shlex.quote(self.value)} | tee {shlex.quote(self.path)}"


def _int(value: object, what: str, low: int, top: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= top:
        raise SmiCommandError(f"{what} must be an integer {low}..{top}, got {value!r}")
    return value


def _write(path: str, value: str) -> SysfsWrite:
    sysfs.read_file(path)  # the same path check as a read: absolute, plain sysfs names, no `..`
    return SysfsWrite(path, value)


# --- SR-IOV virtual functions (vendor-specific VFIO) -------------------------------------------------------------

def set_vgpu_type(root: str, vf: str, type_id: int) -> SysfsWrite:
    """`echo ID | tee <VF>/nvidia/current_vgpu_type`: create a vGPU of type ID on the VF."""
    return _write(sysfs.pci_path(root, vf, "nvidia", "current_vgpu_type"),
                  str(_int(type_id, "vGPU type id", 1, sysfs.MAX_TYPE_ID)))


def clear_vgpu_type(root: str, vf: str) -> SysfsWrite:
    """`echo 0 | tee <VF>/nvidia/current_vgpu_type`: remove the VF's vGPU."""
    return _write(sysfs.pci_path(root, vf, "nvidia", "current_vgpu_type"), "0")


def set_gpu_instance_id(root: str, vf: str, gi_id: int) -> SysfsWrite:
    """`echo GI | tee <VF>/nvidia/gpu_instance_id`: the GPU instance the VF's next MIG-backed vGPU sits on."""
    return _write(sysfs.pci_path(root, vf, "nvidia", "gpu_instance_id"), str(_int(gi_id, "GPU instance id", 0,
                                                                                   MAX_GI_ID)))


def vf_attribute(root: str, vf: str, attribute: str) -> list[str]:
    """`cat <VF>/nvidia/ATTRIBUTE` (current_vgpu_type, creatable_vgpu_types, gpu_instance_id)."""
    if attribute not in ("current_vgpu_type", "creatable_vgpu_types", "gpu_instance_id"):
        raise SmiCommandError(f"VF attribute {attribute!r} is not read")
    return sysfs.read_file(sysfs.pci_path(root, vf, "nvidia", attribute))


def vf_attributes(root: str, vfs: list[str], attribute: str) -> list[str]:
    """`cat -- <VF>/nvidia/ATTRIBUTE ...` of several VFs in one process (`current_vgpu_type`: one number a line)."""
    if not vfs:
        raise SmiCommandError("no VF to read")
    return ["cat", "--", *(vf_attribute(root, vf, attribute)[-1] for vf in vfs)]


def numvfs(root: str, pf: str) -> list[str]:
    """`cat <PF>/sriov_numvfs`: how many virtual functions are enabled (sriov-manage exits 0 when it failed)."""
    return sysfs.read_file(sysfs.pci_path(root, pf, "sriov_numvfs"))


def sriov_manage(pf: str, enable: bool, program: str = SRIOV_MANAGE) -> list[str]:
    """`sriov-manage -e|-d BDF`: the GPU's virtual functions on or off."""
    if not isinstance(program, str) or len(program) > 256 or not _PROGRAM.fullmatch(program) \
            or any(p in (".", "..") for p in program.split("/")):
        raise SmiCommandError(f"{program!r} is not a program path")
    if not isinstance(enable, bool):
        raise SmiCommandError(f"enable must be true or false, got {enable!r}")
    return [program, "-e" if enable else "-d", sysfs.bdf(pf)]


# --- mdev devices ----------------------------------------------------------------------------------------------

def mdev_create(root: str, parent: str, type_id: int, uuid: str) -> SysfsWrite:
    """`echo UUID | tee <parent>/mdev_supported_types/nvidia-ID/create`."""
    tid = _int(type_id, "vGPU type id", 1, sysfs.MAX_TYPE_ID)
    return _write(sysfs.pci_path(root, parent, "mdev_supported_types", f"nvidia-{tid}", "create"),
                  sysfs.mdev_uuid(uuid))


def mdev_remove(root: str, uuid: str) -> SysfsWrite:
    """`echo 1 | tee /sys/bus/mdev/devices/UUID/remove`."""
    return _write(sysfs.mdev_devices_path(root, uuid, "remove"), "1")


def mdev_types(root: str, parent: str) -> list[str]:
    """`ls -1 <parent>/mdev_supported_types`: the nvidia-ID directories."""
    return sysfs.list_dir(sysfs.pci_path(root, parent, "mdev_supported_types"))


def mdev_type_names(root: str, parent: str, type_ids: list[int]) -> list[str]:
    """`cat <parent>/mdev_supported_types/nvidia-ID/name ...`: each type's name, one a line, in order."""
    if not type_ids:
        raise SmiCommandError("no mdev type to read")
    return ["cat", "--", *(sysfs.mdev_type_path(root, parent, t, "name") for t in type_ids)]


# --- nvidia-smi -------------------------------------------------------------------------------------------------

def mixed_mode(gpu: int, on: bool) -> list[str]:
    """`nvidia-smi vgpu -i N -shm 1|0`: mixed-size (heterogeneous) vGPU mode."""
    if not isinstance(on, bool):
        raise SmiCommandError(f"mixed-size mode must be true or false, got {on!r}")
    return [mig.NVIDIA_SMI, "vgpu", "-i", str(_int(gpu, "GPU index", 0, 1023)), "-shm", "1" if on else "0"]


def supported_types(gpu: int) -> list[str]:
    """`nvidia-smi vgpu -s -v -i N`: the GPU's supported types with their ids (a read: the names of type ids a full
    GPU's VFs hold, which no `creatable_vgpu_types` lists any more)."""
    return [mig.NVIDIA_SMI, "vgpu", "-s", "-v", "-i", str(_int(gpu, "GPU index", 0, 1023))]


def mig_mode(gpu: int, on: bool) -> list[str]:
    """`nvidia-smi -i N -mig 1|0`."""
    return mig.set_mig_mode(gpu, on)


def gpu_reset(gpu: int) -> list[str]:
    """`nvidia-smi -r -i N`: makes a pending MIG mode current (Ampere)."""
    return mig.reset_gpu(gpu)


def gi_create(model: GpuModel, gpu: int, placement: str) -> list[str]:
    """`nvidia-smi mig -i N -cgi ID:START` of one GPU instance (`PROFILE@START`), without a compute instance."""
    try:
        inst = Instance.parse(placement)
    except InputError as err:
        raise SmiCommandError(f"{placement!r} is not a GPU instance placement: {err.message}") from None
    return mig.create_instances_for(model, gpu, [inst], default_ci=False)


def gi_destroy(gpu: int, gi_id: int) -> list[str]:
    """`nvidia-smi mig -i N -dgi -gi ID`."""
    return mig.destroy_gpu_instances(gpu, [gi_id])


def ci_destroy(gpu: int, gi_id: int) -> list[str]:
    """`nvidia-smi mig -i N -dci -gi ID`: every compute instance of a GPU instance (before it is destroyed)."""
    return mig.destroy_compute_instances(gpu, [gi_id])


__all__ = [
    "SRIOV_MANAGE", "SysfsWrite", "ci_destroy", "clear_vgpu_type", "gi_create", "gi_destroy", "gpu_reset",
    "mdev_create", "mdev_remove", "mdev_type_names", "mdev_types", "mig_mode", "mixed_mode", "numvfs",
    "set_gpu_instance_id", "set_vgpu_type", "sriov_manage", "supported_types", "vf_attribute",
    "vf_attributes",
]
