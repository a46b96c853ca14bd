"""A GPU's own MIG profile table (`nvidia-smi mig -lgip` / `-lgipp`), compared with the catalog and
turned into the model the planner uses for that GPU (pure).

The catalog's numbers hold for the drivers and board variants its sources came from; a host can print
less memory per instance (an H100 PCIe against the SXM figures, an NVL board), other SM counts, or lack
a profile an older driver does not offer. So a GPU whose table differs from its catalog model is planned
with a model built from its own table: the profiles it lists, with its counts, placements, SMs and
engines, and never more memory than it reports.

Memory: `-lgip` prints memorySizeMB / 1024 with two decimals (docs/nvidia-smi.md §3), so the printed
value only says the size lies within about 5 MiB. The host model takes the catalog's exact MiB when it
prints as the same value, and otherwise the smallest MiB that prints as the host's value.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

from migplan.catalog.geometry import Engines, GiProfile, GpuModel, among
from migplan.names import profile_size
from migplan.smi.rows import PlacementRow, ProfileRow


@dataclass(frozen=True)
class TableRow:
    """One profile as the host lists it: `-lgip`'s row joined with `-lgipp`'s placements."""

    name: str
    id: int
    memory_gib: str  # as printed, e.g. "4.75"
    max_count: int
    sm_count: int
    starts: tuple[int, ...]
    size: int  # memory slices
    engines: Engines = dataclasses.field(default_factory=Engines)


@dataclass(frozen=True)
class HostTable:
    rows: tuple[TableRow, ...]

    def row(self, name: str) -> TableRow | None:
        return next((r for r in self.rows if r.name == name), None)

    def digest(self) -> str:
        """Eight hex digits naming this exact table (the same table on two GPUs gives the same model id)."""
        blob = json.dumps([dataclasses.asdict(r) for r in sorted(self.rows, key=lambda r: r.id)], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:8]


def lowest_mib(memory_gib: str) -> int:
    """The smallest whole MiB that `-lgip` prints as `memory_gib` (%.2f of MiB / 1024)."""
    low = math.ceil((float(memory_gib) - 0.005) * 1024)
    while f"{(low) / 1024:.2f}" != memory_gib and low < (float(memory_gib) + 0.005) * 1024:
        low += 1
    return low


def memory_mib(row: TableRow, catalog: GiProfile | None) -> int:
    """The catalog's exact MiB when it is consistent with what the host prints, else the lowest that is."""
    if catalog is not None and catalog.lgip_gib == row.memory_gib:
        return catalog.memory_mib
    return lowest_mib(row.memory_gib)


def differences(model: GpuModel, table: HostTable) -> list[str]:
    """Where the host's table and the catalog's model disagree: one line per profile and field."""
    out = []
    for p in model.profiles:
        r = table.row(p.name)
        if r is None:
            out.append(f"{p.name}: in the catalog ({model.id}), not offered by this host's driver")
            continue
        fields = (("profile id", p.id, r.id), ("memory GiB", p.lgip_gib, r.memory_gib),
                  ("instances total", p.max_count, r.max_count), ("SMs", p.sm_count, r.sm_count),
                  ("placements", list(p.starts), list(r.starts)), ("memory slices", p.memory_slices, r.size),
                  ("engines", _engines(p.engines), _engines(r.engines)))
        out += [f"{p.name}: {what} catalog {cat}, host {host}" for what, cat, host in fields if cat != host]
    known = {p.name for p in model.profiles}
    out += [f"{r.name}: offered by this host, not in the catalog ({model.id})" for r in table.rows
            if r.name not in known]
    return out


def _engines(e: Engines) -> str:
    return f"ce {e.ce} dec {e.dec} enc {e.enc} jpeg {e.jpeg} ofa {e.ofa}"


def _profile(row: TableRow, base: GiProfile | None) -> GiProfile:
    size = profile_size(row.name)
    compute = base.compute_slices if base is not None else (size[0] if size else 1)
    fields: dict[str, Any] = {"name": row.name, "id": row.id, "compute_slices": compute, "memory_slices": row.size,
              "memory_mib": memory_mib(row, base), "max_count": row.max_count, "sm_count": row.sm_count,
              "starts": tuple(sorted(row.starts)), "engines": row.engines, "confidence": "host"}
    if base is not None:
        return dataclasses.replace(base, **fields)
    return GiProfile(media_extensions=row.name.endswith("+me"), ci_default_verified=False, **fields)


def host_model(model: GpuModel, table: HostTable) -> GpuModel:
    """The model to plan this GPU with: `model` itself when the table agrees, else one built from the table
    (id `<catalog id>@host-<digest>`)."""
    if not differences(model, table):
        return model
    by_name = {p.name: p for p in model.profiles}
    profiles = tuple(_profile(r, by_name.get(r.name)) for r in sorted(table.rows, key=lambda r: r.id))
    # the catalog's exclusions hold among the profiles the host lists (the driver's own rules, not in the table)
    return dataclasses.replace(model, id=f"{model.id}@host-{table.digest()}", profiles=profiles,
                               exclusions=among(model.exclusions, {p.name for p in profiles}), aliases=(),
                               smi_names=(), pci_device_ids=(), confidence="host",
                               source=f"the host's own nvidia-smi mig -lgip/-lgipp (catalog model {model.id})")


def table_from_smi(profiles: list[ProfileRow], placements: list[PlacementRow], gpu: int) -> HostTable:
    """Join `-lgip` rows and `-lgipp` rows of one GPU by profile id (a profile without placements is left
    out: nothing can be created from it)."""
    where = {p.profile_id: p for p in placements if p.gpu == gpu}
    rows = []
    for r in profiles:
        if r.gpu != gpu or r.profile_id not in where:
            continue
        place = where[r.profile_id]
        rows.append(TableRow(name=r.profile_name, id=r.profile_id, memory_gib=r.memory_gib, max_count=r.total,
                             sm_count=r.sm_count, starts=tuple(sorted(place.starts)), size=place.size,
                             engines=r.engines))
    return HostTable(tuple(rows))
