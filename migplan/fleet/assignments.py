"""Tell a host's tasks which MIG device is theirs, after an apply, and keep what was applied (pure: the
documents, their strict reader, and the set of files an apply leaves on a host, `host_files`; the caller writes
them in one round trip with the runner's `put_files`, pruning the stale env files with `ENV_PRUNE_RULE`).

On the host (`state_dir`, default /etc/migplan):
  assignments.json     every workload placed on the host whose instance exists (its device UUID was read after
                       the apply): GPU, instance, MIG device UUID
  env/<workload>.env   KEY=VALUE for a systemd EnvironmentFile= or `docker --env-file`, for exactly the workloads
                       of assignments.json: CUDA_VISIBLE_DEVICES=MIG-... (GPU-... for a whole GPU). Its first line
                       is always MIGPLAN_WORKLOAD=<name> (`ENV_MARKER`); an apply removes every other file of
                       env/ named as migplan names them (`ENV_FILE_NAME`) that begins with it (a workload moved
                       to another host, rolled back, or gone from the plan), and nothing else
  last-applied.json    the layout applied here last (per GPU: index, UUID, model, layout) and the placements,
                       for `migplan apply --last` at boot: MIG instances never survive a reboot (§1)
  move.json            during an apply, the move an `on_move` hook is called for
Locally: the same map for the whole fleet (`fleet_assignments_document`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from migplan import names
from migplan.catalog import Catalog
from migplan.catalog.layout import Instance, Layout, check_layout
from migplan.errors import InputError
from migplan.files import json_depth_ok
from migplan.fleet.snapshot import DiscoveredHost
from migplan.model.assigned import ASSIGNMENTS_FILE, ASSIGNMENTS_KIND
from migplan.model.gpu_plan import WorkloadPlan

FLEET_ASSIGNMENTS_KIND = "migplan/fleet-assignments"
LAST_APPLIED_KIND = "migplan/last-applied"
MOVE_KIND = "migplan/move"
LAST_APPLIED_FILE = "last-applied.json"
MAX_LAST_APPLIED_BYTES = 4 * 1024 * 1024
ENV_DIR = "env"
ENV_SUFFIX = ".env"
ENV_MARKER = "MIGPLAN_WORKLOAD="  # the first bytes of every env file migplan writes
ENV_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,194}\.env")  # what env_file_name returns, always
ENV_PRUNE_RULE = (ENV_DIR, ENV_SUFFIX, ENV_MARKER)  # runner.Prune(*ENV_PRUNE_RULE): the stale env files
MAX_ENV_BASE = 160  # a longer name is cut and gets a hash: the file name stays well within NAME_MAX (255)


@dataclass(frozen=True)
class Placement:
    """Where the plan puts one workload on a host."""

    workload: str
    gpu: int
    instance: str | None  # PROFILE@START; None: the whole GPU


@dataclass(frozen=True)
class Assignment:
    workload: str
    gpu: int
    instance: str | None  # PROFILE@START; None: the whole GPU
    device: str | None  # MIG-... or GPU-...: what CUDA_VISIBLE_DEVICES takes (None: not found on the host)


def placements(workloads: Iterable[WorkloadPlan], host: str) -> list[Placement]:
    return [Placement(w.name, w.gpu, w.instance) for w in workloads
            if w.on_gpu and w.host == host and w.gpu is not None]


def assignments(workloads: Iterable[WorkloadPlan], record: DiscoveredHost) -> list[Assignment]:
    """A plan's placements (its `workloads`) on this host, with the device UUIDs the host reports now."""
    return assignments_for(placements(workloads, record.name), record)


def assignments_for(items: Iterable[Placement], record: DiscoveredHost) -> list[Assignment]:
    gpus = {g.index: g for g in record.gpus}
    out = []
    for p in items:
        g = gpus.get(p.gpu)
        device = None
        if g is not None and p.instance is None:
            device = g.uuid
        elif g is not None and p.instance is not None:
            want = Instance.parse(p.instance)
            inst = next((i for i in g.instances if i.instance == want), None)
            uuids = [c.uuid for c in inst.compute_instances if c.uuid] if inst is not None else []
            device = uuids[0] if uuids else None
        out.append(Assignment(p.workload, p.gpu, p.instance, device))
    return out


def _listed(items: Sequence[Assignment]) -> list[dict[str, Any]]:
    return [{"name": a.workload, "gpu": a.gpu, "instance": a.instance, "device": a.device} for a in items]


def assignments_document(host: str, fingerprint: str, items: list[Assignment], written_at: str) -> str:
    doc: dict[str, Any] = {"version": 1, "kind": ASSIGNMENTS_KIND, "host": host, "plan": fingerprint,
                           "written_at": written_at, "workloads": _listed(items)}
    return json.dumps(doc, indent=2) + "\n"


