"""The plan: its types, its document form, and a strict reader that trusts nothing in the file (pure).

    version: 4
    kind: migplan/plan
    fingerprint: sha256:...        # of the whole observed state the plan was computed from
    created_at: 2026-12-01T08:00:00Z
    source: inventory
    policy: {...}                  # every knob used
    solve: {solver, status, objective, bound, gap, time_s, gpus_lower_bound}
    summary: {..., below_peak, min_margin_mib, headroom_rule, memory_warning}
    gpus: [{host, index, model, uuid, hold, current, mig_pending, busy, whole_gpu_busy, fingerprint,
            target, actions}]
    workloads: [{name, workload, status, host, gpu, instance, memory_mib, peak_mib, instance_mib, margin_mib,
                 slices, kept, moved, reason}]
    migrations: [{step, workload, priority, source: {host, gpu, instance}, target: {...} | null,
                  make_before_break, stop_first, stops, reason}]      # version 4 (migration.py)
    freed_gpus: [{host, index}]                                       # version 4
    consolidation: {max_moves, moves, gpus_in_use, gpus_used, gpus_freed, gpus_freeable, curve} | null
    eligibility: [{rules: [{profile, hosts, why}], workloads: [name]}]   # only when a workload has rules
    sizing: {mode, rule, recommended, target_oom, reason, calibrated_at, source, splits, train_s, test_s,
             oom_rate_mean, oom_rate_worst, whole_gpu_ratio_mean}     # only when sized by `sizing: auto`

Rules (written only where there are any, so a plan without them is as before; a reader that does not know them
refuses the unknown key rather than ignoring a rule): a GPU's `allowed` (what its target may hold:
`GpuState.allowed`, in its fingerprint) and `eligibility`, the workloads that may use some profiles on some hosts
only (`Item.eligible`), grouped by their rules. The reader checks each target against its GPU's rule and each
placed workload against its rules, as the validator did (docs/kubernetes.md, "MIG strategies").

`sizing` (written only for `sizing: auto`, so every other plan is as before): the rule auto chose and why, with its
backtest figures. The reader checks that the rule is one (planner/sizing.py) and is the plan's own memory rule (its
policy), and that every figure is in range.

Migrations (version 4): the ordered moves of running workloads. The reader checks each against the
workloads and GPUs and re-derives the whole order with `migration.order` from the file's own moves,
refusing a file whose steps differ (as it does for actions); `freed_gpus` and the consolidation counts
are re-derived too. Version 3 files (no migrations) are still read.

Memory margin (version 3): per workload `peak_mib` (its observed memory peak), `instance_mib` (the MiB of
the instance it is placed on, the GPU's memory for a whole GPU, null when unplaced) and `margin_mib` =
instance_mib - peak_mib (negative: the workload used more than this instance in its history). The
summary counts the placed workloads below their peak (`below_peak`, 0 under the default `max` sizing),
the least margin, the headroom rule in words and, when memory is sized from a percentile below the
peak, the warning that says so. The reader recomputes all of these and refuses a file that disagrees.

Layouts are lists of PROFILE@START; `null` means MIG disabled. Per GPU the document records what the
plan assumed (`current`, `mig_pending`, `busy`, `whole_gpu_busy` and their `fingerprint`) so that
`apply` can check each GPU on its own. A plan file is untrusted input: the reader validates every
field (names, ranges, models and layouts against the catalog), recomputes each GPU's fingerprint and
re-derives the actions from `current` and `target`, refusing a file whose listed actions differ.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from migplan import names, yamldoc
from migplan.catalog import Catalog, builtin_vgpu_catalog
from migplan.catalog.geometry import GpuModel
from migplan.catalog.layout import Instance, Layout, check_layout
from migplan.catalog.loader import CATALOG_VERSION, parse_catalog
from migplan.catalog.writer import models_to_list
from migplan.errors import CatalogError, InputError, MigplanError
from migplan.model.diff import Action, diff
from migplan.model.gpu_plan import ON_GPU, WORKLOAD_STATUSES, Endpoint, GpuPlan, Migration, WorkloadPlan
from migplan.model.state import FleetState, GpuKey, GpuState
from migplan.model.vgpu import VgpuPlan
from migplan.planner.demand import Policy, headroom_rule, memory_warning, policy_from_mapping
from migplan.planner.migration import GpuLayouts, Move, freed_gpus, order
from migplan.planner.milp import LEGACY_STATUSES, SolveStatus
from migplan.planner.sizing import parse_rule, rule_text
from migplan.planner.vgpu_document import parse_vgpu_plan, vgpu_plan_to_dict
from migplan.profiles import ANY_MIG, MAX_PRIORITY, WHOLE_GPU, Eligible, may_use
from migplan.yamldoc import Node

# 5: workloads kept at risk (status at_risk, summary workloads_at_risk); 4: migrations, freed, consolidation;
# 3: memory margins (WorkloadPlan peak/instance/margin ...)
PLAN_VERSION = 5
PLAN_VERSION_VGPU = 6  # a plan with a `vgpu` section (hypervisor hosts, issue 26); one without is still version 5
READ_VERSIONS = (3, 4, 5, 6)  # a version 3 plan has no moves recorded: read with none (it was made without them)
# summary keys a plan before version 5 lacks (read as their defaults: such a plan kept nothing at risk)
_SUMMARY_SINCE_5 = frozenset({"workloads_at_risk", "idle_kept", "idle_removed", "idle_removed_freeing"})
PLAN_KIND = "migplan/plan"
_SHA256 = re.compile(r"sha256:[0-9a-f]{64}")
_REPLICA = re.compile(r"#[0-9]{1,4}")


@dataclass(frozen=True)
class SizingChoice:
    """What `sizing: auto` chose for this plan (commands/sizing.py): the rule, whether it is the sweep's
    recommendation (else the default rule, and `reason` says why), the target and the chosen rule's backtest
    figures (None where no sweep ran)."""

    rule: str
    recommended: bool
    target_oom: float
    reason: str
    calibrated_at: str | None = None  # ISO 8601 UTC
    source: str | None = None  # the history it was calibrated from
    splits: int | None = None
    train_s: float | None = None
    test_s: float | None = None
    oom_rate_mean: float | None = None
    oom_rate_worst: float | None = None
    whole_gpu_ratio_mean: float | None = None
    mode: str = "auto"

    def line(self) -> str:
        """The plan's summary line for it."""
        if not self.recommended:
            return f"sizing auto: {self.rule}, the default rule: {self.reason}"
        when = f", calibrated {self.calibrated_at}" if self.calibrated_at else ""
        return f"sizing auto: {self.rule}, {self.reason}{when}" + (f" from {self.source}" if self.source else "")


class PlanError(MigplanError):
    """No plan could be made (e.g. more whole GPUs asked to be kept free than exist), or a plan failed its checks."""


@dataclass(frozen=True)
class SolveInfo:
    solver: str
    status: str
    objective: float | None
    bound: float | None
    gap: float | None
    time_s: float
    gpus_lower_bound: int | None
    # "greedy": the solver found no plan in time (status no-solution) and this is planner.greedy's fallback,
    # checked like any plan: every layout kept, nothing running moved. Written only when set (plan version 5).
    fallback: str | None = None


