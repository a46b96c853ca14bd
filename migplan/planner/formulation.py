"""The pattern integer program (pure). Full model: docs/model.md.

Variables
  x[g,p] in Z+   GPUs of group g laid out as pattern p            sum_p x[g,p] = N_g
  y[c,m,q] in Z+ items of an unpinned class c (ordinary or anti-affine) on free profile-q instances of model m
  y[c,g,q] in Z+ items of a pinned class c (or of a refined anti-affinity set) on free q-instances of group g
  u[c] in Z+     items of class c left out
  v,f,z,o >= 0  anti-affinity only: GPUs per free-profile signature, flows of a set's members to GPU
                 types, GPUs (hosts) offering one of a profile subset (continuous)
Rows (one function per family below)
  balance   sum y[c,.,.] + u[c] = n_c + sum_{g,p} d_c(g,p) x[g,p]      (d_c: running items p displaces)
  capacity  sum_c y[c,m,q] <= sum_{g in m, p} free(g,p,q) x[g,p]       (and per group for per-group y)
  spread    per anti-affinity set A and model m, a transportation problem: A's members on profile q go
            to GPU types offering q, at most one per GPU (Hall's condition for every profile subset), or
            Hall's rows for the subsets of at most |A| profiles when fewer; host scope: Hall's rows over
            hosts (_spread_hosts)
  keep-free sum_g x[g, empty] >= K
  moves     (consolidation with a budget) sum_{g,p} |d(g,p)| x[g,p] <= max_moves
Objective (minimise)  W_u sum value_c u_c + W_d disruptions + W_gpu used + W_chg changed
                      + W_mode MIG mode changes + W_reset of them needing a GPU reset
                      + W_frag instances + W_waste excess slices
                      (consolidating: a displaced item costs W_gpu / 20 x (1 + priority / top priority), not W_d)

WHOLE (MIG disabled) is a pattern of every GPU group without instances that must stay: it offers one
place of the pseudo-profile WHOLE_GPU ("whole"), which items needing the full profile (or asking for
`min_profile: whole`) fit. Where a movable workload runs on the MIG-disabled GPU, a second WHOLE pattern
(`evict`) displaces it and offers the place to another.

Rules and eligibility: a group whose GPUs have a rule (`GpuState.allowed`) gets only the patterns it allows
(`patterns.candidates`; WHOLE only where "whole" is allowed); a class eligible on some hosts only
(`Klass.restricted`) is planned per GPU group, as pinned classes are, with y only on groups whose hosts its rule
for that profile names (groups are split by zone, so a group is wholly inside or outside each host set).

Size: the spread rows number sum_A min(|profiles of A| + |GPU types|, subsets of at most |A| profiles) and
share the counters v and z, so the model grows with sets + classes + groups x patterns, never with sets x
groups. `formulate` stops with a PlanError as soon as the model passes `LIMIT` (checked while it is built).
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from migplan.catalog.geometry import GpuModel
from migplan.catalog.layout import Layout
from migplan.model.diff import RESET_ON_MODE_CHANGE
from migplan.planner.demand import MOVE_SHARE_OF_GPU, Weights
from migplan.planner.groups import Group, Klass, Split
from migplan.planner.milp import Milp, ModelTooLarge, SizeLimit
from migplan.planner.patterns import WHOLE, candidates, key, keys
from migplan.planner.plan import PlanError
from migplan.planner.problem import Problem
from migplan.profiles import WHOLE_GPU, may_use

Pattern = Layout | None

HALL_MAX = 6  # host scope: Hall rows for every subset of up to this many (model, profile) pairs, beyond: fewer
MAX_VARIABLES = 2_000_000
MAX_ROWS = 2_000_000
MAX_NONZEROS = 4_000_000  # ~1 KB each through PuLP and CBC: a few GB at most
LIMIT = SizeLimit(MAX_VARIABLES, MAX_ROWS, MAX_NONZEROS)


@dataclass
class PatternInfo:
    pattern: Pattern
    free: Counter[str]  # free instances per profile
    displaced: Counter[int]  # running items displaced, per class
    destroyed_busy: int
    used: int
    change: int
    evict: bool = False  # WHOLE only: the running whole-GPU workload leaves, another takes the GPU
    mode: int = 0  # 1 when it changes the GPU's MIG mode (a layout on a MIG-disabled GPU, WHOLE on an enabled one)
    reset: int = 0  # 1 when that mode change needs a GPU reset (model.diff.RESET_ON_MODE_CHANGE: Ampere)
    at_risk: int = 0  # running items at risk where they run that this pattern keeps there (groups.at_risk_reason)
    idle_gone: int = 0  # idle current instances (Group.idle) this pattern destroys

    @property
    def empty(self) -> bool:
        return self.pattern is not WHOLE and len(self.pattern) == 0


@dataclass
class Formulation:
    problem: Problem
    split: Split
    milp: Milp = field(default_factory=Milp)
    patterns: dict[int, list[PatternInfo]] = field(default_factory=dict)  # group idx -> patterns
    x: dict[tuple[int, int], int] = field(default_factory=dict)
    y_pool: dict[tuple[int, str, str], int] = field(default_factory=dict)
    y_group: dict[tuple[int, int, str], int] = field(default_factory=dict)
    u: dict[int, int] = field(default_factory=dict)
    signatures: dict[object, list[tuple[frozenset[Any], int]]] = field(default_factory=dict)  # v per scope
    offers: dict[tuple[object, tuple[object, ...]], int] = field(default_factory=dict)  # z, o, O per (scope, S)
    sizes: dict[str, tuple[int, int, int]] = field(default_factory=dict)  # stage -> (variables, rows, nonzeros)
    refine: frozenset[str] = frozenset()  # anti-affinity sets planned per GPU group (see `formulate`)

    def per_group(self, c: Klass) -> bool:
        """Pinned classes, classes eligible on some hosts only, and members of a refined set, get y per GPU group;
        the rest y per model."""
        return c.special or c.restricted or bool(self.refine & set(c.sample.groups))


def _mode(model: GpuModel, changes: bool) -> tuple[int, int]:
    """(mode, reset) of a pattern: whether it changes the MIG mode, and whether that needs a GPU reset. On
    Ampere the driver resets the GPU to change the mode, which fails while a client such as nvidia-persistenced
    holds it; Hopper and later change it without a reset (MIG User Guide, "Getting Started with MIG",
    docs/nvidia-smi.md §1; `model.diff` writes the same `+reset` on the action)."""
    return int(changes), int(changes and model.architecture in RESET_ON_MODE_CHANGE)


def _info(model: GpuModel, g: Group, pattern: Pattern) -> PatternInfo:
    if pattern is WHOLE:
        # MIG disabled: a running whole-GPU workload (or unprofiled processes) keeps the GPU, else it offers one
        # WHOLE_GPU place; every running instance goes (its workloads are displaced, busy ones destroyed)
        taken = g.soft_whole >= 0 or g.busy_whole or g.hard_whole
        displaced = Counter(c for _, c in g.soft)
        mode, reset = _mode(model, g.current is not None)  # MIG enabled now: disabling it
        return PatternInfo(WHOLE, Counter() if taken else Counter({WHOLE_GPU: 1}), displaced,
                           len(g.soft_busy), 1, int(g.current is not None), mode=mode, reset=reset,
                           at_risk=int(g.risky_whole and g.soft_whole >= 0), idle_gone=len(g.idle))
    pk = keys(model, pattern)
    kept = {k for k, _ in g.soft if k in pk}
    displaced = Counter(c for k, c in g.soft if k not in pk)
    if g.soft_whole >= 0:
        displaced[g.soft_whole] += 1
    occupied = set(g.hard) | kept | (set(g.soft_busy) & pk)
    free = Counter(b for s, b in pk if (s, b) not in occupied)
    same = (g.current is not None and pk == keys(model, g.current)) or (
        len(pattern) == 0 and (g.current is None or len(g.current) == 0))
    destroyed = len(g.soft_busy - pk) + int(g.busy_whole)  # enabling MIG stops the whole-GPU processes
    mode, reset = _mode(model, g.current is None and len(pattern) > 0)  # MIG disabled now: enabling it
    return PatternInfo(pattern, free, displaced, destroyed, int(len(pattern) > 0), int(not same),
                       mode=mode, reset=reset, at_risk=len(g.risky & kept), idle_gone=len(g.idle - pk))


def group_patterns(model: GpuModel, g: Group) -> list[PatternInfo]:
    """Candidate patterns of a group: WHOLE alone when a workload must stay on the MIG-disabled GPU; else the
    layouts and WHOLE (MIG disabled, one whole-GPU workload) wherever no instance must stay. WHOLE comes
    first on a MIG-disabled GPU (its current state), last on one with MIG enabled. Under a rule
    (`Group.allowed`) only what it allows; PlanError when that leaves nothing (what must stay breaks the rule)."""
    whole_ok = g.allowed is None or WHOLE_GPU in g.allowed
    if g.hard_whole:
        out = [_info(model, g, WHOLE)] if whole_ok else []
    else:
        out = [_info(model, g, p) for p in candidates(model, g.current, g.hard, g.allowed)]
        if not g.hard and whole_ok:
            whole = _info(model, g, WHOLE)
            if g.current is None:
                out.insert(0, whole)
            else:
                out.append(whole)
        if g.soft_whole >= 0 and not g.busy_whole and whole_ok:  # the whole-GPU workload may move: another may
            out.append(PatternInfo(WHOLE, Counter({WHOLE_GPU: 1}), Counter({g.soft_whole: 1}), 0, 1, 0, evict=True))
    if not out:
        where = ", ".join(f"{x.host}/{x.index}" for x in g.gpus[:5]) + (" ..." if len(g.gpus) > 5 else "")
        raise PlanError(f"GPU(s) {where}: no layout keeps both what must stay there and their rule (only "
                        f"{', '.join(g.allowed or ())} allowed)",
                        hint="keep these GPUs as they are (reserved_gpus), or allow the running workloads to move "
                             "(--allow-disrupt)")
    return out


def _allowed(c: Klass, g: Group) -> bool:
    """A pinned class may use group g: on its host (and GPU), and no member of its sets runs there."""
    it = c.sample
    if it.pin_host is not None and (g.host != it.pin_host or (it.pin_gpu is not None and g.gpu != it.pin_gpu)):
        return False
    return not (set(it.groups) & g.present)


def _patterns(f: Formulation) -> None:
    p, m = f.problem, f.milp
    made = f.split.patterns
    for g in f.split.groups:
        pats = made.get(g.idx)
        if pats is None:
            pats = made[g.idx] = group_patterns(p.models[g.model], g)
        f.patterns[g.idx] = pats
        for pi, _ in enumerate(f.patterns[g.idx]):
            f.x[(g.idx, pi)] = m.var(f"x[{g.idx},{pi}]", ub=len(g.gpus))


def _variables(f: Formulation) -> None:
    m = f.milp
    free_by_model: dict[str, set[str]] = defaultdict(set)
    for g in f.split.groups:
        for info in f.patterns[g.idx]:
            free_by_model[g.model] |= {q for q, n in info.free.items() if n > 0}
    on_host: dict[str | None, list[Group]] = defaultdict(list)
    for g in f.split.groups:
        on_host[g.host].append(g)
    for c in f.split.classes:
        f.u[c.idx] = m.var(f"u[{c.idx}]")
        if not f.per_group(c):
            for model_id, profs in c.sample.fits:
                for q in profs:
                    if q in free_by_model.get(model_id, set()):
                        f.y_pool[(c.idx, model_id, q)] = m.var(f"y[{c.idx},{model_id},{q}]")
            continue
        for g in on_host[c.sample.pin_host] if c.special else f.split.groups:
            if _allowed(c, g):
                for q in c.sample.profiles(g.model):
                    if may_use(c.sample.eligible, q, g.host_of) and any(info.free[q] for info in f.patterns[g.idx]):
                        f.y_group[(c.idx, g.idx, q)] = m.var(f"y[{c.idx},g{g.idx},{q}]")


def _one_pattern_per_gpu(f: Formulation) -> None:
    """sum_p x[g,p] = N_g."""
    for g in f.split.groups:
        f.milp.add(f"gpus[{g.idx}]", ((f.x[(g.idx, pi)], 1.0) for pi in range(len(f.patterns[g.idx]))), "==",
                   len(g.gpus))


def _balance(f: Formulation) -> None:
    """sum y[c,.,.] + u[c] - sum d_c(g,p) x[g,p] = n_c  (every item placed once or counted as left out)."""
    terms: dict[int, list[tuple[int, float]]] = defaultdict(list)
    for (c, _, _), v in list(f.y_pool.items()) + list(f.y_group.items()):
        terms[c].append((v, 1.0))
    for g in f.split.groups:
        for pi, info in enumerate(f.patterns[g.idx]):
            for c, n in info.displaced.items():
                terms[c].append((f.x[(g.idx, pi)], -float(n)))
    for k in f.split.classes:
        f.milp.add(f"balance[{k.idx}]", [*terms[k.idx], (f.u[k.idx], 1.0)], "==", len(k.free))


def _capacity(f: Formulation) -> None:
    """sum_c y[c,m,q] + sum_{c,g in m} y[c,g,q] <= sum_{g in m,p} free(g,p,q) x[g,p]; per group for special y."""
    use: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    guse: dict[tuple[int, str], list[tuple[int, float]]] = defaultdict(list)
    groups = {g.idx: g for g in f.split.groups}
    for (_, model_id, q), v in f.y_pool.items():
        use[(model_id, q)].append((v, 1.0))
    for (_, gi, q), v in f.y_group.items():
        use[(groups[gi].model, q)].append((v, 1.0))
        guse[(gi, q)].append((v, 1.0))
    supply: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    for g in f.split.groups:
        for pi, info in enumerate(f.patterns[g.idx]):
            for q, n in info.free.items():
                supply[(g.model, q)].append((f.x[(g.idx, pi)], -float(n)))
    for (model_id, q), terms in sorted(use.items()):
        f.milp.add(f"capacity[{model_id},{q}]", terms + supply[(model_id, q)], "<=", 0)
    for (gi, q), terms in sorted(guse.items()):
        own = [(f.x[(gi, pi)], -float(info.free[q])) for pi, info in enumerate(f.patterns[gi]) if info.free[q]]
        f.milp.add(f"capacity[g{gi},{q}]", terms + own, "<=", 0)


def _signature(info: PatternInfo) -> frozenset[str]:
    """The profiles a GPU laid out as this pattern has a free instance of."""
    return frozenset(q for q, n in info.free.items() if n > 0)


T = TypeVar("T")
Sig = frozenset[Any]  # free profiles of a GPU (model scope) or (model, profile) pairs (host scope)
Want = list[tuple[str, int]]  # (profile, y variable) of the members of one set on one model or group
Pair = tuple[str, str]  # (model, profile)


def _name(profiles: Iterable[Any]) -> str:
    """'1g.5gb+2g.10gb', or for (model, profile) pairs 'A30:1g.6gb+...'."""
    return "+".join(sorted(p if isinstance(p, str) else f"{p[0]}:{p[1]}" for p in profiles))


def _signatures(f: Formulation, scope: object, members: Callable[[], Iterable[tuple[Group, int, Sig]]],
                label: str) -> list[tuple[Sig, int]]:
    """v[scope,T] = GPUs of the scope whose pattern offers exactly the free profiles T: one row per T, and
    every x in one such row per scope, which keeps the rows that count GPUs short. `members` yields
    (group, pattern index, signature) for the scope's GPUs; it is called once per scope."""
    if scope not in f.signatures:
        terms: dict[Sig, list[tuple[int, float]]] = defaultdict(list)
        for g, pi, sig in members():
            if sig:
                terms[sig].append((f.x[(g.idx, pi)], -1.0))
        out = []
        for t in sorted(terms, key=_name):
            v = f.milp.var(f"v[{label},{_name(t)}]", integer=False)
            f.milp.add(f"signature[{label},{_name(t)}]", [(v, 1.0), *terms[t]], "==", 0)
            out.append((t, v))
        f.signatures[scope] = out
    return f.signatures[scope]


