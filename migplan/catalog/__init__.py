"""The catalog of MIG-capable GPU models (shipped data plus user overrides)."""

from migplan.catalog.catalog import Catalog, normalise_name
from migplan.catalog.loader import builtin_catalog, load_catalog, load_catalog_file
from migplan.catalog.model import Engines, GiProfile, GpuModel

__all__ = [
    "Catalog",
    "Engines",
    "GiProfile",
    "GpuModel",
    "builtin_catalog",
    "load_catalog",
    "load_catalog_file",
    "normalise_name",
]
