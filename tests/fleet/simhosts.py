"""Host states for the nvidia-smi simulator, shaped for fleet tests (wraps tests/sim/fleet.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from migplan.catalog import GpuModel, builtin_catalog
from migplan.catalog.layout import Layout, enumerate_layouts
from tests.sim.fleet import Proc, host_state, read_state, write_state

MODELS = builtin_catalog().models


def mixed_layout(model: GpuModel) -> Layout:
    """A maximal layout with as many different profiles as possible (deterministic)."""
    layouts = enumerate_layouts(model, maximal=True)
    return max(layouts, key=lambda lay: (len(lay.profile_counts()), -len(lay)))


def state(model: GpuModel | str | None, n_gpus: int, *, hostname: str, layouts: Sequence[Layout | None] = (),
          mig: Sequence[bool] = (), pending: dict[int, bool] | None = None,
          busy: Mapping[int, Sequence[Proc]] | None = None, **flags: Any) -> dict[str, Any]:
    """`host_state` plus per-GPU MIG mode (`mig[i]`) and pending mode (`pending[i]`)."""
    per_gpu = list(layouts) or [None] * n_gpus
    st = host_state(model, n_gpus, hostname=hostname, layouts=per_gpu, busy=dict(busy or {}), **flags)
    for i, gpu in enumerate(st["gpus"]):
        if i < len(mig) and not mig[i]:
            gpu["mig_current"] = gpu["mig_pending"] = False
            gpu["gpu_instances"] = []
        if pending and i in pending:
            gpu["mig_pending"] = pending[i]
    return st


# the fleet tests' short names for the simulator's own (they were copies of these)
read, write = read_state, write_state


__all__ = ["MODELS", "Proc", "mixed_layout", "read", "state", "write"]
