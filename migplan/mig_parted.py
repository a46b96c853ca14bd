"""NVIDIA mig-parted configurations: the v1 schema, reading, writing, and their geometry (pure).

Schema (NVIDIA/mig-parted @bd7160f `api/spec/v1/spec.go`, `pkg/types/mig_config.go`; docs/export.md):

    version: v1                    # required, only "v1"
    mig-configs:                   # at least one config; each a non-empty list of entries
      NAME:
        - devices: all | [0, 1]    # required
          mig-enabled: true        # required
          mig-devices: {"1g.5gb": 2, "3g.20gb": 1}   # required when enabled (may be {}), absent or empty when not
          device-filter: "0x20B010DE" | [..]          # optional: PCI `0x<device><vendor>`

Unknown keys at either level are errors (spec.go `UnmarshalJSON`), profile names follow go-nvlib's
grammar, counts are >= 0 and not all 0 (`AssertValidFormat`).

A config gives COUNTS per profile, not placements: mig-parted creates the instances without a
placement and lets the driver choose (`pkg/mig/config/config.go`: `CreateGpuInstance`, and
`iteratePermutationsUntilSuccess` retries every creation order after clearing the GPU). So a count
set may be creatable only in some orders, or only when the driver happens to choose well; the MIG User
Guide's known issue ("the profile ID 9 or 3g.20gb must be specified first") is one such case.
`creation_risk` measures that on the catalog's geometry: it does not model the driver's own choice,
which NVIDIA does not document (docs/mig-geometry.md §5), but every choice the rules allow.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import posixpath
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from migplan import names, yamldoc
from migplan.catalog import Catalog
from migplan.catalog.catalog import pci_device
from migplan.catalog.geometry import GpuModel
from migplan.catalog.layout import Instance, Layout, check_layout, enumerate_layouts
from migplan.errors import CatalogError, InputError
from migplan.yamldoc import Node

SPEC_VERSION = "v1"
NAME_PREFIX = "migplan-"
HASH_CHARS = 10  # 40 bits of sha256: a collision among one cluster's layouts is not a practical worry
# A Kubernetes label value: at most 63 characters, alphanumerics, '-', '_', '.', alphanumeric at both ends.
LABEL_VALUE_MAX = 63
MAX_ENTRIES = 256  # entries in one config; a real node has at most 64 GPUs
MAX_COUNT = 64  # one profile's count on one GPU; no MIG GPU has more than 7 instances


@dataclass(frozen=True)
class Entry:
    """One item of a mig-parted config: which devices, and what they get."""

    devices: tuple[int, ...] | None  # None: `devices: all`
    mig_enabled: bool
    mig_devices: tuple[tuple[str, int], ...] = ()  # (profile, count), sorted by profile, zero counts kept
    device_filter: tuple[str, ...] = ()  # PCI `0x<device><vendor>[:0x<subdevice><subvendor>]`, as written

    def counts(self) -> dict[str, int]:
        return {p: n for p, n in self.mig_devices if n > 0}

    def selects(self, index: int, model: GpuModel) -> bool:
        if self.devices is not None and index not in self.devices:
            return False
        if not self.device_filter:
            return True
        ids = {pci_device(f.split(":", 1)[0]) for f in self.device_filter}  # the subsystem part is not in the catalog
        return bool(ids & set(model.pci_device_ids))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.device_filter:
            out["device-filter"] = list(self.device_filter)
        out["devices"] = "all" if self.devices is None else list(self.devices)
        out["mig-enabled"] = self.mig_enabled
        if self.mig_enabled:
            out["mig-devices"] = dict(self.mig_devices)
        return out


Configs = Mapping[str, Sequence[Entry]]


# --- reading ---------------------------------------------------------------------------------------

def _profile_key(node: Node, key: str) -> str:
    if not names.PROFILE_NAME.fullmatch(key):
        node.fail_key(f"{key!r} is not a MIG profile name",
                      hint="write profiles as nvidia-smi names them, e.g. \"1g.5gb\", \"3g.40gb\", \"1g.10gb+me\"")
    return key


def _entry(node: Node) -> Entry:
    f = node.fields({"devices", "mig-enabled", "mig-devices", "device-filter"}, {"devices", "mig-enabled"})
    dev = f["devices"]
    devices: tuple[int, ...] | None
    if dev.is_scalar and not dev.is_null and dev.value() == "all":
        devices = None
    elif dev.is_list:
        found: list[int] = []
        for n in dev.list():
            i = n.int(minimum=0)
            if i > names.MAX_GPU_INDEX:
                n.fail(f"GPU index {i} is out of range 0..{names.MAX_GPU_INDEX}")
            if i in found:
                n.fail(f"GPU index {i} listed twice")
            found.append(i)
        devices = tuple(found)
    else:
        dev.fail("devices must be 'all' or a list of GPU indices", hint="e.g. devices: all, or devices: [0, 1]")
    enabled = f["mig-enabled"].bool()
    counts: list[tuple[str, int]] = []
    if "mig-devices" in f and not f["mig-devices"].is_null:
        md = f["mig-devices"]
        if not md.is_map:
            md.fail("mig-devices is a mapping of profile to count, e.g. {\"1g.5gb\": 7}")
        for key, n in md.items():
            counts.append((_profile_key(n, key), n.int(minimum=0, maximum=MAX_COUNT)))
        if counts and not any(c for _, c in counts):
            md.fail("all counts for all MIG profiles are 0 (mig-parted refuses this)",
                    hint="use 'mig-devices: {}' for a MIG-enabled GPU without instances")
    if enabled and "mig-devices" not in f:
        node.fail("missing required field 'mig-devices' when 'mig-enabled' is true",
                  hint="add 'mig-devices: {}' for no instances")
    if not enabled and counts:
        f["mig-devices"].fail("MIG devices included when 'mig-enabled' is false")
    filters: tuple[str, ...] = ()
    if "device-filter" in f:
        df = f["device-filter"]
        items = df.list() if df.is_list else [df]
        filters = tuple(n.str() for n in items)
        for text, n in zip(filters, items, strict=True):
            head = text.split(":", 1)
            if not all(len(h) == 10 and h[:2].lower() == "0x" and _hex(h[2:]) for h in head):
                n.fail(f"{text!r} is not a PCI ID filter", hint="write 0x<device><vendor>, e.g. \"0x20B010DE\"")
    return Entry(devices, enabled, tuple(sorted(counts)), filters)


def _hex(text: str) -> bool:
    return all(c in "0123456789abcdefABCDEF" for c in text)


def parse_spec(root: Node) -> dict[str, tuple[Entry, ...]]:
    """A mig-parted v1 file's configs, validated as mig-parted validates it."""
    if not root.is_map:
        root.fail("a mig-parted config is a mapping with 'version: v1' and 'mig-configs:'")
    f = root.fields({"version", "mig-configs"}, {"version"})
    version = f["version"].str()
    if version != SPEC_VERSION:
        f["version"].fail(f"unknown version: {version!r}", hint="mig-parted reads 'version: v1'")
    if "mig-configs" not in f or f["mig-configs"].is_null:
        root.fail("no 'mig-configs:'", hint="add at least one named config under 'mig-configs:'")
    configs: dict[str, tuple[Entry, ...]] = {}
    for name, node in f["mig-configs"].items():
        if not node.is_list or not node.list():
            node.fail(f"at least one entry in {name!r} is required")
        items = node.list()
        if len(items) > MAX_ENTRIES:
            node.fail(f"{len(items)} entries; migplan reads at most {MAX_ENTRIES}")
        configs[name] = tuple(_entry(n) for n in items)
    if not configs:
        f["mig-configs"].fail("at least one entry in 'mig-configs' is required")
    return configs


