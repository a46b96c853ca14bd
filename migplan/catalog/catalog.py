"""Look GPU models up by id, alias, or what `nvidia-smi` reports about a GPU (pure)."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from migplan.catalog.geometry import GpuModel
from migplan.errors import CatalogError

_ADD_HINT = (
    "learn it from the host with 'migplan catalog learn --host H --gpu N --out FILE' and pass that file "
    "with --catalog (or write a catalog file, see README, 'Catalog overrides'); "
    "list the known models with 'migplan catalog list'"
)


def normalise_name(name: str) -> str:
    """Compare names as nvidia-smi prints them: R450 drivers omit the 'NVIDIA ' prefix."""
    # a fleet names a few models, looked up per GPU and per workload: short names are kept (a hostile long
    # name from a remote host is not)
    return _normalised(name) if len(name) <= 128 else _normalise(name)


@functools.lru_cache(maxsize=4096)
def _normalised(name: str) -> str:
    return _normalise(name)


def _normalise(name: str) -> str:
    n = " ".join(name.strip().split()).lower()
    if n.startswith("nvidia "):
        n = n[len("nvidia ") :]
    return n.replace("_", "-")


@dataclass(frozen=True)
class Catalog:
    models: tuple[GpuModel, ...]
    # ids of models that came from override files: `match` prefers them when a name fits several models
    overridden: frozenset[str] = frozenset()

    def __iter__(self) -> Iterator[GpuModel]:
        return iter(self.models)

    def __len__(self) -> int:
        return len(self.models)

    def ids(self) -> list[str]:
        return [m.id for m in self.models]

    @functools.cached_property
    def _index(self) -> tuple[dict[str, GpuModel], dict[str, list[GpuModel]]]:
        """Normalised id -> first model with it; normalised id, alias or nvidia-smi name -> models, in
        catalog order. Built once: a 70,000-GPU inventory looks a model up per GPU."""
        by_id: dict[str, GpuModel] = {}
        named: dict[str, list[GpuModel]] = {}
        for m in self.models:
            by_id.setdefault(normalise_name(m.id), m)
            for n in dict.fromkeys(normalise_name(x) for x in (m.id, *m.aliases, *m.smi_names)):
                named.setdefault(n, []).append(m)
        return by_id, named

    def _named(self, name: str) -> list[GpuModel]:
        return self._index[1].get(normalise_name(name), [])

    def find(self, name: str) -> GpuModel | None:
        """By id first, then by alias or nvidia-smi name (a model from an override file first)."""
        by_id, _ = self._index
        model = by_id.get(normalise_name(name))
        if model is not None:
            return model
        named = self._named(name)
        found = [m for m in named if m.id in self.overridden] or named
        return found[0] if found else None

    def get(self, name: str) -> GpuModel:
        """A model by id or alias (case-insensitive, `NVIDIA ` prefix optional)."""
        model = self.find(name)
        if model is None:
            raise CatalogError(f"unknown GPU model {name!r}", hint=_ADD_HINT)
        return model

    def match(
        self,
        name: str,
        *,
        memory_total_mib: int | None = None,
        pci_device_id: str | None = None,
    ) -> GpuModel:
        """The model of a GPU from `nvidia-smi --query-gpu=name,memory.total,pci.device_id`.

        The product name decides; the PCI device ID is used when the name is unknown; the total
        memory separates models that share a name (a MIG GPU's total is at least its full
        profile's memory and within 10% of it); a model from an override file wins over a shipped
        one. A PCI device ID the catalog does not list is not guessed at (e.g. 0x20B6, PG506, and
        0x2329, H20, which have no real MIG output in migplan's sources): the error names the GPU.
        """
        candidates = list(self._named(name))
        if not candidates and pci_device_id:
            pid = pci_device(pci_device_id)
            candidates = [m for m in self.models if pid in m.pci_device_ids]
        if memory_total_mib is not None and len(candidates) > 1:
            fitting = [m for m in candidates if m.memory_mib <= memory_total_mib <= m.memory_mib * 1.1]
            candidates = fitting or candidates
        if not candidates:
            extra = f" (PCI device {pci_device_id})" if pci_device_id else ""
            raise CatalogError(f"GPU {name!r}{extra} is not in the MIG catalog", hint=_ADD_HINT)
        preferred = [m for m in candidates if m.id in self.overridden]
        return (preferred or candidates)[0]

    def merged(self, overrides: Iterable[GpuModel]) -> Catalog:
        """This catalog with models replaced (same id) or added by an override file."""
        models = {m.id: m for m in self.models}
        added = set(self.overridden)
        for m in overrides:
            models[m.id] = m
            added.add(m.id)
        return Catalog(tuple(models.values()), frozenset(added))


def pci_device(raw: str) -> str:
    """`0x20B010DE` (nvidia-smi pci.device_id: device then vendor) or `0x20b0` -> `0x20b0`."""
    r = raw.strip().lower()
    if r.startswith("0x"):
        r = r[2:]
    if len(r) == 8 and r.endswith("10de"):
        r = r[:4]
    return "0x" + r
