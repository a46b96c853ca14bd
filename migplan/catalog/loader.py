"""Read catalog files (the shipped one and user overrides), validated strictly.

Every number is bounded by what MIG hardware has, with a margin (a catalog file is user input,
and enumeration, planning and `nvidia-smi` commands are built from it):

* memory and compute slices per model: 1..`names.MAX_MIG_SLICES` (16; MIG GPUs have at most 8
  memory and 7 compute slices today);
* profiles per model: at most `MAX_PROFILES` (32; real models have 5 to 10);
* profile and compute-instance IDs: 0..`MAX_PROFILE_ID` (255, what `nvidia-smi mig -cgi` takes);
* memory per profile: 1..`names.MAX_MEMORY_MIB` MiB; SMs per profile: 0..`MAX_SM_COUNT` (1024);
  engines of each kind: 0..`MAX_ENGINES` (64); `max_count`: 1..`names.MAX_MIG_SLICES`;
* starts: distinct, inside the GPU (so at most 16);
* names and ids: at most `MAX_NAME` (128) characters, no whitespace in profile names;
* an override model must have at most `layout.MAX_LAYOUTS` valid layouts (checked at load time,
  so that a runaway model is refused here with its line, not when it is enumerated later);
* `min_driver` of a profile: a driver branch or version, `470` or `525.85.12` (an optional `R` prefix);
* `engine_budget` of a model: a mapping of some of ce/dec/enc/jpeg/ofa to 0..`MAX_ENGINES`; without it
  the whole-GPU profile's engines are the budget (docs/mig-geometry.md §1);
* `drivers` of a model: free text, the driver range its numbers hold for;
* `exclusions` of a model: a list of `{profiles: [two or more of its plain profile names], min_driver,
  reason}`: profiles the driver creates no two of on one GPU; with `min_driver`, only on older drivers
  (the MIG User Guide's R510 rule for 4g.20gb with 3g.20gb; docs/mig-geometry.md §1).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from migplan.catalog import cache
from migplan.catalog.catalog import Catalog
from migplan.catalog.geometry import (
    ARCHITECTURES,
    ENGINE_KINDS,
    NO_MIG,
    Engines,
    Exclusion,
    GiProfile,
    GpuModel,
    driver_version,
    profile_variant,
)
from migplan.catalog.layout import MAX_LAYOUTS, count_layouts
from migplan.errors import CatalogError
from migplan.names import MAX_MEMORY_MIB, MAX_MIG_SLICES

if TYPE_CHECKING:  # the YAML reader (and PyYAML) is imported only on a cache miss or for an override file
    from migplan.yamldoc import Node

CATALOG_VERSION = 1
MAX_PROFILES = 32
MAX_PROFILE_ID = 255
MAX_SM_COUNT = 1024
MAX_ENGINES = 64
MAX_NAME = 128
MAX_NOTE = 2000

_MODEL_KEYS = {
    "id", "aliases", "smi_names", "pci_device_ids", "architecture", "memory_slices", "compute_slices",
    "verified", "confidence", "source", "profiles", "engine_budget", "drivers", "exclusions",
}
_MODEL_REQUIRED = {"id", "architecture", "memory_slices", "compute_slices", "profiles"}
_PROFILE_KEYS = {
    "name", "id", "compute_slices", "memory_slices", "memory_mib", "max_count", "sm_count", "starts",
    "media_extensions", "engines", "ci_default_id", "ci_default_verified", "confidence", "min_driver",
}
_PROFILE_REQUIRED = {"name", "id", "compute_slices", "memory_slices", "memory_mib", "max_count", "starts"}


def _name(node: Node) -> str:
    v = node.str()
    if not v.strip():
        node.fail("must not be empty")
    if len(v) > MAX_NAME:
        node.fail(f"is longer than {MAX_NAME} characters")
    if not v.isprintable():  # a "\e[2J" escape in a quoted string would reach the terminal via `catalog list`
        node.fail("contains control characters", hint="names are printed as they are: use plain text")
    return v


def _note(node: Node) -> str:
    """Free text (a `drivers` note): printable, at most MAX_NOTE characters."""
    v = node.str()
    if len(v) > MAX_NOTE:
        node.fail(f"is longer than {MAX_NOTE} characters")
    if not v.isprintable():
        node.fail("contains control characters", hint="notes are printed as they are: use plain text")
    return v


def _min_driver(node: Node) -> str:
    v = _name(node)
    try:
        driver_version(v)
    except CatalogError as err:
        node.fail(err.message, hint=err.hint)
    return v


def _exclusions(node: Node, profiles: list[GiProfile]) -> tuple[Exclusion, ...]:
    known = {p.name for p in profiles}
    plain = {p.name for p in profiles if not p.media_extensions and (not p.variant or p.base_name not in known)}
    out = []
    for n in node.list():
        f = n.fields({"profiles", "min_driver", "reason"}, {"profiles"})
        names = _str_list(f["profiles"])
        for pn, name in zip(f["profiles"].list(), names, strict=True):
            if name not in plain:
                pn.fail(f"{name!r} is not a plain profile of this model",
                        hint=f"an exclusion names plain profiles: {', '.join(sorted(plain))}")
        if len(set(names)) < 2 or len(set(names)) != len(names):
            f["profiles"].fail("an exclusion names two or more different profiles, each once")
        out.append(Exclusion(names, _min_driver(f["min_driver"]) if "min_driver" in f else None,
                             _note(f["reason"]) if "reason" in f else ""))
    return tuple(out)


def _str_list(node: Node) -> tuple[str, ...]:
    return tuple(_name(n) for n in node.list())


def _profile(node: Node, memory_slices: int, compute_slices: int) -> GiProfile:
    f = node.fields(_PROFILE_KEYS, _PROFILE_REQUIRED)
    name = _name(f["name"])
    if any(c.isspace() for c in name) or not name.isascii():
        f["name"].fail("profile names are ASCII without spaces, e.g. '3g.20gb'")
    g = f["compute_slices"].int(minimum=1)
    if g > compute_slices:
        f["compute_slices"].fail(f"exceeds the model's {compute_slices} compute slices")
    size = f["memory_slices"].int(minimum=1)
    if size > memory_slices:
        f["memory_slices"].fail(f"exceeds the model's {memory_slices} memory slices")
    start_nodes = f["starts"].list()
    starts = tuple(n.int(minimum=0, maximum=memory_slices - 1) for n in start_nodes)
    if not starts:
        f["starts"].fail("a profile needs at least one allowed start")
    for s in starts:
        if s + size > memory_slices:
            f["starts"].fail(f"start {s} with size {size} runs past memory slice {memory_slices - 1}")
    if len(set(starts)) != len(starts):
        f["starts"].fail("a start is listed twice")
    engines = Engines(**_engines(f["engines"])) if "engines" in f else Engines()
    me = f["media_extensions"].bool() if "media_extensions" in f else profile_variant(name) == "+me"
    min_driver = _min_driver(f["min_driver"]) if "min_driver" in f else None
    return GiProfile(
        name=name,
        id=f["id"].int(minimum=0, maximum=MAX_PROFILE_ID),
        compute_slices=g,
        memory_slices=size,
        memory_mib=f["memory_mib"].int(minimum=1, maximum=MAX_MEMORY_MIB),
        max_count=f["max_count"].int(minimum=1, maximum=MAX_MIG_SLICES),
        sm_count=f["sm_count"].int(minimum=1, maximum=MAX_SM_COUNT) if "sm_count" in f else 0,
        starts=tuple(sorted(starts)),
        media_extensions=me,
        engines=engines,
        ci_default_id=f["ci_default_id"].int(minimum=0, maximum=MAX_PROFILE_ID) if "ci_default_id" in f else 0,
        ci_default_verified=f["ci_default_verified"].bool() if "ci_default_verified" in f else False,
        confidence=_name(f["confidence"]) if "confidence" in f else "user",
        min_driver=min_driver,
    )


def _engines(node: Node) -> dict[str, int]:
    return {k: v.int(minimum=0, maximum=MAX_ENGINES) for k, v in node.fields(set(ENGINE_KINDS)).items()}


_SLICES_HINT = f"MIG GPUs have at most 8 memory and 7 compute slices; migplan accepts up to {MAX_MIG_SLICES}"


_WHOLE_KEYS = {"id", "mig", "memory_mib", "sm_count", "aliases", "smi_names", "pci_device_ids", "architecture",
               "verified", "confidence", "source"}


def _whole_model(node: Node) -> GpuModel:
    """`mig: false`: a GPU without MIG (`geometry.GpuModel.mig`): its memory and SM count (0: unknown), no
    profiles or slices; the entry a plan carries for such a GPU (`writer`), or an override file's."""
    f = node.fields(_WHOLE_KEYS, {"id", "mig", "memory_mib"})
    if f["mig"].bool():
        f["mig"].fail("'mig: true' models list their slices and profiles", hint="write mig: false, or leave it out")
    if "architecture" in f and f["architecture"].str() != NO_MIG:
        f["architecture"].fail(f"a GPU without MIG has architecture {NO_MIG!r} (no MIG mode semantics)")
    return GpuModel(
        id=_name(f["id"]), architecture=NO_MIG, memory_slices=1, compute_slices=1, profiles=(),
        aliases=_str_list(f["aliases"]) if "aliases" in f else (),
        smi_names=_str_list(f["smi_names"]) if "smi_names" in f else (),
        pci_device_ids=tuple(s.lower() for s in _str_list(f["pci_device_ids"])) if "pci_device_ids" in f else (),
        verified=f["verified"].bool() if "verified" in f else False,
        confidence=_name(f["confidence"]) if "confidence" in f else "user",
        source=_note(f["source"]) if "source" in f else "", mig=False,
        whole_memory_mib=f["memory_mib"].int(minimum=1, maximum=MAX_MEMORY_MIB),
        whole_sm_count=f["sm_count"].int(minimum=0, maximum=MAX_SM_COUNT) if "sm_count" in f else 0)