# --- writing --------------------------------------------------------------------------------------

def spec_to_dict(configs: Configs) -> dict[str, Any]:
    return {"version": SPEC_VERSION, "mig-configs": {n: [e.to_dict() for e in es] for n, es in configs.items()}}


def _entry_lines(e: Entry) -> list[str]:
    """One entry in mig-parted's own style (config-default.yaml): flow lists, quoted profile keys, largest
    profile first. Every token was validated (profile names, PCI IDs, indices), so none needs escaping."""
    out = []
    if e.device_filter:
        out.append("device-filter: [" + ", ".join(f'"{f}"' for f in e.device_filter) + "]")
    out.append("devices: " + ("all" if e.devices is None else "[" + ", ".join(str(i) for i in e.devices) + "]"))
    out.append(f"mig-enabled: {'true' if e.mig_enabled else 'false'}")
    if e.mig_enabled:
        counts = _by_size(dict(e.mig_devices))
        out.append("mig-devices:" + ("" if counts else " {}"))
        out += [f'  "{p}": {n}' for p, n in counts]
    return ["- " + out[0], *("  " + ln for ln in out[1:])]


def render_spec(configs: Configs, comments: Mapping[str, Sequence[str]] | None = None,
                header: Sequence[str] = ()) -> str:
    """The file mig-parted reads, as YAML, with `# ...` lines before each config that has comments.
    Config names must be plain (`config_name`, or names read by `parse_spec` and checked by the caller)."""
    lines = [f"# {h}" for h in header] + [f"version: {SPEC_VERSION}", "mig-configs:"]
    for name, entries in configs.items():
        lines += [f"  # {c}" for c in (comments or {}).get(name, ())]
        lines.append(f"  {_yaml_key(name)}:")
        for e in entries:
            lines += ["    " + ln for ln in _entry_lines(e)]
    return "\n".join(lines) + "\n"


