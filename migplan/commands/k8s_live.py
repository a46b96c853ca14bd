"""Live reads of a cluster through the one kubectl adapter (docs/kubernetes.md, "Live reads"): `-i kubectl` (the
nodes as an inventory), `--pods kubectl` (the pods as demand), and what `apply`/`replan --via gpu-operator` read.

The answers are the same documents `kubectl get nodes -o json` and `kubectl get pods -A -o json` print, read by the
same pure readers as a file (`inventory.k8s_nodes`, `pods.read_pods`, `k8s.objects`), named `kubectl get nodes` /
`kubectl get pods` in their errors. kubectl's own failures (missing, unreachable, forbidden, a timeout) are the
adapter's `KubectlError`, one line each; an answer that is not a node or pod list is an `InputError`.
"""

from __future__ import annotations

import json

from migplan import yamljson
from migplan.adapters.kubectl import Kubectl, KubectlOptions
from migplan.catalog import Catalog
from migplan.errors import InputError
from migplan.inventory import Inventory
from migplan.inventory.k8s_nodes import is_node_list, parse_nodes
from migplan.k8s.objects import BadObject, NodeView, PodView, node_views, pod_views
from migplan.pods import PodList, read_pods

NODES_SOURCE = "kubectl get nodes"
PODS_SOURCE = "kubectl get pods"


def _kube(options: KubectlOptions | None, kube: Kubectl | None) -> Kubectl:
    return kube if kube is not None else Kubectl(options or KubectlOptions())


def read_nodes(options: KubectlOptions | None, catalog: Catalog, *,
               kube: Kubectl | None = None) -> tuple[dict[str, NodeView], Inventory]:
    """`kubectl get nodes -o json`: each node as the API server has it (labels, capacity, conditions) and the
    inventory its NVIDIA labels make (`inventory.k8s_nodes`)."""
    text = _kube(options, kube).get_text("nodes")
    try:
        views = node_views(json.loads(text))
    except BadObject as err:
        raise InputError(f"{NODES_SOURCE}: {err.message}") from None
    root = yamljson.parse(text, NODES_SOURCE)
    if root is None or not is_node_list(root):
        raise InputError(f"{NODES_SOURCE} printed no list of nodes")
    return views, parse_nodes(root, catalog)


def read_pods_live(options: KubectlOptions | None, *, kube: Kubectl | None = None) -> tuple[PodList, list[PodView]]:
    """`kubectl get pods -A -o json`: the pods as demand (`pods.read_pods`) and as the apply sees them (which
    hold a node's GPUs)."""
    text = _kube(options, kube).get_text("pods", all_namespaces=True)
    demand = read_pods(text, PODS_SOURCE)
    try:
        views = pod_views(json.loads(text))
    except BadObject as err:
        raise InputError(f"{PODS_SOURCE}: {err.message}") from None
    return demand, views
