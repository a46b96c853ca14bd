"""A stateful simulator of a KVM host with NVIDIA's vGPU manager, for migplan's tests (never talks to a GPU).

It sits on top of the MIG simulator (tests/sim): one host is one JSON state file ($MIGPLAN_SIM_STATE), the MIG
simulator's own, with a `vgpu` section added on the host and on each GPU that plays a vGPU model
(tests/sim_vgpu/vgpu_table.py). MIG-backed vGPUs sit on the MIG simulator's GPU instances; `nvidia-smi mig ...`
keeps answering from the same state. Nothing here imports migplan: it is the oracle.

What it serves (design: tests/sim_vgpu/README.md):

- a sysfs tree of real files under the host's sysroot (`<state>.sysroot/sys/...`, $MIGPLAN_SIM_SYSROOT) with the
  paths NVIDIA documents, rewritten from the state after every change, so that `cat`, `ls` and `readlink` are the
  real programs;
- writes into that tree through `tee` (tests/sim_vgpu/bin/tee: `echo 457 | tee <sysroot>/sys/bus/pci/devices/
  0000:17:00.4/nvidia/current_vgpu_type`), validated like the kernel does, failing with the errno's text;
- `nvidia-smi vgpu [-s|-c|-q] [-v] [-i N] [-shm 0|1]` printing NVIDIA's text from the state;
- `sriov-manage -e|-d BDF|ALL` (NVIDIA's script's messages);
- `vgpu-sim vm start|stop|set` for tests: a VM holding a vGPU, its frame-buffer use shown by `nvidia-smi vgpu -q`.

Sources are cited where each behaviour is implemented, with the tags of vgpu_table.py and these:
- [NV-VFIO] NVIDIA's nvidia-vgpu-vfio kernel interface (vGPU host driver, MIT licence): creatable_vgpu_types_show
  ("ID    : vGPU Name\\n", then "%-5d : %s" per type), current_vgpu_type_show ("%d\\n"), current_vgpu_type_store
  (kstrtol base 10; 0 removes the vGPU, -EPERM when there is none; a second create on a VF is -EPERM).
- [NV-RFC] NVIDIA's upstream vGPU RFC v2 (2025), drivers/vfio/pci/nvidia-vgpu sysfs.c, the same sysfs ABI: -EBUSY
  while the VF is open (a VM runs), -ENODEV for an unknown type id, -EINVAL for a type that may not join the
  GPU's vGPUs, -ENOSPC when the type's maximum is reached.
- [SRIOV-MANAGE] NVIDIA's /usr/lib/nvidia/sriov-manage script (usage, "Enabling VFs on ...", "GPU at ... already
  has VFs enabled.", exit 0 for a GPU without SR-IOV).
- [VF-LAYOUT] OpenNebula's NVIDIA vGPU guide: `ls -l /sys/bus/pci/devices/0000:41:00.0/ | grep virtfn` lists
  virtfn0 -> ../0000:41:00.4 ... virtfn10 -> ../0000:41:01.6 ... virtfn31 -> ../0000:41:04.3 (offset 4, stride 1).
- [CUBECOS] bigstack-oss/cubecos (GPU resource code): `nvidia-smi vgpu -shm` is the only switch to mixed-size mode
  and "sriov-manage clears it in both directions".
- [NO-VGPU] "No supported devices in vGPU mode": `nvidia-smi vgpu` where no GPU is in vGPU mode (quoted verbatim in
  PolloLoco's vgpu-5.15 guide and several public install scripts).
- [MDEV-CORE] Linux drivers/vfio/mdev: `create` takes a UUID (-EINVAL when it does not parse, -EEXIST when it is
  taken), `remove` takes a number (1 removes).
Everything else is modelled and says "unverified".
"""

from __future__ import annotations

import errno as errno_mod
import io
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from sim import nvidia_smi_sim as mig  # tests/ is on sys.path: pytest's rootdir, or cli.py for the bin/ wrappers

from . import vgpu_table as table

STATE_ENV = mig.STATE_ENV
SYSROOT_ENV = "MIGPLAN_SIM_SYSROOT"
VGPU_ID_BASE = 0xC1D00000  # vGPU IDs in public -q output are 0xC1D00000 + n: 3251634190, 3251634213, 3251635087
NO_VGPU = "No supported devices in vGPU mode"  # [NO-VGPU]
DEFAULT_DRIVER = "550.54.16"  # a vGPU 17 host (the AIE page's samples); what a vGPU host state reports
ERRNO_TEXT = {name: os.strerror(getattr(errno_mod, name)) for name in (
    "EINVAL", "EPERM", "EBUSY", "ENODEV", "ENOSPC", "EIO", "ENOENT", "EACCES", "EEXIST", "ERANGE", "EISDIR")}


class SimError(Exception):
    """A request the simulated host refuses: `errno` is the name (EINVAL), str() the strerror text."""

    def __init__(self, name: str, detail: str = "") -> None:
        super().__init__(ERRNO_TEXT.get(name, name))
        self.errno = name
        self.detail = detail


# --- the state --------------------------------------------------------------------------------------------------

def sysroot_of(state_path: str | os.PathLike[str]) -> Path:
    """The directory holding the host's simulated `/sys` (its `sys/` child)."""
    return Path(f"{os.fspath(state_path)}.sysroot")


def vgpu_gpus(state: dict[str, Any]) -> list[dict[str, Any]]:
    return [g for g in state["gpus"] if g.get("vgpu")]


def vmodel(gpu: dict[str, Any]) -> table.VgpuModel:
    return table.model(gpu["vgpu"]["model"])


def vtype(gpu: dict[str, Any], v: dict[str, Any]) -> table.VgpuType:
    t = vmodel(gpu).type(int(v["type"]))
    if t is None:
        raise ValueError(f"state: {gpu['vgpu']['model']} has no vGPU type {v['type']}")
    return t


def driver_loaded(state: dict[str, Any]) -> bool:
    return state.get("driver_loaded", True) is not False


def manager_installed(state: dict[str, Any]) -> bool:
    return bool(state.get("vgpu", {}).get("manager", True)) and bool(vgpu_gpus(state))


# --- PCI addresses ----------------------------------------------------------------------------------------------

def pf_bdf(gpu: dict[str, Any]) -> str:
    """sysfs spelling of the GPU's address: nvidia-smi's 00000000:17:00.0 -> 0000:17:00.0."""
    dom, bus, devfn = gpu["pci_bus_id"].lower().split(":")
    return f"{dom[-4:]}:{bus}:{devfn}"


def vf_bdf(pf: str, k: int) -> str:
    """Virtual function k of a physical function at device 0 function 0: devfn 4 + k ([VF-LAYOUT])."""
    dom, bus, _ = pf.split(":")
    devfn = 4 + k
    return f"{dom}:{bus}:{devfn // 8:02x}.{devfn % 8}"


def vfs_of(gpu: dict[str, Any]) -> list[str]:
    return [vf_bdf(pf_bdf(gpu), k) for k in range(int(gpu["vgpu"].get("vfs", 0)))]


def smi_bus(bdf: str) -> str:
    """nvidia-smi's spelling of a sysfs address: 0000:17:00.4 -> 00000000:17:00.4."""
    dom, bus, devfn = bdf.split(":")
    return f"0000{dom}:{bus}:{devfn}".upper()


