"""Ansible inventories beyond the YAML file: `ansible-inventory --list` JSON, stdin, and (with the
optional `ansible-core`, `pip install 'migplan[ansible]'`) any source Ansible reads: INI files,
directories with group_vars/host_vars, inventory plugins (README, "Ansible"; docs/inventory.md).

* `--list` JSON (`{"_meta": {"hostvars": ...}, "all": {"children": [...]}, GROUP: {"hosts": [...],
  "children": [...], "vars": {...}}}`): the normalised form every Ansible inventory can be turned into
  (https://docs.ansible.com/ansible/latest/dev_guide/developing_inventory.html, "Inventory script
  conventions"). Variables are merged as Ansible merges them: groups by depth, then
  `ansible_group_priority`, then name, and host variables last. `--list` already merges group variables
  into `_meta.hostvars` (`--export` keeps them in the groups); both forms are read.
* Hosts without GPUs (control plane, etcd, bastions) are normal in these inventories: the hosts migplan
  manages are chosen with an Ansible host pattern, `migplan_limit` in the `all` group's variables (or
  a top-level `"migplan_limit": "gpu_nodes:!drained"` key), further narrowed by `--limit`
  (migplan.host_patterns). Hosts outside the pattern are left out (`Inventory.left_out`, with the reason);
  a selected host without GPU facts (`migplan_gpus`) is `discover: true`.
* Without a `migplan_limit`, a host without GPU facts that only service groups list (`SERVICE_GROUPS`: the
  Kubernetes control plane and etcd, Slurm's controller, login and NFS nodes, a bastion, as DeepOps and
  Kubespray name them) is not a discovery target: it is left out with that reason, unless it carries
  `migplan_discover: true` or a `--limit` selects it (migplan.commands.fleet.select_hosts).
* `ansible_ssh_common_args`/`ansible_ssh_extra_args` (ProxyJump, ProxyCommand, ...) are read by
  migplan.inventory.ssh_args; anything it does not honour is an error naming the host and the option.
* `ansible_become_password` cannot work with `sudo -n` (it never asks): a warning once per host names
  the sudoers rule that lets nvidia-smi run without one. The password is never read into a setting,
  logged or written anywhere.
* The ansible-core route reads the source with Ansible's own `InventoryManager`, `DataLoader` and
  `VariableManager` (so group_vars, host_vars, vault and plugins behave as in Ansible), keeps only
  the variables migplan reads, and hands them on as `--list` JSON to the same reader.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from migplan import host_patterns, yamldoc
from migplan.catalog import Catalog
from migplan.errors import InputError
from migplan.inventory.model import Host, LeftOut
from migplan.inventory.settings import (
    OPENSSH_ARGS_VAR,
    SSH_ARGS_VARS,
    AnsibleHost,
    Settings,
    ansible_settings,
    build_host,
)
from migplan.text import printable
from migplan.yamldoc import Node

log = logging.getLogger("migplan.ansible")

LIMIT_VAR = "migplan_limit"
ORIGINS = "migplan_origins"  # under `_meta` of the --list JSON read_with_ansible makes: where ssh options were set
BECOME_PASSWORD_VARS = ("ansible_become_password", "ansible_become_pass", "ansible_sudo_pass", "ansible_sudo_password")
LOGIN_PASSWORD_VARS = ("ansible_password", "ansible_ssh_pass", "ansible_ssh_password")  # never used either
# The variables migplan reads; everything else Ansible knows is dropped before it reaches migplan.
_READ_VARS = {"ansible_host", "ansible_ssh_host", "ansible_port", "ansible_ssh_port", "ansible_user",
              "ansible_ssh_user", "ansible_ssh_private_key_file", "ansible_connection", "ansible_become",
              "ansible_become_method", "ansible_become_user", "ansible_group_priority", LIMIT_VAR,
              *SSH_ARGS_VARS, OPENSSH_ARGS_VAR}
# Groups whose hosts run services, not GPU work, as DeepOps (config.example/inventory: kube_control_plane, etcd,
# slurm-master, slurm-nfs, slurm-cache, slurm-metric, slurm-login; before 2026 kube-master, nfs-server, maas) and
# Kubespray (inventory/sample/inventory.ini: kube-controlplane, etcd, calico-rr, bastion) name them; compared
# without case, '-' and '_'. A host without GPU facts that only these groups list is not discovered by default.
SERVICE_GROUPS = ("kube_control_plane", "kube-controlplane", "kube-master", "etcd", "calico-rr", "bastion",
                  "slurm-master", "slurm-nfs", "slurm-cache", "slurm-metric", "slurm-login", "nfs-server", "maas")
_SERVICE_KEYS = {g.lower().replace("-", "").replace("_", "") for g in SERVICE_GROUPS}
_GPU_FACTS = ("migplan_gpus", "migplan_discover", "migplan_mig_parted")
SERVICE_REASON = "no GPUs declared, only in service groups"
_GROUP_KEYS = {"hosts", "children", "vars"}
_HOST_LAYER = 1_000_000  # host variables win over every group
_YAML_SUFFIXES = (".yaml", ".yml", ".json")
_warned: set[tuple[str, str]] = set()  # (source, host): the become-password warning once per host


def is_list_json(root: Node) -> bool:
    """`ansible-inventory --list` output (or a dynamic inventory script's): it has `_meta`."""
    return root.is_map and any(k == "_meta" for k, _ in root.items())


# --- reading the --list document -------------------------------------------------------------------

def _names(node: Node, what: str) -> list[str]:
    if node.is_null:
        return []
    out = []
    for n in node.list():
        name = n.str()
        if not name.strip():
            n.fail(f"an empty {what} name")
        out.append(name)
    return out


def _groups(root: Node) -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, Node], Node | None,
                                 dict[str, Node], dict[str, dict[str, str]]]:
    """(direct hosts, children, vars node per group, top-level migplan_limit node, hostvars per host, where
    ansible-core found each host's ssh options)."""
    direct: dict[str, list[str]] = {}
    children: dict[str, list[str]] = {}
    gvars: dict[str, Node] = {}
    hostvars: dict[str, Node] = {}
    origins: dict[str, dict[str, str]] = {}
    limit: Node | None = None
    for key, node in root.items():
        if key == "_meta":
            # `_meta` also carries `profile` (ansible-inventory's own marker) and may carry more: read hostvars, and
            # `migplan_origins` (written by read_with_ansible: which group set a host's ssh options)
            meta = dict(node.items()) if not node.is_null else {}
            if "hostvars" in meta and not meta["hostvars"].is_null:
                for h, hv in meta["hostvars"].items():
                    if not hv.is_null and not hv.is_map:
                        hv.fail("host variables are a mapping of name: value")
                    hostvars[h] = hv
            if ORIGINS in meta and meta[ORIGINS].is_map:
                for h, o in meta[ORIGINS].items():
                    if o.is_map:
                        origins[h] = {k: printable(v.str(), 200) for k, v in o.items() if v.is_scalar}
            continue
        if key == LIMIT_VAR:
            limit = node
            continue
        if node.is_list:  # a dynamic inventory script may give a group as a bare list of hosts
            direct[key] = _names(node, "host")
            continue
        f = node.fields(_GROUP_KEYS) if not node.is_null else {}
        direct[key] = _names(f["hosts"], "host") if "hosts" in f else []
        children[key] = _names(f["children"], "group") if "children" in f else []
        if "vars" in f and not f["vars"].is_null:
            if not f["vars"].is_map:
                f["vars"].fail("group variables are a mapping of name: value")
            gvars[key] = f["vars"]
    for kids in children.values():
        for k in kids:
            direct.setdefault(k, [])
    return direct, children, gvars, limit, hostvars, origins


