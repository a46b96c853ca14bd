"""Right-sizing: from a workload's measured history to the MIG profiles that can hold it (pure).

Memory is a hard limit (an out-of-memory error on a MIG instance kills the workload):

    need_mib = max(ceil(m_q * (1 + headroom) + k x spread), m_q + headroom_min_mib)      m_q = memory statistic q
               (at most m_q + headroom_max_mib; spread = max - p50; k 0 and no cap unless a rule sets them:
               planner/sizing.py, the one grammar of sizing rules)

q defaults to `max`, the observed peak: by definition 1% of the samples lie above p99, and a workload
sized from p99 had already used more than its instance in the history it was sized from. p50/p95/p99
stay selectable; the plan then counts the workloads whose instance is below their peak
(`Summary.below_peak`) and says so (`memory_warning`). `headroom_rule` states the rule in words: with
`headroom: 0` the `headroom_min_mib` floor (512 MiB by default) still applies.

Compute is a floor, measured as a share of the GPU the workload ran on and converted to compute slices
of the target model by streaming-multiprocessor (SM) counts from the catalog:

    need_sm = c_q * SM(measured model)        slices(target) = max(1, ceil(need_sm / SM(1 slice of target)))

A profile P of a model fits when  mem(P) >= need_mib,  g(P) >= slices(target)  and P is at least the
user's `min_profile` (compute slices and memory).
"""

from __future__ import annotations

import bisect
import functools
import math
import re
from dataclasses import asdict, dataclass, field

from migplan.catalog.geometry import GiProfile, GpuModel
from migplan.errors import InputError
from migplan.names import profile_size
from migplan.planner.sizing import MAX_MIB, MAX_SPREAD, MEMORY_PERCENTILES, headroom_words, need_mib
from migplan.profiles import WHOLE_GPU, Workload

COMPUTE_PERCENTILES = ("p50", "p95", "p99", "max")


@dataclass(frozen=True)
class Weights:
    """Objective weights (minimised): each tier's unit cost. Defaults make each tier dominate the next
    for any realistic trade (docs/model.md, "Objective")."""

    unplaced: float = 10000.0  # per priority-weighted demanded slice left out
    disrupt: float = 1000.0  # per running workload moved or busy instance destroyed
    gpu: float = 100.0  # per GPU hosting at least one instance
    change: float = 5.0  # per GPU whose layout changes
    fragment: float = 1.0  # per instance in a used GPU's layout pattern
    waste: float = 0.5  # per allocated but not demanded slice (compute + memory)
    # per GPU whose MIG mode changes, and again when that change needs a GPU reset (Ampere; docs/model.md §7): 2 + 2,
    # on top of `change`, so a GPU whose mode changes costs more than one whose instances merely change; above an
    # instance (`fragment`) and below a GPU and the least a running workload's move costs (consolidating,
    # MOVE_SHARE_OF_GPU x gpu = 5): of equally good GPUs, one whose mode stays, then one that needs no reset
    mode: float = 2.0
    reset: float = 2.0
    # per running workload kept at risk where it runs (its peak fits there, peak + headroom does not) when it
    # may move: above one move (disrupt) plus a GPU, so it moves when a place that fits it exists; below two
    # moves, so nothing else is moved to make room for it; far below leaving it out (`unplaced`), so a stop is
    # the last resort. Consolidating, moves cost less still: it moves wherever a place exists.
    risk: float = 1500.0
    # per idle instance (nothing runs there) the plan destroys, unless `reclaim_idle`: as much as a layout change
    # (`change`) and above an instance (`fragment`), so reshaping a GPU only to drop idle instances never pays;
    # 20 of them cost one GPU (`gpu`), so emptying a GPU of idle instances (7 at most) to free it pays, and so
    # does a repacking that frees a GPU by removing up to 19; far below placing demand (`unplaced`). At 10 the
    # policy cost one GPU of 65 on bench/idle_instances.py's 320-GPU fleet (it kept 14 idle instances instead)
    idle: float = 5.0


