"""Inventory YAML files (README, "Inventory"), in two formats:
  * migplan's own (`version: 1`, `vars:`, `groups:`, `hosts:` ...), read into hosts here;
  * an Ansible YAML inventory as operators already have it (`all: children: hosts:`), walked here into
    each host's groups and variable layers (`ansible_host`, `ansible_port`, `ansible_user`,
    `ansible_ssh_private_key_file`, `ansible_become*` and `migplan_*` host or group variables), which
    migplan.inventory.ansible selects (`migplan_limit`) and makes hosts of, as it does for `--list` JSON.

Bounds: an Ansible host pattern expands to at most `MAX_HOSTS_PER_PATTERN` hosts and an inventory
holds at most `MAX_HOSTS`; the settings' own bounds are migplan.inventory.settings'.
"""

from __future__ import annotations

import re
from typing import Any

from migplan import names, yamldoc
from migplan.catalog import Catalog
from migplan.errors import InputError
from migplan.inventory.model import INVENTORY_VERSION, Host
from migplan.inventory.settings import SETTING_KEYS, AnsibleHost, Settings, build_host, read_setting
from migplan.yamldoc import Node

MAX_HOSTS_PER_PATTERN = 10_000  # `gpu[0:99999999]` is a typo, not a fleet
MAX_HOSTS = 100_000


# --- migplan's own format --------------------------------------------------------------------

def native_hosts(root: Node, catalog: Catalog) -> list[tuple[Host, Node]]:
    """The hosts of a migplan inventory, each with the node to point errors at (top-level `vars`, then
    the host's groups' `vars` in the order it lists them, then its own settings)."""
    f = root.fields({"version", "vars", "groups", "hosts"}, {"hosts"})
    yamldoc.check_version(f, root, INVENTORY_VERSION, "inventory")
    base = Settings()
    if "vars" in f:
        for k, n in f["vars"].fields(SETTING_KEYS - {"address"}).items():
            base.set(k, read_setting(k, n, catalog), n)
    group_vars: dict[str, dict[str, tuple[Any, Node]]] = {}
    if "groups" in f:
        for gname, gnode in f["groups"].items():
            gf = gnode.fields({"vars"})
            group_vars[gname] = {}
            if "vars" in gf:
                for k, n in gf["vars"].fields(SETTING_KEYS - {"address"}).items():
                    group_vars[gname][k] = (read_setting(k, n, catalog), n)
    hosts = []
    for hname, hnode in f["hosts"].items():
        s = Settings(dict(base.values), dict(base.nodes))
        hf = hnode.fields(SETTING_KEYS | {"groups"}) if not hnode.is_null else {}
        groups: tuple[str, ...] = ()
        if "groups" in hf:
            groups = tuple(n.str() for n in hf["groups"].list())
            for g, gn in zip(groups, hf["groups"].list(), strict=True):
                if g not in group_vars:
                    gn.fail(f"unknown group {g!r}", hint="define it under 'groups:' or remove it")
                for k, (val, n) in group_vars[g].items():
                    s.set(k, val, n)
        for k, n in hf.items():
            if k != "groups":
                s.set(k, read_setting(k, n, catalog), n)
        hosts.append((build_host(hname, hnode, s, groups), hnode))
    return hosts


# --- Ansible YAML inventory -----------------------------------------------------------------

_RANGE = re.compile(r"\[([0-9A-Za-z]*):([0-9A-Za-z]*)(?::([0-9]*))?\]")
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"  # Ansible's order (string.ascii_letters)


