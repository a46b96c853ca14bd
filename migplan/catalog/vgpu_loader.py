"""Read the vGPU catalog (`data/vgpu.yaml`, package data) strictly, cross-checked against the MIG catalog.

The file (docs/vgpu.md, "The catalog file"):

    version: 1
    sources: {KEY: what the source is, ...}        # every key a model or type cites (docs/sources.md §6)
    models:
      - id: A100-PCIE-40GB                          # migplan's name of the board
        board: A100                                 # NVIDIA's type-name prefix for it
        product: NVIDIA A100 PCIe 40GB              # the board as NVIDIA's tables name it
        gpu: A100-SXM4-40GB                         # its catalog model: a MIG model id, or a GPU without MIG
        architecture: ampere                        # turing | ampere | ada | hopper | blackwell
        host_vgpu_mode: sr-iov                      # sr-iov (VFs) | non-sr-iov (mdev devices)
        gpus_per_board: 1                           # optional (A16: 4)
        pci_device_ids: ['0x20f1']                  # optional
        frame_buffer_mib: 40960                     # the largest time-sliced type's frame buffer
        modes: [time_sliced, time_sliced_mixed, mig_backed]
        source: 'AIE62 T71, T72, VDM'               # keys of `sources`, each optionally followed by a detail
        types:
          - {name: A100-40C, id: 473, series: C, frame_buffer_mib: 40960, max: 1, max_mixed: 1, confidence: table}
          - {name: A100-3-20C, series: C, frame_buffer_mib: 20480, mig_profile: 3g.20gb, max: 2, confidence: table}

What is refused, each with the file, line and key (a `CatalogError`):

* unknown or missing keys, duplicate model ids, boards or type names, a source key not in `sources`;
* a type name outside NVIDIA's grammar, or whose board or series differs from its entry's;
* a frame buffer that is not the name's size (`round(MiB / 1024)` is the name's GB: the tables' sizes are
  nominal, H100L-94C is 96246 MiB) or is more than the board's;
* time-sliced: `max` x frame buffer more than the board's frame buffer; `max_mixed` missing on a board with
  mixed-size mode, present on one without, more than `max`, or times the frame buffer more than the board's;
* MIG-backed: a board without `mig_backed` mode or whose `gpu` is not a MIG model of the catalog, a
  `mig_profile` that is not the name's (`A30-1-6CME` is `1g.6gb+me`) or not a profile of that model, a
  `max` other than the profile's maximum count, a frame buffer below the profile's memory or above it by
  more than `MIG_FB_SLACK` (the vGPU tables print the nominal size, `-lgip` the driver's: H100L-1-12C is
  12288 MiB on a 10880 MiB 1g.12gb, 13% more; the next profile up is twice the size);
* a mode without a type for it, a board `frame_buffer_mib` no time-sliced type has, or (a MIG model) below
  the whole-GPU profile's memory or above it by more than `MIG_FB_SLACK`;
* `gpu` neither a MIG model nor a GPU without MIG migplan knows (`whole_gpus`);
* `confidence: config` or `inferred` without a `note` saying why.

Only this module and `loader.py` read files in the catalog package: this one reads its own data file, or a
file a test names.
"""

from __future__ import annotations

import functools
import os
import re
from typing import TYPE_CHECKING

from migplan.catalog import whole_gpus
from migplan.catalog.catalog import Catalog
from migplan.catalog.geometry import GpuModel
from migplan.catalog.loader import builtin_catalog
from migplan.catalog.vgpu import (
    CONFIDENCES,
    HOST_VGPU_MODES,
    MIG_BACKED,
    MODES,
    SERIES,
    TIME_SLICED,
    TIME_SLICED_MIG,
    TIME_SLICED_MIXED,
    VGPU_ARCHITECTURES,
    TypeName,
    VgpuCatalog,
    VgpuModel,
    VgpuType,
    nominal_gb,
    parse_type_name,
)
from migplan.errors import CatalogError
from migplan.names import MAX_MEMORY_MIB

