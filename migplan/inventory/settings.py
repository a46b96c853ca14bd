"""A host's settings, shared by every inventory source: the keys (host, group and top-level variables
use the same ones), the reader of each, `Settings` (merged values, with the node each came from for error
lines) and `build_host`, which checks the merged settings and makes the `Host`. Ansible variables
(`ansible_host`, `ansible_become*`, `migplan_*`) become the same settings through `ansible_settings`.

A `key_file` that exists must be a regular file (checked here, after `~` expansion); one that does not
exist yet is accepted, and connecting reports it (as Ansible does).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field, replace
from typing import Any

from migplan import names, yamldoc
from migplan.catalog import Catalog
from migplan.catalog.geometry import driver_version
from migplan.errors import CatalogError
from migplan.inventory.gpus import declared_gpus, gpu_indices
from migplan.inventory.model import (
    DEFAULT_LOCK_FILE,
    DEFAULT_STATE_DIR,
    HOOK_STAGES,
    DeclaredGpu,
    Hooks,
    Host,
    SshArgs,
    VgpuHost,
    hook_argv,
)
from migplan.inventory.ssh_args import SshArgsError, parse_ssh_args
from migplan.yamldoc import Node

CONNECTIONS = ("ssh", "local")
SETTING_KEYS = {"driver", "state_dir", "connection", "lock_file", "address", "port", "user", "key_file", "become",
                "labels", "reserved_gpus", "excluded_gpus", "hooks", "discover", "gpus",
                "mig_parted",  # mig_parted: {file, config}, layouts from a mig-parted file (migplan/mig_parted.py)
                "vgpu",  # a hypervisor host: {board, modes, count} (docs/vgpu.md, "Planning")
                "ssh_args"}  # ssh options: ProxyJump/-J, ProxyCommand, UserKnownHostsFile (inventory/ssh_args.py)
SSH_ARGS_VARS = ("ansible_ssh_common_args", "ansible_ssh_extra_args")  # in this order, as Ansible's ssh plugin
# Ansible's `ssh_args` (ControlMaster, ControlPersist, -C: how OpenSSH's client is run) means nothing to paramiko and
# is not read, except that a proxy there is an error (it would be lost): migplan_ssh_args or common_args takes it.
OPENSSH_ARGS_VAR = "ansible_ssh_args"


def _where(node: Node, what: str) -> str:
    """Where a value was written, for --verbose notes: `what, key.path (file:line)`."""
    place = f"{node.source}:{node.line}" if node.line else node.source
    return f"{what}, {node.path} ({place})" if node.path and node.path != what else f"{what} ({place})"


def _ssh_args(node: Node, what: str = "ssh_args", host: str | None = None, origin: str | None = None) -> SshArgs:
    """`what`: the variable; `origin`: where ansible-core found it ("group 'all'"), when the node is in the --list
    JSON migplan made from its answer (whose lines mean nothing to the operator)."""
    text = node.str()
    where = f"{what}, {origin}, {node.source}" if origin else _where(node, what)
    try:
        return parse_ssh_args(text, where)
    except SshArgsError as err:
        who = f" for host {host!r}" if host else ""
        node.fail(f"{what}{who}{f' (set in {origin})' if origin else ''}: {err}", hint=err.hint)


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


def _hook_argv(node: Node) -> list[str]:
    try:
        argv = hook_argv(node.str())
    except ValueError as err:
        node.fail(f"cannot split the hook command: {err}", hint="check the quotes")
    if not argv or any(not t.isprintable() for t in argv):
        node.fail("a hook is a non-empty command line of printable characters")
    return argv


@dataclass
class Settings:
    """Merged settings for one host, with the node each came from (for error lines)."""

    values: dict[str, Any] = field(default_factory=dict)
    nodes: dict[str, Node] = field(default_factory=dict)

    def set(self, key: str, value: Any, node: Node) -> None:
        self.values[key] = value
        self.nodes[key] = node


def read_setting(key: str, node: Node, catalog: Catalog) -> Any:
    """The value of setting `key` (one of SETTING_KEYS) written at `node`, checked."""
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
        "reserved_gpus": gpu_indices,
        "excluded_gpus": gpu_indices,
        "hooks": _hooks,
        "discover": lambda n: n.bool(),
        "gpus": lambda n: declared_gpus(n, catalog),
        "mig_parted": lambda n: _mig_parted(n, catalog),
        "ssh_args": _ssh_args,
        "vgpu": _vgpu,
    }
    return readers[key](node)


def _vgpu(node: Node) -> VgpuHost:
    """`vgpu: {board: L4, modes: [time_sliced], count: 2}`: the board by the vGPU catalog's id or type prefix, the
    modes among the board's that migplan plans (time_sliced, time_sliced_mixed, mig_backed), count optional."""
    from migplan.catalog import builtin_vgpu_catalog
    from migplan.catalog.vgpu import PLANNED_MODES as VGPU_MODES

    f = node.fields({"board", "modes", "count"}, {"board"})
    vcat = builtin_vgpu_catalog()
    try:
        board = vcat.get(f["board"].str())
    except CatalogError as err:
        f["board"].fail(err.message, hint=err.hint)
    offered = tuple(m for m in board.modes if m in VGPU_MODES)
    modes: list[str] = []
    if "modes" in f:
        for n in f["modes"].list():
            m = n.str()
            if m not in offered:
                n.fail(f"{board.id} has no vGPU mode {m!r} that migplan plans",
                       hint=f"its modes: {', '.join(offered)}")
            if m in modes:
                n.fail(f"mode {m!r} is listed twice")
            modes.append(m)
        if not modes:
            f["modes"].fail("a hypervisor host needs at least one vGPU mode", hint=f"{board.id}: {', '.join(offered)}")
    else:  # equal-size and MIG-backed where the board has them: mixed-size needs the host's placements (docs)
        modes = [m for m in offered if m != "time_sliced_mixed"]
    count = f["count"].int(minimum=1, maximum=names.MAX_GPUS_PER_HOST) if "count" in f else 0
    return VgpuHost(board.id, tuple(modes), count)


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