def _depths(children: Mapping[str, list[str]], groups: list[str], where: Node) -> dict[str, int]:
    """Each group's depth below `all` (the longest path, as Ansible counts it); a cycle is an error."""
    depth: dict[str, int] = {}
    roots = ["all"] if "all" in groups else [g for g in groups if not any(g in k for k in children.values())]
    for r in roots:
        depth.setdefault(r, 0)
        stack: list[tuple[str, tuple[str, ...]]] = [(r, (r,))]
        while stack:
            g, path = stack.pop()
            for c in children.get(g, ()):
                if c in path:
                    where.fail(f"group {c!r} contains itself (through {' > '.join(path)})")
                if depth.get(c, -1) < len(path):
                    depth[c] = len(path)
                    stack.append((c, (*path, c)))
    return {g: depth.get(g, 1) for g in groups}


def _ancestors(children: Mapping[str, list[str]]) -> dict[str, set[str]]:
    parents: dict[str, set[str]] = {}
    for g, kids in children.items():
        for k in kids:
            parents.setdefault(k, set()).add(g)
    out: dict[str, set[str]] = {}
    for g in parents:
        seen: set[str] = set()
        todo = list(parents[g])
        while todo:
            p = todo.pop()
            if p not in seen:
                seen.add(p)
                todo.extend(parents.get(p, ()))
        out[g] = seen
    return out