if TYPE_CHECKING:
    from migplan.yamldoc import Node

VGPU_CATALOG_VERSION = 1
MIG_FB_SLACK = 1.25  # a MIG-backed type's frame buffer is at most this times its profile's memory
MAX_MODELS = 256
MAX_TYPES = 64
MAX_COUNT = 64  # vGPUs of one type per GPU (the shipped tables reach 32)
MAX_TYPE_ID = 65535
MAX_NAME = 128
MAX_NOTE = 2000

_MODEL_KEYS = {"id", "board", "product", "gpu", "architecture", "host_vgpu_mode", "gpus_per_board",
               "pci_device_ids", "frame_buffer_mib", "modes", "source", "note", "types"}
_MODEL_REQUIRED = {"id", "board", "product", "gpu", "architecture", "host_vgpu_mode", "frame_buffer_mib", "modes",
                   "source", "types"}
_TYPE_KEYS = {"name", "id", "series", "frame_buffer_mib", "max", "max_mixed", "mig_profile", "max_per_gi",
              "confidence", "source", "note"}
_TYPE_REQUIRED = {"name", "series", "frame_buffer_mib", "max", "confidence"}
_PCI = re.compile(r"(?a)0x[0-9a-f]{4}")
_KEY = re.compile(r"(?a)[A-Z][A-Z0-9_]{0,63}")
_TABLE = re.compile(r"(?a)T[0-9]{1,4}")

BUILTIN_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "vgpu.yaml")


def _text(node: Node, limit: int = MAX_NAME) -> str:
    v = node.str()
    if not v.strip():
        node.fail("must not be empty")
    if len(v) > limit:
        node.fail(f"is longer than {limit} characters")
    if not v.isprintable():
        node.fail("contains control characters", hint="write plain text")
    return v


def _source(node: Node, keys: frozenset[str]) -> str:
    """`'AIE62 T71, T72, VDM'`: comma-separated items, each starting with a key of `sources` or with `T<n>` (another
    table of the key before it), the rest of an item a detail."""
    text = _text(node, MAX_NOTE)
    for i, item in enumerate(text.split(",")):
        words = item.split()
        word = words[0] if words else ""
        if word in keys or (i and _TABLE.fullmatch(word)):
            continue
        node.fail(f"source item {item.strip()!r} does not start with a key of 'sources'",
                  hint=f"keys: {', '.join(sorted(keys))} (a later item may start with a table number, T12)")
    return text


def _mig_model(catalog: Catalog, gpu: str) -> GpuModel | None:
    m = catalog.find(gpu)
    return m if m is not None and m.id == gpu and m.mig else None


def _named(f: dict[str, Node], board: str, board_fb: int) -> tuple[TypeName, str, int]:
    """A type's name, series and frame buffer, checked against each other and the board."""
    name = _text(f["name"])
    try:
        parsed = parse_type_name(name)
    except CatalogError as err:
        f["name"].fail(err.message, hint=err.hint)
    if parsed.board != board:
        f["name"].fail(f"{name} is not a type of board {board} (its prefix is {parsed.board})")
    series = f["series"].str()
    if series not in SERIES:
        f["series"].fail(f"unknown series {series!r}", hint=f"one of: {', '.join(SERIES)}")
    if series != parsed.series:
        f["series"].fail(f"{name} is a {parsed.series}-series type by its name, not {series}")
    fb = f["frame_buffer_mib"].int(minimum=1, maximum=MAX_MEMORY_MIB)
    if (parsed.gb == 0 and fb >= 1024) or (parsed.gb and nominal_gb(fb) != parsed.gb):
        f["frame_buffer_mib"].fail(f"{fb} MiB is not the {parsed.gb} GB its name {name} says",
                                   hint="the name's GB is the frame buffer rounded to whole GiB")
    if fb > board_fb:
        f["frame_buffer_mib"].fail(f"{fb} MiB is more than the board's {board_fb} MiB")
    return parsed, name, fb


