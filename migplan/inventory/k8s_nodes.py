"""An inventory from `kubectl get nodes -o json`: GPUs and MIG state from NVIDIA's node labels (pure).

The labels read (docs/kubernetes.md) are the ones GPU feature discovery (GFD, in NVIDIA/k8s-device-plugin
@1b826ac `internal/lm/resource.go`, `mig-strategy.go`) and the GPU Operator's MIG manager set:

  nvidia.com/gpu.product         the GPU name, spaces as '-' (`NVIDIA-A100-SXM4-40GB`); with
                                 mig.strategy=single on MIG GPUs `<name>-MIG-<profile>`, or
                                 `<name>-MIG-INVALID` for a layout single cannot describe; `-SHARED` when
                                 time-sliced
  nvidia.com/gpu.count           GPUs of that name (single strategy on MIG GPUs: the MIG devices)
  nvidia.com/gpu.memory          MiB of one GPU (single strategy on MIG GPUs: of one MIG device)
  nvidia.com/mig.strategy        none | single | mixed
  nvidia.com/mig-<p>.count       mixed: MIG devices of profile <p> on the node ('+' written '.')
  status.capacity/allocatable    `nvidia.com/gpu` (whole GPUs, or single-strategy MIG devices) and
                                 `nvidia.com/mig-<p>` (mixed); capacity is preferred over the labels
  nvidia.com/mig.config          the mig-parted config the MIG manager applies
  nvidia.com/mig.config.state    pending | rebooting | success | failed
  nvidia.com/mig.capable         true | false: whether any GPU of the node supports MIG (`nvml.go`,
                                 newMigCapabilityLabeler); false: GPUs without MIG, planned as whole GPUs
  nvidia.com/cuda.driver-version.full, .major, .minor, .revision (and the deprecated
  nvidia.com/cuda.driver.major, .minor, .rev)   the driver (`nvml.go`, newVersionLabeler: "X.Y[.Z]" split
                                 on '.', the revision "" when there is none): the host's `driver`, so the
                                 catalog's driver rules are resolved (docs/mig-geometry.md §1)

What the labels cannot say: which GPU holds which instance, and where. Per-GPU layouts are therefore
inferred: the node's MIG devices are split over its MIG-enabled GPUs (the lowest indices) and placed by
a placement search (`mig_parted.split_counts`). Where the ConfigMap the MIG manager reads is given
(`parse_nodes(configs=...)`), a node whose applied config (`nvidia.com/mig.config`, state `success`) is in it gets
each GPU's counts from that config, checked against the labels' node totals (`_configured`); only each GPU's
placement is inferred. `migplan discover` reads the truth over SSH. A node whose MIG manager is still working
(state pending or rebooting) is held (its GPUs reserved).

GPUs without MIG (`mig.capable=false`, or a product `catalog.whole_gpus` lists: T4, L4, A10, L40S, V100 ...) are
hosts with whole GPUs: each is a `DeclaredGpu` with MIG off whose model (`GpuModel.mig` False, carried in
`Inventory.models`) has the memory of `nvidia.com/gpu.memory` (else the table's) and the table's SM count, if any.

The MIG strategy becomes each GPU's generic rule (`DeclaredGpu.allowed`: what its target may be), so that the
planner, which knows no Kubernetes, plans only what the device plugin advertises (NVIDIA/k8s-device-plugin @1b826ac
`internal/lm/mig-strategy.go`, `internal/rm/rm.go`; reference/ecosystem.md §2.3):

  mixed    no rule: every profile is advertised (`nvidia.com/mig-<p>`), MIG-disabled GPUs as `nvidia.com/gpu`
  single   with a profile P (`-MIG-P`): every GPU P only, never empty, never MIG off (`allowed = (P,)`): GFD labels
           a node with MIG off on some GPUs, an empty MIG GPU or a second profile `-MIG-INVALID` and the device
           plugin advertises nothing. Without a profile (every GPU MIG off, which GFD labels as `none`): MIG stays
           off (`("whole",)`). Changing the node's one profile on all its GPUs at once is the ClusterPolicy's
           (`spec.mig.strategy`, `mig.config`), not a plan's.
  none     MIG devices are not advertised: MIG-disabled GPUs stay whole (`("whole",)`); a GPU read as MIG-enabled
           is kept as it is (reserved), with a note: a pod could use none of its instances.

A node GFD labels `-MIG-INVALID` (its count 0: the labels say nothing of its GPUs), or whose `-MIG-<p>` names a
profile the catalog lacks, is left out of the plan with a note, as it is: a controller run from cron plans the rest
of the cluster. A strategy GFD never writes stays an error (what such a node advertises cannot be known), as do a
mixed node's unknown profiles (the catalog hint says how to add them).
"""