@dataclass(frozen=True)
class Summary:
    gpus_total: int
    gpus_planned: int  # not reserved or excluded
    gpus_used: int
    gpus_lower_bound: int | None
    gpus_changed: int
    free_whole_gpus: int
    instances_destroyed: int
    instances_created: int
    workloads_placed: int
    workloads_unplaced: int  # left out: no place at all
    workloads_disrupted: int
    busy_disrupted: int  # instances (or MIG-disabled GPUs) with unprofiled processes that the plan stops
    stranded_slices: int
    placed_value: float
    below_peak: int  # placed workloads whose instance has less memory than their observed peak
    min_margin_mib: int | None  # least instance MiB - peak MiB over placed workloads (None: none placed)
    headroom_rule: str  # the memory headroom rule in words, e.g. "+10%, at least 512 MiB"
    memory_warning: str | None  # set when memory is sized from a percentile below the observed peak
    workloads_at_risk: int = 0  # running, kept where they run: their peak fits there, peak + headroom does not (v5)
    idle_kept: int = 0  # idle instances (nothing runs there) left as they are, still free: spare capacity (v5)
    idle_removed: int = 0  # idle instances the plan destroys ...
    idle_removed_freeing: int = 0  # ... of them on GPUs the plan leaves unused (removed to free a whole GPU)


def instance_memory_mib(model: GpuModel, instance: str | None) -> int:
    """MiB a workload gets on `instance` (PROFILE@START) of `model`; None: the whole MIG-disabled GPU."""
    if instance is None:
        return model.memory_mib
    return model.profile(Instance.parse(instance).profile).memory_mib


def memory_margins(workloads: tuple[WorkloadPlan, ...] | list[WorkloadPlan]) -> tuple[int, int | None]:
    """(workloads on a GPU below their peak, least margin among them or None): placed and kept at risk."""
    margins = [w.margin_mib for w in workloads if w.on_gpu and w.margin_mib is not None]
    return sum(1 for m in margins if m < 0), (min(margins) if margins else None)


@dataclass(frozen=True)
class CurvePoint:
    """One re-solve of a consolidation at a move budget: how many GPUs that many moves free."""

    max_moves: int | None  # the budget (None: unlimited)
    moves: int  # running workloads that change instance in that plan
    gpus_used: int
    gpus_freed: int  # GPUs in use before that the plan leaves empty (as `Plan.freed`)


@dataclass(frozen=True)
class Consolidation:
    """What `--consolidate` achieved: moves spent, GPUs freed, against the lower bound, and the curve."""

    max_moves: int | None
    moves: int
    gpus_in_use: int  # planned GPUs in use before: instances, a running workload, or processes
    gpus_used: int
    gpus_freed: int  # GPUs in use before that the plan leaves empty (`Plan.freed`; before version 5: in use - used)
    gpus_freeable: int | None  # gpus_in_use - the GPU lower bound (every workload placed, moves unlimited): a bound
    # on the net figure gpus_freed - gpus_newly_used; negative when the demand needs more GPUs than are in use now
    curve: tuple[CurvePoint, ...] = ()  # sorted by budget; this plan's own point among them
    gpus_newly_used: int = 0  # GPUs not in use before that the plan brings into use (version 5)


@dataclass(frozen=True)
class Eligibility:
    """Workloads that may use some profiles on some hosts only, with those rules (`Item.eligible`): carried in the
    plan so that a plan read back is checked as the planner checked it."""

    rules: tuple[Eligible, ...]
    workloads: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    fingerprint: str
    source: str
    policy: Mapping[str, Any]
    solve: SolveInfo
    summary: Summary
    gpus: tuple[GpuPlan, ...]
    workloads: tuple[WorkloadPlan, ...]
    created_at: str | None = None  # ISO 8601 UTC, set by whoever ran the planner (the core has no clock)
    models: tuple[GpuModel, ...] = ()  # models built from hosts' own profile tables that GPUs here use
    version: int = PLAN_VERSION
    migrations: tuple[Migration, ...] = ()  # the ordered moves of running workloads (migration.order)
    freed: tuple[GpuKey, ...] = ()  # GPUs in use before that the plan leaves empty
    consolidation: Consolidation | None = None  # set by --consolidate
    eligibility: tuple[Eligibility, ...] = ()  # workloads with rules (written only when there are any)
    sizing: SizingChoice | None = None  # `sizing: auto`'s choice (written only when set)
    vgpu: VgpuPlan | None = None  # hypervisor hosts' GPUs and the VM workloads (issue 26; written only when set)

    @functools.cached_property
    def _by_key(self) -> dict[GpuKey, GpuPlan]:
        return {g.key: g for g in self.gpus}

    def gpu(self, host: str, index: int) -> GpuPlan | None:
        return self._by_key.get((host, index))


def layouts(gpus: tuple[GpuPlan, ...] | list[GpuPlan], catalog: Catalog) -> dict[GpuKey, GpuLayouts]:
    return {g.key: GpuLayouts(catalog.get(g.model), g.current, g.target) for g in gpus}


def in_use(gpus: tuple[GpuPlan, ...] | list[GpuPlan], workloads: tuple[WorkloadPlan, ...] | list[WorkloadPlan],
           migrations: tuple[Migration, ...] | list[Migration]) -> tuple[set[GpuKey], set[GpuKey]]:
    """(planned GPUs in use before the plan, planned GPUs in use after it). Before: instances, processes on a
    MIG-disabled GPU, a workload kept there or a moving workload's source; after: instances in the target,
    a workload placed there, or processes on a GPU that stays MIG-disabled and that no moving workload
    leaves. Reserved and excluded GPUs are not counted."""
    planned = {g.key for g in gpus if g.hold is None}
    before = {g.key for g in gpus if (g.current is not None and len(g.current)) or g.observed.whole_busy}
    before |= {(w.host or "", w.gpu if w.gpu is not None else -1) for w in workloads if w.on_gpu and w.kept}
    before |= {m.source.key for m in migrations}
    after = {g.key for g in gpus if g.target is not None and len(g.target)}
    after |= {(w.host or "", w.gpu if w.gpu is not None else -1) for w in workloads if w.on_gpu}
    # processes on a GPU that stays MIG-disabled run on, unless the workload they are taken to be moves away
    leaving = {m.source.key for m in migrations}
    after |= {g.key for g in gpus if g.target is None and g.observed.whole_busy and g.key not in leaving}
    return before & planned, after & planned


def plan_freed(gpus: tuple[GpuPlan, ...] | list[GpuPlan], workloads: tuple[WorkloadPlan, ...] | list[WorkloadPlan],
               migrations: tuple[Migration, ...] | list[Migration]) -> tuple[GpuKey, ...]:
    return freed_gpus(*in_use(gpus, workloads, migrations))


# --- writing -------------------------------------------------------------------------------------

def _endpoint(e: Endpoint | None) -> dict[str, Any] | None:
    return None if e is None else {"host": e.host, "gpu": e.gpu, "instance": e.instance}


def migration_to_dict(m: Migration) -> dict[str, Any]:
    return {"step": m.step, "workload": m.workload, "priority": m.priority, "source": _endpoint(m.source),
            "target": _endpoint(m.target), "make_before_break": m.make_before_break, "stop_first": m.stop_first,
            "stops": list(m.stops), "reason": m.reason}


def _consolidation(c: Consolidation | None) -> dict[str, Any] | None:
    return None if c is None else asdict(c)

def _layout(lay: Layout | None) -> list[str] | None:
    return lay.as_list() if lay is not None else None


def gpu_to_dict(g: GpuPlan) -> dict[str, Any]:
    o = g.observed
    d = {"host": o.host, "index": o.index, "model": o.model, "uuid": o.uuid, "hold": o.hold,
         "current": _layout(o.current), "mig_pending": o.mig_pending, "busy": [str(i) for i in sorted(o.busy)],
         "whole_gpu_busy": o.whole_busy, "fingerprint": o.fingerprint(),
         "target": _layout(g.target), "actions": [str(a) for a in g.actions]}
    if o.allowed is not None:  # only where there is a rule: other GPUs' entries as before rules existed
        d["allowed"] = list(o.allowed)
    return d


