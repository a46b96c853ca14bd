"""Layout patterns per GPU model: the maximal placement-exact layouts from the catalog (pure).

A pattern is a `Layout` (explicit starts) or `WHOLE` (MIG stays disabled). Instances are compared by
`(start, base profile)`, so a running `1g.5gb+me` matches the plain `1g.5gb` slot of a pattern.
"""

from __future__ import annotations

import functools
from collections import Counter

from migplan.catalog.geometry import GpuModel
from migplan.catalog.layout import Instance, Layout, enumerate_layouts
from migplan.profiles import WHOLE_GPU

Key = tuple[int, str]
WHOLE = None  # pattern: MIG disabled, the GPU is one device


def base(model: GpuModel, inst: Instance) -> str:
    return _base(model, inst.profile)


@functools.lru_cache(maxsize=4096)  # per (model, profile name): asked for every instance of every GPU
def _base(model: GpuModel, profile: str) -> str:
    return model.profile(profile).base_name if model.has_profile(profile) else profile


def key(model: GpuModel, inst: Instance) -> Key:
    return (inst.start, base(model, inst))


@functools.lru_cache(maxsize=8192)  # the same few layouts are keyed for every group of a large fleet
def keys(model: GpuModel, layout: Layout) -> frozenset[Key]:
    return frozenset(key(model, i) for i in layout.instances)


@functools.lru_cache(maxsize=64)
def maximal(model: GpuModel) -> tuple[Layout, ...]:
    """Every maximal layout of the plain profiles (78 on the A100 family, 5 on A30), in a fixed order."""
    return tuple(enumerate_layouts(model, maximal=True))


@functools.lru_cache(maxsize=64)
def maximal_of(model: GpuModel, profiles: tuple[str, ...]) -> tuple[Layout, ...]:
    """Every maximal layout of these profiles alone (maximal among them: 3 x 2g.20gb on an H100 whose seventh slice
    only a 1g profile could take), in a fixed order."""
    mine = tuple(p for p in profiles if model.has_profile(p))
    return tuple(enumerate_layouts(model, profiles=mine, maximal=True)) if mine else ()


def candidates(model: GpuModel, current: Layout | None, fixed: frozenset[Key],
               allowed: tuple[str, ...] | None = None) -> list[Layout]:
    """Maximal layouts, the current one and the empty one, keeping only those that contain `fixed`. A GPU without
    MIG has the empty one alone (nothing planned on it; its one place is the WHOLE pattern): no MIG layout.

    `allowed` (the GPU's rule, `GpuState.allowed`): only layouts of those profiles, never an empty MIG layout: the
    current layout where it keeps the rule, the empty one on a MIG-disabled GPU whose rule allows MIG off (MIG stays
    off, nothing on it: the GPU free), and the maximal layouts of the allowed profiles."""
    if not model.mig:
        return [Layout()] if not fixed else []
    if allowed is None:
        pool = ([current] if current is not None else []) + [Layout()] + list(maximal(model))
    else:
        keeps = current is not None and len(current) > 0 and all(i.profile in allowed for i in current.instances)
        off = current is None and WHOLE_GPU in allowed
        pool = ([current] if keeps and current is not None else []) + ([Layout()] if off else []) + list(
            maximal_of(model, allowed))
    out: list[Layout] = []
    seen: set[frozenset[Key]] = set()
    for lay in pool:
        k = keys(model, lay)
        if fixed <= k and k not in seen:
            seen.add(k)
            out.append(lay)
    return out


def profile_counts(model: GpuModel, layout: Layout) -> Counter[str]:
    return Counter(base(model, i) for i in layout.instances)