def _priority(vars_node: Node | None) -> int:
    if vars_node is None:
        return 1
    for k, n in vars_node.items():
        if k == "ansible_group_priority":
            v = n.value()
            try:
                return int(v)  # Ansible: int(value); INI values are strings
            except (TypeError, ValueError):
                n.fail(f"ansible_group_priority must be a number, got {v!r}")
    return 1


def _limit_text(node: Node) -> str:
    v = node.str()
    if not v.strip():
        node.fail("migplan_limit is an empty host pattern", hint="write e.g. 'gpu_nodes:!drained', or remove it")
    return v


def _default_limit(top: Node | None, gvars: Mapping[str, Node], hostvars: Mapping[str, Node]) -> str | None:
    """The inventory's own host pattern: a top-level key, the `all` group's variable, or (as `--list`
    merges the `all` variables into every host) the value every host carries."""
    if top is not None:
        return _limit_text(top)
    if "all" in gvars:
        for k, n in gvars["all"].items():
            if k == LIMIT_VAR:
                return _limit_text(n)
    values: dict[str, Node] = {}
    for hv in hostvars.values():
        for k, n in (hv.items() if hv.is_map else ()):
            if k == LIMIT_VAR:
                values.setdefault(n.str(), n)
    if len(values) > 1:
        first, second = list(values.values())[:2]
        second.fail(f"hosts carry different {LIMIT_VAR} values ({first.str()!r} and {second.str()!r})",
                    hint=f"set {LIMIT_VAR} once, in the 'all' group's vars")
    return _limit_text(next(iter(values.values()))) if values else None


def _become_note(source: str, hname: str, layers: list[tuple[int, dict[str, Node]]], user: str | None) -> None:
    """Warn (once per host) that a become or login password is set and cannot be used; never read its value."""
    if (source, hname) in _warned:
        return
    login = sorted({k for _, layer in layers for k in layer if k in LOGIN_PASSWORD_VARS})
    found = sorted({k for _, layer in layers for k in layer if k in BECOME_PASSWORD_VARS})
    if login:
        log.warning(f"host {hname}: {login[0]} is set, but migplan logs in with SSH keys "
                    "(ansible_ssh_private_key_file, ~/.ssh/config, ssh-agent), never a password, so it is not used "
                    "(and never logged or stored)")
    if login or found:
        _warned.add((source, hname))
    if not found:
        return
    who = user or "USER"
    log.warning(f"host {hname}: {found[0]} is set, but migplan runs 'sudo -n', which never asks for a password, "
                "so it is not used (and never logged or stored); let nvidia-smi run without one with the sudoers "
                f"rule '{who} ALL=(root) NOPASSWD: /usr/bin/nvidia-smi' (visudo -f /etc/sudoers.d/migplan)")


