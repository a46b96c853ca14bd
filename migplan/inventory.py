"""The fleet inventory: hosts, how to reach them, and their GPUs (types and loader).

Two formats are read (README, "Inventory"):
  * migplan's own (`version: 1`, `hosts:` ...);
  * an Ansible YAML inventory as operators already have it (`all: children: hosts:`), with
    `ansible_host`, `ansible_port`, `ansible_user`, `ansible_ssh_private_key_file`,
    `ansible_become*` and `migplan_*` host or group variables.
"""

from __future__ import annotations

import fnmatch
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from migplan import names, yamldoc
from migplan.catalog import Catalog
from migplan.errors import CatalogError, InputError
from migplan.layout import Instance, Layout, check_layout
from migplan.yamldoc import Node

INVENTORY_VERSION = 1
HOOK_STAGES = ("pre_apply", "post_apply")


@dataclass(frozen=True)
class GpuSpec:
    """A GPU as the inventory declares it."""

    index: int
    model: str  # catalog model id
    uuid: str | None = None
    mig_enabled: bool | None = None  # None: not declared
    layout: Layout | None = None  # None: not declared (discover it)
    reserved: bool = False  # planner leaves it as it is and places nothing new on it
    excluded: bool = False  # migplan never touches or plans it


@dataclass(frozen=True)
class Hooks:
    """Commands run on the host around an apply (as mig-parted's apply hooks)."""

    pre_apply: tuple[str, ...] = ()
    post_apply: tuple[str, ...] = ()


@dataclass(frozen=True)
class Host:
    name: str
    address: str
    port: int | None = None  # None: ~/.ssh/config, else 22
    user: str | None = None
    key_file: str | None = None
    become: tuple[str, ...] = ()  # e.g. ('sudo', '-n'); empty when commands run as the login user
    groups: tuple[str, ...] = ()
    labels: tuple[tuple[str, str], ...] = ()
    gpus: tuple[GpuSpec, ...] = ()
    discover: bool = False
    hooks: Hooks = field(default_factory=Hooks)
    # As declared, so that they also apply to GPUs found by discovery (`discover: true`).
    reserved_gpus: tuple[int, ...] = ()
    excluded_gpus: tuple[int, ...] = ()

    def gpu(self, index: int) -> GpuSpec | None:
        return next((g for g in self.gpus if g.index == index), None)

    def is_reserved(self, index: int) -> bool:
        return index in self.reserved_gpus

    def is_excluded(self, index: int) -> bool:
        return index in self.excluded_gpus


@dataclass(frozen=True)
class Inventory:
    source: str
    hosts: tuple[Host, ...]

    def host(self, name: str) -> Host | None:
        return next((h for h in self.hosts if h.name == name), None)

    def gpus(self) -> Iterator[tuple[Host, GpuSpec]]:
        for h in self.hosts:
            for g in h.gpus:
                yield h, g

    def select(self, patterns: list[str]) -> Inventory:
        """Hosts whose name or a group matches one of the names (shell-style wildcards)."""
        if not patterns:
            return self
        keep = tuple(h for h in self.hosts
                     if any(fnmatch.fnmatch(n, p) for p in patterns for n in (h.name, *h.groups)))
        return Inventory(self.source, keep)


# --- shared settings (host, group and top-level vars use the same keys) ----------------------

_SETTING_KEYS = {"address", "port", "user", "key_file", "become", "labels", "reserved_gpus",
                 "excluded_gpus", "hooks", "discover", "gpus"}


def _become(node: Node) -> tuple[str, ...]:
    if node.is_null:
        return ()
    v = node.value()
    if v is False:
        return ()
    if v is True:
        return ("sudo", "-n")
    tokens = names.split_become(node.str())
    if tokens is None:
        node.fail("become must be plain words such as 'sudo -n' (no quotes, pipes or shell syntax)")
    return tokens


def _index_list(node: Node) -> tuple[int, ...]:
    out = []
    for n in node.list():
        i = n.int(minimum=0)
        if i in out:
            n.fail(f"GPU index {i} listed twice")
        out.append(i)
    return tuple(out)


def _labels(node: Node) -> dict[str, str]:
    out = {}
    for k, v in node.items():
        if not names.HOST_NAME.match(k):
            v.fail(f"label name {k!r} must be letters, digits, '.', '_' or '-'")
        out[k] = v.str()
    return out