def eligibility_to_list(groups: tuple[Eligibility, ...]) -> list[dict[str, Any]]:
    return [{"rules": [{"profile": r.profile, "hosts": None if r.hosts is None else list(r.hosts), "why": r.why}
                       for r in e.rules], "workloads": list(e.workloads)} for e in groups]


_WORKLOAD_FIELDS = tuple(f.name for f in fields(WorkloadPlan))


def _workload_dict(w: WorkloadPlan) -> dict[str, Any]:
    """`asdict(w)` without its deep copy of every field (all are str, int, bool or None): 0.2 s at 7,000 GPUs."""
    return {name: getattr(w, name) for name in _WORKLOAD_FIELDS}


def plan_to_dict(plan: Plan) -> dict[str, Any]:
    # the collector paused while the document's ~10 small dicts per GPU and workload are made: its full
    # passes over everything alive doubled this at 70,000 GPUs (bench/large_inputs.py)
    with yamldoc.paused_gc():
        return _plan_dict(plan)


def _plan_dict(plan: Plan) -> dict[str, Any]:
    return {
        "version": plan.version,
        "kind": PLAN_KIND,
        "fingerprint": plan.fingerprint,
        "created_at": plan.created_at,
        "host_models": models_to_list(plan.models),
        "source": plan.source,
        "policy": dict(plan.policy),
        "solve": _solve_dict(plan.solve),
        "summary": asdict(plan.summary),
        "gpus": [gpu_to_dict(g) for g in plan.gpus],
        "workloads": [_workload_dict(w) for w in plan.workloads],
        **({"eligibility": eligibility_to_list(plan.eligibility)} if plan.eligibility else {}),
        **({"sizing": asdict(plan.sizing)} if plan.sizing is not None else {}),
        **({} if plan.version < 4 else {
            "migrations": [migration_to_dict(m) for m in plan.migrations],
            "freed_gpus": [{"host": h, "index": i} for h, i in plan.freed],
            "consolidation": _consolidation(plan.consolidation)}),
        **({"vgpu": vgpu_plan_to_dict(plan.vgpu)} if plan.vgpu is not None else {}),
    }


# --- strict reader -------------------------------------------------------------------------------

_HINT = "regenerate the plan with 'migplan propose --out PLAN'"
_GPU_KEYS = {"host", "index", "model", "uuid", "hold", "current", "mig_pending", "busy", "whole_gpu_busy",
             "fingerprint", "target", "actions"}


def _null(f: dict[str, Node], key: str) -> bool:
    return f[key].is_null


def _opt_str(n: Node) -> str | None:
    return None if n.is_null else n.str()


def _opt_number(n: Node) -> float | None:
    if n.is_null:
        return None
    v = n.number()
    if not math.isfinite(v):
        n.fail("must be a finite number")
    return v


def _opt_stamp(n: Node) -> str | None:
    """`created_at`: null, or a UTC time as migplan writes it (names.UTC_STAMP); a time in the future is
    refused by `apply` (it knows the clock), not here."""
    if n.is_null:
        return None
    text = n.str()
    if names.utc_stamp(text) is None:
        n.fail(f"{text[:60]!r} is not a UTC time such as {names.UTC_STAMP_EXAMPLE} (or a day or time that does "
               "not exist)", hint="re-plan with 'migplan propose --out', which writes it")
    return text


def _opt_int(n: Node, minimum: int = 0) -> int | None:
    return None if n.is_null else n.int(minimum=minimum)


def _instance(n: Node) -> Instance:
    try:
        return Instance.parse(n.str())
    except InputError as err:
        n.fail(err.message)


def _read_layout(n: Node) -> Layout | None:
    if n.is_null:
        return None
    items = [i.str() for i in n.list()]
    try:
        return Layout.parse(items)
    except InputError as err:
        n.fail(err.message)


def _read_allowed(n: Node, model: GpuModel) -> tuple[str, ...]:
    """A GPU's rule: profiles of its model and "whole", each once."""
    out: list[str] = []
    for item in n.list()[:_RULE_MAX + 1]:
        name = item.str()
        if name != WHOLE_GPU and not model.has_profile(name):
            item.fail(f"{name[:40]!r} is not a profile of {model.id} (nor {WHOLE_GPU!r})", hint=_HINT)
        if name in out:
            item.fail(f"{name!r} is listed twice")
        out.append(name)
    if len(out) > _RULE_MAX:
        n.fail(f"more than {_RULE_MAX} entries")
    return tuple(out)


_RULE_MAX = 64  # profiles of a GPU's rule, rules of a workload: a model has about 20 profiles


def _read_gpu(n: Node, catalog: Catalog) -> GpuPlan:
    f = n.fields(_GPU_KEYS | {"allowed"}, _GPU_KEYS)
    host = f["host"].str()
    if not names.HOST_NAME.fullmatch(host):
        f["host"].fail(f"{host!r} is not a host name (letters, digits, '.', '_' or '-')", hint=_HINT)
    index = f["index"].int(minimum=0)
    if index > names.MAX_GPU_INDEX:
        f["index"].fail(f"GPU index {index} is out of range 0..{names.MAX_GPU_INDEX}")
    try:
        model = catalog.get(f["model"].str())
    except CatalogError as err:
        f["model"].fail(err.message, hint="pass the catalog file the plan was made with (--catalog)")
    uuid = _opt_str(f["uuid"])
    if uuid is not None and not names.GPU_UUID.fullmatch(uuid):
        f["uuid"].fail(f"{uuid!r} is not a GPU UUID (GPU-xxxxxxxx-...)")
    hold = _opt_str(f["hold"])
    if hold not in (None, "reserved", "excluded"):
        f["hold"].fail(f"{hold!r} is not a hold; expected reserved, excluded or null")
    current, target = _read_layout(f["current"]), _read_layout(f["target"])
    for key, lay in (("current", current), ("target", target)):
        bad = check_layout(model, lay) if lay is not None else []
        if bad:
            f[key].fail(f"not a valid {model.id} layout: " + "; ".join(c.message for c in bad), hint=_HINT)
    busy = tuple(_instance(b) for b in f["busy"].list())
    stray = [str(b) for b in busy if current is None or b not in current.instances]
    if stray:
        f["busy"].fail(f"busy instance(s) {', '.join(stray)} are not in the current layout")
    pending = None if _null(f, "mig_pending") else f["mig_pending"].bool()
    allowed = _read_allowed(f["allowed"], model) if "allowed" in f else None
    observed = GpuState(host=host, index=index, model=model.id, uuid=uuid, mig_enabled=current is not None,
                        mig_pending=pending, layout=current, busy=busy, whole_gpu_busy=f["whole_gpu_busy"].bool(),
                        reserved=hold == "reserved", excluded=hold == "excluded", allowed=allowed)
    if f["fingerprint"].str() != observed.fingerprint():
        f["fingerprint"].fail("does not match this GPU's recorded state: the file was edited or damaged", hint=_HINT)
    broken = observed.may_hold(target) if hold is None else None
    if broken is not None:
        f["target"].fail(f"breaks the GPU's rule (allowed): {broken}", hint=_HINT)
    actions = tuple(diff(current, target, gpu=observed.key, architecture=model.architecture))
    listed = [a.str() for a in f["actions"].list()]
    if listed != [str(a) for a in actions]:
        shown = ", ".join(listed[:6]) or "none"
        f["actions"].fail(f"listed actions ({shown}) are not the ones that turn current into target "
                          f"({', '.join(map(str, actions)) or 'none'})", hint=_HINT)
    return GpuPlan(observed, target, actions)


# --- the same readers on a JSON document's plain values --------------------------------------------
# A 200,000-GPU plan is 1.4 million GPU and workload entries; reading each through a Node per field and the
# checks above took most of `apply`'s minutes. `_gpu_fast` and `_workload_fast` take an entry's plain value
# (`Node.plain`, a JSON document's) in the shape migplan writes and check it with the same rules, the pure
# checks of a layout, instance or action list made once per distinct value (`_Memo`). They return None for
# anything else, which the Node readers above then read: an error is theirs, message and line, and what they
# accept the fast readers return identically or leave to them.