def list_hosts(root: Node, catalog: Catalog) -> Selection:
    """The hosts of an `ansible-inventory --list` document that the inventory's `migplan_limit`
    selects (without one: every host but the service hosts without GPU facts), each with the node to point
    errors at, and the hosts left out."""
    direct, children, gvars, top_limit, hostvars, origins = _groups(root)
    group_names = list(dict.fromkeys([*direct, *children]))
    all_hosts = list(dict.fromkeys(
        [*(host_patterns.group_hosts(direct, children, "all") if "all" in direct else []),
         *(h for g in group_names for h in direct.get(g, ())), *hostvars]))
    if not all_hosts:
        root.fail("no hosts found in this Ansible inventory", hint="groups list their hosts under 'hosts'")
    ancestors = _ancestors(children)
    member: dict[str, list[str]] = {h: [] for h in all_hosts}
    for g in group_names:
        for h in direct.get(g, ()):
            for x in (g, *sorted(ancestors.get(g, ()))):
                if x not in member[h]:
                    member[h].append(x)
    pinv = host_patterns.PatternInventory(
        tuple(all_hosts),
        {"all": tuple(all_hosts) if "all" not in direct else
         tuple(host_patterns.group_hosts(direct, children, "all")),
         **{g: tuple(host_patterns.group_hosts(direct, children, g)) for g in group_names if g != "all"}})
    pattern = _default_limit(top_limit, gvars, hostvars)
    chosen = _chosen(pinv, pattern, root.source)
    depth = _depths(children, group_names, root)
    order = sorted(gvars, key=lambda g: (depth.get(g, 1), _priority(gvars[g]), g))
    rank = {g: i for i, g in enumerate(order)}
    entries: dict[str, AnsibleHost] = {}
    listed_in: dict[str, list[str]] = {}
    for g in group_names:
        for h in direct.get(g, ()):
            listed_in.setdefault(h, []).append(g)
    for hname in chosen:
        hv = hostvars.get(hname)
        layers: list[tuple[int, dict[str, Node]]] = []
        for g in sorted((g for g in member[hname] + ["all"] if g in gvars), key=lambda g: rank[g]):
            layers.append((rank[g], dict(gvars[g].items())))
        if hv is not None and hv.is_map:
            layers.append((_HOST_LAYER, dict(hv.items())))
        entries[hname] = AnsibleHost(groups=[g for g in member[hname] if g not in ("all", "ungrouped")],
                                     layers=layers, node=hv if hv is not None else root,
                                     direct=listed_in.get(hname, []), origins=origins.get(hname, {}))
    return _selection(root.source, entries, catalog, pattern,
                      {h: tuple(g for g in member[h] if g not in ("all", "ungrouped")) for h in all_hosts})


def yaml_hosts(root: Node, entries: Mapping[str, AnsibleHost], catalog: Catalog) -> Selection:
    """The hosts of an Ansible YAML inventory (walked by migplan.inventory.yaml_file) that its `migplan_limit`
    (the `all` group's variable) selects, and those left out."""
    pinv = host_patterns.from_membership((h, e.groups) for h, e in entries.items())
    pattern = None
    for key, gnode in root.items():
        if key == "all" and gnode.is_map:
            for k, n in gnode.items():
                if k == "vars" and n.is_map:
                    pattern = next((_limit_text(v) for name, v in n.items() if name == LIMIT_VAR), None)
    chosen = _chosen(pinv, pattern, root.source)
    return _selection(root.source, {h: entries[h] for h in chosen}, catalog, pattern,
                      {h: tuple(e.groups) for h, e in entries.items()})


@dataclass(frozen=True)
class Selection:
    """What an Ansible inventory gives migplan: the hosts it manages (each with the node to point errors at), the
    hosts left out with the reason, and how the choice was made, in words."""

    hosts: list[tuple[Host, Node]]
    left_out: tuple[LeftOut, ...]
    selected_by: tuple[str, ...]


