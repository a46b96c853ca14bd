"""Which workload a GPU process belongs to, from what the host says about it (pure: facts in, a name out).

PIDs come and go; a workload's history must not. In order:

1. `MIGPLAN_WORKLOAD=name` in the process environment: the owner's own word.
2. A user rule (`Rule`): a regular expression searched in the command line (arguments joined by spaces);
   the first that matches names the workload (`\\1`-style groups may be used in the name).
3. A Kubernetes pod, from the cgroup path the kubelet gives its containers: `k8s:NAMESPACE/NAME` when the
   pod's namespace and name are known (the downward-API variables `POD_NAMESPACE`/`POD_NAME`, or
   `KUBERNETES_POD_NAMESPACE`/`KUBERNETES_POD_NAME`, in its environment; a ReplicaSet's or Job's generated
   suffix is dropped, so replicas and restarts of one Deployment are one workload), else `k8s-pod:UID`.
   Path forms: cgroupfs driver `/kubepods[/burstable|/besteffort]/pod<UID>/<container>`, systemd driver
   `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID_with_underscores>.slice/
   cri-containerd-<id>.scope` (also `docker-`, `crio-`).
4. A container outside Kubernetes: `container:<first 12 hex of the id>` (docker `/docker/<id>` or
   `docker-<id>.scope`, podman `libpod-<id>.scope`, containerd/nerdctl `/<namespace>/<id>` or
   `nerdctl-<id>.scope`).
5. A systemd service: `systemd:<unit>.service` (system or user manager; session scopes are not workloads).
6. Otherwise the executable: `exe:<name>`, and for an interpreter (python, java, node, ...) also its
   script or module (`exe:python3:serve.py`), so unrelated Python programs are not one workload.

Every name is cut to what `migplan.names.WORKLOAD_NAME` accepts (other characters become `_`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from migplan.errors import InputError
from migplan.names import WORKLOAD_NAME

ENV_VAR = "MIGPLAN_WORKLOAD"
# Environment variables a process may carry that identify it; readers fetch only these.
ENV_KEYS = (ENV_VAR, "POD_NAME", "POD_NAMESPACE", "KUBERNETES_POD_NAME", "KUBERNETES_POD_NAMESPACE")

_UID = r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
_POD = re.compile(rf"(?:/kubepods\b[^\n]*?/pod|kubepods-(?:[a-z]+-)?pod)({_UID})(?:\.slice)?(?:/|$)")
_CONTAINER = (
    re.compile(r"(?:/docker/|docker-|libpod-|nerdctl-|cri-containerd-|crio-)([0-9a-f]{64})(?:\.scope)?(?:/|$)"),
    re.compile(r"^/[a-z0-9][a-z0-9_.-]{0,62}/([0-9a-f]{64})$"),  # containerd (nerdctl, cgroupfs): /<namespace>/<id>
)
_UNIT = re.compile(r"/([A-Za-z0-9:_.@\\-]+\.service)(?:/|$)")
_NOT_UNITS = re.compile(r"^(?:user@\d+|user-runtime-dir@\d+|session-\w+|containerd|docker|crio|kubelet)\.service$")
# Generated suffixes, in the alphabet Kubernetes uses for them (apimachinery util/rand SafeEncodeString: no
# vowels, no 0/1/3, so real words rarely match): ReplicaSet pod <deploy>-<pod-template-hash>-<5>, and
# Job/DaemonSet/bare-ReplicaSet pod <name>-<5>.
_K8S_CHARS = "[bcdfghjklmnpqrstvwxz2456789]"
_RS_SUFFIX = re.compile(rf"-{_K8S_CHARS}{{6,10}}-{_K8S_CHARS}{{5}}$")
_JOB_SUFFIX = re.compile(rf"-{_K8S_CHARS}{{5}}$")
_INTERPRETERS = re.compile(r"^(?:python[0-9.]*|pypy[0-9.]*|java|node|ruby|perl|Rscript|julia|bash|sh)$")
_BAD = re.compile(r"[^A-Za-z0-9._/:-]")


@dataclass(frozen=True)
class ProcessFacts:
    """What the host's /proc says about one process (any field may be missing: it may have exited)."""

    pid: int
    cmdline: tuple[str, ...] = ()
    exe: str | None = None  # the executable's path or name (/proc/PID/exe, or nvidia-smi's process_name)
    cgroup: str = ""  # /proc/PID/cgroup as read
    env: Mapping[str, str] = field(default_factory=dict)  # only the ENV_KEYS that are set


@dataclass(frozen=True)
class Rule:
    pattern: re.Pattern[str]
    workload: str  # may refer to groups: "vllm-\\1"


@dataclass(frozen=True)
class Identity:
    workload: str
    how: str  # env, rule, k8s, container, systemd, exe, unknown


def parse_rules(doc: object, source: str) -> tuple[Rule, ...]:
    """`{version: 1, rules: [{match: REGEX, workload: NAME}, ...]}` (a parsed YAML document)."""
    if not isinstance(doc, dict) or doc.get("version") != 1 or not isinstance(doc.get("rules"), list):
        raise InputError("a workload rules file is 'version: 1' and a 'rules:' list", source=source,
                         hint="rules: [{match: 'serve.py --model (\\\\S+)', workload: 'llm-\\\\1'}]")
    rules = []
    for i, item in enumerate(doc["rules"]):
        key = f"rules[{i}]"
        if not isinstance(item, dict) or set(item) != {"match", "workload"}:
            raise InputError("each rule has exactly 'match' (a regular expression) and 'workload'",
                             source=source, key=key)
        if not isinstance(item["match"], str) or not isinstance(item["workload"], str):
            raise InputError("'match' and 'workload' are strings", source=source, key=key)
        try:
            pattern = re.compile(item["match"])
        except re.error as err:
            raise InputError(f"'match' is not a valid regular expression: {err}", source=source, key=key) from None
        if not item["workload"].strip():
            raise InputError("'workload' is empty", source=source, key=key)
        rules.append(Rule(pattern, item["workload"]))
    return tuple(rules)


