"""Build host state files for the nvidia-smi simulator (tests/sim/nvidia_smi_sim.py).

    path = write_host(tmp_path / "gpu01.json", "A100-SXM4-40GB", 2, layouts=[["7g.40gb@0"], None])
    env = sim_env(path)            # PATH with tests/sim/bin first, MIGPLAN_SIM_STATE=path
    subprocess.run(["nvidia-smi", "mig", "-lgi"], env=env)

Independent of migplan (it imports none of it): a model is a simulator model id (tests/sim/geometry.py) or
any object with an `id` (a migplan GpuModel; only its id is used, the geometry is the simulator's own). A
layout is a list of `PROFILE@START` strings or any object whose `instances` have `start` and `profile`
(a migplan Layout). Layouts are checked against the simulator's own placement rules.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import geometry as geo
from . import nvidia_smi_sim as sim

BIN_DIR = Path(__file__).resolve().parent / "bin"


@dataclass(frozen=True)
class Proc:
    """A process on a GPU: in the GPU instance placed at `start` (its first CI), or on the whole GPU."""

    pid: int
    name: str = "python"
    used_memory_mib: int = 1024
    start: int | None = None


def _uuid(seed: str) -> str:
    h = hashlib.sha256(seed.encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def instances_of(layout: Any) -> list[tuple[str, int]]:
    """(profile name, start) of a layout: `PROFILE@START` strings or a Layout-like object."""
    if hasattr(layout, "instances"):
        return [(str(i.profile), int(i.start)) for i in layout.instances]
    out = []
    for item in layout:
        name, sep, start = str(item).partition("@")
        if not sep or not start.strip().isdigit():
            raise ValueError(f"{item!r} is not PROFILE@START")
        out.append((name.strip(), int(start)))
    return out


def check_layout(model: geo.Model, layout: Any, driver: str | None = None) -> None:
    """Raise ValueError when the simulator's own rules refuse `layout` on `model` (on a host with `driver`)."""
    placed = instances_of(layout)
    bad = geo.conflicts(model, placed, driver)
    if bad:
        shown = " ".join(f"{n}@{s}" for n, s in placed)
        raise ValueError(f"invalid layout {shown} on {model.id}: " + "; ".join(f"{r}: {m}" for r, m in bad))


def resolve_model(model: Any, catalog_files: Iterable[str] = ()) -> geo.Model | None:
    """The simulator's model for a model id, an object with `.id`, or a simulator Model; None = no MIG."""
    if model is None:
        return None
    return geo.find_model(model if isinstance(model, str) else str(model.id), catalog_files)


def gpu_state(model: geo.Model | None, index: int, *, hostname: str = "gpu-host", mig: bool = True,
              layout: Any = None, cis: bool = True, procs: Sequence[Proc] = (),
              name: str | None = None, memory_total_mib: int | None = None,
              mode_reset: str = "in-use", driver: str | None = None) -> dict[str, Any]:
    """One GPU: `model` None is a GPU without MIG (like a T4). `layout` is created with default CIs, checked by
    the rules of a host with `driver` (None: a current one)."""
    uuid = _uuid(f"{hostname}/{index}")
    gpu: dict[str, Any] = {
        "index": index, "model": None if model is None else model.id,
        "name": name or (model.smi_name if model else "NVIDIA T4"),
        "uuid": uuid, "pci_bus_id": f"00000000:{0x17 + 0x10 * index:02X}:00.0",
        "pci_device_id": (model.pci_device_id if model else "0x1EB8") + "10DE",
        "memory_total_mib": memory_total_mib or (int(model.full_profile.memory_mib * 1.02) if model else 15360),
        "mig_current": bool(mig and model), "mig_pending": bool(mig and model), "mode_reset": mode_reset,
        "gpu_instances": [], "processes": [],
    }
    state: dict[str, Any] = {"uuid_counter": 0}
    if layout is not None and model is not None:
        check_layout(model, layout, driver)
        for pname, start in instances_of(layout):
            prof = model.profile(pname)
            assert prof is not None  # check_layout refused unknown profiles
            gi = {"id": sim.next_gi_id(model, gpu, prof.memory_slices), "profile_id": prof.id, "start": start,
                  "cis": []}
            gpu["gpu_instances"].append(gi)
            if cis:
                sim.add_ci(state, gpu, gi, prof.ci_default_id, prof.compute_slices, 0)
    for proc in procs:
        gpu["processes"].append(_proc(gpu, proc))
    return gpu


