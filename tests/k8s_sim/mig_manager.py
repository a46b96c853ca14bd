"""A simulated NVIDIA GPU Operator MIG manager, watching the API stand-in's nodes (independent of migplan).

What the real one does, and where it is read (NVIDIA/mig-parted @bd7160f):

- `cmd/nvidia-mig-manager/main.go` `ContinuouslySyncMigConfigChanges`: an informer on the node; on an update
  whose `nvidia.com/mig.config` label value differs from the old one, the value is handed to the reconfigure
  loop (`SyncableMigConfig.Set`: the newest value wins; one reconfigure at a time). A label set to the value it
  already has is no change and does nothing, even when the ConfigMap's content under that name changed.
- `pkg/mig/reconfigure/reconfigure.go` `Run`, in order:
  1. `nvidia-mig-parted assert --valid-config -f CONFIG -c NAME`: the config file parses (api/spec/v1/spec.go
     `UnmarshalJSON`) and holds NAME; else `setState(failed)` at once, without passing through `pending`.
  2. `assert` (is NAME applied now?): yes -> `setState(success)`, nothing else.
  3. label `nvidia.com/mig.config.state=pending`; the operands' `nvidia.com/gpu.deploy.<component>` labels
     go to `paused-for-mig-change` (`maybeSetPaused`: a `false` stays `false`) and their pods are waited out.
  4. MIG mode change; when it does not take effect and `WITH_REBOOT=true`: state `rebooting`, the node
     reboots, the manager starts again and finishes (a mode change that did not take effect after the reboot
     is `failed`).
  5. `nvidia-mig-parted apply`: destroys the GPU instances of each GPU whose config differs and creates the
     new ones; failure -> `failed`.
  6. operands' labels back to `true` (`maybeSetTrue`), state `success`.
  Failure at any step: `setState(failed)` also restores the operands' labels.
- GPU clients: the manager stops only the operator's own operands (device plugin, GFD, dcgm, dcgm-exporter,
  nvsm, and daemonsets selecting `nvidia.com/gpu.deploy.client`) and host services; it never evicts user
  pods. A MIG GPU instance with a running process cannot be destroyed (NVML_ERROR_IN_USE, "In use by another
  client", MIG user guide "Destroying GPU instances"), so `apply` fails while a workload uses a GPU whose
  layout changes. This simulator does not know which GPU a pod holds: any Running pod on the node that
  requests `nvidia.com/gpu` or `nvidia.com/mig-*` (outside the operator's namespace) fails a reconfigure that
  changes any GPU (`refuse_busy`, on by default).
- The config comes from a ConfigMap mounted into the manager's pod (default `default-mig-parted-config` in
  namespace `gpu-operator`, key `config.yaml`: NVIDIA/gpu-operator assets/state-mig-manager and values.yaml
  `migManager.config`). The simulator reads it from the store at each reconfigure (a real mounted ConfigMap
  lags by the kubelet's sync period).

What the device plugin and GFD advertise afterwards (NVIDIA/k8s-device-plugin internal/rm, internal/lm,
/work/shared/reference/ecosystem.md §2.3): under `mixed`, `nvidia.com/mig-<profile>` per profile with `+`
written `.` and `nvidia.com/gpu` for the MIG-disabled GPUs; under `single`, `nvidia.com/gpu` counts the MIG
devices and `nvidia.com/gpu.product` becomes `<name>-MIG-<profile>` (`-MIG-INVALID` when the GPUs differ);
under `none`, every GPU is one `nvidia.com/gpu`. A resource no longer offered stays in capacity at "0" (the
kubelet keeps a registered extended resource at zero). GFD's `nvidia.com/mig-<profile>.count` labels are
rewritten whole (only `.count` is modelled).

Fit check: the simulator's own, minimal (not migplan's catalog): per GPU, each profile's count within its
maximum, and the sums of compute and memory slices within the GPU's (MIG user guide "Supported MIG
Profiles" tables). Placement rules are not modelled: a layout whose slice sums fit but whose instances cannot
be placed together would be accepted here.

Knobs (per node, set before labelling): `outcome[node]` = "success" (default), "failed" (mig-parted apply
fails after `pending`), "hang" (stays `pending`, as a manager stuck waiting for operand pods), "reboot"
(passes through `rebooting`, the node NotReady meanwhile, then success); `delay_s` between steps;
`gpus[node] = (model, count)` overrides what the labels say.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import yaml

from .store import JSON, ApiError, ResourceType, Store, resource_type

CONFIG_LABEL = "nvidia.com/mig.config"
STATE_LABEL = "nvidia.com/mig.config.state"
STRATEGY_LABEL = "nvidia.com/mig.strategy"
# reconfigure.go: the operands' deploy labels the manager pauses and restores
DEPLOY_LABELS = ("nvidia.com/gpu.deploy.device-plugin", "nvidia.com/gpu.deploy.gpu-feature-discovery",
                 "nvidia.com/gpu.deploy.dcgm-exporter", "nvidia.com/gpu.deploy.dcgm",
                 "nvidia.com/gpu.deploy.nvsm")


@dataclass(frozen=True)
class Geometry:
    """One GPU model: compute and memory slices, and per profile (compute, memory, max per GPU)."""

    pci_ids: tuple[str, ...]
    compute: int
    memory: int
    profiles: dict[str, tuple[int, int, int]]


def _eight_slice(m1: str, m1d: str, m2: str, m3: str, m4: str, m7: str, pci: tuple[str, ...]) -> Geometry:
    # MIG user guide, "Supported MIG Profiles": A100/H100/H200 tables (1g x7, 1g+me x1, 1g double memory x4,
    # 2g x3, 3g x2, 4g x1, 7g x1; memory slices 1, 1, 2, 2, 4, 4, 8)
    return Geometry(pci, 7, 8, {f"1g.{m1}gb": (1, 1, 7), f"1g.{m1}gb+me": (1, 1, 1), f"1g.{m1d}gb": (1, 2, 4),
                                f"2g.{m2}gb": (2, 2, 3), f"3g.{m3}gb": (3, 4, 2), f"4g.{m4}gb": (4, 4, 1),
                                f"7g.{m7}gb": (7, 8, 1)})


# PCI device ids as `0x<device><vendor>` (mig-parted pkg/types/device.go; config-default.yaml device-filters)
GEOMETRY: dict[str, Geometry] = {
    "A100-40GB": _eight_slice("5", "10", "10", "20", "20", "40", ("0x20B010DE", "0x20B110DE", "0x20F110DE",
                                                                   "0x20F610DE")),
    "A100-80GB": _eight_slice("10", "20", "20", "40", "40", "80", ("0x20B210DE", "0x20B510DE", "0x20F310DE",
                                                                    "0x20F510DE")),
    "H100-80GB": _eight_slice("10", "20", "20", "40", "40", "80", ("0x233010DE", "0x233110DE", "0x232210DE")),
    "H100-NVL": _eight_slice("12", "24", "24", "47", "47", "94", ("0x232110DE",)),
    "H200": _eight_slice("18", "35", "35", "71", "71", "141", ("0x233510DE", "0x233B10DE")),
    # A30: 4 compute and 4 memory slices; 1g.6gb x4, 1g.6gb+me x1, 2g.12gb x2, 2g.12gb+me x1, 4g.24gb x1
    "A30": Geometry(("0x20B710DE",), 4, 4, {"1g.6gb": (1, 1, 4), "1g.6gb+me": (1, 1, 1), "2g.12gb": (2, 2, 2),
                                            "2g.12gb+me": (2, 2, 1), "4g.24gb": (4, 4, 1)}),
}


def model_of(product: str) -> str | None:
    """GFD's `nvidia.com/gpu.product` (`NVIDIA-A100-SXM4-40GB`, `NVIDIA-H100-80GB-HBM3-MIG-1g.10gb`,
    `Tesla-T4`) to a GEOMETRY key, or None for a GPU without MIG."""
    base = re.sub(r"-MIG-.*$", "", product.upper()).replace("-SHARED", "")
    if "A100" in base:
        return "A100-80GB" if "80GB" in base else "A100-40GB"
    if "H100" in base:
        return "H100-NVL" if ("NVL" in base or "94GB" in base) else "H100-80GB"
    if "H200" in base:
        return "H200"
    if re.search(r"\bA30\b", base.replace("-", " ")):
        return "A30"
    return None


# go-nvlib pkg/nvlib/device/mig_profile.go's accepted forms: [<c>c.]<g>g.<mem>gb[+attr[.attr]...]
_PROFILE = re.compile(r"^(?:\d+c\.)?\d+g\.\d+gb(?:[+-][a-z]+(?:\.[a-z]+)*)*$")

GpuSpec = tuple[bool, tuple[tuple[str, int], ...]]  # (mig-enabled, sorted (profile, count) with count > 0)


class ConfigError(Exception):
    pass


def parse_mig_parted(text: str) -> dict[str, list[JSON]]:
    """mig-parted api/spec/v1/spec.go `Spec.UnmarshalJSON` / `MigConfigSpec.UnmarshalJSON`: `version: v1`
    required; only `mig-configs` besides; each config a non-empty list; per entry `devices` ("all" or a list
    of indices) and `mig-enabled` required, `device-filter` optional (a string or list), nothing else;
    `mig-devices` required when enabled, empty when disabled; profile names well formed, counts >= 0 and not
    all 0 (pkg/types/mig_config.go `AssertValidFormat`; an empty map is allowed)."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"error parsing config file: {exc}") from None
    if not isinstance(doc, dict):
        raise ConfigError("error parsing config file: not a map")
    if "version" not in doc and doc:
        raise ConfigError("unable to parse with missing 'version' field")
    if doc.get("version") != "v1":
        raise ConfigError(f"unknown version: {doc.get('version')}")
    for k in doc:
        if k not in ("version", "mig-configs"):
            raise ConfigError(f"unexpected field: {k}")
    configs = doc.get("mig-configs")
    if not isinstance(configs, dict) or not configs:
        raise ConfigError("at least one entry in 'mig-configs' is required")
    for name, entries in configs.items():
        if not isinstance(entries, list) or not entries:
            raise ConfigError(f"at least one entry in '{name}' is required")
        for entry in entries:
            _check_entry(entry)
    return configs