def _made(cls: type[Any], values: dict[str, Any]) -> Any:
    """`cls(**values)`, every field given, for the frozen dataclasses read per GPU and workload: their generated
    __init__ sets each field through object.__setattr__ (5 us a WorkloadPlan, a fifth of reading one), so the
    object's __dict__ is filled at once instead; a class with a __post_init__ or slots is made the usual way."""
    if cls not in _PLAIN_INIT:
        _PLAIN_INIT[cls] = (not hasattr(cls, "__post_init__") and not hasattr(cls, "__slots__")
                            and {f.name for f in fields(cls)} == values.keys())
    if not _PLAIN_INIT[cls]:
        return cls(**values)
    obj = object.__new__(cls)
    obj.__dict__.update(values)
    return obj


_PLAIN_INIT: dict[type[Any], bool] = {}


class _Memo:
    """Pure results per plan read: models by name, layouts and their checks, instances, actions."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.models: dict[str, GpuModel | None] = {}
        self.layouts: dict[tuple[str, tuple[str, ...]], Layout | None] = {}
        self.instances: dict[str, Instance | None] = {}
        self.actions: dict[tuple[Layout | None, Layout | None, str], tuple[Action, ...]] = {}
        self.action_texts: dict[tuple[Layout | None, Layout | None, str], list[str]] = {}
        self.memory: dict[tuple[str, str | None], int | None] = {}

    def model(self, name: str) -> GpuModel | None:
        if name not in self.models:
            try:
                self.models[name] = self.catalog.get(name)
            except CatalogError:
                self.models[name] = None
        return self.models[name]

    def layout(self, model: GpuModel, items: Any) -> Layout | None:
        """A valid layout of `model` (`_read_layout` and `check_layout`), else None."""
        if type(items) is not list or not all(type(i) is str for i in items):
            return None
        key = (model.id, tuple(items))
        if key not in self.layouts:
            lay = None
            with contextlib.suppress(InputError):
                lay = Layout.parse(items)
            self.layouts[key] = lay if lay is not None and not check_layout(model, lay) else None
        return self.layouts[key]

    def instance(self, text: Any) -> Instance | None:
        if type(text) is not str:
            return None
        if text not in self.instances:
            try:
                self.instances[text] = Instance.parse(text)
            except InputError:
                self.instances[text] = None
        return self.instances[text]

    def diff(self, current: Layout | None, target: Layout | None, model: GpuModel,
             gpu: GpuKey) -> tuple[tuple[Action, ...], list[str]]:
        """`diff`'s actions on `gpu` and their texts: diff copies `gpu` into each action, so the actions of one
        (current, target, architecture) are made once and given each GPU's key."""
        key = (current, target, model.architecture)
        if key not in self.actions:
            self.actions[key] = tuple(diff(current, target, gpu=("", 0), architecture=model.architecture))
            self.action_texts[key] = [str(a) for a in self.actions[key]]
        # Action's __post_init__ checked these very op/instance/reset values when the template was made
        made = tuple(_made_action(a.__dict__, gpu) for a in self.actions[key])
        return made, self.action_texts[key]

    def instance_mib(self, model_name: str, instance: str | None) -> int | None:
        """`_check_margin`'s memory of `instance` on the model, None where it would fail."""
        key = (model_name, instance)
        if key not in self.memory:
            model = self.model(model_name)
            inst = self.instance(instance) if instance is not None else None
            if model is None or (instance is not None and (inst is None or not model.has_profile(inst.profile))):
                self.memory[key] = None
            else:
                self.memory[key] = instance_memory_mib(model, instance)
        return self.memory[key]


def _made_action(template: dict[str, Any], gpu: GpuKey) -> Action:
    obj = object.__new__(Action)
    obj.__dict__.update(template, gpu=gpu)
    return obj


class _Entries:
    """A list node's entries: their plain values (None each when not read as JSON) and their nodes, made only
    when one is needed (an entry left to the Node readers, or an error)."""

    def __init__(self, node: Node) -> None:
        raw = node.plain()
        self._node = node
        self._nodes: list[Node] | None = None if type(raw) is list else node.list()
        self.values: list[Any] = raw if type(raw) is list else [None] * len(self._nodes or ())

    def node(self, i: int) -> Node:
        if self._nodes is None:
            self._nodes = self._node.list()
        return self._nodes[i]


_GPU_KEY_SET = frozenset(_GPU_KEYS)
_GPU_KEY_SET_RULED = _GPU_KEY_SET | {"allowed"}
_HOLDS = (None, "reserved", "excluded")


def _gpu_fast(d: Any, memo: _Memo) -> GpuPlan | None:
    """`_read_gpu` of a plain GPU entry in the shape migplan writes; None: anything else."""
    if type(d) is not dict or (d.keys() != _GPU_KEY_SET and d.keys() != _GPU_KEY_SET_RULED):
        return None
    host, index, uuid, hold, pending, whole = (d["host"], d["index"], d["uuid"], d["hold"], d["mig_pending"],
                                              d["whole_gpu_busy"])
    if (type(host) is not str or not names.HOST_NAME.fullmatch(host) or type(index) is not int
            or not 0 <= index <= names.MAX_GPU_INDEX or type(d["model"]) is not str
            or (uuid is not None and (type(uuid) is not str or not names.GPU_UUID.fullmatch(uuid)))
            or (hold is not None and type(hold) is not str) or hold not in _HOLDS
            or (pending is not None and type(pending) is not bool) or type(whole) is not bool
            or type(d["busy"]) is not list or type(d["actions"]) is not list):
        return None
    model = memo.model(d["model"])
    if model is None:
        return None
    allowed = None
    if "allowed" in d:
        rule = d["allowed"]
        if (type(rule) is not list or len(rule) > _RULE_MAX or len(set(map(str, rule))) != len(rule)
                or not all(type(q) is str and (q == WHOLE_GPU or model.has_profile(q)) for q in rule)):
            return None
        allowed = tuple(rule)
    current = target = None
    if d["current"] is not None:
        current = memo.layout(model, d["current"])
        if current is None:
            return None
    if d["target"] is not None:
        target = memo.layout(model, d["target"])
        if target is None:
            return None
    busy = tuple(memo.instance(b) for b in d["busy"])
    if busy and (current is None or any(b is None or b not in current.instances for b in busy)):
        return None
    observed = _made(GpuState, {"host": host, "index": index, "model": model.id, "uuid": uuid,
                                "mig_enabled": current is not None, "mig_pending": pending, "layout": current,
                                "busy": busy, "whole_gpu_busy": whole, "reserved": hold == "reserved",
                                "excluded": hold == "excluded", "allowed": allowed})
    if d["fingerprint"] != observed.fingerprint() or (hold is None and observed.may_hold(target) is not None):
        return None
    actions, texts = memo.diff(current, target, model, observed.key)
    if d["actions"] != texts:
        return None
    return _made(GpuPlan, {"observed": observed, "target": target, "actions": actions})  # type: ignore[no-any-return]  # _made(cls) is a cls


_WORKLOAD_KEY_SET = frozenset(_WORKLOAD_FIELDS)


def _opt(v: Any, kind: type) -> bool:
    return v is None or type(v) is kind


