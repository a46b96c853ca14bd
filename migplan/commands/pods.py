"""`--pods FILE|-|kubectl`: the demand of a cluster's pods (`kubectl get pods -A -o json`) merged with the measured
profiles.

The reading and merging are pure (migplan/pods.py); this module only reads the file or stdin, or the cluster live
(`--pods kubectl`: `commands.k8s_live`, through the one kubectl adapter), and reports what it made of the pods.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from migplan import yamldoc
from migplan.catalog import Catalog
from migplan.commands import Report, quiet
from migplan.errors import InputError
from migplan.inventory import Inventory
from migplan.inventory.k8s_nodes import STRATEGY
from migplan.model.state import FleetState
from migplan.pods import PodList, pod_demand, read_pods
from migplan.profiles import ProfileSet

if TYPE_CHECKING:
    from migplan.adapters.kubectl import KubectlOptions

STRATEGY_LABEL = "k8s.mig.strategy"  # the host label migplan/inventory/k8s_nodes.py keeps `STRATEGY` as


def read_pod_list(path: str, kubectl: KubectlOptions | None = None) -> PodList:
    """The pods of a file, of stdin for `-` (both bounded by MIGPLAN_MAX_FILE_MB), or of the cluster for `kubectl`
    (`kubectl get pods -A -o json` with `kubectl`'s kubeconfig and context)."""
    from migplan.commands.context import LIVE

    if path == LIVE:
        from migplan.commands.k8s_live import read_pods_live

        return read_pods_live(kubectl)[0]
    if path == "-":
        cap = yamldoc.max_file_bytes()
        text = sys.stdin.read(cap + 1)
        if len(text.encode()) > cap:
            raise InputError(f"more than {cap >> 20} MiB on stdin", source="<stdin>",
                             hint="raise the cap with MIGPLAN_MAX_FILE_MB")
        return read_pods(text, "<stdin>")
    return read_pods(yamldoc.read_text(path), path)


def strategies(inventory: Inventory | None) -> dict[str, str]:
    """Each node's `nvidia.com/mig.strategy` where the inventory came from `kubectl get nodes` (else empty)."""
    out: dict[str, str] = {}
    for h in inventory.hosts if inventory is not None else ():
        value = dict(h.labels).get(STRATEGY_LABEL)
        if value is not None:
            out[h.name] = value
    return out


def check_stdin(pods: str | None, *others: str | None) -> None:
    """Only one input can come from stdin."""
    if pods == "-" and "-" in others:
        raise InputError("--pods - and another input both read stdin",
                         hint="save one of them to a file, e.g. kubectl get nodes -o json > nodes.json")


def demand_from_pods(path: str | PodList, state: FleetState, catalog: Catalog, profiles: ProfileSet,
                     inventory: Inventory | None, report: Report = quiet,
                     kubectl: KubectlOptions | None = None) -> ProfileSet:
    """The profiles to plan: the pods' devices (sized as measured or as requested), then the profiles no pod took.
    `path`: a file, `-`, `kubectl` (read live with `kubectl`'s options), or pods already read."""
    pods = path if isinstance(path, PodList) else read_pod_list(path, kubectl)
    demand = pod_demand(pods, state, catalog, profiles, strategies(inventory))
    report(f"note: {demand.summary(pods)} (label {STRATEGY} read where the inventory has it)")
    for line in demand.notes:
        report(f"note: {line}")
    return demand.profiles
