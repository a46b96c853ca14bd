"""vGPU planning (issue 26): which vGPU mode and types each hypervisor GPU holds, and which VM gets which type where
(pure; the model: docs/vgpu.md "Planning").

A pattern program, as the MIG planner's (`formulation.py`), over the GPUs of hypervisor hosts:

  groups    GPUs alike (board, allowed modes, what they hold now) form a group G of N_G GPUs; a GPU holding a vGPU
            a running VM has, or that a VM of the profiles was seen on, is a group of its own
  patterns  what one GPU can offer (`Pattern`): equal-size, `max` vGPUs of one time-sliced type; mixed-size, a maximal
            set of time-sliced types (counts within `max_mixed`, frame buffers within the GPU's); MIG-backed, a
            maximal MIG layout of the profiles of the MIG-backed types wanted (catalog layouts, so placement-exact);
            the empty pattern; and "as it is", the GPU left untouched with nothing new on it
  items     VMs alike (board, candidate types) form a class c of n_c VMs; a VM seen on a GPU or running is its own
            class. A VM's candidate types are its board's types of the kind (time-sliced or MIG-backed) and series it
            runs as, holding its frame-buffer need (`vm_demand.vm_demand`'s sizing) and at least `min_vgpu_type`; a pin
            is its one candidate

  y[G,p] in Z+   GPUs of G offering pattern p          sum_p y[G,p] = N_G
  a[c,G,t] in Z+ VMs of class c given type t on G      sum_{G,t} a[c,G,t] + u[c] = n_c
  capacity       sum_{c,t: key(t)=k} a[c,G,t] <= sum_p (slots(p,k) - fixed(G,k)) y[G,p]   per key k
                 (key: the type, time-sliced; the GPU instance profile, MIG-backed)
  objective      W_u u + W_gpu (GPUs offering a pattern) + W_chg (GPUs reconfigured) + W_mode/W_reset (MIG mode
                 changes) + W_d (running vGPUs displaced, --allow-disrupt) + W_waste x GiB of frame buffer given above
                 the need + W_frag x VMs moved from the GPU or type they were seen on

A running VM's vGPU (the snapshot's active vGPUs) is **fixed** where it is: every pattern of its GPU holds it (its
type; MIG-backed, its GPU instance), unless `--allow-disrupt`, where a pattern that does not costs a disruption per
vGPU. A vGPU no VM of the profiles runs on (a stopped VM's device, or one unused) stays while its GPU keeps its
configuration, and is taken by a VM given that type there.

Every plan is checked again in plain Python (`vgpu_check.check`), whatever the solver said.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from migplan.catalog import Catalog, GpuModel
from migplan.catalog.layout import Instance, Layout
from migplan.catalog.vgpu import MIG_BACKED, TIME_SLICED, TIME_SLICED_MIXED, VgpuCatalog, VgpuModel, VgpuType
from migplan.model.diff import RESET_ON_MODE_CHANGE
from migplan.model.vgpu import VgpuGpuPlan, VgpuGpuState, VgpuPlan, VgpuSlot, VmPlan, vgpu_actions
from migplan.planner.demand import Policy, Weights, demand_of, slices_needed
from migplan.planner.milp import Milp, Solver, SolveResult, SolveStatus
from migplan.planner.patterns import maximal_of
from migplan.planner.plan import PlanError
from migplan.planner.vgpu_check import check
from migplan.planner.vm_demand import VmDemand, vm_demand
from migplan.profiles import Workload

# per board, a bound on the maximal mixed-size sets enumerated: above the largest shipped board's count (H200: 5,875,
# H100 PCIe 1,081, L40S 119; tests/test_vgpu_plan.py checks), so every set of the shipped catalog is offered
MAX_MIXED_PATTERNS = 10_000


@dataclass(frozen=True)
class Pattern:
    """What one GPU offers: its mode, and slots per key (type name, or `mig:PROFILE` for MIG-backed)."""

    mode: str | None  # None: the empty pattern, or "as it is" (`keep`)
    slots: tuple[tuple[str, int], ...] = ()  # (key, count), sorted
    layout: tuple[str, ...] = ()  # MIG-backed: PROFILE@START of each GPU instance
    keep: bool = False  # "as it is": the GPU untouched, nothing new on it

    @property
    def counts(self) -> Counter[str]:
        return Counter(dict(self.slots))

    @property
    def offers(self) -> bool:
        return bool(self.slots)


def _key(t: VgpuType) -> str:
    return f"mig:{t.mig_profile.split('+')[0].split('-')[0]}" if t.mig_backed else t.name


@dataclass
class Vm:
    """One VM to place: its need, board, candidate types (smallest first), where it was seen."""

    workload: Workload
    need_mib: int
    board: VgpuModel | None
    candidates: tuple[VgpuType, ...]
    seen: tuple[str, int] | None = None  # the GPU it was observed on (a hypervisor GPU of this plan)
    seen_type: str | None = None
    running: bool = False  # it holds a running vGPU now (the snapshot)
    reason: str = ""  # why it has no candidate
    slices: int = 0  # MIG-backed: the compute slices its compute share needs (planner.demand.slices_needed)

    @property
    def name(self) -> str:
        return self.workload.name


@dataclass
class Group:
    gpus: list[VgpuGpuState]
    board: VgpuModel
    model: GpuModel | None  # the physical GPU's MIG model (MIG-backed patterns); None: no MIG
    fixed: tuple[VgpuSlot, ...] = ()  # running vGPUs every pattern holds (a group of one GPU)
    patterns: list[Pattern] = field(default_factory=list)

    @property
    def first(self) -> VgpuGpuState:
        return self.gpus[0]


def _signature(g: VgpuGpuState) -> tuple[object, ...]:
    return (g.board, g.allowed, g.mode, g.mig_enabled, g.layout, g.host_mode, g.vfs > 0,
            tuple(sorted((s.type_name, s.placement or "") for s in g.slots)))


def _vm(w: Workload, policy: Policy, vcat: VgpuCatalog, catalog: Catalog,
        by_name: dict[str, tuple[VgpuGpuState, VgpuSlot]], keys: set[tuple[str, int]]) -> Vm:
    d: VmDemand = vm_demand(w, policy, vcat, next(iter(catalog)))
    running = by_name.get(w.name)
    seen = (w.observed.host, w.observed.gpu) if w.observed.host is not None and w.observed.gpu is not None else None
    seen_type = w.observed.vgpu_type
    if running is not None:
        seen, seen_type = running[0].key, running[1].type_name
    if seen is not None and seen not in keys:
        seen = None
    slices = 0
    if d.board is None:
        return Vm(w, d.need_mib, None, (), seen, seen_type, running is not None, d.note or "no vGPU board")
    board = vcat.get(d.board)
    cands: tuple[VgpuType, ...]
    if w.vgpu_type is not None:
        cands = (board.vgpu_type(w.vgpu_type),)
    else:
        like = board.vgpu_type(seen_type or w.min_vgpu_type or d.vgpu_type or "")
        floor = board.vgpu_type(w.min_vgpu_type).frame_buffer_mib if w.min_vgpu_type is not None else 0
        model = catalog.find(board.gpu)
        if like.mig_backed and model is not None and model.mig:
            slices = slices_needed(demand_of(w, policy, model, model), model)
        cands = tuple(sorted((t for t in board.types if t.mig_backed == like.mig_backed and t.series == like.series
                              and t.frame_buffer_mib >= max(d.need_mib, floor)
                              and (not t.mig_backed or t.parsed.compute_slices >= slices)
                              and (not t.mig_backed or t.mig_profile.split("+")[0] == t.mig_profile
                                   or t.name == like.name)),
                             key=lambda t: (t.frame_buffer_mib, t.parsed.compute_slices, t.name)))
    reason = "" if cands else (f"no {board.id} type holds its {d.need_mib} MiB" if d.vgpu_type is None
                               else d.note)
    return Vm(w, d.need_mib, board, cands, seen, seen_type, running is not None, reason, slices)


# --- patterns ------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=64)  # per board and wanted types: every group of that board asks the same
def _mixed_sets(board: VgpuModel, types: tuple[VgpuType, ...]) -> list[Counter[str]]:
    """Maximal sets of these time-sliced types for one GPU in mixed-size mode (counts and frame buffer)."""
    cap = board.capacity_mib
    ts = sorted(types, key=lambda t: -t.frame_buffer_mib)
    out: list[Counter[str]] = []

    def grow(i: int, left: int, chosen: Counter[str]) -> None:
        if len(out) >= MAX_MIXED_PATTERNS:
            return
        if i == len(ts):
            if chosen and all(chosen[t.name] >= t.max_mixed or t.frame_buffer_mib > left for t in ts):
                out.append(Counter(chosen))
            return
        t = ts[i]
        most = min(t.max_mixed, left // t.frame_buffer_mib)
        for n in range(most, -1, -1):
            if n:
                chosen[t.name] = n
            else:
                chosen.pop(t.name, None)
            grow(i + 1, left - n * t.frame_buffer_mib, chosen)
        chosen.pop(t.name, None)

    grow(0, cap, Counter())
    return out


def _fits_fixed(p: Pattern, fixed: Sequence[VgpuSlot]) -> bool:
    if p.keep:
        return True
    if p.mode == MIG_BACKED:
        return all(s.placement in p.layout for s in fixed)
    need = Counter(s.type_name for s in fixed)
    have = p.counts
    return all(have[k] >= n for k, n in need.items())


def _patterns(g: Group, wanted: set[str]) -> list[Pattern]:
    first, board = g.first, g.board
    modes = set(first.allowed) & set(board.modes)
    if first.mode is not None:
        modes.add(first.mode)  # what the GPU runs now stays possible (its running VMs may hold it there)
    ts = [t for t in board.types_in(TIME_SLICED) if t.name in wanted or any(s.type_name == t.name for s in first.slots)]
    out: list[Pattern] = [Pattern(None)]
    if first.slots:
        out.append(Pattern(first.mode, keep=True))
    if TIME_SLICED in modes:
        out += [Pattern(TIME_SLICED, ((t.name, t.max_count),)) for t in ts]
    if TIME_SLICED_MIXED in modes and ts:
        for c in _mixed_sets(board, tuple(t for t in ts if t.max_mixed)):
            out.append(Pattern(TIME_SLICED_MIXED, tuple(sorted(c.items()))))
    if MIG_BACKED in modes and g.model is not None:
        mts = [t for t in board.types_in(MIG_BACKED)
               if t.name in wanted or any(s.type_name == t.name for s in first.slots)]
        profiles = tuple(sorted({_key(t)[4:] for t in mts} | {p.split("@")[0] for p in first.layout}))
        for lay in maximal_of(g.model, profiles):
            place = tuple(str(i) for i in lay.instances)
            c = Counter(f"mig:{i.profile}" for i in lay.instances)
            out.append(Pattern(MIG_BACKED, tuple(sorted(c.items())), place))
        if first.mig_enabled and first.layout:  # the current layout itself, when not maximal
            cur = Layout.of(Instance.parse(p) for p in first.layout)
            c = Counter(f"mig:{i.profile}" for i in cur.instances)
            out.append(Pattern(MIG_BACKED, tuple(sorted(c.items())), first.layout))
    seen, uniq = set(), []
    for p in out:
        k = (p.mode, p.slots, p.layout, p.keep)
        if k not in seen and _fits_fixed(p, g.fixed):
            seen.add(k)
            uniq.append(p)
    return uniq


def _changes(g: Group, p: Pattern) -> tuple[int, int, int]:
    """(reconfigured, MIG mode changed, needs a reset) of pattern p on g's GPUs. A pattern never drops a fixed
    running vGPU (`_patterns` offers none that does); a movable one's move is costed on the VM (`build`)."""
    first = g.first
    if p.keep:
        return 0, 0, 0
    if p.mode is None:
        return int(bool(first.slots)), 0, 0
    idle = [s for s in first.slots if not s.running]
    same = p.mode == first.mode and _fits_fixed(p, idle)
    mig_change = int((p.mode == MIG_BACKED) != first.mig_enabled)
    arch = g.model.architecture if g.model is not None else ""
    return int(not same), mig_change, int(mig_change and arch in RESET_ON_MODE_CHANGE)