# Consolidating, a move of a running workload costs this share of a GPU's weight (5 of 100 by default),
# x (1 + its priority / the top priority), and never more than a disruption: a freed GPU is worth 10-20 moves.
MOVE_SHARE_OF_GPU = 0.05


@dataclass(frozen=True)
class Policy:
    """Every knob of a plan; recorded in the plan document."""

    memory_percentile: str = "max"  # the observed peak; a percentile below it is a chosen risk of OOM
    compute_percentile: str = "p95"
    headroom: float = 0.10
    headroom_min_mib: int = 512
    allow_disrupt: bool = False
    keep_free: int = 0
    anti_affinity_scope: str = "gpu"  # gpu | host
    weights: Weights = field(default_factory=Weights)
    consolidate: bool = False  # move running workloads to free GPUs (a move costs MOVE_SHARE_OF_GPU, not disrupt)
    max_moves: int | None = None  # consolidation: at most this many running workloads change instance
    # spare capacity (docs/model.md "Idle instances and spare capacity"): idle instances stay unless removing
    # them frees a whole GPU or makes room for demand (Weights.idle); `reclaim_idle` lets them go whenever the
    # objective gains anything (the behaviour before plan version 5); `spare` keeps at least N free instances
    # of a profile in the targets, per PROFILE (every model with it) or MODEL/PROFILE: ((key, N), ...), sorted
    reclaim_idle: bool = False
    spare: tuple[tuple[str, int], ...] = ()
    # the sizing rule's other parts (planner/sizing.py): headroom K x spread (max - p50), and the most headroom in
    # MiB (None: no cap). Written in a plan's policy only when set, so a plan without them reads as before
    headroom_spread: float = 0.0
    headroom_max_mib: int | None = None

    @property
    def movable_running(self) -> bool:
        """Running (profiled) workloads may change instance: --allow-disrupt or --consolidate."""
        return self.allow_disrupt or self.consolidate

    def __post_init__(self) -> None:
        object.__setattr__(self, "spare", _spare_entries(self.spare))
        if self.memory_percentile not in MEMORY_PERCENTILES:
            raise InputError(f"memory percentile {self.memory_percentile!r} is not one of {MEMORY_PERCENTILES}")
        if self.compute_percentile not in COMPUTE_PERCENTILES:
            raise InputError(f"compute percentile {self.compute_percentile!r} is not one of {COMPUTE_PERCENTILES}")
        if not 0 <= self.headroom <= 10:
            raise InputError(f"headroom {self.headroom} must be a fraction between 0 and 10 (0.1 = 10%)")
        if self.headroom_min_mib < 0 or self.keep_free < 0:
            raise InputError("headroom_min_mib and keep_free must not be negative")
        spread = self.headroom_spread
        if isinstance(spread, bool) or not isinstance(spread, (int, float)) or not 0 <= spread <= MAX_SPREAD:
            raise InputError(f"headroom_spread {spread!r} must be a number from 0 to {MAX_SPREAD:g} (a multiple of "
                             "max - p50)")
        cap = self.headroom_max_mib
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or not
                                self.headroom_min_mib <= cap <= MAX_MIB):
            raise InputError(f"headroom_max_mib {cap!r} must be a whole number of MiB from headroom_min_mib "
                             f"({self.headroom_min_mib}) to {MAX_MIB}")
        if self.max_moves is not None and (isinstance(self.max_moves, bool) or not isinstance(self.max_moves, int)
                                           or self.max_moves < 0):
            raise InputError(f"max_moves {self.max_moves!r} must be a whole number, at least 0")
        if self.max_moves is not None and not self.consolidate:
            raise InputError("max_moves limits consolidation moves: it needs consolidate (--consolidate)")
        if self.anti_affinity_scope not in ("gpu", "host"):
            raise InputError(f"anti-affinity scope {self.anti_affinity_scope!r} must be 'gpu' or 'host'")

    def to_dict(self) -> dict[str, object]:
        d = asdict(self)
        d["spare"] = dict(self.spare)
        if not self.headroom_spread:
            del d["headroom_spread"]
        if self.headroom_max_mib is None:
            del d["headroom_max_mib"]
        return d


