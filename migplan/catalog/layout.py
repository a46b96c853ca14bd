"""MIG layouts: the GPU instances on one GPU, each a profile at an explicit start slot (pure).

Rules enforced (MIG User Guide, "Concepts" and "Supported MIG Profiles"; nvml.h on
nvmlGpuInstancePlacement_t: "Creation of new GPU instance will fail if there is overlap with
the already occupied memory slices"):
  * a profile may only start at the slots `nvidia-smi mig -lgipp` lists for it;
  * no two instances share a memory slice;
  * the compute slices of all instances fit in the GPU's total (7 on A100/H100, 4 on A30);
  * no profile exceeds its "Instances Total" (`-lgip`);
  * at most one instance with media extensions, the `+me` variant (UG: "A single 1g profile can
    include media extensions"; `+me.all`, `-me` and `+gfx` are other variants, see below);
  * the instances together use no more copy engines, decoders, encoders, JPEG decoders and optical
    flow accelerators than the GPU has: the model's engine budget, by default the whole-GPU profile's
    `-lgip` engine columns (docs/mig-geometry.md §1). This is what keeps `1g.24gb+me.all` (all four
    decoders of an RTX PRO 6000) from sharing the GPU with anything but `-me` instances;
  * no two profiles of one of the model's enforced exclusions together: the driver's own rules, e.g. MIG
    User Guide "Concepts": "prior to NVIDIA driver release R510, the combination of a (4 memory, 4 compute)
    and a (4 memory, 3 compute) profile was not supported" (4g.20gb with 3g.20gb on A100). A catalog model
    stands for a current driver and enforces none of its R510 kind; the model `GpuModel.for_driver` makes
    for an older host does (docs/mig-geometry.md §1).
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from migplan.catalog.geometry import ENGINE_NAMES, Engines, GiProfile, GpuModel
from migplan.errors import CatalogError, InputError, LayoutError
from migplan.names import is_ascii_digits

MAX_START = 255  # an instance's start slot as written; far above any GPU's (the catalog has the real ones)
# Partial layouts visited by `enumerate_layouts` (each is itself a valid layout). Real models have
# at most a few thousand (A100: 723, 2,319 with +me profiles); a catalog model past this is refused.
MAX_LAYOUTS = 200_000
# Work done by `enumerate_layouts` (candidate checks, layouts built, counts copied): real models
# need under 100,000 (A100, maximal layouts with the +me profiles: 90,000); this bounds a runaway
# catalog model to about a second.
MAX_ENUMERATION_STEPS = 1_500_000


_PARSED_MAX = 4096  # parsed instance texts kept (Instance is immutable, so one object serves every use)


@dataclass(frozen=True, order=True)
class Instance:
    """A GPU instance: a profile placed at a start memory slice."""

    start: int
    profile: str

    def __str__(self) -> str:
        return f"{self.profile}@{self.start}"

    @classmethod
    def parse(cls, text: str) -> Instance:
        """`3g.20gb@4` -> Instance(4, '3g.20gb'). The start is ASCII digits (not `²` or `٣`), 0..MAX_START."""
        if cls is Instance:  # an inventory of 70,000 GPUs spells the same few instances again and again
            known = _PARSED.get(text)
            if known is None:
                known = cls._parse(text)
                if len(text) <= 64 and len(_PARSED) < _PARSED_MAX:  # short texts only: a bounded cache
                    _PARSED[text] = known
            return known
        return cls._parse(text)

    @classmethod
    def _parse(cls, text: str) -> Instance:
        name, sep, start = text.strip().partition("@")
        name, start = name.strip(), start.strip()
        if not sep or not name or not is_ascii_digits(start) or not name.isascii() or any(c.isspace() for c in name):
            raise InputError(f"{text!r} is not an instance; write PROFILE@START, e.g. 3g.20gb@4")
        if len(start) > 3 or int(start) > MAX_START:
            raise InputError(f"{text!r}: start slot {start} is out of range 0..{MAX_START}",
                             hint="a start is the first memory slice of the instance, e.g. 3g.20gb@4")
        return cls(int(start), name)


_PARSED: dict[str, Instance] = {}


@dataclass(frozen=True)
class Layout:
    """The set of GPU instances on one GPU, kept sorted so equal layouts compare equal."""

    instances: tuple[Instance, ...] = ()

    @functools.cached_property
    def _hash(self) -> int:
        return hash((self.instances,))

    def __hash__(self) -> int:
        """The dataclass hash, computed once: the planner keys dicts and groups by layout (each hash of a
        layout hashed every instance through the dataclass's Python `__hash__`; bench/large_inputs.py)."""
        return self._hash

    def __getstate__(self) -> dict[str, object]:
        """Pickled without the cached hash: string hashes differ from one process to the next."""
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @classmethod
    def of(cls, instances: Iterable[Instance]) -> Layout:
        return cls(tuple(sorted(instances)))

    @classmethod
    def parse(cls, items: Iterable[str]) -> Layout:
        return cls.of(Instance.parse(i) for i in items)

    def __str__(self) -> str:
        return " ".join(str(i) for i in self.instances) or "(empty)"

    def __len__(self) -> int:
        return len(self.instances)

    def as_list(self) -> list[str]:
        return [str(i) for i in self.instances]

    def profile_counts(self) -> Counter[str]:
        return Counter(i.profile for i in self.instances)


@dataclass(frozen=True)
class Conflict:
    """One broken rule, with the instances involved."""

    rule: str  # unknown-profile | bad-start | overlap | compute | max-count | media-extensions | engines | combination
    message: str
    instances: tuple[Instance, ...]


def _profiles(model: GpuModel, layout: Layout) -> tuple[list[tuple[Instance, GiProfile]], list[Conflict]]:
    known, conflicts = [], []
    for inst in layout.instances:
        try:
            if not inst.profile.isascii():  # never a profile name (and `'²'.isdigit()` is true)
                raise CatalogError(f"no profile {inst.profile!r}")
            known.append((inst, model.profile(inst.profile)))
        except CatalogError:
            names = ", ".join(p.name for p in model.profiles)
            conflicts.append(Conflict("unknown-profile", f"{inst}: {model.id} has no profile "
                                      f"{inst.profile!r} (profiles: {names})", (inst,)))
    return known, conflicts


def check_layout(model: GpuModel, layout: Layout) -> list[Conflict]:
    """Every rule the layout breaks on this model (empty when valid)."""
    known, conflicts = _profiles(model, layout)
    for inst, prof in known:
        if inst.start not in prof.starts:
            allowed = ",".join(str(s) for s in prof.starts)
            conflicts.append(Conflict("bad-start", f"{inst}: {prof.name} may start only at "
                                      f"{{{allowed}}} on {model.id}", (inst,)))
    owner: dict[int, Instance] = {}
    for inst, prof in known:
        for slot in prof.slots(inst.start):
            if slot >= model.memory_slices:
                continue  # reported as bad-start above
            if slot in owner:
                other = owner[slot]
                conflicts.append(Conflict("overlap", f"{other} and {inst} both use memory slice {slot}",
                                          (other, inst)))
                break
            owner[slot] = inst
    used = sum(p.compute_slices for _, p in known)
    if used > model.compute_slices:
        conflicts.append(Conflict("compute", f"instances use {used} compute slices; {model.id} has "
                                  f"{model.compute_slices}", tuple(i for i, _ in known)))
    counts = Counter(p.name for _, p in known)
    for name, n in sorted(counts.items()):
        prof = model.profile(name)
        if n > prof.max_count:
            conflicts.append(Conflict("max-count", f"{n} x {name}; {model.id} allows at most "
                                      f"{prof.max_count}", tuple(i for i, p in known if p.name == name)))
    me = [i for i, p in known if p.media_extensions]
    if len(me) > 1:
        conflicts.append(Conflict("media-extensions", "more than one instance with media extensions (+me)",
                                  tuple(me)))
    total = sum((p.engines for _, p in known), Engines())
    for kind, most in model.engine_limits.items():
        need = total.get(kind)
        if need > most:
            users = tuple(i for i, p in known if p.engines.get(kind))
            detail = ", ".join(f"{i} uses {p.engines.get(kind)}" for i, p in known if p.engines.get(kind))
            conflicts.append(Conflict("engines", f"instances need {need} {ENGINE_NAMES[kind]} ({detail}) but "
                                      f"{model.id} has {most}", users))
    for rule, hit in model.excluded_together(p.name for _, p in known):
        users = tuple(i for i, p in known if model.plain_of(p.name) in hit)
        why = f": {rule.reason}" if rule.reason else ""
        conflicts.append(Conflict("combination", f"{' and '.join(hit)} may not share a GPU on {model.id}{why}",
                                  users))
    return conflicts


def validate_layout(model: GpuModel, layout: Layout, *, where: str = "") -> None:
    """Raise LayoutError listing every conflict, or return when the layout is valid."""
    conflicts = check_layout(model, layout)
    if conflicts:
        lines = "; ".join(c.message for c in conflicts)
        prefix = f"{where}: " if where else ""
        raise LayoutError(f"{prefix}invalid layout {layout} on {model.id}: {lines}",
                          hint=f"list valid layouts with 'migplan catalog layouts {model.id}'")


# --- enumeration -------------------------------------------------------------------------

def _candidates(model: GpuModel, profiles: Sequence[GiProfile]) -> list[tuple[Instance, GiProfile, int]]:
    """Every (instance, profile, memory-slice bitmask), in a fixed order."""
    out = []
    for prof in profiles:
        for start in prof.starts:
            mask = 0
            for slot in prof.slots(start):
                mask |= 1 << slot
            out.append((Instance(start, prof.name), prof, mask))
    out.sort(key=lambda c: (c[0].start, -c[1].memory_slices, -c[1].compute_slices, c[1].name))
    return out


def _excluded(model: GpuModel, names: Sequence[str], profiles: Sequence[GiProfile]) -> list[tuple[int, ...]]:
    """Per candidate, the count indices (`names` order) of the profiles its own may not share a GPU with (the
    model's enforced exclusions, compared by plain name); () for all when the model has none."""
    if not model.enforced_exclusions:
        return [()] * len(profiles)
    plain = [model.plain_of(n) for n in names]
    out = []
    for prof in profiles:
        mine = model.plain_of(prof.name)
        others = {i for e in model.enforced_exclusions if mine in e.profiles
                  for i, p in enumerate(plain) if p in e.profiles and p != mine}
        out.append(tuple(sorted(others)))
    return out


def _select(model: GpuModel, include: Iterable[str] | None) -> list[GiProfile]:
    if include is None:
        return list(model.plain_profiles)
    return [model.profile(n) for n in include]


_Chain = tuple[int, "_Chain"] | None  # chosen candidates, newest first (enumerate_layouts)


def _budget(model: GpuModel, profiles: Sequence[GiProfile]) -> list[tuple[int, list[int]]]:
    """(limit, use of each candidate) for every shared resource the candidates could exhaust: the engine
    budget by kind, and the one `+me` instance. Resources no combination can exhaust are left out."""
    distinct = {p.name: p for p in profiles}.values()
    out = []
    for kind, limit in model.engine_limits.items():
        if sum(p.engines.get(kind) * p.max_count for p in distinct) > limit:
            out.append((limit, [p.engines.get(kind) for p in profiles]))
    if sum(p.max_count for p in distinct if p.media_extensions) > 1:
        out.append((1, [int(p.media_extensions) for p in profiles]))
    return out


def enumerate_layouts(model: GpuModel, *, profiles: Iterable[str] | None = None,
                      maximal: bool = False, limit: int = MAX_LAYOUTS,
                      max_steps: int = MAX_ENUMERATION_STEPS) -> list[Layout]:
    """All valid layouts (or only the maximal ones) built from `profiles`.

    By default the plain profiles are used: a variant (`+me`, `+me.all`, `-me`, `+gfx`) occupies the
    slices of one plain instance of the same size, so it adds no new geometry. A layout is maximal
    when no further instance of the chosen profiles fits (memory slices, compute slices, max counts,
    the engine budget and the one `+me` instance).
    Sorted deterministically (by instance list).

    Iterative (an explicit stack, so no recursion limit) and bounded: more than `limit` valid
    layouts, or more than `max_steps` candidate checks, raise CatalogError (a catalog model that
    needs that many is not real MIG hardware).
    """
    cands = _candidates(model, _select(model, profiles))
    names = sorted({p.name for _, p, _ in cands})
    slot = {name: i for i, name in enumerate(names)}
    most = {p.name: p.max_count for _, p, _ in cands}
    budget = _budget(model, [p for _, p, _ in cands])
    # `counts` of a state: instances per profile, then the use of each binding budget; `caps` their limits
    caps = tuple([most[n] for n in names] + [lim for lim, _ in budget])
    # (instance, memory mask, compute slices, ((count index, amount), ...)) per candidate
    table = [(inst, mask, prof.compute_slices,
              ((slot[prof.name], 1), *((len(names) + j, use[k]) for j, (_, use) in enumerate(budget) if use[k])))
             for k, (inst, prof, mask) in enumerate(cands)]
    # per candidate: the profile counts that must be 0 for it to fit (the model's enforced exclusions)
    shut = _excluded(model, names, [p for _, p, _ in cands])
    total_g = model.compute_slices

    def fits(c: int, used_mask: int, used_g: int, counts: tuple[int, ...]) -> bool:
        _, mask, g, adds = table[c]
        return not mask & used_mask and used_g + g <= total_g and all(counts[i] + n <= caps[i] for i, n in adds)

    if any(shut):  # only models with an exclusion in force pay for the check
        plain_fits = fits

        def fits(c: int, used_mask: int, used_g: int, counts: tuple[int, ...]) -> bool:
            return plain_fits(c, used_mask, used_g, counts) and not any(counts[i] for i in shut[c])

    out: list[Layout] = []
    # A state: (first candidate to try, memory mask, compute slices used, depth, chosen, counts);
    # `chosen` is a chain (candidate, parent chain), so a push copies nothing that grows.
    stack: list[tuple[int, int, int, int, _Chain, tuple[int, ...]]] = [(0, 0, 0, 0, None, (0,) * len(caps))]
    visited = steps = 0
    while stack:
        first, used_mask, used_g, depth, chosen, counts = stack.pop()
        visited += 1
        # the work this state costs: candidates checked, the layout built, the counts copied
        steps += len(table) - first + (len(table) if maximal else 0) + depth
        if visited > limit or steps > max_steps:
            what = f"more than {limit} layouts" if visited > limit else f"more than {max_steps} steps to enumerate"
            raise CatalogError(f"{model.id} has {what} its layouts; no MIG GPU has that many",
                               hint="check the model's slices, profiles, starts and max_count in the catalog file")
        if not maximal or not any(fits(c, used_mask, used_g, counts) for c in range(len(table))):
            instances, link = [], chosen
            while link is not None:
                instances.append(table[link[0]][0])
                link = link[1]
            out.append(Layout.of(instances))
        for c in range(len(table) - 1, first - 1, -1):  # pushed in reverse: popped in candidate order
            if fits(c, used_mask, used_g, counts):
                _, mask, g, adds = table[c]
                steps += len(counts)
                grown = list(counts)
                for i, n in adds:
                    grown[i] += n
                stack.append((c + 1, used_mask | mask, used_g + g, depth + 1, (c, chosen), tuple(grown)))
    return sorted(out, key=lambda lay: [(i.start, i.profile) for i in lay.instances])


def count_layouts(model: GpuModel) -> int:
    """How many valid layouts the model has with all its profiles, the most `enumerate_layouts`
    can visit for it (CatalogError beyond its bounds); the catalog loader checks override models
    with it, so that later enumeration cannot fail."""
    everything = [p.name for p in model.profiles]
    count = len(enumerate_layouts(model, profiles=everything))
    enumerate_layouts(model, profiles=everything, maximal=True)  # the maximal walk checks more per layout
    return count


def free_placements(model: GpuModel, layout: Layout) -> list[Instance]:
    """Instances that could be added to `layout` one at a time, keeping it valid."""
    out = []
    for prof in model.profiles:
        for start in prof.starts:
            cand = Instance(start, prof.name)
            if cand in layout.instances:
                continue
            if not check_layout(model, Layout.of((*layout.instances, cand))):
                out.append(cand)
    return sorted(out)


def used_compute(model: GpuModel, layout: Layout) -> int:
    return sum(model.profile(i.profile).compute_slices for i in layout.instances)


def used_memory_slices(model: GpuModel, layout: Layout) -> int:
    return sum(model.profile(i.profile).memory_slices for i in layout.instances)


# --- picture -------------------------------------------------------------------------------

SLOT_WIDTH = 2
NO_MIG_PICTURE = "whole GPU (no MIG)"


def picture(model: GpuModel, layout: Layout | None) -> str:
    """One cell per memory slice, merged across an instance: `|3g.20gb    |2g.10|1g|  |`.

    `None` means MIG is disabled (the whole GPU is one device); a GPU without MIG is `whole GPU (no MIG)`, as
    wide as an 8-slice GPU's picture so that tables line up.
    """
    if not model.mig:
        return "|" + NO_MIG_PICTURE.center(8 * (SLOT_WIDTH + 1) - 1) + "|"
    if layout is None:
        width = model.memory_slices * (SLOT_WIDTH + 1) - 1
        label = "MIG disabled" if width >= len("MIG disabled") + 2 else "MIG off"
        return "|" + label.center(width)[:width] + "|"
    at = {i.start: i for i in layout.instances}
    cells = []
    slot = 0
    while slot < model.memory_slices:
        inst = at.get(slot)
        if inst is None or not model.has_profile(inst.profile):
            cells.append(" " * SLOT_WIDTH)
            slot += 1
            continue
        size = min(model.profile(inst.profile).memory_slices, model.memory_slices - slot)
        width = size * (SLOT_WIDTH + 1) - 1
        cells.append(inst.profile[:width].ljust(width))
        slot += size
    return "|" + "|".join(cells) + "|"
