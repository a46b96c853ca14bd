"""A Kubernetes API stand-in for the real `kubectl` (Debian's kubernetes-client 1.20.2): plain HTTP on 127.0.0.1.

Independent of migplan (imports none of it). It serves what kubectl needs for migplan's loop, in the shapes a
v1.20 kube-apiserver answers with (sources per behaviour below and in tests/k8s_sim/README.md):

- discovery: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/<group>/<version>` (apimachinery
  pkg/apis/meta/v1 `APIVersions`, `APIGroupList`, `APIResourceList`); `pods/eviction` is listed in `/api/v1`
  with group policy, version v1beta1 and kind Eviction, which is what kubectl drain's
  `CheckEvictionSupport` (kubectl pkg/drain/drain.go) looks for before it evicts rather than deletes.
  `/openapi/v2` is not served (kube-apiserver serves it as protobuf, `application/com.github.proto-openapi.
  spec.v2@v1.0+protobuf`): kubectl's client-side validation then fails, so create/apply/replace run with
  `--validate=false`.
- get, list (`labelSelector`, `fieldSelector`; `limit` answered in one page), create, update (PUT),
  patch (merge, strategic merge, JSON patch), delete; `?dryRun=All` computes and does not store.
  `watch=true` is not served (405), so `kubectl get -w` and `kubectl wait` do not work here.
- `Accept: ...;as=Table;...` (what `kubectl get` without -o sends) gets a `meta.k8s.io/v1` Table
  (apiserver pkg/endpoints/handlers/get.go, `transformResponseObject`), rows carrying
  PartialObjectMetadata so `-L label` columns work.
- POST `pods/<name>/eviction` honouring PodDisruptionBudgets as pkg/registry/core/pod/storage/eviction.go
  does (see `_evict`); DELETE of pods removes them at once (as if the kubelet confirmed the deletion).
- POST `selfsubjectaccessreviews` (what `kubectl auth can-i` sends), answered from the RBAC rules given to
  the stand-in; with `enforce` on, every other request is authorised against the same rules and a denial is
  the real 403 Status (apiserver pkg/endpoints/handlers/responsewriters/errors.go `forbiddenMessage`).

Every request is logged (`Request`: method, path, query, content type, parsed body, status code).
"""

from __future__ import annotations

import json
import math
import threading
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .store import (
    JSON,
    RESOURCES,
    ApiError,
    ResourceType,
    Store,
    bad_request,
    find_resource,
    json_patch,
    merge_patch,
    now,
    parse_field_selector,
    parse_label_selector,
    resource_type,
    route_not_found,
    selector_matches,
    strategic_merge_patch,
)

# kube-apiserver v1.20.2's /version (k8s.io/apimachinery pkg/version `Info`); the gitCommit is the v1.20.2
# tag's, as Debian's kubectl 1.20.2 prints for its own client version.
VERSION = {"major": "1", "minor": "20", "gitVersion": "v1.20.2",
           "gitCommit": "faecb196815e248d3ecfb03c680a4507229c2a56", "gitTreeState": "clean",
           "buildDate": "2021-01-13T13:20:00Z", "goVersion": "go1.15.5", "compiler": "gc",
           "platform": "linux/amd64"}

DEFAULT_USER = "system:serviceaccount:gpu-operator:migplan"