# --- the program ---------------------------------------------------------------------------------

@dataclass
class Program:
    milp: Milp
    groups: list[Group]
    classes: list[list[Vm]]
    layouts: dict[tuple[int, int], int]  # (group, pattern) -> y: GPUs of the group with that pattern
    given: dict[tuple[int, int, str], int]  # (class, group, type) -> a: VMs of the class given that type there
    left_out: dict[int, int]  # class -> u: its VMs left out


def _classes(vms: list[Vm]) -> list[list[Vm]]:
    alike: dict[tuple[object, ...], list[Vm]] = defaultdict(list)
    out: list[list[Vm]] = []
    for v in vms:
        if not v.candidates:
            continue
        if v.seen is not None or v.running:
            out.append([v])
        else:
            alike[(v.board.id if v.board else "", tuple(t.name for t in v.candidates), v.workload.priority)].append(v)
    return out + list(alike.values())


def build(groups: list[Group], classes: list[list[Vm]], w: Weights) -> Program:
    m = Milp()
    y: dict[tuple[int, int], int] = {}
    a: dict[tuple[int, int, str], int] = {}
    u: dict[int, int] = {}
    supply: dict[tuple[int, str], list[tuple[int, float]]] = defaultdict(list)
    for gi, g in enumerate(groups):
        row = []
        fixed = Counter(_fixed_key(g, s) for s in g.fixed)  # running vGPUs no VM of the plan may take from them
        for pi, p in enumerate(g.patterns):
            v = m.var(f"y_{gi}_{pi}")
            y[gi, pi] = v
            row.append((v, 1.0))
            changed, mode, reset = _changes(g, p)
            m.cost(v, (w.gpu if p.offers else 0.0) + w.change * changed + w.mode * mode + w.reset * reset)
            for k, n in p.counts.items():
                free = n - fixed[k]
                if free > 0:
                    supply[gi, k].append((v, float(free)))
        m.add(f"one_{gi}", row, "==", float(len(g.gpus)))
    demand: dict[tuple[int, str], list[tuple[int, float]]] = defaultdict(list)
    for ci, members in enumerate(classes):
        rep = members[0]
        row = []
        for gi, g in enumerate(groups):
            if rep.board is None or g.board.id != rep.board.id:
                continue
            for t in rep.candidates:
                k = _key(t)
                if not supply.get((gi, k)):
                    continue
                v = m.var(f"a_{ci}_{gi}_{t.name}", ub=float(len(members)))
                a[ci, gi, t.name] = v
                row.append((v, 1.0))
                demand[gi, k].append((v, 1.0))
                waste = (t.frame_buffer_mib - rep.need_mib) / 1024 + max(t.parsed.compute_slices - rep.slices, 0)
                moved = rep.seen is not None and (rep.seen not in {x.key for x in g.gpus} or rep.seen_type != t.name)
                cost = w.waste * max(waste, 0.0)
                if moved:
                    cost += w.disrupt if rep.running else w.fragment
                m.cost(v, cost)
        uv = m.var(f"u_{ci}", ub=float(len(members)))
        u[ci] = uv
        row.append((uv, 1.0))
        m.cost(uv, w.unplaced * (1 + rep.workload.priority))
        m.add(f"place_{ci}", row, "==", float(len(members)))
    for (gi, k), terms in demand.items():
        m.add(f"cap_{gi}_{k}", terms + [(v, -c) for v, c in supply[gi, k]], "<=", 0.0)
    return Program(m, groups, classes, y, a, u)


