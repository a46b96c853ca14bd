"""An interrupted apply: the in-flight record written before the first change (each GPU's checkpoint and target,
fleet/inflight.py), settled when the host's apply ends, and the repair of a GPU it shows half-done: finished or put
back to its checkpoint by the actions `diff(live, wanted)`, run as any other actions (`GpuChange.run_actions`)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping

from migplan.adapters.runner import CommandRunner, FileToPut, HostError
from migplan.adapters.smi_session import SmiSession
from migplan.catalog import Catalog, GpuModel
from migplan.catalog.layout import Layout, check_layout
from migplan.errors import MigplanError
from migplan.fleet.gpu_change import FAILURES, GpuChange, checkpoint_of
from migplan.fleet.inflight import INFLIGHT_FILE, InFlight, InFlightGpu, inflight_document
from migplan.fleet.outcomes import ApplyOptions, GpuOutcome, GpuResult, HostApplyResult, Journal, listed, shown
from migplan.fleet.snapshot import DiscoveredGpu, DiscoveredHost
from migplan.inventory import Host
from migplan.model.diff import Action, Op, keep_mode
from migplan.model.gpu_plan import GpuPlan
from migplan.model.state import GpuState


def _inflight_path(host: Host) -> str:
    """Where the host's in-flight record is."""
    return f"{host.state_dir}/{INFLIGHT_FILE}"


def _inflight_file(host: Host, todo: Mapping[int, GpuChange], plan_id: str) -> FileToPut:
    """inflight.json for these GPUs (none: the settled record, nothing in flight, always the same text)."""
    gpus = tuple(InFlightGpu(g.index, g.plan.uuid, g.checkpoint.layout if g.checkpoint else None, g.plan.target)
                 for g in sorted(todo.values(), key=lambda g: g.index))
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()) if gpus else ""
    doc = inflight_document(InFlight(host.name, plan_id if gpus else "", stamp, gpus))
    return FileToPut(INFLIGHT_FILE, doc.encode(), 0o644)


def put_inflight(runner: CommandRunner, host: Host, todo: Mapping[int, GpuChange], plan_id: str,
                 options: ApplyOptions) -> None:
    """Record on the host, before the first change, each GPU's checkpoint and target (fleet/inflight.py): one round
    trip (`put_files`). Failing to write it changes nothing yet: the host is failed (an apply that could not be
    repaired is not started)."""
    try:
        runner.put_files(host.state_dir, [_inflight_file(host, todo, plan_id)], timeout=options.timeout)
    except HostError as err:  # a sudoers rule for nvidia-smi alone, a read-only state_dir: found before any change
        refused = HostError(host.name, f"nothing changed: cannot write {_inflight_path(host)} before the first "
                            f"change ({err.detail})", hint=err.hint or "the apply writes its record and the host's "
                            "files in state_dir through the become prefix: allow that, or set state_dir")
        refused.code = err.code  # the cause's code (become-failed, transfer-failed, ...) for the report
        raise refused from None


def settled(host: Host, todo: Mapping[int, GpuChange], results: Mapping[int, GpuResult], plan_id: str) -> FileToPut:
    """The record once the host's apply has ended: empty, unless a GPU is left FAILED (its rollback failed too):
    that one stays recorded, so the next run repairs it."""
    left = {i: g for i, g in todo.items() if results.get(i) is not None and results[i].outcome is GpuOutcome.FAILED}
    return _inflight_file(host, left, plan_id)


def settle(runner: CommandRunner, host: Host, result: HostApplyResult, options: ApplyOptions,
           journal: Journal) -> None:
    """Write `result.inflight`, the record as the host's apply leaves it (one round trip)."""
    if result.inflight is None:
        return
    try:
        runner.put_files(host.state_dir, [result.inflight], timeout=options.timeout)
    except (HostError, MigplanError) as err:  # the GPUs are as reported; a stale record is only looked at again
        journal({"event": "inflight-not-settled", "error": str(err)})


