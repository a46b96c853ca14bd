"""The `vgpu` section of a plan document (issue 26): written by `vgpu_plan_to_dict`, read back strictly by
`parse_vgpu_plan` (every error names the key and line), so that `apply` executes exactly what `propose` wrote.

    vgpu:
      solve: {status, objective, bound, gpus_used, gpu_lower_bound}
      gpus:                      # every GPU of the hypervisor hosts
        - {host, index, model, board, host_mode, allowed, fingerprint,
           observed: {mode, mig_enabled, layout, vfs, uuid, pci_bus_id, slots: [SLOT...]},
           target: {mode, slots: [SLOT...]}, actions: [ACTION...]}
      vms: [{name, status, need_mib, host, gpu, vgpu_type, frame_buffer_mib, placement, moved, reason}]

SLOT: {type_name, vm, vm_uuid, running, device, placement}; ACTION: {kind, type_name?, device?, placement?, vm?}.
The reader recomputes each GPU's actions from its observed and target slots (`model.vgpu.vgpu_actions`) and refuses a
document whose actions differ, and each GPU's fingerprint from its observed state: an edited plan is refused as a
plan "made against another state" would be.
"""

from __future__ import annotations

from typing import Any

from migplan import names
from migplan.catalog.vgpu import VgpuCatalog
from migplan.errors import CatalogError
from migplan.model.vgpu import (
    ACTION_ORDER,
    VGPU_MODES,
    VM_STATUSES,
    VgpuAction,
    VgpuGpuPlan,
    VgpuGpuState,
    VgpuPlan,
    VgpuSlot,
    VmPlan,
    vgpu_actions,
)
from migplan.yamldoc import Node

_HINT = "regenerate the plan with 'migplan propose --out PLAN'"
_STATUSES = ("optimal", "within-gap", "time-limit", "no-solution", "empty", "greedy")


def _slot(s: VgpuSlot) -> dict[str, Any]:
    return s.as_dict()


def _gpu(g: VgpuGpuPlan) -> dict[str, Any]:
    o = g.observed
    return {"host": o.host, "index": o.index, "model": o.model, "board": o.board, "host_mode": o.host_mode,
            "allowed": list(o.allowed), "fingerprint": o.fingerprint(),
            "observed": {"mode": o.mode, "mig_enabled": o.mig_enabled, "layout": list(o.layout), "vfs": o.vfs,
                         "uuid": o.uuid, "pci_bus_id": o.pci_bus_id, "slots": [_slot(s) for s in o.slots]},
            "target": {"mode": g.mode, "slots": [_slot(s) for s in g.slots]},
            "actions": [a.as_dict() for a in g.actions]}


def vgpu_plan_to_dict(p: VgpuPlan) -> dict[str, Any]:
    return {"solve": {"status": p.status, "objective": p.objective, "bound": p.bound, "gpus_used": p.gpus_used,
                      "gpu_lower_bound": p.gpu_lower_bound},
            "gpus": [_gpu(g) for g in p.gpus],
            "vms": [v.as_dict() for v in p.vms]}


# --- strict reader -------------------------------------------------------------------------------

def _opt_str(n: Node, pattern: Any = None, what: str = "") -> str | None:
    if n.is_null:
        return None
    v = n.str()
    if not v.isprintable() or len(v) > 300 or (pattern is not None and not pattern.fullmatch(v)):
        n.fail(f"{v!r} is not {what or 'printable text of at most 300 characters'}", hint=_HINT)
    return v


def _mode(n: Node) -> str | None:
    if n.is_null:
        return None
    m = n.str()
    if m not in VGPU_MODES:
        n.fail(f"vGPU mode {m!r} is not one of {', '.join(VGPU_MODES)}", hint=_HINT)
    return m


def _read_slot(n: Node, vcat: VgpuCatalog, board: str) -> VgpuSlot:
    f = n.fields({"type_name", "vm", "vm_uuid", "running", "device", "placement"}, {"type_name"})
    t = f["type_name"].str()
    if not t.startswith("type-"):
        try:
            vcat.get(board).vgpu_type(t)
        except CatalogError as err:
            f["type_name"].fail(err.message, hint=err.hint)
    return VgpuSlot(type_name=t, vm=_opt_str(f["vm"]) if "vm" in f else None,
                    vm_uuid=_opt_str(f["vm_uuid"]) if "vm_uuid" in f else None,
                    running=f["running"].bool() if "running" in f else False,
                    device=_opt_str(f["device"], names.VGPU_DEVICE, "a VF PCI address or mdev UUID")
                    if "device" in f else None,
                    placement=_opt_str(f["placement"], names.PLACEMENT, "PROFILE@START") if "placement" in f
                    else None)