def _model(node: Node, *, check_layouts: bool = True) -> GpuModel:
    if node.is_map and "mig" in dict(node.items()):
        return _whole_model(node)
    f = node.fields(_MODEL_KEYS, _MODEL_REQUIRED)
    model_id = _name(f["id"])
    arch = f["architecture"].str()
    if arch not in ARCHITECTURES:
        f["architecture"].fail(f"unknown architecture {arch!r}", hint=f"one of: {', '.join(ARCHITECTURES)}")
    mem, comp = f["memory_slices"], f["compute_slices"]
    for n in (mem, comp):
        if n.int(minimum=1) > MAX_MIG_SLICES:
            n.fail(f"{n.int()} slices is more than the {MAX_MIG_SLICES} migplan accepts", hint=_SLICES_HINT)
    profile_nodes = f["profiles"].list()
    if len(profile_nodes) > MAX_PROFILES:
        f["profiles"].fail(f"{len(profile_nodes)} profiles is more than the {MAX_PROFILES} migplan accepts per model",
                           hint="real MIG models have 5 to 10 profiles")
    profiles = [_profile(p, mem.int(), comp.int()) for p in profile_nodes]
    if not profiles:
        f["profiles"].fail("a model needs at least one profile")
    model = _checked_model(f, model_id, arch, profiles)
    if check_layouts:
        try:
            count_layouts(model)
        except CatalogError:
            f["profiles"].fail(f"these profiles make more than {MAX_LAYOUTS} layouts; no MIG GPU has that many",
                               hint="check max_count and starts against 'nvidia-smi mig -lgip' and '-lgipp'")
    return model