def repair(session: SmiSession, record: DiscoveredHost, wanted: Mapping[int, Layout | None] | None,
           catalog: Catalog, options: ApplyOptions, journal: Journal) -> dict[int, GpuResult]:
    """Each GPU that `record.inflight` (an apply that did not finish) shows half-done: finished when `wanted`
    (the targets of the plan being applied now; None: the interrupted plan's own, for replan) still has the same
    target for it, else put back to its checkpoint. A GPU already at its target or its checkpoint needs nothing. A
    direction that would destroy an instance with processes is not taken without `allow_disrupt` (the other one
    is tried)."""
    inflight = record.inflight
    if inflight is None:
        return {}
    found = {d.index: d for d in record.gpus}
    out: dict[int, GpuResult] = {}
    for index in half_done(record):  # a GPU gone, or another board now, is nothing of ours to repair
        ig, d = inflight.gpu(index), found[index]
        assert ig is not None
        model = d.planning_model(catalog)
        live = d.state(record.name, model.id) if model is not None else None
        if model is None or live is None:
            continue
        if any(check_layout(model, x) for x in (ig.target, ig.checkpoint) if x is not None):
            out[ig.index] = GpuResult(ig.index, GpuOutcome.FAILED, "inflight.json records a layout this GPU cannot "
                                      f"have; left as {shown(d.layout)} (look at it, then remove the file)",
                                      layout=listed(d.layout))
            continue
        still = wanted is None or (ig.index in wanted and wanted[ig.index] == ig.target)
        first, second = (ig.target, ig.checkpoint) if still else (ig.checkpoint, ig.target)
        dest = next((x for x in (first, second) if options.allow_disrupt or not _destroys_busy(live, x)), None)
        if dest is None:
            out[ig.index] = GpuResult(ig.index, GpuOutcome.FAILED, "an interrupted apply left it as "
                                      f"{shown(d.layout)}; finishing or undoing it would stop running processes "
                                      "(repair with --allow-disrupt)", layout=listed(d.layout))
            continue
        out[ig.index] = _repair_gpu(session, d, live, model, dest, "finished" if dest == ig.target and
                                     dest != ig.checkpoint else "rolled back", journal)
    return out


def half_done(record: DiscoveredHost) -> list[int]:
    """The GPUs that `record.inflight` shows an interrupted apply left neither at their checkpoint nor their target."""
    if record.inflight is None:
        return []
    found = {d.index: d for d in record.gpus}
    out = []
    for ig in record.inflight.gpus:
        d = found.get(ig.index)
        if d is None or (ig.uuid and d.uuid and ig.uuid.lower() != d.uuid.lower()):
            continue
        # a GPU instance without its compute instance: a `-dci` took effect, its `-dgi` did not (migplan creates
        # every instance with its default compute instance, `-cgi ... -C`)
        bare = any(not i.compute_instances for i in d.instances)
        if d.mode_change_pending or bare or d.layout not in (ig.target, ig.checkpoint):
            out.append(ig.index)
    return out


def _destroys_busy(live: GpuState, dest: Layout | None) -> bool:
    """Whether `dest` loses an instance (or the whole GPU) that processes run on."""
    keep = set(dest.instances) if dest is not None else set()
    return any(i not in keep for i in live.busy) or (live.whole_busy and dest is not None)


def _repair_gpu(session: SmiSession, d: DiscoveredGpu, live: GpuState, model: GpuModel, dest: Layout | None,
                how: str, journal: Journal) -> GpuResult:
    g = GpuChange(session, GpuPlan(live, dest, ()), model, journal)
    g.checkpoint = checkpoint_of(d)
    now = g.checkpoint
    journal({"event": "repair", "gpu": d.index, "found": shown(now.layout), "to": shown(dest), "how": how})
    bare = sorted(i.instance for i in d.instances if not i.compute_instances)
    try:
        if now.pending is not None and now.pending != now.mig:
            g.run_actions([keep_mode(now.mig, live.key)], {}, now.layout)  # a change left pending: the mode in force
        layout, ids = now.layout, dict(now.gi_ids)
        if bare and layout is not None:  # half-destroyed instances go first (`-dgi` alone: no CI to destroy)
            g.run_actions([Action(Op.DESTROY_GI, live.key, i) for i in bare], ids, now.layout)
            layout = Layout.of(i for i in layout.instances if i not in bare)
            ids = {i: n for i, n in ids.items() if i not in bare}
        g.run_actions(g.actions_to(layout, dest), ids, dest)
        back = g.verify(dest)
    except FAILURES as err:
        g.journal({"event": "repair-failed", "gpu": d.index, "error": str(err)})
        return GpuResult(d.index, GpuOutcome.FAILED, f"an interrupted apply left it as {shown(now.layout)}; "
                         f"repairing it failed: {err}", tuple(g.ran), listed(now.layout))
    return GpuResult(d.index, GpuOutcome.REPAIRED, f"repaired: an interrupted apply had left it as "
                     f"{shown(now.layout)}; {how} to {shown(back.layout)}", tuple(g.ran), listed(back.layout),
                     repair=how)


def with_repair(result: GpuResult | None, fixed: GpuResult) -> GpuResult:
    """A GPU's result with its repair said first: the repair alone when the plan then had nothing to do there."""
    if result is None or result.outcome is GpuOutcome.UNCHANGED or fixed.outcome is GpuOutcome.FAILED:
        return fixed
    return dataclasses.replace(result, reason=f"{fixed.reason}; then {result.reason or result.outcome.value}",
                               commands=(*fixed.commands, *result.commands), repair=fixed.repair)