# --- the rules: which vGPU may be created where -----------------------------------------------------------------

def vgpus(gpu: dict[str, Any]) -> list[dict[str, Any]]:
    return list(gpu["vgpu"].setdefault("vgpus", []))


def time_sliced(gpu: dict[str, Any]) -> list[table.VgpuType]:
    return [vtype(gpu, v) for v in vgpus(gpu) if not vtype(gpu, v).mig_backed]


def free_gis(state: dict[str, Any], gpu: dict[str, Any], profile: str) -> list[dict[str, Any]]:
    """GPU instances of `profile` (the MIG simulator's) that no vGPU sits on, lowest id first."""
    mmodel = mig.model_of(state, gpu)
    if mmodel is None or not gpu.get("mig_current"):
        return []
    held = {v.get("gi") for v in vgpus(gpu)}
    return sorted((gi for gi in gpu["gpu_instances"]
                   if mig.gi_profile(mmodel, gi).name == profile and gi["id"] not in held), key=lambda gi: gi["id"])


def refusal(state: dict[str, Any], gpu: dict[str, Any], t: table.VgpuType, gi: int | None = None) -> str | None:
    """Why a vGPU of type `t` cannot be created on the GPU now (an errno name, [NV-RFC]), or None.

    Time-sliced types: not on a GPU in MIG mode (only MIG-backed vGPUs there, [AIE] "MIG-Backed and Time-Sliced ...");
    in equal-size mode (the default) every time-sliced vGPU of a GPU has the same frame buffer size: [AIE] "Maximum
    vGPUs per GPU in Equal-Size Mode", [HARV-A2] (one 4 GB vGPU on the GPU: A2-4Q, A2-4A and A2-4C still
    available, every other size 0) and [AKB-525] (one RTXA6000-2Q: the 2B, 2Q and 2A types have 23 of 24 left);
    at most the type's equal-size maximum of them. In mixed-size mode ([AIE] "Put a GPU into mixed-size mode") any
    sizes, each type up to its mixed-size maximum, their frame buffers together within the GPU's (the largest
    type's); NVIDIA's placement ids are not simulated (the capacity rule stands in for them, unverified).
    MIG-backed types: the GPU in MIG mode and a free GPU instance of the type's profile ([AIE] "Configuring a GPU
    for MIG-Backed vGPUs"; `gi` asks for one instance), at most the type's maximum.
    """
    same = sum(1 for v in vgpus(gpu) if int(v["type"]) == t.id)
    if t.mig_backed:
        free = free_gis(state, gpu, str(t.mig_profile))
        if not gpu.get("mig_current"):
            return "EINVAL"
        if gi is not None and gi not in {g["id"] for g in free}:
            return "EINVAL"
        return "ENOSPC" if not free or same >= t.max_equal else None
    if gpu.get("mig_current"):
        return "EINVAL"
    held = time_sliced(gpu)
    if gpu["vgpu"].get("mixed"):
        assert t.max_mixed is not None  # mixed mode is only entered on models that have it (set_mixed)
        fits = sum(h.fb_mib for h in held) + t.fb_mib <= vmodel(gpu).vgpu_fb_mib
        return None if same < t.max_mixed and fits else "ENOSPC"
    if any(h.fb_mib != t.fb_mib for h in held):
        return "EINVAL"
    return "ENOSPC" if len(held) >= t.max_equal else None


def remaining(state: dict[str, Any], gpu: dict[str, Any], t: table.VgpuType) -> int:
    """How many more vGPUs of `t` the GPU takes now (an mdev type's available_instances on a physical function)."""
    if refusal(state, gpu, t) is not None:
        return 0
    same = sum(1 for v in vgpus(gpu) if int(v["type"]) == t.id)
    if t.mig_backed:
        return min(len(free_gis(state, gpu, str(t.mig_profile))), t.max_equal - same)
    held = time_sliced(gpu)
    if gpu["vgpu"].get("mixed"):
        room = (vmodel(gpu).vgpu_fb_mib - sum(h.fb_mib for h in held)) // t.fb_mib
        return min(int(t.max_mixed or 0) - same, room)
    return t.max_equal - len(held)


def supported(state: dict[str, Any], gpu: dict[str, Any]) -> list[table.VgpuType]:
    """The types `nvidia-smi vgpu -s` lists: MIG-backed ones on a GPU in MIG mode, time-sliced ones otherwise (a
    MIG-enabled GPU lists its MIG-backed types, [CUBECOS] issue #312/PR #903 `nvidia-smi vgpu -i 2 -s`; the split is
    inferred). Models without MIG-backed types list all their types."""
    m = vmodel(gpu)
    if not any(t.mig_backed for t in m.types):
        return list(m.types)
    return [t for t in m.types if t.mig_backed == bool(gpu.get("mig_current"))]


def creatable(state: dict[str, Any], gpu: dict[str, Any]) -> list[table.VgpuType]:
    return [t for t in supported(state, gpu) if refusal(state, gpu, t) is None]


def vgpu_on(gpu: dict[str, Any], dev: str) -> dict[str, Any] | None:
    return next((v for v in vgpus(gpu) if v["dev"] == dev), None)


def vf_creatable(state: dict[str, Any], gpu: dict[str, Any], vf: str) -> list[table.VgpuType]:
    """A VF's creatable_vgpu_types: none while it holds a vGPU (modelled: [NV-VFIO] asks the driver per VF, [NV-RFC]
    shows nothing for a VF with a vGPU), else the GPU's creatable types; a VF whose gpu_instance_id names a GPU
    instance offers only MIG-backed types of that instance's profile (modelled, unverified)."""
    if vgpu_on(gpu, vf) is not None:
        return []
    want = gpu["vgpu"].get("vf_gi", {}).get(vf)
    return [t for t in creatable(state, gpu)
            if want is None or (t.mig_backed and refusal(state, gpu, t, int(want)) is None)]


def holds(gpu: dict[str, Any]) -> list[int | str]:
    """What the MIG simulator must treat as in use (`vgpu_holds`, its busy()): the GPU instances MIG-backed vGPUs
    sit on, and "gpu" while any vGPU exists (the GPU cannot be reset or change MIG mode under a vGPU)."""
    out: list[int | str] = sorted({int(v["gi"]) for v in vgpus(gpu) if v.get("gi") is not None})
    return [*out, "gpu"] if vgpus(gpu) else out


# --- changing the state -----------------------------------------------------------------------------------------

def new_uuid(state: dict[str, Any], seed: str) -> str:
    raw = mig.new_uuid(state, "X", seed)[2:]
    return raw.lower()


def create(state: dict[str, Any], gpu: dict[str, Any], t: table.VgpuType, dev: str, parent: str,
           gi: int | None = None) -> dict[str, Any]:
    why = refusal(state, gpu, t, gi)
    if why:
        raise SimError(why, f"{t.name} may not be created on {pf_bdf(gpu)}")
    if t.mig_backed:
        gi = gi if gi is not None else free_gis(state, gpu, str(t.mig_profile))[0]["id"]
    v = {"dev": dev, "parent": parent, "type": t.id, "gi": gi, "vm": None, "params": ""}
    gpu["vgpu"].setdefault("vgpus", []).append(v)
    sync_holds(gpu)
    return v