def _checked_model(f: dict[str, Node], model_id: str, arch: str, profiles: list[GiProfile]) -> GpuModel:
    mem, comp = f["memory_slices"].int(), f["compute_slices"].int()
    names: dict[str, int] = {}
    ids: dict[int, int] = {}
    for pnode, p in zip(f["profiles"].list(), profiles, strict=True):
        if p.name in names:
            pnode.fail(f"profile name {p.name!r} listed twice (first at line {names[p.name]})")
        if p.id in ids:
            pnode.fail(f"profile id {p.id} listed twice (first at line {ids[p.id]})")
        names[p.name] = pnode.line
        ids[p.id] = pnode.line
    if not any(p.memory_slices == mem and not p.media_extensions for p in profiles):
        f["profiles"].fail(f"no profile spans all {mem} memory slices (the whole-GPU profile is required)")
    for pnode, p in zip(f["profiles"].list(), profiles, strict=True):
        if p.media_extensions and p.base_name not in names:
            pnode.fail(f"'+me' profile {p.name!r} has no plain profile {p.base_name!r}")
    return GpuModel(
        id=model_id,
        architecture=arch,
        memory_slices=mem,
        compute_slices=comp,
        profiles=tuple(profiles),
        aliases=_str_list(f["aliases"]) if "aliases" in f else (),
        smi_names=_str_list(f["smi_names"]) if "smi_names" in f else (),
        pci_device_ids=tuple(s.lower() for s in _str_list(f["pci_device_ids"])) if "pci_device_ids" in f else (),
        verified=f["verified"].bool() if "verified" in f else False,
        confidence=_name(f["confidence"]) if "confidence" in f else "user",
        source=f["source"].str() if "source" in f else "",
        engine_budget=(tuple((k, v) for k, v in sorted(_engines(f["engine_budget"]).items(),
                                                        key=lambda kv: ENGINE_KINDS.index(kv[0])))
                       if "engine_budget" in f else None),
        drivers=_note(f["drivers"]) if "drivers" in f else "",
        exclusions=_exclusions(f["exclusions"], profiles) if "exclusions" in f else (),
    )


