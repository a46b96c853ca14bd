"""The ordered migration of a plan: which running workload goes from which instance to which, and when.

A step is executable when, at that moment, the instances it needs exist or can be created: a
make-before-break step creates the target before the source is destroyed (the workload runs on both
for a moment); a stop-first step needs the source destroyed before the target fits (capacity), so the
workload stops. Apply executes these steps in `step` order. Pure.

Execution model (what `order` assumes, and what apply does):

0. Before step 1, every instance that leaves its GPU's layout and that no moving workload runs on is
   destroyed (the GPU's `destroy-*` actions for idle or, with consent, busy instances).
1. Step k, for `workload` W from `source` to `target`:
   a. every workload in `stops` is stopped where it runs and its instance destroyed when the plan drops
      it (they are stopped for W; each gets its own later step, with `stop_first`, to start again);
   b. when `stop_first` and W still runs, W is stopped at its source (the source is destroyed when the
      plan drops it);
   c. the target GPU is brought to its mode (enable or disable MIG: possible then, nothing runs on it)
      and the target instance is created unless it exists; W starts there (`target` None: W stops for
      good, it is left out of the plan);
   d. make-before-break: W is stopped at its source, and the source destroyed when the plan drops it.
2. After the last step the rest of each GPU's actions (creating instances no mover needs) run.

A target instance can be created at a moment when the GPU's mode is already the target's and the
instances that exist then, together with it, form a valid layout (catalog placement rules,
`layout.check_layout`); a whole-GPU target needs MIG disabled and nothing running on the GPU. The
instances that exist are the target layout's (kept or already created) and the sources of workloads
that have not left yet. Because every target layout is valid, once the workloads in the way have left
every target fits: `order` always finishes. Steps are chosen deterministically: in passes over the
moves (highest priority, then name, first) every move that fits is taken make-before-break; when none
fits, the move needing the fewest (then lowest-priority) workloads stopped goes stop-first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from migplan.catalog.geometry import GpuModel
from migplan.catalog.layout import Instance, Layout, check_layout
from migplan.model.gpu_plan import Endpoint, Migration
from migplan.model.state import GpuKey


@dataclass(frozen=True)
class Move:
    """One running workload the plan moves (or stops): the input of `order`."""

    workload: str
    priority: int
    source: Endpoint
    target: Endpoint | None
    reason: str = ""


@dataclass(frozen=True)
class GpuLayouts:
    """What `order` needs of one GPU: its model, current and target layout (None: MIG disabled)."""

    model: GpuModel
    current: Layout | None
    target: Layout | None


@dataclass
class _Gpu:
    model: GpuModel
    target: Layout | None
    mig: bool  # MIG enabled now
    exist: set[Instance] = field(default_factory=set)
    occupant: dict[Instance | None, str] = field(default_factory=dict)  # instance (None: whole) -> mover


def _inst(text: str | None) -> Instance | None:
    return Instance.parse(text) if text is not None else None


class _Order:
    def __init__(self, gpus: Mapping[GpuKey, GpuLayouts], moves: Sequence[Move]) -> None:
        self.moves = {m.workload: m for m in moves}
        self.gpus: dict[GpuKey, _Gpu] = {}
        sources: dict[GpuKey, set[Instance]] = {}
        for m in moves:
            inst = _inst(m.source.instance)
            if inst is not None:
                sources.setdefault(m.source.key, set()).add(inst)
        touched = {m.source.key for m in moves} | {m.target.key for m in moves if m.target is not None}
        for k in touched:  # the only GPUs the order looks at: a fleet's others need no state here
            g = gpus.get(k)
            if g is None:
                continue
            cur = set(g.current.instances) if g.current is not None else set()
            want = set(g.target.instances) if g.target is not None else set()
            self.gpus[k] = _Gpu(g.model, g.target, g.current is not None,
                                {i for i in cur if i in want or i in sources.get(k, set())})
        for m in moves:
            where = self.gpus.get(m.source.key)
            if where is None or _inst(m.source.instance) in where.occupant:
                raise ValueError(f"{m.workload}: source {m.source} is not a GPU of the plan, or another "
                                 "moving workload's source too")
            where.occupant[_inst(m.source.instance)] = m.workload
        self.running = set(self.moves)  # still on their source
        self.steps: list[Migration] = []

    def _leave(self, name: str) -> None:
        """`name` stops at its source; the source instance goes when the plan drops it."""
        m = self.moves[name]
        g = self.gpus[m.source.key]
        inst = _inst(m.source.instance)
        del g.occupant[inst]
        if inst is not None and (g.target is None or inst not in g.target.instances):
            g.exist.discard(inst)
        self.running.discard(name)

    def blockers(self, m: Move) -> set[str]:
        """Workloads that must leave before m's target can be created (empty: it can be now)."""
        assert m.target is not None
        g = self.gpus[m.target.key]
        inst = _inst(m.target.instance)
        if inst is None:  # the whole GPU: MIG off and nothing on it
            return set(g.occupant.values())
        if not g.mig:  # MIG must be enabled: nothing may run on the GPU
            return set(g.occupant.values())
        if inst in g.exist:
            return {g.occupant[inst]} if inst in g.occupant else set()
        if not check_layout(g.model, Layout.of([*g.exist, inst])):
            return set()
        # the occupied instances outside the target layout are in the way; keep back those not needed
        # out of the way, highest priority first
        out = {i: g.occupant[i] for i in g.exist if i in g.occupant and i is not None
               and (g.target is None or i not in g.target.instances)}
        keep = set(g.exist) - set(out)
        for i, _ in sorted(out.items(), key=lambda iw: (-self.moves[iw[1]].priority, iw[1])):
            if not check_layout(g.model, Layout.of([*keep, i, inst])):
                keep.add(i)
        return {who for i, who in out.items() if i not in keep}

    def _arrive(self, m: Move) -> None:
        assert m.target is not None
        g = self.gpus[m.target.key]
        inst = _inst(m.target.instance)
        if inst is None:
            g.mig, g.exist = False, set()
        else:
            if not g.mig:
                g.mig, g.exist = True, set()
            g.exist.add(inst)
        g.occupant[inst] = m.workload

    def step(self, m: Move, stops: Sequence[str] = ()) -> None:
        stopped_before = m.workload not in self.running
        for s in stops:
            self._leave(s)
        if m.target is None:
            stop_first = True
        else:
            left = self.blockers(m)
            if not left <= {m.workload}:  # cannot happen for valid target layouts; a damaged plan file
                raise ValueError(f"{m.workload}: its target {m.target} cannot be created "
                                 f"(blocked by {', '.join(sorted(left))})")
            stop_first = stopped_before or m.workload in left
        if stop_first and m.workload in self.running:
            self._leave(m.workload)
        if m.target is not None:
            self._arrive(m)
        if m.workload in self.running:
            self._leave(m.workload)
        self.steps.append(Migration(
            step=len(self.steps) + 1, workload=m.workload, source=m.source, target=m.target,
            make_before_break=not stop_first, stop_first=stop_first, reason=m.reason,
            stops=tuple(stops), priority=m.priority))

    def run(self) -> list[Migration]:
        rank = sorted(self.moves.values(), key=lambda m: (-m.priority, m.workload))
        for m in rank:  # workloads that leave the plan stop first: they free their instances for the rest
            if m.target is None:
                self.step(m)
        pending = [m for m in rank if m.target is not None]
        while pending:
            progress, rest = False, []
            for m in pending:
                if not self.blockers(m):
                    self.step(m)
                    progress = True
                else:
                    rest.append(m)
            pending = rest
            if pending and not progress:
                best = min(pending, key=self._stuck_cost)
                who = self.blockers(best)
                self.step(best, sorted((w for w in who if w != best.workload),
                                       key=lambda w: (self.moves[w].priority, w)))
                pending.remove(best)
        return self.steps

    def _stuck_cost(self, m: Move) -> tuple[int, int, str]:
        who = self.blockers(m) - {m.workload}
        return (len(who), sum(self.moves[w].priority for w in who), m.workload)


def order(gpus: Mapping[GpuKey, GpuLayouts], moves: Sequence[Move]) -> tuple[Migration, ...]:
    """The executable order of `moves` over `gpus` (module docstring). Every move's source must be in its
    GPU's current layout (or the whole MIG-disabled GPU), every target in the target layout."""
    return tuple(_Order(gpus, moves).run())


def freed_gpus(before: set[GpuKey], after: set[GpuKey]) -> tuple[GpuKey, ...]:
    """GPUs in use before the plan (instances, a running workload or processes) that it leaves empty."""
    return tuple(sorted(before - after))


__all__ = ["Endpoint", "GpuLayouts", "Migration", "Move", "freed_gpus", "order"]