def _sliced_checked(f: dict[str, Node], name: str, fb: int, count: int, modes: tuple[str, ...],
                    board_fb: int) -> int:
    """A time-sliced type's counts against the board's frame buffer; its `max_mixed` (0 without mixed-size mode)."""
    if "mig_profile" in f:
        f["mig_profile"].fail(f"{name} is time-sliced (its name has no '-<g>-'); only MIG-backed types have one")
    if "max_per_gi" in f:
        f["max_per_gi"].fail("max_per_gi is for MIG-backed types")
    capacity = nominal_gb(board_fb) * 1024
    if count * fb > capacity:
        f["max"].fail(f"{count} x {fb} MiB is more than the board's {capacity} MiB",
                      hint="equal-size mode: max x frame buffer fits the GPU")
    if TIME_SLICED_MIXED not in modes:
        if "max_mixed" in f:
            f["max_mixed"].fail(f"the board has no {TIME_SLICED_MIXED} mode", hint="add it to 'modes' or drop this")
        return 0
    if "max_mixed" not in f:
        f["max"].fail(f"the board has mixed-size mode: {name} needs max_mixed")
    max_mixed = f["max_mixed"].int(minimum=1, maximum=count)
    if max_mixed * fb > capacity:
        f["max_mixed"].fail(f"{max_mixed} x {fb} MiB is more than the board's {capacity} MiB")
    return max_mixed


def _type(node: Node, board: str, modes: tuple[str, ...], board_fb: int, keys: frozenset[str],
          mig: GpuModel | None) -> VgpuType:
    f = node.fields(_TYPE_KEYS, _TYPE_REQUIRED)
    parsed, name, fb = _named(f, board, board_fb)
    count = f["max"].int(minimum=1, maximum=MAX_COUNT)
    confidence = f["confidence"].str()
    if confidence not in CONFIDENCES:
        f["confidence"].fail(f"unknown confidence {confidence!r}", hint=f"one of: {', '.join(CONFIDENCES)}")
    note = _text(f["note"], MAX_NOTE) if "note" in f else ""
    if confidence in ("config", "inferred") and not note:
        f["confidence"].fail(f"a '{confidence}' entry says why in a 'note'")
    max_mixed = 0
    profile = ""
    if parsed.mig_backed:
        profile = _mig_checked(f, name, parsed.mig_profile, fb, count, modes, mig)
        if "max_mixed" in f:
            f["max_mixed"].fail(f"max_mixed is for time-sliced types; {name} is MIG-backed")
    else:
        max_mixed = _sliced_checked(f, name, fb, count, modes, board_fb)
    max_per_gi = 0
    if "max_per_gi" in f:
        if TIME_SLICED_MIG not in modes:
            f["max_per_gi"].fail(f"the board has no {TIME_SLICED_MIG} mode")
        max_per_gi = f["max_per_gi"].int(minimum=1, maximum=MAX_COUNT)
    return VgpuType(
        name=name, series=parsed.series, frame_buffer_mib=fb, max_count=count, max_mixed=max_mixed,
        mig_profile=profile, max_per_gi=max_per_gi,
        type_id=f["id"].int(minimum=0, maximum=MAX_TYPE_ID) if "id" in f else None,
        confidence=confidence, source=_source(f["source"], keys) if "source" in f else "", note=note)


def _mig_checked(f: dict[str, Node], name: str, expected: str, fb: int, count: int, modes: tuple[str, ...],
                 mig: GpuModel | None) -> str:
    """The MIG profile of a MIG-backed type, checked against the board's catalog model."""
    if MIG_BACKED not in modes:
        f["name"].fail(f"{name} is MIG-backed but the board has no {MIG_BACKED} mode")
    if "mig_profile" not in f:
        f["name"].fail(f"{name} is MIG-backed: give its mig_profile ({expected})")
    profile = f["mig_profile"].str()
    if profile != expected:
        f["mig_profile"].fail(f"{name} stands for MIG profile {expected}, not {profile}")
    assert mig is not None  # the model's `gpu` was checked to be a MIG model when it has mig_backed mode
    if not mig.has_profile(profile):
        f["mig_profile"].fail(f"{mig.id} has no MIG profile {profile}",
                              hint=f"its profiles: {', '.join(p.name for p in mig.profiles)}")
    p = mig.profile(profile)
    if count != p.max_count:
        f["max"].fail(f"{name} on {p.name}: at most {p.max_count} per GPU, as the MIG profile ({mig.id}), not {count}")
    if not p.memory_mib <= fb <= p.memory_mib * MIG_FB_SLACK:
        f["frame_buffer_mib"].fail(f"{fb} MiB does not match MIG profile {p.name} of {mig.id} ({p.memory_mib} MiB)",
                                   hint=f"a MIG-backed type has at least its profile's memory, at most "
                                        f"{MIG_FB_SLACK:g} times it")
    return profile