def _proc(gpu: dict[str, Any], proc: Proc) -> dict[str, Any]:
    gi = ci = None
    if proc.start is not None:
        found = [g for g in gpu["gpu_instances"] if g["start"] == proc.start]
        if not found or not found[0]["cis"]:
            raise ValueError(f"no GPU instance with a compute instance at start {proc.start}")
        gi, ci = found[0]["id"], found[0]["cis"][0]["id"]
    return {"pid": proc.pid, "name": proc.name, "used_memory_mib": proc.used_memory_mib, "gi": gi, "ci": ci}


def _one_layout(layouts: Any) -> bool:
    """A single layout for every GPU (a Layout-like object or a list of strings), not one per GPU."""
    if layouts is None or hasattr(layouts, "instances"):
        return True
    items = list(layouts)
    return bool(items) and all(isinstance(i, str) for i in items)


def host_state(model: Any, n_gpus: int, *, hostname: str = "gpu-host", mig: bool = True,
               layouts: Any = None, cis: bool = True,
               busy: dict[int, Sequence[Proc]] | None = None, faults: Sequence[dict[str, Any]] = (),
               **flags: Any) -> dict[str, Any]:
    """A host with `n_gpus` GPUs of one model. `layouts`: one for all GPUs or one per GPU (None = empty).
    `busy`: GPU index -> processes. `flags`: root, ssh, driver_loaded, nvidia_smi, user, catalog_files,
    driver_version (e.g. "470.57.02": placement rules of that driver; default sim.DEFAULT_DRIVER)..."""
    m = resolve_model(model, flags.get("catalog_files", ()))
    per_gpu = [layouts] * n_gpus if _one_layout(layouts) else list(layouts)
    gpus = [gpu_state(m, i, hostname=hostname, mig=mig, layout=per_gpu[i], cis=cis,
                      procs=(busy or {}).get(i, ()), driver=flags.get("driver_version")) for i in range(n_gpus)]
    return {"version": 1, "hostname": hostname, "root": True, "ssh": "ok", "uuid_counter": 100,
            "faults": [dict(f) for f in faults], "gpus": gpus, "log": [], **flags}


def write_state(path: str | os.PathLike[str], state: dict[str, Any]) -> Path:
    Path(path).write_text(json.dumps(state, indent=1))
    return Path(path)


def read_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(path).read_text())
    return data


def write_host(path: str | os.PathLike[str], model: Any, n_gpus: int, **kw: Any) -> Path:
    return write_state(path, host_state(model, n_gpus, **kw))


def sim_env(path: str | os.PathLike[str], base: dict[str, str] | None = None) -> dict[str, str]:
    """Environment that makes `nvidia-smi` the simulator for host state `path`."""
    env = dict(os.environ if base is None else base)
    env["PATH"] = f"{BIN_DIR}{os.pathsep}{env.get('PATH', '')}"
    env[sim.STATE_ENV] = os.fspath(path)
    env["MIGPLAN_SIM_PYTHON"] = sys.executable
    return env


def run_sim(argv: Sequence[str], path: str | os.PathLike[str], *,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run `argv` (starting with "nvidia-smi") through the wrapper script, as a real process."""
    return subprocess.run(list(argv), env=sim_env(path), capture_output=True, text=True, timeout=timeout)


def call_sim(argv: Sequence[str], path: str | os.PathLike[str]) -> tuple[int, str, str]:
    """Run the simulator in-process (fast): (exit code, stdout, stderr). argv starts with "nvidia-smi"."""
    out, err = io.StringIO(), io.StringIO()
    code = sim.main(list(argv)[1:], env={sim.STATE_ENV: os.fspath(path)}, stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def reboot(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The host reboots: every GPU and compute instance is gone ("the created MIG devices are not persistent
    across system reboots", §1) and so are the processes; a pending MIG mode takes effect; Ampere keeps its MIG
    mode (InfoROM), Hopper and later come back with MIG disabled (§1). Returns the new state."""
    st = read_state(path)
    for gpu in st["gpus"]:
        model = sim.model_of(st, gpu)
        gpu["gpu_instances"], gpu["processes"] = [], []
        if model is None:
            continue
        mode = gpu["mig_pending"] if model.reset_required_for_mode else False
        gpu["mig_current"] = gpu["mig_pending"] = mode
    write_state(path, st)
    return st
