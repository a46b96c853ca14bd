"""The plan document: versioned, written as JSON or YAML, read back strictly (pure).

    version: 1
    kind: migplan/plan
    fingerprint: sha256:...        # of the observed state the plan was computed from
    source: inventory
    policy: {...}                  # every knob used
    solve: {solver, status, objective, bound, gap, time_s, gpus_lower_bound}
    summary: {...}
    gpus: [{host, index, model, uuid, note, current: [..]|null, target: [..]|null, actions: [..]}]
    workloads: [{name, workload, status, host, gpu, instance, memory_mib, slices, kept, moved, reason}]

Layouts are lists of PROFILE@START; `null` means MIG disabled. Actions are `OP` or `OP PROFILE@START`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from migplan.errors import InputError, MigplanError
from migplan.layout import Layout
from migplan.planner.diff import OPS, Action

PLAN_VERSION = 1
PLAN_KIND = "migplan/plan"


class PlanError(MigplanError):
    """No plan could be made (e.g. more whole GPUs asked to be kept free than exist), or a plan failed its checks."""


@dataclass(frozen=True)
class SolveInfo:
    solver: str
    status: str
    objective: float | None
    bound: float | None
    gap: float | None
    time_s: float
    gpus_lower_bound: int | None


@dataclass(frozen=True)
class Summary:
    gpus_total: int
    gpus_planned: int  # not reserved or excluded
    gpus_used: int
    gpus_lower_bound: int | None
    gpus_changed: int
    free_whole_gpus: int
    instances_destroyed: int
    instances_created: int
    workloads_placed: int
    workloads_unplaced: int
    workloads_disrupted: int
    busy_disrupted: int  # instances (or MIG-disabled GPUs) with unprofiled processes that the plan stops
    stranded_slices: int
    placed_value: float


@dataclass(frozen=True)
class GpuPlan:
    host: str
    index: int
    model: str
    uuid: str | None
    current: Layout | None
    target: Layout | None
    actions: tuple[Action, ...]
    note: str | None = None  # reserved | excluded


@dataclass(frozen=True)
class WorkloadPlan:
    name: str
    workload: str
    status: str  # placed | unplaced
    host: str | None = None
    gpu: int | None = None
    instance: str | None = None  # PROFILE@START, or None for the whole GPU / unplaced
    memory_mib: int = 0
    slices: int = 0
    kept: bool = False
    moved: bool = False
    reason: str | None = None


@dataclass(frozen=True)
class Plan:
    fingerprint: str
    source: str
    policy: Mapping[str, Any]
    solve: SolveInfo
    summary: Summary
    gpus: tuple[GpuPlan, ...]
    workloads: tuple[WorkloadPlan, ...]
    version: int = PLAN_VERSION

    @functools.cached_property
    def _by_key(self) -> dict[tuple[str, int], GpuPlan]:
        return {(g.host, g.index): g for g in self.gpus}

    def gpu(self, host: str, index: int) -> GpuPlan | None:
        return self._by_key.get((host, index))


def _layout(lay: Layout | None) -> list[str] | None:
    return lay.as_list() if lay is not None else None


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    return {
        "version": plan.version,
        "kind": PLAN_KIND,
        "fingerprint": plan.fingerprint,
        "source": plan.source,
        "policy": dict(plan.policy),
        "solve": asdict(plan.solve),
        "summary": asdict(plan.summary),
        "gpus": [{"host": g.host, "index": g.index, "model": g.model, "uuid": g.uuid, "note": g.note,
                  "current": _layout(g.current), "target": _layout(g.target),
                  "actions": [str(a) for a in g.actions]} for g in plan.gpus],
        "workloads": [asdict(w) for w in plan.workloads],
    }


# --- strict loader --------------------------------------------------------------------------

def _fail(where: str, message: str) -> InputError:
    return InputError(message, key=where, hint="regenerate the plan with 'migplan propose --out PLAN'")


def _map(doc: Any, where: str, required: set[str], optional: set[str] = frozenset()) -> dict[str, Any]:  # type: ignore[assignment]
    if not isinstance(doc, dict):
        raise _fail(where, "expected a mapping")
    unknown = set(doc) - required - optional
    if unknown:
        raise _fail(where, f"unknown field(s) {', '.join(sorted(map(str, unknown)))}")
    missing = required - set(doc)
    if missing:
        raise _fail(where, f"missing field(s) {', '.join(sorted(missing))}")
    return doc


def _typed(value: Any, kinds: tuple[type, ...], where: str, *, nullable: bool = False) -> Any:
    if value is None and nullable:
        return None
    if isinstance(value, bool) and bool not in kinds:
        raise _fail(where, f"expected {'/'.join(k.__name__ for k in kinds)}, got {value!r}")
    if not isinstance(value, kinds):
        raise _fail(where, f"expected {'/'.join(k.__name__ for k in kinds)}, got {value!r}")
    return value


def _read_layout(value: Any, where: str) -> Layout | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _fail(where, "expected a list of PROFILE@START or null")
    try:
        return Layout.parse([_typed(v, (str,), where) for v in value])
    except InputError as err:
        raise _fail(where, err.message) from err


def _read_action(text: Any, where: str) -> Action:
    op, _, inst = _typed(text, (str,), where).partition(" ")
    if op not in OPS:
        raise _fail(where, f"unknown action {op!r} (one of {', '.join(OPS)})")
    return Action(op, inst or None)


def _dc(cls: type[Any], doc: Any, where: str) -> Any:
    names = {f.name for f in fields(cls)}
    return cls(**_map(doc, where, names))


def _gpu(doc: Any, where: str) -> GpuPlan:
    d = _map(doc, where, {"host", "index", "model", "uuid", "note", "current", "target", "actions"})
    return GpuPlan(host=_typed(d["host"], (str,), f"{where}.host"), index=_typed(d["index"], (int,), f"{where}.index"),
                   model=_typed(d["model"], (str,), f"{where}.model"),
                   uuid=_typed(d["uuid"], (str,), f"{where}.uuid", nullable=True),
                   current=_read_layout(d["current"], f"{where}.current"),
                   target=_read_layout(d["target"], f"{where}.target"),
                   actions=tuple(_read_action(a, f"{where}.actions[{i}]")
                                 for i, a in enumerate(_typed(d["actions"], (list,), f"{where}.actions"))),
                   note=_typed(d["note"], (str,), f"{where}.note", nullable=True))


def plan_from_dict(doc: Any, source: str = "plan") -> Plan:
    """A plan read back strictly: unknown or missing fields, a wrong version or kind are errors naming the field."""
    d = _map(doc, source, {"version", "kind", "fingerprint", "source", "policy", "solve", "summary", "gpus",
                           "workloads"})
    if d["version"] != PLAN_VERSION:
        raise _fail(f"{source}: version", f"plan version {d['version']!r} is not supported (this migplan reads "
                                          f"version {PLAN_VERSION})")
    if d["kind"] != PLAN_KIND:
        raise _fail(f"{source}: kind", f"expected kind {PLAN_KIND!r}, got {d['kind']!r}")
    fp = _typed(d["fingerprint"], (str,), "fingerprint")
    if not fp.startswith("sha256:"):
        raise _fail("fingerprint", "expected sha256:<hex>")
    return Plan(
        fingerprint=fp, source=_typed(d["source"], (str,), "source"),
        policy=_typed(d["policy"], (dict,), "policy"),
        solve=_dc(SolveInfo, d["solve"], "solve"), summary=_dc(Summary, d["summary"], "summary"),
        gpus=tuple(_gpu(g, f"gpus[{i}]") for i, g in enumerate(_typed(d["gpus"], (list,), "gpus"))),
        workloads=tuple(_dc(WorkloadPlan, w, f"workloads[{i}]")
                        for i, w in enumerate(_typed(d["workloads"], (list,), "workloads"))))
