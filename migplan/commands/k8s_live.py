"""Live reads of a cluster through the one kubectl adapter (docs/kubernetes.md, "Live reads"): `-i kubectl` (the
nodes as an inventory), `--pods kubectl` (the pods as demand), and what `apply`/`replan --via gpu-operator` read.

The answers are the same documents `kubectl get nodes -o json` and `kubectl get pods -A -o json` print, read by the
same pure readers as a file (`inventory.k8s_nodes`, `pods.read_pods`, `k8s.objects`), named `kubectl get nodes` /
`kubectl get pods` in their errors. With the nodes, the ConfigMap the MIG manager reads (`kubectl get configmap -n NS
NAME -o json`, `mig_parted.read_configmap`) tells which GPU of a node holds which MIG devices where a node's applied
config is in it (`inventory.k8s_nodes`); `--mig-configmap FILE|kubectl[:NAMESPACE/NAME]` says where it comes from
(`mig_configmap`). kubectl's own failures (missing, unreachable, forbidden, a timeout) are the
adapter's `KubectlError`, one line each; an answer that is not a node or pod list is an `InputError`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from migplan import mig_parted, yamldoc, yamljson
from migplan.adapters.kubectl import Kubectl, KubectlError, KubectlOptions, check_name, check_namespace
from migplan.catalog import Catalog
from migplan.errors import InputError, MigplanError
from migplan.inventory import Inventory
from migplan.inventory.k8s_nodes import is_node_list, parse_nodes
from migplan.k8s.objects import BadObject, NodeView, PodView, node_views, pod_views
from migplan.k8s.rollout import DEFAULT_CONFIGMAP, DEFAULT_NAMESPACE
from migplan.mig_parted import ConfigMapConfigs
from migplan.pods import PodList, read_pods

NODES_SOURCE = "kubectl get nodes"
PODS_SOURCE = "kubectl get pods"


LIVE = "kubectl"  # `--mig-configmap kubectl[:NAMESPACE/NAME]`: read it from the cluster


@dataclass(frozen=True)
class LiveConfigMap:
    """The MIG manager's ConfigMap, to be read from the cluster. `missing`: what one that is not there, or that RBAC
    does not let this user read, is: `error` (named by the operator), `note` (replan's own: a note, every node's GPUs
    inferred) or `quiet` (the default `-i kubectl` looks for: inferred, as without a ConfigMap)."""

    namespace: str = DEFAULT_NAMESPACE
    name: str = DEFAULT_CONFIGMAP
    missing: str = "quiet"

    @property
    def shown(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"


ConfigMapSource = LiveConfigMap | ConfigMapConfigs | None


def mig_configmap(value: str | None, *, live: bool) -> ConfigMapSource:
    """`--mig-configmap`: FILE (`kubectl get configmap -n NS NAME -o json`, JSON or YAML), `kubectl` (the GPU
    Operator's default, read live) or `kubectl:NAMESPACE/NAME`. Not given: with `-i kubectl` (`live`) the default,
    read live when it is there; else none."""
    if value is None:
        return LiveConfigMap() if live else None
    if value == LIVE:
        return LiveConfigMap(missing="error")
    if value.startswith(LIVE + ":"):
        ns, sep, name = value[len(LIVE) + 1:].partition("/")
        try:
            if not sep:
                raise MigplanError(f"{value[:80]!r} names no namespace")
            return LiveConfigMap(check_namespace(ns), check_name(name, "ConfigMap"), missing="error")
        except MigplanError as err:
            raise InputError(f"--mig-configmap: {err.message}",
                             hint="write kubectl:NAMESPACE/NAME, e.g. kubectl:gpu-operator/default-mig-parted-config, "
                                  "or a file of 'kubectl get configmap -n NAMESPACE NAME -o json'") from None
    return mig_parted.read_configmap(yamldoc.load(value))


def read_configmap(source: ConfigMapSource, options: KubectlOptions | None, *,
                   kube: Kubectl | None = None) -> tuple[ConfigMapConfigs | None, str | None]:
    """The ConfigMap's configs (read live through the adapter for a `LiveConfigMap`), or None with a note saying
    why (`LiveConfigMap.missing`) where one is not there or not readable. Its contents are untrusted: an error names
    the ConfigMap and the key."""
    if not isinstance(source, LiveConfigMap):
        return source, None
    try:
        obj = _kube(options, kube).get("configmaps", source.name, source.namespace)
    except KubectlError as err:
        if err.reason not in ("not-found", "forbidden"):
            raise
        if source.missing == "error":
            raise InputError(f"kubectl get configmap -n {source.namespace} {source.name}: {err.message}",
                             hint="pass the ConfigMap the ClusterPolicy's spec.migManager.config.name names, as "
                                  "--mig-configmap kubectl:NAMESPACE/NAME (or --configmap/-n with --via "
                                  "gpu-operator)") from None
        if source.missing == "quiet":
            return None, None
        why = "does not exist" if err.reason == "not-found" else "cannot be read (Forbidden)"
        return None, (f"the MIG manager's {source.shown} {why}: which GPU of a node holds which MIG device is "
                      "inferred from the labels' counts")
    root = yamljson.parse(json.dumps(obj), f"kubectl get configmap -n {source.namespace} {source.name}")
    if root is None:
        raise InputError(f"kubectl get configmap -n {source.namespace} {source.name} printed nothing")
    return mig_parted.read_configmap(root), None


def _kube(options: KubectlOptions | None, kube: Kubectl | None) -> Kubectl:
    return kube if kube is not None else Kubectl(options or KubectlOptions())


def read_nodes(options: KubectlOptions | None, catalog: Catalog, *, kube: Kubectl | None = None,
               configmap: ConfigMapSource = None) -> tuple[dict[str, NodeView], Inventory]:
    """`kubectl get nodes -o json`: each node as the API server has it (labels, capacity, conditions) and the
    inventory its NVIDIA labels make (`inventory.k8s_nodes`), with `configmap`'s configs where given (read after the
    nodes, `read_configmap`; a note when it is not there)."""
    kube = _kube(options, kube)
    text = kube.get_text("nodes")
    try:
        views = node_views(json.loads(text))
    except BadObject as err:
        raise InputError(f"{NODES_SOURCE}: {err.message}") from None
    root = yamljson.parse(text, NODES_SOURCE)
    if root is None or not is_node_list(root):
        raise InputError(f"{NODES_SOURCE} printed no list of nodes")
    configs, note = read_configmap(configmap, None, kube=kube)
    inventory = parse_nodes(root, catalog, configs)
    return views, replace(inventory, notes=(note, *inventory.notes)) if note else inventory


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
