"""`migplan export gpu-operator|mig-parted|slurm PLAN`: a plan as the configs NVIDIA's tools and Slurm read.

gpu-operator: one ConfigMap (key `config.yaml`, as the GPU Operator's MIG manager requires) with one named
config per distinct node layout, plus the `nvidia.com/mig.config=<name>` label of every node; as a
manifest or as a kubectl script (docs/export.md). mig-parted: the file `nvidia-mig-parted apply -f`
takes for one host.

mig-parted configs hold COUNTS per profile, not placements: every count set exported is checked on the
model's geometry (`mig_parted.creation_risk`) and the ones that need a creation order, or luck with the
driver's placements, are reported. GPUs the plan holds (reserved or excluded) are left out of the config,
so mig-parted does not touch them.

slurm: each node's `Gres=` for slurm.conf (or a slurm.conf rewritten with them) and its gres.conf
(`migplan.slurm`, docs/slurm.md).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from migplan import documents, mig_parted, slurm, yamldoc
from migplan.catalog import Catalog
from migplan.commands.context import Context
from migplan.errors import InputError
from migplan.fleet.snapshot import Snapshot
from migplan.mig_parted import Creatability, Entry
from migplan.model.gpu_plan import GpuPlan
from migplan.planner.plan import Plan

DEFAULT_CONFIGMAP = "migplan-mig-config"
DEFAULT_NAMESPACE = "gpu-operator"
CONFIG_KEY = "config.yaml"  # the key the MIG manager reads (gpu-operator values.yaml, migManager.config)
MIG_CONFIG_LABEL = "nvidia.com/mig.config"
# Kubernetes object names: DNS-1123 subdomain (node names, ConfigMap) and label (namespace).
_DNS_SUBDOMAIN = re.compile(r"\A[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\Z")
_DNS_LABEL = re.compile(r"\A[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_LABEL_VALUE = re.compile(r"\A[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?\Z")
COUNTS_NOTE = ("mig-parted configs give instance counts per profile, not placements: the driver chooses "
               "where each instance goes, so the placements may differ from the plan's; after the MIG manager "
               "has run, compare with 'migplan discover --out S' and 'migplan status --snapshot S --plan PLAN'")


@dataclass(frozen=True)
class Check:
    """One exported count set on one model, and where it is used."""

    config: str
    model: str
    gpus: tuple[str, ...]  # host:index
    result: Creatability


@dataclass(frozen=True)
class Export:
    configs: dict[str, tuple[Entry, ...]]  # every config in the ConfigMap: existing ones first, then ours
    ours: tuple[str, ...]  # the configs the plan uses
    nodes: tuple[tuple[str, str], ...]  # (node, config name)
    checks: tuple[Check, ...]
    name: str = DEFAULT_CONFIGMAP
    namespace: str = DEFAULT_NAMESPACE
    plan_fingerprint: str = ""
    kept: tuple[str, ...] = field(default=())  # existing configs kept unchanged

    def warnings(self) -> list[str]:
        """`note: ...` for count sets that need a creation order (mig-parted finds it: it retries every
        order), `warning: ...` for those that depend on the driver's placements."""
        return [f"{_level(c)}: {c.config} ({c.model}, {', '.join(c.gpus)}): {c.result.message}"
                for c in self.checks if c.result.risk != "none"]

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "migplan/export-gpu-operator", "plan": self.plan_fingerprint,
                "configmap": {"name": self.name, "namespace": self.namespace},
                "note": COUNTS_NOTE,
                "nodes": [{"node": n, "label": {MIG_CONFIG_LABEL: c}} for n, c in self.nodes],
                "configs": {n: [e.to_dict() for e in es] for n, es in self.configs.items()},
                "kept": list(self.kept),
                "checks": [{"config": c.config, "model": c.model, "gpus": list(c.gpus), "risk": c.result.risk,
                            "counts": dict(c.result.counts), "placement": c.result.layout.as_list()
                            if c.result.layout is not None else None, "safe_order": list(c.result.safe_order),
                            "message": c.result.message} for c in self.checks]}


def _level(c: Check) -> str:
    return "note" if c.result.risk == "order" else "warning"


# --- building ------------------------------------------------------------------------------------

def _host_gpus(plan: Plan) -> dict[str, list[GpuPlan]]:
    hosts: dict[str, list[GpuPlan]] = {}
    for g in plan.gpus:
        hosts.setdefault(g.host, []).append(g)
    return hosts