def destroy(gpu: dict[str, Any], v: dict[str, Any]) -> None:
    if v.get("vm"):
        raise SimError("EBUSY", f"a VM runs on {v['dev']}")
    gpu["vgpu"]["vgpus"].remove(v)
    sync_holds(gpu)


def sync_holds(gpu: dict[str, Any]) -> None:
    gpu["vgpu_holds"] = holds(gpu)


def find_vgpu(state: dict[str, Any], dev: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The (GPU, vGPU) whose device (VF address or mdev UUID) is `dev`."""
    for gpu in vgpu_gpus(state):
        v = vgpu_on(gpu, dev.lower())
        if v is not None:
            return gpu, v
    raise SimError("ENOENT", f"no vGPU on {dev}")


def vm_start(state: dict[str, Any], dev: str, name: str, *, uuid: str = "", vm_id: str | None = None,
             fb_used_mib: int = 0, util: int = 0, guest_driver: str = "N/A",
             license_status: str = "N/A (Expiry: N/A)") -> int:
    """A VM starts on the vGPU of `dev`: the vGPU becomes active (NVML gives it a vGPU ID) and, until the VM stops,
    cannot be removed or retyped (the VF/mdev is open: -EBUSY, [NV-RFC]). Returns the vGPU ID."""
    _, v = find_vgpu(state, dev)
    if v.get("vm"):
        raise SimError("EBUSY", f"a VM already runs on {dev}")
    host = state.setdefault("vgpu", {})
    vid = int(host.get("next_vgpu_id", VGPU_ID_BASE + 1))
    host["next_vgpu_id"] = vid + 1
    v["vm"] = {"id": vid, "name": name, "uuid": uuid, "vm_id": uuid if vm_id is None else vm_id,
               "fb_used_mib": int(fb_used_mib), "util": int(util), "guest_driver": guest_driver,
               "license": license_status}
    return vid


def vm_stop(state: dict[str, Any], dev: str) -> None:
    _, v = find_vgpu(state, dev)
    if not v.get("vm"):
        raise SimError("EINVAL", f"no VM runs on {dev}")
    v["vm"] = None


def vm_set(state: dict[str, Any], dev: str, **fields: Any) -> None:
    """Change what a running VM shows: fb_used_mib, util, guest_driver, license."""
    gpu, v = find_vgpu(state, dev)
    if not v.get("vm"):
        raise SimError("EINVAL", f"no VM runs on {dev}")
    fb = vtype(gpu, v).fb_mib
    if "fb_used_mib" in fields and not 0 <= int(fields["fb_used_mib"]) <= fb:
        raise SimError("EINVAL", f"a {fb} MiB vGPU cannot use {fields['fb_used_mib']} MiB")
    v["vm"].update(fields)


def set_vfs(state: dict[str, Any], gpu: dict[str, Any], count: int) -> None:
    """sriov_numvfs: the VFs appear or go; mixed-size mode is cleared either way ([CUBECOS])."""
    m = vmodel(gpu)
    if not m.sriov:
        raise SimError("ENOENT", "no SR-IOV on this GPU")
    if count > m.total_vfs:
        raise SimError("ERANGE", f"{count} > sriov_totalvfs {m.total_vfs}")
    current = int(gpu["vgpu"].get("vfs", 0))
    if count and current and count != current:
        raise SimError("EBUSY", "VFs are already enabled")  # the kernel's sriov_numvfs_store
    if not count and vgpus(gpu):
        raise SimError("EBUSY", "vGPUs exist on the VFs")
    gpu["vgpu"]["vfs"] = count
    gpu["vgpu"]["mixed"] = False
    if not count:
        gpu["vgpu"]["vf_gi"] = {}


def set_mixed(state: dict[str, Any], gpu: dict[str, Any], on: bool) -> str | None:
    """`nvidia-smi vgpu -shm`: the NVML error text when refused (Not Supported on a model without mixed-size mode,
    [AIE] T105 for the T4; In use by another client while the GPU holds vGPUs), None when done (unverified texts)."""
    if not vmodel(gpu).mixed_size:
        return "Not Supported"
    if vgpus(gpu):
        return mig.IN_USE
    gpu["vgpu"]["mixed"] = on
    return None


# --- the sysfs tree ---------------------------------------------------------------------------------------------

Tree = dict[str, tuple[str, str, int]]  # relative path -> ("file", content, mode) | ("link", target, 0) | ("dir","",0)


def creatable_text(types: Sequence[table.VgpuType]) -> str:
    """[NV-VFIO] creatable_vgpu_types_show: a header, then "%-5d : %s" and the name ending in a newline
    ([HARV-L40S] byte for byte)."""
    return "ID    : vGPU Name\n" + "".join(f"{t.id:<5d} : {t.name}\n" for t in types)


def desired_tree(state: dict[str, Any]) -> Tree:
    """Every file, link and directory of the simulated /sys, from the state."""
    tree: Tree = {}

    def d(path: str) -> None:
        parts = path.split("/")
        for n in range(1, len(parts) + 1):
            tree.setdefault("/".join(parts[:n]), ("dir", "", 0))

    def f(path: str, text: str, mode: int = 0o444) -> None:
        d(path.rsplit("/", 1)[0])
        tree[path] = ("file", text, mode)

    def link(path: str, target: str) -> None:
        d(path.rsplit("/", 1)[0])
        tree[path] = ("link", target, 0)

    d("sys/bus/pci/devices")
    loaded = driver_loaded(state)
    for gpu in vgpu_gpus(state):
        m, pf = vmodel(gpu), pf_bdf(gpu)
        base = f"sys/bus/pci/devices/{pf}"
        f(f"{base}/vendor", "0x10de\n")
        f(f"{base}/device", m.pci_device_id.lower() + "\n")
        f(f"{base}/class", "0x030200\n")
        parents = [pf]
        if m.sriov:
            f(f"{base}/sriov_totalvfs", f"{m.total_vfs}\n")
            f(f"{base}/sriov_numvfs", f"{len(vfs_of(gpu))}\n", 0o644)
            for k, vf in enumerate(vfs_of(gpu)):
                link(f"{base}/virtfn{k}", f"../{vf}")
                vbase = f"sys/bus/pci/devices/{vf}"
                link(f"{vbase}/physfn", f"../{pf}")
                f(f"{vbase}/vendor", "0x10de\n")
                f(f"{vbase}/class", "0x030200\n")
                if loaded and gpu["vgpu"]["interface"] == "vfio":
                    _vfio_files(state, gpu, vf, f)
            parents = vfs_of(gpu) if gpu["vgpu"]["interface"] == "mdev-sriov" else []
        if loaded and gpu["vgpu"]["interface"] in ("mdev", "mdev-sriov"):
            for parent in parents:
                _mdev_files(state, gpu, parent, f, link)
    return tree


def _vfio_files(state: dict[str, Any], gpu: dict[str, Any], vf: str, f: Any) -> None:
    """A VF's nvidia/ directory under the vendor-specific VFIO framework ([NV-VFIO]; the four files of
    [HARV-L40S]'s VF; placement_id and warm_update are not simulated)."""
    vbase = f"sys/bus/pci/devices/{vf}/nvidia"
    v = vgpu_on(gpu, vf)
    f(f"{vbase}/creatable_vgpu_types", creatable_text(vf_creatable(state, gpu, vf)))
    f(f"{vbase}/current_vgpu_type", f"{v['type'] if v else 0}\n", 0o644)
    gi = v.get("gi") if v else gpu["vgpu"].get("vf_gi", {}).get(vf)
    f(f"{vbase}/gpu_instance_id", "" if gi is None else f"{gi}\n", 0o644)  # empty on a free VF ([HARV-L40S])
    f(f"{vbase}/vgpu_params", v.get("params", "") if v else "", 0o644)


def _mdev_files(state: dict[str, Any], gpu: dict[str, Any], parent: str, f: Any, link: Any) -> None:
    """mdev_supported_types/nvidia-<id>/{name,description,available_instances,device_api,create,devices/} of one
    parent (the GPU, or each VF on mdev-sriov), [HARV-A2] and [AKB-525]; the mdev devices under the parent with
    `remove` and `mdev_type`, linked from /sys/bus/mdev/devices ([MDEV-CORE])."""
    base = f"sys/bus/pci/devices/{parent}"
    on_vf = gpu["vgpu"]["interface"] == "mdev-sriov"
    vf_free = not any(v["parent"] == parent for v in vgpus(gpu))
    listed = supported(state, gpu)
    for t in listed:
        tdir = f"{base}/mdev_supported_types/nvidia-{t.id}"
        left = (1 if vf_free and refusal(state, gpu, t) is None else 0) if on_vf else remaining(state, gpu, t)
        f(f"{tdir}/name", t.name + "\n")
        f(f"{tdir}/description", t.description() + "\n")
        f(f"{tdir}/available_instances", f"{left}\n")
        f(f"{tdir}/device_api", "vfio-pci\n")
        f(f"{tdir}/create", "", 0o200)
        f(f"{tdir}/devices/.keep", "")  # the directory, even when empty (removed again by sync: see _sync)
    for v in vgpus(gpu):
        if v["parent"] != parent:
            continue
        t = vtype(gpu, v)
        dbase = f"{base}/{v['dev']}"
        f(f"{dbase}/remove", "", 0o200)
        f(f"{dbase}/nvidia/vgpu_params", v.get("params", ""), 0o644)
        link(f"{dbase}/mdev_type", f"../mdev_supported_types/nvidia-{t.id}")
        link(f"{base}/mdev_supported_types/nvidia-{t.id}/devices/{v['dev']}", f"../../../{v['dev']}")
        link(f"sys/bus/mdev/devices/{v['dev']}", f"../../pci/devices/{parent}/{v['dev']}")
    link(f"sys/class/mdev_bus/{parent}", f"../../bus/pci/devices/{parent}")


MANIFEST = ".manifest.json"  # beside sys/: what the last rewrite put there, so that the next touches only changes


def _manifest(root: Path) -> Tree | None:
    try:
        raw = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return {k: (v[0], v[1], v[2]) for k, v in raw.items()} if (root / "sys").is_dir() else None


def differences(root: Path) -> list[str]:
    """Writable attributes whose content on disk is not what the simulator last put there: written around it (a
    shell redirection instead of `tee`), which a real sysfs attribute would have validated."""
    out = []
    for rel, (kind, text, mode) in (_manifest(root) or {}).items():
        if kind == "file" and mode & 0o200:
            try:
                if (root / rel).read_text() != text:
                    out.append(rel)
            except OSError:
                out.append(rel)
    return out


def materialize(state: dict[str, Any], root: Path) -> None:
    """Make `root/sys` the state's tree: entries gone from it removed (deepest first), new or changed ones written;
    a missing or unreadable manifest rebuilds the whole tree. Attributes a client wrote around the simulator are
    rewritten too."""
    tree = {k: v for k, v in desired_tree(state).items() if not k.endswith("/.keep")}
    old = _manifest(root)
    if old is None:
        if (root / "sys").exists() or (root / "sys").is_symlink():
            _remove(root / "sys")
        old = {}
    stray = set(differences(root))
    for rel in sorted(set(old) - set(tree), key=lambda r: -r.count("/")):
        path = root / rel
        if path.is_symlink() or path.exists():
            _remove(path)
    for rel in sorted(tree):
        kind, text, mode = tree[rel]
        if old.get(rel) == tree[rel] and rel not in stray:
            continue
        path = root / rel
        if rel in old and old[rel][0] != kind and (path.exists() or path.is_symlink()):
            _remove(path)
        if kind == "dir":
            path.mkdir(parents=True, exist_ok=True)
        elif kind == "link":
            path.unlink(missing_ok=True)
            path.symlink_to(text)
        else:
            if path.exists():
                path.chmod(0o600)
            path.write_text(text)
            path.chmod(mode)
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps({k: list(v) for k, v in tree.items()}, separators=(",", ":")))
    os.replace(tmp, root / MANIFEST)


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
        return
    for child in path.iterdir():
        _remove(child)
    path.rmdir()


