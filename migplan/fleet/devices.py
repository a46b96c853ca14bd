"""The host's MIG devices as read after an apply (`device_record`: what the assignments need, in four commands for
the whole host) and the MIG device UUID of each instance of one GPU (`device_uuids`, for the move hooks)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from migplan import smi
from migplan.adapters.smi_session import BatchedReads, SmiSession
from migplan.catalog.layout import Instance
from migplan.fleet.gpu_change import FAILURES, GpuChange
from migplan.fleet.snapshot import ComputeInstance, DiscoveredGpu, DiscoveredHost, DiscoveredInstance
from migplan.smi.mig_table import parse_mig_devices

LIST_ALL_GI = (smi.NVIDIA_SMI, "mig", "-lgi")
LIST_ALL_CI = (smi.NVIDIA_SMI, "mig", "-lci")
MIG_TABLE = (smi.NVIDIA_SMI,)  # plain nvidia-smi: MIG devices with their memory, processes with GI/CI ids (§12)


def device_record(session: SmiSession, host: str, table: str | None = None) -> DiscoveredHost:
    """The host's GPUs with their MIG devices, in four commands whatever the number of GPUs (`--query-gpu`,
    `-L`, and `mig -lgi` / `mig -lci` for all GPUs; apply reads them in its read-back batch): what the
    assignments need after an apply, where a full discovery would also read every GPU's profile tables again.
    `table`: plain `nvidia-smi`'s text when it was read anyway, whose MIG devices table names each device's GI
    and CI id (§12), so a UUID is matched exactly instead of by `-L`'s order."""
    mapped = _devices_table(table)
    infos = session.gpus()
    listing = {x.index: x for x in session.gpu_listing()}
    on = [i for i in infos if i.mig_current]
    gis = session.listing(LIST_ALL_GI, smi.parse_gpu_instances) if on else []
    cis = session.listing(LIST_ALL_CI, smi.parse_compute_instances) if gis else []
    gpus = []
    for info in sorted(infos, key=lambda i: i.index):
        found = listing.get(info.index)
        uuids = _uuids_of(info.index, [r for r in gis if r.gpu == info.index], [r for r in cis if r.gpu ==
                                                                                  info.index],
                          found.mig_devices if found is not None else (), mapped.get(info.index))
        instances = tuple(DiscoveredInstance(Instance(r.start, r.profile_name), r.gi_id, tuple(
            ComputeInstance(c.ci_id, r.profile_name, uuids.get((r.gi_id, c.ci_id))) for c in cis
            if c.gpu == info.index and c.gi_id == r.gi_id)) for r in gis if r.gpu == info.index)
        gpus.append(DiscoveredGpu(info.index, None, info.name, info.uuid, info.pci_bus_id, info.memory_total_mib,
                                  info.mig_capable, bool(info.mig_current), bool(info.mig_pending),
                                  instances if info.mig_current else ()))
    return DiscoveredHost(host, None, tuple(gpus))


def _devices_table(text: str | None) -> dict[int, dict[int, tuple[int, int]]]:
    """GPU -> MIG device index -> (GI id, CI id), from plain `nvidia-smi`'s MIG devices table (§12); {} when it
    was not read or does not parse (the order rule below is used then)."""
    if not text:
        return {}
    try:
        rows = parse_mig_devices(text)
    except FAILURES:
        return {}
    out: dict[int, dict[int, tuple[int, int]]] = {}
    for r in rows:
        out.setdefault(r.gpu, {})[r.device] = (r.gi_id, r.ci_id)
    return out


def _uuids_of(gpu: int, gis: Sequence[smi.GpuInstanceRow], cis: Sequence[smi.ComputeInstanceRow],
              devices: Sequence[smi.MigDevice],
              table: Mapping[int, tuple[int, int]] | None = None) -> dict[tuple[int, int], str]:
    """(GI id, CI id) -> MIG device UUID: the old `MIG-GPU-.../gi/ci` form names them; with the new `MIG-<uuid>`
    form, plain `nvidia-smi`'s table gives each device index its GI and CI (when it lists every device of `-L`),
    else the devices are in ascending GI then CI id order (docs/nvidia-smi.md §11: observed, not documented)."""
    if devices and all(d.gi_id is not None and d.ci_id is not None for d in devices):
        return {(d.gi_id, d.ci_id): d.uuid for d in devices if d.gi_id is not None and d.ci_id is not None}
    if devices and table and all(d.device in table for d in devices) \
            and len({table[d.device] for d in devices}) == len(devices):
        return {table[d.device]: d.uuid for d in devices}
    pairs = sorted((c.gi_id, c.ci_id) for c in cis if c.gpu == gpu)
    return dict(zip(pairs, (d.uuid for d in sorted(devices, key=lambda d: d.device)), strict=False))


def device_uuids(g: GpuChange) -> dict[Instance, str]:
    """The MIG device UUID of each instance of this GPU now: `-lgi` (placement -> GI id), `-lci` (GI -> CI) and
    `-L` (devices in ascending GI then CI id, docs/nvidia-smi.md §11)."""
    reads = (LIST_ALL_GI, LIST_ALL_CI, tuple(smi.list_gpus()))
    if isinstance(g.session.runner, BatchedReads) and not g.session.runner.has(reads):
        g.session.runner.prefetch(reads, timeout=g.session.timeout)  # one round trip
    gis = {r.gi_id: Instance(r.start, r.profile_name) for r in g.session.gpu_instances(g.index)}
    pairs = sorted((r.gi_id, r.ci_id) for r in g.session.compute_instances(g.index))
    listing = next((x for x in g.session.gpu_listing() if x.index == g.index), None)
    devices = sorted(listing.mig_devices, key=lambda d: d.device) if listing is not None else []
    out: dict[Instance, str] = {}
    for (gi, _ci), dev in zip(pairs, devices, strict=False):
        if gi in gis and gis[gi] not in out:
            out[gis[gi]] = dev.uuid
    return out