def _model_signatures(f: Formulation, model_id: str) -> list[tuple[Sig, int]]:
    return _signatures(f, ("model", model_id), lambda: (
        (g, pi, _signature(info)) for g in f.split.groups if g.model == model_id
        for pi, info in enumerate(f.patterns[g.idx])), model_id)


def _transport(f: Formulation, label: str, want: Want, supply: dict[frozenset[str], list[tuple[int, float]]]) -> None:
    """One anti-affinity set on one model (or group) as a transportation problem: Hall's condition for every
    subset of its profiles at once, without listing the subsets.

        f[q,t] >= 0 for each GPU type t (its free profiles among the set's) and q in t
        sum_t f[q,t] >= sum_{c in A} y[c,.,q]      every member wanting profile q goes to a type offering q
        sum_q f[q,t] <= GPUs of type t             one member per GPU (`supply`: those counts, negated)

    By max-flow min-cut it is feasible exactly when, for every profile subset S, the members wanting one of S
    number at most the GPUs offering one of S: |profiles| + |types| rows per set, not 2^|profiles|."""
    flows: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for t in sorted(supply, key=_name):
        out = []
        for q in sorted(t):
            v = f.milp.var(f"f[{label},{q},{_name(t)}]", integer=False)
            flows[q].append((v, 1.0))
            out.append((v, 1.0))
        f.milp.add(f"spread[{label},{_name(t)}]", out + supply[t], "<=", 0)
    for q in sorted({q for q, _ in want}):
        f.milp.add(f"spread[{label},{q}]", flows[q] + [(y, -1.0) for qq, y in want if qq == q], ">=", 0)