def build_host(name: str, name_node: Node, s: Settings, groups: tuple[str, ...]) -> Host:
    """The host from its merged settings, once they are checked together (GPUs or discovery, the
    reserved and excluded GPUs among the declared ones)."""
    v = s.values
    if not names.HOST_NAME.fullmatch(name):
        name_node.fail_key(f"host name {name!r} must be letters, digits, '.', '_' or '-'")
    gpus: list[DeclaredGpu] = list(v.get("gpus", []))
    if "mig_parted" in v:  # layouts from the named mig-parted config (migplan/mig_parted.py)
        from migplan import mig_parted

        gpus = mig_parted.declare(v["mig_parted"], gpus)
    discover = bool(v.get("discover", False))
    vgpu: VgpuHost | None = v.get("vgpu")
    if vgpu is not None and gpus:
        s.nodes["vgpu"].fail("a hypervisor host ('vgpu') declares its GPUs with 'vgpu: {count: N}' or discovers "
                             "them, not with 'gpus'", hint="drop 'gpus', or drop 'vgpu' for a bare-metal MIG host")
    if vgpu is not None and vgpu.count and discover:
        s.nodes["vgpu"].fail("'vgpu.count' declares GPUs for offline planning; with 'discover: true' they are read",
                             hint="drop 'count' or 'discover'")
    if vgpu is not None and not vgpu.count and not discover:
        s.nodes["vgpu"].fail(f"hypervisor host {name!r} declares no GPUs", hint="add 'count: N' or 'discover: true'")
    if discover and gpus and "gpus" in s.nodes:
        s.nodes["gpus"].fail("a host lists either 'gpus' or 'discover: true', not both",
                             hint="drop 'gpus' to discover them live, or drop 'discover'")
    if not gpus and not discover and vgpu is None:
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
        ssh_args=v.get("ssh_args"),
        become=v.get("become", ()),
        groups=groups,
        labels=tuple(sorted(v.get("labels", {}).items())),
        gpus=tuple(gpus),
        discover=discover,
        hooks=v.get("hooks", Hooks()),
        reserved_gpus=tuple(sorted(reserved)),
        excluded_gpus=tuple(sorted(excluded)),
        vgpu=vgpu,
    )


# --- Ansible variables (an Ansible YAML inventory and `ansible-inventory --list`) -------------