def _fixed_key(g: Group, s: VgpuSlot) -> str:
    known = [t for t in g.board.types if t.name == s.type_name]
    return _key(known[0]) if known else s.type_name  # a type the catalog does not know: a key no class asks for


# --- reading the solution back -------------------------------------------------------------------

def _round(x: float) -> int:
    return int(math.floor(x + 0.5))


@dataclass
class _Gpu:
    """One GPU of a group while its VMs are given their slots: its pattern, the slots it holds so far, what its
    pattern still offers per key, and its free GPU instances (MIG-backed)."""

    state: VgpuGpuState
    pattern: Pattern
    slots: list[VgpuSlot]
    free: Counter[str]
    places: list[str]
    movable: list[VgpuSlot] = field(default_factory=list)  # running vGPUs of VMs the plan may move (--allow-disrupt)


def _todo(prog: Program, gi: int, vals: tuple[float, ...], placed: dict[str, VmPlan],
          keys: set[tuple[str, int]]) -> list[tuple[Vm, VgpuType]]:
    """The VMs the solution gives a type on group gi, those seen on one of its GPUs first."""
    todo: list[tuple[Vm, VgpuType]] = []
    for ci, members in enumerate(prog.classes):
        for t in members[0].candidates:
            n = _round(vals[prog.given[ci, gi, t.name]]) if (ci, gi, t.name) in prog.given else 0
            taken = {x.name for x, _ in todo}
            free = [v for v in members if v.name not in placed and v.name not in taken]
            todo += [(v, t) for v in free[:n]]
    todo.sort(key=lambda vt: (vt[0].seen not in keys, vt[0].name))
    return todo


