"""What an apply of a host reports and takes: each GPU's outcome and result, the host's result, the apply's
options, the move events its hooks get, and the journal (one dict per event). Pure data."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from migplan.adapters.runner import FileToPut
from migplan.catalog.layout import Layout
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


@dataclass(frozen=True)
class HostApplyResult:
    """One host's apply: each GPU's result, or why the pre-flight skipped the host, and what was read at the end."""

    host: str
    gpus: tuple[GpuResult, ...]
    preflight: str | None = None  # why the host was skipped before anything ran (None: it passed)
    placement_source: str = ""  # how `-cgi PROFILE:START` support was established
    devices: DiscoveredHost | None = None  # the GPUs and MIG device UUIDs as read at the end (None: not read)
    inflight: FileToPut | None = None  # inflight.json as the host's apply left it (written by `apply_host`)