Members = dict[str, list[tuple[str, str, int]]]  # set -> (model, profile, y) of every member variable
PerGroup = dict[tuple[str, int], Want]  # (set, group) -> member variables there (pinned or refined classes)


def _most(f: Formulation) -> Counter[int]:
    """Per class, the most items it can have to place: its free items and every running one that may move."""
    out: Counter[int] = Counter({c.idx: len(c.free) for c in f.split.classes})
    for g in f.split.groups:
        for _, c in g.soft:
            out[c] += len(g.gpus)
        if g.soft_whole >= 0:
            out[g.soft_whole] += len(g.gpus)
    return out


def _members(f: Formulation) -> tuple[Members, PerGroup]:
    """Member variables per set (only for sets with a member planned per model: when all are planned per
    group, the rows per set and group, or host, are exact and these would repeat them) and per set and group."""
    classes = {c.idx: c for c in f.split.classes}
    groups = {g.idx: g for g in f.split.groups}
    members: Members = defaultdict(list)
    pinned: PerGroup = defaultdict(list)  # pinned or refined members
    for (c, model_id, q), v in f.y_pool.items():
        for a in classes[c].sample.groups:
            members[a].append((model_id, q, v))
    pooled = set(members)
    for (c, gi, q), v in f.y_group.items():
        for a in classes[c].sample.groups:
            pinned[(a, gi)].append((q, v))
            if a in pooled:
                members[a].append((groups[gi].model, q, v))
    return members, pinned