from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Mapping

from migplan import mig_parted, names
from migplan.catalog import Catalog, whole_gpus
from migplan.catalog.geometry import GpuModel, driver_version
from migplan.catalog.layout import Layout
from migplan.errors import CatalogError
from migplan.inventory.model import DeclaredGpu, Host, Inventory
from migplan.mig_parted import ConfigMapConfigs
from migplan.yamldoc import Node

PRODUCT = "nvidia.com/gpu.product"
COUNT = "nvidia.com/gpu.count"
MEMORY = "nvidia.com/gpu.memory"
STRATEGY = "nvidia.com/mig.strategy"
MIG_CONFIG = "nvidia.com/mig.config"
MIG_STATE = "nvidia.com/mig.config.state"
MIG_CAPABLE = "nvidia.com/mig.capable"
# the driver: GFD's new labels first, then the deprecated ones it still writes (nvml.go, newVersionLabeler)
DRIVER_FULL = "nvidia.com/cuda.driver-version.full"
DRIVER_PARTS = (("nvidia.com/cuda.driver-version.major", "nvidia.com/cuda.driver-version.minor",
                 "nvidia.com/cuda.driver-version.revision"),
                ("nvidia.com/cuda.driver.major", "nvidia.com/cuda.driver.minor", "nvidia.com/cuda.driver.rev"))
GPU_RESOURCE = "nvidia.com/gpu"
STRATEGIES = ("none", "single", "mixed")
WHOLE = "whole"  # profiles.WHOLE_GPU in a GPU's `allowed` rule: MIG disabled (inventory does not import profiles)
BUSY_STATES = ("pending", "rebooting")  # the MIG manager is changing the node
_MIG_COUNT = re.compile(r"\Anvidia\.com/mig-([0-9A-Za-z.+-]{1,40})\.count\Z")
_MIG_RESOURCE = re.compile(r"\Anvidia\.com/mig-([0-9A-Za-z.+-]{1,40})\Z")
_UNSANITARY = re.compile(r"[^A-Za-z0-9._ -]")  # GFD `sanitise`: these characters are dropped
_MODEL_ID = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")  # a GPU without MIG named after its product
_DRIVER_PART = re.compile(r"\A[0-9]{1,4}\Z")
_LIST_KINDS = ("List", "NodeList")
_CATALOG_HINT = ("add the model with 'migplan catalog learn' or a --catalog file; list known models with "
                 "'migplan catalog list'")


def is_node_list(root: Node) -> bool:
    """`kind: List` (kubectl) or `NodeList` (the API) whose items are Nodes, or one `kind: Node`."""
    if not root.is_map:
        return False
    top = dict(root.items())
    kind = top.get("kind")
    if kind is None or not kind.is_scalar or kind.is_null:
        return False
    if kind.value() == "Node":
        return True
    if kind.value() not in _LIST_KINDS or "items" not in top or not top["items"].is_list:
        return False
    for item in top["items"].list():
        k = dict(item.items()).get("kind") if item.is_map else None
        if k is None or not k.is_scalar or k.value() != "Node":
            return False
    return True