def _service_only(entry: AnsibleHost) -> list[str] | None:
    """The service groups that alone list a host without GPU facts (SERVICE_GROUPS); None when it is not one."""
    direct = [g for g in entry.direct if g not in ("all", "ungrouped")]
    if not direct or any(k in layer for _, layer in entry.layers for k in _GPU_FACTS):
        return None
    if all(g.lower().replace("-", "").replace("_", "") in _SERVICE_KEYS for g in direct):
        return direct
    return None


def _selection(source: str, entries: Mapping[str, AnsibleHost], catalog: Catalog, pattern: str | None,
               groups: Mapping[str, tuple[str, ...]]) -> Selection:
    """The chosen hosts built; without a pattern, service hosts without GPU facts held back (a --limit may still
    select them: `LeftOut.host`)."""
    left: list[LeftOut] = []
    if pattern is not None:
        left = [LeftOut(h, groups.get(h, ()), f"not in {LIMIT_VAR} {pattern!r}") for h in groups if h not in entries]
        chosen = build_hosts(source, entries, catalog)
        _ssh_notes(chosen)
        return Selection(chosen, tuple(left), (f"{LIMIT_VAR} {pattern!r}",))
    service = {h: gs for h, e in entries.items() if (gs := _service_only(e)) is not None}
    built = build_hosts(source, entries, catalog)
    kept = []
    for host, node in built:
        if host.name in service:
            listed = ", ".join(service[host.name])
            left.append(LeftOut(host.name, host.groups, f"{SERVICE_REASON}: {listed}", host))
        else:
            kept.append((host, node))
    _ssh_notes(kept)
    how = ("every host with GPUs declared or in a group other than the service groups (no migplan_limit)"
           if service else "every host (no migplan_limit)")
    return Selection(kept, tuple(left), (how,))


def _chosen(pinv: host_patterns.PatternInventory, pattern: str | None, source: str) -> list[str]:
    if pattern is None:
        return list(pinv.hosts)
    chosen = host_patterns.select(pinv, pattern)
    if not chosen:
        raise InputError(f"host pattern {pattern!r} ({LIMIT_VAR}) selects no host", source=source,
                         hint="check the group names with 'ansible-inventory -i SOURCE --graph'")
    return chosen


def build_hosts(source: str, entries: Mapping[str, AnsibleHost], catalog: Catalog) -> list[tuple[Host, Node]]:
    """Hosts from their merged variable layers: a host without GPU facts is `discover: true`, and a
    become password gets its warning."""
    out = []
    for hname, entry in entries.items():
        node = entry.node
        assert node is not None
        layers = [(d, _settings_vars(layer)) for d, layer in entry.layers]
        merged = AnsibleHost(entry.groups, layers, node, entry.direct, entry.origins)
        settings: Settings = ansible_settings(hname, merged, catalog)
        vgpu = settings.values.get("vgpu")  # a hypervisor host's `count` declares its GPUs (inventory.settings)
        declared = "gpus" in settings.values or (vgpu is not None and vgpu.count > 0)
        if not declared and "discover" not in settings.values:
            settings.set("discover", True, node)  # selected but no GPU facts: read them live
        # (an explicit migplan_discover: false without migplan_gpus stays the "lists no GPUs" error)
        _become_note(source, hname, layers, settings.values.get("user"))
        out.append((build_host(hname, node, settings, tuple(entry.groups)), node))
    return out


def _ssh_notes(hosts: list[tuple[Host, Node]]) -> None:
    """What was honoured of the selected hosts' ssh options, once per note (--verbose)."""
    notes: dict[str, list[str]] = {}
    for host, _ in hosts:
        for note in host.ssh_args.notes if host.ssh_args else ():
            notes.setdefault(note, []).append(host.name)
    for note, names in notes.items():
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        log.debug("host%s %s: %s", "s" if len(names) > 1 else "", shown, note)