def fleet_assignments_document(fingerprint: str, hosts: dict[str, Sequence[Assignment]], written_at: str) -> str:
    """The local copy: every host's map in one file."""
    doc = {"version": 1, "kind": FLEET_ASSIGNMENTS_KIND, "plan": fingerprint, "written_at": written_at,
           "hosts": {h: _listed(items) for h, items in sorted(hosts.items())}}
    return json.dumps(doc, indent=2) + "\n"


def is_workload_name(name: object) -> bool:
    """A workload's name as a plan holds it: `names.WORKLOAD_NAME`, or that with a replica's `#N`."""
    if not isinstance(name, str):
        return False
    base, _, replica = name.partition("#")
    return bool(names.WORKLOAD_NAME.fullmatch(base)) and (not replica or (replica.isascii() and replica.isdigit()
                                                                        and len(replica) <= 4))


def env_file_name(workload: str, taken: set[str]) -> str:
    """`ns/app:1` -> `ns_app_1.env`: every character but letters, digits and `._-` becomes `_`. A name that would
    collide with one in `taken`, or is longer than MAX_ENV_BASE, is cut and gets a short hash of the real name.
    The result always matches ENV_FILE_NAME (never `.`, `..`, a hidden name or a path) and is added to `taken`."""
    base = re.sub(r"[^A-Za-z0-9._-]", "_", workload)
    if not re.match(r"[A-Za-z0-9_]", base):
        base = "_" + base
    digest = hashlib.sha256(workload.encode("utf-8", "surrogateescape")).hexdigest()
    cut = base[:MAX_ENV_BASE]
    choices = ([base] if len(base) <= MAX_ENV_BASE else []) + [f"{cut}-{digest[:8]}", f"{cut}-{digest[:16]}"]
    numbered = (f"{cut}-{digest[:16]}-{n}" for n in itertools.count(2))  # the same name again: numbered
    name = next(c for c in itertools.chain(choices, numbered) if c not in taken)
    taken.add(name)
    return name + ENV_SUFFIX


def env_file(a: Assignment) -> str:
    """The env file of one workload; it begins with ENV_MARKER. The workload's name must be one a plan holds
    (`is_workload_name`: letters, digits and `._/:-#`, nothing a shell or systemd would read as syntax)."""
    if not is_workload_name(a.workload):
        raise InputError(f"{a.workload!r} is not a workload name; its env file is not written")
    lines = [f"{ENV_MARKER}{a.workload}", f"MIGPLAN_GPU={a.gpu}"]
    if a.instance is not None:
        lines.append(f"MIGPLAN_INSTANCE={a.instance}")
    if a.device is not None:
        lines.append(f"CUDA_VISIBLE_DEVICES={a.device}")
    return "\n".join(lines) + "\n"


def present(items: Iterable[Placement], record: DiscoveredHost) -> list[Assignment]:
    """The placements whose instance exists on the host as read (`record`, after the apply's verification): the
    MIG device UUID (or the whole GPU's UUID) is known. A placement on a GPU that was rolled back, refused or
    skipped, whose planned instance is not there, is left out: no env file names an instance that does not
    exist."""
    return [a for a in assignments_for(items, record) if a.device is not None]


def host_files(host: str, fingerprint: str, placed: Sequence[Placement], found: Sequence[Assignment],
               written_at: str, last_applied: str | None = None) -> list[tuple[str, str]]:
    """What an apply leaves in a host's state_dir, as (name inside it, text), in the order written: one env file
    per workload of `found` (those whose instance exists, `present`), assignments.json listing exactly `found`,
    and last-applied.json when given. Env file names are given over every placement of the host (`placed`, the
    plan's order), so a workload's file keeps its name whichever others are found. Any other env file migplan
    wrote there is stale: the caller prunes it (ENV_PRUNE_RULE) in the same round trip."""
    taken: set[str] = set()
    file_names: dict[str, str] = {}
    for p in placed:
        if p.workload not in file_names:
            file_names[p.workload] = env_file_name(p.workload, taken)
    out = []
    for a in found:
        name = file_names.get(a.workload) or file_names.setdefault(a.workload, env_file_name(a.workload, taken))
        out.append((f"{ENV_DIR}/{name}", env_file(a)))
    out.append((ASSIGNMENTS_FILE, assignments_document(host, fingerprint, list(found), written_at)))
    if last_applied is not None:
        out.append((LAST_APPLIED_FILE, last_applied))
    return out


# --- last applied -------------------------------------------------------------------------------

@dataclass(frozen=True)
class AppliedGpu:
    index: int
    uuid: str | None
    model: str  # catalog model id the layout was planned for
    layout: Layout | None  # None: MIG disabled


@dataclass(frozen=True)
class LastApplied:
    host: str
    plan: str  # fingerprint of the plan it came from
    applied_at: str
    gpus: tuple[AppliedGpu, ...]
    placements: tuple[Placement, ...]


def last_applied_document(last: LastApplied) -> str:
    doc = {"version": 1, "kind": LAST_APPLIED_KIND, "host": last.host, "plan": last.plan,
           "applied_at": last.applied_at,
           "gpus": [{"index": g.index, "uuid": g.uuid, "model": g.model,
                     "layout": g.layout.as_list() if g.layout is not None else None} for g in last.gpus],
           "workloads": [{"name": p.workload, "gpu": p.gpu, "instance": p.instance} for p in last.placements]}
    return json.dumps(doc, indent=2) + "\n"


