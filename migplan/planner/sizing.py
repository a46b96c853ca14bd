"""Sizing rules: the one grammar, parser and evaluator of a workload's memory need (pure).

propose (`--sizing`, `--memory-percentile`/`--headroom`/`--headroom-min-mib`), replan, backtest (`--policy`,
`--sweep`) and the config file (`sizing:`, `planner:`) all state the memory rule through this module:

    RULE = STAT [+PCT%] [+Kspread] [+FLOORMiB] [,cap=CAPMiB]        or  auto  (where a caller allows it)

    STAT      p50 | p95 | p99 | max: the statistic of the workload's memory sized from (max: the observed peak)
    +PCT%     headroom as a share of STAT                                      (default 0%)
    +Kspread  headroom K x spread, spread = max - p50 of the same history       (default 0)
    +FLOORMiB the least headroom, MiB                                          (default: the planner's 512)
    ,cap=CAP  the most headroom, MiB (at least FLOOR)                          (default: none)

    need_mib = min(STAT + CAP, max(ceil(STAT x (1 + PCT/100) + K x spread), STAT + FLOOR))

`max+10%` is the planner's default (the peak plus 10%, at least 512 MiB) and evaluates exactly as it always
did; `max+1spread` gives a workload whose memory never moves the 512 MiB floor and one that swings by
gigabytes as much again as it swings; `max+5%+0.5spread+1024MiB,cap=8192MiB` combines all four parts.

Spread is max - p50 because both are in every profile document (no schema change) and it measures what a
per-workload rule can know of a workload's variability: how far above its typical level it has been seen to go.
A workload whose memory never leaves its level has spread ~0 and needs no more than the floor; one that spikes has
a spread of its spike. (A trend is seen as spread too: a workload that grew through the window has a max above its
median by about half the growth. What no per-workload statistic sees are bursts that move many workloads at once:
docs/profiles.md, "What the history cannot predict".)

`parse_rule` refuses anything else with the form and examples in the hint; `expand` turns a family such as
`max+{5,10,25}%` (brace lists, one or more) into its rules, as `backtest --sweep` runs them.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from migplan.errors import InputError

MEMORY_PERCENTILES = ("p50", "p95", "p99", "max")
AUTO = "auto"
DEFAULT_RULE = "max+10%"
DEFAULT_FLOOR_MIB = 512
MAX_HEADROOM = 10.0  # 1000%: as Policy.headroom
MAX_SPREAD = 100.0
MAX_MIB = 1_048_576  # 1 TiB: as config's headroom_min_mib
MAX_FAMILY = 1000  # rules one family may expand to
_NUM = r"[0-9]{1,6}(?:\.[0-9]{1,6})?"
_RULE = re.compile(rf"(?a)(?P<stat>p50|p95|p99|max)(?:\+(?P<pct>{_NUM})%)?(?:\+(?P<k>{_NUM})spread)?"
                   r"(?:\+(?P<floor>[0-9]{1,9})MiB)?(?:,cap=(?P<cap>[0-9]{1,9})MiB)?")
FORM = "STAT[+PCT%][+Kspread][+FLOORMiB][,cap=CAPMiB]"
EXAMPLES = "max+10%, max+1spread, p99+25%+1024MiB, max+5%+1.5spread,cap=8192MiB"
HINT = (f"write {FORM}, e.g. {EXAMPLES}; STAT is one of {', '.join(MEMORY_PERCENTILES)} (docs/profiles.md, "
        "'Sizing rules')")

T = TypeVar("T")


@dataclass(frozen=True)
class SizingRule:
    """One rule: the statistic, the headroom as a share of it and as a multiple of the spread, its floor and cap."""

    text: str  # as written (stripped)
    memory_percentile: str
    headroom: float
    headroom_min_mib: int
    headroom_spread: float = 0.0
    headroom_max_mib: int | None = None

    def fields(self) -> dict[str, Any]:
        """The planner Policy fields this rule sets."""
        return {"memory_percentile": self.memory_percentile, "headroom": self.headroom,
                "headroom_min_mib": self.headroom_min_mib, "headroom_spread": self.headroom_spread,
                "headroom_max_mib": self.headroom_max_mib}

    def policy(self, base: T) -> T:
        """`base` (a planner Policy) with this rule's memory fields."""
        return cast(T, dataclasses.replace(cast(Any, base), **self.fields()))

    @property
    def canonical(self) -> str:
        return rule_text(self.memory_percentile, self.headroom, self.headroom_spread, self.headroom_min_mib,
                         self.headroom_max_mib)

    @property
    def family(self) -> str:
        """What kind of rule: `STAT+PCT%`, `STAT+Kspread`, `STAT+PCT%+Kspread` (floor and cap aside)."""
        parts = [self.memory_percentile]
        if self.headroom or not self.headroom_spread:
            parts.append("PCT%")
        if self.headroom_spread:
            parts.append("Kspread")
        return "+".join(parts) + (",cap" if self.headroom_max_mib is not None else "")

    def need(self, stat: int, spread: int) -> int:
        return need_mib(stat, spread, self.headroom, self.headroom_spread, self.headroom_min_mib,
                        self.headroom_max_mib)


def need_mib(stat: int, spread: int, headroom: float, k: float, floor: int, cap: int | None) -> int:
    """need = min(stat + cap, max(ceil(stat x (1 + headroom) + k x spread), stat + floor)).

    Rounded to 6 decimals before the ceiling (900000 x 1.1 is 990000.0000000001 in binary floating point, not
    a MiB more); without a spread term the figure is exactly the planner's before rules had one."""
    x = stat * (1 + headroom)
    if k:
        x += k * max(0, spread)
    need = max(math.ceil(round(x, 6)), stat + floor)
    if cap is not None:
        need = min(need, stat + cap)
    return need