def _settings_vars(layer: Mapping[str, Node]) -> dict[str, Node]:
    """The variables `ansible_settings` reads; `migplan_limit` (not a host setting) and Ansible's other
    variables are left out, so that only a misspelt `migplan_*` variable is an error."""
    keep = {}
    for k, n in layer.items():
        if k == LIMIT_VAR or k == "ansible_group_priority":
            continue
        if k in _READ_VARS or k in BECOME_PASSWORD_VARS or k in LOGIN_PASSWORD_VARS or k.startswith("migplan_"):
            keep[k] = _coerced(k, n)
    return keep


_INT_VARS = {"ansible_port", "ansible_ssh_port"}
_BOOL_VARS = {"ansible_become", "migplan_discover"}
_TRUE = {"y", "yes", "on", "1", "true", "t"}  # Ansible's boolean() spellings
_FALSE = {"n", "no", "off", "0", "false", "f"}


def _coerced(key: str, n: Node) -> Node:
    """INI `[group:vars]` values reach `--list` as strings ("2222", "yes"); read them as Ansible does
    (an int port, `boolean()` for become), keeping the node's place for error messages."""
    text = n.text
    if text is None or not isinstance(n.value(), str):
        return n
    value = text.strip()
    if key in _INT_VARS and value.isascii() and value.isdigit():
        return n.replaced(value)
    if key in _BOOL_VARS and value.lower() in _TRUE | _FALSE:
        return n.replaced("true" if value.lower() in _TRUE else "false")
    return n


# --- reading a source: a file, stdin, or anything ansible-core reads --------------------------------

def has_ansible_core() -> bool:
    return importlib.util.find_spec("ansible") is not None


def read_root(path: str | os.PathLike[str]) -> Node:
    """The inventory document as a node: `-` is stdin; a directory, or a file that is not YAML/JSON (an
    INI inventory), is read through ansible-core; so is a YAML Ansible inventory with `group_vars/` or
    `host_vars/` beside it when ansible-core is installed (so that those variables apply as in Ansible)."""
    source = os.fspath(path)
    if source == "-":
        return _stdin()
    if os.path.isdir(source):
        return read_with_ansible(source)
    try:
        root = yamldoc.load(source)
    except InputError as err:
        if source.lower().endswith(_YAML_SUFFIXES) or not os.path.isfile(source) or err.line is None:
            raise
        return read_with_ansible(source, yaml_error=err)
    if not root.is_map:
        if source.lower().endswith(_YAML_SUFFIXES):
            return root  # parse_inventory says what is wrong with it
        return read_with_ansible(source)
    keys = {k for k, _ in root.items()}
    native = bool(keys & {"version", "hosts", "_meta", "apiVersion", "kind", "items"})
    beside = os.path.dirname(os.path.abspath(source))
    if not native and has_ansible_core() and any(
            os.path.isdir(os.path.join(beside, d)) for d in ("group_vars", "host_vars")):
        return read_with_ansible(source)
    return root


def _stdin() -> Node:
    cap = yamldoc.max_file_bytes()
    text = sys.stdin.read(cap + 1)
    if len(text.encode()) > cap:
        raise InputError(f"more than {cap // (1 << 20)} MiB on stdin", source="<stdin>",
                         hint="raise the cap with MIGPLAN_MAX_FILE_MB")
    node = yamldoc.parse(text, "<stdin>")
    if node is None:
        raise InputError("nothing on stdin", source="<stdin>",
                         hint="pipe an inventory in, e.g. ansible-inventory -i hosts.ini --list | migplan ... -i -")
    return node


