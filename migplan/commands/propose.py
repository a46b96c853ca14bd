"""Propose: merge the planner settings, pick the observed state, plan, and write the plan document.

Precedence for every setting: the caller's value (a command-line flag) > the config file's
`planner:` section > the default.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from migplan import documents
from migplan.catalog import Catalog
from migplan.commands import Report, quiet
from migplan.commands.context import LIVE, Context
from migplan.commands.vms import without_vms
from migplan.config import check_planner_overrides
from migplan.errors import InputError
from migplan.inventory import Inventory
from migplan.model.state import FleetState, state_from_inventory
from migplan.planner import Plan, Policy, plan
from migplan.planner.demand import policy_from_mapping
from migplan.planner.plan import PLAN_VERSION_VGPU, SizingChoice
from migplan.planner.sizing import is_auto, parse_rule
from migplan.planner.vm_demand import split_vms
from migplan.profiles import ProfileSet, Workload

if TYPE_CHECKING:
    from collections.abc import Callable

    from migplan.adapters.cbc_progress import SolveProgress
    from migplan.adapters.solver import PulpSolver
    from migplan.commands.vgpu_plan import Split
    from migplan.fleet.snapshot import Snapshot

DEFAULT_SOLVER = "cbc"
DEFAULT_TIME_LIMIT_S = 60.0
DEFAULT_GAP = 0.0001
# Absolute early stop, in GPUs' weight: stop once the plan is within one GPU's weight minus 1% of the
# bound, so it can use no GPU too many. Not applied when the user asks for gap 0 (a proven optimum).
DEFAULT_GAP_ABS_GPUS = 0.99
# Consolidating, a plan within one GPU's weight could free one GPU fewer for a single move saved (under a
# move budget that binds): stop only within just under half a GPU's weight, so a GPU is given up only for
# moves worth more than half a GPU (measured in bench/consolidate.py).
CONSOLIDATE_GAP_ABS_GPUS = 0.49

# The phases of a plan, as `Progress.phase` is told them (SOLVING and CHECKING by the planner itself)
READING = "reading inventory and profiles"
BUILDING = "building the model"
WRITING = "writing"


class Progress(Protocol):
    """What a caller shows while a plan is made (the CLI's is `migplan.cli.progress.Reporter`)."""

    def phase(self, name: str) -> None:
        """A phase begins (READING ... WRITING; SOLVING and CHECKING come again for each re-solve)."""

    def detail(self, message: str) -> None:
        """One of the planner's own lines: each model's size, each solve's outcome."""

    def solving(self, figures: SolveProgress) -> None:
        """The solver's incumbent and bound while it searches (CBC only: HiGHS solves in-process)."""


@dataclass(frozen=True)
class ProposeRequest:
    """What `propose` was asked for; None means "not given here" (the config file or the default decides)."""

    inventory: str | None = None
    profiles: str | None = None
    snapshot: str | None = None
    out: str | None = None
    solver: str | None = None
    time_limit: float | None = None
    gap: float | None = None
    policy: Mapping[str, Any] = field(default_factory=dict)  # Policy field -> value (None: not given)
    pods: str | None = None  # `kubectl get pods -A -o json` (a file, or `-`): their demand (commands/pods.py)
    sizing: str | None = None  # `--sizing RULE` (planner/sizing.py): the whole memory rule, over the config's
    sizing_choice: SizingChoice | None = None  # what `sizing: auto` chose (commands/sizing.py), recorded in the plan


# The Policy fields a sizing rule sets (planner/sizing.py): `--sizing` and `sizing:` state them all at once
MEMORY_KEYS = ("memory_percentile", "headroom", "headroom_min_mib", "headroom_spread", "headroom_max_mib")


def planner_policy(ctx: Context, overrides: Mapping[str, Any], sizing: str | None = None) -> Policy:
    """The planner policy: the config's `planner:` section, its `sizing:` rule (or `sizing`, the command's
    `--sizing RULE`, which replaces every memory setting), then the command's other flags."""
    base = policy_from_mapping(dict(ctx.config.planner), source=ctx.config.source or "config")
    given = {k: v for k, v in overrides.items() if v is not None}
    if sizing is not None:
        clash = [k for k in MEMORY_KEYS if k in given]
        if clash:
            raise InputError(f"--sizing states the whole memory rule: leave out --{clash[0].replace('_', '-')}",
                             key="--sizing", hint="e.g. --sizing max+10%+1024MiB instead of --headroom-min-mib 1024")
        base = parse_rule(sizing, base.headroom_min_mib, key="--sizing").policy(base)
    else:
        base = _configured_rule(ctx, base)
    return dataclasses.replace(base, **given)


def _configured_rule(ctx: Context, base: Policy) -> Policy:
    """The config file's `sizing: RULE` applied to `base` (`sizing: auto` is resolved by commands/sizing.py)."""
    rule = ctx.config.sizing.get("rule")
    if not isinstance(rule, str) or is_auto(rule):
        return base
    clash = [k for k in MEMORY_KEYS if k in ctx.config.planner]
    if clash:
        raise InputError(f"sizing: {rule} and planner.{clash[0]} both state the memory rule: keep one",
                         source=ctx.config.source, key="sizing",
                         hint="sizing: RULE states it all (docs/profiles.md, 'Sizing rules')")
    return parse_rule(rule, base.headroom_min_mib, key="sizing").policy(base)


def planner_solver(ctx: Context, req: ProposeRequest, policy: Policy,
                   watch: Callable[[SolveProgress], None] | None = None) -> PulpSolver:
    """The solver the settings ask for; `watch`: called with a CBC search's figures while it runs."""
    from migplan.adapters.solver import PulpSolver  # pulp (and CBC) only when a plan is made

    cfg = ctx.config.planner
    name = req.solver or str(cfg.get("solver", DEFAULT_SOLVER))
    time_limit = req.time_limit if req.time_limit is not None else float(cfg.get("time_limit", DEFAULT_TIME_LIMIT_S))  # type: ignore[arg-type]  # checked as a number when read
    gap = req.gap if req.gap is not None else float(cfg.get("gap", DEFAULT_GAP))  # type: ignore[arg-type]  # checked as a number when read
    # gap 0 means proven optimal: no absolute early stop either (the plan's status then says "optimal"
    # only when the solver closed the gap; a gap stop reports "feasible" with its distance to the bound)
    share = CONSOLIDATE_GAP_ABS_GPUS if policy.consolidate else DEFAULT_GAP_ABS_GPUS
    gap_abs = None if gap == 0 else share * policy.weights.gpu
    return PulpSolver(name=name, time_limit=time_limit, gap=gap, gap_abs=gap_abs or None, progress=watch)


def planner_state(ctx: Context, inventory: str | None, snapshot: str | None, report: Report = quiet) -> FleetState:
    """The state to plan from: a discovery snapshot when one is given, else the inventory's declared layouts."""
    return _planner_state(ctx, inventory, snapshot, report)[0]


def _planner_state(ctx: Context, inventory: str | None, snapshot: str | None,
                   report: Report) -> tuple[FleetState, Inventory | None]:
    """`planner_state`, and the inventory it was read from (None: a snapshot)."""
    state, inv, _ = _read_state(ctx, inventory, snapshot, report)
    return state, inv


def _read_state(ctx: Context, inventory: str | None, snapshot: str | None,
                report: Report) -> tuple[FleetState, Inventory | None, Snapshot | None]:
    """The fleet state, and the inventory or the snapshot it was read from."""
    chosen = snapshot or ctx.config.snapshot
    if chosen:
        snap = documents.load_snapshot(chosen, ctx.catalog)
        return snap.fleet_state(source=f"snapshot:{os.fspath(chosen)}", catalog=ctx.catalog), None, snap
    inv = ctx.inventory(inventory)
    unknown = [h.name for h in inv.hosts if not h.gpus and not (h.vgpu is not None and h.vgpu.count)]
    if unknown:
        report(f"warning: {len(unknown)} host(s) declare no GPUs ('discover: true') and are left out of this plan: "
               f"{', '.join(unknown[:10])}{' ...' if len(unknown) > 10 else ''}; run 'migplan discover --out "
               "SNAPSHOT' and plan with '--snapshot SNAPSHOT'")
    for note in inv.notes:  # what the source left as it is (Kubernetes: nodes its MIG strategy keeps as they are)
        report(f"note: {note}")
    return state_from_inventory(inv, ctx.catalog), inv, None


def _hypervisors(ctx: Context, req: ProposeRequest, state: FleetState, inventory: Inventory | None,
                 snap: Snapshot | None, report: Report) -> Split | None:
    """The hypervisor hosts (an inventory `vgpu` setting, GPUs in vGPU mode in the snapshot) apart from the MIG
    fleet, or None without any: commands/vgpu_plan.py is imported only then (start-up time at 7,000 GPUs). With a
    snapshot, the inventory (when one is named) gives their modes."""
    in_inventory = inventory is not None and any(h.vgpu is not None for h in inventory.hosts)
    in_snapshot = snap is not None and any(g.vgpu is not None for h in snap.hosts for g in h.gpus)
    if not (in_inventory or in_snapshot):
        return None
    from migplan.commands import vgpu_plan

    settings = inventory
    if in_snapshot and (req.inventory or ctx.config.inventory):
        settings = ctx.inventory(req.inventory)  # the hypervisor hosts' `vgpu` settings: the modes they may use
    return vgpu_plan.split(state, settings, snap, report)


def _inputs(ctx: Context, req: ProposeRequest) -> list[str]:
    """Files this run reads: `--out` must never be one of them."""
    out = [p for p in (req.snapshot or ctx.config.snapshot, req.inventory or ctx.config.inventory) if p and p != LIVE]
    if req.profiles or ctx.config.profiles:
        out.append(str(req.profiles or ctx.config.profiles))
    if req.pods and req.pods not in ("-", LIVE):
        out.append(req.pods)
    if ctx.mig_configmap and ctx.mig_configmap != LIVE and not ctx.mig_configmap.startswith(LIVE + ":"):
        out.append(ctx.mig_configmap)
    return out


def _planner_lines(report: Report, progress: Progress | None) -> Report:
    """Where the planner's lines go: to `progress` as details when there is one (else to `report`, as before
    there was progress). The planner tells its phases through its own hook (`plan(phase=...)`)."""
    return report if progress is None else progress.detail


def propose(ctx: Context, req: ProposeRequest, *, report: Report = quiet, progress: Progress | None = None,
            now: dt.datetime | None = None) -> Plan:
    """Plan every GPU of the chosen state for the workload profiles; write the plan when `req.out` is set.
    `report`: notes and warnings; `progress`: phases, the planner's lines and the solver's figures."""
    if progress is not None:
        progress.phase(READING)
    # large profile sets are read by worker processes, started first, while this one checks the settings
    # and reads the inventory (errors still come in the sequential order: the profiles' last)
    with ctx.start_profiles(req.profiles) as pending:
        check_planner_overrides({**req.policy, "solver": req.solver, "time_limit": req.time_limit, "gap": req.gap})
        policy = planner_policy(ctx, req.policy, req.sizing)
        solver = planner_solver(ctx, req, policy, watch=progress.solving if progress is not None else None)
        if req.pods == "-":  # commands/pods.py only with --pods (start-up time)
            from migplan.commands.pods import check_stdin

            check_stdin(req.pods, req.inventory)
        state, inventory, snap = _read_state(ctx, req.inventory, req.snapshot, report)
        hyper = _hypervisors(ctx, req, state, inventory, snap, report)  # vGPUs for VMs (issue 26)
        if hyper is not None:
            state = hyper.mig_state
        # GPUs whose own profile table differs from the catalog are planned with models built from it
        catalog = Catalog(ctx.catalog.models + state.models) if state.models else ctx.catalog
        for m in state.models:
            report(f"note: planning with the host's own profile table for {m.id} ({m.source})" if m.mig else
                   f"note: {m.id} has no MIG: planned as whole GPUs only ({m.memory_mib} MiB; {m.source})")
        # made while the workers may still read: the fleet's (from each GPU's canonical text) for the plan,
        # each GPU's (a hash of that same text) for the plan document
        state.fingerprint()
        for g in state.gpus:
            g.fingerprint()
        # with --pods, measured profiles are optional: the pods' requests are demand on their own
        measured = req.profiles or ctx.config.profiles or not req.pods
        profiles = ctx.profiles_result(pending) if measured else ProfileSet(())
        if req.pods:
            from migplan.commands.pods import demand_from_pods

            profiles = demand_from_pods(req.pods, state, catalog, profiles, inventory, report, ctx.kubectl)
        vms: tuple[Workload, ...] = ()
        if hyper is not None and hyper.vgpu_gpus:
            profiles, vms = split_vms(profiles)
        else:  # no hypervisor host: VMs are listed as not planned (commands/vms.py)
            profiles, _ = without_vms(profiles, policy, catalog, report)
    if progress is not None:
        progress.phase(BUILDING)
    result = plan(state, profiles, catalog, policy, solver, progress=_planner_lines(report, progress),
                  phase=progress.phase if progress is not None else None)
    if hyper is not None and hyper.vgpu_gpus:
        from migplan.commands.vgpu_plan import plan_vms

        vplan = plan_vms(hyper, vms, policy, solver, catalog, report)
        result = dataclasses.replace(result, vgpu=vplan, version=PLAN_VERSION_VGPU)
    stamp = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = dataclasses.replace(result, created_at=stamp, sizing=req.sizing_choice)
    if req.out:
        if progress is not None:
            progress.phase(WRITING)
        documents.write_plan(req.out, result, forbid=_inputs(ctx, req))
        report(f"plan written to {req.out}")
    return result