def _range_items(lo: str, hi: str, stride_text: str | None, pattern: str) -> list[str]:
    shown = pattern if len(pattern) <= 60 else pattern[:57] + "..."

    def bad(message: str, hint: str | None = None) -> InputError:
        return InputError(f"host range in {shown!r}: {message}",
                          hint=hint or "write [START:END] or [START:END:STRIDE], e.g. gpu[01:16] or db-[a:f]")

    if stride_text is not None and not stride_text:
        raise bad("the stride after the second ':' is empty")
    if stride_text is not None and (len(stride_text) > 6 or int(stride_text) < 1):
        raise bad(f"stride {stride_text} must be 1..999999")
    stride = int(stride_text) if stride_text else 1
    if not hi:
        raise bad("the range has no end")
    lo = lo or "0"  # Ansible: `[:9]` starts at 0
    if names.is_ascii_digits(lo) and names.is_ascii_digits(hi):
        if len(lo) > 9 or len(hi) > 9:
            raise bad("numbers in a host range have at most 9 digits")
        if lo.startswith("0") and len(lo) > 1 and len(lo) != len(hi):
            raise bad(f"zero-padded {lo!r} and {hi!r} differ in width", hint=f"write both with {len(lo)} digits")
        start, end, width = int(lo), int(hi), len(lo) if lo.startswith("0") else 0
    elif len(lo) == 1 and len(hi) == 1 and lo in _LETTERS and hi in _LETTERS:
        start, end, width = _LETTERS.index(lo), _LETTERS.index(hi), -1
    else:
        raise bad(f"[{lo}:{hi}] is neither a number range nor a single-letter range")
    if start > end:
        raise bad(f"it runs backwards ({lo} > {hi}) and names no hosts", hint=f"write [{hi}:{lo}]")
    count = (end - start) // stride + 1
    if count > MAX_HOSTS_PER_PATTERN:
        raise bad(f"it names {count} hosts, more than the {MAX_HOSTS_PER_PATTERN} migplan expands from one pattern",
                  hint="check the range; split a larger fleet into several patterns")
    steps = range(start, end + 1, stride)
    return [_LETTERS[i] for i in steps] if width < 0 else [str(i).zfill(width) for i in steps]


def expand_pattern(pattern: str) -> list[str]:
    """Ansible host ranges: `gpu[01:04]` -> gpu01..gpu04, `db-[a:c]`, stride `[1:9:2]`.

    As Ansible's: zero-padded bounds have equal widths, `[:N]` starts at 0, letters run a..z then
    A..Z. Unlike Ansible, a range that runs backwards or has stride 0 is an error (Ansible yields
    no hosts or fails), and a pattern expands to at most `MAX_HOSTS_PER_PATTERN` hosts (several
    ranges in one pattern multiply).
    """
    done: list[str] = []
    todo = [pattern]
    while todo:
        item = todo.pop()
        m = _RANGE.search(item)
        if not m:
            done.append(item)
            continue
        head, tail = item[: m.start()], item[m.end():]
        expanded = [head + x + tail for x in _range_items(m.group(1), m.group(2), m.group(3), pattern)]
        if len(done) + len(todo) + len(expanded) > MAX_HOSTS_PER_PATTERN:
            raise InputError(f"host range in {pattern[:60]!r} names more than the {MAX_HOSTS_PER_PATTERN} hosts "
                             "migplan expands from one pattern", hint="check the ranges; split a larger fleet")
        todo.extend(reversed(expanded))
    return done


def _ansible_walk(gname: str, gnode: Node, depth: int, inherited: list[tuple[int, dict[str, Node]]],
                  hosts: dict[str, AnsibleHost], path: list[str]) -> None:
    if gnode.is_null:
        return
    gf = gnode.fields({"hosts", "vars", "children"})
    layers = list(inherited)
    if "vars" in gf and not gf["vars"].is_null:
        layers.append((depth, dict(gf["vars"].items())))
    if "hosts" in gf and not gf["hosts"].is_null:
        for pattern, hnode in gf["hosts"].items():
            try:
                expanded = expand_pattern(pattern)
            except InputError as err:
                hnode.fail_key(err.message, hint=err.hint)
            if len(hosts) + len(expanded) > MAX_HOSTS and any(h not in hosts for h in expanded):
                hnode.fail_key(f"the inventory names more than {MAX_HOSTS} hosts",
                               hint="split the fleet into inventories")
            for hname in expanded:
                entry = hosts.setdefault(hname, AnsibleHost(node=hnode))
                entry.groups.extend(g for g in (*path, gname) if g not in entry.groups and g != "all")
                if gname not in entry.direct:
                    entry.direct.append(gname)
                entry.layers.extend(layers)
                if not hnode.is_null:
                    entry.layers.append((10_000, dict(hnode.items())))
    if "children" in gf and not gf["children"].is_null:
        for cname, cnode in gf["children"].items():
            if cname in path or cname == gname:
                cnode.fail(f"group {cname!r} contains itself")
            _ansible_walk(cname, cnode, depth + 1, layers, hosts, [*path, gname])


def ansible_hosts(root: Node) -> dict[str, AnsibleHost]:
    """The hosts of an Ansible YAML inventory, by name, each with its groups and variable layers."""
    entries: dict[str, AnsibleHost] = {}
    for gname, gnode in root.items():
        _ansible_walk(gname, gnode, 0, [], entries, [])
    if not entries:
        root.fail("no hosts found in this Ansible inventory", hint="groups list hosts under 'hosts:'")
    return {h: entries[h] for h in sorted(entries)}