SPARE_KEY = re.compile(r"(?:(?P<model>[A-Za-z0-9][A-Za-z0-9_.+-]{0,63})/)?"  # MODEL/, optional
                       r"(?P<profile>[0-9]{1,2}g\.[0-9]{1,4}gb(?:\+[a-z.0-9]{1,16})?)")  # 1g.10gb, 1g.10gb+me
MAX_SPARE = 1_000_000


def _spare_entries(value: object) -> tuple[tuple[str, int], ...]:
    """`spare` as sorted (key, count) pairs from a mapping or pairs; InputError naming the bad entry."""
    items = value.items() if isinstance(value, dict) else value
    try:
        pairs = [(k, n) for k, n in items]  # type: ignore[attr-defined]  # a mapping's items or pairs, checked below
    except (TypeError, ValueError):
        raise InputError(f"spare must map PROFILE or MODEL/PROFILE to a count, got {value!r}",
                         key="planner.spare", hint="e.g. spare: {1g.10gb: 4, A100-SXM4-80GB/3g.40gb: 1}") from None
    out = {}
    for k, n in pairs:
        if not isinstance(k, str) or not SPARE_KEY.fullmatch(k):
            raise InputError(f"spare: {k!r} is not a profile (1g.10gb) or MODEL/PROFILE (A100-SXM4-80GB/1g.10gb)",
                             key="planner.spare")
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SPARE:
            raise InputError(f"spare: {k}: expected a whole number 1..{MAX_SPARE}, got {n!r}", key=f"planner.spare.{k}")
        out[k] = n
    return tuple(sorted(out.items()))


def spare_rule(policy: Policy) -> str:
    """The idle-instance policy in words, as the table shows it."""
    base = ("reclaim_idle: idle instances go wherever the plan gains" if policy.reclaim_idle
            else "idle instances kept unless removing them frees a GPU or makes room for demand")
    return base + ("; spare " + ", ".join(f"{k}: {n}" for k, n in policy.spare) if policy.spare else "")


def headroom_rule(policy: Policy) -> str:
    """The memory headroom rule in words, as the plan and the table show it: "+10%, at least 512 MiB"
    (planner/sizing.py: "+1 x spread (max - p50), at least 512 MiB, at most 8192 MiB" with a spread and a cap).

    Both parts always apply together (need = the larger of the two), so "+0%, at least 512 MiB" is what
    `--headroom 0` means while `--headroom-min-mib` keeps its default."""
    return headroom_words(policy.headroom, policy.headroom_spread, policy.headroom_min_mib, policy.headroom_max_mib)


def memory_warning(policy: Policy, below_peak: int) -> str | None:
    """The plain warning a plan carries when memory is sized from a percentile below the observed peak."""
    if policy.memory_percentile == "max":
        return None
    who = ("1 workload would have exceeded its" if below_peak == 1
           else f"{below_peak} workloads would have exceeded their")
    return (f"sized below the observed peak: {who} instance in the history "
            f"(memory sized from {policy.memory_percentile}, not max)")


@dataclass(frozen=True)
class Demand:
    """What one workload needs: memory in MiB (hard) and compute as SMs (floor); `peak_mib` is the
    observed memory peak it was measured at (the plan reports each instance's margin above it)."""

    memory_mib: int
    compute_sm: float
    peak_mib: int = 0