_ANSIBLE_MAP = {
    "ansible_host": "address", "ansible_ssh_host": "address",
    "ansible_port": "port", "ansible_ssh_port": "port",
    "ansible_user": "user", "ansible_ssh_user": "user",
    "ansible_ssh_private_key_file": "key_file",
    "ansible_connection": "connection",
}
_MIGPLAN_VARS = {f"migplan_{k}" for k in SETTING_KEYS - {"address", "port", "user", "key_file"}}


@dataclass
class AnsibleHost:
    """A host as the Ansible sources find it: its groups and its variable layers, before they are merged."""

    groups: list[str] = field(default_factory=list)
    layers: list[tuple[int, dict[str, Node]]] = field(default_factory=list)  # (depth, vars)
    node: Node | None = None
    direct: list[str] = field(default_factory=list)  # the groups that list the host themselves (not by a child)
    origins: dict[str, str] = field(default_factory=dict)  # variable -> where ansible-core found it ("group 'all'")


def ansible_settings(hname: str, entry: AnsibleHost, catalog: Catalog) -> Settings:
    """A host's Ansible variables merged (deeper layers win) and read as migplan settings."""
    s = Settings()
    become_on: tuple[bool, Node] | None = None
    extra: dict[str, tuple[str, Node]] = {}
    ssh_vars: dict[str, Node] = {}
    for _, layer in sorted(entry.layers, key=lambda item: item[0]):  # deeper groups, then host, win
        for var, n in layer.items():
            if var in SSH_ARGS_VARS or var == OPENSSH_ARGS_VAR:
                ssh_vars[var] = n
            elif var in _ANSIBLE_MAP:
                key = _ANSIBLE_MAP[var]
                s.set(key, read_setting(key, n, catalog), n)
            elif var == "ansible_become":
                become_on = (n.bool(), n)
            elif var in ("ansible_become_method", "ansible_become_user"):
                extra[var] = (n.str(), n)
            elif var in _MIGPLAN_VARS:
                key = var[len("migplan_"):]
                s.set(key, read_setting(key, n, catalog), n)
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
    _ansible_ssh_args(hname, entry, ssh_vars, s)
    return s


def _names_a_proxy(text: str) -> bool:
    lowered = text.lower()
    return "proxycommand" in lowered or "proxyjump" in lowered or any(w.startswith("-j") for w in lowered.split())


def _ansible_ssh_args(hname: str, entry: AnsibleHost, ssh_vars: dict[str, Node], s: Settings) -> None:
    """`ansible_ssh_common_args` then `ansible_ssh_extra_args` (each merged as Ansible merges variables) as one
    ssh command line, as Ansible's ssh plugin passes them; `migplan_ssh_args` replaces both."""
    openssh = ssh_vars.get(OPENSSH_ARGS_VAR)
    if openssh is not None and not openssh.is_null and "ssh_args" not in s.values and _names_a_proxy(openssh.str()):
        openssh.fail(f"{OPENSSH_ARGS_VAR} for host {hname!r} names a proxy, but migplan does not read "
                     f"{OPENSSH_ARGS_VAR} (ControlMaster and the like, for OpenSSH's client)",
                     hint="move the ProxyJump/ProxyCommand to ansible_ssh_common_args, or set migplan_ssh_args")
    given = [(var, ssh_vars[var]) for var in SSH_ARGS_VARS if var in ssh_vars and not ssh_vars[var].is_null
             and ssh_vars[var].str().strip()]
    if not given:
        return
    if "ssh_args" in s.values:
        old: SshArgs = s.values["ssh_args"]
        skipped = ", ".join(var for var, _ in given)
        s.set("ssh_args", replace(old, notes=(*old.notes, f"{skipped} not used: migplan_ssh_args replaces it")),
              s.nodes["ssh_args"])
        return
    parts = [_ssh_args(n, var, hname, entry.origins.get(var)) for var, n in given]
    if len(parts) == 1:
        s.set("ssh_args", parts[0], given[0][1])
        return
    var, node = given[-1]
    text = " ".join(n.str() for _, n in given)
    try:
        both = parse_ssh_args(text, " and ".join(v for v, _ in given))
    except SshArgsError as err:  # each is fine alone: they disagree
        node.fail(f"{given[0][0]} and {var} for host {hname!r}: {err}", hint=err.hint)
    s.set("ssh_args", replace(both, notes=tuple(n for p in parts for n in p.notes)), node)