def _yaml_key(name: str) -> str:
    """A config name as a YAML key: plain when it is a label-like word, else JSON-quoted (valid YAML)."""
    if name and all(c.isascii() and (c.isalnum() or c in "._-") for c in name) and name[0].isalnum():
        return name
    return json.dumps(name)


def gpu_entry(devices: tuple[int, ...] | None, layout: Layout | None) -> Entry:
    """What one GPU (or several alike) gets: MIG off for a whole GPU, else its profile counts."""
    if layout is None:
        return Entry(devices, False)
    return Entry(devices, True, tuple(sorted(layout.profile_counts().items())))


def node_entries(gpus: Sequence[tuple[int, Layout | None]], *, all_gpus: bool) -> tuple[Entry, ...]:
    """A node's config: `devices: all` when every GPU gets the same and `gpus` are all of them, else one
    entry per group of GPUs alike, in index order."""
    groups: dict[Entry, list[int]] = {}
    for index, layout in sorted(gpus, key=lambda g: g[0]):
        groups.setdefault(gpu_entry(None, layout), []).append(index)
    if len(groups) == 1 and all_gpus:
        return (next(iter(groups)),)
    return tuple(Entry(tuple(ix), e.mig_enabled, e.mig_devices, e.device_filter) for e, ix in groups.items())


def _canonical(entries: Sequence[Entry]) -> str:
    return json.dumps([e.to_dict() for e in entries], sort_keys=True, separators=(",", ":"))


_FORM_FACTOR = re.compile(r"\A(?:nvidia|sxm[0-9]*|pcie|hbm[0-9]*e?)\Z")
_NAME_CHARS = re.compile(r"[^a-z0-9.-]+")
TIE_HASH_CHARS = 8  # the suffix of a name its readable part does not determine (32 bits: ties only)


def model_short_name(model_id: str) -> str:
    """`A100-SXM4-40GB` -> `a100-40gb`, `H100-SXM5-80GB@host-1a2b3c4d` -> `h100-80gb`, `A30` -> `a30`: the
    catalog id, lower case, without the driver suffix and the form factor (SXM, PCIe, HBM), which do not change
    what a config creates."""
    words = [w for w in _NAME_CHARS.sub("-", model_id.split("@host-", 1)[0].lower()).split("-") if w]
    kept = [w for w in words if not _FORM_FACTOR.fullmatch(w)] or words
    return "-".join(kept)


def _profile_word(profile: str, count: int) -> str:
    """`3g.20gb` x1 -> `3g.20gb`, `1g.5gb+me` x2 -> `2x1g.5gb.me` ('+' as the device plugin writes it)."""
    word = profile.replace("+", ".").replace(",", ".")
    return word if count == 1 else f"{count}x{word}"


def _readable(entry: Entry) -> str:
    if not entry.mig_enabled:
        return "disabled"
    counts = _by_size(entry.counts())
    return "-".join(_profile_word(p, n) for p, n in counts) if counts else "empty"


