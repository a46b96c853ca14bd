"""Observed fleet state: the same layout types the planner outputs, so a diff is a pure function.

A `FleetState` comes from the inventory's declared layouts (offline planning) or from live
discovery (`migplan discover` writes it as a snapshot document). Two fingerprints guard against
acting on a state that has since changed:

* the fleet fingerprint (`FleetState.fingerprint`) covers every GPU, so it changes whenever any
  process starts anywhere: it says "this plan was computed from exactly that state";
* the per-GPU fingerprint (`GpuState.fingerprint`) covers only what a plan's actions on that GPU
  depend on, so `apply` can check each host, and each GPU, on its own (`changes`).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from migplan.catalog import Catalog
from migplan.catalog.geometry import GpuModel
from migplan.catalog.layout import Instance, Layout
from migplan.inventory import Inventory
from migplan.model.assigned import HostAssignments

GpuKey = tuple[str, int]
Hold = Literal["reserved", "excluded"]


@dataclass(frozen=True)
class GpuState:
    """One GPU as observed (or declared): what the planner plans from and what `apply` re-checks."""

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
    # What the GPU's target may be, when not anything the catalog allows: plain MIG profiles its layout may hold,
    # and "whole" (profiles.WHOLE_GPU) where it may have MIG disabled; a MIG layout under such a rule holds at
    # least one instance. Set by an inventory source that knows how the host offers its GPUs (Kubernetes: under
    # the device plugin's `single` strategy only the node's one profile, never an empty MIG GPU or MIG off;
    # inventory/k8s_nodes.py). None: no rule. In the fingerprint only when set.
    allowed: tuple[str, ...] | None = None

    # cached (the object is immutable): the planner asks each GPU's key, layout and hold ~15-30 times (100,000-
    # 200,000 calls at 7,000 GPUs); the value lives in the instance's __dict__, not in its fields
    @functools.cached_property
    def key(self) -> GpuKey:
        return (self.host, self.index)

    @functools.cached_property
    def current(self) -> Layout | None:
        """The layout in force: None when MIG is disabled (one whole-GPU device)."""
        return self.layout if self.mig_enabled else None

    @functools.cached_property
    def hold(self) -> Hold | None:
        """Why the planner must leave this GPU exactly as it is, if it must."""
        if self.excluded:
            return "excluded"
        return "reserved" if self.reserved else None

    @property
    def whole_busy(self) -> bool:
        """Processes run on the GPU with MIG disabled: enabling MIG would stop them."""
        return self.whole_gpu_busy and not self.mig_enabled

    def identity(self) -> dict[str, object]:
        """What the fingerprints cover: everything a plan's actions on this GPU depend on (the `allowed` rule only
        where there is one, so that a GPU without one keeps the fingerprint it had before rules existed)."""
        out: dict[str, object] = {
            "host": self.host,
            "index": self.index,
            "model": self.model,
            "uuid": self.uuid,
            "mig_enabled": self.mig_enabled,
            "mig_pending": self.mig_pending,
            "layout": self.current.as_list() if self.current is not None else None,
            "busy": [str(i) for i in sorted(self.busy)],
            "whole_gpu_busy": self.whole_busy,
        }
        if self.allowed is not None:
            out["allowed"] = list(self.allowed)
        return out

    def may_hold(self, target: Layout | None) -> str | None:
        """Why `target` breaks this GPU's `allowed` rule, or None when it keeps it (or there is none). Profiles are
        compared as named (`1g.10gb+me` is not `1g.10gb`: the device plugin names them apart)."""
        rule = self.allowed
        if rule is None:
            return None
        only = f"only {', '.join(rule)} may be" if rule else "nothing may be"
        if target is None:
            return None if "whole" in rule else f"MIG disabled, but {only}"
        if not target.instances:
            return f"MIG enabled without an instance, but {only}"
        bad = sorted({i.profile for i in target.instances if i.profile not in rule})
        return f"{', '.join(bad)}, but {only}" if bad else None

    def canonical(self) -> str:
        """The canonical JSON text of `identity()` (sorted keys, no spaces), made once: the object is immutable."""
        done = self.__dict__.get("_canonical")
        if done is None:
            done = _canonical(self.identity())
            object.__setattr__(self, "_canonical", done)
        return str(done)

    def fingerprint(self) -> str:
        """sha256 over the canonical JSON of this GPU's identity (made once)."""
        return _memo(self, lambda: _digest(self.canonical()))


@dataclass(frozen=True)
class FleetState:
    gpus: tuple[GpuState, ...]
    source: str = "inventory"  # inventory | discovery | snapshot:<path>
    models: tuple[GpuModel, ...] = ()  # models built from hosts' own profile tables (not in the catalog)
    # (host, its assignments.json): where the last apply on each host placed its workloads (`model.assigned`);
    # the planner takes them as the workloads' places. Not in the fingerprint: they follow the GPUs' layouts.
    assigned: tuple[tuple[str, HostAssignments], ...] = ()

    def __iter__(self) -> Iterator[GpuState]:
        return iter(self.gpus)

    def gpu(self, host: str, index: int) -> GpuState | None:
        return next((g for g in self.gpus if g.host == host and g.index == index), None)

    def fingerprint(self) -> str:
        """sha256 over the canonical JSON of the list of every GPU's identity, sorted by (host, index) (made
        once). A list's canonical JSON is its items' texts joined by commas in brackets, so each GPU's own
        text (`GpuState.canonical`, made for its fingerprint) serves here too."""
        return _memo(self, lambda: _digest(
            "[" + ",".join(g.canonical() for g in sorted(self.gpus, key=lambda g: g.key)) + "]"))