def _check_entry(entry: Any) -> None:
    if not isinstance(entry, dict):
        raise ConfigError("a mig-configs entry is not a map")
    for r in ("devices", "mig-enabled"):
        if r not in entry:
            raise ConfigError(f"missing required field: {r}")
    for k in entry:
        if k not in ("device-filter", "devices", "mig-enabled", "mig-devices"):
            raise ConfigError(f"unexpected field: {k}")
    devices = entry["devices"]
    if isinstance(devices, str) and devices != "all":
        raise ConfigError(f"invalid string input for 'devices': {devices}")
    if not isinstance(devices, str) and not (isinstance(devices, list) and all(
            isinstance(i, int) and not isinstance(i, bool) for i in devices)):
        raise ConfigError(f"invalid value for 'devices': {devices!r}")
    if not isinstance(entry["mig-enabled"], bool):
        raise ConfigError(f"invalid value for 'mig-enabled': {entry['mig-enabled']!r}")
    _check_mig_devices(entry)


def _check_mig_devices(entry: JSON) -> None:
    mig_devices = entry.get("mig-devices")
    if entry["mig-enabled"] and mig_devices is None:
        raise ConfigError("missing required field 'mig-devices' when 'mig-enabled' is true")
    if not entry["mig-enabled"] and mig_devices:
        raise ConfigError("MIG devices included when 'mig-enabled' is false")
    if mig_devices:
        if not isinstance(mig_devices, dict):
            raise ConfigError("error validating values in 'mig-devices' field: not a map")
        for p, n in mig_devices.items():
            if not isinstance(p, str) or not _PROFILE.match(p):
                raise ConfigError(f"error validating values in 'mig-devices' field: invalid format for '{p}'")
            if not isinstance(n, int) or isinstance(n, bool) or n < 0:
                raise ConfigError(f"error validating values in 'mig-devices' field: invalid count for '{n}'")
        if not any(n > 0 for n in mig_devices.values()):
            raise ConfigError("error validating values in 'mig-devices' field: all counts for all MigProfiles "
                              "are 0")