def demand_of(workload: Workload, policy: Policy, measured: GpuModel | None, fallback: GpuModel) -> Demand:
    """need_mib and need_sm as in the module docstring; `fallback` is used when the measured model is unknown."""
    m_q = workload.memory.percentile(policy.memory_percentile)
    # planner/sizing.py: max(ceil(m_q x (1 + headroom) + k x spread), m_q + floor), at most m_q + cap
    need = need_mib(m_q, workload.memory.max - workload.memory.p50, policy.headroom, policy.headroom_spread,
                    policy.headroom_min_mib, policy.headroom_max_mib)
    if workload.requested is not None:  # an unmeasured pod: its memory is the instance it asked for, not a peak
        need = m_q
    try:
        share = workload.compute.percentile(policy.compute_percentile)
    except InputError as err:
        src, _, line = workload.source.rpartition(":")
        raise InputError(f"--compute-percentile {policy.compute_percentile}: the profile records no "
                         f"compute.{policy.compute_percentile} (it is not replaced by another statistic)",
                         source=src or None, line=int(line) if line.isascii() and line.isdigit() else None,
                         key=f"workload {workload.name!r}: compute", hint=err.hint) from err
    base = measured if measured is not None else fallback
    return Demand(memory_mib=need, compute_sm=share * base.sm_total, peak_mib=workload.memory.max)