def no_mig(catalog: Catalog) -> frozenset[str]:
    """The models of GPUs without MIG (T4, L4 ... from Kubernetes labels, carried in the plan): the export has
    no MIG config for them and labels no node for them alone."""
    return frozenset(m.id for m in catalog.models if not m.mig)


def host_entries(gpus: Sequence[GpuPlan], without_mig: frozenset[str] = frozenset()) -> tuple[Entry, ...]:
    """A host's config from its planned targets; held GPUs and GPUs without MIG (`without_mig`: their models)
    are left out (mig-parted leaves them alone)."""
    indices = sorted(g.index for g in gpus)
    free = [g for g in gpus if g.hold is None and g.model not in without_mig]
    all_gpus = len(free) == len(gpus) and indices == list(range(len(indices)))
    return mig_parted.node_entries([(g.index, g.target) for g in free], all_gpus=all_gpus)


def host_model(gpus: Sequence[GpuPlan]) -> str | None:
    """The catalog model a host's config is named after (`mig_parted.config_name`): the one its planned GPUs
    share, without a driver's `@host-` suffix; None when they are of several models."""
    found = {g.model.split("@host-", 1)[0] for g in gpus if g.hold is None}
    return found.pop() if len(found) == 1 else None


def _checks(plan: Plan, catalog: Catalog, names: dict[str, str]) -> list[Check]:
    """Each distinct (model, counts) the export asks mig-parted to create, checked once."""
    seen: dict[tuple[str, tuple[tuple[str, int], ...]], tuple[str, list[str]]] = {}
    for g in plan.gpus:
        if g.hold is not None or g.target is None:
            continue
        key = (g.model, tuple(sorted(g.target.profile_counts().items())))
        seen.setdefault(key, (names[g.host], []))[1].append(f"{g.host}:{g.index}")
    out = []
    for (model_id, counts), (config, where) in seen.items():
        model = catalog.get(model_id)
        out.append(Check(config, model.base_id, tuple(where), mig_parted.creation_risk(model, dict(counts))))
    return out


def _gives_the_plan(entries: Sequence[Entry], gpus: Sequence[GpuPlan], catalog: Catalog) -> bool:
    """Whether a config, applied by mig-parted on this node, gives every GPU the plan's counts and leaves the
    held ones alone (or gives them what they have): so NVIDIA's `all-1g.10gb`, with its device-filters, can
    stand for a node of H100s planned as 7 x 1g.10gb each."""
    for g in gpus:
        model = catalog.get(g.model)
        if not model.mig:  # mig-parted skips a GPU that is not MIG-capable, whatever the config says
            continue
        chosen = [e for e in entries if e.selects(g.index, model)]
        if not chosen:
            if g.hold is None:
                return False
            continue
        if len(chosen) > 1:
            return False
        want = mig_parted.gpu_entry(None, g.target)
        if (chosen[0].mig_enabled, chosen[0].counts()) != (want.mig_enabled, want.counts()):
            return False
    return True


def _with_plan_models(plan: Plan, catalog: Catalog) -> Catalog:
    """The plan's own models (built from hosts' tables, or less a driver's profiles) first."""
    return Catalog((*plan.models, *catalog.models)) if plan.models else catalog


def k8s_name(text: str, what: str) -> str:
    if not _DNS_SUBDOMAIN.fullmatch(text):
        raise InputError(f"{what} {text!r} is not a Kubernetes name (lower-case letters, digits, '-' and '.')",
                         hint="plan with the inventory host names equal to the Kubernetes node names "
                              "(e.g. from 'kubectl get nodes -o json')")
    return text


