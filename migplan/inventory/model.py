"""The inventory's model, which every source (migplan's YAML, Ansible, Kubernetes nodes) produces:
an `Inventory` of `Host`s (how to reach them, their settings) and their `DeclaredGpu`s, the defaults a
host gets when a setting is not given, and how a hook's command line is split.
"""

from __future__ import annotations

import fnmatch
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field

from migplan.catalog import Catalog, GpuModel
from migplan.catalog.layout import Layout

INVENTORY_VERSION = 1
DEFAULT_LOCK_FILE = "/run/lock/migplan-apply.lock"  # FHS lock directory, writable by every user
DEFAULT_STATE_DIR = "/etc/migplan"  # where apply tells the host's tasks which MIG device is theirs
HOOK_STAGES = ("pre_apply", "post_apply", "on_move")  # on_move: per moved workload (docs/apply.md, "Hooks")


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
    # What its target may be, when a source knows how the host offers its GPUs (Kubernetes: the node's MIG
    # strategy, k8s_nodes.py): plain MIG profiles and "whole" (MIG disabled); None: anything the catalog allows
    # (model.state.GpuState.allowed)
    allowed: tuple[str, ...] | None = None


@dataclass(frozen=True)
class VgpuHost:
    """A hypervisor host's `vgpu` setting (issue 26, docs/vgpu.md "Planning"): its GPUs hold vGPUs for VMs, never
    bare-metal MIG workloads. `board`: the vGPU catalog's board of its GPUs; `modes`: the vGPU modes it may use
    (catalog.vgpu.MODES, within the board's); `count`: GPUs declared for offline planning (0: discovered)."""

    board: str
    modes: tuple[str, ...]
    count: int = 0


@dataclass(frozen=True)
class Hooks:
    """Commands run on the host around an apply (as mig-parted's apply hooks)."""

    pre_apply: tuple[str, ...] = ()
    post_apply: tuple[str, ...] = ()
    on_move: tuple[str, ...] = ()  # per moved workload, with its old and new MIG device (MIGPLAN_* env, JSON file)


@dataclass(frozen=True)
class JumpHop:
    """One jump host of a ProxyJump chain, as written (`[user@]host[:port]`); ~/.ssh/config fills in the rest."""

    host: str
    port: int | None = None
    user: str | None = None

    def __str__(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.host}{':' + str(self.port) if self.port else ''}"


@dataclass(frozen=True)
class SshArgs:
    """What an inventory's SSH options ask for (`ansible_ssh_common_args`, `ansible_ssh_extra_args`, `ssh_args`),
    read by migplan.inventory.ssh_args; the SSH adapter acts on it. Inventory values win over ~/.ssh/config.

    `proxy`: None (ssh_config decides), "none" (no proxy, whatever ssh_config says), "jump" (`jumps`, in order)
    or "command" (`command`, an argv run without a shell, with %h %p %r %n %% still to expand)."""

    proxy: str | None = None
    jumps: tuple[JumpHop, ...] = ()
    command: tuple[str, ...] = ()
    known_hosts: str | None = None  # UserKnownHostsFile: the target's host key is verified against this file
    notes: tuple[str, ...] = ()  # what was honoured, and where it came from (printed with --verbose)


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
    ssh_args: SshArgs | None = None  # ProxyJump/ProxyCommand/UserKnownHostsFile from the inventory
    vgpu: VgpuHost | None = None  # a hypervisor host: its GPUs are planned as vGPUs for VMs (docs/vgpu.md)

    def gpu(self, index: int) -> DeclaredGpu | None:
        return next((g for g in self.gpus if g.index == index), None)

    def is_reserved(self, index: int) -> bool:
        return index in self.reserved_gpus

    def is_excluded(self, index: int) -> bool:
        return index in self.excluded_gpus


@dataclass(frozen=True)
class LeftOut:
    """An inventory host migplan does not manage, and why (`inventory check` prints them). `host` is set for a
    host left out only because it has no GPU facts and sits in service groups alone: a `--limit` that names it
    still selects it."""

    name: str
    groups: tuple[str, ...]
    reason: str
    host: Host | None = None


@dataclass(frozen=True)
class Inventory:
    source: str
    hosts: tuple[Host, ...]
    # models the inventory itself defines, not in the catalog: GPUs without MIG read from Kubernetes labels
    # (`k8s_nodes`, `catalog.whole_gpus`); a GPU's `model` names one of these or a catalog model
    models: tuple[GpuModel, ...] = ()
    left_out: tuple[LeftOut, ...] = ()  # hosts of the inventory that are not among `hosts`, with the reason
    selected_by: tuple[str, ...] = ()  # how `hosts` were chosen, in words ("migplan_limit 'gpu_nodes'", ...)
    notes: tuple[str, ...] = ()  # what the source assumed or left as it is, one sentence each (printed as notes)

    def catalog(self, catalog: Catalog) -> Catalog:
        """`catalog` with this inventory's own models (looked up first)."""
        return Catalog((*self.models, *catalog.models), catalog.overridden) if self.models else catalog

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
        return Inventory(self.source, keep, self.models, self.left_out, self.selected_by, self.notes)


def hook_argv(line: str) -> list[str]:
    """A hook's command line split as a shell would, but run without one (no pipes, redirections or
    variables; write `sh -c '...'` for those)."""
    return shlex.split(line)
