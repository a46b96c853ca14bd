"""Read catalog files (the shipped one and user overrides), validated strictly."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from importlib import resources

from migplan import yamldoc
from migplan.catalog.catalog import Catalog
from migplan.catalog.model import ARCHITECTURES, Engines, GiProfile, GpuModel
from migplan.yamldoc import Node

CATALOG_VERSION = 1

_MODEL_KEYS = {
    "id", "aliases", "smi_names", "pci_device_ids", "architecture", "memory_slices", "compute_slices",
    "verified", "confidence", "source", "profiles",
}
_MODEL_REQUIRED = {"id", "architecture", "memory_slices", "compute_slices", "profiles"}
_PROFILE_KEYS = {
    "name", "id", "compute_slices", "memory_slices", "memory_mib", "max_count", "sm_count", "starts",
    "media_extensions", "engines", "ci_default_id", "ci_default_verified", "confidence",
}
_PROFILE_REQUIRED = {"name", "id", "compute_slices", "memory_slices", "memory_mib", "max_count", "starts"}


def _str_list(node: Node) -> tuple[str, ...]:
    return tuple(n.str() for n in node.list())


def _profile(node: Node, memory_slices: int, compute_slices: int) -> GiProfile:
    f = node.fields(_PROFILE_KEYS, _PROFILE_REQUIRED)
    name = f["name"].str()
    if not name or any(c.isspace() for c in name):
        f["name"].fail("profile names have no spaces, e.g. '3g.20gb'")
    g = f["compute_slices"].int(minimum=1)
    if g > compute_slices:
        f["compute_slices"].fail(f"exceeds the model's {compute_slices} compute slices")
    size = f["memory_slices"].int(minimum=1)
    if size > memory_slices:
        f["memory_slices"].fail(f"exceeds the model's {memory_slices} memory slices")
    starts = tuple(n.int(minimum=0) for n in f["starts"].list())
    if not starts:
        f["starts"].fail("a profile needs at least one allowed start")
    for s in starts:
        if s + size > memory_slices:
            f["starts"].fail(f"start {s} with size {size} runs past memory slice {memory_slices - 1}")
    if len(set(starts)) != len(starts):
        f["starts"].fail("a start is listed twice")
    engines = Engines()
    if "engines" in f:
        ef = f["engines"].fields({"ce", "dec", "enc", "jpeg", "ofa"})
        engines = Engines(**{k: v.int(minimum=0) for k, v in ef.items()})
    me = f["media_extensions"].bool() if "media_extensions" in f else name.endswith("+me")
    return GiProfile(
        name=name,
        id=f["id"].int(minimum=0),
        compute_slices=g,
        memory_slices=size,
        memory_mib=f["memory_mib"].int(minimum=1),
        max_count=f["max_count"].int(minimum=1),
        sm_count=f["sm_count"].int(minimum=1) if "sm_count" in f else 0,
        starts=tuple(sorted(starts)),
        media_extensions=me,
        engines=engines,
        ci_default_id=f["ci_default_id"].int(minimum=0) if "ci_default_id" in f else 0,
        ci_default_verified=f["ci_default_verified"].bool() if "ci_default_verified" in f else False,
        confidence=f["confidence"].str() if "confidence" in f else "user",
    )


def _model(node: Node) -> GpuModel:
    f = node.fields(_MODEL_KEYS, _MODEL_REQUIRED)
    arch = f["architecture"].str()
    if arch not in ARCHITECTURES:
        f["architecture"].fail(f"unknown architecture {arch!r}", hint=f"one of: {', '.join(ARCHITECTURES)}")
    mem = f["memory_slices"].int(minimum=1)
    comp = f["compute_slices"].int(minimum=1)
    profiles = [_profile(p, mem, comp) for p in f["profiles"].list()]
    if not profiles:
        f["profiles"].fail("a model needs at least one profile")
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
        id=f["id"].str(),
        architecture=arch,
        memory_slices=mem,
        compute_slices=comp,
        profiles=tuple(profiles),
        aliases=_str_list(f["aliases"]) if "aliases" in f else (),
        smi_names=_str_list(f["smi_names"]) if "smi_names" in f else (),
        pci_device_ids=tuple(s.lower() for s in _str_list(f["pci_device_ids"])) if "pci_device_ids" in f else (),
        verified=f["verified"].bool() if "verified" in f else False,
        confidence=f["confidence"].str() if "confidence" in f else "user",
        source=f["source"].str() if "source" in f else "",
    )


def parse_catalog(root: Node) -> list[GpuModel]:
    f = root.fields({"version", "models"}, {"models"})
    yamldoc.check_version(f, root, CATALOG_VERSION, "catalog")
    models = []
    seen: dict[str, int] = {}
    for node in f["models"].list():
        m = _model(node)
        if m.id in seen:
            node.fail(f"model {m.id!r} listed twice (first at line {seen[m.id]})")
        seen[m.id] = node.line
        models.append(m)
    return models


@functools.lru_cache(maxsize=1)
def builtin_catalog() -> Catalog:
    """The catalog shipped with migplan (package data)."""
    ref = resources.files("migplan.catalog") / "data" / "models.yaml"
    node = yamldoc.parse(ref.read_text(encoding="utf-8"), "migplan/catalog/data/models.yaml")
    assert node is not None  # shipped file, never empty
    return Catalog(tuple(parse_catalog(node)))


def load_catalog_file(path: str | os.PathLike[str]) -> list[GpuModel]:
    return parse_catalog(yamldoc.load(path))


def load_catalog(overrides: Sequence[str | os.PathLike[str]] = ()) -> Catalog:
    """The shipped catalog with each override file applied in order."""
    cat = builtin_catalog()
    for path in overrides:
        cat = cat.merged(load_catalog_file(path))
    return cat