def _reach(f: Formulation) -> Callable[[str, object], int]:
    """(set, model or group index) -> the most members of the set that can go there."""
    most = _most(f)
    classes = {c.idx: c for c in f.split.classes}
    groups = {g.idx: g for g in f.split.groups}
    seen: dict[tuple[str, object], set[int]] = defaultdict(set)
    for c, model_id, _ in f.y_pool:
        for a in classes[c].sample.groups:
            seen[(a, model_id)].add(c)
    for c, gi, _ in f.y_group:
        for a in classes[c].sample.groups:
            seen[(a, gi)].add(c)
            seen[(a, groups[gi].model)].add(c)
    return lambda a, where: sum(most[c] for c in seen[(a, where)])


def _spread(f: Formulation) -> None:
    """Anti-affinity: at most one member of a set per GPU (`_spread_gpus`) or per host (`_spread_hosts`)."""
    members, pinned = _members(f)
    if f.problem.policy.anti_affinity_scope == "host":
        _spread_hosts(f, members, pinned)
    else:
        _spread_gpus(f, members, pinned)


def _model_offer(f: Formulation, model_id: str, subset: tuple[str, ...]) -> int:
    """z[m,S] = GPUs of model m offering a free instance of a profile in S (shared by every set)."""
    k: tuple[object, tuple[object, ...]] = (("model", model_id), subset)
    if k not in f.offers:
        z = f.milp.var(f"z[{model_id},{_name(subset)}]", integer=False)
        f.milp.add(f"offer[{model_id},{_name(subset)}]", [(z, 1.0)] + [
            (v, -1.0) for sig, v in _model_signatures(f, model_id) if sig & set(subset)], "==", 0)
        f.offers[k] = z
    return f.offers[k]