# --- writing a sysfs attribute ----------------------------------------------------------------------------------

_VF_ATTR = re.compile(r"^sys/bus/pci/devices/(?P<bdf>[0-9a-f:.]+)/nvidia/(?P<attr>current_vgpu_type|gpu_instance_id|"
                      r"vgpu_params)$")
_CREATE = re.compile(r"^sys/bus/pci/devices/(?P<bdf>[0-9a-f:.]+)/mdev_supported_types/nvidia-(?P<tid>\d+)/create$")
_MDEV_ATTR = re.compile(r"^sys/bus/pci/devices/(?P<bdf>[0-9a-f:.]+)/(?P<uuid>[0-9a-f-]{36})/(?P<attr>remove|"
                        r"nvidia/vgpu_params)$")
_NUMVFS = re.compile(r"^sys/bus/pci/devices/(?P<bdf>[0-9a-f:.]+)/sriov_numvfs$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def kstrtol(data: str) -> int:
    """The kernel's kstrtol/kstrtoul, base 10: digits (a sign allowed) and at most one trailing newline."""
    text = data[:-1] if data.endswith("\n") else data
    if not re.fullmatch(r"[+-]?\d+", text):
        raise SimError("EINVAL", f"{data!r} is not a number")
    return int(text)


def gpu_of_device(state: dict[str, Any], bdf: str) -> dict[str, Any]:
    for gpu in vgpu_gpus(state):
        if bdf == pf_bdf(gpu) or bdf in vfs_of(gpu):
            return gpu
    raise SimError("ENOENT", bdf)


def relative_sys_path(root: Path, path: str) -> str | None:
    """`path` (absolute, or `/sys/...` meaning the simulated one) as `sys/...` inside `root` after resolving
    symlinks; None when it is not inside the simulated /sys."""
    candidate = Path(path)
    if not candidate.is_absolute():
        candidate = Path.cwd() / candidate
    if str(candidate).startswith("/sys/") and not str(candidate).startswith(str(root)):
        candidate = root / str(candidate).lstrip("/")
    resolved = Path(os.path.realpath(candidate))
    real_root = Path(os.path.realpath(root))
    try:
        rel = resolved.relative_to(real_root)
    except ValueError:
        return None
    return str(rel) if str(rel).startswith("sys") else None


def write_attr(state: dict[str, Any], root: Path, rel: str, data: str) -> None:
    """Write `data` into the simulated attribute `rel` (sys/...), as the kernel would; raise SimError."""
    tree = desired_tree(state)
    if rel not in tree:
        raise SimError("ENOENT", rel)
    kind, _text, mode = tree[rel]
    if kind == "dir":
        raise SimError("EISDIR", rel)
    if not mode & 0o200:
        raise SimError("EACCES", rel)  # a sysfs attribute without a store method
    if not state.get("root", True):
        raise SimError("EACCES", rel)  # sysfs attributes are root's (0644/0200)
    if m := _VF_ATTR.match(rel):
        _write_vf(state, m["bdf"], m["attr"], data)
    elif m := _CREATE.match(rel):
        _write_create(state, m["bdf"], int(m["tid"]), data)
    elif m := _MDEV_ATTR.match(rel):
        gpu, v = find_vgpu(state, m["uuid"])
        if m["attr"] == "nvidia/vgpu_params":
            v["params"] = data
        elif kstrtol(data) == 1:  # [MDEV-CORE] remove_store: 1 removes, 0 does nothing
            destroy(gpu, v)
        elif kstrtol(data) != 0:
            raise SimError("EINVAL", data)
    elif m := _NUMVFS.match(rel):
        set_vfs(state, gpu_of_device(state, m["bdf"]), kstrtol(data))
    else:
        raise SimError("EACCES", rel)


def _write_vf(state: dict[str, Any], vf: str, attr: str, data: str) -> None:
    gpu = gpu_of_device(state, vf)
    v = vgpu_on(gpu, vf)
    if attr == "vgpu_params":
        if v is None:
            raise SimError("EINVAL", "no vGPU on this VF")  # unverified
        v["params"] = data
        return
    value = kstrtol(data)
    if attr == "gpu_instance_id":  # modelled: the GPU instance the next MIG-backed vGPU of this VF sits on
        if v is not None:
            raise SimError("EBUSY", "the VF holds a vGPU")
        if not any(gi["id"] == value for gi in gpu.get("gpu_instances", [])) or not gpu.get("mig_current"):
            raise SimError("EINVAL", f"no GPU instance {value}")
        gpu["vgpu"].setdefault("vf_gi", {})[vf] = value
        return
    if value == 0:  # [NV-VFIO] nv_vfio_pci_remove
        if v is None:
            raise SimError("EPERM", "No vGPU exists on current device")
        destroy(gpu, v)  # EBUSY while a VM runs ([NV-RFC])
        gpu["vgpu"].get("vf_gi", {}).pop(vf, None)
        return
    if v is not None:  # [NV-VFIO] nv_vfio_pci_create: "vGPU device already created with type ID"
        raise SimError("EPERM", f"vGPU device already created with type ID: {v['type']}")
    t = vmodel(gpu).type(value)
    if t is None:
        raise SimError("ENODEV", f"no vGPU type {value}")  # [NV-RFC] find_vgpu_type
    if t not in vf_creatable(state, gpu, vf):
        raise SimError(refusal(state, gpu, t, gpu["vgpu"].get("vf_gi", {}).get(vf)) or "EINVAL", t.name)
    create(state, gpu, t, vf, vf, gpu["vgpu"].get("vf_gi", {}).get(vf))


def _write_create(state: dict[str, Any], parent: str, tid: int, data: str) -> None:
    text = data[:-1] if data.endswith("\n") else data
    if not _UUID.fullmatch(text):
        raise SimError("EINVAL", f"{data!r} is not a UUID")  # [MDEV-CORE] create_store: guid_parse
    uuid = text.lower()
    if any(vgpu_on(g, uuid) for g in vgpu_gpus(state)):
        raise SimError("EEXIST", uuid)  # [MDEV-CORE] mdev_device_create: a duplicate
    gpu = gpu_of_device(state, parent)
    t = vmodel(gpu).type(tid)
    assert t is not None  # the path exists only for the model's types
    on_vf = gpu["vgpu"]["interface"] == "mdev-sriov"
    if on_vf and any(v["parent"] == parent for v in vgpus(gpu)):
        raise SimError("EINVAL", f"{parent} already holds a vGPU")  # one vGPU per VF; errno unverified
    if refusal(state, gpu, t) is not None:
        raise SimError("EINVAL", f"{t.name}: available_instances is 0")  # the vendor's refusal; errno unverified
    create(state, gpu, t, uuid, parent)


# --- faults -----------------------------------------------------------------------------------------------------

def write_fault(state: dict[str, Any], rel: str, data: str) -> dict[str, Any] | None:
    """The first fault matching a write: its `match` tokens among ["sysfs", "write", <attribute>, <device>,
    <value>] (attribute: current_vgpu_type, create, remove, gpu_instance_id, sriov_numvfs...; device: the VF or
    parent address or the mdev UUID). Keys: `errno` (the write fails, nothing changes), `errno_after` (it takes
    effect, then fails: the caller never learns), `unload` (the driver disappears first: the attribute is gone),
    and the MIG simulator's `times`/`skip`."""
    parts = rel.split("/")
    device = next((p for p in parts if re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.\d|[0-9a-f-]{36}", p)), "")
    tokens = ["sysfs", "write", parts[-1], device, data.strip()]
    return mig.take_fault(state, tokens)


# --- locking and running one command ----------------------------------------------------------------------------

@contextmanager
def session(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The state under the MIG simulator's lock; the sysfs tree checked before (writes that bypassed the simulator
    are recorded in vgpu.bypassed) and rewritten after."""
    root = sysroot_of(path)
    with mig.locked(os.fspath(path)) as state:
        host = state.setdefault("vgpu", {})
        stray = differences(root)
        if stray:
            host.setdefault("bypassed", []).extend(s for s in stray if s not in host.get("bypassed", []))
        yield state
        for gpu in vgpu_gpus(state):
            sync_holds(gpu)
        materialize(state, root)


def sysfs_write(path: str | os.PathLike[str], target: str, data: str) -> None:
    """Write `data` to `target` (a path in the host's simulated /sys) as `tee` would; raise SimError."""
    root = sysroot_of(path)
    rel = relative_sys_path(root, target)
    if rel is None:
        raise SimError("ENOENT", target)
    failure: SimError | None = None
    with session(path) as state:  # the state is saved even when the write fails (fault counters, the record)
        fault = write_fault(state, rel, data)
        try:
            if fault and fault.get("unload"):
                state["driver_loaded"] = False
            if fault and fault.get("errno"):
                raise SimError(str(fault["errno"]), "injected")
            write_attr(state, root, rel, data)
            if fault and fault.get("errno_after"):
                raise SimError(str(fault["errno_after"]), "injected after the write took effect")
        except SimError as err:
            failure = err
        state["vgpu"].setdefault("writes", []).append([rel, data, failure.errno if failure else "ok"])
    if failure is not None:
        raise failure


# --- nvidia-smi vgpu --------------------------------------------------------------------------------------------

VGPU_FLAGS = {  # short and long forms; value: does it take an argument
    "-q": ("query", False), "--query": ("query", False), "-s": ("supported", False),
    "--supported": ("supported", False), "-c": ("creatable", False), "--creatable": ("creatable", False),
    "-v": ("verbose", False), "--verbose": ("verbose", False), "-i": ("id", True), "--id": ("id", True),
    "-shm": ("shm", True), "--set-vgpu-heterogeneous-mode": ("shm", True), "-h": ("help", False),
    "--help": ("help", False),
}


def parse_vgpu(argv: Sequence[str]) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    pos = 0
    while pos < len(argv):
        tok, inline = argv[pos], None
        if tok.startswith("--") and "=" in tok:
            tok, inline = tok.split("=", 1)
        if tok not in VGPU_FLAGS:
            raise mig.Fail([mig.INVALID_ARGS], mig.BAD_ARGS)
        key, takes = VGPU_FLAGS[tok]
        pos += 1
        if takes and inline is None:
            if pos >= len(argv):
                raise mig.Fail([mig.INVALID_ARGS], mig.BAD_ARGS)
            inline, pos = argv[pos], pos + 1
        opts[key] = inline if takes else True
    actions = [a for a in ("query", "supported", "creatable", "shm", "help") if a in opts]
    if len(actions) > 1 or ("verbose" in opts and actions not in (["supported"], ["creatable"])):
        raise mig.Fail([mig.INVALID_ARGS], mig.BAD_ARGS)
    opts["action"] = actions[0] if actions else "summary"
    return opts


def timestamp(state: dict[str, Any]) -> str:
    """The first line of the summary: ctime-like, the day padded to two ("Mon Jan  3 20:54:35 2022", PolloLoco's
    sample), then seven spaces ([AKB-525]); the time is the state's `vgpu.clock` (epoch seconds) or now."""
    clock = state.get("vgpu", {}).get("clock")
    when = time.localtime(clock) if clock is not None else time.localtime()
    return time.strftime("%a %b %e %H:%M:%S %Y", when) + "       "


def _cut(text: str, width: int) -> str:
    """nvidia-smi's truncation in a column `width` wide: a text longer than width-3 keeps width-3 characters and
    "..." -- "NVIDIA GeForce RTX 4088" (23) is "NVIDIA GeForce RTX 408..." in the 25 of the GPU name, "NVIDIA
    RTXA6000-2Q" "NVIDIA RTXA..." in the 14 of the vGPU name, the VM name "win10test,debug-..." in 19 ([AKB-525]).
    Texts of exactly width-2 to width characters are cut too by this rule; no sample shows one (inferred)."""
    return text if len(text) <= width - 3 else text[:width - 3] + "..."


SUMMARY_RULE = "+---------------------------------+------------------------------+------------+"


def do_summary(state: dict[str, Any], gpus: list[dict[str, Any]], out: list[str]) -> None:
    """`nvidia-smi vgpu`: [AKB-525] byte for byte (a vGPU row per running VM), PolloLoco's sample for a GPU without
    one; a rule after each GPU (several GPUs: inferred)."""
    ver = mig.driver_of(state)
    out += [timestamp(state),
            "+-----------------------------------------------------------------------------+",
            f"| NVIDIA-SMI {ver:<23}Driver Version: {ver:<26}|",
            "|---------------------------------+------------------------------+------------+",
            "| GPU  Name                       | Bus-Id                       | GPU-Util   |",
            "|      vGPU ID     Name           | VM ID     VM Name            | vGPU-Util  |",
            "|=================================+==============================+============|"]
    for gpu in gpus:
        util = int(gpu["vgpu"].get("util", 0))
        out.append(f"|{gpu['index']:>4}  {_cut(gpu['name'], 25):<25}  | {gpu['pci_bus_id']:<29}|"
                   f"{util:>4}%       |")
        for v in active(gpu):
            vm = v["vm"]
            out.append(f"|      {vm['id']:<10}  {_cut(vtype(gpu, v).name, 14):<14} | {_cut(vm['vm_id'], 7):<7}  "
                       f"{_cut(vm['name'], 19):<19} |{vm['util']:>7}%    |")
        out.append(SUMMARY_RULE)


def active(gpu: dict[str, Any]) -> list[dict[str, Any]]:
    """The GPU's active vGPUs (NVML's: those a running VM holds), by vGPU ID."""
    return sorted((v for v in vgpus(gpu) if v.get("vm")), key=lambda v: v["vm"]["id"])


def kv(indent: int, label: str, value: Any = None) -> str:
    """A `-q` line: the label padded so that the colon is at column 42 ([AKB-525]); a section title alone."""
    if value is None:
        return " " * indent + label
    return f"{' ' * indent}{label:<{42 - indent}}: {value}"


def do_query(state: dict[str, Any], gpus: list[dict[str, Any]], out: list[str]) -> None:
    """`nvidia-smi vgpu -q`: [AKB-525]'s layout and fields byte for byte; per vGPU the running VM's name and UUID, the
    type, the mdev UUID (N/A for a VF of the vendor-specific VFIO framework: unverified), the GPU instance id of a
    MIG-backed vGPU (N/A otherwise, as the ceems test fixture shows), and the frame buffer the VM uses. A blank line
    between GPUs (inferred)."""
    for n, gpu in enumerate(gpus):
        if n:
            out.append("")
        out += [f"GPU {gpu['pci_bus_id']}", kv(4, "Active vGPUs", len(active(gpu)))]
        for v in active(gpu):
            t, vm = vtype(gpu, v), v["vm"]
            mdev = v["dev"] if gpu["vgpu"]["interface"] != "vfio" else "N/A"
            out += [kv(4, "vGPU ID", vm["id"]), kv(8, "VM UUID", vm["uuid"]), kv(8, "VM Name", vm["name"]),
                    kv(8, "vGPU Name", t.name), kv(8, "vGPU Type", t.id), kv(8, "vGPU UUID", vm.get("vgpu_uuid", "")),
                    kv(8, "MDEV UUID", mdev), kv(8, "Guest Driver Version", vm["guest_driver"]),
                    kv(8, "License Status", vm["license"]),
                    kv(8, "GPU Instance ID", "N/A" if v.get("gi") is None else v["gi"]),
                    kv(8, "Accounting Mode", "N/A"), kv(8, "ECC Mode", "N/A"), kv(8, "Accounting Buffer Size", 4000),
                    kv(8, "Frame Rate Limit", "N/A"), kv(8, "PCI"), kv(12, "Bus Id", "00000000:00:00.0"),
                    kv(8, "FB Memory Usage"), kv(12, "Total", f"{t.fb_mib} MiB"),
                    kv(12, "Used", f"{vm['fb_used_mib']} MiB"), kv(12, "Free", f"{t.fb_mib - vm['fb_used_mib']} MiB"),
                    kv(8, "Utilization"), kv(12, "Gpu", f"{vm['util']} %"), kv(12, "Memory", "0 %"),
                    kv(12, "Encoder", "0 %"), kv(12, "Decoder", "0 %")]
            for section in ("Encoder Stats", "FBC Stats"):
                out += [kv(8, section), kv(12, "Active Sessions", 0), kv(12, "Average FPS", 0),
                        kv(12, "Average Latency", 0)]


def do_types(state: dict[str, Any], gpus: list[dict[str, Any]], out: list[str], which: str, verbose: bool) -> None:
    """`-s` / `-c`: "GPU <bus id>", then each type's name indented by four ([P4-460] byte for byte, in the model's
    order). `-v`: a block per type (modelled on -q's layout; the fields are those public parsers read -- "vGPU Type
    ID : 0x619", Name, GPU Instance Profile ID, Max Instances, Max Instances Per VM, FB Memory ([CUBECOS] PR #903) --
    and NVML's type getters; unverified)."""
    for gpu in gpus:
        out.append(f"GPU {gpu['pci_bus_id']}")
        types = supported(state, gpu) if which == "supported" else creatable(state, gpu)
        mmodel = mig.model_of(state, gpu)
        for t in types:
            if not verbose:
                out.append(f"    {t.name}")
                continue
            prof = mmodel.profile(t.mig_profile) if (mmodel and t.mig_profile) else None
            most = t.max_mixed if gpu["vgpu"].get("mixed") and t.max_mixed else t.max_equal
            width, height = t.max_resolution.split("x")
            out += [kv(4, "vGPU Type ID", hex(t.id)), kv(8, "Name", t.name),
                    kv(8, "Class", "Compute" if t.series == "C" else "Quadro" if t.series == "Q" else "NVS"),
                    kv(8, "GPU Instance Profile ID", "N/A" if prof is None else prof.id),
                    kv(8, "Max Instances", most), kv(8, "Max Instances Per VM", 1),
                    kv(8, "Device ID", f"{vmodel(gpu).pci_device_id.lower()}10de"),
                    kv(8, "FB Memory", f"{t.fb_mib} MiB"), kv(8, "Display Heads", t.num_heads),
                    kv(8, "Maximum X Resolution", width), kv(8, "Maximum Y Resolution", height),
                    kv(8, "Frame Rate Limit", f"{t.frl} FPS")]


def select(state: dict[str, Any], ident: Any) -> list[dict[str, Any]]:
    """The vGPU GPUs `-i` names (the MIG simulator's rules: index, UUID or PCI bus id; its text for an unknown id)."""
    chosen = mig.select(state, ident)
    return [g for g in chosen if g.get("vgpu")]


def run_vgpu(state: dict[str, Any], argv: Sequence[str]) -> tuple[list[str], int]:
    out: list[str] = []
    try:
        opts = parse_vgpu(argv)
        if opts["action"] == "help":
            out += ["", "    vgpu -- Display information on GRID virtual GPUs.", "",
                    "    Usage: nvidia-smi vgpu [options]", "",  # modelled on `nvidia-smi mig -h`; unverified
                    "    Options include:", "    [-h | --help]: Display help information",
                    "    [-i | --id]: Enumeration index, PCI bus ID or UUID.",
                    "    [-q | --query]: Query information about currently active vGPUs.",
                    "    [-s | --supported]: Show vGPU types supported on GPU.",
                    "    [-c | --creatable]: Show currently creatable vGPU types on GPU.",
                    "    [-v | --verbose]: Display detailed information with -s and -c.",
                    "    [-shm | --set-vgpu-heterogeneous-mode]: Set vGPU heterogeneous mode."]
            return out, 0
        if not manager_installed(state):
            raise mig.Fail([NO_VGPU], mig.code_of("Not Supported"))  # [NO-VGPU]; exit code unverified
        gpus = select(state, opts.get("id"))
        if not gpus:
            raise mig.Fail([NO_VGPU], mig.code_of("Not Supported"))
        if opts["action"] == "summary":
            do_summary(state, gpus, out)
        elif opts["action"] == "query":
            do_query(state, gpus, out)
        elif opts["action"] in ("supported", "creatable"):
            do_types(state, gpus, out, opts["action"], bool(opts.get("verbose")))
        else:
            do_shm(state, gpus, str(opts["shm"]), out)
    except mig.Fail as fail:
        return out + fail.lines, fail.code
    return out, 0


def do_shm(state: dict[str, Any], gpus: list[dict[str, Any]], value: str, out: list[str]) -> None:
    """`-shm 0|1`: mixed-size (heterogeneous) mode ([AIE] "Put a GPU into mixed-size mode", [CUBECOS]); texts
    modelled on the MIG simulator's mode change (unverified)."""
    if value not in ("0", "1"):
        raise mig.Fail([mig.INVALID_ARGS], mig.BAD_ARGS)
    on = value == "1"
    if not state.get("root", True):
        raise mig.Fail([f"Unable to set vGPU heterogeneous mode for GPU {gpus[0]['pci_bus_id']}: "
                        "Insufficient Permissions"], mig.code_of("Insufficient Permissions"))
    for gpu in gpus:
        err = set_mixed(state, gpu, on)
        if err:
            raise mig.Fail([f"Unable to set vGPU heterogeneous mode for GPU {gpu['pci_bus_id']}: {err}"],
                           mig.code_of(err))
        out.append(f"{'Enabled' if on else 'Disabled'} vGPU heterogeneous mode for GPU {gpu['pci_bus_id']}")
    out.append("All done.")


# --- entry points (the bin/ wrappers call these through cli.py) ---------------------------------------------------

def smi_main(argv: Sequence[str], env: dict[str, str], stdout: TextIO, stderr: TextIO) -> int:
    """`nvidia-smi ARGS`: `vgpu ...` here; everything else is the MIG simulator's, on the same state, after which the
    sysfs tree is rewritten (a GPU instance created or destroyed changes what is creatable)."""
    path = env.get(STATE_ENV)
    if not path:
        stderr.write(f"nvidia-smi simulator: set {STATE_ENV} to a host state file\n")
        return 255
    if not argv or argv[0] != "vgpu":
        code = mig.main(list(argv), env=env, stdout=stdout, stderr=stderr)
        with session(path):
            pass
        return code
    with session(path) as state:
        state.setdefault("log", []).append(list(argv))
        early = mig.host_failure(state)
        fault = None if early else mig.take_fault(state, list(argv))
        if early:
            stdout.write("".join(line + "\n" for line in early[0]))
            stderr.write("".join(line + "\n" for line in early[1]))
            return early[2]
        if fault and fault.get("drop") in (True, "before"):
            return 255
        if fault and any(k in fault for k in ("exit", "stdout", "stderr")):
            stdout.write(fault.get("stdout", ""))
            stderr.write(fault.get("stderr", ""))
            return int(fault.get("exit", 0))
        lines, code = run_vgpu(state, argv[1:])
        if fault and fault.get("unload"):  # the driver disappears right after this command (mid-apply)
            state["driver_loaded"] = False
    if fault and fault.get("drop") == "after":
        return 255
    stdout.write("".join(line + "\n" for line in lines))
    return code


def tee_main(argv: Sequence[str], env: dict[str, str], stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    """`tee [-a] FILE...` where a FILE in the host's simulated /sys (or `/sys/...`, meaning it) is a validated
    write; GNU tee's message "tee: FILE: <strerror>" and exit 1 on a refusal. Other files are written as tee
    writes them."""
    files = [a for a in argv if not a.startswith("-")]
    append = any(a in ("-a", "--append") for a in argv)
    data = stdin.read()
    stdout.write(data)
    path = env.get(STATE_ENV)
    code = 0
    for target in files:
        rel = relative_sys_path(sysroot_of(path), target) if path else None
        try:
            if rel is not None and path:
                sysfs_write(path, target, data)
            else:
                with open(target, "a" if append else "w") as fh:
                    fh.write(data)
        except SimError as err:
            stderr.write(f"tee: {target}: {err}\n")
            code = 1
        except OSError as err:
            stderr.write(f"tee: {target}: {err.strerror}\n")
            code = 1
    return code


def cat_main(argv: Sequence[str], env: dict[str, str], stdout: TextIO, stderr: TextIO) -> int:
    """`cat FILE...` where `/sys/...` means the host's simulated /sys (the same mapping as `tee`, so that a client
    that names NVIDIA's documented paths never reads the real machine's); then the real cat."""
    path = env.get(STATE_ENV)
    args = list(argv)
    if path:
        root = sysroot_of(path)
        args = [str(root / a.lstrip("/")) if a.startswith("/sys/") else a for a in args]
    real = shutil.which("cat", path="/usr/bin:/bin")
    if real is None:
        stderr.write("cat: the real cat is not in /usr/bin or /bin\n")
        return 127
    stdout.flush()
    os.execv(real, [real, *args])
    return 127  # pragma: no cover - execv does not return


SRIOV_USAGE = """Usage:
    /usr/lib/nvidia/sriov-manage <-e|-d> <ssss:bb:dd.f|ALL>
        Enable/disable Virtual functions on the GPU specified by the PCI_ID=ssss:bb:dd.f.
        If 'ALL' is specified in place of PCI_ID, operate on all the nvidia GPUs in the system.

    /usr/lib/nvidia/sriov-manage -h
        Print this help.
"""  # [SRIOV-MANAGE] usage()


def sriov_manage_main(argv: Sequence[str], env: dict[str, str], stdout: TextIO, stderr: TextIO) -> int:
    """[SRIOV-MANAGE]: -e/-d on one GPU (any spelling lspci -s accepts: 0000:41:00.0, 41:00.0) or ALL; a GPU
    without SR-IOV exits 0 saying nothing; a missing address exits 1. Disabling VFs that hold vGPUs: the
    script's `echo 0 > sriov_numvfs` fails with EBUSY (the text is bash's echo error; unverified)."""
    if not argv or argv[0] == "-h" or argv[0] not in ("-e", "-d") or len(argv) != 2:
        stderr.write(SRIOV_USAGE)
        return 0 if argv[:1] == ["-h"] else 1
    path = env.get(STATE_ENV)
    if not path:
        stderr.write(f"sriov-manage simulator: set {STATE_ENV} to a host state file\n")
        return 255
    enable, which = argv[0] == "-e", argv[1].lower()
    with session(path) as state:
        state.setdefault("log", []).append(["sriov-manage", *argv])
        targets = vgpu_gpus(state) if which == "all" else [
            g for g in vgpu_gpus(state) if pf_bdf(g) == which or pf_bdf(g).endswith(which)]
        if not targets:
            return 1
        for gpu in targets:
            bdf = pf_bdf(gpu)
            if not vmodel(gpu).sriov:
                continue
            on = bool(gpu["vgpu"].get("vfs"))
            if on == enable:
                stdout.write(f"GPU at {bdf} already has VFs {'enabled' if enable else 'disabled'}.\n")
                continue
            stdout.write(f"{'Enabling' if enable else 'Disabling'} VFs on {bdf}\n")
            try:
                if not state.get("root", True):
                    raise SimError("EACCES")
                set_vfs(state, gpu, vmodel(gpu).total_vfs if enable else 0)
            except SimError as err:
                stderr.write(f"/usr/lib/nvidia/sriov-manage: echo: write error: {err}\n")
    return 0


def vm_main(argv: Sequence[str], env: dict[str, str], stdout: TextIO, stderr: TextIO) -> int:
    """`vgpu-sim vm start DEV NAME [--fb-used MIB] [--uuid U]`, `vm stop DEV`, `vm set DEV --fb-used MIB [--util N]`:
    the tests' control of VMs on a simulated host (over SSH too). DEV is a VF address or an mdev UUID."""
    path = env.get(STATE_ENV)
    usage = "usage: vgpu-sim vm start DEV NAME [--fb-used MIB] [--uuid U] | vm stop DEV | vm set DEV [--fb-used MIB]\n"
    if not path or len(argv) < 3 or argv[0] != "vm" or argv[1] not in ("start", "stop", "set"):
        stderr.write(usage)
        return 2
    verb, dev, rest = argv[1], argv[2], list(argv[3:])
    name = rest.pop(0) if verb == "start" and rest and not rest[0].startswith("--") else None
    flags = dict(zip(rest[::2], rest[1::2], strict=False))
    fields = {"fb_used_mib": int(flags["--fb-used"])} if "--fb-used" in flags else {}
    if "--util" in flags:
        fields["util"] = int(flags["--util"])
    try:
        with session(path) as state:
            if verb == "start":
                if name is None:
                    stderr.write(usage)
                    return 2
                vid = vm_start(state, dev, name, uuid=flags.get("--uuid", ""), **fields)
                stdout.write(f"{vid}\n")
            elif verb == "stop":
                vm_stop(state, dev)
            else:
                vm_set(state, dev, **fields)
    except SimError as err:
        stderr.write(f"vgpu-sim: {err.detail or err}\n")
        return 1
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Script entry: `cli.py PROGRAM ARGS` (PROGRAM: nvidia-smi, tee, cat, sriov-manage, vgpu-sim)."""
    args = list(sys.argv[1:] if argv is None else argv)
    program, rest = (args[0], args[1:]) if args else ("", [])
    env = dict(os.environ)
    if program == "nvidia-smi":
        return smi_main(rest, env, sys.stdout, sys.stderr)
    if program == "tee":
        return tee_main(rest, env, sys.stdin, sys.stdout, sys.stderr)
    if program == "sriov-manage":
        return sriov_manage_main(rest, env, sys.stdout, sys.stderr)
    if program == "vgpu-sim":
        return vm_main(rest, env, sys.stdout, sys.stderr)
    if program == "cat":
        return cat_main(rest, env, sys.stdout, sys.stderr)
    sys.stderr.write(f"vgpu simulator: unknown program {program!r}\n")
    return 255


def call(argv: Sequence[str], path: str | os.PathLike[str], stdin: str = "") -> tuple[int, str, str]:
    """Run one of the programs in-process (fast): (exit code, stdout, stderr); argv[0] names the program."""
    env = {STATE_ENV: os.fspath(path)}
    out, err = io.StringIO(), io.StringIO()
    program, rest = argv[0], list(argv[1:])
    if program == "nvidia-smi":
        code = smi_main(rest, env, out, err)
    elif program == "tee":
        code = tee_main(rest, env, io.StringIO(stdin), out, err)
    elif program == "sriov-manage":
        code = sriov_manage_main(rest, env, out, err)
    else:
        code = vm_main(rest, env, out, err)
    return code, out.getvalue(), err.getvalue()


def dump(state: dict[str, Any]) -> str:
    return json.dumps(state, indent=1)
