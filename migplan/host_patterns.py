"""Ansible host patterns (`--limit 'gpu_nodes:!drained'`), evaluated as Ansible evaluates them (pure).

Ansible's rules (ansible-core `inventory/manager.py`, `InventoryManager.get_hosts`; docs:
https://docs.ansible.com/ansible/latest/inventory_guide/intro_patterns.html), re-implemented here
from their documented behaviour and checked against the real ansible-core in
tests/test_host_patterns.py (no Ansible code is copied: ansible-core is GPL-3.0):

* A pattern string is split on `,` when it has one; otherwise it is one pattern when it reads as a
  single host address (a name, IPv4 or IPv6 address, optionally with `:PORT` or `[...]` ranges), and
  else is split on `:` (brackets kept whole: `web[1:3]` is not split).
* Plain patterns come first (a union, in order), then the `&` ones (intersection), then the `!` ones
  (exclusion), whatever order they were written in; with no plain pattern the start is `all`.
* One pattern matches group names and host names: a glob (`fnmatch`, `*?[...]`, case-sensitive,
  whole name) or, after `~`, a regular expression matched at the start of the name. A matching group
  brings all its hosts (its children's too); host names are also tried when no group matched or the
  pattern looks like a glob or address (`~`, `.`, `?`, `*`, `[`). A name that is a host is that host.
* `PATTERN[N]`, `[-N]`, `[N:M]` (inclusive) and `[N:]` pick from the matched hosts, in order (not after
  `~`); an index past the end is an error, as in Ansible.

Differences, each deliberate: a pattern matching nothing is ignored (Ansible warns), no implicit
`localhost` is created, and `@FILE` (a file of host names) is refused with a hint instead of read.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from migplan.errors import InputError

_RANGE = r"\[(?:[A-Za-z]:[A-Za-z]|[0-9]+:[0-9]+)(?::[0-9]+)?\]"
_LABEL = rf"(?:\w|{_RANGE})(?:[\w-]|{_RANGE})*(?<![-_])"
_HOSTNAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\Z")
_BRACKETED_PORT = re.compile(r"\[(.+)\]:([0-9]+)\Z")
_HOST_PORT = re.compile(r"((?:[^:\[\]]|\[[^\]]*\])*):([0-9]+)\Z")
_COLON_PARTS = re.compile(r"(?:[^\s:\[\]]|\[[^\]]*\])+")
_SUBSCRIPT = re.compile(r"(.+)\[(?:(-?[0-9]+)|([0-9]+)([:-])([0-9]*))\]\Z", re.S)
_GLOBBY = (".", "?", "*", "[")
MAX_PATTERN_CHARS = 4096


@dataclass(frozen=True)
class PatternInventory:
    """What patterns are matched against: the hosts in inventory order and each group's hosts
    (its own and its descendants', in Ansible's order)."""

    hosts: tuple[str, ...]
    groups: Mapping[str, tuple[str, ...]]


def group_hosts(direct: Mapping[str, Sequence[str]], children: Mapping[str, Sequence[str]],
                group: str) -> list[str]:
    """A group's hosts as Ansible orders them: the group itself, then its children level by level
    (each level in the order the groups were listed), each group's own hosts in order, no repeats."""
    order = [group]
    seen = {group}
    level = [group]
    while level:
        nxt: list[str] = []
        for g in level:
            for c in children.get(g, ()):
                if c not in seen:
                    seen.add(c)
                    order.append(c)
                    nxt.append(c)
        level = nxt
    out: list[str] = []
    done: set[str] = set()
    for g in order:
        for h in direct.get(g, ()):
            if h not in done:
                done.add(h)
                out.append(h)
    return out


def from_membership(hosts: Iterable[tuple[str, Iterable[str]]]) -> PatternInventory:
    """From (host, every group it is in, ancestors included) pairs, in inventory order; `all` holds every host."""
    names: list[str] = []
    groups: dict[str, list[str]] = {"all": []}
    for name, member_of in hosts:
        names.append(name)
        groups["all"].append(name)
        for g in member_of:
            if g != "all":
                groups.setdefault(g, []).append(name)
    return PatternInventory(tuple(names), {g: tuple(hs) for g, hs in groups.items()})


