"""Tell a host's tasks which MIG device is theirs, after an apply (pure: the documents; the caller
writes them with the runner's `put_file`).

  <state_dir>/assignments.json     every workload placed on the host: GPU, instance, MIG device UUID
  <state_dir>/env/<workload>.env   KEY=VALUE for a systemd EnvironmentFile= or `docker --env-file`:
                                   CUDA_VISIBLE_DEVICES=MIG-... (GPU-... for a whole GPU)
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any

from migplan.fleet.snapshot import DiscoveredHost
from migplan.layout import Instance
from migplan.planner.plan import Plan

ASSIGNMENTS_KIND = "migplan/assignments"


@dataclass(frozen=True)
class Assignment:
    workload: str
    gpu: int
    instance: str | None  # PROFILE@START; None: the whole GPU
    device: str | None  # MIG-... or GPU-...: what CUDA_VISIBLE_DEVICES takes (None: not found on the host)


def assignments(plan: Plan, record: DiscoveredHost) -> list[Assignment]:
    """The plan's placements on this host, with the device UUIDs the host reports now."""
    gpus = {g.index: g for g in record.gpus}
    out = []
    for w in plan.workloads:
        if w.status != "placed" or w.host != record.name or w.gpu is None:
            continue
        g = gpus.get(w.gpu)
        device = None
        if g is not None and w.instance is None:
            device = g.uuid
        elif g is not None and w.instance is not None:
            want = Instance.parse(w.instance)
            inst = next((i for i in g.instances if i.instance == want), None)
            uuids = [c.uuid for c in inst.compute_instances if c.uuid] if inst is not None else []
            device = uuids[0] if uuids else None
        out.append(Assignment(w.name, w.gpu, w.instance, device))
    return out


def assignments_document(host: str, plan: Plan, items: list[Assignment], written_at: str) -> str:
    doc: dict[str, Any] = {"version": 1, "kind": ASSIGNMENTS_KIND, "host": host, "plan": plan.fingerprint,
                           "written_at": written_at,
                           "workloads": [{"name": a.workload, "gpu": a.gpu, "instance": a.instance,
                                          "device": a.device} for a in items]}
    return json.dumps(doc, indent=2) + "\n"


def env_file_name(workload: str, taken: set[str]) -> str:
    """`ns/app:1` -> `ns_app_1.env`; a name that would collide gets a short hash of the real name."""
    base = re.sub(r"[^A-Za-z0-9._-]", "_", workload)
    name = base if base not in taken else f"{base}-{hashlib.sha256(workload.encode()).hexdigest()[:8]}"
    taken.add(name)
    return name + ".env"


def env_file(a: Assignment) -> str:
    lines = [f"MIGPLAN_WORKLOAD={a.workload}", f"MIGPLAN_GPU={a.gpu}"]
    if a.instance is not None:
        lines.append(f"MIGPLAN_INSTANCE={a.instance}")
    if a.device is not None:
        lines.append(f"CUDA_VISIBLE_DEVICES={a.device}")
    return "\n".join(lines) + "\n"
