"""The pattern integer program (pure). Full model: docs/model.md.

Variables
  x[g,p] in Z+   GPUs of group g laid out as pattern p            sum_p x[g,p] = N_g
  y[c,m,q] in Z+ items of (unpinned, non-anti-affine) class c on free profile-q instances of model m
  y[c,g,q] in Z+ items of a pinned or anti-affine class c on free profile-q instances of group g
  u[c] in Z+     items of class c left out
Rows (one function per family below)
  balance   sum y[c,.,.] + u[c] = n_c + sum_{g,p} d_c(g,p) x[g,p]      (d_c: running items p displaces)
  capacity  sum_c y[c,m,q] <= sum_{g in m, p} free(g,p,q) x[g,p]       (and per group for special classes)
  spread    sum_{c in A} y[c,g,.] <= sum_{p used} x[g,p]               (anti-affinity, one member per GPU)
  keep-free sum_g x[g, empty] >= K
Objective (minimise)  W_u sum value_c u_c + W_d disruptions + W_gpu used + W_chg changed
                      + W_frag instances + W_waste excess slices
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from migplan.catalog.geometry import GpuModel
from migplan.layout import Layout
from migplan.planner.demand import Weights
from migplan.planner.groups import Group, Klass, Split
from migplan.planner.milp import Milp
from migplan.planner.patterns import WHOLE, candidates, key, keys
from migplan.planner.problem import Problem

Pattern = Layout | None


@dataclass
class PatternInfo:
    pattern: Pattern
    free: Counter[str]  # free instances per profile
    displaced: Counter[int]  # running items displaced, per class
    destroyed_busy: int
    used: int
    change: int

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


def _info(model: GpuModel, g: Group, pattern: Pattern) -> PatternInfo:
    if pattern is WHOLE:
        return PatternInfo(WHOLE, Counter(), Counter(), len(g.soft_busy), 1, 0)
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
    return PatternInfo(pattern, free, displaced, destroyed, int(len(pattern) > 0), int(not same))


def group_patterns(model: GpuModel, g: Group) -> list[PatternInfo]:
    """Candidate patterns of a group: WHOLE when a workload must stay on the MIG-disabled GPU, else layouts."""
    if g.hard_whole:
        return [_info(model, g, WHOLE)]
    out = [_info(model, g, p) for p in candidates(model, g.current, g.hard)]
    if g.soft_whole >= 0 or g.busy_whole:
        out.insert(0, _info(model, g, WHOLE))
    return out


def _allowed(c: Klass, g: Group) -> bool:
    it = c.sample
    if it.pin_host is not None and (g.host != it.pin_host or (it.pin_gpu is not None and g.gpu != it.pin_gpu)):
        return False
    return not (set(it.groups) & g.present)


def _variables(f: Formulation) -> None:
    p, m = f.problem, f.milp
    for g in f.split.groups:
        f.patterns[g.idx] = group_patterns(p.models[g.model], g)
        for pi, _ in enumerate(f.patterns[g.idx]):
            f.x[(g.idx, pi)] = m.var(f"x[{g.idx},{pi}]", ub=len(g.gpus))
    free_by_model: dict[str, set[str]] = defaultdict(set)
    for g in f.split.groups:
        for info in f.patterns[g.idx]:
            free_by_model[g.model] |= {q for q, n in info.free.items() if n > 0}
    for c in f.split.classes:
        f.u[c.idx] = m.var(f"u[{c.idx}]")
        if not c.special:
            for model_id, profs in c.sample.fits:
                for q in profs:
                    if q in free_by_model.get(model_id, set()):
                        f.y_pool[(c.idx, model_id, q)] = m.var(f"y[{c.idx},{model_id},{q}]")
            continue
        for g in f.split.groups:
            if _allowed(c, g):
                for q in c.sample.profiles(g.model):
                    if any(info.free[q] for info in f.patterns[g.idx]):
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


def _spread(f: Formulation) -> None:
    """Anti-affinity: per set A and group g, members <= GPUs used (per profile: GPUs with a free q);
    host scope: per set A and host, members <= 1."""
    classes = {c.idx: c for c in f.split.classes}
    members: dict[tuple[str, int], list[tuple[int, str, int]]] = defaultdict(list)
    for (c, gi, q), v in f.y_group.items():
        for a in classes[c].sample.groups:
            members[(a, gi)].append((c, q, v))
    if f.problem.policy.anti_affinity_scope == "host":
        hosts: dict[tuple[str, str | None], list[tuple[int, float]]] = defaultdict(list)
        groups = {g.idx: g for g in f.split.groups}
        for (a, gi), vs in members.items():
            hosts[(a, groups[gi].host)].extend((v, 1.0) for _, _, v in vs)
        for (a, h), terms in sorted(hosts.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
            f.milp.add(f"spread[{a},{h}]", terms, "<=", 1)
        return
    for (a, gi), vs in sorted(members.items()):
        pats = f.patterns[gi]
        used = [(f.x[(gi, pi)], -1.0) for pi, info in enumerate(pats) if info.used]
        f.milp.add(f"spread[{a},g{gi}]", [(v, 1.0) for _, _, v in vs] + used, "<=", 0)
        for subset in _subsets(sorted({q for _, q, _ in vs})):
            with_q = [(f.x[(gi, pi)], -1.0) for pi, info in enumerate(pats) if any(info.free[q] for q in subset)]
            f.milp.add(f"spread[{a},g{gi},{'+'.join(subset)}]", [(v, 1.0) for _, qq, v in vs if qq in subset] + with_q,
                       "<=", 0)


def _subsets(items: list[str]) -> list[tuple[str, ...]]:
    """Non-empty subsets (Hall's condition: members wanting profiles S need that many GPUs offering one of S)."""
    return [tuple(x for i, x in enumerate(items) if mask >> i & 1) for mask in range(1, 1 << len(items))]


def _keep_free(f: Formulation) -> None:
    """sum_g x[g, empty] >= K."""
    k = f.problem.policy.keep_free
    if k > 0:
        terms = [(f.x[(g.idx, pi)], 1.0) for g in f.split.groups for pi, info in enumerate(f.patterns[g.idx])
                 if info.empty]
        f.milp.add("keep-free", terms, ">=", k)


def waste(problem: Problem, c: Klass, model_id: str, q: str) -> int:
    """Excess slices of profile q over the class's need: (g(q) - need_g) + (mem(q) - smallest fitting mem)."""
    model = problem.models[model_id]
    prof = model.profile(q)
    profs = c.sample.profiles(model_id)
    least_mem = min(model.profile(p).memory_slices for p in profs)
    return (prof.compute_slices - c.sample.slices(model_id)) + (prof.memory_slices - least_mem)


def _objective(f: Formulation, w: Weights) -> None:
    classes = {c.idx: c for c in f.split.classes}
    groups = {g.idx: g for g in f.split.groups}
    for c, v in f.u.items():
        f.milp.cost(v, w.unplaced * classes[c].sample.value)
    f.milp.constant = w.disrupt * len(f.split.forced)
    for (gi, pi), v in f.x.items():
        info = f.patterns[gi][pi]
        n_inst = len(info.pattern) if info.pattern is not WHOLE else 1
        cost = (w.disrupt * (sum(info.displaced.values()) + info.destroyed_busy) + w.gpu * info.used
                + w.change * info.change + w.fragment * n_inst)
        f.milp.cost(v, cost)
    for (c, model_id, q), v in f.y_pool.items():
        f.milp.cost(v, w.waste * waste(f.problem, classes[c], model_id, q))
    for (c, gi, q), v in f.y_group.items():
        f.milp.cost(v, w.waste * waste(f.problem, classes[c], groups[gi].model, q))


def formulate(problem: Problem, split: Split, weights: Weights | None = None, *,
              place_all: bool = False) -> Formulation:
    """The program for `problem`; `place_all` forces u = 0 (used for the GPU lower bound)."""
    f = Formulation(problem, split)
    _variables(f)
    if place_all:
        for v in f.u.values():
            f.milp.upper[v] = 0.0
    _one_pattern_per_gpu(f)
    _balance(f)
    _capacity(f)
    _spread(f)
    _keep_free(f)
    _objective(f, weights or problem.policy.weights)
    return f


__all__ = ["Formulation", "PatternInfo", "formulate", "group_patterns", "key", "waste"]