def _read_gpu(n: Node, vcat: VgpuCatalog) -> VgpuGpuPlan:
    f = n.fields({"host", "index", "model", "board", "host_mode", "allowed", "fingerprint", "observed", "target",
                  "actions"}, {"host", "index", "model", "board", "host_mode", "allowed", "fingerprint", "observed",
                               "target", "actions"})
    host = f["host"].str()
    if not names.HOST_NAME.fullmatch(host):
        f["host"].fail(f"{host!r} is not a host name", hint=_HINT)
    try:
        board = vcat.get(f["board"].str())
    except CatalogError as err:
        f["board"].fail(err.message, hint=err.hint)
    host_mode = f["host_mode"].str()
    if host_mode not in ("sr-iov", "non-sr-iov"):
        f["host_mode"].fail(f"host_mode {host_mode!r} is not sr-iov or non-sr-iov", hint=_HINT)
    allowed = tuple(_mode(x) or "" for x in f["allowed"].list())
    o = f["observed"].fields({"mode", "mig_enabled", "layout", "vfs", "uuid", "pci_bus_id", "slots"},
                             {"mode", "mig_enabled", "layout", "vfs", "slots"})
    observed = VgpuGpuState(
        host=host, index=f["index"].int(minimum=0, maximum=names.MAX_GPUS_PER_HOST - 1), model=f["model"].str(),
        board=board.id, host_mode=host_mode, allowed=allowed, mode=_mode(o["mode"]),
        mig_enabled=o["mig_enabled"].bool(),
        layout=tuple(_opt_str(x, names.PLACEMENT, "PROFILE@START") or "" for x in o["layout"].list()),
        slots=tuple(_read_slot(x, vcat, board.id) for x in o["slots"].list()), vfs=o["vfs"].int(minimum=0),
        uuid=_opt_str(o["uuid"]) if "uuid" in o else None,
        pci_bus_id=_opt_str(o["pci_bus_id"]) if "pci_bus_id" in o else None)
    if observed.fingerprint() != f["fingerprint"].str():
        f["fingerprint"].fail("does not match the GPU's observed state: the plan was edited", hint=_HINT)
    t = f["target"].fields({"mode", "slots"}, {"mode", "slots"})
    slots = tuple(_read_slot(x, vcat, board.id) for x in t["slots"].list())
    mode = _mode(t["mode"])
    try:
        actions = vgpu_actions(observed, mode, slots)
    except ValueError as err:
        t["slots"].fail(str(err), hint=_HINT)
    written = []
    for x in f["actions"].list():
        a = x.fields({"kind", "type_name", "device", "placement", "vm"}, {"kind"})
        kind = a["kind"].str()
        if kind not in ACTION_ORDER:
            a["kind"].fail(f"action {kind!r} is not one of {', '.join(ACTION_ORDER)}", hint=_HINT)
        written.append(VgpuAction(kind, *(_opt_str(a[k]) if k in a else None
                                          for k in ("type_name", "device", "placement", "vm"))))
    if tuple(written) != actions:
        f["actions"].fail("are not the actions from the observed to the target state: the plan was edited",
                          hint=_HINT)
    return VgpuGpuPlan(observed, mode, slots, actions)


def _read_vm(n: Node) -> VmPlan:
    f = n.fields({"name", "status", "need_mib", "host", "gpu", "vgpu_type", "frame_buffer_mib", "placement", "moved",
                  "reason"}, {"name", "status", "need_mib"})
    status = f["status"].str()
    if status not in VM_STATUSES:
        f["status"].fail(f"VM status {status!r} is not one of {', '.join(VM_STATUSES)}", hint=_HINT)

    def opt_int(key: str) -> int | None:
        return None if key not in f or f[key].is_null else f[key].int(minimum=0)

    return VmPlan(name=_opt_str(f["name"]) or "", status=status, need_mib=f["need_mib"].int(minimum=0),
                  host=_opt_str(f["host"]) if "host" in f else None, gpu=opt_int("gpu"),
                  vgpu_type=_opt_str(f["vgpu_type"]) if "vgpu_type" in f else None,
                  frame_buffer_mib=opt_int("frame_buffer_mib") or 0,
                  placement=_opt_str(f["placement"]) if "placement" in f else None,
                  moved=f["moved"].bool() if "moved" in f else False,
                  reason=_opt_str(f["reason"]) if "reason" in f else None)


def parse_vgpu_plan(node: Node, vcat: VgpuCatalog) -> VgpuPlan:
    f = node.fields({"solve", "gpus", "vms"}, {"solve", "gpus", "vms"})
    s = f["solve"].fields({"status", "objective", "bound", "gpus_used", "gpu_lower_bound"},
                          {"status", "gpus_used", "gpu_lower_bound"})
    status = s["status"].str()
    if status not in _STATUSES:
        s["status"].fail(f"solve status {status!r} is not one of {', '.join(_STATUSES)}", hint=_HINT)
    gpus = tuple(_read_gpu(x, vcat) for x in f["gpus"].list())
    keys = [g.key for g in gpus]
    if len(set(keys)) != len(keys):
        f["gpus"].fail("lists a GPU twice", hint=_HINT)
    vms = tuple(_read_vm(x) for x in f["vms"].list())
    placed = {(s.vm) for g in gpus for s in g.slots if s.vm is not None}
    for v, x in zip(vms, f["vms"].list(), strict=True):
        if v.status in ("placed", "kept") and v.name not in placed:
            x.fail(f"VM {v.name!r} is {v.status} but no GPU's target holds it", hint=_HINT)

    def num(key: str) -> float | None:
        return None if key not in s or s[key].is_null else s[key].number()

    plan = VgpuPlan(gpus=gpus, vms=vms, status=status, objective=num("objective"), bound=num("bound"),
                    gpus_used=s["gpus_used"].int(minimum=0), gpu_lower_bound=s["gpu_lower_bound"].int(minimum=0))
    if plan.gpus_used != sum(1 for g in gpus if g.used):
        s["gpus_used"].fail(f"is {plan.gpus_used} but the targets use {sum(1 for g in gpus if g.used)} GPU(s)",
                            hint=_HINT)
    return plan