def _set_on_model(f: Formulation, a: str, model_id: str, want: Want, busy: list[Group], most: int) -> None:
    """Set `a` on the GPUs of one model, less those of `busy` groups (where a member of the set runs: no other
    goes there): Hall's rows, one per profile subset S of at most `most` profiles (a violated subset has one
    of at most as many profiles as members), when they are fewer than the transportation problem's rows."""
    mine = frozenset(q for q, _ in want)
    types = {sig & mine for sig, _ in _model_signatures(f, model_id) if sig & mine}
    subsets = [s for s in _subsets(sorted(mine)) if len(s) <= most]
    if len(subsets) <= len(mine) + len(types):
        for subset in subsets:
            away = [(f.x[(g.idx, pi)], 1.0) for g in busy for pi, info in enumerate(f.patterns[g.idx])
                    if _signature(info) & set(subset)]
            f.milp.add(f"spread[{a},{model_id},{_name(subset)}]", [(v, 1.0) for q, v in want if q in subset]
                       + away + [(_model_offer(f, model_id, subset), -1.0)], "<=", 0)
        return
    supply: dict[frozenset[str], list[tuple[int, float]]] = defaultdict(list)
    for sig, v in _model_signatures(f, model_id):
        if sig & mine:
            supply[sig & mine].append((v, -1.0))
    for g in busy:
        for pi, info in enumerate(f.patterns[g.idx]):
            if _signature(info) & mine:
                supply[_signature(info) & mine].append((f.x[(g.idx, pi)], 1.0))
    _transport(f, f"{a},{model_id}", want, supply)


def _spread_gpus(f: Formulation, members: Members, pinned: PerGroup) -> None:
    """Per set A and model m, the members of A on GPUs of m that hold no running member of A, at most one per
    GPU (`_transport` over the model's GPU types); per set and group again for pinned members."""
    present: dict[str, list[Group]] = defaultdict(list)
    for g in f.split.groups:
        for a in sorted(g.present):
            present[a].append(g)
    reach = _reach(f)
    for a, terms in sorted(members.items()):
        by_model: dict[str, Want] = defaultdict(list)
        for model_id, q, v in terms:
            by_model[model_id].append((q, v))
        for model_id, want in sorted(by_model.items()):
            busy = [g for g in present[a] if g.model == model_id]
            if busy or reach(a, model_id) > 1:  # one member alone and none running: capacity places it
                _set_on_model(f, a, model_id, want, busy, max(1, reach(a, model_id)))
    for (a, gi), want in sorted(pinned.items()):
        if reach(a, gi) <= 1:
            continue
        mine = frozenset(q for q, _ in want)
        supply = defaultdict(list)
        for pi, info in enumerate(f.patterns[gi]):
            if _signature(info) & mine:
                supply[_signature(info) & mine].append((f.x[(gi, pi)], -1.0))
        _transport(f, f"{a},g{gi}", want, supply)


def _host_offers(f: Formulation, subset: tuple[Pair, ...],
                 on_host: dict[str, list[Group]]) -> tuple[int, dict[str, int]]:
    """O[S] = sum_h o[h,S], 0 <= o[h,S] <= min(1, GPUs of host h offering one of the (model, profile) pairs S):
    the hosts that can take a member wanting one of S. Shared by every set."""
    k: tuple[object, tuple[object, ...]] = (("fleet",), subset)
    hosts = sorted(on_host)
    if k not in f.offers:
        per_host = []
        for h in hosts:
            def pairs(gs: list[Group] = on_host[h]) -> Iterable[tuple[Group, int, frozenset[Pair]]]:
                return ((g, pi, frozenset((g.model, q) for q in _signature(info))) for g in gs
                        for pi, info in enumerate(f.patterns[g.idx]))
            sigs = _signatures(f, ("host", h), pairs, h)
            o = f.milp.var(f"o[{h},{_name(subset)}]", ub=1.0, integer=False)
            f.milp.add(f"offer[{h},{_name(subset)}]",
                       [(o, 1.0)] + [(v, -1.0) for sig, v in sigs if sig & set(subset)], "<=", 0)
            f.offers[(("host", h), subset)] = o
            per_host.append((o, -1.0))
        total = f.milp.var(f"O[{_name(subset)}]", integer=False)
        f.milp.add(f"offer[hosts,{_name(subset)}]", [(total, 1.0), *per_host], "==", 0)
        f.offers[k] = total
    return f.offers[k], {h: f.offers[(("host", h), subset)] for h in hosts}