def _workload_fast(d: Any, gpus: Mapping[GpuKey, GpuPlan]) -> WorkloadPlan | None:
    """`_read_workload` of a plain workload entry in the shape migplan writes; None: anything else."""
    if type(d) is not dict or d.keys() != _WORKLOAD_KEY_SET:
        return None
    name, workload, status, host, gpu, instance = (d["name"], d["workload"], d["status"], d["host"], d["gpu"],
                                                   d["instance"])
    mib = names.MAX_MEMORY_MIB
    memory, peak, inst_mib, margin, slices = (d["memory_mib"], d["peak_mib"], d["instance_mib"], d["margin_mib"],
                                              d["slices"])
    if (type(name) is not str or type(workload) is not str or type(status) is not str
            or status not in WORKLOAD_STATUSES or not _opt(host, str) or not _opt(gpu, int)
            or (gpu is not None and gpu < 0) or not _opt(instance, str)
            or type(memory) is not int or memory < 0 or type(peak) is not int or not 0 <= peak <= mib
            or not _opt(inst_mib, int) or (inst_mib is not None and not 0 <= inst_mib <= mib)
            or not _opt(margin, int) or (margin is not None and not -mib <= margin <= mib)
            or type(slices) is not int or slices < 0 or type(d["kept"]) is not bool
            or type(d["moved"]) is not bool or not _opt(d["reason"], str)):
        return None
    base = _REPLICA.sub("", name, count=1) if "#" in name else name
    if not names.WORKLOAD_NAME.fullmatch(base) or not names.WORKLOAD_NAME.fullmatch(workload):
        return None
    if status == "at_risk" and (not d["kept"] or d["moved"] or d["reason"] is None or margin is None or margin < 0):
        return None
    if status in ON_GPU:
        g = gpus.get((host or "", gpu if gpu is not None else -1))
        if g is None:
            return None
        if instance is not None:
            try:
                inst = Instance.parse(instance)
            except InputError:
                return None
            if g.target is None or inst not in g.target.instances:
                return None
        elif g.target is not None:
            return None
    return _made(WorkloadPlan, d)  # type: ignore[no-any-return]  # d is exactly its fields, each checked above


def _margin_ok(w: WorkloadPlan, gpus: Mapping[GpuKey, GpuPlan], memo: _Memo) -> bool:
    """True when `_check_margin` passes (False: it may fail, let it say why)."""
    if w.status == "at_risk" and (not w.kept or w.moved or w.reason is None or (w.margin_mib or 0) < 0):
        return False
    if not w.on_gpu:
        return w.instance_mib is None and w.margin_mib is None
    want = memo.instance_mib(gpus[(w.host or "", w.gpu if w.gpu is not None else -1)].model, w.instance)
    return want is not None and w.instance_mib == want and w.margin_mib == want - w.peak_mib


def _dataclass(cls: type[Any], n: Node) -> dict[str, Node]:
    keys = {f.name for f in fields(cls)}
    return n.fields(keys, keys)


FALLBACKS = ("greedy",)  # planner.greedy.GREEDY


def _solve_dict(solve: SolveInfo) -> dict[str, Any]:
    d = asdict(solve)
    if d["fallback"] is None:
        del d["fallback"]  # a solver's plan: as plans were written before the fallback existed
    return d


def _read_solve(n: Node) -> SolveInfo:
    keys = {f.name for f in fields(SolveInfo)}
    f = n.fields(keys, keys - {"fallback"})
    status = f["status"].str()
    if status not in {s.value for s in SolveStatus} | LEGACY_STATUSES:  # old plans: as written
        f["status"].fail(f"unknown solve status {status!r}")
    time_s = f["time_s"].number(minimum=0)
    return SolveInfo(solver=f["solver"].str(), status=status, objective=_opt_number(f["objective"]),
                     bound=_opt_number(f["bound"]), gap=_opt_number(f["gap"]), time_s=time_s,
                     gpus_lower_bound=_opt_int(f["gpus_lower_bound"]), fallback=_read_fallback(f, status))


def _read_fallback(f: dict[str, Node], status: str) -> str | None:
    if "fallback" not in f or f["fallback"].is_null:
        return None
    name = f["fallback"].str()
    if name not in FALLBACKS:
        f["fallback"].fail(f"unknown fallback {name!r}; known: {', '.join(FALLBACKS)}")
    if status != SolveStatus.NO_SOLUTION.value:
        f["fallback"].fail(f"a {name} fallback is made only when the solver found no solution, not {status!r}")
    return name


_TEXT_MAX = 500  # headroom_rule and memory_warning are one line each


def _opt_text(n: Node) -> str | None:
    text = _opt_str(n)
    if text is not None and (len(text) > _TEXT_MAX or not text.isprintable()):
        n.fail(f"must be one printable line of at most {_TEXT_MAX} characters")
    return text


def _read_summary(n: Node, version: int) -> tuple[Summary, dict[str, Node]]:
    keys = {fl.name for fl in fields(Summary)}
    f = n.fields(keys, keys - _SUMMARY_SINCE_5 if version < 5 else keys)
    values: dict[str, Any] = {}
    for k, v in f.items():
        if k == "placed_value":
            values[k] = _opt_number(v) or 0.0
        elif k == "gpus_lower_bound":
            values[k] = _opt_int(v)
        elif k == "min_margin_mib":
            values[k] = None if v.is_null else v.int(minimum=-names.MAX_MEMORY_MIB, maximum=names.MAX_MEMORY_MIB)
        elif k == "headroom_rule":
            if v.is_null:
                v.fail("expected a string (the headroom rule, e.g. '+10%, at least 512 MiB')")
            values[k] = _opt_text(v)
        elif k == "memory_warning":
            values[k] = _opt_text(v)
        else:
            values[k] = v.int(minimum=0)
    return Summary(**values), f


def _check_summary(f: dict[str, Node], s: Summary, policy: Policy, workloads: list[WorkloadPlan]) -> None:
    """The memory fields of the summary are derived: they must be what the policy and workloads give."""
    below, least = memory_margins(workloads)
    at_risk = sum(1 for w in workloads if w.status == "at_risk")
    if s.workloads_at_risk != at_risk:
        f.get("workloads_at_risk", f["below_peak"]).fail(
            f"says {s.workloads_at_risk} workload(s) kept at risk; the workloads show {at_risk}", hint=_HINT)
    if s.below_peak != below:
        f["below_peak"].fail(f"says {s.below_peak} workload(s) below their peak; the workloads show {below}",
                             hint=_HINT)
    if s.min_margin_mib != least:
        f["min_margin_mib"].fail(f"says {s.min_margin_mib}; the least margin of the placed workloads is {least}",
                                 hint=_HINT)
    if s.headroom_rule != headroom_rule(policy):
        f["headroom_rule"].fail(f"{s.headroom_rule!r} is not the policy's rule ({headroom_rule(policy)!r})",
                                hint=_HINT)
    want = memory_warning(policy, below)
    if s.memory_warning != want:
        f["memory_warning"].fail(f"must be {want!r} for memory_percentile {policy.memory_percentile} "
                                 f"and {below} workload(s) below their peak", hint=_HINT)


