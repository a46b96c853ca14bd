"""Per-host outcomes of a fleet command and the exit code they add up to (README, "Exit codes")."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from migplan.errors import EXIT_FAILURE, EXIT_OK
from migplan.fleet.snapshot import Snapshot


class Outcome(str, enum.Enum):
    OK = "ok"  # everything asked of the host was done
    PARTIAL = "partial"  # some of it was done (e.g. some GPUs applied, others refused)
    FAILED = "failed"  # nothing was done on the host (unreachable, refused, pre-flight failed)


@dataclass(frozen=True)
class HostOutcome:
    host: str
    outcome: Outcome
    code: str | None = None  # the error's stable code when not OK
    message: str | None = None
    hint: str | None = None


def exit_code(outcomes: Iterable[HostOutcome]) -> int:
    """0 when every host is OK, else 1 (the other hosts' results are still reported)."""
    return EXIT_OK if all(o.outcome is Outcome.OK for o in outcomes) else EXIT_FAILURE


def discovery_outcomes(snapshot: Snapshot) -> list[HostOutcome]:
    """A host discovery could read is OK; one it could not is FAILED with its error."""
    out = []
    for h in snapshot.hosts:
        if h.error is None:
            out.append(HostOutcome(h.name, Outcome.OK))
        else:
            out.append(HostOutcome(h.name, Outcome.FAILED, h.error.code, h.error.message, h.error.hint))
    return out


def pool_outcomes(results: Iterable[Any]) -> list[HostOutcome]:
    """`adapters.pool.HostResult`s as outcomes: a host whose work returned is OK, one that raised is FAILED
    with its error's code, detail and hint."""
    return [HostOutcome(r.host, Outcome.OK) if r.ok else
            HostOutcome(r.host, Outcome.FAILED, r.error.code if r.error else None,
                        r.error.detail if r.error else None, r.error.hint if r.error else None)
            for r in results]