def _percent(fraction: float) -> str:
    return f"{round(fraction * 100, 4):g}%"


def _k(k: float) -> str:
    return f"{round(k, 6):g}"


def rule_text(stat: str, headroom: float, k: float = 0.0, floor: int = DEFAULT_FLOOR_MIB, cap: int | None = None,
              default_floor: int = DEFAULT_FLOOR_MIB) -> str:
    """The rule in the grammar's shortest form: `max+10%`, `max+1spread`, `p95`, `max+0MiB` (the bare peak)."""
    out = stat
    if headroom:
        out += f"+{_percent(headroom)}"
    if k:
        out += f"+{_k(k)}spread"
    if floor != default_floor:
        out += f"+{floor}MiB"
    if cap is not None:
        out += f",cap={cap}MiB"
    return out


def headroom_words(headroom: float, k: float, floor: int, cap: int | None) -> str:
    """The headroom in words, as plans and tables show it: "+10%, at least 512 MiB", "+1 x spread (max - p50),
    at least 512 MiB, at most 8192 MiB", "none". Rules without a spread or cap read as they always did."""
    if not headroom and not k and not floor and cap is None:
        return "none"
    parts = []
    if headroom or not k:
        parts.append(f"+{_percent(headroom)}")
    if k:
        parts.append(f"+{_k(k)} x spread (max - p50)")
    out = " ".join(parts)
    if floor:
        out += f", at least {floor} MiB"
    if cap is not None:
        out += f", at most {cap} MiB"
    return out


def _number(text: str, what: str, maximum: float, rule: str, key: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value > maximum:
        raise InputError(f"sizing rule {rule!r}: {what} {text} is above {round(maximum, 6):g}".replace("e+06", "e6")
                         if maximum < 1e6 else f"sizing rule {rule!r}: {what} {text} is above {int(maximum)}", key=key,
                         hint=HINT)
    return value


def parse_rule(text: str, default_floor: int = DEFAULT_FLOOR_MIB, *, key: str = "--policy") -> SizingRule:
    """`max+10%`, `p99+25%`, `max+0%+0MiB`, `max+1.5spread,cap=8192MiB`, `p95` (no headroom, the default floor)
    -> SizingRule; InputError naming `key` (the option or config key) and the form otherwise."""
    if not isinstance(text, str):
        raise InputError(f"sizing rule {text!r} is not text", key=key, hint=HINT)
    rule = text.strip()
    m = _RULE.fullmatch(rule)
    if m is None:
        what = " ('auto' is not allowed here)" if rule == AUTO else ""
        raise InputError(f"sizing rule {text!r} is not {FORM}{what}", key=key, hint=HINT)
    pct = _number(m["pct"], "headroom", MAX_HEADROOM * 100, rule, key) / 100 if m["pct"] is not None else 0.0
    k = _number(m["k"], "spread multiple", MAX_SPREAD, rule, key) if m["k"] is not None else 0.0
    floor = int(_number(m["floor"], "floor (MiB)", MAX_MIB, rule, key)) if m["floor"] is not None else default_floor
    cap = int(_number(m["cap"], "cap (MiB)", MAX_MIB, rule, key)) if m["cap"] is not None else None
    if cap is not None and cap < floor:
        raise InputError(f"sizing rule {text!r}: the cap {cap} MiB is below the floor {floor} MiB", key=key,
                         hint="the cap bounds the headroom from above, the floor from below: cap >= floor")
    return SizingRule(rule, m["stat"], pct, floor, k, cap)


def parse_share(value: object, *, key: str) -> float:
    """A share of workloads: `1%`, `0.5%` or a fraction such as 0.01 -> 0.01; InputError naming `key` unless it is
    from 0 to 1 (100%)."""
    text = str(value).strip() if not isinstance(value, bool) else ""
    try:
        share = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        share = math.nan
    if not math.isfinite(share) or not 0 <= share <= 1:
        raise InputError(f"{value!r} is not a share of workloads", key=key,
                         hint="write a percentage such as 1% or 0.5%, or a fraction such as 0.01")
    return share


def is_auto(text: object) -> bool:
    return isinstance(text, str) and text.strip() == AUTO


_BRACES = re.compile(r"\{([^{}]*)\}")


def expand(pattern: str, default_floor: int = DEFAULT_FLOOR_MIB, *, key: str = "--policy") -> list[SizingRule]:
    """A family of rules: every `{a,b,c}` list replaced by each of its values (the product of all lists), e.g.
    `max+{5,10}%` -> max+5%, max+10%; `max+{0.5,1}spread,cap={4096,8192}MiB` -> four rules. A pattern without
    braces is one rule. Each rule is parsed (InputError naming it)."""
    text = pattern.strip()
    pieces = _BRACES.split(text)  # literal, choices, literal, choices, ..., literal
    lists = [[c.strip() for c in pieces[i].split(",")] for i in range(1, len(pieces), 2)]
    if "{" in "".join(pieces[::2]) or "}" in "".join(pieces[::2]) or any(not c for cs in lists for c in cs):
        raise InputError(f"rule family {pattern!r}: braces must hold a comma-separated list of values, e.g. "
                         "max+{5,10,25}%", key=key, hint=HINT)
    count = math.prod(len(c) for c in lists)
    if count > MAX_FAMILY:
        raise InputError(f"rule family {pattern!r} expands to {count} rules (at most {MAX_FAMILY})", key=key)
    out: list[SizingRule] = []
    for combo in itertools.product(*lists):
        parts = [pieces[0]]
        for value, lit in zip(combo, pieces[2::2], strict=True):
            parts += [value, lit]
        out.append(parse_rule("".join(parts), default_floor, key=key))
    return out