def _is_address(text: str) -> bool:
    """A single host address, optionally with a port: then `:` is not a pattern separator."""
    m = _BRACKETED_PORT.match(text) or _HOST_PORT.match(text)
    if m:
        text = m.group(1)
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        pass
    return bool(_HOSTNAME.match(text))


def split_patterns(pattern: str | Sequence[str]) -> list[str]:
    """`'a,b[1], c'` -> ['a', 'b[1]', 'c']; `'gpu:&h100:!drained'` -> ['gpu', '&h100', '!drained']."""
    if not isinstance(pattern, str):
        return [p for item in pattern for p in split_patterns(item)]
    if "," in pattern:
        parts = pattern.split(",")
    elif _is_address(pattern.strip()):
        parts = [pattern]
    else:
        parts = _COLON_PARTS.findall(pattern)
    return [p.strip() for p in parts if p.strip()]


def order_patterns(patterns: Sequence[str]) -> list[str]:
    plain = [p for p in patterns if p and p[0] not in "&!"]
    inter = [p for p in patterns if p and p[0] == "&"]
    excl = [p for p in patterns if p and p[0] == "!"]
    return (plain or ["all"]) + inter + excl


def _matcher(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern[1:] if pattern.startswith("~") else fnmatch.translate(pattern))
    except re.error as err:
        raise InputError(f"invalid host pattern {pattern!r}: {err}",
                         hint="after '~' comes a Python regular expression, e.g. ~gpu-(a|h)100-.*") from None


def _subscript(pattern: str) -> tuple[str, tuple[int, int | None] | None]:
    if pattern.startswith("~"):
        return pattern, None
    m = _SUBSCRIPT.match(pattern)
    if not m:
        return pattern, None
    expr, idx, start, _sep, end = m.groups()
    if idx:
        return expr, (int(idx), None)
    return expr, (int(start), int(end) if end else -1)


def _apply_subscript(hosts: list[str], sub: tuple[int, int | None] | None, pattern: str) -> list[str]:
    if not hosts or sub is None:
        return hosts
    start, end = sub
    if end:  # as Ansible: [N:0] is taken as [N] (end 0 is "no end")
        stop = len(hosts) - 1 if end == -1 else end
        return hosts[start:stop + 1]
    try:
        return [hosts[start]]
    except IndexError:
        raise InputError(f"no host matches the subscripted pattern {pattern!r}: only {len(hosts)} host(s)",
                         hint="subscripts count from 0: group[0] is the first host") from None


def _one(inv: PatternInventory, pattern: str) -> list[str]:
    expr, sub = _subscript(pattern)
    rx = _matcher(expr)
    out: list[str] = []
    groups = [g for g in inv.groups if rx.match(g)]
    for g in groups:
        out.extend(inv.groups[g])
    if not groups or expr.startswith("~") or any(c in expr for c in _GLOBBY):
        out.extend(h for h in inv.hosts if rx.match(h))
    return _apply_subscript(out, sub, pattern)


def select(inv: PatternInventory, pattern: str | Sequence[str]) -> list[str]:
    """The host names a pattern (or list of patterns) selects, in Ansible's order, without repeats."""
    text = pattern if isinstance(pattern, str) else ",".join(pattern)
    if len(text) > MAX_PATTERN_CHARS:
        raise InputError(f"host pattern is {len(text)} characters long, more than {MAX_PATTERN_CHARS}",
                         hint="select by group instead of listing every host")
    parts = split_patterns(pattern)
    for p in parts:
        if p.lstrip("&!").startswith("@"):
            raise InputError(f"host pattern {p!r}: migplan does not read '@FILE' host lists",
                             hint="name the hosts or groups, comma-separated")
        if p in ("&", "!"):
            raise InputError(f"host pattern {p!r} names nothing after {p!r}", hint="write e.g. 'gpu:!drained'")
    known = set(inv.hosts)
    hosts: list[str] = []
    for p in order_patterns(parts):
        if p in known:
            hosts.append(p)
            continue
        core = p[1:] if p[0] in "&!" else p
        that = _one(inv, core)
        if p[0] == "!":
            drop = set(that)
            hosts = [h for h in hosts if h not in drop]
        elif p[0] == "&":
            keep = set(that)
            hosts = [h for h in hosts if h in keep]
        else:
            have = set(hosts)
            hosts.extend(h for h in that if h not in have)
    return list(dict.fromkeys(hosts))