def product_key(name: str) -> str:
    """Compare GPU names as GFD writes them: characters dropped, spaces as '-', case and 'NVIDIA-' ignored."""
    key = "-".join(_UNSANITARY.sub("", name).split()).lower()
    return key[len("nvidia-"):] if key.startswith("nvidia-") else key


def match_product(catalog: Catalog, product: str, memory_mib: int | None) -> GpuModel | None:
    key = product_key(product)
    found = [m for m in catalog.models
             if key in {product_key(n) for n in (m.id, *m.aliases, *m.smi_names)}]
    if len(found) > 1 and memory_mib is not None:
        found = [m for m in found if m.memory_mib <= memory_mib <= m.memory_mib * 1.1] or found
    preferred = [m for m in found if m.id in catalog.overridden]
    chosen = preferred or found
    return chosen[0] if chosen else None


def _split_product(product: str) -> tuple[str, str | None]:
    """`NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED` -> ('NVIDIA-A100-SXM4-40GB', '1g.5gb')."""
    if product.endswith("-SHARED"):
        product = product[: -len("-SHARED")]
    base, sep, profile = product.rpartition("-MIG-")
    return (base, profile) if sep else (product, None)


def _count(node: Node, what: str, host: str) -> int:
    text = node.str().strip()
    if not names.is_ascii_digits(text) or len(text) > 6:
        node.fail(f"node {host!r}: {what} must be a whole number, not {text!r}")
    return int(text)


def _profile(model: GpuModel, label_form: str) -> str | None:
    """A profile from its resource form (`1g.10gb.me` for `1g.10gb+me`): '+' is written '.' there."""
    for p in model.profiles:
        if label_form in (p.name, p.name.replace("+", ".")):
            return p.name
    return None


def _map(node: Node | None) -> dict[str, Node]:
    if node is None or node.is_null:
        return {}
    if not node.is_map:
        node.fail("expected a mapping")
    return dict(node.items())


def _address(name: str, status: Mapping[str, Node]) -> str:
    """The node's InternalIP, else its Hostname address, else its name."""
    found: dict[str, str] = {}
    if "addresses" in status and status["addresses"].is_list:
        for a in status["addresses"].list():
            f = _map(a)
            if "type" in f and "address" in f:
                found.setdefault(f["type"].str(), f["address"].str())
    for kind in ("InternalIP", "Hostname", "ExternalIP"):
        addr = found.get(kind)
        if addr and names.ADDRESS.fullmatch(addr):
            return addr
    return name


def _too_many(node: Node, name: str, gpus: int) -> None:
    if gpus > names.MAX_GPUS_PER_HOST:
        node.fail(f"node {name!r}: {gpus} GPUs is more than the {names.MAX_GPUS_PER_HOST} a host has")


