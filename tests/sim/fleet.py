"""Build host state files for the nvidia-smi simulator (tests/sim/nvidia_smi_sim.py).

    path = write_host(tmp_path / "gpu01.json", "A100-SXM4-40GB", 2, layouts=[Layout.parse(["7g.40gb@0"]), None])
    env = sim_env(path)            # PATH with tests/sim/bin first, MIGPLAN_SIM_STATE=path
    subprocess.run(["nvidia-smi", "mig", "-lgi"], env=env)
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from migplan.catalog import builtin_catalog
from migplan.catalog.model import GpuModel
from migplan.layout import Layout, validate_layout

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


def gpu_state(model: GpuModel | None, index: int, *, hostname: str = "gpu-host", mig: bool = True,
              layout: Layout | None = None, cis: bool = True, procs: Sequence[Proc] = (),
              name: str | None = None, memory_total_mib: int | None = None,
              mode_reset: str = "in-use") -> dict[str, Any]:
    """One GPU: `model` None is a GPU without MIG (like a T4). `layout` is created with default CIs."""
    uuid = _uuid(f"{hostname}/{index}")
    gpu: dict[str, Any] = {
        "index": index, "model": None if model is None else model.id,
        "name": name or (model.smi_names[0] if model and model.smi_names else f"NVIDIA {model.id if model else 'T4'}"),
        "uuid": uuid, "pci_bus_id": f"00000000:{0x17 + 0x10 * index:02X}:00.0",
        "pci_device_id": (model.pci_device_ids[0][2:].upper() if model and model.pci_device_ids else "1EB8") + "10DE",
        "memory_total_mib": memory_total_mib or (int(model.memory_mib * 1.02) if model else 15360),
        "mig_current": bool(mig and model), "mig_pending": bool(mig and model), "mode_reset": mode_reset,
        "gpu_instances": [], "processes": [],
    }
    gpu["pci_device_id"] = "0x" + gpu["pci_device_id"]
    state: dict[str, Any] = {"uuid_counter": 0}
    if layout is not None and model is not None:
        validate_layout(model, layout)
        for inst in layout.instances:
            prof = model.profile(inst.profile)
            gi = {"id": sim.next_gi_id(model, gpu, prof.memory_slices), "profile_id": prof.id, "start": inst.start,
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


def host_state(model: str | GpuModel | None, n_gpus: int, *, hostname: str = "gpu-host", mig: bool = True,
               layouts: Sequence[Layout | None] | Layout | None = None, cis: bool = True,
               busy: dict[int, Sequence[Proc]] | None = None, faults: Sequence[dict[str, Any]] = (),
               **flags: Any) -> dict[str, Any]:
    """A host with `n_gpus` GPUs of one model. `layouts`: one for all GPUs or one per GPU (None = empty).
    `busy`: GPU index -> processes. `flags`: root, ssh, driver_loaded, nvidia_smi, user, catalog_files..."""
    m = builtin_catalog().get(model) if isinstance(model, str) else model
    per_gpu = list(layouts) if isinstance(layouts, (list, tuple)) else [layouts] * n_gpus
    gpus = [gpu_state(m, i, hostname=hostname, mig=mig, layout=per_gpu[i], cis=cis,
                      procs=(busy or {}).get(i, ())) for i in range(n_gpus)]
    return {"version": 1, "hostname": hostname, "root": True, "ssh": "ok", "uuid_counter": 100,
            "faults": [dict(f) for f in faults], "gpus": gpus, "log": [], **flags}


def write_state(path: str | os.PathLike[str], state: dict[str, Any]) -> Path:
    Path(path).write_text(json.dumps(state, indent=1))
    return Path(path)


def read_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(Path(path).read_text())
    return data


def write_host(path: str | os.PathLike[str], model: str | GpuModel | None, n_gpus: int, **kw: Any) -> Path:
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