def _bad(source: str, where: str, what: str) -> InputError:
    return InputError(f"{where}: {what}", source=source,
                      hint="re-apply a plan with 'migplan apply PLAN' to write it again")


def _items(doc: dict[str, Any], key: str) -> list[Any]:
    value = doc.get(key)
    return value if isinstance(value, list) else []


def _applied_gpu(g: Any, where: str, source: str, seen: set[int], catalog: Catalog) -> AppliedGpu:
    if not isinstance(g, dict) or set(g) != {"index", "uuid", "model", "layout"}:
        raise _bad(source, where, "needs exactly index, uuid, model, layout")
    index = g["index"]
    if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index <= names.MAX_GPU_INDEX \
            or index in seen:
        raise _bad(source, f"{where}.index", f"{index!r} is not a GPU index (or is listed twice)")
    seen.add(index)
    uuid = g["uuid"]
    if uuid is not None and (not isinstance(uuid, str) or not re.fullmatch(r"GPU-[0-9a-fA-F-]{1,64}", uuid)):
        raise _bad(source, f"{where}.uuid", "not a GPU UUID")
    model = catalog.find(g["model"]) if isinstance(g["model"], str) else None
    if model is None:
        raise _bad(source, f"{where}.model", f"{g['model']!r} is not a catalog model")
    if g["layout"] is None:
        return AppliedGpu(index, uuid, model.id, None)
    if not isinstance(g["layout"], list) or not all(isinstance(i, str) for i in g["layout"]):
        raise _bad(source, f"{where}.layout", "a list of PROFILE@START, or null for MIG disabled")
    try:
        layout = Layout.parse(g["layout"])
    except (ValueError, InputError) as err:
        raise _bad(source, f"{where}.layout", str(err)) from None
    problems = check_layout(model, layout)
    if problems:
        raise _bad(source, f"{where}.layout", f"not a valid {model.id} layout: {problems[0]}")
    return AppliedGpu(index, uuid, model.id, layout)


def _placement(w: Any, where: str, source: str, gpus: set[int]) -> Placement:
    if not isinstance(w, dict) or set(w) != {"name", "gpu", "instance"} or not is_workload_name(w["name"]) \
            or w["gpu"] not in gpus:
        raise _bad(source, where, "needs name (a workload name), gpu (one of the GPUs above) and instance")
    if w["instance"] is not None:
        try:
            Instance.parse(w["instance"])
        except (ValueError, InputError) as err:
            raise _bad(source, f"{where}.instance", str(err)) from None
    return Placement(w["name"], w["gpu"], w["instance"])


def parse_last_applied(text: str, source: str, catalog: Catalog) -> LastApplied:
    """The strict reader: every field checked, models against the catalog, layouts against NVIDIA's rules."""
    if not json_depth_ok(text):
        raise _bad(source, "file", "JSON nested too deep")
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as err:
        raise _bad(source, "file", f"not JSON ({err})") from None
    if not isinstance(doc, dict) or doc.get("kind") != LAST_APPLIED_KIND or doc.get("version") != 1:
        raise _bad(source, "kind", f"not a {LAST_APPLIED_KIND} version 1 document")
    for key in ("host", "plan", "applied_at"):
        if not isinstance(doc.get(key), str) or not doc[key].isprintable() or len(doc[key]) > 200:
            raise _bad(source, key, "missing or not a short printable string")
    if not names.HOST_NAME.fullmatch(doc["host"]):
        raise _bad(source, "host", f"{doc['host']!r} is not a host name")
    seen: set[int] = set()
    gpus = [_applied_gpu(g, f"gpus[{n}]", source, seen, catalog) for n, g in enumerate(_items(doc, "gpus"))]
    if not gpus:
        raise _bad(source, "gpus", "no GPUs listed")
    items = [_placement(w, f"workloads[{n}]", source, seen) for n, w in enumerate(_items(doc, "workloads"))]
    return LastApplied(doc["host"], doc["plan"], doc["applied_at"], tuple(gpus), tuple(items))


def move_document(host: str, plan: str, event: Any) -> str:
    """What an `on_move` hook reads (MIGPLAN_MOVE_FILE): the moved workload, its old and new instance and MIG
    device UUID, and the GPUs of this host it touches. `event` is a `fleet.apply.MoveEvent`."""
    def end(e: Any, device: str | None) -> dict[str, Any] | None:
        return None if e is None else {"host": e.host, "gpu": e.gpu, "instance": e.instance, "device": device}
    doc = {"version": 1, "kind": MOVE_KIND, "host": host, "plan": plan, "workload": event.workload,
           "phase": event.phase, "gpus": list(event.gpus), "source": end(event.source, event.old_device),
           "target": end(event.target, event.new_device)}
    return json.dumps(doc, indent=2) + "\n"
