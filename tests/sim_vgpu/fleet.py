"""Build simulated vGPU hosts (tests/sim_vgpu/vgpu_sim.py) and drive them.

    path = write_host(tmp_path / "kvm01.json", ["A100-SXM4-40GB", "L4"], vfs_enabled=True)
    env = sim_env(path)      # PATH with tests/sim_vgpu/bin first: nvidia-smi, tee, cat, sriov-manage, vgpu-sim
    subprocess.run(["nvidia-smi", "vgpu", "-c"], env=env)
    sysfs(path) / "bus/pci/devices/0000:17:00.4/nvidia/creatable_vgpu_types"   # the simulated /sys

A host is the MIG simulator's state (tests/sim/fleet.py) with a `vgpu` section on the host and on each GPU; the
GPU models are the vGPU simulator's own (tests/sim_vgpu/vgpu_table.py). Nothing here imports migplan.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sim import fleet as mig_fleet
from sim import geometry as geo

from . import vgpu_sim as vsim
from . import vgpu_table as table

BIN_DIR = Path(__file__).resolve().parent / "bin"
PROGRAMS = ("nvidia-smi", "tee", "cat", "sriov-manage", "vgpu-sim")


def gpu_state(model_id: str, index: int, *, hostname: str, interface: str | None = None, vfs_enabled: bool = False,
              mig: bool = False, layout: Sequence[str] | None = None, mixed: bool = False) -> dict[str, Any]:
    """One GPU of a vGPU model: the MIG simulator's GPU (its MIG model for MIG-backed types, `layout` its GPU
    instances as PROFILE@START) with the vGPU section added."""
    vm = table.model(model_id)
    if vm.mig_model:
        gpu = mig_fleet.gpu_state(geo.find_model(vm.mig_model), index, hostname=hostname, mig=mig,
                                  layout=list(layout) if layout else None)
    else:
        if mig or layout:
            raise ValueError(f"{model_id} has no MIG")
        gpu = mig_fleet.gpu_state(None, index, hostname=hostname, mig=False, name=vm.smi_name,
                                  memory_total_mib=vm.memory_total_mib)
        gpu["pci_device_id"] = vm.pci_device_id + "10DE"
    if interface not in (None, "vfio", "mdev-sriov", "mdev"):
        raise ValueError(f"interface {interface!r}")
    if not vm.sriov and interface not in (None, "mdev"):
        raise ValueError(f"{model_id} has no SR-IOV")
    if mixed and not vm.mixed_size:
        raise ValueError(f"{model_id} has no mixed-size mode")
    gpu["vgpu"] = {"model": model_id, "interface": interface or vm.interface,
                   "vfs": vm.total_vfs if vfs_enabled and vm.sriov else 0, "mixed": mixed, "vgpus": [],
                   "vf_gi": {}, "util": 0}
    gpu["vgpu_holds"] = []
    return gpu


def host_state(models: str | Sequence[str], n_gpus: int = 1, *, hostname: str = "kvm-host",
               driver_version: str = vsim.DEFAULT_DRIVER, interface: str | None = None, vfs_enabled: bool = False,
               mig: bool = False, layouts: Sequence[Sequence[str] | None] | None = None, mixed: bool = False,
               manager: bool = True, faults: Sequence[dict[str, Any]] = (), bus_ids: Sequence[str] = (),
               names: Sequence[str] = (), **flags: Any) -> dict[str, Any]:
    """A KVM host: `models` one model for `n_gpus` GPUs or one per GPU. `layouts`: per GPU, its GPU instances
    (MIG mode on). `bus_ids` and `names`: the first GPUs' PCI bus ids (00000000:41:00.0) and names, where a test
    replays a sample. `flags`: root, driver_loaded, clock (the summary's time, epoch seconds), ... as the MIG
    simulator takes."""
    ids = [models] * n_gpus if isinstance(models, str) else list(models)
    per_gpu = list(layouts) if layouts is not None else [None] * len(ids)
    gpus = [gpu_state(m, i, hostname=hostname, interface=interface, vfs_enabled=vfs_enabled,
                      mig=mig or per_gpu[i] is not None, layout=per_gpu[i], mixed=mixed)
            for i, m in enumerate(ids)]
    for gpu, bus in zip(gpus, bus_ids, strict=False):
        gpu["pci_bus_id"] = bus
    for gpu, name in zip(gpus, names, strict=False):
        gpu["name"] = name
    clock = flags.pop("clock", None)
    return {"version": 1, "hostname": hostname, "root": True, "ssh": "ok", "uuid_counter": 100,
            "faults": [dict(f) for f in faults], "gpus": gpus, "log": [], "driver_version": driver_version,
            "vgpu": {"manager": manager, "next_vgpu_id": vsim.VGPU_ID_BASE + 1, "clock": clock}, **flags}


def write_state(path: str | os.PathLike[str], state: dict[str, Any]) -> Path:
    """Write the state and its sysfs tree (so that the first `cat` finds it)."""
    mig_fleet.write_state(path, state)
    with vsim.session(path):
        pass
    return Path(path)


def write_host(path: str | os.PathLike[str], models: str | Sequence[str], n_gpus: int = 1, **kw: Any) -> Path:
    return write_state(path, host_state(models, n_gpus, **kw))


read_state = mig_fleet.read_state


def edit(path: str | os.PathLike[str]) -> Any:
    """`with edit(path) as state:` change the state under the simulator's lock; the sysfs tree follows."""
    return vsim.session(path)


def sysroot(path: str | os.PathLike[str]) -> Path:
    return vsim.sysroot_of(path)


def sysfs(path: str | os.PathLike[str]) -> Path:
    """The host's simulated /sys."""
    return vsim.sysroot_of(path) / "sys"


def sim_env(path: str | os.PathLike[str], base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a process on the host: the vGPU simulator's programs first on PATH, its state and
    sysroot (MIGPLAN_SIM_SYSROOT: the prefix a client puts before the documented /sys paths)."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = f"{BIN_DIR}{os.pathsep}{env.get('PATH', '')}"
    env[vsim.STATE_ENV] = os.fspath(path)
    env[vsim.SYSROOT_ENV] = os.fspath(vsim.sysroot_of(path))
    env["MIGPLAN_SIM_PYTHON"] = sys.executable
    return env


def run(argv: Sequence[str], path: str | os.PathLike[str], *, stdin: str = "",
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run `argv` (a shell command line when a str list of one with spaces is not wanted: pass ["sh", "-c", ...])
    as a real process on the simulated host."""
    return subprocess.run(list(argv), env=sim_env(path), input=stdin, capture_output=True, text=True,
                          timeout=timeout)


call = vsim.call


def write(path: str | os.PathLike[str], target: str, data: str) -> None:
    """Write into the simulated /sys in-process (as `tee` does); raises vgpu_sim.SimError."""
    vsim.sysfs_write(path, target, data)


def vm_start(path: str | os.PathLike[str], dev: str, name: str, **kw: Any) -> int:
    with vsim.session(path) as state:
        return vsim.vm_start(state, dev, name, **kw)


def vm_stop(path: str | os.PathLike[str], dev: str) -> None:
    with vsim.session(path) as state:
        vsim.vm_stop(state, dev)


def vm_set(path: str | os.PathLike[str], dev: str, **fields: Any) -> None:
    with vsim.session(path) as state:
        vsim.vm_set(state, dev, **fields)


def vfs(path: str | os.PathLike[str], gpu: int = 0) -> list[str]:
    """The addresses of GPU `gpu`'s enabled virtual functions."""
    return vsim.vfs_of(read_state(path)["gpus"][gpu])


def pf(path: str | os.PathLike[str], gpu: int = 0) -> str:
    return vsim.pf_bdf(read_state(path)["gpus"][gpu])


def add_vgpu(path: str | os.PathLike[str], gpu: int, type_name: str, *, uuid: str | None = None) -> str:
    """Create one vGPU of `type_name` on GPU `gpu` through the simulated sysfs, as a client would (the first free VF
    on the vendor-specific VFIO framework or mdev-sriov; a new mdev on the GPU otherwise). Returns the device: the
    VF address or the mdev UUID."""
    state = read_state(path)
    g = state["gpus"][gpu]
    t = vsim.vmodel(g).type(type_name)
    if t is None:
        raise ValueError(f"{g['vgpu']['model']} has no vGPU type {type_name}")
    interface, busy = g["vgpu"]["interface"], {v["parent"] for v in g["vgpu"]["vgpus"]}
    root = sysfs(path)
    if interface == "vfio":
        vf = next((f for f in vsim.vfs_of(g) if f not in busy), None)
        if vf is None:
            raise ValueError("no free VF (enable them with sriov-manage -e)")
        write(path, str(root / f"bus/pci/devices/{vf}/nvidia/current_vgpu_type"), f"{t.id}\n")
        return vf
    dev = uuid or vsim.new_uuid(state, f"{path}/{gpu}/{len(busy)}")
    parent = vsim.pf_bdf(g) if interface == "mdev" else next(f for f in vsim.vfs_of(g) if f not in busy)
    write(path, str(root / f"bus/pci/devices/{parent}/mdev_supported_types/nvidia-{t.id}/create"), dev + "\n")
    return dev


def shims(bin_dir: str | os.PathLike[str]) -> list[Path]:
    """Scripts in `bin_dir` (a simulated host's own bin, first on its PATH behind the test sshd) running the vGPU
    simulator's programs, so that a host served by tests/fleet/sshd.py is a vGPU host."""
    out = []
    for program in PROGRAMS:
        script = Path(bin_dir) / program
        script.write_text(f"#!/bin/sh\nexec {BIN_DIR / program} \"$@\"\n")
        script.chmod(0o755)
        out.append(script)
    return out