def _read_workload(n: Node, gpus: Mapping[GpuKey, GpuPlan]) -> tuple[WorkloadPlan, dict[str, Node]]:
    f = _dataclass(WorkloadPlan, n)
    name, workload = f["name"].str(), f["workload"].str()
    base = _REPLICA.sub("", name, count=1) if "#" in name else name
    if not names.WORKLOAD_NAME.fullmatch(base) or not names.WORKLOAD_NAME.fullmatch(workload):
        f["name"].fail(f"{name!r} is not a workload name")
    status = f["status"].str()
    if status not in WORKLOAD_STATUSES:
        f["status"].fail(f"unknown workload status {status!r}; expected {', '.join(WORKLOAD_STATUSES)}")
    host = _opt_str(f["host"])
    gpu = _opt_int(f["gpu"])
    instance = _opt_str(f["instance"])
    if status in ON_GPU:
        g = gpus.get((host or "", gpu if gpu is not None else -1))
        if g is None:
            f["host"].fail(f"placed on {host}/{gpu}, which is not a GPU of this plan")
        if instance is not None:
            inst = _instance(f["instance"])
            if g.target is None or inst not in g.target.instances:
                f["instance"].fail(f"{instance} is not in the target layout of {host}/{gpu}")
        elif g.target is not None:
            f["instance"].fail(f"a whole-GPU placement on {host}/{gpu}, whose target has MIG enabled")
    mib = names.MAX_MEMORY_MIB
    instance_mib = None if f["instance_mib"].is_null else f["instance_mib"].int(minimum=0, maximum=mib)
    margin = None if f["margin_mib"].is_null else f["margin_mib"].int(minimum=-mib, maximum=mib)
    w = WorkloadPlan(name=name, workload=workload, status=status, host=host, gpu=gpu, instance=instance,
                     memory_mib=f["memory_mib"].int(minimum=0), peak_mib=f["peak_mib"].int(minimum=0, maximum=mib),
                     instance_mib=instance_mib, margin_mib=margin, slices=f["slices"].int(minimum=0),
                     kept=f["kept"].bool(), moved=f["moved"].bool(), reason=_opt_str(f["reason"]))
    return w, f


def _check_margin(f: dict[str, Node], w: WorkloadPlan, gpus: Mapping[GpuKey, GpuPlan], catalog: Catalog) -> None:
    """instance_mib is the catalog's memory for where it is placed; margin_mib = instance_mib - peak_mib; a
    workload kept at risk is one that stays where it runs (kept, not moved), its peak within its instance."""
    if w.status == "at_risk" and (not w.kept or w.moved or w.reason is None):
        f["status"].fail("an at_risk workload is one kept where it runs (kept true, moved false) with its "
                         "reason", hint=_HINT)
    if w.status == "at_risk" and w.margin_mib is not None and w.margin_mib < 0:
        f["margin_mib"].fail("an at_risk workload's peak fits where it runs (margin at least 0); one whose peak "
                             "does not is left out (unplaced)", hint=_HINT)
    if not w.on_gpu:
        for key in ("instance_mib", "margin_mib"):
            if not f[key].is_null:
                f[key].fail(f"must be null for an {w.status} workload")
        return
    g = gpus[(w.host or "", w.gpu if w.gpu is not None else -1)]
    model = catalog.get(g.model)
    if w.instance is not None and not model.has_profile(Instance.parse(w.instance).profile):
        f["instance"].fail(f"{w.instance} is not a profile of {model.id}")
    want = instance_memory_mib(model, w.instance)
    if w.instance_mib != want:
        where = w.instance or "the whole GPU"
        f["instance_mib"].fail(f"must be {want} (the memory of {where} on {model.id}), got {w.instance_mib}",
                               hint=_HINT)
    if w.margin_mib != want - w.peak_mib:
        f["margin_mib"].fail(f"must be instance_mib - peak_mib = {want - w.peak_mib}, got {w.margin_mib}",
                             hint=_HINT)


_HOST_MODEL = re.compile(r"(?P<base>.+)@host-[0-9a-f]{8}")


def _read_host_models(node: Node, catalog: Catalog) -> tuple[GpuModel, ...]:
    """Models built from hosts' own tables. Each must be named `<catalog id>@host-<digest>` after a model
    of `catalog` with the same architecture: a plan file can never replace a catalog model. A GPU without MIG
    (`mig: false`, e.g. a T4 from Kubernetes labels) is carried whole and must not take a catalog model's name."""
    if node.is_null or not node.value("list"):
        return ()
    doc = yamldoc.parse(json.dumps({"version": CATALOG_VERSION, "models": node.value("list")}),
                        f"{node.source}: host_models")
    assert doc is not None
    models = tuple(parse_catalog(doc))
    for m in models:
        if not m.mig:  # a GPU without MIG (its whole memory, no geometry to trust): never a catalog model's id
            if catalog.find(m.id) is not None:
                node.fail(f"host model {m.id!r} (no MIG) has the name of a catalog model", hint=_HINT)
            continue
        found = _HOST_MODEL.fullmatch(m.id)
        base = catalog.find(found.group("base")) if found else None
        if base is None or base.id != found.group("base") or base.architecture != m.architecture:  # type: ignore[union-attr]  # found: else base is None
            node.fail(f"host model {m.id!r} is not '<catalog model>@host-<digest>' of a catalog model with its "
                      "architecture", hint=_HINT)
    return models


def _check_version_keys(root: Node, f: dict[str, Node], version: int, keys: set[str]) -> None:
    """Version 4 requires the migration keys, version 3 has none of them."""
    for key in sorted(keys):
        if (key in f) != (version >= 4):
            f.get(key, root).fail(
                f"{key!r} is {'not part of' if version < 4 else 'required in'} a version {version} plan", hint=_HINT)


def parse_plan(root: Node, catalog: Catalog) -> Plan:
    """A plan document read back strictly (see the module docstring); every error names the key and line."""
    if not root.is_map:
        root.fail("a plan is a mapping with 'version' and 'kind: migplan/plan' (written by 'migplan propose --out')")
    top = {"version", "kind", "fingerprint", "created_at", "source", "policy", "solve", "summary", "gpus",
           "workloads"}
    moves = {"migrations", "freed_gpus", "consolidation"}
    f = root.fields(top | moves | {"host_models", "eligibility", "sizing", "vgpu"}, top)
    version = f["version"].int()
    if version not in READ_VERSIONS:
        f["version"].fail(f"plan version {version} is not supported (this migplan reads versions "
                          f"{', '.join(map(str, READ_VERSIONS))})", hint=_HINT)
    _check_version_keys(root, f, version, moves)
    if f["kind"].str() != PLAN_KIND:
        f["kind"].fail(f"expected kind {PLAN_KIND!r}, got {f['kind'].str()!r}")
    fingerprint = f["fingerprint"].str()
    if not _SHA256.fullmatch(fingerprint):
        f["fingerprint"].fail("expected sha256:<64 hex digits>", hint=_HINT)
    policy_doc = f["policy"].value("map")
    try:
        policy_obj = policy_from_mapping(policy_doc, source=root.source)
    except InputError as err:
        f["policy"].fail(err.message.removeprefix(f"{root.source}: "), hint=_HINT)
    host_models = _read_host_models(f["host_models"], catalog) if "host_models" in f else ()
    if host_models:
        catalog = Catalog((*host_models, *catalog.models))
    memo = _Memo(catalog)
    gpus = _read_gpus(f["gpus"], catalog, memo)
    if FleetState(tuple(g.observed for g in gpus.values())).fingerprint() != fingerprint:
        # the plan's GPUs are every GPU of the state it was made from (each checked against its own fingerprint):
        # a GPU entry added, removed or moved to another plan is found here
        f["fingerprint"].fail("does not match the plan's GPUs: a GPU entry was added, removed or copied from "
                              "another plan", hint=_HINT)
    workloads = _read_workloads(f["workloads"], gpus, catalog, memo)
    eligibility = _read_eligibility(f["eligibility"], workloads) if "eligibility" in f else ()
    solve = _read_solve(f["solve"])
    summary, sf = _read_summary(f["summary"], version)
    _check_summary(sf, summary, policy_obj, workloads)
    migrations: tuple[Migration, ...] = ()
    freed: tuple[GpuKey, ...] = ()
    consolidation = None
    if version >= 4:
        migrations = _read_migrations(f["migrations"], gpus, workloads, catalog)
        before, after = in_use(list(gpus.values()), workloads, migrations)  # once: a pass over every GPU
        freed = _read_freed(f["freed_gpus"], freed_gpus(before, after))  # = plan_freed
        consolidation = _read_consolidation(f["consolidation"], policy_obj, summary, migrations, before, after,
                                            version)
    sizing = _read_sizing(f["sizing"], policy_obj) if "sizing" in f else None
    if ("vgpu" in f) != (version >= PLAN_VERSION_VGPU):
        f.get("vgpu", root).fail(f"a version {version} plan {'has no' if version < PLAN_VERSION_VGPU else 'needs a'} "
                                 "'vgpu' section", hint=_HINT)
    vgpu = parse_vgpu_plan(f["vgpu"], builtin_vgpu_catalog()) if "vgpu" in f else None
    return Plan(fingerprint=fingerprint, source=f["source"].str(), policy=policy_obj.to_dict(),
                solve=solve, summary=summary, gpus=tuple(gpus.values()),
                workloads=tuple(workloads), created_at=_opt_stamp(f["created_at"]), models=host_models,
                version=version, migrations=migrations, freed=freed, consolidation=consolidation,
                eligibility=eligibility, sizing=sizing, vgpu=vgpu)