def config_name(entries: Sequence[Entry], model: str | None = None) -> str:
    """A stable, readable name, a valid Kubernetes label value and mig-parted config key: the same entries (and
    model) always give the same name, two different entries never do.

    One `devices: all` entry is named by what it creates, which says it all: `migplan-a100-40gb-3g.20gb-2g.10gb-
    2x1g.5gb`, `migplan-h100-80gb-7x1g.10gb`, `migplan-a30-disabled` (`model`: the GPUs' catalog id, shortened
    by `model_short_name`; None: no model part). A name that would not say it all (the entry selects some GPUs or
    has a device filter; a node whose GPUs get different layouts: `migplan-a100-40gb-per-gpu-<hash>`; a name
    longer than 63 characters, cut) ends with a hash of the entries, so two such configs never share a name."""
    short = model_short_name(model) if model else ""
    head = NAME_PREFIX + (short + "-" if short else "")
    one = entries[0] if len(entries) == 1 else None
    digest = hashlib.sha256(_canonical(entries).encode()).hexdigest()
    if one is not None and one.devices is None and not one.device_filter:
        name = head + _readable(one)
        if len(name) <= LABEL_VALUE_MAX:
            return name
        cut = name[: LABEL_VALUE_MAX - TIE_HASH_CHARS - 1].rstrip(".-")
        return f"{cut}-{digest[:TIE_HASH_CHARS]}"
    if one is not None:  # some GPUs only: what they get, and a hash for which (the readable part does not say)
        cut = (head + _readable(one))[: LABEL_VALUE_MAX - TIE_HASH_CHARS - 1].rstrip(".-")
        return f"{cut}-{digest[:TIE_HASH_CHARS]}"
    return f"{head[: LABEL_VALUE_MAX - HASH_CHARS - 9].rstrip('.-')}-per-gpu-{digest[:HASH_CHARS]}"


def same_config(a: Sequence[Entry], b: Sequence[Entry]) -> bool:
    return _canonical(a) == _canonical(b)


def describe(entries: Sequence[Entry]) -> str:
    """`GPUs 0-3: MIG off; GPU 4: 3g.20gb x1, 1g.5gb x2` for comments and tables."""
    parts = []
    for e in entries:
        who = "all GPUs" if e.devices is None else ("GPU " if len(e.devices) == 1 else "GPUs ") + ",".join(
            str(i) for i in e.devices)
        what = "MIG off" if not e.mig_enabled else (
            ", ".join(f"{p} x{n}" for p, n in _by_size(e.counts())) or "MIG on, no instances")
        parts.append(f"{who}: {what}")
    return "; ".join(parts)


def _by_size(counts: Mapping[str, int]) -> list[tuple[str, int]]:
    def size(p: str) -> tuple[int, int, str]:
        s = names.profile_size(p) or (0, 0)
        return (-s[0], -s[1], p)
    return sorted(counts.items(), key=lambda kv: size(kv[0]))


# --- geometry: counts -> placements ------------------------------------------------------------------

def _starts(model: GpuModel, layout: Layout, profile: str) -> list[Instance]:
    """Where one more `profile` instance could go on `layout` (every start the rules allow)."""
    out = []
    for start in model.profile(profile).starts:
        cand = Instance(start, profile)
        if cand not in layout.instances and not check_layout(model, Layout.of((*layout.instances, cand))):
            out.append(cand)
    return out


def _check_counts(model: GpuModel, counts: Mapping[str, int]) -> None:
    for p, n in counts.items():
        if not model.has_profile(p):
            known = ", ".join(q.name for q in model.profiles)
            raise CatalogError(f"{model.id} has no MIG profile {p!r}", hint=f"profiles of {model.id}: {known}")
        if n > model.profile(p).max_count:
            raise CatalogError(f"{n} x {p}: {model.id} allows at most {model.profile(p).max_count}")


def place_counts(model: GpuModel, counts: Mapping[str, int]) -> Layout | None:
    """A valid layout with exactly these profile counts (largest instances placed first, lowest start
    first), or None when no placement exists. CatalogError for a profile the model lacks."""
    want = {p: n for p, n in counts.items() if n > 0}
    _check_counts(model, want)
    return _place(model, tuple(sorted(want.items())))