def _single(name: str, model: GpuModel, profile: str, count: int, labels: dict[str, Node]) -> list[Layout | None]:
    """mig.strategy=single: every GPU in MIG mode with the same devices (`profile`, a profile of `model`), and
    gpu.count counts MIG devices."""
    per_gpu = mig_parted.max_per_gpu(model, profile)
    if per_gpu == 0 or count % per_gpu:
        labels[COUNT].fail(f"node {name!r}: {count} x {profile} (mig.strategy=single) is not a whole number of "
                           f"GPUs of {per_gpu} x {profile}; the labels do not say how many GPUs there are",
                           hint="use mig.strategy=mixed, or plan this host from 'migplan discover'")
    _too_many(labels[COUNT], name, count // per_gpu)
    layout = mig_parted.place_counts(model, {profile: per_gpu})
    return [layout] * (count // per_gpu)


def _mixed(item: Node, name: str, model: GpuModel, count: int, labels: dict[str, Node],
           capacity: dict[str, Node], configs: ConfigMapConfigs | None, notes: list[str]) -> list[Layout | None]:
    """mig.strategy=mixed (or none): per-profile MIG device counts of the node, each GPU's from the mig-parted
    config its MIG manager applied where `configs` has it (`_configured`), else split over its MIG GPUs."""
    _too_many(labels[COUNT], name, count)
    mig_counts: dict[str, int] = {}
    found = [(_MIG_COUNT.fullmatch(k), k, n) for k, n in labels.items()]
    found += [(_MIG_RESOURCE.fullmatch(k), k, n) for k, n in capacity.items()]
    for m, key, n in found:
        if not m:
            continue
        profile = _profile(model, m.group(1))
        if profile is None:
            n.fail(f"node {name!r}: {model.id} has no MIG profile {m.group(1)!r} (label or resource {key})",
                   hint=_CATALOG_HINT)
        mig_counts[profile] = _count(n, key, name)  # capacity comes last: it wins over the label
    mig_counts = {p: c for p, c in mig_counts.items() if c > 0}
    whole = _count(capacity[GPU_RESOURCE], GPU_RESOURCE, name) if GPU_RESOURCE in capacity else (
        0 if mig_counts else count)
    if whole > count:
        capacity[GPU_RESOURCE].fail(f"node {name!r}: {whole} whole GPUs but {COUNT}={count}")
    mig_gpus = count - whole
    known = _configured(name, model, count, labels, mig_counts, whole, configs, notes)
    if known is not None:
        return known
    split = mig_parted.split_counts(model, mig_counts, mig_gpus) if mig_counts or mig_gpus else []
    if split is None:
        what = ", ".join(f"{p} x{c}" for p, c in sorted(mig_counts.items()))
        item.fail(f"node {name!r}: {what} cannot be split over {mig_gpus} MIG-enabled {model.id} GPU(s)",
                  hint="check the node's labels, or plan this host from 'migplan discover'")
    return [*split, *([None] * whole)]


def _configured(name: str, model: GpuModel, count: int, labels: dict[str, Node], mig_counts: Mapping[str, int],
                whole: int, configs: ConfigMapConfigs | None, notes: list[str]) -> list[Layout | None] | None:
    """Each GPU's layout from the config the node's MIG manager applied (`nvidia.com/mig.config`, state `success`,
    a config of the ConfigMap read): its counts from the entry that selects it (as mig-parted's
    `WalkSelectedMigConfigForEachGPU` selects: `devices`, `device-filter`), placed as the inference places them
    (`mig_parted.count_set_layout`); GPUs no entry selects (mig-parted leaves them as they were) get what is left
    of the labels' counts, split over them. None, with a note saying why, where the config is not there or does
    not agree with the labels' node totals (the caller infers every GPU then)."""
    if configs is None or MIG_CONFIG not in labels or MIG_STATE not in labels or labels[MIG_STATE].str() != "success":
        return None
    config = labels[MIG_CONFIG].str()
    said = f"node {name!r}: {MIG_CONFIG}={config[:63]!r}"
    inferred = "which GPU holds which MIG device is inferred from the labels' counts"
    entries = configs.configs.get(config)
    if entries is None:
        notes.append(f"{said} is not a config of {configs.name}: {inferred}")
        return None
    given: dict[int, mig_parted.Entry] = {}
    for i in range(count):
        chosen = [e for e in entries if e.selects(i, model)]
        if len({(e.mig_enabled, tuple(sorted(e.counts().items()))) for e in chosen}) > 1:
            notes.append(f"{said}: GPU {i} is selected by entries of {configs.name} that give it different MIG "
                         f"devices: {inferred}")
            return None
        if chosen:
            given[i] = chosen[-1]
    layouts: dict[int, Layout | None] = {}
    left: Counter[str] = Counter(mig_counts)
    for i, e in given.items():
        layouts[i] = mig_parted.count_set_layout(model, e.counts()) if e.mig_enabled else None
        left.subtract(e.counts())
        if e.mig_enabled and layouts[i] is None:
            _disagree(notes, said, configs, entries, f"GPU {i}'s MIG devices do not fit one {model.id}")
            return None
    rest = [i for i in range(count) if i not in given]
    whole_left = whole - sum(1 for lay in layouts.values() if lay is None)
    split = None
    if all(n >= 0 for n in left.values()) and 0 <= whole_left <= len(rest):
        split = mig_parted.split_counts(model, +left, len(rest) - whole_left) if +left or len(rest) > whole_left else []
    if split is None:
        counts = ", ".join(f"{p} x{n}" for p, n in sorted(mig_counts.items()))
        _disagree(notes, said, configs, entries, f"its labels count {counts or 'no MIG device'} and {whole} GPU(s) "
                                                 f"with MIG off, of {count}")
        return None
    if rest:
        notes.append(f"{said}: no entry of that config of {configs.name} selects GPU(s) {', '.join(map(str, rest))} "
                     f"(mig-parted leaves such GPUs as they were): for them, {inferred}")
    layouts.update(zip(rest, [*split, *([None] * whole_left)], strict=True))
    return [layouts[i] for i in range(count)]


def _disagree(notes: list[str], said: str, configs: ConfigMapConfigs, entries: tuple[mig_parted.Entry, ...],
              why: str) -> None:
    notes.append(f"{said} of {configs.name} gives {mig_parted.describe(entries)[:300]}, but {why}: the labels win "
                 "and which GPU holds which MIG device is inferred from their counts")


def _driver(labels: dict[str, Node], name: str) -> str | None:
    """The node's driver version from GFD's labels (`DRIVER_FULL`, else the parts, new then deprecated), None
    when none is there. A value that is not a driver version is an error naming the node and the label."""
    if DRIVER_FULL in labels:
        text = labels[DRIVER_FULL].str().strip()
        try:
            ok = 2 <= len(text.split(".")) <= 3 and bool(driver_version(text))
        except CatalogError:
            ok = False
        if not ok:
            labels[DRIVER_FULL].fail(f"node {name!r}: {text!r} is not a driver version (label {DRIVER_FULL})",
                                     hint="GFD writes X.Y or X.Y.Z, e.g. 570.133.20")
        return text
    for keys in DRIVER_PARTS:
        if keys[0] not in labels:
            continue
        parts = []
        for k in keys:
            text = labels[k].str().strip() if k in labels else ""
            if not (_DRIVER_PART.fullmatch(text) or (k == keys[2] and text == "")):
                (labels[k] if k in labels else labels[keys[0]]).fail(
                    f"node {name!r}: {text!r} is not a part of a driver version (label {k})",
                    hint="GFD writes digits (the revision may be empty), e.g. 570, 133, 20")
            if text:
                parts.append(text)
        return ".".join(parts)
    return None


def _mig_capable(labels: dict[str, Node], name: str) -> bool | None:
    if MIG_CAPABLE not in labels:
        return None
    text = labels[MIG_CAPABLE].str().strip()
    if text not in ("true", "false"):
        labels[MIG_CAPABLE].fail(f"node {name!r}: {MIG_CAPABLE} must be 'true' or 'false', not {text!r}")
    return text == "true"


def _no_mig_model(catalog: Catalog, base: str) -> str | None:
    """The table's id of a product without MIG (`catalog.whole_gpus`), matched as GFD writes names."""
    key = product_key(base)
    return next((i for i, smi in whole_gpus.known() if key in {product_key(n) for n in (i, *smi)}), None)


# (model id, memory MiB, product name as read): a GPU without MIG before `parse_nodes` names it
WholeKey = tuple[str, int, str]


def _whole(item: Node, name: str, base: str, known: str | None, labels: dict[str, Node],
           capacity: dict[str, Node], catalog: Catalog) -> tuple[list[Layout | None], WholeKey]:
    """A node whose GPUs have no MIG: `gpu.count` whole GPUs of one model, its memory from the label, else the
    table's. MIG device labels or resources there are an error (GFD writes none for such GPUs)."""
    for k, n in (*labels.items(), *capacity.items()):
        if _MIG_COUNT.fullmatch(k) or _MIG_RESOURCE.fullmatch(k):
            n.fail(f"node {name!r}: MIG devices ({k}) on GPUs without MIG ({base}, {MIG_CAPABLE}=false)",
                   hint="check the node's labels, or plan this host from 'migplan discover'")
    if COUNT not in labels:
        item.fail(f"node {name!r} has {PRODUCT} but no {COUNT} label", hint="check GPU feature discovery")
    count = _count(labels[COUNT], COUNT, name)
    _too_many(labels[COUNT], name, count)
    model_id = known
    if model_id is None:
        model_id = base[len("NVIDIA-"):] if base.upper().startswith("NVIDIA-") else base
        if not _MODEL_ID.fullmatch(model_id):
            labels[PRODUCT].fail(f"node {name!r}: GPU name {base!r} (label {PRODUCT}) must be letters, digits, "
                                 "'.', '_' or '-' (at most 64)")
        if catalog.find(model_id) is not None:  # a MIG model's name on a GPU that says it has no MIG
            model_id += "-no-MIG"
    memory = _count(labels[MEMORY], MEMORY, name) if MEMORY in labels else whole_gpus.table_memory(model_id)
    if not memory or memory > names.MAX_MEMORY_MIB:
        labels.get(MEMORY, item).fail(
            f"node {name!r}: the memory of GPU {base!r} (no MIG) is not known: label {MEMORY} is "
            + (f"{memory} MiB" if MEMORY in labels else "missing"),
            hint=f"GFD writes {MEMORY} (MiB of one GPU); without it migplan cannot size workloads on this GPU")
    return [None] * count, (model_id, memory, base)


def _rules(name: str, strategy: str, profile: str | None, layouts: list[Layout | None],
           notes: list[str]) -> tuple[list[tuple[str, ...] | None], list[bool]]:
    """Per GPU, its `allowed` rule and whether it is kept as it is (reserved) under the node's MIG strategy (the
    module notes); a GPU kept for that reason is named in `notes`."""
    n = len(layouts)
    mig = [i for i, lay in enumerate(layouts) if lay is not None]
    if strategy == "mixed":
        return [None] * n, [False] * n
    if strategy == "single" and profile is not None:  # `_single`: every GPU holds the profile
        return [(profile,)] * n, [False] * n
    if not mig:  # none, or single with every GPU MIG off (GFD: as none)
        return [(WHOLE,)] * n, [False] * n
    gpus = ", ".join(map(str, mig))
    if strategy == "none":
        notes.append(f"node {name!r}: GPU(s) {gpus} have MIG enabled under {STRATEGY}=none, whose device plugin "
                     "advertises no MIG device: kept as they are (reserved); set the GPU Operator's mig.strategy "
                     "to mixed to plan them")
    else:
        notes.append(f"node {name!r}: {STRATEGY}=single, but its labels count MIG devices per profile (mixed's "
                     f"labels) and {PRODUCT} names no profile: kept as it is (reserved)")
    frozen = [lay is not None or strategy == "single" for lay in layouts]
    return [None if f else (WHOLE,) for f in frozen], frozen


def _node(item: Node, catalog: Catalog, whole: dict[str, WholeKey], notes: list[str],
          configs: ConfigMapConfigs | None) -> Host | None:
    f = _map(item)
    meta = _map(f.get("metadata"))
    if "name" not in meta:
        item.fail("a Node without metadata.name")
    name = meta["name"].str()
    if not names.HOST_NAME.fullmatch(name):
        meta["name"].fail(f"node name {name!r} must be letters, digits, '.', '_' or '-'")
    labels = _map(meta.get("labels"))
    status = _map(f.get("status"))
    capacity = _map(status.get("capacity"))
    if PRODUCT not in labels:
        if COUNT in labels or any(_MIG_RESOURCE.fullmatch(k) for k in capacity) or GPU_RESOURCE in capacity:
            item.fail(f"node {name!r} has NVIDIA GPUs but no {PRODUCT} label",
                      hint="run NVIDIA GPU feature discovery (the GPU Operator deploys it) so the node is labelled")
        return None  # a node without GPUs: control plane, CPU workers
    product_node = labels[PRODUCT]
    base, single_profile = _split_product(product_node.str())
    capable = _mig_capable(labels, name)
    driver = _driver(labels, name)
    memory = _count(labels[MEMORY], MEMORY, name) if MEMORY in labels and single_profile is None else None
    model = match_product(catalog, base, memory)
    if model is not None and capable is False and model.mig:
        model = None  # GFD says no GPU here has MIG: not the MIG model of that name (a GPU without MIG of a
        # catalog file, `mig: false`, stays: it has no MIG to plan)
    known = _no_mig_model(catalog, base) if model is None else None
    if model is None and known is None and capable is not False:
        product_node.fail(f"node {name!r}: GPU {base!r} (label {PRODUCT}) is not in the MIG catalog",
                          hint=_CATALOG_HINT + f"; a GPU without MIG is planned whole when GFD labels it {MIG_CAPABLE}="
                                               "false")
    strategy = labels[STRATEGY].str() if STRATEGY in labels else "none"
    if strategy not in STRATEGIES:  # GFD writes its flag's value, one of these (the device plugin refuses others)
        labels[STRATEGY].fail(f"node {name!r}: unknown MIG strategy {strategy[:40]!r} (label {STRATEGY})",
                              hint="GFD writes none, single or mixed (lower case), and what a node's device plugin "
                                   "advertises depends on it: correct the label, or leave the node out of the list")
    if model is None:  # GPUs without MIG: whole GPUs
        if single_profile is not None:
            product_node.fail(f"node {name!r}: {PRODUCT} names a MIG device ({product_node.str()}) on GPUs "
                              f"without MIG ({MIG_CAPABLE}=false or a GPU model without MIG)")
        layouts, key = _whole(item, name, base, known, labels, capacity, catalog)
        whole[name] = key
        return _host(name, status, labels, strategy, layouts, key[0], driver, no_mig=True)
    if COUNT not in labels:
        item.fail(f"node {name!r} has {PRODUCT} but no {COUNT} label", hint="check GPU feature discovery")
    count = _count(labels[COUNT], COUNT, name)
    if single_profile == "INVALID":
        # GFD's newInvalidMigStrategyLabeler: MIG on some GPUs only, an empty MIG GPU or a second profile; count and
        # memory 0, nothing advertised. The GPUs are not known, so they are not planned: the node stays as it is.
        notes.append(f"node {name!r}: GFD labels it {PRODUCT}={product_node.str()[:80]} (mig.strategy=single cannot "
                     "describe its GPUs: MIG on some only, an empty MIG GPU, or more than one profile) and its device "
                     "plugin advertises none of them: left out of the plan, as it is; use mig.strategy=mixed, or "
                     "plan this host from 'migplan discover'")
        return None
    if single_profile is not None:
        if STRATEGY in labels and strategy != "single":  # GFD writes `-MIG-<p>` only under single, and labels it so
            labels[STRATEGY].fail(f"node {name!r}: {PRODUCT} names a MIG profile ({product_node.str()}), which GFD "
                                  f"writes only under {STRATEGY}=single, not {strategy}",
                                  hint="check GPU feature discovery's labels")
        strategy = "single"
        profile = _profile(model, single_profile)
        if profile is None:  # a profile the catalog lacks (a newer driver's?): the layout cannot be known
            notes.append(f"node {name!r}: {PRODUCT}={product_node.str()[:80]} names {single_profile[:40]!r}, which is "
                         f"not a MIG profile of {model.id}: left out of the plan, as it is (its GPUs' layout cannot "
                         "be known); add the profile with 'migplan catalog learn' or a --catalog file")
            return None
        layouts = _single(name, model, profile, count, labels)
    else:
        layouts = _mixed(item, name, model, count, labels, capacity, configs, notes)
        profile = None
    allowed, frozen = _rules(name, strategy, profile, layouts, notes)
    return _host(name, status, labels, strategy, layouts, model.id, driver, allowed=allowed, frozen=frozen)


def _host(name: str, status: dict[str, Node], labels: dict[str, Node], strategy: str, layouts: list[Layout | None],
          model: str, driver: str | None, *, no_mig: bool = False, allowed: list[tuple[str, ...] | None] | None = None,
          frozen: list[bool] | None = None) -> Host | None:
    state = labels[MIG_STATE].str() if MIG_STATE in labels else None
    held = state in BUSY_STATES
    gpus = tuple(DeclaredGpu(index=i, model=model, mig_enabled=lay is not None, layout=lay,
                             reserved=held or bool(frozen and frozen[i]), allowed=allowed[i] if allowed else None)
                 for i, lay in enumerate(layouts))
    if not gpus:
        return None
    kv = [("k8s.mig.strategy", strategy)] + ([("k8s.mig.capable", "false")] if no_mig else [])
    if MIG_CONFIG in labels:
        kv.append(("k8s.mig.config", labels[MIG_CONFIG].str()))
    if state is not None:
        kv.append(("k8s.mig.config.state", state))
    return Host(name=name, address=_address(name, status), groups=("kubernetes",), labels=tuple(sorted(kv)),
                gpus=gpus, reserved_gpus=tuple(g.index for g in gpus if g.reserved), driver=driver)


def _whole_models(hosts: list[Host], whole: dict[str, WholeKey]) -> tuple[list[Host], tuple[GpuModel, ...]]:
    """The models of the GPUs without MIG (`whole`: node -> its GPUs' key), one per (model, memory): named after
    the model, or, where nodes give one model different memory sizes, `<model>-<MiB>MiB` each (so that no plan
    mixes them up)."""
    sizes: dict[str, set[int]] = {}
    for model_id, mib, _ in whole.values():
        sizes.setdefault(model_id, set()).add(mib)

    def named(model_id: str, mib: int) -> str:
        return model_id if len(sizes[model_id]) == 1 else f"{model_id}-{mib}MiB"

    first = {(k[0], k[1]): k for k in sorted(whole.values())}
    models = tuple(dataclasses.replace(whole_gpus.whole_gpu_model(m, mib, name=k[2]), id=named(m, mib))
                   for (m, mib), k in sorted(first.items()))
    out = []
    for h in hosts:
        k = whole.get(h.name)
        if k is not None and named(k[0], k[1]) != k[0]:
            h = dataclasses.replace(h, gpus=tuple(dataclasses.replace(g, model=named(k[0], k[1])) for g in h.gpus))
        out.append(h)
    return out, models


def parse_nodes(root: Node, catalog: Catalog, configs: ConfigMapConfigs | None = None) -> Inventory:
    """The GPU nodes of a node list as inventory hosts (nodes without NVIDIA labels are left out). `configs`: the
    mig-parted configs of the ConfigMap the MIG manager reads (`mig_parted.read_configmap`), which tell each GPU's
    counts where a node's applied config is there (`_configured`); None: inferred from the labels alone."""
    top = dict(root.items())
    items = [root] if top["kind"].value() == "Node" else top["items"].list()
    whole: dict[str, WholeKey] = {}  # node -> its GPUs without MIG
    notes: list[str] = []
    hosts = [h for h in (_node(i, catalog, whole, notes, configs) for i in items) if h is not None]
    if not hosts:
        root.fail(f"none of the {len(items)} node(s) has NVIDIA GPU labels ({PRODUCT})"
                  + (f" that can be planned ({'; '.join(notes)[:400]})" if notes else ""),
                  hint="deploy NVIDIA GPU feature discovery (the GPU Operator does), or list the hosts in an inventory")
    seen: set[str] = set()
    for h in hosts:
        if h.name in seen:
            root.fail(f"node {h.name!r} is listed twice")
        seen.add(h.name)
    hosts, models = _whole_models(hosts, whole)
    return Inventory(root.source, tuple(hosts), models, notes=tuple(notes))
