"""The entries a plan is made of, shared by the planner that writes them and the fleet code that applies them.

`GpuPlan` (one GPU: the state the plan assumed, its target layout and the actions between them),
`WorkloadPlan` (where one workload goes), and the ordered migration of running workloads (`Endpoint`,
`Migration`: `planner.migration.order` computes them, `fleet.moves` executes them). Pure types: they
live below both `migplan.planner` and `migplan.fleet` so that neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from migplan.catalog.layout import Layout
from migplan.model.diff import Action
from migplan.model.state import GpuKey, GpuState, Hold


@dataclass(frozen=True)
class GpuPlan:
    """One GPU of the plan: the state the plan assumed, the layout it wants, and the actions between them."""

    observed: GpuState
    target: Layout | None
    actions: tuple[Action, ...]

    @property
    def host(self) -> str:
        return self.observed.host

    @property
    def index(self) -> int:
        return self.observed.index

    @property
    def key(self) -> GpuKey:
        return self.observed.key

    @property
    def model(self) -> str:
        return self.observed.model

    @property
    def uuid(self) -> str | None:
        return self.observed.uuid

    @property
    def current(self) -> Layout | None:
        return self.observed.current

    @property
    def hold(self) -> Hold | None:
        return self.observed.hold


@dataclass(frozen=True)
class WorkloadPlan:
    name: str
    workload: str
    status: str  # placed | at_risk | unplaced (WORKLOAD_STATUSES)
    host: str | None = None
    gpu: int | None = None
    instance: str | None = None  # PROFILE@START, or None for the whole GPU / unplaced
    memory_mib: int = 0  # the sized demand: statistic + headroom
    peak_mib: int = 0  # the observed memory peak (profile memory_mib.max)
    instance_mib: int | None = None  # memory of the instance (the GPU's for a whole GPU); None when unplaced
    margin_mib: int | None = None  # instance_mib - peak_mib; negative: it outgrew this instance in its history
    slices: int = 0
    kept: bool = False
    moved: bool = False
    reason: str | None = None  # why it is left out, or kept at risk

    @property
    def on_gpu(self) -> bool:
        """It has a place after the plan: placed, or kept at risk where it runs (host, gpu and instance set)."""
        return self.status in ON_GPU


# placed: fits its instance with headroom. at_risk: a running workload kept where it runs whose observed peak
# still fits its instance but whose peak plus headroom (or compute need, or pin) does not; it runs on, with its
# margin shown. unplaced ("left out"): no place at all, new demand that does not fit or a running workload
# whose peak no longer fits where it runs.
WORKLOAD_STATUSES = ("placed", "at_risk", "unplaced")
ON_GPU = frozenset(("placed", "at_risk"))


def instances_taken(workloads: tuple[WorkloadPlan, ...]) -> set[tuple[GpuKey, str]]:
    """(GPU, PROFILE@START) of every MIG instance a workload has after the plan (placed, or kept at risk)."""
    return {((w.host or "", w.gpu if w.gpu is not None else -1), w.instance)
            for w in workloads if w.on_gpu and w.instance is not None}


@dataclass(frozen=True)
class Endpoint:
    host: str
    gpu: int
    instance: str | None  # PROFILE@START; None: the whole MIG-disabled GPU

    @property
    def key(self) -> GpuKey:
        return (self.host, self.gpu)

    def __str__(self) -> str:
        return f"{self.host}:{self.gpu}/{self.instance or 'whole'}"


@dataclass(frozen=True)
class Migration:
    step: int  # 1-based execution order
    workload: str  # WorkloadPlan.name
    source: Endpoint
    target: Endpoint | None  # None: the workload stops and is not placed again
    make_before_break: bool  # the target can be created while the source still runs
    stop_first: bool  # the source must be stopped before the target can exist
    reason: str = ""  # why it moves, e.g. "frees gpu-07:3", "its instance is below its peak"
    stops: tuple[str, ...] = ()  # other workloads stopped at this step, before the target is created
    priority: int = 1  # the workload's priority (stop-first choices prefer stopping lower priorities)