def read_with_ansible(source: str, *, yaml_error: InputError | None = None) -> Node:
    """Read any inventory source with ansible-core and return it as `--list` JSON (only the variables
    migplan reads; a become password reduced to `true`)."""
    if not has_ansible_core():
        what = "a directory" if os.path.isdir(source) else "not a migplan, Ansible YAML or --list JSON inventory"
        raise InputError(f"{what}" + (f" ({yaml_error.message})" if yaml_error else ""), source=source,
                         hint="INI inventories and directories are read with ansible-core: pip install "
                              "'migplan[ansible]'; or pass the JSON of 'ansible-inventory -i SOURCE --list'")
    doc = _ansible_list(source)
    return yamldoc.parse(json.dumps(doc, indent=1, default=str), f"{source} (read by ansible-core)") or _empty(source)


def _empty(source: str) -> Node:
    raise InputError("Ansible found no hosts", source=source)


def _ansible_list(source: str) -> dict[str, Any]:
    try:
        from ansible import constants as ansible_constants
        from ansible.errors import AnsibleError
        from ansible.inventory.manager import InventoryManager
        from ansible.parsing.dataloader import DataLoader
        from ansible.vars.manager import VariableManager
    except Exception as err:  # a broken install: say so instead of a traceback
        raise InputError(f"cannot use ansible-core: {printable(str(err), 300)}", source=source,
                         hint="reinstall it (pip install 'migplan[ansible]') or pass 'ansible-inventory --list' JSON"
                         ) from None
    ansible_constants.INVENTORY_UNPARSED_IS_FAILED = True  # a source no plugin reads is an error, not a warning
    try:
        loader = DataLoader()
        inv = InventoryManager(loader=loader, sources=[source])
        vm = VariableManager(loader=loader, inventory=inv)
        hosts = inv.get_hosts("all")
        if not hosts:
            raise InputError("Ansible found no hosts in this inventory", source=source,
                             hint="check it with 'ansible-inventory -i SOURCE --graph'")
        hostvars: dict[str, dict[str, Any]] = {}
        origins: dict[str, dict[str, str]] = {}
        for h in hosts:
            merged = vm.get_vars(host=h, include_hostvars=False)
            keep: dict[str, Any] = {}
            for k, v in merged.items():
                if k in BECOME_PASSWORD_VARS or k in LOGIN_PASSWORD_VARS:
                    keep[k] = True  # present; the value is never copied
                elif k in _READ_VARS or k.startswith("migplan_"):  # a misspelt migplan_ one: its error
                    keep[k] = _plain(v)
            hostvars[h.name] = keep
            found = {k: _origin(h, k, keep[k]) for k in SSH_ARGS_VARS if k in keep}
            if found:
                origins[h.name] = found
        doc: dict[str, Any] = {"_meta": {"hostvars": hostvars, ORIGINS: origins}}
        for g in inv.groups.values():
            doc[g.name] = {"hosts": [h.name for h in g.hosts], "children": [c.name for c in g.child_groups]}
        all_vars = inv.groups["all"].get_vars() if "all" in inv.groups else {}
        if LIMIT_VAR in all_vars:
            doc[LIMIT_VAR] = str(all_vars[LIMIT_VAR])
            for hv in hostvars.values():
                hv.pop(LIMIT_VAR, None)
        return doc
    except AnsibleError as err:
        raise InputError(f"Ansible cannot read this inventory: {printable(str(err), 600, multiline=True)}",
                         source=source, hint="check it with 'ansible-inventory -i SOURCE --list'") from None


def _origin(host: Any, var: str, value: Any) -> str:
    """Where Ansible took a host's variable from, in words: its own variables, the group (Ansible's order: depth,
    priority, name; the last wins) whose variables hold that value, else a group_vars/host_vars file."""
    if _plain(host.get_vars().get(var)) == value:
        return "the host's own variables"
    groups = [g for g in host.get_groups() if var in g.get_vars() and _plain(g.get_vars()[var]) == value]
    if groups:
        last = sorted(groups, key=lambda g: (g.depth, g.priority, g.name))[-1]
        return f"group {last.name!r}"
    return "a group_vars or host_vars file"


def _plain(v: Any) -> Any:
    """Ansible's tagged values as plain JSON values."""
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return float(v)
    if isinstance(v, str):
        return str(v)
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return str(v)