def _start(g: Group, gs: VgpuGpuState, p: Pattern) -> _Gpu:
    """A GPU before its VMs are placed: what it keeps whatever happens (the running vGPUs fixed on it; "as it is":
    everything), and the running vGPUs of VMs the plan may move, which stay only if their VM is given them again."""
    if p.keep:  # a vGPU no running VM holds is for no VM of the plan until one is given it (`_place`)
        keep = [s if s.running else dataclasses.replace(s, vm=None, vm_uuid=None) for s in gs.slots]
    else:
        keep = [s for s in gs.slots if s.running and s in g.fixed]
    movable = [] if p.keep else [s for s in gs.slots if s.running and s not in g.fixed and _fits_fixed(p, (s,))]
    free = p.counts
    for s in keep:
        free[_fixed_key(g, s)] -= 1
    used = {s.placement for s in keep if s.placement}
    return _Gpu(gs, p, keep, free, [x for x in p.layout if x not in used], movable)


def _place(at: _Gpu, v: Vm, t: VgpuType) -> VmPlan:
    """Give VM v a vGPU of type t on this GPU: its own running vGPU where the pattern keeps it, else an idle device
    of that type (and free GPU instance), else a new one."""
    gs, p, k = at.state, at.pattern, _key(t)
    at.free[k] -= 1
    device = placement = None
    mine = next((s for s in at.movable if s.vm == v.name), None) if v.running else None
    holds = mine is not None and mine.type_name == t.name and (mine.placement is None or mine.placement in at.places)
    if mine is not None and holds:  # its own running vGPU, kept
        device, placement = mine.device, mine.placement
        at.movable.remove(mine)
    else:
        pool = (at.slots if p.keep else gs.slots)
        idle = [s for s in pool if not s.running and (s.vm is None or s.vm == v.name) and s.type_name == t.name
                and (p.keep or all(x.device != s.device for x in at.slots))
                and (p.mode != MIG_BACKED or p.keep or s.placement in at.places)]
        own = {s.device for s in gs.slots if s.vm == v.name}
        idle.sort(key=lambda s: s.device not in own)  # the device it was seen on first
        if idle:
            device, placement = idle[0].device, idle[0].placement
            if p.keep:
                at.slots.remove(idle[0])
        elif p.mode == MIG_BACKED:
            placement = next(x for x in at.places if x.split("@")[0] == k[4:])
    if placement is not None and placement in at.places:
        at.places.remove(placement)
    at.slots.append(VgpuSlot(t.name, v.name, v.workload.observed.vm_uuid, holds, device, placement))
    moved = v.seen is not None and (v.seen != gs.key or v.seen_type != t.name)
    short = (f"pinned {t.name} holds {t.frame_buffer_mib} MiB, less than its {v.need_mib} MiB need"
             if t.frame_buffer_mib < v.need_mib else None)
    return VmPlan(v.name, "placed", v.need_mib, gs.host, gs.index, t.name, t.frame_buffer_mib, placement, moved, short)