def build_gpu_operator(plan: Plan, catalog: Catalog, *, existing: dict[str, tuple[Entry, ...]] | None = None,
                       name: str = DEFAULT_CONFIGMAP, namespace: str = DEFAULT_NAMESPACE) -> Export:
    """The ConfigMap's configs and the node labels for a plan (pure). `existing`: a ConfigMap's configs,
    kept; a config with the same content as one of ours lends us its name."""
    catalog = _with_plan_models(plan, catalog)
    k8s_name(name, "ConfigMap name")
    if not _DNS_LABEL.fullmatch(namespace):
        raise InputError(f"namespace {namespace!r} is not a Kubernetes namespace name")
    configs: dict[str, tuple[Entry, ...]] = dict(existing or {})
    node_config: dict[str, str] = {}
    ours: list[str] = []
    without_mig = no_mig(catalog)
    for host, gpus in _host_gpus(plan).items():
        k8s_name(host, "host")
        entries = host_entries(gpus, without_mig)
        if not entries:  # every GPU held or without MIG: nothing for the MIG manager to do on this node
            continue
        gpus = [g for g in gpus if g.model not in without_mig]
        chosen = next((n for n, es in configs.items()
                       if _LABEL_VALUE.fullmatch(n) and _gives_the_plan(es, gpus, catalog)), None)
        if chosen is None:
            chosen = mig_parted.config_name(entries, host_model(gpus))
            if chosen in configs:
                raise InputError(f"the ConfigMap already has a config {chosen!r} with other content",
                                 hint="remove or rename it in the --existing file")
            configs[chosen] = entries
        if chosen not in ours:
            ours.append(chosen)
        node_config[host] = chosen
    kept = tuple(n for n in (existing or {}) if n not in ours)
    checks = _checks(plan, catalog, node_config)
    return Export(configs, tuple(ours), tuple(sorted(node_config.items())), tuple(checks), name, namespace,
                  plan.fingerprint, kept)


def parse_configmap(root: yamldoc.Node) -> tuple[dict[str, tuple[Entry, ...]], str | None, str | None]:
    """An existing ConfigMap (kind: ConfigMap, data: {config.yaml: ...}): its configs, name, namespace."""
    if not root.is_map:
        root.fail("expected a ConfigMap (kind: ConfigMap) with data.config.yaml")
    f = dict(root.items())
    if "kind" not in f or f["kind"].str() != "ConfigMap":
        root.fail("expected kind: ConfigMap", hint="pass the ConfigMap the MIG manager uses, e.g. "
                                                   "'kubectl get configmap NAME -n NS -o yaml'")
    data = dict(f["data"].items()) if "data" in f and f["data"].is_map else {}
    if CONFIG_KEY not in data:
        root.fail(f"the ConfigMap has no data.{CONFIG_KEY}", hint="the MIG manager reads its configs from that key")
    text = data[CONFIG_KEY].str()
    inner = yamldoc.parse(text, f"{root.source}: data.{CONFIG_KEY}")
    if inner is None:
        data[CONFIG_KEY].fail(f"data.{CONFIG_KEY} is empty")
    meta = dict(f["metadata"].items()) if "metadata" in f and f["metadata"].is_map else {}
    return (mig_parted.parse_spec(inner), meta["name"].str() if "name" in meta else None,
            meta["namespace"].str() if "namespace" in meta else None)


# --- rendering -----------------------------------------------------------------------------------

def _comments(export: Export) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for n in export.ours:
        nodes = [node for node, c in export.nodes if c == n]
        out[n] = [f"migplan: {mig_parted.describe(export.configs[n])}",
                  f"nodes: {', '.join(nodes[:8])}{' ...' if len(nodes) > 8 else ''} ({len(nodes)})"]
        out[n] += [f"{_level(c)}: {c.result.message}" for c in export.checks
                   if c.config == n and c.result.risk != "none"]
    return out


def config_text(export: Export) -> str:
    header = [f"written by migplan export gpu-operator from plan {export.plan_fingerprint}",
              "counts per profile, not placements: the driver chooses where each instance goes"]
    return mig_parted.render_spec(export.configs, _comments(export), header)


def _indent(text: str, by: int) -> str:
    return "\n".join((" " * by + ln) if ln else ln for ln in text.splitlines())


def manifest(export: Export) -> str:
    """The ConfigMap and one Node object per node (apply with server-side apply: only the label is set)."""
    parts = ["# migplan export gpu-operator: apply with",
             "#   kubectl apply --server-side --field-manager=migplan -f THIS_FILE",
             "# and point the MIG manager at the ConfigMap (once):",
             f"#   kubectl patch clusterpolicies.nvidia.com/cluster-policy --type=merge -p "
             f"'{{\"spec\":{{\"migManager\":{{\"config\":{{\"name\":\"{export.name}\"}}}}}}}}'",
             f"# {COUNTS_NOTE}",
             "apiVersion: v1", "kind: ConfigMap", "metadata:", f"  name: {export.name}",
             f"  namespace: {export.namespace}", "data:", f"  {CONFIG_KEY}: |", _indent(config_text(export), 4)]
    for node, config in export.nodes:
        parts += ["---", "apiVersion: v1", "kind: Node", "metadata:", f"  name: {node}", "  labels:",
                  f"    {MIG_CONFIG_LABEL}: {config}"]
    return "\n".join(parts) + "\n"


