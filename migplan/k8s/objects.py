"""Nodes and pods as kubectl prints them (`-o json`), read as untrusted data (pure).

Only what the apply needs: a node's name, resourceVersion, labels, `status.capacity`, `spec.unschedulable` and its
`Ready` condition;
a pod's namespace, name, node (`spec.nodeName`), phase and its containers' NVIDIA resources
(`nvidia.com/gpu`, `nvidia.com/mig-<profile>`, NVIDIA/k8s-device-plugin README "MIG support"). A value of the
wrong type is an error naming the object and the key, never a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from migplan.errors import MigplanError
from migplan.text import printable

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
DONE_PHASES = ("Succeeded", "Failed")  # a pod in these holds no device


class BadObject(MigplanError):
    """An object from the cluster that is not what Kubernetes writes."""


def _map(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadObject(f"{where}: expected an object, got {type(value).__name__}")
    return value


def _str(value: Any, where: str, *, optional: bool = False) -> str:
    if value is None and optional:
        return ""
    if not isinstance(value, str) or len(value) > 4096:
        raise BadObject(f"{where}: expected a string")
    return value


def _strings(value: Any, where: str) -> dict[str, str]:
    return {_str(k, where): _str(v, f"{where}.{printable(str(k), 80)}") for k, v in _map(value, where).items()}


@dataclass(frozen=True)
class NodeView:
    """A node as the API server has it now."""

    name: str
    resource_version: str
    labels: Mapping[str, str] = field(default_factory=dict)
    capacity: Mapping[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    ready: bool | None = None  # status.conditions[type=Ready]: "True", "False"/"Unknown" (None: not reported)

    def label(self, key: str) -> str | None:
        return self.labels.get(key)


def node_view(obj: Any) -> NodeView:
    o = _map(obj, "node")
    meta = _map(o.get("metadata"), "node.metadata")
    name = _str(meta.get("name"), "node.metadata.name")
    where = f"node {printable(name, 80)!r}"
    spec = _map(o.get("spec"), f"{where}: spec")
    unsched = spec.get("unschedulable", False)
    if not isinstance(unsched, bool):
        raise BadObject(f"{where}: spec.unschedulable is not true or false")
    status = _map(o.get("status"), f"{where}: status")
    return NodeView(name, _str(meta.get("resourceVersion"), f"{where}: metadata.resourceVersion", optional=True),
                    _strings(meta.get("labels"), f"{where}: metadata.labels"),
                    _strings(status.get("capacity"), f"{where}: status.capacity"), unsched,
                    _ready(status.get("conditions"), where))


def _ready(conditions: Any, where: str) -> bool | None:
    """The node's `Ready` condition (the kubelet's heartbeat, kubernetes.io "Nodes", "Condition"): `True` is ready,
    `False` or `Unknown` (the node controller's mark for a node that stopped reporting) is not; None: no such
    condition."""
    if conditions is None:
        return None
    if not isinstance(conditions, list) or len(conditions) > 64:
        raise BadObject(f"{where}: status.conditions is not a list")
    for n, c in enumerate(conditions):
        cond = _map(c, f"{where}: status.conditions[{n}]")
        if cond.get("type") == "Ready":
            return _str(cond.get("status"), f"{where}: status.conditions[{n}].status") == "True"
    return None


def node_views(doc: Any) -> dict[str, NodeView]:
    """A NodeList (or kubectl's List) by node name."""
    items = _map(doc, "node list").get("items")
    items = [] if items is None else items
    if not isinstance(items, list):
        raise BadObject("node list: items is not a list")
    out: dict[str, NodeView] = {}
    for item in items:
        v = node_view(item)
        out[v.name] = v
    return out


@dataclass(frozen=True)
class PodView:
    namespace: str
    name: str
    node: str  # "" while not scheduled
    phase: str
    nvidia: Mapping[str, int] = field(default_factory=dict)  # resource -> count, the containers' most

    @property
    def uses_gpu(self) -> bool:
        """Holds (or will hold, once started) a GPU or MIG device on its node."""
        return self.phase not in DONE_PHASES and bool(self.node) and any(n > 0 for n in self.nvidia.values())

    @property
    def ref(self) -> str:
        return f"{self.namespace}/{self.name}"


def _quantity(value: Any, where: str) -> int:
    """An extended resource's count: a whole number (the API refuses fractions for them)."""
    text = str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    if text is None or not text.isascii() or not text.isdigit() or len(text) > 6:
        raise BadObject(f"{where}: {printable(str(value), 40)!r} is not a whole number of devices")
    return int(text)


def pod_view(obj: Any) -> PodView:
    o = _map(obj, "pod")
    meta = _map(o.get("metadata"), "pod.metadata")
    name = _str(meta.get("name"), "pod.metadata.name")
    ns = _str(meta.get("namespace"), f"pod {name}: metadata.namespace", optional=True) or "default"
    where = f"pod {printable(ns, 80)}/{printable(name, 120)}"
    spec = _map(o.get("spec"), f"{where}: spec")
    status = _map(o.get("status"), f"{where}: status")
    nvidia: dict[str, int] = {}
    for group in ("containers", "initContainers"):
        containers = spec.get(group)
        containers = [] if containers is None else containers
        if not isinstance(containers, list):
            raise BadObject(f"{where}: spec.{group} is not a list")
        for n, c in enumerate(containers):
            res = _map(_map(c, f"{where}: spec.{group}[{n}]").get("resources"), f"{where}: spec.{group}[{n}].resources")
            for part in ("limits", "requests"):
                for key, value in _map(res.get(part), f"{where}: spec.{group}[{n}].resources.{part}").items():
                    if isinstance(key, str) and (key == GPU_RESOURCE or key.startswith(MIG_RESOURCE_PREFIX)):
                        count = _quantity(value, f"{where}: spec.{group}[{n}].resources.{part}.{key}")
                        nvidia[key] = max(nvidia.get(key, 0), count)
    return PodView(ns, name, _str(spec.get("nodeName"), f"{where}: spec.nodeName", optional=True),
                   _str(status.get("phase"), f"{where}: status.phase", optional=True), nvidia)


def pod_views(doc: Any) -> list[PodView]:
    items = _map(doc, "pod list").get("items")
    items = [] if items is None else items
    if not isinstance(items, list):
        raise BadObject("pod list: items is not a list")
    return [pod_view(i) for i in items]