def _finish(g: Group, at: _Gpu) -> VgpuGpuPlan:
    """The GPU's target: idle devices stay where its configuration stays (same mode, they fit its pattern)."""
    gs, p, slots = at.state, at.pattern, at.slots
    if not p.keep and p.mode is not None and not _changes(g, p)[0]:
        for s in gs.slots:
            if s.running or any(x.device == s.device for x in slots if x.device):
                continue
            k = _fixed_key(g, s)
            if at.free[k] > 0 and (p.mode != MIG_BACKED or s.placement in at.places):
                at.free[k] -= 1
                if s.placement:
                    at.places.remove(s.placement)
                slots.append(dataclasses.replace(s, vm=None, vm_uuid=None))
    mode = gs.mode if p.keep else p.mode if slots else None
    ordered = tuple(sorted(slots, key=lambda s: (s.placement or "", s.type_name, s.vm or "", s.device or "")))
    return VgpuGpuPlan(gs, mode, ordered, vgpu_actions(gs, mode, ordered))


def _fill_group(g: Group, gpus: list[VgpuGpuState], chosen: list[Pattern], prog: Program, vals: tuple[float, ...],
                gi: int, placed: dict[str, VmPlan]) -> list[VgpuGpuPlan]:
    """Give the group's GPUs their patterns and its VMs their slots (module notes)."""
    keys = {x.key for x in gpus}
    at = [_start(g, gs, p) for gs, p in zip(gpus, chosen, strict=True)]
    for v, t in _todo(prog, gi, vals, placed, keys):
        cands = [x for x in at if x.free[_key(t)] > 0]
        if cands:
            placed[v.name] = _place(next((x for x in cands if x.state.key == v.seen), cands[0]), v, t)
    return [_finish(g, x) for x in at]