@functools.lru_cache(maxsize=256)  # per model (immutable, its hash cached): asked per workload and model
def sm_per_slice(model: GpuModel) -> int:
    """SMs of the smallest one-slice profile (16 on H100 although 132/7 is 18.9): a conservative slice."""
    ones = [p.sm_count for p in model.plain_profiles if p.compute_slices == 1 and p.sm_count > 0]
    return min(ones) if ones else max(1, model.sm_total // model.compute_slices)


def slices_needed(demand: Demand, model: GpuModel) -> int:
    """slices(target) = max(1, ceil(need_sm / SM per slice)); a GPU without MIG is one slice, the whole GPU
    (whether its SMs hold the demand is `whole_fits`'s to say)."""
    if not model.mig:
        return 1
    return max(1, math.ceil(demand.compute_sm / sm_per_slice(model) - 1e-9))


def _at_least(model: GpuModel, prof: GiProfile, min_profile: str | None) -> bool:
    if min_profile is None:
        return True
    if model.has_profile(min_profile):
        floor = model.profile(min_profile)
        return prof.compute_slices >= floor.compute_slices and prof.memory_slices >= floor.memory_slices
    size = profile_size(min_profile)
    if size is None:
        return True
    g, gb = size
    return prof.compute_slices >= g and prof.memory_mib >= gb * 1000 * 0.9


@functools.lru_cache(maxsize=256)
def _smallest_first(model: GpuModel) -> tuple[GiProfile, ...]:
    """The model's plain profiles by (memory slices, compute slices, name): filtering keeps this order."""
    return tuple(sorted(model.plain_profiles, key=lambda p: (p.memory_slices, p.compute_slices, p.name)))


def fitting_profiles(demand: Demand, model: GpuModel, min_profile: str | None = None, *,
                     slices: int | None = None) -> tuple[str, ...]:
    """Plain profiles of `model` that hold the demand, smallest first (memory slices, then compute), then
    WHOLE_GPU (MIG disabled, the workload alone on the GPU) where it is offered: for `min_profile: whole`
    only that; otherwise when the demand needs the full profile anyway (a lone 7g instance), because the
    GPU with MIG off gives the same workload more SMs and memory (98 of 108 SMs on A100 under 7g) and
    needs no MIG mode change. The memory counted for a whole GPU is the full profile's (conservative:
    the catalog records no MIG-off total)."""
    if min_profile == WHOLE_GPU:
        return (WHOLE_GPU,) if whole_fits(demand, model) else ()
    if not model.mig:  # a GPU without MIG: the whole GPU or nothing (a MIG `min_profile` by its memory)
        size = profile_size(min_profile) if min_profile is not None else None
        floor = size is None or model.memory_mib >= size[1] * 1000 * 0.9
        return (WHOLE_GPU,) if floor and whole_fits(demand, model) else ()
    g = slices_needed(demand, model) if slices is None else slices  # `slices`: the caller's slices_needed
    mib = demand.memory_mib
    # The answer depends on the memory only through which profile sizes it exceeds: asked once per workload
    # and model (20,000 times at 7,000 GPUs), it is worked out once per size band, slices and floor.
    band = bisect.bisect_left(_memory_sizes(model), mib)
    key = (model, band, g, min_profile, demand.compute_sm <= model.sm_total + 1e-9)
    names = _FITTING.get(key)
    if names is None:
        names = tuple(p.name for p in _smallest_first(model)
                      if p.memory_mib >= mib and p.compute_slices >= g
                      and (min_profile is None or _at_least(model, p, min_profile)))
        if whole_fits(demand, model) and (not names or names[0] == model.full_profile.name):
            names += (WHOLE_GPU,)
        if len(_FITTING) < 10_000:
            _FITTING[key] = names
    return names


_FITTING: dict[tuple[object, ...], tuple[str, ...]] = {}  # fitting_profiles by (model, size band, slices, ...)


@functools.lru_cache(maxsize=256)
def _memory_sizes(model: GpuModel) -> tuple[int, ...]:
    """The distinct memory sizes a demand is compared with: the plain profiles' and the whole GPU's, sorted.
    Two demands between the same neighbours (same `bisect_left` index) fit the same profiles."""
    return tuple(sorted({p.memory_mib for p in model.plain_profiles} | {model.memory_mib}))


def whole_fits(demand: Demand, model: GpuModel) -> bool:
    """The demand fits the whole MIG-disabled GPU (memory counted as the full profile's, all SMs). On a GPU
    without MIG whose SM count no source gives (`GpuModel.compute_unknown`) only memory is checked."""
    return model.memory_mib >= demand.memory_mib and (
        demand.compute_sm <= model.sm_total + 1e-9 or model.compute_unknown)


def misfit_reason(demand: Demand, models: list[GpuModel]) -> str:
    """Why no instance of any model holds the demand (for the report)."""
    biggest = max(models, key=lambda m: m.memory_mib)
    if demand.memory_mib > biggest.memory_mib:
        where = f"{biggest.full_profile.name} on {biggest.id}" if biggest.mig else f"a whole {biggest.id}, no MIG"
        return (f"needs {demand.memory_mib} MiB; the largest instance in the fleet ({where}) has "
                f"{biggest.memory_mib} MiB")
    return "no profile of any model in the fleet meets its memory, compute and minimum profile together"


MAX_WEIGHT = 1e9  # as config.MAX_WEIGHT: far above the defaults (10,000 at most); beyond it, a typo
_POLICY_KEYS = {"memory_percentile", "compute_percentile", "headroom", "headroom_min_mib", "allow_disrupt",
                "keep_free", "anti_affinity_scope", "weights", "consolidate", "max_moves", "reclaim_idle", "spare",
                "headroom_spread", "headroom_max_mib"}


def policy_from_mapping(doc: dict[str, object], base: Policy | None = None, *, source: str = "config") -> Policy:
    """A Policy from a config file's `planner:` section (unknown keys are errors); `base` gives the rest."""
    base = base or Policy()
    unknown = set(doc) - _POLICY_KEYS - {"solver", "time_limit", "gap"}
    if unknown:
        raise InputError(f"unknown planner setting(s) {', '.join(sorted(unknown))}", source=source, key="planner",
                         hint=f"known: {', '.join(sorted(_POLICY_KEYS | {'solver', 'time_limit', 'gap'}))}")
    values = asdict(base)
    values.update({k: v for k, v in doc.items() if k in _POLICY_KEYS and k != "weights"})
    weights = dict(values.pop("weights"))
    wdoc = doc.get("weights", {})
    if not isinstance(wdoc, dict) or set(wdoc) - set(weights):
        raise InputError("planner.weights takes " + ", ".join(weights), source=source, key="planner.weights")
    weights.update(wdoc)
    for k, v in wdoc.items():  # numbers only: float("NaN") or float(True) would make a weight of a string
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not \
                0 <= v <= MAX_WEIGHT:
            raise InputError(f"planner.weights.{k} must be a number from 0 to {MAX_WEIGHT:g}, got {v!r}",
                             source=source, key=f"planner.weights.{k}")
    try:
        return Policy(**values, weights=Weights(**{k: float(v) for k, v in weights.items()}))
    except (TypeError, ValueError) as err:
        raise InputError(f"bad planner setting: {err}", source=source, key="planner") from err