@dataclass
class Request:
    """One logged request: `verb` is the Kubernetes verb the apiserver's RequestInfo resolves (get, list,
    create, update, patch, delete, or `""` for a non-resource path)."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any
    verb: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""
    code: int = 0


@dataclass
class RouteInfo:
    """apiserver pkg/endpoints/request/requestinfo.go `RequestInfo`, the parts used here."""

    rt: ResourceType | None = None
    namespace: str = ""
    name: str = ""
    subresource: str = ""
    verb: str = ""
    discovery: JSON | None = None


# ---------------------------------------------------------------- RBAC


def _rule_allows(rule: JSON, verb: str, group: str, resource: str, sub: str, name: str) -> bool:
    """rbac/v1 PolicyRule matching as pkg/apis/rbac/v1/evaluation_helpers.go (`VerbMatches`,
    `APIGroupMatches`, `ResourceMatches` with `*`, `<res>/<sub>` and `*/<sub>`, `ResourceNameMatches`)."""
    verbs, groups = rule.get("verbs") or (), rule.get("apiGroups") or ()
    resources, names = rule.get("resources") or (), rule.get("resourceNames") or ()
    if "*" not in verbs and verb not in verbs:
        return False
    if "*" not in groups and group not in groups:
        return False
    full = f"{resource}/{sub}" if sub else resource
    if not any(r in ("*", full) or (sub and r == f"*/{sub}") for r in resources):
        return False
    return not names or name in names


@dataclass
class Rbac:
    """The stand-in's authorizer. `rules` apply cluster-wide (as a ClusterRole bound by a
    ClusterRoleBinding); each `roles` entry is a Role (its rules apply in its metadata.namespace) or a
    ClusterRole (cluster-wide) manifest, as written in docs. `None` given to the server = allow all."""

    user: str = DEFAULT_USER
    rules: list[JSON] = field(default_factory=list)
    roles: list[JSON] = field(default_factory=list)
    enforce: bool = True

    @classmethod
    def from_config(cls, cfg: JSON) -> Rbac:
        unknown = set(cfg) - {"user", "rules", "roles", "enforce"}
        if unknown:
            raise ValueError(f"k8s_sim rbac: unknown keys {sorted(unknown)} (user, rules, roles, enforce)")
        return cls(user=cfg.get("user", DEFAULT_USER), rules=list(cfg.get("rules", ())),
                   roles=list(cfg.get("roles", ())), enforce=cfg.get("enforce", True))

    def allowed(self, verb: str, group: str, resource: str, sub: str, namespace: str, name: str) -> bool:
        scoped: list[JSON] = list(self.rules)
        for role in self.roles:
            ns = (role.get("metadata") or {}).get("namespace")
            if role.get("kind") == "ClusterRole" or (namespace and ns == namespace):
                scoped.extend(role.get("rules") or ())
        return any(_rule_allows(r, verb, group, resource, sub, name) for r in scoped)


def forbidden(user: str, verb: str, rt: ResourceType | None, resource: str, sub: str, namespace: str,
              name: str, path: str) -> ApiError:
    """responsewriters.Forbidden: errors.NewForbidden(GroupResource, name, forbiddenMessage(attributes))."""
    if rt is None:
        return ApiError(403, "Forbidden", f'forbidden: User "{user}" cannot {verb} path "{path}"', {})
    res = f"{resource}/{sub}" if sub else resource
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    why = f'User "{user}" cannot {verb} resource "{res}" in API group "{rt.group}" {scope}'
    qualified = f"{resource}.{rt.group}" if rt.group else resource
    message = f'{qualified} "{name}" is forbidden: {why}' if name else f"{qualified} is forbidden: {why}"
    details: JSON = {"name": name} if name else {}
    if rt.group:
        details["group"] = rt.group
    details["kind"] = resource
    return ApiError(403, "Forbidden", message, details)


# ---------------------------------------------------------------- discovery


def api_resource_list(group_version: str) -> JSON:
    resources: list[JSON] = []
    for rt in RESOURCES:
        if rt.group_version != group_version:
            continue
        entry: JSON = {"name": rt.name, "singularName": "", "namespaced": rt.namespaced, "kind": rt.kind,
                       "verbs": list(rt.verbs)}
        if rt.short_names:
            entry["shortNames"] = list(rt.short_names)
        resources.append(entry)
        for sub, kind, verbs in rt.subresources:
            sub_entry: JSON = {"name": f"{rt.name}/{sub}", "singularName": "", "namespaced": rt.namespaced,
                               "kind": kind, "verbs": list(verbs)}
            if sub == "eviction":  # served by policy/v1beta1 in 1.20 (registry/core/rest/storage_core.go)
                sub_entry.update(group="policy", version="v1beta1")
            resources.append(sub_entry)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}


def api_group_list() -> JSON:
    groups: dict[str, list[str]] = {}
    for rt in RESOURCES:
        if rt.group and rt.version not in groups.setdefault(rt.group, []):
            groups[rt.group].append(rt.version)
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [
        {"name": g, "versions": [{"groupVersion": f"{g}/{v}", "version": v} for v in vs],
         "preferredVersion": {"groupVersion": f"{g}/{vs[0]}", "version": vs[0]}}
        for g, vs in groups.items()]}


def _discovery(parts: list[str], port: int) -> JSON | None:
    if parts == ["version"]:
        return VERSION
    if parts == ["api"]:
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": [
            {"clientCIDR": "0.0.0.0/0", "serverAddress": f"127.0.0.1:{port}"}]}
    if parts == ["api", "v1"]:
        return api_resource_list("v1")
    if parts == ["apis"]:
        return api_group_list()
    if len(parts) == 3 and parts[0] == "apis" and any(rt.group_version == f"{parts[1]}/{parts[2]}"
                                                      for rt in RESOURCES):
        return api_resource_list(f"{parts[1]}/{parts[2]}")
    if len(parts) == 2 and parts[0] == "apis":
        for g in api_group_list()["groups"]:
            if g["name"] == parts[1]:
                return {"kind": "APIGroup", "apiVersion": "v1", **g}
    return None


def route(method: str, path: str, query: dict[str, str], port: int) -> RouteInfo:
    """Split a URL as apiserver's RequestInfoFactory does; raise the 404 Status for what is not served."""
    parts = [p for p in path.split("/") if p]
    doc = _discovery(parts, port) if method == "GET" else None
    if doc is not None:
        return RouteInfo(discovery=doc, verb="get")
    if parts[:2] == ["api", "v1"]:
        group, version, rest = "", "v1", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        raise route_not_found()
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces":
        namespace, rest = rest[1], rest[2:]
    if not rest or len(rest) > 3:
        raise route_not_found()
    rt = find_resource(group, version, rest[0])
    if rt is None or (rt.namespaced and not namespace and len(rest) > 1) or (namespace and not rt.namespaced):
        raise route_not_found()
    name = rest[1] if len(rest) > 1 else ""
    sub = rest[2] if len(rest) > 2 else ""
    if sub and sub not in {s for s, _, _ in rt.subresources}:
        raise route_not_found()
    verb = {"GET": "get" if name else ("watch" if query.get("watch") in ("true", "1") else "list"),
            "POST": "create", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete" if name else "deletecollection"}.get(method, "")
    return RouteInfo(rt=rt, namespace=namespace, name=name, subresource=sub, verb=verb)


# ---------------------------------------------------------------- tables


def _age(obj: JSON) -> str:
    return "<unknown>" if not obj["metadata"].get("creationTimestamp") else "1m"


def _node_cells(o: JSON) -> list[Any]:
    conds = {c.get("type"): c.get("status") for c in (o.get("status") or {}).get("conditions") or ()}
    status = "Ready" if conds.get("Ready") == "True" else ("NotReady" if "Ready" in conds else "Unknown")
    if (o.get("spec") or {}).get("unschedulable"):
        status += ",SchedulingDisabled"
    labels = o["metadata"].get("labels") or {}
    roles = ",".join(sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/")))
    version = ((o.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")
    return [o["metadata"]["name"], status, roles or "<none>", _age(o), version]


def _pod_cells(o: JSON) -> list[Any]:
    st = o.get("status") or {}
    cs = st.get("containerStatuses") or ()
    n = len((o.get("spec") or {}).get("containers") or ())
    ready = sum(1 for c in cs if c.get("ready"))
    restarts = sum(int(c.get("restartCount", 0)) for c in cs)
    return [o["metadata"]["name"], f"{ready}/{n}", st.get("phase", "Unknown"), restarts, _age(o)]


# name, type per column (printers in pkg/printers/internalversion/printers.go, 1.20)
_TABLES: dict[str, tuple[list[tuple[str, str]], Callable[[JSON], list[Any]]]] = {
    "nodes": ([("Name", "string"), ("Status", "string"), ("Roles", "string"), ("Age", "string"),
               ("Version", "string")], _node_cells),
    "pods": ([("Name", "string"), ("Ready", "string"), ("Status", "string"), ("Restarts", "integer"),
              ("Age", "string")], _pod_cells),
    "configmaps": ([("Name", "string"), ("Data", "integer"), ("Age", "string")],
                   lambda o: [o["metadata"]["name"], len(o.get("data") or {}) + len(o.get("binaryData") or {}),
                              _age(o)]),
}


def as_table(rt: ResourceType, items: list[JSON], revision: int) -> JSON:
    cols, cells = _TABLES.get(rt.name, ([("Name", "string"), ("Age", "string")],
                                        lambda o: [o["metadata"]["name"], _age(o)]))
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": str(revision)},
            "columnDefinitions": [{"name": n, "type": t, "format": "name" if n == "Name" else "",
                                   "description": "", "priority": 0} for n, t in cols],
            "rows": [{"cells": cells(o), "object": {"kind": "PartialObjectMetadata",
                                                   "apiVersion": "meta.k8s.io/v1", "metadata": o["metadata"]}}
                     for o in items]}


# ---------------------------------------------------------------- PodDisruptionBudgets


def _pod_ready(pod: JSON) -> bool:
    """podutil.IsPodReady: the Ready condition is True. A seeded Running pod without conditions counts as
    ready (test data rarely writes them)."""
    st = pod.get("status") or {}
    conds = st.get("conditions")
    if conds is None:
        return st.get("phase") == "Running"
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _scaled(value: Any, total: int, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent."""
    if isinstance(value, str) and value.endswith("%"):
        v = int(value[:-1]) * total / 100
        return math.ceil(v) if round_up else math.floor(v)
    return int(value)


def pdb_status(pdb: JSON, pods: list[JSON]) -> JSON:
    """What the disruption controller (pkg/controller/disruption/disruption.go `getExpectedPodCount`,
    `countHealthyPods`) keeps in a PDB's status, computed from the pods now: expected = the matching pods
    (standing in for the controller's scale), minAvailable (or expected - maxUnavailable) = desiredHealthy,
    disruptionsAllowed = currentHealthy - desiredHealthy, not below 0."""
    spec, ns = pdb.get("spec") or {}, pdb["metadata"].get("namespace", "default")
    matching = [p for p in pods if p["metadata"].get("namespace", "default") == ns
                and selector_matches(spec.get("selector"), p["metadata"].get("labels") or {})
                and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    healthy = sum(1 for p in matching if _pod_ready(p))
    expected = len(matching)
    if "maxUnavailable" in spec:
        desired = max(0, expected - _scaled(spec["maxUnavailable"], expected, round_up=True))
    else:
        desired = _scaled(spec.get("minAvailable", 1), expected, round_up=True)
    return {"observedGeneration": pdb["metadata"].get("generation", 1), "disruptionsAllowed":
            max(0, healthy - desired), "currentHealthy": healthy, "desiredHealthy": desired,
            "expectedPods": expected}


# ---------------------------------------------------------------- the API


class Api:
    """Request handling, independent of HTTP (the handler below calls `handle`)."""

    def __init__(self, store: Store, rbac: Rbac | None) -> None:
        self.store, self.rbac = store, rbac
        self.requests: list[Request] = []
        self.port = 0
        self._log_lock = threading.Lock()

    # -- entry point
    def handle(self, method: str, raw_path: str, headers: dict[str, str], raw_body: bytes) -> tuple[int, Any]:
        url = urllib.parse.urlsplit(raw_path)
        query = dict(urllib.parse.parse_qsl(url.query, keep_blank_values=True))
        ctype = headers.get("content-type", "").split(";")[0].strip()
        body: Any = None
        if raw_body:
            try:
                body = json.loads(raw_body)
            except ValueError:
                body = raw_body.decode("utf-8", "replace")
        req = Request(method, url.path, query, ctype, body)
        try:
            code, out = self._dispatch(req, url.path, query, headers, body)
        except ApiError as err:
            code, out = err.code, err.status()
        req.code = code
        with self._log_lock:
            self.requests.append(req)
        return code, out

    def _dispatch(self, req: Request, path: str, query: dict[str, str], headers: dict[str, str],
                  body: Any) -> tuple[int, Any]:
        info = route(req.method, path, query, self.port)
        req.verb = info.verb
        if info.discovery is not None:
            return 200, info.discovery
        rt = info.rt
        assert rt is not None
        req.resource, req.subresource, req.namespace, req.name = rt.name, info.subresource, info.namespace, \
            info.name
        if isinstance(body, str):
            raise bad_request(f"the body of the request was in an unknown format - accepted media types "
                              f"include: application/json, application/yaml ({body[:40]!r})")
        self._authorize(info, path)
        if info.verb not in rt.verbs and not info.subresource:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                           "resource", {"kind": rt.name, "name": info.name} if info.name else {"kind": rt.name})
        handler = getattr(self, f"_{info.verb}", None)
        if handler is None:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                           "resource", {"kind": rt.name})
        result: tuple[int, Any] = handler(info, query, headers, body)
        return result

    def _authorize(self, info: RouteInfo, path: str) -> None:
        rb, rt = self.rbac, info.rt
        if rb is None or not rb.enforce or rt is None or rt.group == "authorization.k8s.io":
            return  # system:basic-user may always create self*reviews (bootstrap policy)
        if not rb.allowed(info.verb, rt.group, rt.name, info.subresource, info.namespace, info.name):
            raise forbidden(rb.user, info.verb, rt, rt.name, info.subresource, info.namespace, info.name, path)

    # -- verbs
    def _get(self, info: RouteInfo, query: dict[str, str], headers: dict[str, str], body: Any) -> tuple[int, Any]:
        assert info.rt is not None
        obj = self.store.get(info.rt, info.namespace, info.name)
        obj = self._with_live_status(info.rt, obj)
        if "as=Table" in headers.get("accept", ""):
            return 200, as_table(info.rt, [obj], self.store.revision)
        return 200, obj

    def _list(self, info: RouteInfo, query: dict[str, str], headers: dict[str, str], body: Any) -> tuple[int, Any]:
        rt = info.rt
        assert rt is not None
        label_tests = parse_label_selector(query.get("labelSelector", ""))
        field_tests = parse_field_selector(rt, query.get("fieldSelector", ""))
        items = [self._with_live_status(rt, o) for o in self.store.list(rt, info.namespace)]
        items = [o for o in items if all(t(o["metadata"].get("labels") or {}) for t in label_tests)
                 and all(t(o) for t in field_tests)]
        if "as=Table" in headers.get("accept", ""):
            return 200, as_table(rt, items, self.store.revision)
        for o in items:  # list items carry no kind/apiVersion on the wire
            o.pop("kind", None)
            o.pop("apiVersion", None)
        return 200, {"kind": f"{rt.kind}List", "apiVersion": rt.group_version,
                     "metadata": {"resourceVersion": str(self.store.revision)}, "items": items}

    def _with_live_status(self, rt: ResourceType, obj: JSON) -> JSON:
        if rt.name == "poddisruptionbudgets":
            obj["status"] = pdb_status(obj, self.store.list(resource_type("pods")))
        return obj

    def _create(self, info: RouteInfo, query: dict[str, str], headers: dict[str, str],
                body: Any) -> tuple[int, Any]:
        rt = info.rt
        assert rt is not None
        if info.subresource == "eviction":
            return self._evict(info, body, query)
        if rt.name == "selfsubjectaccessreviews":
            return 201, self._access_review(body)
        if rt.name == "selfsubjectrulesreviews":
            return 201, self._rules_review(body)
        if info.name:
            raise ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested "
                           "resource", {"kind": rt.name, "name": info.name})
        self._check_body(rt, body)
        if rt.namespaced:
            self._require_namespace(info.namespace)
            body.setdefault("metadata", {}).setdefault("namespace", info.namespace)
            if body["metadata"]["namespace"] != info.namespace:
                raise bad_request("the namespace of the provided object does not match the namespace sent on "
                                  "the request")
        return 201, self.store.create(rt, info.namespace, body, dry_run=query.get("dryRun") == "All")

    def _update(self, info: RouteInfo, query: dict[str, str], headers: dict[str, str],
                body: Any) -> tuple[int, Any]:
        rt = info.rt
        assert rt is not None
        self._check_body(rt, body)
        return 200, self.store.update(rt, info.namespace, info.name, lambda cur: self._keep_status(info, cur, body),
                                      dry_run=query.get("dryRun") == "All")

    @staticmethod
    def _keep_status(info: RouteInfo, current: JSON, new: JSON) -> JSON:
        """A PUT of the main resource leaves status alone, a PUT of /status changes only status (the
        registry strategies' PrepareForUpdate, e.g. pkg/registry/core/node/strategy.go)."""
        if info.subresource == "status":
            current["status"] = new.get("status")
            current["metadata"]["resourceVersion"] = (new.get("metadata") or {}).get("resourceVersion")
            return current
        if "status" in current and info.rt is not None and info.rt.name in ("nodes", "pods",
                                                                                "poddisruptionbudgets"):
            new["status"] = current["status"]
        return new

    def _patch(self, info: RouteInfo, query: dict[str, str], headers: dict[str, str],
               body: Any) -> tuple[int, Any]:
        rt = info.rt
        assert rt is not None
        ctype = headers.get("content-type", "").split(";")[0].strip()
        appliers: dict[str, Callable[[JSON, Any], JSON]] = {
            "application/merge-patch+json": merge_patch, "application/strategic-merge-patch+json":
            strategic_merge_patch, "application/json-patch+json": json_patch}
        if ctype not in appliers:
            # apiserver handlers/patch.go: the content type is not a patch type it serves (server-side apply,
            # application/apply-patch+yaml, is left out of this stand-in)
            raise ApiError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                           "accepted media types include: application/json-patch+json, "
                           "application/merge-patch+json, application/strategic-merge-patch+json", {})
        if body is None or (ctype != "application/json-patch+json" and not isinstance(body, dict)):
            raise bad_request("the body of the request was in an unknown format")
        apply = appliers[ctype]

        def mutate(cur: JSON) -> JSON:
            cur["metadata"].pop("resourceVersion", None)  # only a resourceVersion in the patch is a precondition
            new = apply(cur, body)
            if not isinstance(new, dict):
                raise bad_request("the patch produced an object that is not a JSON object")
            if info.subresource == "status":
                cur["status"] = new.get("status")
                cur["metadata"]["resourceVersion"] = new.get("metadata", {}).get("resourceVersion")
                new = cur
            new.setdefault("metadata", {})
            if new["metadata"].get("resourceVersion") is None:
                new["metadata"].pop("resourceVersion", None)
            return new

        return 200, self.store.update(rt, info.namespace, info.name, mutate, dry_run=query.get("dryRun") == "All")

    def _delete(self, info: RouteInfo, query: dict[str, str], headers: dict[str, str],
                body: Any) -> tuple[int, Any]:
        rt = info.rt
        assert rt is not None
        self._check_delete_preconditions(rt, info, body)
        obj = self.store.delete(rt, info.namespace, info.name, dry_run=query.get("dryRun") == "All")
        if rt.name == "pods":
            # A graceful pod delete answers with the pod (deletionTimestamp set); the kubelet would then
            # remove it. Here the removal is immediate.
            obj["metadata"]["deletionTimestamp"] = now()
            obj["metadata"]["deletionGracePeriodSeconds"] = 0
            return 200, obj
        return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                     "details": {"name": info.name, "group": rt.group, "kind": rt.name,
                                 "uid": obj["metadata"].get("uid", "")}}

    def _check_delete_preconditions(self, rt: ResourceType, info: RouteInfo, body: Any) -> None:
        pre = (body or {}).get("preconditions") if isinstance(body, dict) else None
        if not pre:
            return
        cur = self.store.get(rt, info.namespace, info.name)
        if pre.get("uid") and pre["uid"] != cur["metadata"].get("uid"):
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rt.qualified} "{info.name}": '
                           f'Precondition failed: UID in precondition: {pre["uid"]}, UID in object meta: '
                           f'{cur["metadata"].get("uid")}', {"name": info.name, "kind": rt.name})
        if pre.get("resourceVersion") and pre["resourceVersion"] != cur["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", f'Operation cannot be fulfilled on {rt.qualified} "{info.name}": '
                           f'Precondition failed: ResourceVersion in precondition: {pre["resourceVersion"]}, '
                           f'ResourceVersion in object meta: {cur["metadata"]["resourceVersion"]}',
                           {"name": info.name, "kind": rt.name})

    # -- helpers
    def _check_body(self, rt: ResourceType, body: Any) -> None:
        if not isinstance(body, dict):
            raise bad_request("the body of the request was in an unknown format - accepted media types include: "
                              "application/json, application/yaml")
        kind, api_version = body.get("kind"), body.get("apiVersion")
        if (kind and kind != rt.kind) or (api_version and api_version != rt.group_version):
            raise bad_request(f"the API version in the data ({api_version}) does not match the expected API "
                              f"version ({rt.group_version})" if kind == rt.kind else
                              f"{kind} in version \"{rt.version}\" cannot be handled as a {rt.kind}: "
                              f"no kind \"{kind}\" is registered for version \"{rt.group_version}\"")

    def _require_namespace(self, namespace: str) -> None:
        try:
            self.store.get(resource_type("namespaces"), None, namespace)
        except ApiError:
            # apiserver admission NamespaceLifecycle: errors.NewNotFound(namespaces, name)
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found',
                           {"name": namespace, "kind": "namespaces"}) from None

    def _evict(self, info: RouteInfo, body: Any, query: dict[str, str]) -> tuple[int, Any]:
        """pkg/registry/core/pod/storage/eviction.go (1.20) `EvictionREST.Create`: a pod that is Succeeded,
        Failed or Pending is deleted without looking at PDBs (`canIgnorePDB`); more than one matching PDB is
        a 500 Status; a PDB with `disruptionsAllowed == 0` answers 429 TooManyRequests with a
        `DisruptionBudget` cause; otherwise the budget is spent and the pod deleted (201 Success)."""
        pods = resource_type("pods")
        pod = self.store.get(pods, info.namespace, info.name)
        if not isinstance(body, dict) or body.get("kind") != "Eviction":
            raise bad_request("the body of the request was in an unknown format - expected an Eviction")
        if (body.get("metadata") or {}).get("name") not in (None, info.name):
            raise bad_request(f"name in URL does not match name in Eviction object: "
                              f"{info.name} != {body['metadata'].get('name')}")
        dry = query.get("dryRun") == "All" or (body.get("deleteOptions") or {}).get("dryRun") == ["All"]
        phase = (pod.get("status") or {}).get("phase")
        if phase not in ("Succeeded", "Failed", "Pending"):
            pdbs = [p for p in self.store.list(resource_type("poddisruptionbudgets"), info.namespace)
                    if selector_matches((p.get("spec") or {}).get("selector"), pod["metadata"].get("labels") or {})]
            if len(pdbs) > 1:
                return 500, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                             "message": "This pod has more than one PodDisruptionBudget, which the eviction "
                             "subresource does not support.", "code": 500}
            if pdbs:
                st = pdb_status(pdbs[0], self.store.list(pods))
                if st["disruptionsAllowed"] == 0:
                    raise ApiError(429, "TooManyRequests",
                                   "Cannot evict pod as it would violate the pod's disruption budget.",
                                   {"causes": [{"reason": "DisruptionBudget", "message":
                                                f"The disruption budget {pdbs[0]['metadata']['name']} needs "
                                                f"{st['desiredHealthy']} healthy pods and has "
                                                f"{st['currentHealthy']} currently"}]})
        if not dry:
            self.store.delete(pods, info.namespace, info.name)
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    def _access_review(self, body: Any) -> JSON:
        """authorization/v1 SelfSubjectAccessReview (pkg/registry/authorization/selfsubjectaccessreview/
        rest.go): the spec back, `status.allowed` from the authorizer."""
        spec = (body or {}).get("spec") or {}
        ra, nra = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
        if self.rbac is None:
            allowed, reason = True, "the k8s_sim stand-in has no RBAC rules: everything is allowed"
        elif ra is not None:
            allowed = self.rbac.allowed(ra.get("verb", ""), ra.get("group", ""), ra.get("resource", ""),
                                        ra.get("subresource", ""), ra.get("namespace", ""), ra.get("name", ""))
            reason = "RBAC: allowed by the k8s_sim stand-in's rules" if allowed else ""
        elif nra is not None:
            allowed, reason = nra.get("path", "").startswith(("/api", "/apis", "/version", "/healthz")), ""
        else:
            raise ApiError(422, "Invalid", 'SelfSubjectAccessReview.authorization.k8s.io "" is invalid: '
                           "spec.resourceAttributes: Invalid value: \"null\": exactly one of "
                           "nonResourceAttributes or resourceAttributes must be specified",
                           {"group": "authorization.k8s.io", "kind": "SelfSubjectAccessReview"})
        status: JSON = {"allowed": allowed}
        if reason:
            status["reason"] = reason
        return {"kind": "SelfSubjectAccessReview", "apiVersion": "authorization.k8s.io/v1",
                "metadata": {"creationTimestamp": None}, "spec": spec, "status": status}

    def _rules_review(self, body: Any) -> JSON:
        ns = (((body or {}).get("spec")) or {}).get("namespace", "")
        rules: list[JSON] = []
        if self.rbac is None:
            rules = [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}]
        else:
            rules = list(self.rbac.rules) + [r for role in self.rbac.roles for r in role.get("rules") or ()
                                             if role.get("kind") == "ClusterRole"
                                             or (role.get("metadata") or {}).get("namespace") == ns]
        return {"kind": "SelfSubjectRulesReview", "apiVersion": "authorization.k8s.io/v1",
                "metadata": {"creationTimestamp": None}, "spec": {"namespace": ns},
                "status": {"resourceRules": rules, "nonResourceRules": [
                    {"verbs": ["get"], "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/version"]}],
                    "incomplete": False}}


# ---------------------------------------------------------------- HTTP


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            raw = self._chunked()  # what kubectl sends for a body it streams (`create --raw -f`), as Go's net/http
        headers = {k.lower(): v for k, v in self.headers.items()}
        code, out = self.server.api.handle(self.command, self.path, headers, raw)
        data = json.dumps(out).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _chunked(self) -> bytes:
        """A chunked request body (RFC 9112 §7.1): hex size lines, each chunk, a 0 chunk, trailers."""
        out = b""
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass
                return out
            out += self.rfile.read(size)
            self.rfile.readline()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, api: Api) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.api = api


class ApiServer:
    """The HTTP server, on a port the kernel picks, serving in a daemon thread until `stop()`."""

    def __init__(self, store: Store, rbac: Rbac | None) -> None:
        self.api = Api(store, rbac)
        self._http = _Server(self.api)
        self.port = int(self._http.server_address[1])
        self.api.port = self.port
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._http.serve_forever, args=(0.05,), name="k8s-sim-apiserver",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(timeout=5)