# --- bounds and the entry point ------------------------------------------------------------------

def gpu_lower_bound(vms: Sequence[Vm], fixed: Sequence[tuple[VgpuModel, VgpuSlot]],
                    catalog: Catalog) -> int:
    """GPUs no plan can do with: per board, the frame buffer of every VM's smallest candidate (and of every running
    vGPU kept) over the GPU's, and for MIG-backed types their compute slices over the GPU's."""
    fb: dict[str, int] = Counter()
    slices: dict[str, int] = Counter()
    boards: dict[str, VgpuModel] = {}
    for v in vms:
        if v.board is None or not v.candidates:
            continue
        t = v.candidates[0]
        boards[v.board.id] = v.board
        fb[v.board.id] += t.frame_buffer_mib
        if t.mig_backed:
            slices[v.board.id] += t.parsed.compute_slices
    for b, s in fixed:
        boards[b.id] = b
        known = [t for t in b.types if t.name == s.type_name]
        if not known:
            continue  # a type the catalog does not know: no bound from it
        t = known[0]
        fb[b.id] += t.frame_buffer_mib
        if t.mig_backed:
            slices[b.id] += t.parsed.compute_slices
    total = 0
    for bid, b in boards.items():
        need = math.ceil(fb[bid] / b.capacity_mib)
        m = catalog.find(b.gpu)
        if slices[bid] and m is not None and m.mig:
            need = max(need, math.ceil(slices[bid] / m.compute_slices))
        total += need
    return total