def _hooks(node: Node) -> Hooks:
    f = node.fields(set(HOOK_STAGES))
    stages: dict[str, tuple[str, ...]] = {}
    for stage, n in f.items():
        items = [n] if not n.is_list else n.list()
        stages[stage] = tuple(i.str() for i in items)
    return Hooks(**stages)


def _gpu(node: Node, catalog: Catalog) -> GpuSpec:
    f = node.fields({"index", "model", "uuid", "mig", "layout"}, {"index", "model"})
    try:
        model = catalog.get(f["model"].str())
    except CatalogError as err:
        f["model"].fail(err.message, hint=err.hint)
    uuid = None
    if "uuid" in f:
        uuid = f["uuid"].str()
        if not names.GPU_UUID.match(uuid):
            f["uuid"].fail(f"{uuid!r} is not a GPU UUID (GPU-xxxxxxxx-...)")
    mig = f["mig"].bool() if "mig" in f else None
    layout = None
    if "layout" in f:
        if mig is False:
            f["layout"].fail("a GPU with 'mig: false' has no layout", hint="remove 'layout' or set 'mig: true'")
        insts = []
        for n in f["layout"].list():
            try:
                insts.append(Instance.parse(n.str()))
            except InputError as err:
                n.fail(err.message)
        layout = Layout.of(insts)
        conflicts = check_layout(model, layout)
        if conflicts:
            f["layout"].fail("invalid layout: " + "; ".join(c.message for c in conflicts),
                             hint=f"list valid layouts with 'migplan catalog layouts {model.id}'")
        mig = True
    return GpuSpec(index=f["index"].int(minimum=0), model=model.id, uuid=uuid, mig_enabled=mig, layout=layout)


def _gpus(node: Node, catalog: Catalog) -> list[GpuSpec]:
    if node.is_map:  # shorthand: {model: X, count: N}
        f = node.fields({"model", "count"}, {"model", "count"})
        try:
            model = catalog.get(f["model"].str()).id
        except CatalogError as err:
            f["model"].fail(err.message, hint=err.hint)
        return [GpuSpec(index=i, model=model) for i in range(f["count"].int(minimum=1))]
    gpus: list[GpuSpec] = []
    seen: dict[int, int] = {}
    for n in node.list():
        g = _gpu(n, catalog)
        if g.index in seen:
            n.fail(f"GPU index {g.index} listed twice (first at line {seen[g.index]})")
        seen[g.index] = n.line
        gpus.append(g)
    return sorted(gpus, key=lambda g: g.index)


@dataclass
class _Settings:
    """Merged settings for one host, with the node each came from (for error lines)."""

    values: dict[str, Any] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)

    def set(self, key: str, value: Any, node: Node) -> None:
        self.values[key] = value
        self.nodes[key] = node


def _read_setting(key: str, node: Node, catalog: Catalog) -> Any:
    readers: dict[str, Any] = {
        "address": _address,
        "port": _port,
        "user": _user,
        "key_file": lambda n: n.str(),
        "become": _become,
        "labels": _labels,
        "reserved_gpus": _index_list,
        "excluded_gpus": _index_list,
        "hooks": _hooks,
        "discover": lambda n: n.bool(),
        "gpus": lambda n: _gpus(n, catalog),
    }
    return readers[key](node)


def _address(node: Node) -> str:
    v = node.str()
    if not names.ADDRESS.match(v):
        node.fail(f"{v!r} is not a host name or IP address")
    return v


def _port(node: Node) -> int:
    p = node.int(minimum=1)
    if p > 65535:
        node.fail(f"port {p} is out of range 1-65535")
    return p


def _user(node: Node) -> str:
    v = node.str()
    if not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$", v):
        node.fail(f"{v!r} is not a valid user name")
    return v


