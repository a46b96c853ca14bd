"""A Kubernetes cluster stand-in for migplan's tests: an API server the real `kubectl` talks to, plus a
simulated GPU Operator MIG manager. Like tests/sim/, it imports nothing from migplan: an independent oracle.

Interface (other tests rely on it exactly):

    from k8s_sim import start_cluster
    with start_cluster(nodes, pods=(), configmaps=(), pdbs=(), rbac=None, tmp_path=tmp_path) as cluster:
        cluster.kubeconfig            # path of a kubeconfig; context "stand-in" is the current-context
        cluster.url                   # http://127.0.0.1:PORT
        cluster.get("node", "a100-1") # the stored object (a copy); namespace=None finds it in any namespace
        cluster.list("pods")          # every stored object of a kind, all namespaces
        cluster.requests              # the log: k8s_sim.apiserver.Request (method, path, query, content_type,
                                      # body, verb, resource, subresource, namespace, name, code)
        cluster.mig_manager.outcome["a100-1"] = "failed"   # "success" | "failed" | "hang" | "reboot"
        cluster.mig_manager.delay_s = 0.05                 # seconds between the manager's steps
        cluster.conflict_next("configmap", "gpu-operator", "default-mig-parted-config", times=1)
        cluster.stop()

or the pytest fixture `k8s_cluster` (tests/k8s_sim/fixtures.py, offered to every test by tests/conftest.py):
a factory with the same arguments less `tmp_path`, stopped after the test, skipping the test when kubectl is
missing; a test using it is marked slow.

`kind` in `get`/`list`/`conflict_next` is a plural, singular, Kind or short name (`configmaps`, `configmap`,
`ConfigMap`, `cm`). Objects are given as the JSON `kubectl get -o json` prints (kind and apiVersion optional);
a namespaced object without a namespace goes to `default`; namespaces `default`, `kube-system`,
`gpu-operator` and every namespace an object names exist. `rbac`: None allows everything; else
`{"user": ..., "rules": [PolicyRule, ...], "roles": [Role or ClusterRole manifests], "enforce": True}`,
answered by `kubectl auth can-i` and, with enforce, applied to every request (403 with the real Status).

`conflict_next(kind, namespace, name, times)`: the next `times` writes of that object that carry a
resourceVersion precondition (an update/PUT, `kubectl replace`, a patch with metadata.resourceVersion) fail
409 Conflict, as if another writer had updated the object just before each (its resourceVersion is bumped).
A write without a precondition is not affected, as on a real apiserver (it retries internally).

Extra keyword arguments of start_cluster: `objects` (any other served kind: DaemonSets, ClusterPolicy,
Namespaces), `mig_configmap=(namespace, name)` where the MIG manager reads its config, `mig_manager=False`
to run without one. Helpers on Cluster: `kubectl(*args)` runs the real kubectl against the stand-in,
`put(obj)` stores an object (creates or replaces), `remove(kind, name, namespace)`.

Behaviours and their upstream sources: module docstrings of apiserver.py, store.py, mig_manager.py and
tests/k8s_sim/README.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from .apiserver import ApiServer, Rbac, Request
from .mig_manager import MigManager
from .store import JSON, ApiError, ResourceType, Store, resource_type

__all__ = ["Cluster", "Request", "kubectl_path", "start_cluster"]

DEFAULT_NAMESPACES = ("default", "kube-system", "gpu-operator")


def kubectl_path() -> str | None:
    """The kubectl the tests run: $MIGPLAN_TEST_KUBECTL if set, else the one on PATH."""
    return os.environ.get("MIGPLAN_TEST_KUBECTL") or shutil.which("kubectl")


class Cluster:
    def __init__(self, store: Store, server: ApiServer, mig_manager: MigManager | None, workdir: Path,
                 own_dir: bool) -> None:
        self.store, self._server, self.mig_manager = store, server, mig_manager
        self.url = server.url
        self.workdir = workdir
        self._own_dir = own_dir
        self.kubeconfig = workdir / "kubeconfig"
        self.cache_dir = workdir / "kube-cache"
        self.kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "preferences": {}, "current-context": "stand-in",
            "clusters": [{"name": "stand-in", "cluster": {"server": self.url}}],
            "users": [{"name": "stand-in", "user": {"token": "k8s-sim-token"}}],
            "contexts": [{"name": "stand-in", "context": {"cluster": "stand-in", "user": "stand-in",
                                                          "namespace": "default"}}]}, indent=2))

    # -- the interface
    @property
    def requests(self) -> list[Request]:
        return self._server.api.requests

    def get(self, kind: str, name: str, namespace: str | None = None) -> JSON:
        rt = resource_type(kind)
        if namespace is not None or not rt.namespaced:
            return self.store.get(rt, namespace, name)
        found = [o for o in self.store.list(rt) if o["metadata"]["name"] == name]
        if not found:
            raise KeyError(f"no {rt.name} named {name!r} in any namespace")
        if len(found) > 1:
            raise ValueError(f"{rt.name} {name!r} is in several namespaces: give namespace=")
        return found[0]

    def list(self, kind: str) -> list[JSON]:
        return self.store.list(resource_type(kind))

    def conflict_next(self, kind: str, namespace: str | None, name: str, times: int = 1) -> None:
        rt = resource_type(kind)
        with self.store.lock:
            key = self.store.key(rt, namespace, name)
            self.store.forced_conflicts[key] = self.store.forced_conflicts.get(key, 0) + times

    def stop(self) -> None:
        if self.mig_manager is not None:
            self.mig_manager.stop()
        self._server.stop()
        if self._own_dir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- helpers
    def kubectl(self, *args: str, input: str | None = None, timeout: float = 60,
                check: bool = False) -> subprocess.CompletedProcess[str]:
        """Run the real kubectl against the stand-in (its own discovery cache dir, no ~/.kube)."""
        exe = kubectl_path()
        if exe is None:
            raise FileNotFoundError("kubectl not found (install Debian's kubernetes-client)")
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "HOME": str(self.workdir)}
        return subprocess.run([exe, "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.cache_dir),
                               *args], input=input, capture_output=True, text=True, timeout=timeout, env=env,
                              check=check)

    def put(self, obj: JSON) -> JSON:
        rt = resource_type(obj["kind"])
        ns = obj.get("metadata", {}).get("namespace") if rt.namespaced else None
        with contextlib.suppress(ApiError):
            self.store.delete(rt, ns, obj["metadata"]["name"])
        if ns:
            _ensure_namespace(self.store, ns)
        return self.store.seed(rt, obj)

    def remove(self, kind: str, name: str, namespace: str | None = None) -> None:
        self.store.delete(resource_type(kind), namespace, name)


def _ensure_namespace(store: Store, ns: str) -> None:
    rt = resource_type("namespaces")
    try:
        store.get(rt, None, ns)
    except ApiError:
        store.seed(rt, {"metadata": {"name": ns}, "spec": {"finalizers": ["kubernetes"]},
                        "status": {"phase": "Active"}})


def _seed(store: Store, rt: ResourceType, objs: Sequence[JSON]) -> None:
    for obj in objs:
        if rt.namespaced:
            _ensure_namespace(store, (obj.get("metadata") or {}).get("namespace") or "default")
        store.seed(rt, obj)


def start_cluster(nodes: Sequence[JSON], pods: Sequence[JSON] = (), configmaps: Sequence[JSON] = (),
                  pdbs: Sequence[JSON] = (), rbac: dict[str, Any] | None = None, *,
                  tmp_path: Path | str | None = None, objects: Sequence[JSON] = (),
                  mig_configmap: tuple[str, str] = ("gpu-operator", "default-mig-parted-config"),
                  mig_manager: bool = True) -> Cluster:
    """Start the API stand-in (and the MIG manager) seeded with these objects; see the module docstring."""
    store = Store()
    for ns in DEFAULT_NAMESPACES:
        _ensure_namespace(store, ns)
    for obj in objects:
        rt = resource_type(obj["kind"])
        if rt.name == "namespaces":
            store.seed(rt, obj)
        else:
            _seed(store, rt, [obj])
    _seed(store, resource_type("nodes"), nodes)
    _seed(store, resource_type("pods"), pods)
    _seed(store, resource_type("configmaps"), configmaps)
    _seed(store, resource_type("poddisruptionbudgets"), pdbs)
    own = tmp_path is None
    workdir = Path(tempfile.mkdtemp(prefix="k8s-sim-")) if tmp_path is None else Path(tmp_path)
    workdir.mkdir(parents=True, exist_ok=True)
    server = ApiServer(store, Rbac.from_config(rbac) if rbac is not None else None)
    manager = None
    if mig_manager:
        manager = MigManager(store, namespace=mig_configmap[0], configmap=mig_configmap[1])
        manager.start()
    return Cluster(store, server, manager, workdir, own)