@functools.lru_cache(maxsize=1024)  # a fleet has few distinct (model, counts); pure, so safe to share
def _place(model: GpuModel, items: tuple[tuple[str, int], ...]) -> Layout | None:
    want = dict(items)
    order = [p for p, n in _by_size(want) for _ in range(n)]
    dead: set[tuple[Instance, ...]] = set()

    def search(layout: Layout, rest: list[str]) -> Layout | None:
        if not rest:
            return layout
        if layout.instances in dead:
            return None
        for cand in _starts(model, layout, rest[0]):
            found = search(Layout.of((*layout.instances, cand)), rest[1:])
            if found is not None:
                return found
        dead.add(layout.instances)
        return None

    return search(Layout(), order)


@dataclass(frozen=True)
class Creatability:
    """Whether a count set can be created the way mig-parted creates it (no placements given)."""

    model: str
    counts: tuple[tuple[str, int], ...]
    layout: Layout | None  # a valid placement, None: none exists
    risk: str  # none | order | placement | impossible
    safe_order: tuple[str, ...] = ()  # for risk 'order': a creation order no placement choice can break

    @property
    def message(self) -> str:
        what = ", ".join(f"{p} x{n}" for p, n in self.counts) or "no instances"
        if self.risk == "impossible":
            return f"{what} cannot be placed on {self.model}"
        if self.risk == "none":
            return f"{what}: creatable in any order, wherever the driver places each instance"
        if self.risk == "order":
            return (f"{what}: creatable only in some creation orders, e.g. {', '.join(self.safe_order)} "
                    "(mig-parted retries every order until one succeeds)")
        return (f"{what}: creatable, but only if the driver places the instances as {self.layout} does; no "
                "creation order is safe for every placement the rules allow (mig-parted retries every order; "
                "check the result with 'migplan status --plan')")


MAX_ORDER_INSTANCES = 8  # instances on one GPU for the order analysis (a MIG GPU has at most 7)


def creation_risk(model: GpuModel, counts: Mapping[str, int]) -> Creatability:
    """How safely mig-parted can create `counts` on `model` (docs/export.md, "Counts, not placements").

    With the catalog's geometry, over every placement the rules allow at each step:
      * none: every creation order succeeds whatever valid start each instance gets;
      * order: some order always succeeds (the first such order, largest first, is given), others can
        fail;
      * placement: a valid layout exists, but every order can fail for some placement choice, so the
        result depends on the driver's choices (NVIDIA's placement choice is not documented);
      * impossible: no valid layout has these counts.
    """
    want = {p: n for p, n in counts.items() if n > 0}
    items = tuple(_by_size(want))
    layout = place_counts(model, want)
    if layout is None:
        return Creatability(model.id, items, None, "impossible")
    multiset = [p for p, n in items for _ in range(n)]
    if len(multiset) > MAX_ORDER_INSTANCES:
        return Creatability(model.id, items, layout, "placement")
    memo: dict[tuple[tuple[str, ...], tuple[Instance, ...]], bool] = {}
    starts: dict[tuple[tuple[Instance, ...], str], list[Instance]] = {}

    def safe(order: tuple[str, ...], lay: Layout) -> bool:
        key = (order, lay.instances)
        if key not in memo:
            if not order:
                memo[key] = True
            else:
                where = (lay.instances, order[0])
                if where not in starts:
                    starts[where] = _starts(model, lay, order[0])
                choices = starts[where]
                memo[key] = bool(choices) and all(safe(order[1:], Layout.of((*lay.instances, c))) for c in choices)
        return memo[key]

    orders = sorted(set(itertools.permutations(multiset)), key=lambda o: [multiset.index(p) for p in o])
    good = [o for o in orders if safe(o, Layout())]
    if len(good) == len(orders):
        return Creatability(model.id, items, layout, "none")
    if good:
        return Creatability(model.id, items, layout, "order", good[0])
    return Creatability(model.id, items, layout, "placement")