def plan_vgpus(gpus: Sequence[VgpuGpuState], vms: Sequence[Workload], policy: Policy, solver: Solver,
               vcat: VgpuCatalog, catalog: Catalog, *, held: frozenset[tuple[str, int]] = frozenset()) -> VgpuPlan:
    """The vGPU plan of these hypervisor GPUs for these VM workloads (module notes). `held`: GPUs kept exactly as
    they are, nothing new on them and their running VMs where they run (replan's cool-down after a change)."""
    keys = {g.key for g in gpus}
    by_name = {s.vm: (g, s) for g in gpus for s in g.slots if s.running and s.vm is not None}
    items = [_vm(w, policy, vcat, catalog, by_name, keys) for w in vms]
    disrupt = policy.movable_running
    stay = {s.vm for g in gpus if g.key in held for s in g.slots if s.running}  # running on a held GPU

    def moves(v: Vm) -> bool:
        return not v.running or (disrupt and v.name not in stay)

    profiled = {v.name for v in items if v.candidates and moves(v)}
    groups: list[Group] = []
    alike: dict[tuple[object, ...], Group] = {}
    seen_on = {v.seen for v in items if v.seen is not None}
    for g in sorted(gpus, key=lambda g: g.key):
        board = vcat.get(g.board)
        found = catalog.find(board.gpu)
        model = found if found is not None and found.mig else None
        # running vGPUs of VMs the plan moves (--allow-disrupt) are not fixed; others always are
        fixed = tuple(s for s in g.slots if s.running and not (disrupt and s.vm in profiled))
        if fixed or g.key in seen_on or g.key in held or any(s.running for s in g.slots):
            groups.append(Group([g], board, model, fixed))
            continue
        sig = _signature(g)
        if sig in alike:
            alike[sig].gpus.append(g)
        else:
            alike[sig] = Group([g], board, model, ())
            groups.append(alike[sig])
    wanted = {t.name for v in items for t in v.candidates}
    for grp in groups:
        grp.patterns = _patterns(grp, wanted)
        if grp.first.key in held:  # as it is: nothing removed, nothing new
            grp.patterns = [Pattern(grp.first.mode, keep=True) if grp.first.slots else Pattern(None)]
    # a running VM the plan may move (--allow-disrupt) is an item; the others are fixed in their groups
    movable = [v for v in items if v.candidates and moves(v)]
    fixed_running = [v for v in items if v.running and not moves(v)]
    classes = _classes(movable)
    w = policy.weights
    prog = build(groups, classes, w)
    res = solver.solve(prog.milp) if prog.milp.names else SolveResult(status=SolveStatus.OPTIMAL, values=())
    if not res.status.has_solution:
        raise PlanError(f"the vGPU program ended {res.status.value}: {res.message or 'no solution'}",
                        hint="raise --time-limit, or plan fewer hypervisor hosts at once (--limit)")
    plans: list[VgpuGpuPlan] = []
    placed: dict[str, VmPlan] = {}
    for gi, grp in enumerate(groups):
        chosen: list[Pattern] = []
        for pi, p in enumerate(grp.patterns):
            chosen += [p] * _round(res.values[prog.layouts[gi, pi]])
        plans += _fill_group(grp, sorted(grp.gpus, key=lambda s: s.key), chosen, prog, res.values, gi, placed)
    vm_plans = []
    for v in items:
        if v.name in placed:
            vm_plans.append(placed[v.name])
        elif v in fixed_running and v.running:
            gs, s = by_name[v.name]
            t = v.board.vgpu_type(s.type_name) if v.board is not None else None
            reason = None if t is None or t.frame_buffer_mib >= v.need_mib else (
                f"its {s.type_name} holds {t.frame_buffer_mib} MiB, less than its {v.need_mib} MiB need; "
                "--allow-disrupt lets the plan give it a larger type")
            vm_plans.append(VmPlan(v.name, "kept", v.need_mib, gs.host, gs.index, s.type_name,
                                   t.frame_buffer_mib if t is not None else 0, s.placement, False, reason))
        else:
            vm_plans.append(VmPlan(v.name, "unplaced", v.need_mib, reason=v.reason or "no GPU of its board has room"))
    plans.sort(key=lambda p: p.key)
    fixed_slots = [(vcat.get(g.board), s) for g in gpus for s in g.slots if s.running and s.vm not in profiled]
    bound = gpu_lower_bound([v for v in items if v.candidates], fixed_slots, catalog)
    out = VgpuPlan(gpus=tuple(plans), vms=tuple(sorted(vm_plans, key=lambda v: v.name)),
                   status=res.status.value if prog.milp.names else "empty", objective=res.objective,
                   bound=res.bound, gpus_used=sum(1 for p in plans if p.used), gpu_lower_bound=bound)
    problems = check(out, vcat, catalog, movable=disrupt)
    if problems:  # a bug of the program or of its reading back: never a plan to apply
        raise PlanError("the vGPU plan failed its checks: " + "; ".join(problems[:5]),
                        hint="report this with the inputs ('migplan propose -o yaml' of them)")
    return out