def _build_host(name: str, name_node: Node, s: _Settings, groups: tuple[str, ...]) -> Host:
    v = s.values
    if not names.HOST_NAME.match(name):
        name_node.fail(f"host name {name!r} must be letters, digits, '.', '_' or '-'")
    gpus: list[GpuSpec] = list(v.get("gpus", []))
    discover = bool(v.get("discover", False))
    if discover and gpus and "gpus" in s.nodes:
        s.nodes["gpus"].fail("a host lists either 'gpus' or 'discover: true', not both",
                             hint="drop 'gpus' to discover them live, or drop 'discover'")
    if not gpus and not discover:
        name_node.fail(f"host {name!r} lists no GPUs", hint="add 'gpus:' or 'discover: true'")
    indices = {g.index for g in gpus}
    for key in ("reserved_gpus", "excluded_gpus"):
        for i in v.get(key, ()):
            if gpus and i not in indices:
                s.nodes[key].fail(f"GPU {i} is not among this host's GPUs ({sorted(indices)})")
    reserved, excluded = set(v.get("reserved_gpus", ())), set(v.get("excluded_gpus", ()))
    gpus = [GpuSpec(g.index, g.model, g.uuid, g.mig_enabled, g.layout, g.index in reserved, g.index in excluded)
            for g in gpus]
    return Host(
        name=name,
        address=v.get("address", name),
        port=v.get("port"),
        user=v.get("user"),
        key_file=v.get("key_file"),
        become=v.get("become", ()),
        groups=groups,
        labels=tuple(sorted(v.get("labels", {}).items())),
        gpus=tuple(gpus),
        discover=discover,
        hooks=v.get("hooks", Hooks()),
        reserved_gpus=tuple(sorted(reserved)),
        excluded_gpus=tuple(sorted(excluded)),
    )


# --- migplan's own format --------------------------------------------------------------------

def _native(root: Node, catalog: Catalog) -> list[Host]:
    f = root.fields({"version", "vars", "groups", "hosts"}, {"hosts"})
    yamldoc.check_version(f, root, INVENTORY_VERSION, "inventory")
    base = _Settings()
    if "vars" in f:
        for k, n in f["vars"].fields(_SETTING_KEYS - {"address"}).items():
            base.set(k, _read_setting(k, n, catalog), n)
    group_vars: dict[str, dict[str, tuple[Any, Node]]] = {}
    if "groups" in f:
        for gname, gnode in f["groups"].items():
            gf = gnode.fields({"vars"})
            group_vars[gname] = {}
            if "vars" in gf:
                for k, n in gf["vars"].fields(_SETTING_KEYS - {"address"}).items():
                    group_vars[gname][k] = (_read_setting(k, n, catalog), n)
    hosts = []
    for hname, hnode in f["hosts"].items():
        s = _Settings(dict(base.values), dict(base.nodes))
        hf = hnode.fields(_SETTING_KEYS | {"groups"}) if not hnode.is_null else {}
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
                s.set(k, _read_setting(k, n, catalog), n)
        hosts.append(_build_host(hname, hnode, s, groups))
    return hosts


# --- Ansible YAML inventory -----------------------------------------------------------------

_ANSIBLE_MAP = {
    "ansible_host": "address", "ansible_ssh_host": "address",
    "ansible_port": "port", "ansible_ssh_port": "port",
    "ansible_user": "user", "ansible_ssh_user": "user",
    "ansible_ssh_private_key_file": "key_file",
}
_MIGPLAN_VARS = {f"migplan_{k}" for k in _SETTING_KEYS - {"address", "port", "user", "key_file"}}
_RANGE = re.compile(r"\[([0-9a-z]+):([0-9a-z]+)(?::(\d+))?\]")


def expand_pattern(pattern: str) -> list[str]:
    """Ansible host ranges: `gpu[01:04]` -> gpu01..gpu04, `db-[a:c]`, stride `[1:9:2]`."""
    m = _RANGE.search(pattern)
    if not m:
        return [pattern]
    lo, hi, stride = m.group(1), m.group(2), int(m.group(3) or 1)
    head, tail = pattern[: m.start()], pattern[m.end():]
    if lo.isdigit() and hi.isdigit():
        width = len(lo) if lo.startswith("0") else 0
        items = [str(i).zfill(width) for i in range(int(lo), int(hi) + 1, stride)]
    elif len(lo) == 1 and len(hi) == 1 and lo.isalpha() and hi.isalpha():
        items = [chr(c) for c in range(ord(lo), ord(hi) + 1, stride)]
    else:
        raise InputError(f"cannot expand host range in {pattern!r}")
    return [x for item in items for x in expand_pattern(head + item + tail)]