def parse_catalog(root: Node, *, check_layouts: bool = True) -> list[GpuModel]:
    """The models of a catalog document. `check_layouts=False` skips the layout-count check (for
    the shipped catalog, whose models are known and tested)."""
    f = root.fields({"version", "models"}, {"models"})
    from migplan import yamldoc

    yamldoc.check_version(f, root, CATALOG_VERSION, "catalog")
    models = []
    seen: dict[str, int] = {}
    for node in f["models"].list():
        m = _model(node, check_layouts=check_layouts)
        if m.id in seen:
            node.fail(f"model {m.id!r} listed twice (first at line {seen[m.id]})")
        seen[m.id] = node.line
        models.append(m)
    return models


BUILTIN_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "models.yaml")


@functools.lru_cache(maxsize=1)
def builtin_catalog() -> Catalog:
    """The catalog shipped with migplan (package data), from the cache when it holds this data
    (`migplan.catalog.cache`: keyed on the data's and the loader's content, so never stale)."""
    with open(BUILTIN_PATH, "rb") as fh:
        data = fh.read()
    models = cache.load(data)
    if models is None:
        models = parse_builtin(data)
        cache.store(data, models)
    return Catalog(models)


def parse_builtin(data: bytes) -> tuple[GpuModel, ...]:
    """The shipped catalog parsed strictly from its text (what the cache holds)."""
    from migplan import yamldoc

    node = yamldoc.parse(data.decode("utf-8"), "migplan/catalog/data/models.yaml")
    assert node is not None  # shipped file, never empty
    return tuple(parse_catalog(node, check_layouts=False))


def load_catalog_file(path: str | os.PathLike[str]) -> list[GpuModel]:
    from migplan import yamldoc

    with yamldoc.paused_gc():
        return parse_catalog(yamldoc.load(path))


def load_catalog(overrides: Sequence[str | os.PathLike[str]] = ()) -> Catalog:
    """The shipped catalog with each override file applied in order."""
    cat = builtin_catalog()
    for path in overrides:
        cat = cat.merged(load_catalog_file(path))
    return cat
