"""The fleet inventory: hosts, how to reach them, and their GPUs (types and loader).

Two formats are read (README, "Inventory"):
  * migplan's own (`version: 1`, `hosts:` ...);
  * an Ansible YAML inventory as operators already have it (`all: children: hosts:`), with
    `ansible_host`, `ansible_port`, `ansible_user`, `ansible_ssh_private_key_file`,
    `ansible_become*` and `migplan_*` host or group variables.

Bounds: a host has at most `names.MAX_GPUS_PER_HOST` (64) GPUs with indices 0..63; an Ansible
host pattern expands to at most `MAX_HOSTS_PER_PATTERN` hosts and an inventory holds at most
`MAX_HOSTS`. A `key_file` that exists must be a regular file (checked here, after `~` expansion);
one that does not exist yet is accepted, and connecting reports it (as Ansible does).
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import shlex
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from migplan import names, yamldoc
from migplan.catalog import Catalog
from migplan.catalog.geometry import GpuModel, driver_version
from migplan.catalog.layout import Conflict, Instance, Layout, check_layout
from migplan.errors import CatalogError, InputError
from migplan.yamldoc import Node

INVENTORY_VERSION = 1
DEFAULT_LOCK_FILE = "/run/lock/migplan-apply.lock"  # FHS lock directory, writable by every user
DEFAULT_STATE_DIR = "/etc/migplan"  # where apply tells the host's tasks which MIG device is theirs
HOOK_STAGES = ("pre_apply", "post_apply", "on_move")  # on_move: per moved workload (docs/apply.md, "Hooks")
MAX_HOSTS_PER_PATTERN = 10_000  # `gpu[0:99999999]` is a typo, not a fleet
MAX_HOSTS = 100_000
_GPU_RANGE = f"0..{names.MAX_GPU_INDEX}"


@dataclass(frozen=True)
class DeclaredGpu:
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
    on_move: tuple[str, ...] = ()  # per moved workload, with its old and new MIG device (MIGPLAN_* env, JSON file)


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
    gpus: tuple[DeclaredGpu, ...] = ()
    discover: bool = False
    hooks: Hooks = field(default_factory=Hooks)
    # As declared, so that they also apply to GPUs found by discovery (`discover: true`).
    reserved_gpus: tuple[int, ...] = ()
    excluded_gpus: tuple[int, ...] = ()
    lock_file: str = DEFAULT_LOCK_FILE  # the apply lock on the host (flock)
    driver: str | None = None  # the host's NVIDIA driver version, for the profiles the catalog marks min_driver
    state_dir: str = DEFAULT_STATE_DIR  # on the host: assignments.json and env/<workload>.env after an apply
    connection: str = "ssh"  # ssh | local (this machine, no SSH: `connection: local`, ansible_connection)

    def gpu(self, index: int) -> DeclaredGpu | None:
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

    def gpus(self) -> Iterator[tuple[Host, DeclaredGpu]]:
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

CONNECTIONS = ("ssh", "local")
_SETTING_KEYS = {"driver", "state_dir", "connection", "lock_file", "address", "port", "user", "key_file", "become",
                 "labels", "reserved_gpus", "excluded_gpus", "hooks", "discover", "gpus",
                 "mig_parted"}  # mig_parted: {file, config}, layouts from a mig-parted file (migplan/mig_parted.py)


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


def _gpu_index(node: Node) -> int:
    i = node.int(minimum=0)
    if i > names.MAX_GPU_INDEX:
        node.fail(f"GPU index {i} is out of range {_GPU_RANGE}",
                  hint=f"a host has at most {names.MAX_GPUS_PER_HOST} GPUs, numbered from 0 as nvidia-smi lists them")
    return i


def _index_list(node: Node) -> tuple[int, ...]:
    out: list[int] = []
    for n in node.list():
        i = _gpu_index(n)
        if i in out:
            n.fail(f"GPU index {i} listed twice")
        out.append(i)
    return tuple(out)


def _labels(node: Node) -> dict[str, str]:
    out = {}
    for k, v in node.items():
        if not names.HOST_NAME.fullmatch(k):
            v.fail(f"label name {k!r} must be letters, digits, '.', '_' or '-'")
        out[k] = v.str()
    return out


def _hooks(node: Node) -> Hooks:
    f = node.fields(set(HOOK_STAGES))
    stages: dict[str, tuple[str, ...]] = {}
    for stage, n in f.items():
        items = [n] if not n.is_list else n.list()
        for i in items:
            _hook_argv(i)
        stages[stage] = tuple(i.str() for i in items)
    return Hooks(**stages)


def hook_argv(line: str) -> list[str]:
    """A hook's command line split as a shell would, but run without one (no pipes, redirections or
    variables; write `sh -c '...'` for those)."""
    return shlex.split(line)


def _hook_argv(node: Node) -> list[str]:
    try:
        argv = hook_argv(node.str())
    except ValueError as err:
        node.fail(f"cannot split the hook command: {err}", hint="check the quotes")
    if not argv or any(not t.isprintable() for t in argv):
        node.fail("a hook is a non-empty command line of printable characters")
    return argv


@functools.lru_cache(maxsize=4096)
def _layout_conflicts(model: GpuModel, layout: Layout) -> tuple[Conflict, ...]:
    """`check_layout`, once per model and layout: a large inventory repeats a few layouts thousands of times
    (a third of reading 7,000 GPUs went to checking them again; bench/large_inputs.py)."""
    return tuple(check_layout(model, layout))


# Layouts already read, by their entries' texts: a large inventory writes a few layouts thousands of times,
# and each entry was parsed again (Layouts and Instances are immutable, so GPUs may share them).
_LAYOUTS: dict[tuple[str, ...], Layout] = {}


def _gpu(node: Node, catalog: Catalog) -> DeclaredGpu:
    f = node.fields({"index", "model", "uuid", "mig", "layout"}, {"index", "model"})
    try:
        model = catalog.get(f["model"].str())
    except CatalogError as err:
        f["model"].fail(err.message, hint=err.hint)
    uuid = None
    if "uuid" in f:
        uuid = f["uuid"].str()
        if not names.GPU_UUID.fullmatch(uuid):
            f["uuid"].fail(f"{uuid!r} is not a GPU UUID (GPU-xxxxxxxx-...)")
    mig = f["mig"].bool() if "mig" in f else None
    layout = None
    if "layout" in f:
        if mig is False:
            f["layout"].fail("a GPU with 'mig: false' has no layout", hint="remove 'layout' or set 'mig: true'")
        entries = f["layout"].list()
        texts = tuple(n.str() for n in entries)
        layout = _LAYOUTS.get(texts)
        if layout is None:
            insts = []
            for n, text in zip(entries, texts, strict=True):
                try:
                    insts.append(Instance.parse(text))
                except InputError as err:
                    n.fail(err.message)
            layout = Layout.of(insts)
            if len(_LAYOUTS) < 10_000:
                _LAYOUTS[texts] = layout
        conflicts = _layout_conflicts(model, layout)
        if conflicts:
            f["layout"].fail("invalid layout: " + "; ".join(c.message for c in conflicts),
                             hint=f"list valid layouts with 'migplan catalog layouts {model.id}'")
        mig = True
    return DeclaredGpu(index=_gpu_index(f["index"]), model=model.id, uuid=uuid, mig_enabled=mig, layout=layout)


def _gpus(node: Node, catalog: Catalog) -> list[DeclaredGpu]:
    if node.is_map:  # shorthand: {model: X, count: N}
        f = node.fields({"model", "count", "mig"}, {"model", "count"})
        try:
            model = catalog.get(f["model"].str()).id
        except CatalogError as err:
            f["model"].fail(err.message, hint=err.hint)
        count = f["count"].int(minimum=1)
        if count > names.MAX_GPUS_PER_HOST:
            f["count"].fail(f"{count} GPUs is more than the {names.MAX_GPUS_PER_HOST} a host can have",
                            hint="count is the number of GPUs in one host")
        mig = f["mig"].bool() if "mig" in f else None  # the same MIG mode for every one of them
        return [DeclaredGpu(index=i, model=model, mig_enabled=mig)
                for i in range(count)]
    gpus: list[DeclaredGpu] = []
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
        "key_file": _key_file,
        "lock_file": _lock_file,
        "state_dir": _lock_file,
        "driver": _driver,  # the same rule: an absolute path of plain characters
        "connection": _connection,
        "become": _become,
        "labels": _labels,
        "reserved_gpus": _index_list,
        "excluded_gpus": _index_list,
        "hooks": _hooks,
        "discover": lambda n: n.bool(),
        "gpus": lambda n: _gpus(n, catalog),
        "mig_parted": lambda n: _mig_parted(n, catalog),
    }
    return readers[key](node)


def _mig_parted(node: Node, catalog: Catalog) -> Any:
    from migplan import mig_parted  # a host's declared layouts from a mig-parted config file

    return mig_parted.read_setting(node, catalog, yamldoc.load)


def _address(node: Node) -> str:
    v = node.str()
    if not names.ADDRESS.fullmatch(v):
        node.fail(f"{v!r} is not a host name or IP address")
    return v


def _driver(node: Node) -> str:
    v = node.str()
    try:
        driver_version(v)
    except CatalogError as err:
        node.fail(err.message, hint="write the version nvidia-smi prints, e.g. 535.129.03 (or the branch, 535)")
    return v


def _connection(node: Node) -> str:
    v = node.str()
    v = {"paramiko": "ssh", "smart": "ssh"}.get(v, v)  # Ansible's names for an SSH connection
    if v not in CONNECTIONS:
        node.fail(f"unknown connection {v!r}", hint="use ssh (the default) or local (this machine, no SSH)")
    return v


def _lock_file(node: Node) -> str:
    """An absolute path on the host, put on a command line as one token (so: plain characters only)."""
    v = node.str()
    if not v.startswith("/") or not names.SAFE_TOKEN.fullmatch(v) or len(v) > 255:
        node.fail(f"{v!r} is not an absolute path of letters, digits and ./_-",
                  hint=f"the default is {DEFAULT_LOCK_FILE}")
    return v


def _key_file(node: Node) -> str:
    """A private key path as written; if it exists (after `~` expansion) it must be a regular file."""
    v = node.str()
    if not v.strip() or "\0" in v or "\n" in v:
        node.fail(f"{v!r} is not a key file path", hint="give the path of a private key, e.g. ~/.ssh/id_ed25519")
    path = os.path.expanduser(v)
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return v  # not there (yet) or not ours to look at: connecting reports it, as ssh and Ansible do
    except OSError as err:
        node.fail(f"cannot use key file {v!r}: {err.strerror or err}")
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        node.fail(f"key file {v!r} is {kind}", hint="give the path of a private key file, e.g. ~/.ssh/id_ed25519")
    return v


def _port(node: Node) -> int:
    p = node.int(minimum=1)
    if p > 65535:
        node.fail(f"port {p} is out of range 1-65535")
    return p


def _user(node: Node) -> str:
    v = node.str()
    if not names.USER_NAME.fullmatch(v):
        node.fail(f"{v!r} is not a valid user name")
    return v


def _build_host(name: str, name_node: Node, s: _Settings, groups: tuple[str, ...]) -> Host:
    v = s.values
    if not names.HOST_NAME.fullmatch(name):
        name_node.fail_key(f"host name {name!r} must be letters, digits, '.', '_' or '-'")
    gpus: list[DeclaredGpu] = list(v.get("gpus", []))
    if "mig_parted" in v:  # layouts from the named mig-parted config (migplan/mig_parted.py)
        from migplan import mig_parted

        gpus = mig_parted.declare(v["mig_parted"], gpus)
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
    gpus = [DeclaredGpu(g.index, g.model, g.uuid, g.mig_enabled, g.layout, g.index in reserved, g.index in excluded)
            for g in gpus]
    return Host(
        name=name,
        address=v.get("address", name),
        port=v.get("port"),
        user=v.get("user"),
        key_file=v.get("key_file"),
        lock_file=v.get("lock_file", DEFAULT_LOCK_FILE),
        state_dir=v.get("state_dir", DEFAULT_STATE_DIR),
        driver=v.get("driver"),
        connection=v.get("connection", "ssh"),
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

def _native(root: Node, catalog: Catalog) -> list[tuple[Host, Node]]:
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
        hosts.append((_build_host(hname, hnode, s, groups), hnode))
    return hosts


# --- Ansible YAML inventory -----------------------------------------------------------------

_ANSIBLE_MAP = {
    "ansible_host": "address", "ansible_ssh_host": "address",
    "ansible_port": "port", "ansible_ssh_port": "port",
    "ansible_user": "user", "ansible_ssh_user": "user",
    "ansible_ssh_private_key_file": "key_file",
    "ansible_connection": "connection",
}
_MIGPLAN_VARS = {f"migplan_{k}" for k in _SETTING_KEYS - {"address", "port", "user", "key_file"}}
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
                hnode.fail_key(err.message, hint=err.hint)
            if len(hosts) + len(expanded) > MAX_HOSTS and any(h not in hosts for h in expanded):
                hnode.fail_key(f"the inventory names more than {MAX_HOSTS} hosts",
                               hint="split the fleet into inventories")
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


def _ansible(root: Node, catalog: Catalog) -> list[tuple[Host, Node]]:
    entries: dict[str, _AnsibleHost] = {}
    for gname, gnode in root.items():
        _ansible_walk(gname, gnode, 0, [], entries, [])
    if not entries:
        root.fail("no hosts found in this Ansible inventory", hint="groups list hosts under 'hosts:'")
    from migplan.inventory import ansible  # migplan_limit, hosts without GPUs, become passwords

    return ansible.yaml_hosts(root, {h: entries[h] for h in sorted(entries)}, catalog)


def parse_inventory(root: Node, catalog: Catalog) -> Inventory:
    if not root.is_map:
        root.fail("an inventory is a mapping (migplan 'version: 1' format or an Ansible YAML inventory)")
    keys = {k for k, _ in root.items()}
    if "kind" in keys:  # a node list says its kind (imported only then: it brings mig_parted's parser)
        from migplan.inventory import k8s_nodes  # `kubectl get nodes -o json` (migplan/inventory/k8s_nodes.py)

        if k8s_nodes.is_node_list(root):
            return k8s_nodes.parse_nodes(root, catalog)
    if "_meta" in keys:  # `ansible-inventory --list` JSON (migplan/ansible.py)
        from migplan.inventory import ansible

        hosts = ansible.list_hosts(root, catalog)
    else:
        hosts = _native(root, catalog) if "version" in keys or "hosts" in keys else _ansible(root, catalog)
    seen_addr: dict[tuple[str, int | None], str] = {}
    for h, node in hosts:
        key = (h.address, h.port)
        if key in seen_addr:
            node.fail_key(f"hosts {seen_addr[key]!r} and {h.name!r} have the same address {h.address}"
                          + (f" and port {h.port}" if h.port else ""), hint="each host needs its own address (or port)")
        seen_addr[key] = h.name
    return Inventory(root.source, tuple(h for h, _ in hosts))


def load_inventory(path: str | os.PathLike[str], catalog: Catalog) -> Inventory:
    from migplan.inventory import ansible  # `-` (stdin), INI files and directories (through ansible-core)

    with yamldoc.paused_gc():
        return parse_inventory(ansible.read_root(path), catalog)
