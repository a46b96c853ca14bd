"""ReplanPolicy: when a new plan is worth applying, and when changes may disrupt running work.

Maintenance windows are written as `DAYS HH:MM-HH:MM` in UTC, e.g. `Sat,Sun 02:00-06:00`, `Mon-Fri
01:00-03:30` or `daily 03:00-04:00`; a window whose end is before its start runs past midnight into the
next day. Outside every window only non-disruptive changes are made (idle instances). `always` is a
window of its own: every day, all day (the same as leaving `maintenance_windows` out).

Day names are matched whole, in English, any case (`Sat`, `Saturday`; not `Saturnalia`), ranges have both
ends (`Mon-Fri`, not `Mon-`), and digits are ASCII (`\\d` would also take `'٣'`). An empty list
(`maintenance_windows: []`) is refused by the config reader: it reads as "no window, so never", but
without windows `allow_disrupt` means "at any time", the opposite; an operator who wants that writes
`always` or leaves the key out.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

from migplan.errors import InputError

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_FULL_DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_WINDOW = re.compile(r"\A(?P<days>[A-Za-z,\-]+)[ \t]+"
                     r"(?P<h1>[0-9]{2}):(?P<m1>[0-9]{2})-(?P<h2>[0-9]{2}):(?P<m2>[0-9]{2})\Z")
ALWAYS = "always"


@dataclass(frozen=True)
class Window:
    days: frozenset[int]  # 0 = Monday (datetime.weekday())
    start_min: int  # minutes after midnight UTC
    end_min: int

    def contains(self, when: dt.datetime) -> bool:
        t = when.astimezone(dt.timezone.utc)
        minute, day = t.hour * 60 + t.minute, t.weekday()
        if self.start_min < self.end_min:
            return day in self.days and self.start_min <= minute < self.end_min
        # past midnight: the evening of a listed day, or the morning after it
        return (day in self.days and minute >= self.start_min) or ((day - 1) % 7 in self.days and
                                                                     minute < self.end_min)


def _day(name: str) -> int | None:
    """0..6 for a whole day name, short or long (`sat`, `saturday`); None for anything else."""
    for names in (DAYS, _FULL_DAYS):
        if name in names:
            return names.index(name)
    return None


def _days(text: str) -> frozenset[int]:
    text = text.lower()
    if text in ("daily", "*"):
        return frozenset(range(7))
    out: set[int] = set()
    for part in text.split(","):
        a, dash, b = part.partition("-")
        i, j = _day(a), _day(b) if dash else _day(a)
        if i is None or j is None:
            raise ValueError(part)
        out.update((i + k) % 7 for k in range(((j - i) % 7) + 1))
    return frozenset(out)


def parse_window(text: str, where: str = "maintenance_windows") -> Window:
    """`Sat,Sun 02:00-06:00` -> Window; InputError naming `where` otherwise."""
    hint = "write e.g. 'Sat,Sun 02:00-06:00', 'Mon-Fri 01:00-03:30', 'daily 03:00-04:00' (UTC) or 'always'"
    if text.strip().lower() == ALWAYS:
        return Window(frozenset(range(7)), 0, 24 * 60)
    m = _WINDOW.match(text.strip())
    if not m:
        raise InputError(f"{where}: {text!r} is not a maintenance window", hint=hint)
    try:
        days = _days(m["days"])
    except ValueError as e:
        raise InputError(f"{where}: {text!r}: unknown day {str(e)!r}", hint=hint) from None
    h1, m1, h2, m2 = (int(m[k]) for k in ("h1", "m1", "h2", "m2"))
    if h1 > 23 or h2 > 24 or m1 > 59 or m2 > 59 or (h2 == 24 and m2):
        raise InputError(f"{where}: {text!r}: no such time of day", hint=hint)
    start, end = h1 * 60 + m1, h2 * 60 + m2
    if start == end:
        raise InputError(f"{where}: {text!r} is empty (start equals end)", hint=hint)
    return Window(days, start, end)


@dataclass(frozen=True)
class ReplanPolicy:
    """Thresholds of the decision (config file `replan:` section; defaults here)."""

    min_free_gpus: int = 1  # apply when the plan frees at least this many whole GPUs
    min_waste_cut: float = 0.10  # ... or cuts allocated-but-unneeded memory by at least this share
    cooldown_h: float = 24.0  # a GPU changed within this many hours is left alone unless urgent
    allow_disrupt: bool = False  # running work may be moved (the planner's consolidation budget applies)
    max_moves: int | None = None  # the consolidation move budget when disruption is allowed
    windows: tuple[Window, ...] = ()  # disruption only inside these (none: whenever allow_disrupt)
    keep_runs: int = 50  # plans and results kept in the state directory
    # Solver time limit of a run unless `planner.time_limit` is set: a run from cron must end, and a
    # consolidation reaches the GPU bound long before CBC proves the fewest moves (bench/replan_fleet.py).
    time_limit_s: float = 20.0

    def may_disrupt(self, when: dt.datetime) -> bool:
        if not self.allow_disrupt:
            return False
        return not self.windows or any(w.contains(when) for w in self.windows)
