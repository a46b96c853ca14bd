"""The fleet inventory: hosts, how to reach them, and their GPUs, read from any of its sources (README,
"Inventory"; docs/inventory.md, docs/kubernetes.md).

  model.py      what every source produces: Inventory, Host, DeclaredGpu, Hooks, the defaults
                (lock file, state directory) and `hook_argv`
  settings.py   a host's settings, shared by every source: their keys and readers, `Settings`,
                `build_host`; Ansible variables as settings (`AnsibleHost`, `ansible_settings`)
  gpus.py       the `gpus` setting (a list, or `{model, count}`) and GPU index lists, layouts checked
  ssh_args.py   ssh options an inventory passes (`ansible_ssh_common_args`...): ProxyJump, ProxyCommand,
                UserKnownHostsFile honoured, anything else refused by name
  yaml_file.py  migplan's own YAML format; an Ansible YAML inventory walked into its hosts' variables
  ansible.py    Ansible beyond that file: `ansible-inventory --list` JSON, stdin, and any source
                ansible-core reads (INI, directories, plugins); `migplan_limit` selects the hosts
  k8s_nodes.py  `kubectl get nodes -o json`: GPUs and MIG state from NVIDIA's node labels (pure)
  load.py       `load_inventory`/`parse_inventory`: which source a document is, and the checks all
                hosts pass together

The sources import only model.py and the shared settings (settings.py, gpus.py, ssh_args.py), never this package
or load.py, which alone imports the sources.
May import: catalog, names, errors, yamldoc, text, host_patterns, mig_parted (a host's `mig_parted`
setting; Kubernetes layouts).
"""

from migplan.inventory.load import load_inventory, parse_inventory
from migplan.inventory.model import (
    DEFAULT_LOCK_FILE,
    DEFAULT_STATE_DIR,
    HOOK_STAGES,
    INVENTORY_VERSION,
    DeclaredGpu,
    Hooks,
    Host,
    Inventory,
    JumpHop,
    LeftOut,
    SshArgs,
    hook_argv,
)
from migplan.inventory.yaml_file import MAX_HOSTS, MAX_HOSTS_PER_PATTERN, expand_pattern

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
    "JumpHop",
    "LeftOut",
    "SshArgs",
    "expand_pattern",
    "hook_argv",
    "load_inventory",
    "parse_inventory",
]
