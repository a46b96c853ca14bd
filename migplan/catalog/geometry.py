"""Catalog types: what one GPU model can be split into (pure data, no I/O).

Facts come from real `nvidia-smi mig -lgip` / `-lgipp` output (see data/models.yaml and the
MIG User Guide, "Supported MIG Profiles"). Placements are in memory-slice units: NVML's
nvmlGpuInstancePlacement_t.start is the "Index of first occupied memory slice" (RTX PRO 6000
Blackwell's `-lgipp` counts in twelfths: a quarter of the GPU is size 3).

Profile variants (docs/mig-geometry.md §2): the part of a profile name after `<g>g.<gb>gb` -- ``""``
(plain), ``+me``, ``+me.all``, ``-me``, ``+gfx``, or any other ``+attr[,attr]`` / ``-attr``.
Engine budgets (docs/mig-geometry.md §1): the instances of one GPU together use at most the copy
engines, decoders, encoders, JPEG decoders and optical-flow accelerators of the whole-GPU profile.

Driver rules (docs/mig-geometry.md §1, §7): a profile an older driver lacks carries `min_driver`; profiles
an older driver refuses on one GPU are an `Exclusion` with the driver that lifted it. MIG User Guide,
"Concepts": "prior to NVIDIA driver release R510, the combination of a (4 memory, 4 compute) and a (4 memory,
3 compute) profile was not supported" (4g.20gb with 3g.20gb on A100-40GB). A catalog model stands for a
driver that meets every `min_driver`; `GpuModel.for_driver` makes the model of an older one.

GPUs without MIG (`GpuModel.mig` False: T4, L4, A10, L40S, V100 ...; the MIG User Guide, "Supported GPUs", lists
the only products with MIG, all of compute capability 8.0 or later): a model without profiles whose one layout is
the whole GPU, planned through the same path as a MIG-capable GPU with MIG disabled (`planner.demand` WHOLE_GPU).
Its `full_profile` is a stand-in (`WHOLE`, in no layout) that carries the GPU's memory and SM count, so the
planner's memory and compute checks read it as they read a MIG GPU's whole-GPU profile.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace

from migplan.errors import CatalogError

ARCHITECTURES = ("ampere", "hopper", "blackwell")
NO_MIG = "none"  # the architecture of a GPU without MIG: no MIG mode to change, so no reset semantics
WHOLE = "whole"  # the stand-in profile of a GPU without MIG: the same name as migplan.profiles.WHOLE_GPU
ENGINE_KINDS = ("ce", "dec", "enc", "jpeg", "ofa")
ENGINE_NAMES = {"ce": "copy engines (CE)", "dec": "decoders (DEC)", "enc": "encoders (ENC)",
                "jpeg": "JPEG decoders (JPEG)", "ofa": "optical flow accelerators (OFA)"}

_SIZE = re.compile(r"(?a)(?:[0-9]{1,2}c\.)?[0-9]{1,2}g\.[0-9]{1,4}gb")
_DRIVER = re.compile(r"(?a)[0-9]{2,4}(?:\.[0-9]{1,4}){0,2}")


def profile_variant(name: str) -> str:
    """`1g.24gb+me.all` -> '+me.all', `1g.24gb-me` -> '-me', `3g.20gb` -> '' (go-nvlib grammar
    `[<c>c.]<g>g.<gb>gb[+attr[,attr]|-attr]`); a name outside the grammar: from its first `+` or `-`."""
    m = _SIZE.match(name)
    if m is not None:
        return name[m.end():]
    cut = [i for i in (name.find("+"), name.find("-")) if i > 0]
    return name[min(cut):] if cut else ""


@functools.lru_cache(maxsize=1024)  # a fleet names a few drivers, asked per profile and GPU
def driver_version(text: str) -> tuple[int, ...]:
    """`470` (a driver branch, R470) or `525.85.12` -> (525, 85, 12); CatalogError for anything else."""
    t = text.strip()
    if t[:1] in ("R", "r"):
        t = t[1:]
    if not _DRIVER.fullmatch(t):
        raise CatalogError(f"{text!r} is not a driver version", hint="write a branch or version, e.g. 470 or 525.85.12")
    return tuple(int(x) for x in t.split("."))


def driver_meets(driver: str, minimum: str) -> bool:
    """Whether `driver` (`535.183.01`, or a branch `535`) is `minimum` (`470`, `525.85.12`) or newer. A bare
    branch is taken as its first release: `525` does not meet `525.85.12`. CatalogError for a malformed one."""
    want, have = driver_version(minimum), driver_version(driver)
    have = have + (0,) * (len(want) - len(have))  # a bare branch `525` is taken as 525.0.0
    return have[: len(want)] >= want


@dataclass(frozen=True)
class Exclusion:
    """Profiles no two of which the driver creates on one GPU (compared by plain profile name, so a `+me`
    variant counts as its plain profile). `min_driver`: the driver that lifted the rule; a model that stands
    for a driver (a catalog model: the newest) enforces only the exclusions without one (docs/mig-geometry.md
    §1). `reason` is said when a layout breaks it."""

    profiles: tuple[str, ...]
    min_driver: str | None = None
    reason: str = ""

    def broken_by(self, names: Iterable[str]) -> tuple[str, ...]:
        """The excluded profiles among `names` (plain names) when two or more of them are there, else ()."""
        there = tuple(p for p in self.profiles if p in set(names))
        return there if len(there) > 1 else ()


def among(exclusions: Iterable[Exclusion], names: set[str]) -> tuple[Exclusion, ...]:
    """The exclusions as they hold among the profiles `names` (a model's, after some were left out): each
    limited to those profiles, and gone where fewer than two remain (a profile a host lacks excludes nothing)."""
    out = []
    for e in exclusions:
        kept = tuple(p for p in e.profiles if p in names)
        if len(kept) > 1:
            out.append(e if kept == e.profiles else replace(e, profiles=kept))
    return tuple(out)


def default_ci_profile(architecture: str, compute_slices: int, memory_slices: int, one_slice_memory: int) -> int:
    """The default compute-instance profile id (`-cgi ... -C`, `-lcip` `*`) of a GPU instance profile.

    NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE by compute slices (real `-lcip` on A100/A30, `-C` on RTX PRO
    6000); the double-memory 1g profile (1 compute slice, more memory slices than the model's smallest 1g)
    on Hopper and later uses 1_SLICE_REV1 = 7 (real on GH200, `(ID  7)`; inferred for the other models).
    On Ampere that profile's default was never seen: 0 (unverified). docs/mig-geometry.md §3.
    """
    if compute_slices == 1 and memory_slices > one_slice_memory and architecture != "ampere":
        return 7
    return _CI_ENUM.get(compute_slices, 0)


# NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE enum values (nvml.h), by compute slices.
_CI_ENUM = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


@dataclass(frozen=True)
class Engines:
    ce: int = 0
    dec: int = 0
    enc: int = 0
    jpeg: int = 0
    ofa: int = 0

    def get(self, kind: str) -> int:
        return int(getattr(self, kind))

    def __add__(self, other: Engines) -> Engines:
        return Engines(*(self.get(k) + other.get(k) for k in ENGINE_KINDS))


@dataclass(frozen=True)
class GiProfile:
    """One GPU-instance profile as `nvidia-smi mig -lgip` lists it."""

    name: str  # short name, e.g. "3g.20gb" or "1g.5gb+me"
    id: int  # the ID `nvidia-smi mig -cgi` takes; differs between models (A30 vs A100)
    compute_slices: int
    memory_slices: int  # == placement size
    memory_mib: int
    max_count: int
    sm_count: int
    starts: tuple[int, ...]
    media_extensions: bool = False
    engines: Engines = field(default_factory=Engines)
    ci_default_id: int = 0
    ci_default_verified: bool = True
    confidence: str = "real"
    min_driver: str | None = None  # the oldest driver branch/version that offers this profile (None: all)

    @functools.cached_property  # computed once: the planner asks per workload and profile (bench/large_inputs.py)
    def variant(self) -> str:
        """The name's attribute suffix: '' (plain), '+me', '+me.all', '-me', '+gfx', ..."""
        return profile_variant(self.name)

    @property
    def base_name(self) -> str:
        """The plain profile of the same size (`1g.24gb` for `1g.24gb+me.all`)."""
        v = self.variant
        return self.name[: -len(v)] if v else self.name

    def offered_by(self, driver: str) -> bool:
        """Whether a driver (`535.183.01`, or a branch `535`) offers this profile (min_driver)."""
        return self.min_driver is None or driver_meets(driver, self.min_driver)

    @property
    def lgip_gib(self) -> str:
        """Memory as `-lgip` prints it: memorySizeMB / 1024 formatted %.2f."""
        return f"{self.memory_mib / 1024:.2f}"

    def slots(self, start: int) -> range:
        return range(start, start + self.memory_slices)


@dataclass(frozen=True)
class GpuModel:
    """A GPU model: a MIG-capable one and its profiles, or (`mig` False) a GPU without MIG, whose only layout is
    the whole GPU: no profiles, one memory and one compute slice, `whole_memory_mib` and `whole_sm_count` (0: not
    known) in place of a whole-GPU profile."""

    id: str
    architecture: str
    memory_slices: int
    compute_slices: int
    profiles: tuple[GiProfile, ...]
    aliases: tuple[str, ...] = ()
    smi_names: tuple[str, ...] = ()
    pci_device_ids: tuple[str, ...] = ()
    verified: bool = True
    confidence: str = "real"
    source: str = ""
    # Engine budget (kind, count); None: the whole-GPU profile's engines. A catalog lists only the kinds
    # some source gives (B200: CE only), and only those are enforced.
    engine_budget: tuple[tuple[str, int], ...] | None = None
    drivers: str = ""  # the driver range this model's numbers hold for (docs/mig-geometry.md §10)
    # Profiles the driver refuses on one GPU; only those without `min_driver` are enforced (`for_driver`)
    exclusions: tuple[Exclusion, ...] = ()
    mig: bool = True  # False: a GPU without MIG (module notes); only then are the two below used
    whole_memory_mib: int = 0  # the whole GPU's memory (`nvidia.com/gpu.memory`, or a sourced table)
    whole_sm_count: int = 0  # its streaming multiprocessors; 0: not known (compute is then not checked on it)

    @functools.cached_property
    def _by_name(self) -> dict[str, GiProfile]:
        return {p.name: p for p in self.profiles}

    @functools.cached_property
    def _by_id(self) -> dict[int, GiProfile]:
        return {p.id: p for p in self.profiles}

    @functools.cached_property
    def _hash(self) -> int:
        return hash(tuple(getattr(self, f.name) for f in fields(self)))

    def __hash__(self) -> int:
        """The dataclass hash (all fields), computed once: the planner keys dicts by model, and hashing a
        model hashes every profile (84,000 hashes, ~1.5 s, planning 7,000 GPUs; bench/large_inputs.py)."""
        return self._hash

    def __getstate__(self) -> dict[str, object]:
        """Pickled without the cached hash: string hashes differ from one process to the next."""
        return {k: v for k, v in self.__dict__.items() if k != "_hash"}

    @functools.cached_property  # immutable model: computed once (asked per workload by the planner)
    def full_profile(self) -> GiProfile:
        """The plain profile that takes the whole GPU (7g on A100/H100, 4g on A30 and RTX PRO 6000); on a GPU
        without MIG the stand-in `WHOLE` (not one of `profiles`: no layout ever holds it)."""
        if not self.mig:
            return GiProfile(name=WHOLE, id=0, compute_slices=1, memory_slices=1, memory_mib=self.whole_memory_mib,
                             max_count=1, sm_count=self.whole_sm_count, starts=(0,), confidence=self.confidence)
        full = [p for p in self.profiles if p.memory_slices == self.memory_slices and not p.media_extensions]
        plain = [p for p in full if not p.variant]
        return max(plain or full, key=lambda p: p.compute_slices)

    @functools.cached_property
    def engine_limits(self) -> dict[str, int]:
        """Engines the instances of one GPU may use together, by kind (only these kinds are checked)."""
        if self.engine_budget is not None:
            return dict(self.engine_budget)
        e = self.full_profile.engines
        return {k: e.get(k) for k in ENGINE_KINDS}

    @property
    def sm_total(self) -> int:
        """SMs of the whole GPU (the full profile's); 0 only on a GPU without MIG whose count is not known."""
        return self.full_profile.sm_count

    @property
    def memory_mib(self) -> int:
        """Memory usable under MIG (the full profile's), which is below the card's total; on a GPU without MIG,
        its whole memory."""
        return self.full_profile.memory_mib

    @property
    def compute_unknown(self) -> bool:
        """A GPU without MIG whose SM count no source gives: a workload's compute is not checked against it."""
        return not self.mig and self.whole_sm_count == 0

    @property
    def reset_required_for_mode(self) -> bool:
        """Ampere needs a GPU reset for a MIG mode change; Hopper and later do not (docs/mig-geometry.md §9)."""
        return self.architecture == "ampere"

    def profile(self, ref: str | int) -> GiProfile:
        """Look up a profile by short name (`3g.20gb`), full name (`MIG 3g.20gb`) or numeric ID."""
        by_name, by_id = self._by_name, self._by_id
        hit = by_name.get(ref) if isinstance(ref, str) else None
        if hit is not None:  # the common case first: the planner looks profiles up by name ~200,000 times
            return hit
        if isinstance(ref, int):
            if ref in by_id:
                return by_id[ref]
        else:
            key = ref.strip()
            if key.upper().startswith("MIG "):
                key = key[4:].strip()
            if key in by_name:
                return by_name[key]
            if key.isascii() and key.isdigit() and int(key) in by_id:
                return by_id[int(key)]
        known = ", ".join(p.name for p in self.profiles)
        raise CatalogError(f"{self.id} has no MIG profile {ref!r}", hint=f"profiles of {self.id}: {known}")

    def has_profile(self, ref: str | int) -> bool:
        try:
            self.profile(ref)
        except CatalogError:
            return False
        return True

    @functools.cached_property  # immutable model: computed once (asked per workload by the planner)
    def plain_profiles(self) -> tuple[GiProfile, ...]:
        """Profiles without a variant suffix (`+me`, `+me.all`, `-me`, `+gfx`), as used for enumeration and
        planning; a variant whose plain profile the model lacks counts as plain."""
        names = {p.name for p in self.profiles}
        return tuple(p for p in self.profiles
                     if not p.media_extensions and (not p.variant or p.base_name not in names))

    @property
    def base_id(self) -> str:
        """The catalog model this one stands for (`A100-SXM4-40GB` for `A100-SXM4-40GB@host-1a2b3c4d`)."""
        return self.id.split("@host-", 1)[0]

    @functools.cached_property
    def enforced_exclusions(self) -> tuple[Exclusion, ...]:
        """The exclusions in force on this model: those no newer driver lifted (min_driver None)."""
        return tuple(e for e in self.exclusions if e.min_driver is None)

    def plain_of(self, name: str) -> str:
        """The plain profile a name stands for in exclusions and patterns: its base name where the model has
        that profile (`1g.5gb` for `1g.5gb+me`), else the name itself."""
        if self.has_profile(name):
            base = self.profile(name).base_name
            return base if self.has_profile(base) else name
        return name

    def excluded_together(self, names: Iterable[str]) -> list[tuple[Exclusion, tuple[str, ...]]]:
        """(exclusion, its profiles among `names`) for each enforced exclusion that profiles `names` break
        together (a variant counts as its plain profile)."""
        if not self.enforced_exclusions:
            return []
        plain = {self.plain_of(n) for n in names}
        return [(e, hit) for e in self.enforced_exclusions if (hit := e.broken_by(plain))]

    def lifted_by(self, names: Iterable[str]) -> str | None:
        """The newest `min_driver` of the exclusions (not enforced on this model) that profiles `names` break
        together: a host whose GPU holds them runs at least that driver. None when they break none."""
        plain = {self.plain_of(n) for n in names}
        found = [e.min_driver for e in self.exclusions if e.min_driver is not None and e.broken_by(plain)]
        return max(found, key=driver_version) if found else None

    def for_host(self, driver: str | None, holding: Iterable[str] = (), *, own_table: bool = False) -> GpuModel:
        """`for_driver`, unless the profiles `holding` (the GPU's current layout) hold a combination that driver
        would refuse: the driver made that layout (an unknown driver, or a record older than the driver's), so
        the GPU is planned as the driver that lifted the rule."""
        limited = self.for_driver(driver, own_table=own_table)
        names = list(holding)
        if names and limited.excluded_together(names):
            lifted = self.lifted_by(names)
            if lifted is not None:
                return self.for_driver(lifted, own_table=own_table)
        return limited

    def for_driver(self, driver: str | None, *, own_table: bool = False) -> GpuModel:
        """This model as a host with `driver` (`535.183.01` or a branch `535`; None: unknown, taken as the
        oldest) has it: profiles whose min_driver is newer are left out (`own_table`: the profiles are the
        host's own -lgip, which already says what the driver offers, and stay) and the exclusions a newer
        driver lifted are enforced. The same object when nothing changes, else a model `<base id>@host-<digest>`
        (no aliases or names: a lookup by name never finds it). CatalogError for a malformed version."""
        if driver is not None:
            driver_version(driver)
        kept = self.profiles if own_table else tuple(
            p for p in self.profiles if p.min_driver is None or (driver is not None and p.offered_by(driver)))
        shown = f"driver {driver}" if driver is not None else "an unknown driver"
        host = f"this host has {shown}" if driver is not None else "this host's driver is unknown (taken as the oldest)"
        rules = []
        for e in among(self.exclusions, {p.name for p in kept}):
            if e.min_driver is None:
                rules.append(e)
            elif driver is None or not driver_meets(driver, e.min_driver):  # not lifted on this driver
                rules.append(Exclusion(e.profiles, None, "; ".join(x for x in (e.reason, host) if x)))
        if len(kept) == len(self.profiles) and tuple(rules) == self.enforced_exclusions:
            return self
        base = self.base_id
        # the same digest as an inventory host's model of that driver had before exclusions; another for a table's
        tag = f"driver:{driver}" if self.id == base and not own_table else \
            f"{self.id}{' own table' if own_table else ''} driver:{driver}"
        lacks = "" if len(kept) == len(self.profiles) else " without the profiles it lacks"
        return replace(self, id=f"{base}@host-{hashlib.sha256(tag.encode()).hexdigest()[:8]}", profiles=kept,
                       exclusions=tuple(rules), aliases=(), smi_names=(), pci_device_ids=(), confidence="host",
                       source=f"model {self.id} as {shown} has it{lacks}")
