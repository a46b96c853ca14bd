"""The ordered migration of a plan: which running workload goes from which instance to which, and when.

A step is executable when, at that moment, the instances it needs exist or can be created: a
make-before-break step creates the target before the source is destroyed (the workload runs on both
for a moment); a stop-first step needs the source destroyed before the target fits (capacity), so the
workload stops. Apply executes these steps in `step` order. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Endpoint:
    host: str
    gpu: int
    instance: str | None  # PROFILE@START; None: the whole MIG-disabled GPU


@dataclass(frozen=True)
class Migration:
    step: int  # 1-based execution order
    workload: str  # WorkloadPlan.name
    source: Endpoint
    target: Endpoint | None  # None: the workload stops and is not placed again
    make_before_break: bool  # the target can be created while the source still runs
    stop_first: bool  # the source must be stopped before the target can exist
    reason: str = ""  # why it moves, e.g. "frees gpu-07:3", "its instance is below its peak"
