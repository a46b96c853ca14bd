"""The object store of the Kubernetes API stand-in: resource types, resourceVersions, selectors, patches.

Independent of migplan (imports none of it). Behaviours follow kube-apiserver; the source of each is named
where it is implemented:

- resourceVersion: one cluster-wide counter, bumped by every write and written into the object as a string
  (`metadata.resourceVersion`, k8s.io/apiserver pkg/storage/etcd3/store.go: the etcd revision). A write that
  carries a resourceVersion other than the stored one fails 409 Conflict (`GuaranteedUpdate` precondition,
  apimachinery pkg/api/errors `NewConflict` with `OptimisticLockErrorMsg`); a PUT without one is
  unconditional for kinds whose strategy says `AllowUnconditionalUpdate` (ConfigMap, Node, Pod all do).
- label selectors: apimachinery pkg/labels/selector.go syntax (`k=v`, `k==v`, `k!=v`, `k`, `!k`,
  `k in (a,b)`, `k notin (a,b)`); PDB `matchLabels`/`matchExpressions` per `metav1.LabelSelectorAsSelector`.
- field selectors: apimachinery pkg/fields (`=`, `==`, `!=`, comma = and); only the fields each kind's
  registry declares (`metadata.name`, `metadata.namespace` for all; pods add `spec.nodeName`,
  `status.phase`, ... from pkg/registry/core/pod/strategy.go `ToSelectableFields`; nodes add
  `spec.unschedulable` from pkg/registry/core/node/strategy.go); anything else is 400
  `field label not supported: X` (pkg/apis/core/v1/conversion.go `AddFieldLabelConversionFunc`).
- patches: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch. Strategic merge
  is merge patch plus its directives for maps (`$patch: delete|replace`, `$retainKeys`, and the
  `$setElementOrder/...` and `$deleteFromPrimitiveList/...` keys dropped): lists are replaced whole, not
  merged by their patchMergeKey (apimachinery pkg/util/strategicpatch). Enough for what kubectl sends for
  labels, annotations, spec.unschedulable and ConfigMap data; a strategic patch of a keyed list (pod
  containers) is not modelled.
"""

from __future__ import annotations

import copy
import datetime
import re
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True)
class ResourceType:
    """One served resource, as its APIResource in discovery (apimachinery pkg/apis/meta/v1 types.go)."""

    group: str
    version: str
    name: str  # plural, the URL segment
    kind: str
    namespaced: bool
    verbs: tuple[str, ...] = ("create", "delete", "get", "list", "patch", "update")
    short_names: tuple[str, ...] = ()
    singular: str = ""
    # fields a fieldSelector may name besides metadata.name / metadata.namespace
    fields: tuple[str, ...] = ()
    subresources: tuple[tuple[str, str, tuple[str, ...]], ...] = ()  # (name, kind, verbs)

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """`schema.GroupResource.String()`: `configmaps`, `poddisruptionbudgets.policy`."""
        return f"{self.name}.{self.group}" if self.group else self.name


