"""What an apply of a host reports and takes: each GPU's outcome and result, the host's result, the apply's
options, the move events its hooks get, and the journal (one dict per event). Pure data."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from migplan.adapters.runner import FileToPut
from migplan.catalog.layout import Layout
from migplan.fleet.assignments import Assignment
from migplan.fleet.snapshot import DiscoveredHost
from migplan.model.gpu_plan import Endpoint

Journal = Callable[[dict[str, Any]], None]


class GpuOutcome(str, enum.Enum):
    """How one GPU's apply ended."""

    APPLIED = "applied"
    UNCHANGED = "unchanged"
    WOULD_APPLY = "would-apply"  # dry run
    SKIPPED = "skipped"  # busy, held, or not asked for
    REFUSED = "refused"  # the GPU changed since the plan was made
    ROLLED_BACK = "rolled-back"  # a step failed; the GPU is back as it was
    REPAIRED = "repaired"  # an interrupted apply had left it half-done: finished or put back to its checkpoint
    FAILED = "failed"  # a step failed and so did the rollback: state as read last is reported


@dataclass(frozen=True)
class GpuResult:
    """What the apply did to one GPU: its outcome and why, the commands it ran, and its layout at the end."""

    gpu: int
    outcome: GpuOutcome
    reason: str = ""
    commands: tuple[str, ...] = ()
    layout: list[str] | None = None  # as read at the end (None: MIG disabled or unknown)
    reset_needed: tuple[str, ...] = ()  # the driver refused the reset: what to stop before applying again
    repair: str = ""  # "finished" or "rolled back": what a repair of an interrupted apply did here ("": none)


@dataclass(frozen=True)
class ApplyOptions:
    """How to apply: whether busy instances may be destroyed, a dry run, each command's timeout (seconds)."""

    allow_disrupt: bool = False
    dry_run: bool = False
    timeout: float = 60.0


@dataclass(frozen=True)
class MoveEvent:
    """One moved workload, for the `on_move` hooks: where it was and goes, with the MIG device UUIDs.

    phase: "move" (make-before-break: both exist now, the source is destroyed next), "stop" (stop-first:
    the source is destroyed next) or "start" (stop-first: the target exists now)."""

    workload: str
    phase: str
    source: Endpoint
    target: Endpoint | None
    old_device: str | None
    new_device: str | None
    gpus: tuple[int, ...]  # the GPUs of this host it touches


OnMove = Callable[[MoveEvent], "str | None"]  # the hook's failure, or None
AfterApply = Callable[["HostApplyResult"], None]  # writes the host's files (and `inflight`), under the lock


def quiet(_event: dict[str, Any]) -> None:
    """A journal that keeps nothing."""


def shown(layout: Layout | None) -> str:
    """A layout for a person (None: MIG disabled)."""
    return "MIG disabled" if layout is None else str(layout)


def listed(layout: Layout | None) -> list[str] | None:
    """A layout as the results list it (None: MIG disabled)."""
    return None if layout is None else layout.as_list()


# REPAIRED: an interrupted apply's half-done GPU finished or put back: a layout known and verified either way
GOOD = (GpuOutcome.APPLIED, GpuOutcome.UNCHANGED, GpuOutcome.WOULD_APPLY, GpuOutcome.REPAIRED)


@dataclass(frozen=True)
class HostApplyResult:
    """One host's apply, the one record of it from `fleet.apply.apply_host` up to `migplan apply`'s output: each
    GPU's result, or why the pre-flight skipped the host, what was read at the end and, filled in by
    `commands.apply`, what the apply around it did (hooks, the host's files, a dry run's commands). A host whose
    work raised is `adapters.pool.HostResult`'s error until `commands.apply` turns it into `failure`."""

    host: str
    gpus: tuple[GpuResult, ...] = ()
    preflight: str | None = None  # why the host was skipped before anything ran (None: it passed)
    placement_source: str = ""  # how `-cgi PROFILE:START` support was established
    devices: DiscoveredHost | None = None  # the GPUs and MIG device UUIDs as read at the end (None: not read)
    inflight: FileToPut | None = None  # inflight.json as the host's apply left it (written by `apply_host`)
    # why the host did not end as planned although its pre-flight passed (a hook failed, its files were not
    # written, it was not reached, or not started after --fail-fast); None: it did
    failure: str | None = None
    commands: tuple[str, ...] = ()  # a dry run's recorded commands, in order
    assignments: tuple[Assignment, ...] = ()  # workload -> MIG device, as written on the host
    moves: tuple[dict[str, Any], ...] = ()  # the moves run, with old and new MIG devices (the on_move events)

    @property
    def error(self) -> str | None:
        """Why the host was not applied as planned: its pre-flight's refusal, or the failure after it."""
        return self.preflight if self.preflight is not None else self.failure

    @property
    def ok(self) -> bool:
        return self.error is None and all(g.outcome in GOOD for g in self.gpus)