def _spread_hosts(f: Formulation, members: Members, pinned: PerGroup) -> None:
    """Host scope (Hall's condition over hosts): per set A and subset S of its (model, profile) pairs,
    members wanting one of S <= hosts without a running member of A that offer one of S
    (sum_{h not running A} o[h,S] = O[S] - those running A); per set and host, pinned members <= 1."""
    groups = {g.idx: g for g in f.split.groups}
    on_host: dict[str, list[Group]] = defaultdict(list)
    for g in f.split.groups:
        on_host[g.host or ""].append(g)
    present: dict[str, set[str]] = defaultdict(set)
    for gk, items in f.split.running.items():
        for it in items:
            for a in it.groups:
                present[a].add(gk[0])  # outgrown members too: they keep running there
    most = _most(f)
    size: Counter[str] = Counter()
    for c in f.split.classes:
        for a in c.sample.groups:
            size[a] += most[c.idx]
    for a, terms in sorted(members.items()):
        if size[a] <= 1 and not present[a]:
            continue  # one member, and none running: nothing to spread
        for subset in _host_family(sorted({(m, q) for m, q, _ in terms})):
            total, per_host = _host_offers(f, subset, on_host)
            busy = [(per_host[h], 1.0) for h in sorted(present[a]) if h in per_host]
            f.milp.add(f"spread[{a},{_name(subset)}]",
                       [(v, 1.0) for m, q, v in terms if (m, q) in subset] + busy + [(total, -1.0)], "<=", 0)
    hosts: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    for (a, gi), qv in pinned.items():
        hosts[(a, groups[gi].host or "")].extend((v, 1.0) for _, v in qv)
    for (a, h), row in sorted(hosts.items()):
        f.milp.add(f"spread[{a},{h}]", row, "<=", 0 if h in present[a] else 1)


def _subsets(items: list[T]) -> list[tuple[T, ...]]:
    """Non-empty subsets (Hall's condition: members wanting profiles S need that many hosts offering one of S)."""
    return [tuple(x for i, x in enumerate(items) if mask >> i & 1) for mask in range(1, 1 << len(items))]


def _host_family(pairs: list[Pair]) -> list[tuple[Pair, ...]]:
    """Host-scope Hall subsets: those of each model's pairs (`_family`), and all pairs together. A host with one
    model offers only its pairs, so a subset mixing models needs no row of its own where every host has
    one model (the usual case); on hosts mixing models the rows are a relaxation."""
    by_model: dict[str, list[Pair]] = defaultdict(list)
    for pair in pairs:
        by_model[pair[0]].append(pair)
    out = [s for m in sorted(by_model) for s in _family(by_model[m])]
    return out + [tuple(pairs)] if len(by_model) > 1 else out


def _family(items: list[T]) -> list[tuple[T, ...]]:
    """The subsets S that get a host-scope Hall row: all of them up to HALL_MAX pairs (exact for one set),
    else each pair alone and all together (a relaxation; the mapping reports what it cannot spread)."""
    if len(items) <= HALL_MAX:
        return _subsets(items)
    return [(x,) for x in items] + [tuple(items)]


def _keep_free(f: Formulation) -> None:
    """sum_g x[g, empty] >= K."""
    k = f.problem.policy.keep_free
    if k > 0:
        terms = [(f.x[(g.idx, pi)], 1.0) for g in f.split.groups for pi, info in enumerate(f.patterns[g.idx])
                 if info.empty]
        f.milp.add("keep-free", terms, ">=", k)


def spare_models(problem: Problem, entry: str) -> tuple[str, list[str]]:
    """(profile, planned models it applies to) of a `spare` key: PROFILE (every model with it) or MODEL/PROFILE."""
    model_id, _, q = entry.rpartition("/")
    used = sorted({g.model for g in problem.gpus if g.hold is None})
    return q, [m for m in used if (not model_id or m == model_id) and problem.models[m].has_profile(q)]


