"""Observed fleet state: the same layout types the planner outputs, so a diff is a pure function.

A `FleetState` comes from the inventory's declared layouts (offline planning) or from live
discovery (`migplan discover` writes it as a snapshot document). Its fingerprint lets `apply`
refuse a plan that was computed against a state that has since changed.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass

from migplan.inventory import Inventory
from migplan.layout import Instance, Layout


@dataclass(frozen=True)
class GpuState:
    host: str
    index: int
    model: str  # catalog model id
    uuid: str | None = None
    mig_enabled: bool = False
    mig_pending: bool | None = None  # the mode after the next reset, when it differs from the current one
    layout: Layout | None = None  # None when MIG is disabled
    busy: tuple[Instance, ...] = ()  # instances with running processes: never destroyed without consent
    whole_gpu_busy: bool = False  # MIG disabled and processes running: enabling MIG would stop them
    reserved: bool = False
    excluded: bool = False

    @property
    def key(self) -> tuple[str, int]:
        return (self.host, self.index)

    def identity(self) -> dict[str, object]:
        """What the fingerprint covers: everything a plan's actions depend on."""
        return {
            "host": self.host,
            "index": self.index,
            "model": self.model,
            "uuid": self.uuid,
            "mig_enabled": self.mig_enabled,
            "mig_pending": self.mig_pending,
            "layout": self.layout.as_list() if self.layout is not None else None,
            "busy": [str(i) for i in self.busy],
            "whole_gpu_busy": self.whole_gpu_busy,
        }


@dataclass(frozen=True)
class FleetState:
    gpus: tuple[GpuState, ...]
    source: str = "inventory"  # inventory | discovery | snapshot:<path>

    def __iter__(self) -> Iterator[GpuState]:
        return iter(self.gpus)

    def gpu(self, host: str, index: int) -> GpuState | None:
        return next((g for g in self.gpus if g.host == host and g.index == index), None)

    def fingerprint(self) -> str:
        """sha256 over the canonical JSON of every GPU's identity, sorted by (host, index)."""
        doc = [g.identity() for g in sorted(self.gpus, key=lambda g: g.key)]
        blob = json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()
        return "sha256:" + hashlib.sha256(blob).hexdigest()


def state_from_inventory(inventory: Inventory) -> FleetState:
    """The state the inventory declares. A GPU with neither `mig` nor `layout` is taken as MIG
    disabled (one whole-GPU device), which is how a GPU boots unless MIG was turned on."""
    gpus = []
    for host, spec in inventory.gpus():
        enabled = bool(spec.mig_enabled) if spec.mig_enabled is not None else spec.layout is not None
        layout = (spec.layout or Layout()) if enabled else None
        gpus.append(GpuState(host=host.name, index=spec.index, model=spec.model, uuid=spec.uuid,
                             mig_enabled=enabled, layout=layout, reserved=spec.reserved, excluded=spec.excluded))
    return FleetState(tuple(gpus), source="inventory")