def _read_sizing(n: Node, policy: Policy) -> SizingChoice:
    """The `sizing` block: its rule must parse and be the policy's memory rule; figures in range."""
    keys = {fl.name for fl in fields(SizingChoice)}
    f = n.fields(keys, {"mode", "rule", "recommended", "target_oom", "reason"})
    if f["mode"].str() != "auto":
        f["mode"].fail("expected 'auto'", hint=_HINT)
    text = f["rule"].str()
    try:
        rule = parse_rule(text, policy.headroom_min_mib, key="")
    except InputError as err:
        f["rule"].fail(err.message, hint=_HINT)
    mine = {k: getattr(policy, k) for k in rule.fields()}
    if rule.fields() != mine:
        own = rule_text(policy.memory_percentile, policy.headroom, policy.headroom_spread, policy.headroom_min_mib,
                        policy.headroom_max_mib)
        f["rule"].fail(f"{text!r} is not the plan's memory rule ({own})", hint=_HINT)

    def share(key: str, maximum: float = 1.0) -> float | None:
        if key not in f or f[key].is_null:
            return None
        return f[key].number(minimum=0.0, maximum=maximum)

    if not isinstance(f["recommended"].value(), bool):
        f["recommended"].fail("expected true or false", hint=_HINT)
    splits = f["splits"].int(minimum=1, maximum=50) if "splits" in f and not f["splits"].is_null else None
    return SizingChoice(
        rule=text, recommended=f["recommended"].bool(), target_oom=f["target_oom"].number(minimum=0.0, maximum=1.0),
        reason=_opt_text(f["reason"]) or "", calibrated_at=_opt_stamp(f["calibrated_at"]) if "calibrated_at" in f else
        None, source=_opt_text(f["source"]) if "source" in f else None, splits=splits,
        train_s=share("train_s", 1e9), test_s=share("test_s", 1e9), oom_rate_mean=share("oom_rate_mean"),
        oom_rate_worst=share("oom_rate_worst"), whole_gpu_ratio_mean=share("whole_gpu_ratio_mean", 1e6))


_PROFILE_NAME = re.compile(r"[0-9]{1,2}g\.[0-9]{1,4}gb(?:[+-][a-z0-9.,]{1,16})?")


def _read_rule(n: Node) -> Eligible:
    f = n.fields({"profile", "hosts", "why"}, {"profile", "hosts", "why"})
    profile = f["profile"].str()
    if profile not in (ANY_MIG, WHOLE_GPU) and not _PROFILE_NAME.fullmatch(profile):
        f["profile"].fail(f"{profile[:40]!r} is not a MIG profile, {WHOLE_GPU!r} or {ANY_MIG!r}", hint=_HINT)
    hosts = None
    if not f["hosts"].is_null:
        hosts = tuple(h.str() for h in f["hosts"].list())
        bad = next((h for h in hosts if not names.HOST_NAME.fullmatch(h)), None)
        if bad is not None:
            f["hosts"].fail(f"{bad[:60]!r} is not a host name", hint=_HINT)
        if len(set(hosts)) != len(hosts):
            f["hosts"].fail("a host is listed twice", hint=_HINT)
    return Eligible(profile, hosts, _opt_text(f["why"]) or "")


def _read_eligibility(node: Node, workloads: list[WorkloadPlan]) -> tuple[Eligibility, ...]:
    """The workloads with rules, each once, and every placed one where its rules let it be (as `validate`'s
    eligible check: the profile of its instance, or the whole GPU, on its host)."""
    by_name = {w.name: w for w in workloads}
    seen: set[str] = set()
    out = []
    for n in node.list():
        f = n.fields({"rules", "workloads"}, {"rules", "workloads"})
        rule_nodes = f["rules"].list()
        if not rule_nodes or len(rule_nodes) > _RULE_MAX:
            f["rules"].fail(f"expected 1 to {_RULE_MAX} rules", hint=_HINT)
        rules = tuple(_read_rule(r) for r in rule_nodes)
        if len({r.profile for r in rules}) != len(rules):
            f["rules"].fail("a profile has two rules", hint=_HINT)
        names_here = []
        for wn in f["workloads"].list():
            name = wn.str()
            w = by_name.get(name)
            if w is None:
                wn.fail(f"{name[:80]!r} is not a workload of this plan", hint=_HINT)
            if name in seen:
                wn.fail(f"{name} has rules twice", hint=_HINT)
            seen.add(name)
            names_here.append(name)
            if w.status == "placed" and w.host is not None:
                q = WHOLE_GPU if w.instance is None else Instance.parse(w.instance).profile.removesuffix("+me")
                if not may_use(rules, q, w.host):
                    wn.fail(f"{name} is placed on {w.instance or 'the whole GPU'} of {w.host}/{w.gpu}, which its "
                            "rules do not let it use", hint=_HINT)
        out.append(Eligibility(rules, tuple(names_here)))
    return tuple(out)


def _read_gpus(node: Node, catalog: Catalog, memo: _Memo) -> dict[GpuKey, GpuPlan]:
    gpus: dict[GpuKey, GpuPlan] = {}
    entries = _Entries(node)
    for i, raw in enumerate(entries.values):
        g = _gpu_fast(raw, memo) or _read_gpu(entries.node(i), catalog)
        if g.key in gpus:
            entries.node(i).fail(f"GPU {g.host}/{g.index} listed twice")
        gpus[g.key] = g
    return gpus


def _read_workloads(node: Node, gpus: Mapping[GpuKey, GpuPlan], catalog: Catalog, memo: _Memo) -> list[WorkloadPlan]:
    workloads: list[WorkloadPlan] = []
    seen: dict[str, int] = {}  # name -> its entry's index (its line is looked up only for the error)
    taken: dict[tuple[GpuKey, str], str] = {}
    entries = _Entries(node)
    for i, raw in enumerate(entries.values):
        wf: dict[str, Node] | None = None
        w = _workload_fast(raw, gpus)
        if w is None:
            w, wf = _read_workload(entries.node(i), gpus)
        if w.name in seen:
            entries.node(i).fail(f"workload {w.name!r} listed twice (first at line {entries.node(seen[w.name]).line})")
        seen[w.name] = i
        if w.on_gpu and w.instance is not None:
            spot = ((w.host or "", w.gpu or 0), w.instance)
            if spot in taken:
                entries.node(i).fail(f"{w.name} and {taken[spot]} are both placed on {w.instance} of {w.host}/{w.gpu}")
            taken[spot] = w.name
        if not _margin_ok(w, gpus, memo):
            _check_margin(wf or _read_workload(entries.node(i), gpus)[1], w, gpus, catalog)
        workloads.append(w)
    return workloads


_ENDPOINT_KEYS = {"host", "gpu", "instance"}
_MIGRATION_KEYS = {"step", "workload", "priority", "source", "target", "make_before_break", "stop_first", "stops",
                   "reason"}