def _spare(f: Formulation) -> None:
    """Per `spare` entry (q, N): sum_{g,p} free(g,p,q) x[g,p] - sum_c y[c,.,q] >= N over the models it names."""
    groups = {g.idx: g for g in f.split.groups}
    for entry, n in f.problem.policy.spare:
        q, models = spare_models(f.problem, entry)
        if not models:
            raise PlanError(f"spare {entry}: no planned GPU has profile {q}",
                            hint="name a profile of a model in the inventory ('migplan catalog'), or drop the entry")
        terms = [(f.x[(g.idx, pi)], float(info.free[q])) for g in f.split.groups if g.model in models
                 for pi, info in enumerate(f.patterns[g.idx]) if info.free[q]]
        terms += [(v, -1.0) for (_, m, p), v in f.y_pool.items() if p == q and m in models]
        terms += [(v, -1.0) for (_, gi, p), v in f.y_group.items() if p == q and groups[gi].model in models]
        f.milp.add(f"spare[{entry}]", terms, ">=", n)


def _slices(model: GpuModel, q: str) -> tuple[int, int]:
    """(compute, memory) slices of profile q; the whole MIG-disabled GPU counts as all of them."""
    if q == WHOLE_GPU:
        return model.compute_slices, model.memory_slices
    prof = model.profile(q)
    return prof.compute_slices, prof.memory_slices


def waste(problem: Problem, c: Klass, model_id: str, q: str) -> int:
    """Excess slices of profile q over the class's need: (g(q) - need_g) + (mem(q) - smallest fitting mem)."""
    model = problem.models[model_id]
    g, mem = _slices(model, q)
    least_mem = min(_slices(model, p)[1] for p in c.sample.profiles(model_id))
    return max(0, g - c.sample.slices(model_id)) + (mem - least_mem)


def move_costs(problem: Problem, split: Split, w: Weights) -> dict[int, float]:
    """Per class, what displacing one running item costs: `w.disrupt`, or when consolidating
    MOVE_SHARE_OF_GPU x `w.gpu` x (1 + priority / the top priority among running items), at most
    `w.disrupt`, so that freeing a GPU (`w.gpu`) is worth several moves and, of two workloads that could
    move, the lower-priority one moves first (the lower bound's weights, disrupt 0, make moves free)."""
    if not problem.policy.consolidate:
        return {c.idx: w.disrupt for c in split.classes}
    top = max((it.priority for it in problem.items if it.running is not None), default=1) or 1
    base = min(w.disrupt, MOVE_SHARE_OF_GPU * w.gpu)
    return {c.idx: min(w.disrupt, base * (1 + c.sample.priority / top)) for c in split.classes}


def _move_budget(f: Formulation) -> None:
    """Consolidation: sum_{g,p} |d(g,p)| x[g,p] <= max_moves (running items whose instance changes)."""
    budget = f.problem.policy.max_moves
    if f.problem.policy.consolidate and budget is not None:
        terms = [(f.x[(g.idx, pi)], float(sum(info.displaced.values()))) for g in f.split.groups
                 for pi, info in enumerate(f.patterns[g.idx]) if info.displaced]
        f.milp.add("moves", terms, "<=", budget)


def _objective(f: Formulation, w: Weights) -> None:
    classes = {c.idx: c for c in f.split.classes}
    groups = {g.idx: g for g in f.split.groups}
    for c, v in f.u.items():
        f.milp.cost(v, w.unplaced * classes[c].sample.value)
    f.milp.constant = w.disrupt * len(f.split.forced)
    move = move_costs(f.problem, f.split, w)
    idle = 0.0 if f.problem.policy.reclaim_idle else w.idle
    for (gi, pi), v in f.x.items():
        info = f.patterns[gi][pi]
        n_inst = len(info.pattern) if info.pattern is not WHOLE else 0  # MIG off: no instance at all
        cost = (sum(move[c] * n for c, n in info.displaced.items()) + w.disrupt * info.destroyed_busy
                + w.gpu * info.used + w.change * info.change + w.mode * info.mode + w.reset * info.reset
                + w.fragment * n_inst + w.risk * info.at_risk + idle * info.idle_gone)
        f.milp.cost(v, cost)
    if not w.waste:  # the lower bound's weights: every placement costs 0.0, no waste to work out
        for v in (*f.y_pool.values(), *f.y_group.values()):
            f.milp.cost(v, 0.0)
        return
    least: dict[tuple[int, str], int] = {}  # (class, model) -> memory slices of its smallest fitting profile
    for (c, model_id, q), v in f.y_pool.items():
        f.milp.cost(v, w.waste * _waste(f.problem, classes[c], model_id, q, least))
    for (c, gi, q), v in f.y_group.items():
        f.milp.cost(v, w.waste * _waste(f.problem, classes[c], groups[gi].model, q, least))


def _waste(problem: Problem, c: Klass, model_id: str, q: str, least: dict[tuple[int, str], int]) -> int:
    """`waste`, with the smallest fitting memory kept per (class, model) in `least`."""
    model = problem.models[model_id]
    g, mem = _slices(model, q)
    low = least.get((c.idx, model_id))
    if low is None:
        low = least[(c.idx, model_id)] = min(_slices(model, p)[1] for p in c.sample.profiles(model_id))
    return max(0, g - c.sample.slices(model_id)) + (mem - low)