def script(export: Export) -> str:
    """A reviewable kubectl script: the ConfigMap, the ClusterPolicy pointer, then one label per node."""
    q = shlex.quote
    cm = ["apiVersion: v1", "kind: ConfigMap", "metadata:", f"  name: {export.name}",
          f"  namespace: {export.namespace}", "data:", f"  {CONFIG_KEY}: |", _indent(config_text(export), 4)]
    lines = ["#!/bin/sh", f"# migplan export gpu-operator -o sh, plan {export.plan_fingerprint}",
             f"# {COUNTS_NOTE}", "set -eu",
             "kubectl apply --server-side --field-manager=migplan -f - <<'MIGPLAN_EOF'", *cm, "MIGPLAN_EOF",
             "kubectl patch clusterpolicies.nvidia.com/cluster-policy --type=merge -p "
             + q(f'{{"spec":{{"migManager":{{"config":{{"name":"{export.name}"}}}}}}}}')]
    lines += [f"# {w}" for w in export.warnings()]
    for node, config in export.nodes:
        lines.append(f"kubectl label node {q(node)} {q(f'{MIG_CONFIG_LABEL}={config}')} --overwrite")
    return "\n".join(lines) + "\n"


# --- mig-parted for one host ---------------------------------------------------------------------

@dataclass(frozen=True)
class HostExport:
    host: str
    config: str
    entries: tuple[Entry, ...]
    checks: tuple[Check, ...]
    plan_fingerprint: str

    def text(self) -> str:
        comments = [f"migplan: {mig_parted.describe(self.entries)}"]
        comments += [f"{_level(c)}: {c.result.message}" for c in self.checks if c.result.risk != "none"]
        header = [f"written by migplan export mig-parted --host {self.host} from plan {self.plan_fingerprint}",
                  f"apply: nvidia-mig-parted apply -f THIS_FILE -c {self.config}",
                  "counts per profile, not placements: the driver chooses where each instance goes"]
        return mig_parted.render_spec({self.config: self.entries}, {self.config: comments}, header)

    def to_dict(self) -> dict[str, Any]:
        return {**mig_parted.spec_to_dict({self.config: self.entries})}


def build_mig_parted(plan: Plan, catalog: Catalog, host: str, config: str | None = None) -> HostExport:
    catalog = _with_plan_models(plan, catalog)
    gpus = _host_gpus(plan).get(host)
    if gpus is None:
        known = ", ".join(sorted(_host_gpus(plan))[:10])
        raise InputError(f"the plan has no host {host!r}", hint=f"hosts in the plan: {known}")
    without_mig = no_mig(catalog)
    entries = host_entries(gpus, without_mig)
    if not entries:
        raise InputError(f"every GPU of {host} is held (reserved or excluded) or has no MIG: nothing for mig-parted "
                         "to apply")
    gpus = [g for g in gpus if g.model not in without_mig]
    name = config or mig_parted.config_name(entries, host_model(gpus))
    if not _LABEL_VALUE.fullmatch(name):
        raise InputError(f"config name {name!r} must be letters, digits, '.', '_' or '-' (at most 63)")
    sub = replace(plan, gpus=tuple(gpus), workloads=())
    return HostExport(host, name, entries, tuple(_checks(sub, catalog, {host: name})), plan.fingerprint)


# --- commands ------------------------------------------------------------------------------------

def _plan(ctx: Context, path: str) -> tuple[Plan, Catalog]:
    return documents.load_plan(path, ctx.catalog), ctx.catalog


def export_gpu_operator(ctx: Context, plan_path: str, *, existing: str | None = None, name: str | None = None,
                        namespace: str | None = None) -> Export:
    plan, catalog = _plan(ctx, plan_path)
    configs, old_name, old_ns = (parse_configmap(yamldoc.load(existing)) if existing else ({}, None, None))
    return build_gpu_operator(plan, catalog, existing=configs, name=name or old_name or DEFAULT_CONFIGMAP,
                              namespace=namespace or old_ns or DEFAULT_NAMESPACE)


def export_mig_parted(ctx: Context, plan_path: str, host: str, config: str | None = None) -> HostExport:
    plan, catalog = _plan(ctx, plan_path)
    return build_mig_parted(plan, catalog, host, config)


