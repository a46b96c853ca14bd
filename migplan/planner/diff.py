"""Current layout vs target layout -> the ordered actions that turn one into the other (pure).

Only what changes: instances in both layouts (same profile, same start) are left alone. Order:
destroy compute then GPU instances (highest start first), change the MIG mode, create GPU instances at
their explicit placement then their default compute instance (lowest start first).
"""

from __future__ import annotations

from dataclasses import dataclass

from migplan.layout import Layout

OPS = ("destroy-ci", "destroy-gi", "disable-mig", "enable-mig", "create-gi", "create-ci")


@dataclass(frozen=True)
class Action:
    op: str  # one of OPS
    instance: str | None = None  # PROFILE@START for instance actions

    def __str__(self) -> str:
        return f"{self.op} {self.instance}" if self.instance else self.op


def diff(current: Layout | None, target: Layout | None) -> list[Action]:
    """`None` is MIG disabled. Equal layouts give no actions."""
    if current == target:
        return []
    have = set(current.instances) if current is not None else set()
    want = set(target.instances) if target is not None else set()
    out: list[Action] = []
    for inst in sorted(have - want, key=lambda i: (-i.start, i.profile)):
        out += [Action("destroy-ci", str(inst)), Action("destroy-gi", str(inst))]
    if current is None and target is not None:
        out.append(Action("enable-mig"))
    if current is not None and target is None:
        out.append(Action("disable-mig"))
    for inst in sorted(want - have):
        out += [Action("create-gi", str(inst)), Action("create-ci", str(inst))]
    return out