def _modes(node: Node) -> tuple[str, ...]:
    out = []
    for n in node.list():
        v = n.str()
        if v not in MODES:
            n.fail(f"unknown mode {v!r}", hint=f"one of: {', '.join(MODES)}")
        if v in out:
            n.fail(f"mode {v} listed twice")
        out.append(v)
    if not out:
        node.fail("a board supports at least one mode")
    return tuple(out)


def _model(node: Node, keys: frozenset[str], catalog: Catalog) -> VgpuModel:
    f = node.fields(_MODEL_KEYS, _MODEL_REQUIRED)
    model_id, board, gpu = _text(f["id"]), _text(f["board"]), _text(f["gpu"])
    arch = f["architecture"].str()
    if arch not in VGPU_ARCHITECTURES:
        f["architecture"].fail(f"unknown architecture {arch!r}", hint=f"one of: {', '.join(VGPU_ARCHITECTURES)}")
    host_mode = f["host_vgpu_mode"].str()
    if host_mode not in HOST_VGPU_MODES:
        f["host_vgpu_mode"].fail(f"unknown host vGPU mode {host_mode!r}", hint=f"one of: {', '.join(HOST_VGPU_MODES)}")
    modes = _modes(f["modes"])
    mig = _mig_model(catalog, gpu)
    whole = {i for i, _ in whole_gpus.known()}
    if mig is None and gpu not in whole:
        f["gpu"].fail(f"{gpu!r} is neither a MIG model of the catalog nor a GPU without MIG migplan knows",
                      hint="'migplan catalog list' names the MIG models; whole_gpus.py the others")
    named = catalog.find(model_id)
    if ((named is not None and named.id == model_id) or model_id in whole) and model_id != gpu:
        f["id"].fail(f"{model_id!r} is a catalog model id: a board may only take it for that model ('gpu: {model_id}')",
                     hint="name the board by its product, e.g. A100-HGX-40GB for the A100 SXM4 40GB")
    if MIG_BACKED in modes and mig is None:
        f["modes"].fail(f"{MIG_BACKED} needs a MIG model as 'gpu', not {gpu}")
    fb = f["frame_buffer_mib"].int(minimum=1, maximum=MAX_MEMORY_MIB)
    if mig is not None and not mig.memory_mib <= fb <= mig.memory_mib * MIG_FB_SLACK:
        f["frame_buffer_mib"].fail(f"{fb} MiB does not match {mig.id}'s {mig.memory_mib} MiB under MIG")
    pci = tuple(_pci(n) for n in f["pci_device_ids"].list()) if "pci_device_ids" in f else ()
    type_nodes = f["types"].list()
    if not type_nodes or len(type_nodes) > MAX_TYPES:
        f["types"].fail(f"a board has 1 to {MAX_TYPES} types, not {len(type_nodes)}")
    types: list[VgpuType] = []
    lines: dict[str, int] = {}
    ids: dict[int, int] = {}
    for tn in type_nodes:
        t = _type(tn, board, modes, fb, keys, mig)
        if t.name in lines:
            tn.fail(f"type {t.name} listed twice (first at line {lines[t.name]})")
        if t.type_id is not None:
            if t.type_id in ids:
                tn.fail(f"type id {t.type_id} listed twice (first at line {ids[t.type_id]})")
            ids[t.type_id] = tn.line
        lines[t.name] = tn.line
        types.append(t)
    sliced = [t for t in types if not t.mig_backed]
    have = {TIME_SLICED: sliced, TIME_SLICED_MIXED: sliced, MIG_BACKED: [t for t in types if t.mig_backed],
            TIME_SLICED_MIG: [t for t in types if t.max_per_gi]}
    for mode in modes:
        if not have[mode]:
            f["modes"].fail(f"mode {mode} but no type for it")
    if sliced and fb not in {t.frame_buffer_mib for t in sliced}:
        f["frame_buffer_mib"].fail(f"{fb} MiB is no time-sliced type's frame buffer",
                                   hint="the board's frame buffer is its largest time-sliced type's")
    return VgpuModel(
        id=model_id, board=board, product=_text(f["product"]), gpu=gpu, architecture=arch, host_vgpu_mode=host_mode,
        frame_buffer_mib=fb, modes=modes, types=tuple(types),
        gpus_per_board=f["gpus_per_board"].int(minimum=1, maximum=16) if "gpus_per_board" in f else 1,
        pci_device_ids=pci, source=_source(f["source"], keys),
        note=_text(f["note"], MAX_NOTE) if "note" in f else "")