def expand(entries: list[JSON], model: str | None, count: int,
           current: list[GpuSpec | None]) -> list[GpuSpec | None]:
    """Each GPU's spec after applying `entries`, walked as mig-parted's `WalkSelectedMigConfigForEachGPU`
    (cmd/nvidia-mig-parted/assert/assert.go): every entry in order, every GPU matching its device-filter and
    devices; a later entry overrides an earlier one; indices beyond the node's GPUs are skipped; a GPU no
    entry names keeps its spec."""
    out = list(current)
    pci = GEOMETRY[model].pci_ids if model else ()
    for entry in entries:
        filt = entry.get("device-filter")
        filters = [filt] if isinstance(filt, str) else list(filt or ())
        if filters and not any(f.split(":")[0].upper() in {p.upper() for p in pci} for f in filters):
            continue
        devices = range(count) if entry["devices"] == "all" else [i for i in entry["devices"] if 0 <= i < count]
        spec: GpuSpec = (bool(entry["mig-enabled"]), tuple(sorted(
            (p, int(n)) for p, n in (entry.get("mig-devices") or {}).items() if int(n) > 0)))
        for i in devices:
            out[i] = spec
    return out


def check_fit(model: str | None, specs: list[GpuSpec | None]) -> str | None:
    """Why `specs` cannot be applied on `model` GPUs (a mig-parted apply error), or None."""
    for i, spec in enumerate(specs):
        if spec is None or not spec[0]:
            continue
        if model is None:
            return f"GPU {i}: MIG is not supported on this GPU"
        geo = GEOMETRY[model]
        compute = memory = 0
        for profile, n in spec[1]:
            if profile not in geo.profiles:
                return f"GPU {i}: unsupported MIG profile {profile} on {model}"
            c, m, most = geo.profiles[profile]
            if n > most:
                return f"GPU {i}: {n} x {profile} exceeds the {most} a {model} holds"
            compute, memory = compute + c * n, memory + m * n
        if compute > geo.compute or memory > geo.memory:
            return (f"GPU {i}: {dict(spec[1])} needs {compute} compute and {memory} memory slices, a {model} has "
                    f"{geo.compute} and {geo.memory} (Insufficient Resources)")
    return None