def _memo(obj: object, make: Callable[[], str]) -> str:
    """A frozen dataclass's fingerprint, kept in its __dict__ (not a field: equality and replace() ignore it;
    `propose` makes the fleet's while worker processes still read the profiles)."""
    done = obj.__dict__.get("_fingerprint")
    if done is None:
        done = make()
        object.__setattr__(obj, "_fingerprint", done)
    return str(done)


# `json.dumps(doc, sort_keys=True, separators=(",", ":"))`, with one encoder for every GPU, not one made per call
_canonical = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode


def _digest(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def changes(assumed: GpuState, live: GpuState | None) -> list[str]:
    """What differs between the state a plan assumed for a GPU and the GPU as it is now (empty: unchanged).

    Each entry is one sentence for a person ("layout is X, the plan assumed Y"). Only what the plan's
    actions depend on counts (`GpuState.identity`); reserved/excluded flags come from the inventory.
    """
    where = f"GPU {assumed.index}"
    if live is None:
        return [f"{where}: not found on the host any more"]
    out = []
    if live.model != assumed.model:
        out.append(f"{where}: model is {live.model}, the plan assumed {assumed.model}")
    if assumed.uuid and live.uuid and assumed.uuid.lower() != live.uuid.lower():
        out.append(f"{where}: UUID is {live.uuid}, the plan assumed {assumed.uuid} (a different GPU)")
    if live.mig_enabled != assumed.mig_enabled:
        out.append(f"{where}: MIG is {_mode(live.mig_enabled)}, the plan assumed {_mode(assumed.mig_enabled)}")
    if live.mig_pending != assumed.mig_pending:
        now = "none" if live.mig_pending is None else _mode(live.mig_pending)
        then = "none" if assumed.mig_pending is None else _mode(assumed.mig_pending)
        out.append(f"{where}: pending MIG mode change is {now}, the plan assumed {then}")
    if live.current != assumed.current and live.mig_enabled == assumed.mig_enabled:
        out.append(f"{where}: layout is {_layout(live.current)}, the plan assumed {_layout(assumed.current)}")
    newly_busy = sorted(set(live.busy) - set(assumed.busy))
    if newly_busy:
        out.append(f"{where}: processes now run on {', '.join(map(str, newly_busy))}")
    if live.whole_busy and not assumed.whole_busy:
        out.append(f"{where}: processes now run on the whole GPU")
    freed = sorted(set(assumed.busy) - set(live.busy))
    if freed:
        out.append(f"{where}: {', '.join(map(str, freed))} no longer busy")
    return out


def _mode(on: bool) -> str:
    return "enabled" if on else "disabled"


def _layout(layout: Layout | None) -> str:
    return "MIG disabled" if layout is None else str(layout)


def state_from_inventory(inventory: Inventory, catalog: Catalog | None = None) -> FleetState:
    """The state the inventory declares. A GPU with neither `mig` nor `layout` is taken as MIG
    disabled (one whole-GPU device), which is how a GPU boots unless MIG was turned on.

    With `catalog`, offline planning is conservative about drivers: a profile the catalog marks
    `min_driver` is offered only on a host whose inventory `driver:` meets it (no `driver:`, none of
    them), and a combination an older driver refuses (an exclusion's `min_driver`) is refused there too;
    such a GPU is planned with the model of that driver (`driver_model`, in `FleetState.models`)."""
    gpus, models = [], {m.id: m for m in inventory.models}  # GPUs without MIG from Kubernetes labels
    catalog = inventory.catalog(catalog) if catalog is not None else None
    owned: dict[tuple[str, str | None], GpuModel] = {}  # (model, driver) -> driver_model: once, not per GPU
    for host, spec in inventory.gpus():
        enabled = bool(spec.mig_enabled) if spec.mig_enabled is not None else spec.layout is not None
        layout = (spec.layout or Layout()) if enabled else None
        model = spec.model
        if catalog is not None:
            own = owned.get((spec.model, host.driver))
            if own is None:
                own = owned[(spec.model, host.driver)] = driver_model(catalog.get(spec.model), host.driver)
            if layout is not None and own.excluded_together(i.profile for i in layout.instances):
                own = driver_model(catalog.get(spec.model), host.driver, layout)  # the layout shows a newer driver
            if own.id != spec.model:
                models[own.id] = own
                model = own.id
        gpus.append(GpuState(host=host.name, index=spec.index, model=model, uuid=spec.uuid,
                             mig_enabled=enabled, layout=layout, reserved=spec.reserved, excluded=spec.excluded,
                             allowed=spec.allowed))
    return FleetState(tuple(gpus), source="inventory", models=tuple(models.values()))


def driver_model(model: GpuModel, driver: str | None, layout: Layout | None = None) -> GpuModel:
    """`model` as a host with `driver` (None: unknown, so the oldest) has it (`GpuModel.for_host`): the same
    object when that driver lacks no profile and refuses no combination the model allows, else a model
    `<id>@host-<digest>` of the profiles it has that enforces the combinations it refuses (MIG User Guide,
    "Concepts": 4g.20gb with 3g.20gb before R510), unless the GPU's declared `layout` holds one."""
    own = model.for_host(driver, [i.profile for i in layout.instances] if layout is not None else ())
    if own is model or driver:
        return own
    return dataclasses.replace(own, source=f"{own.source} (set driver: in the inventory)")