def _pci(node: Node) -> str:
    v = node.str().strip().lower()
    if not _PCI.fullmatch(v):
        node.fail(f"{v!r} is not a PCI device ID", hint="write it as nvidia-smi's pci.device_id without the vendor, "
                                                        "e.g. '0x20f1'")
    return v


def parse_vgpu_catalog(root: Node, catalog: Catalog) -> VgpuCatalog:
    """The vGPU catalog of a document, its MIG-backed types checked against `catalog`'s MIG models."""
    from migplan import yamldoc

    f = root.fields({"version", "sources", "models"}, {"version", "sources", "models"})
    yamldoc.check_version(f, root, VGPU_CATALOG_VERSION, "vGPU catalog")
    sources = []
    for key, n in f["sources"].items():
        if not _KEY.fullmatch(key):
            n.fail_key(f"source key {key!r}: capitals, digits and '_', starting with a capital")
        sources.append((key, _text(n, MAX_NOTE)))
    keys = frozenset(k for k, _ in sources)
    model_nodes = f["models"].list()
    if len(model_nodes) > MAX_MODELS:
        f["models"].fail(f"more than {MAX_MODELS} boards")
    models: list[VgpuModel] = []
    first: dict[tuple[str, str], int] = {}
    for n in model_nodes:
        m = _model(n, keys, catalog)
        for what, value in (("id", m.id.lower()), ("board", m.board.lower())):
            if (what, value) in first:
                n.fail(f"{what} {value!r} listed twice (first at line {first[(what, value)]})")
            first[(what, value)] = n.line
        models.append(m)
    for n, m in zip(model_nodes, models, strict=True):
        shared = [o.id for o in models if o.gpu == m.gpu]
        if m.id == m.gpu and len(shared) > 1:
            n.fail(f"board id {m.id!r} is its catalog model's, which has {len(shared)} vGPU boards "
                   f"({', '.join(shared)})",
                   hint="name each board by its product (A100-PCIE-40GB, A100-HGX-40GB), so that the model's id "
                        "finds them all")
    return VgpuCatalog(tuple(models), tuple(sources))


def load_vgpu_file(path: str | os.PathLike[str], catalog: Catalog | None = None) -> VgpuCatalog:
    """A vGPU catalog file, checked against `catalog` (default: the shipped MIG catalog)."""
    from migplan import yamldoc

    return parse_vgpu_catalog(yamldoc.load(path), catalog if catalog is not None else builtin_catalog())


@functools.lru_cache(maxsize=1)
def builtin_vgpu_catalog() -> VgpuCatalog:
    """The vGPU catalog shipped with migplan, checked against the shipped MIG catalog."""
    return load_vgpu_file(BUILTIN_PATH)