_STAGES = ("patterns", "placements", "gpus", "balance", "capacity", "anti-affinity", "keep-free", "spare", "moves")


def _cause(f: Formulation, stage: str) -> tuple[str, str]:
    """(what makes the model this large, what to do) for the stage that passed the limit."""
    sp = f.split
    sets = {a for c in sp.classes for a in c.sample.groups}
    n_pat = max((len(v) for v in f.patterns.values()), default=0)
    if stage == "patterns":
        return (f"GPU groups x layout patterns: {len(sp.groups):,} groups of GPUs the model can tell apart "
                f"(current layout, kept instances, running workloads, pins), up to {n_pat} patterns each",
                "plan the fleet in parts (one inventory per part), or let idle GPUs with differing layouts be "
                "reset so that they group")
    if stage == "anti-affinity":
        if f.problem.policy.anti_affinity_scope == "host":
            hosts = len({g.host for g in sp.groups})
            what = (f"anti-affinity sets x profile subsets x hosts: {len(sets):,} sets, up to {2 ** HALL_MAX - 1} "
                    f"Hall rows each, over {hosts:,} hosts")
        else:
            types = sum(len(v) for v in f.signatures.values())
            what = (f"anti-affinity sets x GPU types: {len(sets):,} sets, each with a row per profile and per GPU "
                    f"type (or per subset of its profiles) of every model it can use ({types:,} GPU types so far)")
        return (what + f", {len(sp.classes):,} workload classes",
                "use fewer, larger anti-affinity sets (one per service, not one per pair of workloads), "
                "anti_affinity_scope gpu instead of host, or plan the fleet in parts")
    pinned = sum(1 for c in sp.classes if c.special)
    return (f"workload classes x profiles x GPU groups: {len(sp.classes):,} classes ({pinned:,} pinned, "
            f"planned per GPU group) and {len(sp.groups):,} GPU groups",
            "plan the fleet or the workloads in parts, or use fewer distinct pins")


def formulate(problem: Problem, split: Split, weights: Weights | None = None, *,
              place_all: bool = False, limit: SizeLimit | None = None,
              refine: frozenset[str] = frozenset()) -> Formulation:
    """The program for `problem`; `place_all` forces u = 0 (used for the GPU lower bound).

    `refine`: anti-affinity sets whose members get y per GPU group (with the group's capacity rows and a
    spread row per set and group, or per set and host), as pinned classes do: tighter where the sets compete
    for the instances of a few GPUs, larger by sets x groups, so only for sets the mapping could not spread.
    Raises PlanError the moment the model passes `limit` (default `LIMIT`), naming its size and cause."""
    f = Formulation(problem, split, Milp(limit=LIMIT if limit is None else limit), refine=refine)
    steps = {"patterns": _patterns, "placements": _variables, "gpus": _one_pattern_per_gpu, "balance": _balance,
             "capacity": _capacity, "anti-affinity": _spread, "keep-free": _keep_free, "spare": _spare,
             "moves": _move_budget}
    stage = _STAGES[0]
    try:
        for stage in _STAGES:
            steps[stage](f)
            if stage == "placements" and place_all:
                for v in f.u.values():
                    f.milp.upper[v] = 0.0
            f.sizes[stage] = (len(f.milp.names), len(f.milp.rows), f.milp.nonzeros)
    except ModelTooLarge as err:
        cause, todo = _cause(f, stage)
        raise PlanError(
            f"the model is too large to solve: building its {stage} part it passed {err.limit:,} {err.what} "
            f"({err.variables:,} variables, {err.rows:,} rows, {err.nonzeros:,} nonzero coefficients so far; "
            f"limits {_limits(f.milp.limit)}); cause: {cause}", hint=todo) from None
    _objective(f, weights or problem.policy.weights)
    return f


def reweighted(f: Formulation, weights: Weights, *, place_all: bool = False) -> Formulation:
    """`formulate(f.problem, f.split, weights, place_all=place_all, refine=f.refine)` from a formulation
    already made: its variables and rows (which no weight changes) are shared, the objective made anew and,
    with `place_all`, u bounded to 0. The lower bound is made this way from the plan's own model
    (tests/test_planner_constraints.py checks that both write the same MPS text)."""
    milp = dataclasses.replace(f.milp, upper=list(f.milp.upper), objective={}, constant=0.0)
    if place_all:
        for v in f.u.values():
            milp.upper[v] = 0.0
    g = dataclasses.replace(f, milp=milp)
    _objective(g, weights)
    return g


def _limits(lim: SizeLimit) -> str:
    return ", ".join(f"{n} {v:,}" for n, v in (("variables", lim.variables), ("rows", lim.rows),
                                                ("nonzeros", lim.nonzeros)) if v is not None)


__all__ = ["LIMIT", "MAX_NONZEROS", "MAX_ROWS", "MAX_VARIABLES", "Formulation", "PatternInfo", "formulate",
           "group_patterns", "key", "move_costs", "reweighted", "waste"]
