"""Reading an inventory: which source a document is (migplan's YAML, an Ansible YAML inventory,
`ansible-inventory --list` JSON, `kubectl get nodes -o json`), and the checks every source's hosts
pass together (one address and port per host). The only module of the package that imports the sources.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from migplan import yamldoc
from migplan.catalog import Catalog
from migplan.errors import InputError
from migplan.inventory import yaml_file
from migplan.inventory.model import Host, Inventory, LeftOut
from migplan.yamldoc import Node

if TYPE_CHECKING:  # mig_parted's parser is imported with k8s_nodes, only for a node list
    from migplan.mig_parted import ConfigMapConfigs


def parse_inventory(root: Node, catalog: Catalog, mig_configs: ConfigMapConfigs | None = None) -> Inventory:
    """`mig_configs`: the mig-parted ConfigMap the GPU Operator's MIG manager reads, for a node list only
    (`k8s_nodes.parse_nodes`)."""
    if not root.is_map:
        root.fail("an inventory is a mapping (migplan 'version: 1' format or an Ansible YAML inventory)")
    keys = {k for k, _ in root.items()}
    if "kind" in keys:  # a node list says its kind (imported only then: it brings mig_parted's parser)
        from migplan.inventory import k8s_nodes  # `kubectl get nodes -o json` (migplan/inventory/k8s_nodes.py)

        if k8s_nodes.is_node_list(root):
            return k8s_nodes.parse_nodes(root, catalog, mig_configs)
    if mig_configs is not None:
        raise InputError(f"{root.source}: {mig_configs.name} tells the MIG layouts of Kubernetes nodes: it is read "
                         "only with an inventory from 'kubectl get nodes -o json'",
                         hint="drop --mig-configmap, or pass the node list as the inventory")
    hosts: list[tuple[Host, Node]]
    left_out: tuple[LeftOut, ...] = ()
    selected_by: tuple[str, ...] = ()
    if "_meta" not in keys and ("version" in keys or "hosts" in keys):
        hosts = yaml_file.native_hosts(root, catalog)
    else:
        from migplan.inventory import ansible  # migplan_limit, hosts without GPUs, become passwords

        if "_meta" in keys:  # `ansible-inventory --list` JSON (migplan/inventory/ansible.py)
            chosen = ansible.list_hosts(root, catalog)
        else:
            chosen = ansible.yaml_hosts(root, yaml_file.ansible_hosts(root), catalog)
        hosts, left_out, selected_by = chosen.hosts, chosen.left_out, chosen.selected_by
    seen_addr: dict[tuple[str, int | None], str] = {}
    for h, node in hosts:
        key = (h.address, h.port)
        if key in seen_addr:
            node.fail_key(f"hosts {seen_addr[key]!r} and {h.name!r} have the same address {h.address}"
                          + (f" and port {h.port}" if h.port else ""), hint="each host needs its own address (or port)")
        seen_addr[key] = h.name
    return Inventory(root.source, tuple(h for h, _ in hosts), left_out=left_out, selected_by=selected_by)


def load_inventory(path: str | os.PathLike[str], catalog: Catalog,
                   mig_configs: ConfigMapConfigs | None = None) -> Inventory:
    from migplan.inventory import ansible  # `-` (stdin), INI files and directories (through ansible-core)

    with yamldoc.paused_gc():
        return parse_inventory(ansible.read_root(path), catalog, mig_configs)
