"""What a host says migplan assigned there: its `assignments.json`, read back as an observation (pure).

`migplan apply` writes `<state_dir>/assignments.json` on every host it applies (`fleet.assignments`): each
workload placed there, with its GPU and instance. Discovery reads it back, and the planner takes each entry
as the workload's place (`planner.problem`), whether or not its processes have started yet: a workload the
last apply placed is not "left out" again, and the instance it was given is not idle. Without this, a
workload that has not started (or whose profile has no `observed` place) is re-placed on every replan.

The file comes from the host, so it is untrusted input: bounded in size, every field checked; a file that
does not pass is not used (a note on the host says why), never a failed discovery: planning without it is
what migplan did before it existed.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any

from migplan import names
from migplan.catalog.layout import Instance
from migplan.errors import InputError

ASSIGNMENTS_FILE = "assignments.json"
ASSIGNMENTS_KIND = "migplan/assignments"
MAX_ASSIGNMENTS_BYTES = 4 * 1024 * 1024  # 20,000 workloads at ~200 bytes; a host holds at most 64 GPUs
MAX_ASSIGNED = 64 * names.MAX_MIG_SLICES  # one workload per instance (or whole GPU): 64 GPUs x 16 slices at most


@dataclass(frozen=True, order=True)
class Assigned:
    """One workload's place on a host as the last apply there wrote it."""

    workload: str
    gpu: int
    instance: Instance | None  # None: the whole GPU


@dataclass(frozen=True)
class HostAssignments:
    plan: str  # fingerprint of the plan that wrote them
    written_at: str  # ISO 8601 UTC, as written
    items: tuple[Assigned, ...]

    def when(self) -> float | None:
        """`written_at` as unix seconds (None when it does not read as the apply writes it)."""
        return parse_stamp(self.written_at)


def parse_stamp(text: str) -> float | None:
    try:
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc).timestamp()
    except (ValueError, TypeError, OverflowError):
        return None


class BadAssignments(ValueError):
    """The host's assignments.json is not one migplan wrote (the message says which field)."""


def _item(w: object, n: int) -> Assigned:
    where = f"workloads[{n}]"
    if not isinstance(w, dict) or not {"name", "gpu", "instance"} <= set(w):
        raise BadAssignments(f"{where}: needs name, gpu and instance")
    name, gpu, inst = w["name"], w["gpu"], w["instance"]
    if not isinstance(name, str) or not names.WORKLOAD_NAME.fullmatch(_base_name(name)):
        raise BadAssignments(f"{where}.name: not a workload name")
    if type(gpu) is not int or not 0 <= gpu <= names.MAX_GPU_INDEX:
        raise BadAssignments(f"{where}.gpu: not a GPU index")
    if inst is None:
        return Assigned(name, gpu, None)
    if not isinstance(inst, str) or len(inst) > 40:
        raise BadAssignments(f"{where}.instance: not PROFILE@START")
    try:
        return Assigned(name, gpu, Instance.parse(inst))
    except (ValueError, InputError) as err:
        raise BadAssignments(f"{where}.instance: {err}") from None


def _base_name(name: str) -> str:
    """A replica's name is its workload's with `#K` (`chat#1`: planner/problem.py); the workload's is checked."""
    base, sep, k = name.rpartition("#")
    return base if sep and k.isascii() and k.isdigit() and len(k) <= 4 else name


def host_document(data: bytes, host: str, kind: str, most: int, bad: type[ValueError]) -> dict[str, Any]:
    """The JSON object of a file migplan wrote on `host` (`kind`, version 1, at most `most` bytes), or `bad`."""
    if len(data) > most:
        raise bad(f"larger than {most} bytes")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise bad(f"not JSON ({type(err).__name__})") from None
    if not isinstance(doc, dict) or doc.get("kind") != kind or doc.get("version") != 1:
        raise bad(f"not a {kind} version 1 document")
    if doc.get("host") != host:
        raise bad(f"written for host {str(doc.get('host'))[:80]!r}, not {host!r}")
    return doc


def parse_assignments(data: bytes, host: str) -> HostAssignments:
    """The strict reader of a host's assignments.json (BadAssignments says what is wrong)."""
    doc = host_document(data, host, ASSIGNMENTS_KIND, MAX_ASSIGNMENTS_BYTES, BadAssignments)
    plan, stamp = doc.get("plan"), doc.get("written_at")
    if not isinstance(plan, str) or len(plan) > 100 or not isinstance(stamp, str) or parse_stamp(stamp) is None:
        raise BadAssignments("plan or written_at missing or malformed")
    listed = doc.get("workloads")
    if not isinstance(listed, list) or len(listed) > MAX_ASSIGNED:
        raise BadAssignments(f"workloads: a list of at most {MAX_ASSIGNED}")
    items = [_item(w, n) for n, w in enumerate(listed)]
    if len({a.workload for a in items}) != len(items):
        raise BadAssignments("a workload is listed twice")
    if len({(a.gpu, a.instance) for a in items}) != len(items):
        raise BadAssignments("two workloads are assigned one instance")
    return HostAssignments(plan, stamp, tuple(sorted(items)))


__all__ = ["ASSIGNMENTS_FILE", "MAX_ASSIGNMENTS_BYTES", "Assigned", "BadAssignments", "HostAssignments",
           "parse_assignments", "parse_stamp"]