# --- Slurm ----------------------------------------------------------------------------------------

def _live_gpus(snap: Snapshot) -> dict[tuple[str, int], slurm.LiveGpu]:
    """Each GPU of a discovery snapshot as `slurm.LiveGpu`: its layout and the GPU and compute instance ids."""
    out: dict[tuple[str, int], slurm.LiveGpu] = {}
    for h in snap.hosts:
        if not h.ok:
            continue
        for g in h.gpus:
            out[(h.name, g.index)] = slurm.LiveGpu(
                g.layout, {i.instance: i.gi_id for i in g.instances if i.gi_id is not None},
                {i.instance: tuple(c.ci_id for c in i.compute_instances) for i in g.instances})
    return out


def gpu_type_overrides(items: Sequence[str], catalog: Catalog) -> dict[str, str]:
    """`--gpu-type MODEL=TYPE` (repeatable): a whole GPU's GRES type per catalog model."""
    out: dict[str, str] = {}
    for item in items:
        model_name, sep, kind = item.partition("=")
        if not sep or not model_name.strip() or not kind.strip():
            raise InputError(f"--gpu-type {item!r}: expected MODEL=TYPE, e.g. H100-SXM5-80GB=h100")
        model = catalog.get(model_name.strip())
        out[model.base_id] = slurm.check_type(kind.strip(), f"--gpu-type {item!r}:")
    return out


def build_slurm(plan: Plan, catalog: Catalog, *, host: str | None = None, mode: str = "autodetect",
                style: str = "nvidia", short: bool = False, gpu_types: Mapping[str, str] | None = None,
                live: Mapping[tuple[str, int], slurm.LiveGpu] | None = None) -> slurm.SlurmExport:
    """The Slurm export of a plan (pure): every host, or `host`. Excluded GPUs are left out (Slurm is not told of
    them, with a note); reserved GPUs keep the layout the plan leaves them."""
    catalog = _with_plan_models(plan, catalog)
    hosts = _host_gpus(plan)
    if host is not None and host not in hosts:
        known = ", ".join(sorted(hosts)[:10])
        raise InputError(f"the plan has no host {host!r}", hint=f"hosts in the plan: {known}")
    notes: list[str] = []
    nodes = []
    for name in sorted(hosts) if host is None else [host]:
        gpus: list[slurm.GpuInput] = []
        for g in hosts[name]:
            if g.hold == "excluded":
                notes.append(f"{name} GPU {g.index} is excluded in the inventory: not in the export (add it by hand "
                             "if Slurm schedules it)")
                continue
            gpus.append(slurm.GpuInput(g.index, catalog.get(g.model), g.target,
                                       (live or {}).get((name, g.index))))
        node = name.split(".", 1)[0] if short else name
        nodes.append(slurm.build_node(name, gpus, mode=mode, style=style, node=node, gpu_types=gpu_types))
    return slurm.build(nodes, mode=mode, style=style, plan_fingerprint=plan.fingerprint, notes=notes)


def export_slurm(ctx: Context, plan_path: str, *, host: str | None = None, mode: str = "autodetect",
                 style: str = "nvidia", short: bool = False, gpu_types: Sequence[str] = (),
                 snapshot: str | None = None, slurm_conf: str | None = None) -> tuple[slurm.SlurmExport, str | None]:
    """`migplan export slurm`: the export and, with `slurm_conf`, that file rewritten with the nodes' Gres."""
    plan, catalog = _plan(ctx, plan_path)
    live = None
    if snapshot is not None:
        live = _live_gpus(documents.load_snapshot(Path(snapshot), _with_plan_models(plan, catalog)))
    elif mode == "files":
        raise InputError("--gres-conf files needs --snapshot: the GPU and compute instance ids the driver chose when "
                         "the plan was applied are in a discovery snapshot taken after it, not in the plan",
                         hint="migplan apply PLAN; migplan discover --out after.json; migplan export slurm PLAN "
                              "--gres-conf files --snapshot after.json (or use --gres-conf autodetect)")
    export = build_slurm(plan, catalog, host=host, mode=mode, style=style, short=short,
                         gpu_types=gpu_type_overrides(gpu_types, _with_plan_models(plan, catalog)), live=live)
    rewritten = None
    if slurm_conf is not None:
        rewritten = slurm.rewrite_slurm_conf(yamldoc.read_text(slurm_conf), slurm_conf, export)
    return export, rewritten
