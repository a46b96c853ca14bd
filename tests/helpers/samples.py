"""Input documents the apply, discover and replan tests share, written where a test wants them: an inventory of one
host reached with `connection: local` (the simulator on this machine: tests/sim_runner.py), workload profiles of a
flat demand, and the simulator catalog of an A100 whose driver gives less memory than the catalog."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml


def local_inventory(folder: Path, name: str = "h1", **keys: Any) -> Path:
    """`folder`/inv.yaml: host `name` with `connection: local`, discovered, its apply lock `folder`/apply.lock and its
    state directory `folder`/etc; `keys`: more of the host's keys (hooks...)."""
    path = folder / "inv.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "hosts": {name: {
        "connection": "local", "discover": True, "lock_file": str(folder / "apply.lock"),
        "state_dir": str(folder / "etc"), **keys}}}))
    return path


def flat_workload(name: str, mib: int, **keys: Any) -> dict[str, Any]:
    """One workload's profile: memory `mib` at every percentile, compute 5% (p50) to 10%; `keys`: observed, pin..."""
    return {"name": name, "memory_mib": {"p50": mib, "p95": mib, "p99": mib, "max": mib},
            "compute": {"p50": 0.05, "p95": 0.1, "p99": 0.1, "max": 0.1}, **keys}


def write_profiles(path: Path, workloads: Iterable[dict[str, Any]]) -> Path:
    """A profiles document (version 1) of `workloads`, in their order."""
    path.write_text(yaml.safe_dump({"version": 1, "workloads": list(workloads)}))
    return path


# A host model the simulator plays (its own catalog file, written by hand): an A100-40GB whose driver
# gives 1g.5gb 4736 MiB (prints 4.62) instead of 4864 (4.75), and offers no 1g.10gb.
LOWMEM = """\
version: 1
models:
  - id: A100-LOWMEM
    architecture: ampere
    memory_slices: 8
    compute_slices: 7
    smi_names: ["NVIDIA A100-SXM4-40GB"]
    pci_device_ids: ["0x20b0"]
    profiles:
      - {name: 1g.5gb, id: 19, compute_slices: 1, memory_slices: 1, memory_mib: 4736, max_count: 7, sm_count: 14,
         starts: [0, 1, 2, 3, 4, 5, 6], engines: {ce: 1, dec: 0, enc: 0, jpeg: 0, ofa: 0}}
      - {name: 2g.10gb, id: 14, compute_slices: 2, memory_slices: 2, memory_mib: 9856, max_count: 3, sm_count: 28,
         starts: [0, 2, 4], engines: {ce: 2, dec: 1, enc: 0, jpeg: 0, ofa: 0}}
      - {name: 3g.20gb, id: 9, compute_slices: 3, memory_slices: 4, memory_mib: 19968, max_count: 2, sm_count: 42,
         starts: [0, 4], engines: {ce: 3, dec: 2, enc: 0, jpeg: 0, ofa: 0}}
      - {name: 4g.20gb, id: 5, compute_slices: 4, memory_slices: 4, memory_mib: 19968, max_count: 1, sm_count: 56,
         starts: [0], engines: {ce: 4, dec: 2, enc: 0, jpeg: 0, ofa: 0}}
      - {name: 7g.40gb, id: 0, compute_slices: 7, memory_slices: 8, memory_mib: 40192, max_count: 1, sm_count: 98,
         starts: [0], engines: {ce: 7, dec: 5, enc: 0, jpeg: 1, ofa: 1}}
"""


def lowmem_catalog(folder: Path) -> Path:
    """`folder`/sim-catalog.yaml: LOWMEM, for the simulator's `catalog_files`."""
    path = folder / "sim-catalog.yaml"
    path.write_text(LOWMEM)
    return path
