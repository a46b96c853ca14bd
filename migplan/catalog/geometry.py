"""Catalog types: what one GPU model can be split into (pure data, no I/O).

Facts come from real `nvidia-smi mig -lgip` / `-lgipp` output (see data/models.yaml and the
MIG User Guide, "Supported MIG Profiles"). Placements are in memory-slice units: NVML's
nvmlGpuInstancePlacement_t.start is the "Index of first occupied memory slice".
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from migplan.errors import CatalogError

ARCHITECTURES = ("ampere", "hopper", "blackwell")


@dataclass(frozen=True)
class Engines:
    ce: int = 0
    dec: int = 0
    enc: int = 0
    jpeg: int = 0
    ofa: int = 0


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

    @property
    def base_name(self) -> str:
        """The plain profile a `+me` variant stands in for when enumerating layouts."""
        return self.name[: -len("+me")] if self.media_extensions and self.name.endswith("+me") else self.name

    @property
    def lgip_gib(self) -> str:
        """Memory as `-lgip` prints it: memorySizeMB / 1024 formatted %.2f."""
        return f"{self.memory_mib / 1024:.2f}"

    def slots(self, start: int) -> range:
        return range(start, start + self.memory_slices)


@dataclass(frozen=True)
class GpuModel:
    """A MIG-capable GPU model and its profiles."""

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

    @functools.cached_property
    def _by_name(self) -> dict[str, GiProfile]:
        return {p.name: p for p in self.profiles}

    @functools.cached_property
    def _by_id(self) -> dict[int, GiProfile]:
        return {p.id: p for p in self.profiles}

    @property
    def full_profile(self) -> GiProfile:
        """The profile that takes the whole GPU (7g on A100/H100, 4g on A30)."""
        full = [p for p in self.profiles if p.memory_slices == self.memory_slices and not p.media_extensions]
        return max(full, key=lambda p: p.compute_slices)

    @property
    def sm_total(self) -> int:
        return self.full_profile.sm_count

    @property
    def memory_mib(self) -> int:
        """Memory usable under MIG (the full profile's), which is below the card's total."""
        return self.full_profile.memory_mib

    @property
    def reset_required_for_mode(self) -> bool:
        """Ampere needs a GPU reset for a MIG mode change; Hopper and later do not (docs/mig-geometry.md §9)."""
        return self.architecture == "ampere"

    def profile(self, ref: str | int) -> GiProfile:
        """Look up a profile by short name (`3g.20gb`), full name (`MIG 3g.20gb`) or numeric ID."""
        by_name, by_id = self._by_name, self._by_id
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

    @property
    def plain_profiles(self) -> tuple[GiProfile, ...]:
        """Profiles without media extensions, as used for enumeration and planning."""
        return tuple(p for p in self.profiles if not p.media_extensions)