def max_per_gpu(model: GpuModel, profile: str) -> int:
    """How many `profile` instances fit on one GPU of `model` at most (NVIDIA's `all-<profile>` count)."""
    best = 0
    for n in range(1, model.profile(profile).max_count + 1):
        if place_counts(model, {profile: n}) is None:
            break
        best = n
    return best


def split_counts(model: GpuModel, counts: Mapping[str, int], gpus: int) -> list[Layout] | None:
    """Node-wide profile counts split over `gpus` GPUs of one model, each a valid layout (largest GPUs
    first), or None when no split exists. For labels that count a node's MIG devices, not a GPU's."""
    want = Counter({p: n for p, n in counts.items() if n > 0})
    _check_counts_node(model, want)
    if gpus <= 0:
        return [] if not want else None
    options = {key: lay for key, lay in _count_sets(model).items() if all(want[p] >= n for p, n in key)}
    keys = sorted(options, key=lambda k: (-sum(n for _, n in k), k))
    dead: set[tuple[int, int, tuple[tuple[str, int], ...]]] = set()

    size = {p.name: (p.compute_slices, p.memory_slices) for p in model.profiles}

    def room(left: Counter[str], k: int) -> bool:
        """A bound: k GPUs have k times one GPU's compute and memory slices."""
        return (sum(size[p][0] * n for p, n in left.items()) <= k * model.compute_slices
                and sum(size[p][1] * n for p, n in left.items()) <= k * model.memory_slices)

    def search(left: Counter[str], k: int, first: int) -> list[Layout] | None:
        if k == 0:
            return [] if not +left else None
        if not room(left, k):
            return None
        state = (first, k, tuple(sorted((+left).items())))
        if state in dead:
            return None
        for j in range(first, len(keys)):  # non-increasing in key order: each split found once
            key = keys[j]
            if all(left[p] >= n for p, n in key):
                rest = left.copy()
                rest.subtract(dict(key))
                found = search(rest, k - 1, j)
                if found is not None:
                    return [options[key], *found]
        dead.add(state)
        return None

    return search(want, gpus, 0)


@functools.lru_cache(maxsize=32)
def _count_sets(model: GpuModel) -> dict[tuple[tuple[str, int], ...], Layout]:
    """Every distinct profile-count set one GPU of `model` can hold, with a layout for it (first found)."""
    out: dict[tuple[tuple[str, int], ...], Layout] = {}
    for lay in enumerate_layouts(model, profiles=[p.name for p in model.profiles]):
        out.setdefault(tuple(sorted(lay.profile_counts().items())), lay)
    return out


def count_set_layout(model: GpuModel, counts: Mapping[str, int]) -> Layout | None:
    """The layout `split_counts` gives a GPU holding exactly `counts` (so a GPU whose counts are known is placed as
    the inference would place it), None when one GPU of `model` cannot hold them."""
    key = tuple(sorted((p, n) for p, n in counts.items() if n > 0))
    return _count_sets(model).get(key)


def _check_counts_node(model: GpuModel, counts: Mapping[str, int]) -> None:
    for p in counts:
        if not model.has_profile(p):
            known = ", ".join(q.name for q in model.profiles)
            raise CatalogError(f"{model.id} has no MIG profile {p!r}", hint=f"profiles of {model.id}: {known}")


# --- the GPU Operator's ConfigMap (`kubectl get configmap -n gpu-operator NAME -o json`) -------------------

CONFIGMAP_KEY = "config.yaml"  # the key the MIG manager reads (NVIDIA/gpu-operator values.yaml, migManager.config)
MAX_CONFIGMAP_TEXT = 1 << 20  # characters of data.config.yaml: Kubernetes holds at most 1 MiB in a ConfigMap
_CONFIGMAP_HINT = "pass one ConfigMap as 'kubectl get configmap -n gpu-operator NAME -o json' prints it"


@dataclass(frozen=True)
class ConfigMapConfigs:
    """The mig-parted configs of the ConfigMap the MIG manager reads, and how notes name it (`ConfigMap
    gpu-operator/default-mig-parted-config`)."""

    name: str
    configs: Mapping[str, tuple[Entry, ...]]


def _meta_text(meta: Mapping[str, Node], key: str) -> str:
    node = meta.get(key)
    if node is None or not node.is_scalar or node.is_null:
        return "?"
    text = str(node.value())
    return text if len(text) <= 253 and all(c.isascii() and (c.isalnum() or c in "-.") for c in text) else "?"