def resource_name(profile: str) -> str:
    """k8s-device-plugin: `nvidia.com/mig-` + the profile with `+` replaced by `.`."""
    return "nvidia.com/mig-" + profile.replace("+", ".")


@dataclass
class MigManager:
    """One manager for the whole simulated cluster (the real one is a DaemonSet pod per node)."""

    store: Store
    namespace: str = "gpu-operator"
    configmap: str = "default-mig-parted-config"
    delay_s: float = 0.05
    refuse_busy: bool = True
    outcome: dict[str, str] = field(default_factory=dict)
    gpus: dict[str, tuple[str | None, int]] = field(default_factory=dict)
    # (time.monotonic(), node, event) for every state the manager set: "pending", "success", ...
    events: list[tuple[float, str, str]] = field(default_factory=list)
    # node -> why the last reconfigure failed
    errors: dict[str, str] = field(default_factory=dict)
    applied: dict[str, list[GpuSpec | None]] = field(default_factory=dict)
    _wanted: dict[str, str] = field(default_factory=dict)
    _workers: dict[str, threading.Thread] = field(default_factory=dict)
    _cv: threading.Condition = field(default_factory=threading.Condition)
    _stopped: bool = False

    def start(self) -> None:
        """Take each node's current label as applied when its state is `success` and the config resolves,
        then watch."""
        for node in self.store.list(self._nodes):
            labels = node["metadata"].get("labels") or {}
            name = node["metadata"]["name"]
            if labels.get(STATE_LABEL) == "success" and labels.get(CONFIG_LABEL):
                try:
                    model, count = self._hardware(node)
                    entries = self._config(labels[CONFIG_LABEL])
                    self.applied[name] = expand(entries, model, count, [None] * count)
                except (ConfigError, ApiError):
                    pass
        self.store.watchers.append(self._on_event)

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
        for t in list(self._workers.values()):
            t.join(timeout=5)

    def wait_idle(self, timeout: float = 10.0) -> None:
        """Until no reconfigure is running or queued (a `hang` node never gets idle: excluded)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while any(n for n in self._wanted if self.outcome.get(n) != "hang"):
                if not self._cv.wait(timeout=max(0.0, deadline - time.monotonic())):
                    raise TimeoutError(f"MIG manager still busy: {sorted(self._wanted)}")

    @property
    def _nodes(self) -> ResourceType:
        return resource_type("nodes")

    # -- the informer
    def _on_event(self, event: str, rt: ResourceType, old: JSON | None, new: JSON | None) -> None:
        if rt.name != "nodes" or event != "MODIFIED" or old is None or new is None:
            return
        before = (old["metadata"].get("labels") or {}).get(CONFIG_LABEL)
        after = (new["metadata"].get("labels") or {}).get(CONFIG_LABEL)
        if before == after or after is None:
            return
        node = new["metadata"]["name"]
        with self._cv:
            self._wanted[node] = after
            self._cv.notify_all()
            if node not in self._workers or not self._workers[node].is_alive():
                t = threading.Thread(target=self._loop, args=(node,), name=f"mig-manager-{node}", daemon=True)
                self._workers[node] = t
                t.start()

    def _loop(self, node: str) -> None:
        while True:
            with self._cv:
                value = self._wanted.get(node)
                if value is None or self._stopped:
                    self._workers.pop(node, None)
                    return
            try:
                self._reconfigure(node, value)
            except _Stopped:
                return
            except ApiError as exc:  # the node went away
                self.errors[node] = exc.message
            with self._cv:
                if self._wanted.get(node) == value:
                    del self._wanted[node]
                self._cv.notify_all()

    # -- helpers
    def _sleep(self) -> None:
        with self._cv:
            if self._cv.wait_for(lambda: self._stopped, timeout=self.delay_s):
                raise _Stopped()

    def _label(self, node: str, labels: dict[str, str | None], event: str = "") -> None:
        def mutate(obj: JSON) -> JSON:
            cur = obj["metadata"].setdefault("labels", {})
            for k, v in labels.items():
                if v is None:
                    cur.pop(k, None)
                else:
                    cur[k] = v
            obj["metadata"].pop("resourceVersion", None)
            return obj

        self.store.update(self._nodes, None, node, mutate, actor="mig-manager")
        if event:
            self.events.append((time.monotonic(), node, event))

    def _mutate_node(self, node: str, fn: Callable[[JSON], None]) -> None:
        def mutate(obj: JSON) -> JSON:
            fn(obj)
            obj["metadata"].pop("resourceVersion", None)
            return obj

        self.store.update(self._nodes, None, node, mutate, actor="mig-manager")

    def _config(self, name: str) -> list[JSON]:
        try:
            cm = self.store.get(resource_type("configmaps"), self.namespace, self.configmap)
        except ApiError:
            raise ConfigError(f"error parsing config file: configmap {self.namespace}/{self.configmap} "
                              "not found") from None
        text = (cm.get("data") or {}).get("config.yaml")
        if text is None:
            raise ConfigError(f"configmap {self.namespace}/{self.configmap} has no key config.yaml")
        configs = parse_mig_parted(text)
        if name not in configs:
            raise ConfigError(f"error selecting MIG config: MIG config '{name}' not found in config file")
        return configs[name]

    def _hardware(self, node: JSON) -> tuple[str | None, int]:
        name = node["metadata"]["name"]
        if name in self.gpus:
            return self.gpus[name]
        labels = node["metadata"].get("labels") or {}
        product = labels.get("nvidia.com/gpu.product", "")
        model = model_of(product)
        count = int(labels.get("nvidia.com/gpu.count", "0") or 0)
        m = re.search(r"-MIG-(\d+g\.\d+gb.*)$", product)
        if m and model and m.group(1) in GEOMETRY[model].profiles:  # single: gpu.count counts MIG devices
            count //= GEOMETRY[model].profiles[m.group(1)][2]
        return model, count

    def _busy(self, node: str) -> list[str]:
        busy = []
        for pod in self.store.list(resource_type("pods")):
            spec, ns = pod.get("spec") or {}, pod["metadata"].get("namespace", "default")
            if spec.get("nodeName") != node or ns == self.namespace:
                continue
            if (pod.get("status") or {}).get("phase") != "Running":
                continue
            for c in spec.get("containers") or ():
                res = c.get("resources") or {}
                wants = {**(res.get("requests") or {}), **(res.get("limits") or {})}
                if any(k == "nvidia.com/gpu" or k.startswith("nvidia.com/mig-") for k in wants):
                    busy.append(f"{ns}/{pod['metadata']['name']}")
                    break
        return busy

    # -- reconfigure.go Run
    def _reconfigure(self, node_name: str, value: str) -> None:
        self._sleep()
        node = self.store.get(self._nodes, None, node_name)
        labels = node["metadata"].get("labels") or {}
        deployed = {k: labels[k] for k in DEPLOY_LABELS if k in labels}
        model, count = self._hardware(node)
        try:
            entries = self._config(value)
        except ConfigError as exc:
            self._fail(node_name, str(exc), {})
            return
        current = self.applied.get(node_name, [None] * count)
        target = expand(entries, model, count, current)
        if target == current and node_name in self.applied:
            self._label(node_name, {STATE_LABEL: "success"}, "success")
            return
        self._label(node_name, {STATE_LABEL: "pending",
                                **{k: "false" if v == "false" else "paused-for-mig-change"
                                   for k, v in deployed.items()}}, "pending")
        self._sleep()
        outcome = self.outcome.get(node_name, "success")
        if outcome == "hang":
            with self._cv:
                self._cv.wait_for(lambda: self._stopped)
            raise _Stopped()
        why = check_fit(model, target)
        busy = self._busy(node_name) if self.refuse_busy and target != current else []
        if why is None and busy:
            why = f"nvidia-mig-parted apply: In use by another client (GPU pods running: {', '.join(busy)})"
        if why is None and outcome == "failed":
            why = "nvidia-mig-parted apply failed (injected by the test)"
        if why is not None:
            self._fail(node_name, why, deployed)
            return
        if outcome == "reboot":
            self._label(node_name, {STATE_LABEL: "rebooting"}, "rebooting")
            self._mutate_node(node_name, lambda o: _set_ready(o, False))
            self._sleep()
            self._mutate_node(node_name, lambda o: _set_ready(o, True))
            self._sleep()
        self.applied[node_name] = target
        self.errors.pop(node_name, None)
        self._mutate_node(node_name, lambda o: advertise(o, target))
        self._label(node_name, {STATE_LABEL: "success", **{k: "false" if v == "false" else "true"
                                                           for k, v in deployed.items()}}, "success")

    def _fail(self, node: str, why: str, deployed: dict[str, str]) -> None:
        self.errors[node] = why
        self._label(node, {STATE_LABEL: "failed", **{k: "false" if v == "false" else "true"
                                                     for k, v in deployed.items()}}, "failed")


class _Stopped(Exception):
    pass


def _set_ready(node: JSON, ready: bool) -> None:
    conds = node.setdefault("status", {}).setdefault("conditions", [])
    for c in conds:
        if c.get("type") == "Ready":
            c["status"], c["reason"] = ("True", "KubeletReady") if ready else ("Unknown", "NodeStatusUnknown")
            return
    conds.append({"type": "Ready", "status": "True" if ready else "Unknown",
                  "reason": "KubeletReady" if ready else "NodeStatusUnknown"})


def _single(labels: dict[str, str], specs: list[GpuSpec | None], counts: dict[str, int],
            whole: int) -> dict[str, int]:
    """mig.strategy=single: one profile on every GPU, advertised as nvidia.com/gpu; GFD's product label
    `<name>-MIG-<profile>` and gpu.count the MIG devices; `-MIG-INVALID` and nothing offered otherwise
    (k8s-device-plugin internal/lm/mig-strategy.go)."""
    product = re.sub(r"-MIG-.*$", "", labels.get("nvidia.com/gpu.product", ""))
    profiles = {spec[1] for spec in specs if spec is not None and spec[0]}
    if not counts:
        offered = {"nvidia.com/gpu": len(specs)}
        labels["nvidia.com/gpu.count"] = str(len(specs))
    elif whole == 0 and len(profiles) == 1 and len(next(iter(profiles))) == 1:
        p = next(iter(counts))
        offered = {"nvidia.com/gpu": counts[p]}
        product = f"{product}-MIG-{p}"
        labels["nvidia.com/gpu.count"] = str(counts[p])
    else:
        offered = {"nvidia.com/gpu": 0}
        product = f"{product}-MIG-INVALID"
    labels["nvidia.com/gpu.product"] = product
    return offered


def advertise(node: JSON, specs: list[GpuSpec | None]) -> None:
    """Rewrite the node's capacity, allocatable and GFD labels as the restarted device plugin and GFD would."""
    labels = node["metadata"].setdefault("labels", {})
    strategy = labels.get(STRATEGY_LABEL, "none")
    status = node.setdefault("status", {})
    capacity, allocatable = status.setdefault("capacity", {}), status.setdefault("allocatable", {})
    counts: dict[str, int] = {}
    whole = 0
    for spec in specs:
        if spec is None or not spec[0]:
            whole += 1
            continue
        for p, n in spec[1]:
            counts[p] = counts.get(p, 0) + n
    if strategy == "mixed":
        offered = {resource_name(p): n for p, n in counts.items()}
        offered["nvidia.com/gpu"] = whole
    elif strategy == "single":
        offered = _single(labels, specs, counts, whole)
    else:
        offered = {"nvidia.com/gpu": len(specs)}
    for res in (capacity, allocatable):
        for k in list(res):
            if k.startswith("nvidia.com/mig-"):
                res[k] = "0"
        for k, n in offered.items():
            res[k] = str(n)
    for k in [k for k in labels if re.match(r"nvidia\.com/mig-.+\.(count|memory|multiprocessors|slices\.|"
                                            r"engines\.|product)", k)]:
        del labels[k]
    if strategy == "mixed":
        for p, n in counts.items():
            labels[f"{resource_name(p)}.count"] = str(n)