def _read_endpoint(n: Node, gpus: Mapping[GpuKey, GpuPlan]) -> Endpoint:
    f = n.fields(_ENDPOINT_KEYS, _ENDPOINT_KEYS)
    host, idx = f["host"].str(), f["gpu"].int(minimum=0, maximum=names.MAX_GPU_INDEX)
    if (host, idx) not in gpus:
        f["host"].fail(f"{host}/{idx} is not a GPU of this plan")
    instance = None if f["instance"].is_null else str(_instance(f["instance"]))
    return Endpoint(host, idx, instance)


def _read_migrations(node: Node, gpus: Mapping[GpuKey, GpuPlan], workloads: list[WorkloadPlan],
                     catalog: Catalog) -> tuple[Migration, ...]:
    """Each moving workload's step, checked against the workloads and GPUs, and the whole order re-derived
    (`migration.order`): a file whose order differs from the one computed from its own moves is refused."""
    by_name = {w.name: w for w in workloads}
    listed: list[Migration] = []
    moves: list[Move] = []
    for n in node.list():
        f = n.fields(_MIGRATION_KEYS, _MIGRATION_KEYS)
        name = f["workload"].str()
        w = by_name.get(name)
        if w is None:
            f["workload"].fail(f"{name!r} is not a workload of this plan")
        if w.kept or (w.on_gpu and not w.moved):
            f["workload"].fail(f"{name} is not moved by this plan (kept, or placed new), yet has a migration step",
                               hint=_HINT)
        source = _read_endpoint(f["source"], gpus)
        g = gpus[source.key]
        if source.instance is None and g.current is not None:
            f["source"].fail(f"a whole-GPU source on {source.host}/{source.gpu}, which has MIG enabled")
        if source.instance is not None and (g.current is None or Instance.parse(source.instance)
                                            not in g.current.instances):
            f["source"].fail(f"{source.instance} is not in the current layout of {source.host}/{source.gpu}")
        target = None if f["target"].is_null else _read_endpoint(f["target"], gpus)
        placed = (Endpoint(w.host or "", w.gpu if w.gpu is not None else -1, w.instance)
                  if w.on_gpu else None)
        if target != placed:
            f["target"].fail(f"must be where the plan places {name} ({placed or 'nowhere: it is left out'})",
                             hint=_HINT)
        stops = tuple(s.str() for s in f["stops"].list())
        reason = _opt_text(f["reason"]) or ""
        priority = f["priority"].int(minimum=0, maximum=MAX_PRIORITY)
        listed.append(Migration(step=f["step"].int(minimum=1), workload=name, source=source, target=target,
                                make_before_break=f["make_before_break"].bool(), stop_first=f["stop_first"].bool(),
                                reason=reason, stops=stops, priority=priority))
        moves.append(Move(name, priority, source, target, reason))
    names_listed = [m.workload for m in listed]
    if len(set(names_listed)) != len(names_listed):
        node.fail("a workload has more than one migration step", hint=_HINT)
    missing = [w.name for w in workloads if w.moved and w.name not in set(names_listed)]
    if missing:
        node.fail(f"moved workload(s) without a migration step: {', '.join(missing[:5])}", hint=_HINT)
    try:
        # order looks only at the GPUs the moves leave or reach: their layouts, not a catalog look-up per GPU
        touched = {m.source.key for m in moves} | {m.target.key for m in moves if m.target is not None}
        derived = order(layouts([g for k, g in gpus.items() if k in touched], catalog), moves)
    except (ValueError, CatalogError, InputError) as err:
        node.fail(f"the moves cannot be ordered: {err}", hint=_HINT)
    if tuple(listed) != derived:
        bad = next((i for i, (a, b) in enumerate(zip(listed, derived, strict=False)) if a != b),
                   min(len(listed), len(derived)))
        node.fail(f"the migration steps are not the executable order computed from these moves (first "
                  f"difference at step {bad + 1})", hint=_HINT)
    return derived


def _read_freed(node: Node, want: tuple[GpuKey, ...]) -> tuple[GpuKey, ...]:
    got = []
    for n in node.list():
        f = n.fields({"host", "index"}, {"host", "index"})
        got.append((f["host"].str(), f["index"].int(minimum=0, maximum=names.MAX_GPU_INDEX)))
    if tuple(got) != want:
        node.fail(f"lists {len(got)} freed GPU(s); the plan frees {len(want)}: "
                  + (", ".join(f"{h}/{i}" for h, i in want[:6]) or "none"), hint=_HINT)
    return want


_CURVE_MAX = 64


def _read_consolidation(node: Node, policy: Policy, summary: Summary, migrations: tuple[Migration, ...],
                        before: set[GpuKey], after: set[GpuKey], version: int) -> Consolidation | None:
    """The consolidation record: its counts are derived and checked; the curve (other solves) is range-checked."""
    if node.is_null:
        if policy.consolidate:
            node.fail("a plan made with consolidate needs its consolidation record", hint=_HINT)
        return None
    if not policy.consolidate:
        node.fail("must be null: the policy does not consolidate", hint=_HINT)
    keys = {fl.name for fl in fields(Consolidation)}
    f = node.fields(keys, keys - {"gpus_newly_used"} if version < 5 else keys)
    big = names.MAX_GPU_INDEX * 1_000_000

    def opt(n: Node) -> int | None:
        return None if n.is_null else n.int(minimum=0, maximum=big)
    points = []
    for p in f["curve"].list()[:_CURVE_MAX + 1]:
        pf = _dataclass(CurvePoint, p)
        points.append(CurvePoint(opt(pf["max_moves"]), pf["moves"].int(minimum=0, maximum=big),
                                 pf["gpus_used"].int(minimum=0, maximum=big), pf["gpus_freed"].int(minimum=-big,
                                                                                                   maximum=big)))
    if len(points) > _CURVE_MAX:
        f["curve"].fail(f"more than {_CURVE_MAX} points")
    c = Consolidation(max_moves=opt(f["max_moves"]), moves=f["moves"].int(minimum=0, maximum=big),
                      gpus_in_use=f["gpus_in_use"].int(minimum=0, maximum=big),
                      gpus_used=f["gpus_used"].int(minimum=0, maximum=big),
                      gpus_freed=f["gpus_freed"].int(minimum=-big, maximum=big),
                      # negative, like gpus_freed, when demand needs more GPUs than are in use now
                      gpus_freeable=None if f["gpus_freeable"].is_null else f["gpus_freeable"].int(
                          minimum=-big, maximum=big),
                      curve=tuple(points),
                      gpus_newly_used=f["gpus_newly_used"].int(minimum=0, maximum=big) if "gpus_newly_used" in f else 0)
    # version 5: freed is the GPUs left empty (the plan's freed list), newly used apart; before: the net figure
    freed = len(before - after) if version >= 5 else len(before) - summary.gpus_used
    derived = {"max_moves": policy.max_moves, "moves": len(migrations), "gpus_in_use": len(before),
               "gpus_used": summary.gpus_used, "gpus_freed": freed,
               "gpus_newly_used": len(after - before) if version >= 5 else 0}
    for k, v in derived.items():
        if getattr(c, k) != v:
            f[k].fail(f"must be {v} (derived from the policy, the migrations and the GPUs), got {getattr(c, k)}",
                      hint=_HINT)
    return c


def plan_from_dict(doc: Any, catalog: Catalog, source: str = "plan") -> Plan:
    """`parse_plan` over an already-decoded document (JSON is YAML, so one reader serves both)."""
    node = yamldoc.parse(json.dumps(doc), source)
    if node is None:
        raise InputError("empty plan document", source=source, hint=_HINT)
    return parse_plan(node, catalog)