@dataclass
class _AnsibleHost:
    groups: list[str] = field(default_factory=list)
    layers: list[tuple[int, dict[str, Node]]] = field(default_factory=list)  # (depth, vars)
    node: Node | None = None


def _ansible_walk(gname: str, gnode: Node, depth: int, inherited: list[tuple[int, dict[str, Node]]],
                  hosts: dict[str, _AnsibleHost], path: list[str]) -> None:
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
                hnode.fail(err.message)
            for hname in expanded:
                entry = hosts.setdefault(hname, _AnsibleHost(node=hnode))
                entry.groups.extend(g for g in (*path, gname) if g not in entry.groups and g != "all")
                entry.layers.extend(layers)
                if not hnode.is_null:
                    entry.layers.append((10_000, dict(hnode.items())))
    if "children" in gf and not gf["children"].is_null:
        for cname, cnode in gf["children"].items():
            if cname in path or cname == gname:
                cnode.fail(f"group {cname!r} contains itself")
            _ansible_walk(cname, cnode, depth + 1, layers, hosts, [*path, gname])


def _ansible_settings(hname: str, entry: _AnsibleHost, catalog: Catalog) -> _Settings:
    s = _Settings()
    become_on: tuple[bool, Node] | None = None
    extra: dict[str, tuple[str, Node]] = {}
    for _, layer in sorted(entry.layers, key=lambda item: item[0]):  # deeper groups, then host, win
        for var, n in layer.items():
            if var in _ANSIBLE_MAP:
                key = _ANSIBLE_MAP[var]
                s.set(key, _read_setting(key, n, catalog), n)
            elif var == "ansible_become":
                become_on = (n.bool(), n)
            elif var in ("ansible_become_method", "ansible_become_user"):
                extra[var] = (n.str(), n)
            elif var in _MIGPLAN_VARS:
                key = var[len("migplan_"):]
                s.set(key, _read_setting(key, n, catalog), n)
            elif var.startswith("migplan_"):
                known = ", ".join(sorted(_MIGPLAN_VARS))
                n.fail(f"unknown migplan variable {var!r}", hint=f"migplan variables: {known}")
    if become_on and become_on[0] and "become" not in s.values:
        method = extra.get("ansible_become_method", ("sudo", become_on[1]))
        if method[0] != "sudo":
            method[1].fail(f"become method {method[0]!r} is not supported; migplan runs 'sudo -n'",
                           hint="use ansible_become_method: sudo, or set migplan_become")
        argv = ["sudo", "-n"]
        if "ansible_become_user" in extra:
            argv += ["-u", _user(extra["ansible_become_user"][1])]
        s.set("become", tuple(argv), become_on[1])
    return s


def _ansible(root: Node, catalog: Catalog) -> list[Host]:
    entries: dict[str, _AnsibleHost] = {}
    for gname, gnode in root.items():
        _ansible_walk(gname, gnode, 0, [], entries, [])
    if not entries:
        root.fail("no hosts found in this Ansible inventory", hint="groups list hosts under 'hosts:'")
    hosts = []
    for hname in sorted(entries):
        entry = entries[hname]
        assert entry.node is not None
        settings = _ansible_settings(hname, entry, catalog)
        hosts.append(_build_host(hname, entry.node, settings, tuple(entry.groups)))
    return hosts


def parse_inventory(root: Node, catalog: Catalog) -> Inventory:
    if not root.is_map:
        root.fail("an inventory is a mapping (migplan 'version: 1' format or an Ansible YAML inventory)")
    keys = {k for k, _ in root.items()}
    hosts = _native(root, catalog) if "version" in keys or "hosts" in keys else _ansible(root, catalog)
    seen_addr: dict[tuple[str, int | None], str] = {}
    for h in hosts:
        key = (h.address, h.port)
        if key in seen_addr:
            raise InputError(f"hosts {seen_addr[key]!r} and {h.name!r} have the same address {h.address}"
                             + (f" and port {h.port}" if h.port else ""), source=root.source,
                             hint="each host needs its own address (or port)")
        seen_addr[key] = h.name
    return Inventory(root.source, tuple(hosts))


def load_inventory(path: str | os.PathLike[str], catalog: Catalog) -> Inventory:
    return parse_inventory(yamldoc.load(path), catalog)