_CRUD = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
# The kinds kubectl touches in migplan's loop, with 1.20's verbs and short names (kube-apiserver v1.20
# discovery, `kubectl api-resources -o wide` of a 1.20 cluster). policy is v1beta1 only: policy/v1 came in
# 1.21 (kubernetes CHANGELOG-1.21 "PodDisruptionBudget ... policy/v1"), which is why kubectl drain 1.20
# evicts through policy/v1beta1.
RESOURCES: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "namespaces", "Namespace", False, ("create", "delete", "get", "list", "patch",
                 "update", "watch"), ("ns",), "namespace"),
    ResourceType("", "v1", "nodes", "Node", False, _CRUD, ("no",), "node", ("spec.unschedulable",),
                 (("status", "Node", ("get", "patch", "update")),)),
    ResourceType("", "v1", "pods", "Pod", True, _CRUD, ("po",), "pod",
                 ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
                  "status.phase", "status.podIP", "status.nominatedNodeName"),
                 (("eviction", "Eviction", ("create",)), ("status", "Pod", ("get", "patch", "update")))),
    ResourceType("", "v1", "configmaps", "ConfigMap", True, _CRUD, ("cm",), "configmap"),
    ResourceType("", "v1", "events", "Event", True, _CRUD, ("ev",), "event"),
    ResourceType("apps", "v1", "daemonsets", "DaemonSet", True, _CRUD, ("ds",), "daemonset"),
    ResourceType("apps", "v1", "deployments", "Deployment", True, _CRUD, ("deploy",), "deployment"),
    ResourceType("apps", "v1", "replicasets", "ReplicaSet", True, _CRUD, ("rs",), "replicaset"),
    ResourceType("batch", "v1", "jobs", "Job", True, _CRUD, (), "job"),
    ResourceType("batch", "v1beta1", "cronjobs", "CronJob", True, _CRUD, ("cj",), "cronjob"),
    ResourceType("policy", "v1beta1", "poddisruptionbudgets", "PodDisruptionBudget", True, _CRUD, ("pdb",),
                 "poddisruptionbudget", (), (("status", "PodDisruptionBudget", ("get", "patch", "update")),)),
    ResourceType("authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False,
                 ("create",)),
    ResourceType("authorization.k8s.io", "v1", "selfsubjectrulesreviews", "SelfSubjectRulesReview", False,
                 ("create",)),
    ResourceType("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False, _CRUD, (),
                 "clusterrole"),
    ResourceType("rbac.authorization.k8s.io", "v1", "roles", "Role", True, _CRUD, (), "role"),
    # The GPU Operator's CRD (NVIDIA/gpu-operator api/nvidia/v1 clusterpolicy_types.go: cluster-scoped,
    # group nvidia.com, version v1): where mig.strategy lives.
    ResourceType("nvidia.com", "v1", "clusterpolicies", "ClusterPolicy", False, _CRUD, (), "clusterpolicy"),
)

# kind (as tests name it: "Node", "node", "nodes", "cm", "pdb") -> ResourceType
_BY_NAME: dict[str, ResourceType] = {}
for _rt in RESOURCES:
    for _n in (_rt.name, _rt.kind, _rt.kind.lower(), _rt.singular, *_rt.short_names):
        if _n:
            _BY_NAME.setdefault(_n, _rt)


def resource_type(kind: str) -> ResourceType:
    try:
        return _BY_NAME[kind]
    except KeyError:
        raise KeyError(f"k8s_sim serves no resource {kind!r} (known: {sorted(r.name for r in RESOURCES)})") \
            from None


def find_resource(group: str, version: str, name: str) -> ResourceType | None:
    for rt in RESOURCES:
        if rt.group == group and rt.version == version and rt.name == name:
            return rt
    return None


class ApiError(Exception):
    """A failure the API answers with a `Status` object (apimachinery pkg/api/errors/errors.go)."""

    def __init__(self, code: int, reason: str, message: str, details: JSON | None = None) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> JSON:
        body: JSON = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": self.message, "reason": self.reason}
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(rt: ResourceType, name: str) -> JSON:
    d: JSON = {"name": name} if name else {}
    if rt.group:
        d["group"] = rt.group
    d["kind"] = rt.name
    return d


def not_found(rt: ResourceType, name: str) -> ApiError:
    # errors.NewNotFound: `%s %q not found` with the GroupResource string
    return ApiError(404, "NotFound", f'{rt.qualified} "{name}" not found', _details(rt, name))


def already_exists(rt: ResourceType, name: str) -> ApiError:
    # errors.NewAlreadyExists
    return ApiError(409, "AlreadyExists", f'{rt.qualified} "{name}" already exists', _details(rt, name))


OPTIMISTIC_LOCK = "the object has been modified; please apply your changes to the latest version and try again"


def conflict(rt: ResourceType, name: str) -> ApiError:
    # errors.NewConflict(qualifiedResource, name, errors.New(registry.OptimisticLockErrorMsg))
    # (k8s.io/apiserver pkg/registry/generic/registry/store.go)
    return ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rt.qualified} "{name}": {OPTIMISTIC_LOCK}',
                    _details(rt, name))


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def route_not_found() -> ApiError:
    # What kube-apiserver answers for a path no handler serves (and an unknown resource of a served group
    # version): the generic NotFound Status (apiserver pkg/endpoints/handlers/responsewriters
    # `errNotFound` / `NewGenericServerResponse(404, ...)`).
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------- selectors