def read_configmap(root: Node) -> ConfigMapConfigs:
    """A ConfigMap (kind: ConfigMap) holding a mig-parted file under data.config.yaml, read as untrusted data:
    every refusal is an error naming the ConfigMap and the key (its text at most `MAX_CONFIGMAP_TEXT`
    characters; the file validated as mig-parted validates it, `parse_spec`)."""
    if not root.is_map:
        root.fail("expected a ConfigMap (kind: ConfigMap) with data.config.yaml", hint=_CONFIGMAP_HINT)
    f = dict(root.items())
    kind = f.get("kind")
    if kind is None or not kind.is_scalar or kind.is_null or kind.value() != "ConfigMap":
        shown = "none" if kind is None or kind.is_null else repr(str(kind.value())[:40]) if kind.is_scalar else "?"
        (kind if kind is not None else root).fail(f"expected kind: ConfigMap, not {shown}", hint=_CONFIGMAP_HINT)
    meta = dict(f["metadata"].items()) if "metadata" in f and f["metadata"].is_map else {}
    who = f"ConfigMap {_meta_text(meta, 'namespace')}/{_meta_text(meta, 'name')}"
    data = f.get("data")
    if data is None or not data.is_map or CONFIGMAP_KEY not in dict(data.items()):
        (data if data is not None else root).fail(f"{who} has no data.{CONFIGMAP_KEY}",
                            hint="the MIG manager reads its mig-parted configs from that key")
    text_node = dict(data.items())[CONFIGMAP_KEY]
    if not text_node.is_scalar or text_node.is_null:
        text_node.fail(f"{who}: data.{CONFIGMAP_KEY} must be text (a mig-parted config file)")
    text = text_node.str()
    if len(text) > MAX_CONFIGMAP_TEXT:
        text_node.fail(f"{who}: data.{CONFIGMAP_KEY} is {len(text)} characters, more than the 1 MiB a ConfigMap "
                       "holds")
    inner = yamldoc.parse(text, f"{root.source}: {who} data.{CONFIGMAP_KEY}")
    if inner is None:
        text_node.fail(f"{who}: data.{CONFIGMAP_KEY} is empty")
    return ConfigMapConfigs(who, parse_spec(inner))


# --- a host's declared layouts from a mig-parted file (inventory `mig_parted: {file, config}`) -------

@dataclass(frozen=True)
class DeclaredConfig:
    """A host's `mig_parted:` setting, read: the file, the chosen config's entries and where they are."""

    file: str
    config: str
    entries: tuple[Entry, ...]
    nodes: tuple[Node, ...]  # each entry's node, for errors
    setting: Node
    catalog: Catalog = field(compare=False)


def read_setting(node: Node, catalog: Catalog, load: Callable[[str], Node]) -> DeclaredConfig:
    """`mig_parted: {file: PATH, config: NAME}`; PATH relative to the inventory file. `load` reads a file
    (the caller's, so this stays pure)."""
    f = node.fields({"file", "config"}, {"file", "config"})
    path = f["file"].str()
    if not path.strip() or "\0" in path:
        f["file"].fail(f"{path!r} is not a file path")
    if not posixpath.isabs(path):
        path = posixpath.join(posixpath.dirname(node.source), path)
    name = f["config"].str()
    root = load(path)
    configs = parse_spec(root)
    if name not in configs:
        known = ", ".join(sorted(configs)[:20])
        f["config"].fail(f"{path} has no config {name!r}", hint=f"configs there: {known}")
    mc = dict(root.fields({"version", "mig-configs"}))["mig-configs"]
    entry_nodes = tuple(dict(mc.items())[name].list())
    return DeclaredConfig(path, name, configs[name], entry_nodes, node, catalog)