def clean(name: str) -> str:
    """`name` as a valid workload name (migplan.names.WORKLOAD_NAME): bad characters -> '_', bounded."""
    out = _BAD.sub("_", name.strip())[:253].lstrip("._/:-") or "unknown"
    return out if WORKLOAD_NAME.fullmatch(out) else "unknown"


def pod_uid(cgroup: str) -> str | None:
    """The pod UID in a kubelet cgroup path (either driver), with dashes."""
    for path in _paths(cgroup):
        m = _POD.search(path)
        if m:
            return m.group(1).replace("_", "-")
    return None


def container_id(cgroup: str) -> str | None:
    for path in _paths(cgroup):
        for pattern in _CONTAINER:
            m = pattern.search(path)
            if m:
                return m.group(1)
    return None


def systemd_unit(cgroup: str) -> str | None:
    for path in _paths(cgroup):
        units = [str(u) for u in _UNIT.findall(path) if not _NOT_UNITS.match(u)]
        if units:
            return units[-1]  # the innermost service (a user service inside user@UID.service)
    return None


def _paths(cgroup: str) -> list[str]:
    """Paths of /proc/PID/cgroup lines (`ID:CONTROLLERS:PATH`): the v2 line first, then v1's."""
    lines = [ln.split(":", 2) for ln in cgroup.splitlines() if ln.count(":") >= 2]
    v2 = [p[2] for p in lines if p[0] == "0" and p[1] == ""]
    return v2 + [p[2] for p in lines if not (p[0] == "0" and p[1] == "")]


def vm_workload(vm_name: str | None, vm_uuid: str | None, vgpu_id: int, *, nth: int = 0) -> str:
    """A virtual machine's workload name from `nvidia-smi vgpu -q` (issue 26): `vm:<VM name>`, else `vm:<VM UUID>`,
    else `vm:vgpu-<vGPU ID>` (a vGPU ID is not stable across VM restarts: the note of the collector says so).

    The name is the hypervisor's: QEMU's `-name guest=NAME,debug-threads=on` shows as `NAME,debug-threads=on`, so
    what follows the first comma (QEMU's options; `,,` is a comma in the name) is dropped. `nth` (1, 2, ...)
    numbers the vGPUs of a VM that holds several (`vm:NAME:vgpu2`), each its own workload."""
    base = ""
    if vm_name:
        base = vm_name.replace(",,", "\0").split(",", 1)[0].replace("\0", ",").removeprefix("guest=").strip()
    name = f"vm:{base}" if base else f"vm:{vm_uuid}" if vm_uuid else f"vm:vgpu-{vgpu_id}"
    return clean(f"{name}:vgpu{nth}" if nth else name)


def pod_workload(name: str) -> str:
    """A pod's name without the suffix its controller generated (`chat-7d9f8c6b5-x2x4z` -> `chat`)."""
    for pattern in (_RS_SUFFIX, _JOB_SUFFIX):
        stripped = pattern.sub("", name)
        if stripped != name and stripped:
            return stripped
    return name


def identify(facts: ProcessFacts, rules: Sequence[Rule] = ()) -> Identity:
    env = facts.env
    if env.get(ENV_VAR, "").strip():
        return Identity(clean(env[ENV_VAR]), "env")
    line = " ".join(facts.cmdline)
    for rule in rules:
        m = rule.pattern.search(line) if line else None
        if m:
            try:
                name = m.expand(rule.workload)
            except (re.error, IndexError):
                name = rule.workload
            return Identity(clean(name), "rule")
    uid = pod_uid(facts.cgroup)
    if uid is not None:
        ns = env.get("POD_NAMESPACE") or env.get("KUBERNETES_POD_NAMESPACE")
        pod = env.get("POD_NAME") or env.get("KUBERNETES_POD_NAME")
        if ns and pod:
            return Identity(clean(f"k8s:{ns}/{pod_workload(pod)}"), "k8s")
        return Identity(f"k8s-pod:{uid}", "k8s")
    cid = container_id(facts.cgroup)
    if cid is not None:
        return Identity(f"container:{cid[:12]}", "container")
    unit = systemd_unit(facts.cgroup)
    if unit is not None:
        return Identity(clean(f"systemd:{unit}"), "systemd")
    return _by_executable(facts)


def _by_executable(facts: ProcessFacts) -> Identity:
    exe = (facts.exe or (facts.cmdline[0] if facts.cmdline else "")).rsplit("/", 1)[-1].removesuffix(" (deleted)")
    if not exe:
        return Identity("unknown", "unknown")
    if _INTERPRETERS.match(exe):
        args = list(facts.cmdline[1:])
        while args and args[0].startswith("-") and args[0] not in ("-m", "-jar"):
            args.pop(0)
        if len(args) >= 2 and args[0] in ("-m", "-jar"):
            return Identity(clean(f"exe:{exe}:{args[1].rsplit('/', 1)[-1]}"), "exe")
        if args:
            return Identity(clean(f"exe:{exe}:{args[0].rsplit('/', 1)[-1]}"), "exe")
    return Identity(clean(f"exe:{exe}"), "exe")