_LABEL_TERM = re.compile(r"\s*(!)?\s*([A-Za-z0-9_./-]+)\s*"
                         r"(?:(==|=|!=)\s*([A-Za-z0-9_.-]*)|\s+(in|notin)\s*\(([^)]*)\))?\s*$")


def _split_terms(selector: str) -> list[str]:
    terms, depth, cur = [], 0, ""
    for ch in selector:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append(cur)
            cur = ""
        else:
            cur += ch
    terms.append(cur)
    return [t for t in terms if t.strip()]


LabelTest = Callable[[dict[str, str]], bool]


def parse_label_selector(selector: str) -> list[LabelTest]:
    """apimachinery pkg/labels/selector.go `Parse`: a list of requirements, all must hold."""
    tests: list[LabelTest] = []
    for term in _split_terms(selector):
        m = _LABEL_TERM.match(term)
        if not m:
            raise bad_request(f"unable to parse requirement: {term.strip()}")
        neg, key, op, value, setop, values = m.groups()
        tests.append(_label_test(neg, key, op, value, setop, values))
    return tests


def _label_test(neg: str | None, key: str, op: str | None, value: str | None, setop: str | None,
                values: str | None) -> LabelTest:
    if neg:
        return lambda labels: key not in labels
    if op in ("=", "=="):
        return lambda labels: labels.get(key) == value
    if op == "!=":  # labels.NotEquals matches objects without the key too
        return lambda labels: labels.get(key) != value
    if setop:
        vals = {v.strip() for v in (values or "").split(",") if v.strip()}
        if setop == "in":
            return lambda labels: labels.get(key) in vals
        return lambda labels: labels.get(key) not in vals
    return lambda labels: key in labels


def selector_matches(sel: JSON | None, labels: dict[str, str]) -> bool:
    """metav1.LabelSelectorAsSelector: matchLabels and matchExpressions (In, NotIn, Exists, DoesNotExist).
    An empty selector matches everything; a nil one nothing (policy/v1beta1 PDB semantics)."""
    if sel is None:
        return False
    for k, v in (sel.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in sel.get("matchExpressions") or ():
        key, op, vals = expr["key"], expr["operator"], set(expr.get("values") or ())
        ok = {"In": labels.get(key) in vals, "NotIn": labels.get(key) not in vals,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def dotted(obj: JSON, path: str) -> Any:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return None
        cur = cur.get(part)
    return cur


def parse_field_selector(rt: ResourceType, selector: str) -> list[Callable[[JSON], bool]]:
    tests: list[Callable[[JSON], bool]] = []
    for term in _split_terms(selector):
        m = re.match(r"\s*([A-Za-z.]+)\s*(==|=|!=)\s*(.*?)\s*$", term)
        if not m:
            raise bad_request(f"invalid selector: '{selector}'; can't understand '{term}'")
        path, op, value = m.groups()
        if path not in ("metadata.name", "metadata.namespace", *rt.fields):
            raise bad_request(f"field label not supported: {path}")
        tests.append(_field_test(path, op, value))
    return tests


def _field_test(path: str, op: str, value: str) -> Callable[[JSON], bool]:
    def get(obj: JSON) -> str:
        v = dotted(obj, path)
        if isinstance(v, bool):  # spec.unschedulable is selectable as "true"/"false"
            return "true" if v else "false"
        if v is None:
            return "false" if path == "spec.unschedulable" else ""
        return str(v)

    if op == "!=":
        return lambda obj: get(obj) != value
    return lambda obj: get(obj) == value


# ---------------------------------------------------------------- patches

def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (what `kubectl label` and `kubectl annotate` send, and the GPU Operator's
    MIG manager: mig-parted pkg/mig/reconfigure/reconfigure.go `setNodeLabels` uses types.MergePatchType)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Strategic merge patch for maps (apimachinery pkg/util/strategicpatch/patch.go `mergeMap`): the
    `$patch` directive (`delete` drops the map, `replace` replaces it), `$retainKeys` (keys not listed are
    cleared), `$setElementOrder/<list>` and `$deleteFromPrimitiveList/<list>` (ordering hints, dropped
    here); everything else as a merge patch. Lists are replaced (see the module docstring)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "delete":
        return None
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain}
    for k, v in patch.items():
        if k.startswith("$"):
            continue
        if v is None:
            out.pop(k, None)
            continue
        merged = strategic_merge_patch(out.get(k), v)
        if merged is None:
            out.pop(k, None)
        else:
            out[k] = merged
    return out


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise bad_request(f"the json patch path {path!r} does not start with '/'")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str]) -> Any:
    for p in parts:
        doc = doc[int(p)] if isinstance(doc, list) else doc[p]
    return doc


