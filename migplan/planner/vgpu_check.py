"""The vGPU plan checked again in plain Python, whatever the solver said (issue 26; as `validate.py` for MIG).

Each rule is NVIDIA's, read from the vGPU catalog (`VgpuModel.fits` for the time-sliced modes) or the MIG catalog
(`layout.check_layout` for the GPU instances of MIG-backed vGPUs), never from the program's own rows:

* a GPU's target mode is one its host may use (the inventory), or the mode it runs now while it keeps running VMs;
* time-sliced: the types and counts fit one GPU in that mode (equal-size: one type, at most its `max`; mixed-size:
  each at most `max_mixed`, frame buffers within the GPU's); no slot sits on a GPU instance;
* MIG-backed: every vGPU on its own GPU instance, whose profile is its type's, and the instances a valid layout;
* every vGPU a running VM holds is kept, with its type and device (unless the policy lets running workloads move);
* every VM of the plan is on at most one GPU, with a type of its board holding its need (a pinned type excepted).
"""

from __future__ import annotations

from collections import Counter

from migplan.catalog import Catalog, GpuModel
from migplan.catalog.layout import Instance, Layout, check_layout
from migplan.catalog.vgpu import MIG_BACKED, VgpuCatalog, VgpuType
from migplan.errors import InputError
from migplan.model.vgpu import VgpuGpuPlan, VgpuPlan, VgpuSlot


def _mig_problems(where: str, g: VgpuGpuPlan, known: list[tuple[VgpuSlot, VgpuType]],
                  model: GpuModel | None) -> list[str]:
    out: list[str] = []
    places = [s.placement for s in g.slots]
    if None in places:
        out.append(f"{where}: a MIG-backed vGPU without a GPU instance")
    elif len(set(places)) != len(places):
        out.append(f"{where}: two vGPUs on one GPU instance")
    elif model is not None:
        try:
            lay = Layout.of(Instance.parse(str(p)) for p in places)
        except InputError as err:
            return [f"{where}: {err.message}"]
        out += [f"{where}: {c.message}" for c in check_layout(model, lay)]
        for s, t in known:
            if str(s.placement).split("@")[0] != t.mig_profile.split("+")[0].split("-")[0]:
                out.append(f"{where}: {t.name} is a {t.mig_profile} vGPU, not on {s.placement}")
    out += [f"{where}: time-sliced {t.name} on a MIG-backed GPU" for _, t in known if not t.mig_backed]
    return out


def _running_kept(where: str, g: VgpuGpuPlan) -> list[str]:
    kept = {(s.device, s.type_name, s.placement) for s in g.slots}
    return [f"{where}: the running VM {s.vm or s.vm_uuid or '?'}'s {s.type_name} ({s.device}) is not kept"
            for s in g.observed.slots if s.running and (s.device, s.type_name, s.placement) not in kept]


def _gpu_problems(g: VgpuGpuPlan, vcat: VgpuCatalog, catalog: Catalog, movable: bool) -> list[str]:
    o = g.observed
    where = f"{o.host}:{o.index}"
    out: list[str] = []
    board = vcat.get(o.board)
    running_kept = any(s.running for s in g.slots)
    if g.mode is not None and g.mode not in o.allowed and not (g.mode == o.mode and running_kept):
        out.append(f"{where}: mode {g.mode} is not one the host may use ({', '.join(o.allowed)})")
    if g.mode is not None and not g.slots:
        out.append(f"{where}: mode {g.mode} with no vGPU")
    known = []
    for s in g.slots:
        hit = [t for t in board.types if t.name == s.type_name]
        if hit:
            known.append((s, hit[0]))
        elif not s.running and s.device is None:
            out.append(f"{where}: {s.type_name} is not a type of {board.id}")
    if g.mode == MIG_BACKED:
        out += _mig_problems(where, g, known, catalog.find(board.gpu))
    elif g.mode is not None:
        if any(s.placement for s in g.slots):
            out.append(f"{where}: a time-sliced vGPU on a GPU instance")
        out += [f"{where}: {p}" for p in board.fits(Counter(t.name for _, t in known), g.mode)]
    return out if movable else out + _running_kept(where, g)


def check(plan: VgpuPlan, vcat: VgpuCatalog, catalog: Catalog, *, movable: bool) -> list[str]:
    """Every rule the plan breaks (empty when it keeps them all)."""
    out: list[str] = []
    for g in plan.gpus:
        out += _gpu_problems(g, vcat, catalog, movable)
    where: dict[str, str] = {}
    for g in plan.gpus:
        for s in g.slots:
            if s.vm is None:
                continue
            at = f"{g.observed.host}:{g.observed.index}"
            if s.vm in where:
                out.append(f"VM {s.vm} is on {where[s.vm]} and on {at}")
            where[s.vm] = at
    for v in plan.vms:
        if v.status in ("placed", "kept") and v.name not in where:
            out.append(f"VM {v.name} is {v.status} but on no GPU")
        if v.status == "placed" and v.frame_buffer_mib < v.need_mib and v.reason is None:
            out.append(f"VM {v.name}: {v.vgpu_type} holds {v.frame_buffer_mib} MiB, less than its {v.need_mib} MiB")
    return out
