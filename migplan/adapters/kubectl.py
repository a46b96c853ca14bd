"""Kubernetes through `kubectl`: the only place migplan talks to a cluster (docs/kubernetes.md).

Why kubectl and not the Python client: it is what the operator already has, with their kubeconfig, context,
credential plugins (`exec:` auth for EKS/GKE/AKS) and proxy settings; migplan adds no dependency and holds no
credential. `--kubeconfig FILE` and `--context NAME` are passed through as given (validated tokens).

Every call:
  * is an argv built here from validated tokens (kinds from a fixed list, names as Kubernetes spells them:
    DNS-1123 subdomains, namespaces DNS-1123 labels), run without a shell through `LocalRunner` (so a stop
    signal kills it with migplan, `adapters/children.py`), its output bounded (`runner.MAX_OUTPUT_BYTES`);
  * has a timeout: kubectl's own `--request-timeout` and, around the process, the same plus a margin;
  * is answered as untrusted data: JSON parsed with a depth bound, the shape checked (an object of the
    expected `kind`), and kubectl's errors turned into `KubectlError` with a reason a caller can act on:
    `missing` (no kubectl), `unreachable` (no API server), `forbidden` (RBAC), `not-found`, `conflict`
    (409: the object changed since it was read), `too-many-requests` (429: an eviction a
    PodDisruptionBudget refuses), `invalid`, `timeout`, `config` (a bad kubeconfig or context), `error`.

The messages kubectl prints for API errors are `Error from server (Reason): ...` (k8s.io/kubectl
`pkg/cmd/util/helpers.go` `StandardErrorMessage`, the reason being the Status reason of
k8s.io/apimachinery `pkg/apis/meta/v1/types.go`: NotFound, Forbidden, Conflict, TooManyRequests, Invalid);
an eviction refused by a PodDisruptionBudget is a 429 TooManyRequests ("Cannot evict pod as it would violate
the pod's disruption budget", k8s.io/kubernetes `pkg/registry/core/pod/storage/eviction.go`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from migplan.adapters.runner import CommandTimeout, Completed, HostError, LocalRunner, command_line
from migplan.errors import MigplanError
from migplan.files import json_depth_ok
from migplan.text import printable

DEFAULT_REQUEST_TIMEOUT = 30.0  # seconds kubectl may take for one request (its --request-timeout)
_MARGIN_S = 10.0  # the process gets this much more than the request before it is killed
KINDS = ("nodes", "pods", "configmaps", "poddisruptionbudgets")
_DNS_SUBDOMAIN = re.compile(r"\A[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")
_DNS_LABEL = re.compile(r"\A[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_CONTEXT = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._@:/+-]{0,252}\Z")
_FIELD_SELECTOR = re.compile(r"\A[a-zA-Z.]{1,40}=[A-Za-z0-9._-]{0,253}\Z")
_SERVER_ERROR = re.compile(r"Error from server \((\w+)\)")
_REASONS = {"NotFound": "not-found", "Forbidden": "forbidden", "Conflict": "conflict",
            "TooManyRequests": "too-many-requests", "Invalid": "invalid", "AlreadyExists": "conflict",
            "Unauthorized": "forbidden"}
_UNREACHABLE = ("Unable to connect to the server", "The connection to the server", "connection refused",
                "no such host", "i/o timeout", "dial tcp")


class KubectlError(MigplanError):
    """A kubectl call that failed, with why (`reason`) and the command line it was."""

    def __init__(self, message: str, *, reason: str, command: str = "", hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.reason = reason
        self.command = command


@dataclass(frozen=True)
class KubectlOptions:
    """How to reach the cluster: the operator's own kubeconfig (None: kubectl's default, $KUBECONFIG or
    ~/.kube/config) and context (None: its current context)."""

    kubeconfig: str | None = None
    context: str | None = None
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    binary: str = "kubectl"


def check_name(name: str, what: str) -> str:
    """A Kubernetes object name (DNS-1123 subdomain): anything else never reaches a command line."""
    if not isinstance(name, str) or not _DNS_SUBDOMAIN.fullmatch(name):
        raise MigplanError(f"{what} {printable(str(name), 80)!r} is not a Kubernetes name "
                           "(lower-case letters, digits, '-' and '.')")
    return name


def check_namespace(name: str) -> str:
    if not isinstance(name, str) or not _DNS_LABEL.fullmatch(name):
        raise MigplanError(f"namespace {printable(str(name), 80)!r} is not a Kubernetes namespace name")
    return name


Call = Callable[[dict[str, Any]], None]  # told of every call: argv, exit code, duration, the output's head


def _quiet(_event: dict[str, Any]) -> None:
    """Keeps nothing."""


class Kubectl:
    """kubectl with the operator's kubeconfig and context. `runner`: a LocalRunner (tests may pass another
    with the same `run`); `on_call`: told of every call (the apply's journal)."""

    def __init__(self, options: KubectlOptions | None = None, *, runner: Any = None, on_call: Call = _quiet) -> None:
        self.options = options or KubectlOptions()
        if self.options.kubeconfig is not None and (not self.options.kubeconfig
                                                    or "\0" in self.options.kubeconfig):
            raise MigplanError("--kubeconfig must name a file")
        if self.options.context is not None and not _CONTEXT.fullmatch(self.options.context):
            raise MigplanError(f"--context {printable(self.options.context, 80)!r} is not a context name")
        if not 0 < self.options.request_timeout <= 3600:
            raise MigplanError("the kubectl request timeout must be between 0 and 3600 seconds")
        self.runner = runner if runner is not None else LocalRunner(host="kubectl")
        self.on_call = on_call

    # --- argv --------------------------------------------------------------------------------------

    def argv(self, *args: str) -> list[str]:
        """`kubectl [--kubeconfig F] [--context C] --request-timeout=Ns ARGS...`."""
        o = self.options
        head = [o.binary]
        if o.kubeconfig is not None:
            head += ["--kubeconfig", o.kubeconfig]
        if o.context is not None:
            head += ["--context", o.context]
        head.append(f"--request-timeout={max(1, round(o.request_timeout))}s")
        return [*head, *args]

    def line(self, *args: str) -> str:
        """The command as a shell line (dry runs): every token quoted."""
        return command_line(self.argv(*args))

    @staticmethod
    def get_args(kind: str, name: str | None = None, namespace: str | None = None, *,
                 all_namespaces: bool = False, field_selector: str | None = None) -> list[str]:
        if kind not in KINDS:
            raise MigplanError(f"kubectl: unknown kind {kind!r}")
        args = ["get", kind]
        if name is not None:
            args.append(check_name(name, kind[:-1]))
        if namespace is not None:
            args += ["-n", check_namespace(namespace)]
        if all_namespaces:
            args.append("--all-namespaces")
        if field_selector is not None:
            if not _FIELD_SELECTOR.fullmatch(field_selector):
                raise MigplanError(f"kubectl: bad field selector {field_selector!r}")
            args.append(f"--field-selector={field_selector}")
        return [*args, "-o", "json"]

    @staticmethod
    def patch_args(kind: str, name: str, patch: Mapping[str, Any], namespace: str | None = None) -> list[str]:
        """A JSON merge patch (RFC 7386): keys set, `null` removes. With `metadata.resourceVersion` in it the API
        server applies it only to that version (409 Conflict otherwise)."""
        if kind not in KINDS:
            raise MigplanError(f"kubectl: unknown kind {kind!r}")
        args = ["patch", kind, check_name(name, kind[:-1])]
        if namespace is not None:
            args += ["-n", check_namespace(namespace)]
        return [*args, "--type=merge", "-p", json.dumps(patch, sort_keys=True, separators=(",", ":")),
                "-o", "json"]

    @staticmethod
    def eviction_path(namespace: str, name: str) -> str:
        """The eviction subresource (policy/v1 Eviction), what `kubectl drain` posts to."""
        return f"/api/v1/namespaces/{check_namespace(namespace)}/pods/{check_name(name, 'pod')}/eviction"

    @staticmethod
    def eviction_body(namespace: str, name: str) -> str:
        return json.dumps({"apiVersion": "policy/v1", "kind": "Eviction",
                           "metadata": {"name": name, "namespace": namespace}}, separators=(",", ":"))

    # --- running -----------------------------------------------------------------------------------

    def run(self, args: Sequence[str], *, stdin: bytes | None = None) -> str:
        """Run one kubectl call; its stdout, or KubectlError."""
        argv = self.argv(*args)
        shown = command_line(argv)
        timeout = self.options.request_timeout + _MARGIN_S
        try:
            done: Completed = self.runner.run(argv, timeout=timeout, stdin=stdin)
        except CommandTimeout:
            self.on_call({"argv": argv, "exit_code": None, "error": "timeout"})
            raise KubectlError(f"kubectl did not answer within {timeout:g} s", reason="timeout", command=shown,
                               hint="check that the API server is reachable (kubectl cluster-info)") from None
        except HostError as err:
            self.on_call({"argv": argv, "exit_code": None, "error": str(err)})
            raise KubectlError(f"cannot run kubectl: {err}", reason="error", command=shown) from None
        self.on_call({"argv": argv, "exit_code": done.exit_code, "duration_s": round(done.duration_s, 3),
                      "stdout": done.stdout[:2000], "stderr": done.stderr[-2000:]})
        if done.exit_code != 0:
            raise _error(done, shown, self.options)
        return done.stdout

    def json(self, args: Sequence[str], *, kind: str | tuple[str, ...] | None = None,
             stdin: bytes | None = None) -> dict[str, Any]:
        """A call whose answer is one JSON object (of `kind` when given), checked as untrusted data."""
        text = self.run(args, stdin=stdin)
        return parse_object(text, kind, command_line(self.argv(*args)))

    def get(self, kind: str, name: str | None = None, namespace: str | None = None, *,
            all_namespaces: bool = False, field_selector: str | None = None) -> dict[str, Any]:
        want = None if name is not None else ("List", _list_kind(kind))
        return self.json(self.get_args(kind, name, namespace, all_namespaces=all_namespaces,
                                       field_selector=field_selector), kind=want)

    def get_text(self, kind: str, *, all_namespaces: bool = False) -> str:
        """A list as kubectl prints it (`kubectl get nodes -o json`, `kubectl get pods -A -o json`), for readers
        that take the text; checked to be one JSON object of the list's kind first."""
        args = self.get_args(kind, all_namespaces=all_namespaces)
        text = self.run(args)
        parse_object(text, ("List", _list_kind(kind)), command_line(self.argv(*args)))
        return text

    def patch(self, kind: str, name: str, patch: Mapping[str, Any], namespace: str | None = None) -> dict[str, Any]:
        return self.json(self.patch_args(kind, name, patch, namespace))

    def evict(self, namespace: str, name: str) -> None:
        """Evict a pod through the eviction API (honours PodDisruptionBudgets: a refusal is `too-many-requests`)."""
        self.run(["create", "--raw", self.eviction_path(namespace, name), "-f", "-"],
                 stdin=self.eviction_body(namespace, name).encode())

    def can_i(self, verb: str, resource: str, namespace: str | None = None) -> bool:
        """`kubectl auth can-i VERB RESOURCE [-n NS]`: yes (exit 0) or no (exit 1 with 'no')."""
        if not re.fullmatch(r"[a-z]{1,20}", verb) or not re.fullmatch(r"[a-z/.]{1,60}", resource):
            raise MigplanError(f"kubectl auth can-i: bad verb or resource {verb!r} {resource!r}")
        args = ["auth", "can-i", verb, resource] + (["-n", check_namespace(namespace)] if namespace else [])
        try:
            return self.run(args).strip() == "yes"
        except KubectlError as err:
            if err.reason == "error" and "no" in str(err).split():
                return False
            raise


def _list_kind(kind: str) -> str:
    return {"nodes": "NodeList", "pods": "PodList", "configmaps": "ConfigMapList",
            "poddisruptionbudgets": "PodDisruptionBudgetList"}[kind]


MAX_ITEMS = 100_000


def parse_object(text: str, kind: str | tuple[str, ...] | None, command: str) -> dict[str, Any]:
    """kubectl's JSON answer, as untrusted data: one object, nested at most `files.MAX_JSON_DEPTH`, of `kind`."""
    if not json_depth_ok(text):
        raise KubectlError("kubectl's answer is nested too deep to be a Kubernetes object", reason="invalid",
                           command=command)
    try:
        doc = json.loads(text)
    except ValueError as err:
        raise KubectlError(f"kubectl's answer is not JSON ({err})", reason="invalid", command=command,
                           hint="run the command by hand; a kubectl plugin or wrapper may print other text") from None
    if not isinstance(doc, dict):
        raise KubectlError("kubectl's answer is not a JSON object", reason="invalid", command=command)
    kinds = (kind,) if isinstance(kind, str) else kind
    if kinds is not None and doc.get("kind") not in kinds:
        raise KubectlError(f"kubectl answered kind {printable(str(doc.get('kind')), 40)!r}, expected "
                           f"{' or '.join(kinds)}", reason="invalid", command=command)
    items = doc.get("items")
    if items is not None and (not isinstance(items, list) or len(items) > MAX_ITEMS):
        raise KubectlError("kubectl's answer has an 'items' that is not a list (or too long)", reason="invalid",
                           command=command)
    return doc


def _error(done: Completed, shown: str, options: KubectlOptions) -> KubectlError:
    text = printable((done.stderr or done.stdout).strip(), 400)
    if done.exit_code == 127:
        return KubectlError(f"kubectl is not installed here ({options.binary}: command not found)", reason="missing",
                            command=shown, hint="install kubectl (Debian: apt-get install kubernetes-client) and "
                                                "make sure it is on PATH")
    found = _SERVER_ERROR.search(done.stderr)
    if found:
        reason = _REASONS.get(found.group(1), "error")
        hint = {"forbidden": "the kubeconfig's user lacks a permission: see the RBAC in docs/kubernetes.md",
                "not-found": "check the name (and namespace)",
                "conflict": "the object changed since it was read: read it again"}.get(reason)
        return KubectlError(text, reason=reason, command=shown, hint=hint)
    if any(s in done.stderr for s in _UNREACHABLE):
        return KubectlError(text, reason="unreachable", command=shown,
                            hint="check the cluster is reachable from here: kubectl cluster-info"
                                 + (f" (context {options.context})" if options.context else ""))
    if "context was not found" in done.stderr or "does not exist" in done.stderr or "kubeconfig" in done.stderr \
            or "no configuration has been provided" in done.stderr:
        return KubectlError(text, reason="config", command=shown,
                            hint="pass --kubeconfig FILE and --context NAME (kubectl config get-contexts)")
    return KubectlError(text or f"kubectl exited {done.exit_code}", reason="error", command=shown)