def json_patch(target: JSON, ops: Any) -> JSON:
    """RFC 6902 (evanphx/json-patch as vendored by the apiserver): add, remove, replace, test, copy, move."""
    doc = copy.deepcopy(target)
    if not isinstance(ops, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    for op in ops:
        try:
            doc = _json_patch_op(doc, op)
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: "
                           f"{op.get('op')} {op.get('path')}: {exc}") from None
    return doc


def _json_patch_op(doc: Any, op: JSON) -> Any:
    kind, parts = op["op"], _pointer(op["path"])
    if kind == "test":
        if _walk(doc, parts) != op["value"]:
            raise ValueError("testing value failed")
        return doc
    if kind in ("copy", "move"):
        value = copy.deepcopy(_walk(doc, _pointer(op["from"])))
        if kind == "move":
            doc = _json_patch_op(doc, {"op": "remove", "path": op["from"]})
        return _json_patch_op(doc, {"op": "add", "path": op["path"], "value": value})
    if not parts:
        return copy.deepcopy(op["value"]) if kind in ("add", "replace") else doc
    parent, last = _walk(doc, parts[:-1]), parts[-1]
    if kind == "remove" or kind == "replace":
        if isinstance(parent, list):
            del parent[int(last)]
        else:
            del parent[last]
    if kind in ("add", "replace"):
        if isinstance(parent, list):
            parent.insert(len(parent) if last == "-" else int(last), copy.deepcopy(op["value"]))
        else:
            parent[last] = copy.deepcopy(op["value"])
    elif kind != "remove":
        raise ValueError(f"unknown op {kind!r}")
    return doc


# ---------------------------------------------------------------- the store

Key = tuple[str, str, str]  # (qualified resource, namespace or "", name)
Watcher = Callable[[str, ResourceType, JSON | None, JSON | None], None]  # (event, rt, old, new)


