"""The change an apply has under way on a host: `<state_dir>/inflight.json`, and what an interrupted one needs (pure).

Before the first mutating command on a host, apply writes (atomically, on the host) every GPU it is about to
change: its checkpoint (the layout and MIG mode read under the lock) and its target. When the host's apply has
ended (each GPU applied or rolled back) the file is removed. A file still there when the next apply or replan
reads the host says that an apply stopped in the middle (killed, its connection or its host gone): a GPU
whose layout is then neither its checkpoint nor its target was left half-done, and is repaired first
(`fleet.apply.repair`): finished when the plan being applied still wants that target, else put back to the
checkpoint. The record lives on the host, so any later run (another management host, a reboot, a host that
was unreachable for a day) finds it.

The file comes from the host: untrusted, bounded and checked like every other document it holds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from migplan import names
from migplan.catalog.layout import Layout
from migplan.errors import InputError
from migplan.model.assigned import host_document

INFLIGHT_FILE = "inflight.json"
INFLIGHT_KIND = "migplan/inflight"
MAX_INFLIGHT_BYTES = 1024 * 1024


@dataclass(frozen=True)
class InFlightGpu:
    index: int
    uuid: str | None
    checkpoint: Layout | None  # None: MIG disabled
    target: Layout | None


@dataclass(frozen=True)
class InFlight:
    host: str
    plan: str  # fingerprint of the plan being applied
    started_at: str
    gpus: tuple[InFlightGpu, ...]

    def gpu(self, index: int) -> InFlightGpu | None:
        return next((g for g in self.gpus if g.index == index), None)


def inflight_document(record: InFlight) -> str:
    return json.dumps({"version": 1, "kind": INFLIGHT_KIND, "host": record.host, "plan": record.plan,
                       "started_at": record.started_at,
                       "gpus": [{"index": g.index, "uuid": g.uuid, "checkpoint": _listed(g.checkpoint),
                                 "target": _listed(g.target)} for g in record.gpus]}, indent=2) + "\n"


def _listed(layout: Layout | None) -> list[str] | None:
    return None if layout is None else layout.as_list()


class BadInFlight(ValueError):
    """inflight.json is not one migplan wrote."""


def _layout(value: object, where: str) -> Layout | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > names.MAX_MIG_SLICES or \
            not all(isinstance(i, str) and len(i) <= 40 and names.PROFILE_NAME.match(i.partition("@")[0])
                    for i in value):
        raise BadInFlight(f"{where}: a list of PROFILE@START, or null for MIG disabled")
    try:
        return Layout.parse(value)
    except (ValueError, InputError) as err:
        raise BadInFlight(f"{where}: {err}") from None


def parse_inflight(data: bytes, host: str) -> InFlight:
    doc = host_document(data, host, INFLIGHT_KIND, MAX_INFLIGHT_BYTES, BadInFlight)
    plan, started = doc.get("plan"), doc.get("started_at")
    if not isinstance(plan, str) or len(plan) > 100 or not isinstance(started, str) or len(started) > 40:
        raise BadInFlight("plan or started_at missing or malformed")
    listed = doc.get("gpus")
    if not isinstance(listed, list) or len(listed) > names.MAX_GPUS_PER_HOST:
        raise BadInFlight(f"gpus: a list of at most {names.MAX_GPUS_PER_HOST}")
    gpus: list[InFlightGpu] = []
    for n, g in enumerate(listed):
        where = f"gpus[{n}]"
        if not isinstance(g, dict) or set(g) != {"index", "uuid", "checkpoint", "target"}:
            raise BadInFlight(f"{where}: needs exactly index, uuid, checkpoint, target")
        index, uuid = g["index"], g["uuid"]
        if type(index) is not int or not 0 <= index <= names.MAX_GPU_INDEX or any(x.index == index for x in gpus):
            raise BadInFlight(f"{where}.index: not a GPU index (or listed twice)")
        if uuid is not None and (not isinstance(uuid, str) or not names.GPU_UUID.fullmatch(uuid)):
            raise BadInFlight(f"{where}.uuid: not a GPU UUID")
        gpus.append(InFlightGpu(index, uuid, _layout(g["checkpoint"], f"{where}.checkpoint"),
                                _layout(g["target"], f"{where}.target")))
    return InFlight(host, plan, started, tuple(gpus))


__all__ = ["INFLIGHT_FILE", "MAX_INFLIGHT_BYTES", "BadInFlight", "InFlight", "InFlightGpu", "inflight_document",
           "parse_inflight"]
