"""The commands of every GPU a host's apply changes, in order: the plan's moves first, in the plan's migration order
(make-before-break where the target fits next to what is still there, stop-first otherwise; the `on_move` hooks
around each), then the rest of each GPU's actions in one batch. Every command is built from actions by
`fleet.steps.to_commands` (through `GpuChange.run_actions`); a failure is kept on its GPU, and on the GPUs a
move links to it, for the rollback."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence

from migplan.catalog.layout import Instance, Layout, check_layout
from migplan.errors import MigplanError
from migplan.fleet.devices import device_uuids
from migplan.fleet.gpu_change import FAILURES, GpuChange, Linked
from migplan.fleet.outcomes import ApplyOptions, MoveEvent, OnMove
from migplan.fleet.snapshot import DiscoveredHost
from migplan.model.gpu_plan import Migration


class HostChanges:
    """The steps of every GPU to change on a host: the plan's moves first, in step order (planner/migration.py,
    "Execution model": 0. instances leaving the layout that no mover runs on are destroyed; then per step the
    workloads in `stops` stop, a stop-first mover stops, the target GPU gets its MIG mode, the target instance
    is created, a make-before-break mover then leaves its source), then the rest of each GPU in one batch.

    todo: the GPUs to change by index; moves: the plan's migrations on this host, in step order; host: its name;
    devices: the MIG device UUID of each (GPU, instance) as read before (None: a whole MIG-disabled GPU); by_name:
    the moves by workload; left: the movers stopped at their source already; links: GPU -> the GPUs sharing an
    unfinished move with it (rolled back together); at: the GPU whose commands run now (the one a failure is on)."""

    def __init__(self, todo: Mapping[int, GpuChange], record: DiscoveredHost, moves: Sequence[Migration],
                 on_move: OnMove | None, options: ApplyOptions) -> None:
        self.todo, self.moves, self.on_move, self.options = todo, moves, on_move, options
        self.host = record.name
        self.devices: dict[tuple[int, Instance | None], str | None] = {
            (g.index, i.instance): next((c.uuid for c in i.compute_instances if c.uuid), None)
            for g in record.gpus for i in g.instances}
        self.devices.update({(g.index, None): g.uuid for g in record.gpus})  # a whole MIG-disabled GPU
        self.by_name = {m.workload: m for m in moves}
        self.left: set[str] = set()
        self.links: dict[int, set[int]] = {}
        self.at: GpuChange | None = None

    def go(self) -> None:
        """Every GPU's change: step 0, the moves, then what is left of each GPU (its failure is kept on it)."""
        self._clear_first()
        for m in self.moves:
            self._move(m)
        for g in self.todo.values():
            if g.failure is None:
                self._attempt([g], functools.partial(self._rest, g))

    def _clear_first(self) -> None:
        """Step 0: on GPUs with moves, destroy what leaves the layout and no mover runs on (capacity first)."""
        sources: dict[int, set[Instance]] = {}
        for m in self.moves:
            src, s_inst, _, _ = self._ends(m)
            if src is not None and s_inst is not None:
                sources.setdefault(src.index, set()).add(s_inst)
        touched = {e.gpu for m in self.moves for e in (m.source, m.target) if e is not None and e.host == self.host}
        for index in sorted(touched & set(self.todo)):
            g = self.todo[index]
            assert g.checkpoint is not None
            if g.checkpoint.layout is None:
                continue
            doomed = [i for i in g.checkpoint.layout.instances if _will_destroy(g, i)
                      and i not in sources.get(index, set())]
            if doomed:
                self._attempt([g], functools.partial(self._destroy, g, doomed))

    # -- one move ----------------------------------------------------------------------------
    def _ends(self, m: Migration) -> tuple[GpuChange | None, Instance | None, GpuChange | None, Instance | None]:
        src = self.todo.get(m.source.gpu) if m.source.host == self.host else None
        tgt = self.todo.get(m.target.gpu) if m.target is not None and m.target.host == self.host else None
        s_inst = Instance.parse(m.source.instance) if src is not None and m.source.instance else None
        t_inst = Instance.parse(m.target.instance) if tgt is not None and m.target and m.target.instance else None
        return src, s_inst, tgt, t_inst

    def _move(self, m: Migration) -> None:
        src, _, tgt, t_inst = self._ends(m)
        stopped = [self.by_name[w] for w in m.stops if w in self.by_name and w not in self.left]
        gpus = list({g.index: g for g in (src, tgt, *(self._ends(x)[0] for x in stopped)) if g is not None}.values())
        if not gpus or any(g.failure is not None for g in gpus):
            return
        ids = {g.index for g in gpus}
        for g in gpus:
            self.links.setdefault(g.index, set()).update(ids - {g.index})

        ready = self._ready(m)  # the target is on a GPU of this host that the plan leaves as it is: it exists

        def run() -> None:
            for other in stopped:
                self._leave(other, ids)
            mbb = m.make_before_break and not m.stop_first and m.workload not in self.left and (
                ready or (tgt is not None and t_inst is not None and self._can_create(tgt, t_inst)))
            if not mbb:
                self._leave(m, ids)
            if tgt is not None:
                self._arrive(tgt, t_inst)
            if tgt is not None or ready or mbb:
                self._hook(m, "move" if mbb else "start", ids)
            if mbb:
                self._leave(m, ids, hook=False)

        self._attempt(gpus, run)
        for g in gpus:  # the move is done (or failed and rolled back as a pair): its GPUs go on on their own
            self.links.get(g.index, set()).difference_update(ids)

    def _leave(self, m: Migration, ids: set[int], *, hook: bool = True) -> None:
        """`m`'s workload stops at its source (the hook first), and the source goes when the plan drops it."""
        if m.workload in self.left:
            return
        if hook:
            self._hook(m, "stop", ids)
        self.left.add(m.workload)
        src, s_inst, _, _ = self._ends(m)
        if src is not None and s_inst is not None and _will_destroy(src, s_inst):
            self._destroy(src, [s_inst])

    def _arrive(self, g: GpuChange, inst: Instance | None) -> None:
        """The target GPU in its mode, and the target instance created (None: the whole GPU, MIG disabled)."""
        assert g.live is not None
        if inst is None:
            if g.plan.target is None and g.live.layout is not None:
                self._rest(g)  # what is left there goes and MIG is disabled: the workload gets the whole GPU
            return
        if g.live.layout is None:  # enable MIG (and reset this one GPU on Ampere) before creating on it
            self.at = g
            g.run_actions(g.actions_to(None, Layout()), {}, Layout())
        if not _fits_now(g, inst):
            self._make_room(g, inst)
        self._create(g, inst)

    def _ready(self, m: Migration) -> bool:
        return m.target is not None and m.target.host == self.host and m.target.gpu not in self.todo \
            and (m.target.gpu, _parsed(m.target.instance)) in self.devices

    def _can_create(self, g: GpuChange, inst: Instance) -> bool:
        return g.live is not None and (g.live.layout is None or _fits_now(g, inst)) and _will_create(g, inst)

    def _attempt(self, gpus: Sequence[GpuChange], work: Callable[[], None]) -> None:
        try:
            work()
        except FAILURES as err:
            where = self.at if self.at is not None and self.at in gpus else gpus[0]
            failed = [g for g in gpus if g.failure is None]
            for g in failed:
                g.failure = err if g is where or len(failed) == 1 else Linked(
                    f"{err} (GPU {where.index}, which a move shares with this GPU)")
            for g in failed:
                for other in self.links.get(g.index, set()):
                    o = self.todo.get(other)
                    if o is not None and o.failure is None:
                        o.failure = Linked(f"rolled back with GPU {g.index}, whose change failed: {err}")

    def _hook(self, m: Migration, phase: str, gpus: set[int]) -> None:
        if self.on_move is None or self.options.dry_run:
            return
        self.at = None  # a failing hook fails the move: all of its GPUs
        _, s_inst, tgt, t_inst = self._ends(m)
        old = self.devices.get((m.source.gpu, s_inst)) if m.source.host == self.host else None
        new = None
        if tgt is not None and t_inst is not None and phase in ("move", "start"):
            new = device_uuids(tgt).get(t_inst)
        elif tgt is not None and phase in ("move", "start"):
            new = tgt.plan.uuid  # the whole GPU
        elif self._ready(m) and m.target is not None and phase in ("move", "start"):
            new = self.devices.get((m.target.gpu, _parsed(m.target.instance)))
        failed = self.on_move(MoveEvent(m.workload, phase, m.source, m.target, old, new, tuple(sorted(gpus))))
        if failed:
            raise MigplanError(f"on_move hook for {m.workload} ({phase}) failed: {failed}")

    # -- steps on one GPU, tracking what is there --------------------------------------------
    def _create(self, g: GpuChange, inst: Instance) -> None:
        assert g.live is not None and g.live.layout is not None
        if inst in g.live.layout.instances:
            return
        self.at = g
        after = Layout.of([*g.live.layout.instances, inst])
        g.run_actions(g.actions_to(g.live.layout, after), {}, after)

    def _destroy(self, g: GpuChange, items: Sequence[Instance]) -> None:
        assert g.live is not None and g.checkpoint is not None
        here = set(g.live.layout.instances) if g.live.layout is not None else set()
        gone = [i for i in items if i in here]
        if not gone:
            return
        self.at = g
        after = Layout.of(i for i in here if i not in gone)
        g.run_actions(g.actions_to(g.live.layout, after), g.checkpoint.gi_ids, after)

    def _make_room(self, g: GpuChange, inst: Instance) -> None:
        """Destroy, on the target's GPU, what the plan removes anyway and no waiting mover still runs on."""
        assert g.live is not None and g.live.layout is not None and g.plan.target is not None
        busy = {self._ends(m)[1] for m in self.moves if m.workload not in self.left and self._ends(m)[0] is g}
        doomed = [i for i in g.live.layout.instances if i not in g.plan.target.instances and i not in busy]
        for i in doomed:
            if _fits_now(g, inst):
                return
            self._destroy(g, [i])  # if it still does not fit, the create fails with the driver's error

    def _rest(self, g: GpuChange) -> None:
        """What is left of this GPU's change after its moves (all of the plan's actions when it had none): one
        batch of destroys, mode, one -cgi."""
        assert g.live is not None and g.checkpoint is not None
        self.at = g
        g.run_actions(g.planned_actions(), g.checkpoint.gi_ids, g.plan.target)


def _parsed(instance: str | None) -> Instance | None:
    return Instance.parse(instance) if instance is not None else None


def _will_destroy(g: GpuChange, inst: Instance) -> bool:
    assert g.checkpoint is not None
    target = set(g.plan.target.instances) if g.plan.target is not None else set()
    return g.checkpoint.layout is not None and inst in g.checkpoint.layout.instances and inst not in target


def _will_create(g: GpuChange, inst: Instance) -> bool:
    assert g.checkpoint is not None
    before = set(g.checkpoint.layout.instances) if g.checkpoint.layout is not None else set()
    return g.plan.target is not None and inst in g.plan.target.instances and inst not in before


def _fits_now(g: GpuChange, inst: Instance) -> bool:
    assert g.live is not None
    if g.live.layout is None:
        return False
    return not check_layout(g.model, Layout.of([*g.live.layout.instances, inst]))