@dataclass
class Store:
    """Objects by (resource, namespace, name), one resourceVersion counter, watchers called after each write
    (outside the lock) with copies of the old and new object."""

    objects: dict[Key, JSON] = field(default_factory=dict)
    revision: int = 1000
    lock: threading.RLock = field(default_factory=threading.RLock)
    watchers: list[Watcher] = field(default_factory=list)
    # forced conflicts: key -> writes carrying a resourceVersion still to fail
    forced_conflicts: dict[Key, int] = field(default_factory=dict)

    @staticmethod
    def key(rt: ResourceType, namespace: str | None, name: str) -> Key:
        return (rt.qualified, (namespace or "") if rt.namespaced else "", name)

    def _stamp(self, obj: JSON, rt: ResourceType, created: bool) -> None:
        self.revision += 1
        meta = obj.setdefault("metadata", {})
        meta["resourceVersion"] = str(self.revision)
        if created:
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now())
            if "spec" in obj:
                meta.setdefault("generation", 1)
        obj["apiVersion"], obj["kind"] = rt.group_version, rt.kind

    def seed(self, rt: ResourceType, obj: JSON) -> JSON:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if rt.namespaced:
            meta.setdefault("namespace", "default")
        else:
            meta.pop("namespace", None)
        meta.pop("resourceVersion", None)
        with self.lock:
            self._stamp(obj, rt, created=True)
            self.objects[self.key(rt, meta.get("namespace"), meta["name"])] = obj
        return copy.deepcopy(obj)

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> JSON:
        with self.lock:
            obj = self.objects.get(self.key(rt, namespace, name))
            if obj is None:
                raise not_found(rt, name)
            return copy.deepcopy(obj)

    def list(self, rt: ResourceType, namespace: str | None = None) -> list[JSON]:
        with self.lock:
            items = [copy.deepcopy(o) for (r, ns, _), o in self.objects.items()
                     if r == rt.qualified and (not namespace or ns == namespace)]
        return sorted(items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))

    def create(self, rt: ResourceType, namespace: str | None, obj: JSON, dry_run: bool = False) -> JSON:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        if not meta.get("name"):
            raise ApiError(422, "Invalid", f"{rt.kind} \"\" is invalid: metadata.name: Required value: name or "
                           "generateName is required", {"kind": rt.kind, "causes": [
                               {"reason": "FieldValueRequired", "message": "Required value: name or generateName "
                                "is required", "field": "metadata.name"}]})
        if meta.get("resourceVersion"):
            # apiserver pkg/registry/rest/create.go BeforeCreate: "resourceVersion should not be set on
            # objects to be created"
            raise bad_request("resourceVersion should not be set on objects to be created")
        if rt.namespaced:
            meta["namespace"] = namespace or meta.get("namespace") or "default"
        with self.lock:
            key = self.key(rt, meta.get("namespace"), meta["name"])
            if key in self.objects:
                raise already_exists(rt, meta["name"])
            self._stamp(obj, rt, created=True)
            if not dry_run:
                self.objects[key] = obj
        if not dry_run:
            self._notify("ADDED", rt, None, obj)
        return copy.deepcopy(obj)

    def update(self, rt: ResourceType, namespace: str | None, name: str,
               mutate: Callable[[JSON], JSON], dry_run: bool = False, actor: str = "client") -> JSON:
        """Read-modify-write under the lock. `mutate(current) -> new`; a resourceVersion in `new` other than
        the current one is a 409 (so is one with a pending forced conflict). Bumps the resourceVersion."""
        with self.lock:
            key = self.key(rt, namespace, name)
            current = self.objects.get(key)
            if current is None:
                raise not_found(rt, name)
            new = mutate(copy.deepcopy(current))
            meta = new.setdefault("metadata", {})
            precondition = meta.get("resourceVersion")
            if precondition and actor == "client" and self.forced_conflicts.get(key, 0) > 0:
                # As if another writer had updated the object just before this request.
                self.forced_conflicts[key] -= 1
                self._stamp(current, rt, created=False)
                raise conflict(rt, name)
            if precondition and precondition != current["metadata"]["resourceVersion"]:
                raise conflict(rt, name)
            if meta.get("name", name) != name:
                raise bad_request(f"the name of the object ({meta.get('name')}) does not match the name on the "
                                  f"URL ({name})")
            # immutable metadata stays (apiserver rest.BeforeUpdate: uid, creationTimestamp, namespace)
            for k in ("uid", "creationTimestamp", "namespace", "name"):
                if k in current["metadata"]:
                    meta[k] = current["metadata"][k]
            if new.get("spec") != current.get("spec") and "generation" in current["metadata"]:
                meta["generation"] = current["metadata"]["generation"] + 1
            elif "generation" in current["metadata"]:
                meta["generation"] = current["metadata"]["generation"]
            self._stamp(new, rt, created=False)
            if not dry_run:
                self.objects[key] = new
        if not dry_run:
            self._notify("MODIFIED", rt, current, new)
        return copy.deepcopy(new)

    def delete(self, rt: ResourceType, namespace: str | None, name: str, dry_run: bool = False) -> JSON:
        with self.lock:
            key = self.key(rt, namespace, name)
            current = self.objects.get(key)
            if current is None:
                raise not_found(rt, name)
            if not dry_run:
                del self.objects[key]
                self.revision += 1
        if not dry_run:
            self._notify("DELETED", rt, current, None)
        return copy.deepcopy(current)

    def _notify(self, event: str, rt: ResourceType, old: JSON | None, new: JSON | None) -> None:
        for w in list(self.watchers):
            w(event, rt, copy.deepcopy(old), copy.deepcopy(new))
