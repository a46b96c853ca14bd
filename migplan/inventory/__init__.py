"""The fleet inventory: hosts, how to reach them, and their GPUs, read from any of its sources (README,
"Inventory"; docs/inventory.md, docs/kubernetes.md).

  yaml_file.py  the model (Inventory, Host, DeclaredGpu, Hooks), the shared settings, migplan's own
                YAML format and the Ansible YAML walk, and `load_inventory` (split in the next step)
  ansible.py    Ansible beyond that file: `ansible-inventory --list` JSON, stdin, ansible-core sources
  k8s_nodes.py  `kubectl get nodes -o json`: GPUs and MIG state from NVIDIA's node labels (pure)

May import: catalog, names, errors, yamldoc, text, host_patterns, mig_parted.
"""

from migplan.inventory.yaml_file import (
    DEFAULT_LOCK_FILE,
    DEFAULT_STATE_DIR,
    HOOK_STAGES,
    INVENTORY_VERSION,
    MAX_HOSTS,
    MAX_HOSTS_PER_PATTERN,
    DeclaredGpu,
    Hooks,
    Host,
    Inventory,
    expand_pattern,
    hook_argv,
    load_inventory,
    parse_inventory,
)

__all__ = [
    "DEFAULT_LOCK_FILE",
    "DEFAULT_STATE_DIR",
    "HOOK_STAGES",
    "INVENTORY_VERSION",
    "MAX_HOSTS",
    "MAX_HOSTS_PER_PATTERN",
    "DeclaredGpu",
    "Hooks",
    "Host",
    "Inventory",
    "expand_pattern",
    "hook_argv",
    "load_inventory",
    "parse_inventory",
]