def declared_layouts(cfg: DeclaredConfig, gpus: Sequence[tuple[int, str]]) -> dict[int, Layout | None]:
    """Per GPU (index, model id) the layout the config gives it: None for `mig-enabled: false`, a layout
    found by placement search for counts. GPUs no entry selects are left out (not declared). Errors name
    the file and the entry."""
    out: dict[int, Layout | None] = {}
    owner: dict[int, int] = {}
    indices = {i for i, _ in gpus}
    for k, (entry, node) in enumerate(zip(cfg.entries, cfg.nodes, strict=True)):
        for i in entry.devices or ():
            if i not in indices:
                node.fail(f"config {cfg.config!r} names GPU {i}, which this host does not list "
                          f"(GPUs {sorted(indices)})", hint="fix 'devices:' or the host's 'gpus:'")
        for index, model_id in gpus:
            model = cfg.catalog.get(model_id)
            if not entry.selects(index, model):
                continue
            if index in owner:
                node.fail(f"GPU {index} is selected by entries {owner[index]} and {k} of config {cfg.config!r}",
                          hint="give each GPU one entry")
            owner[index] = k
            if not entry.mig_enabled:
                out[index] = None
                continue
            try:
                layout = place_counts(model, entry.counts())
            except CatalogError as err:
                node.fail(f"config {cfg.config!r}, GPU {index}: {err.message}", hint=err.hint)
            if layout is None:
                what = ", ".join(f"{p} x{n}" for p, n in _by_size(entry.counts()))
                node.fail(f"config {cfg.config!r}, GPU {index}: {what} cannot be placed on {model.id}",
                          hint=f"list valid layouts with 'migplan catalog layouts {model.id}'")
            out[index] = layout
    return out


class _Gpu(Protocol):
    @property
    def index(self) -> int: ...
    @property
    def model(self) -> str: ...
    @property
    def layout(self) -> Layout | None: ...


G = TypeVar("G", bound=_Gpu)


def declare(cfg: DeclaredConfig, gpus: Sequence[G]) -> list[G]:
    """The host's GPUs (inventory `DeclaredGpu`s) with the layouts the config gives them."""
    if not gpus:
        raise InputError("'mig_parted' needs the host's GPUs and their models under 'gpus:'",
                         source=cfg.setting.source, key=cfg.setting.path or None, line=cfg.setting.line,
                         hint="add gpus: {model: MODEL, count: N} (discover: true cannot be combined with it)")
    given = declared_layouts(cfg, [(g.index, g.model) for g in gpus])
    out = []
    for g in gpus:
        if g.index in given:
            if g.layout is not None:
                cfg.setting.fail(f"GPU {g.index} has a 'layout:' and also one from {cfg.file} (config {cfg.config})",
                                 hint="declare each GPU's layout once")
            lay = given[g.index]
            g = replace(g, mig_enabled=lay is not None, layout=lay)  # type: ignore[type-var]  # G's bound is a Protocol; each G is a dataclass
        out.append(g)
    return out


# --- after the MIG manager has run: where the placements differ from the plan ---------------------

@dataclass(frozen=True)
class PlanDrift:
    """A GPU whose observed layout is not the plan's target."""

    host: str
    index: int
    kind: str  # placement (same profile counts, other starts) | counts | mode
    planned: Layout | None
    actual: Layout | None

    @property
    def message(self) -> str:
        def show(lay: Layout | None) -> str:
            return "MIG disabled" if lay is None else str(lay)
        what = {"placement": "same profile counts, other placements",
                "counts": "other profile counts", "mode": "other MIG mode"}[self.kind]
        return f"GPU {self.index}: {what} than the plan: plan {show(self.planned)}, actual {show(self.actual)}"


def plan_drift(actual: Iterable[tuple[str, int, Layout | None]],
               targets: Mapping[tuple[str, int], Layout | None]) -> list[PlanDrift]:
    """Observed GPUs (host, index, layout; None: MIG disabled) against a plan's targets. GPUs the plan
    does not know are skipped. A mig-parted config fixes counts only, so 'placement' is the drift that
    applying it through the MIG manager can leave; the next plan should start from the actual layout."""
    out = []
    for host, index, lay in actual:
        if (host, index) not in targets:
            continue
        want = targets[(host, index)]
        if want == lay:
            continue
        if want is None or lay is None:
            kind = "mode"
        elif want.profile_counts() == lay.profile_counts():
            kind = "placement"
        else:
            kind = "counts"
        out.append(PlanDrift(host, index, kind, want, lay))
    return out
