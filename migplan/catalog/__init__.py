"""The catalog of MIG-capable GPU models: geometry types, the shipped data, and user overrides.

  geometry.py GpuModel, GiProfile, Engines: one model's MIG geometry (pure)
  whole_gpus.py GPUs without MIG (T4, L4, A10, L40S, V100 ...): the sourced table of those migplan knows and
              the model (`GpuModel.mig` False) of one it does not know (pure)
  catalog.py  Catalog: lookup by id, alias, nvidia-smi name and PCI device id (pure)
  layout.py   Instance, Layout: instances placed on one GPU; `check_layout` (NVIDIA's placement
              rules as the catalog states them), layout enumeration and counting (pure)
  loader.py   the strict reader of catalog files; reads the shipped `data/models.yaml` (package
              data) and override files named by `--catalog`
  cache.py    the parsed shipped catalog cached as JSON under the user's cache directory, keyed on
              the content of the data and of the code that parses it (loader and cache: the
              catalog's only file access)
  vgpu.py     VgpuType, VgpuModel, VgpuCatalog: NVIDIA vGPU types per GPU board, their modes and the sharing
              rules of one GPU (pure; docs/vgpu.md)
  vgpu_loader.py the strict reader of `data/vgpu.yaml` (package data), every MIG-backed type checked against
              the MIG catalog's profile it names (with loader and cache, the only file access)

May import: errors, names, yamldoc, files (the cache). Never planner, fleet, adapters, commands or cli.
"""

from migplan.catalog.catalog import Catalog, normalise_name
from migplan.catalog.geometry import Engines, GiProfile, GpuModel
from migplan.catalog.loader import builtin_catalog, load_catalog, load_catalog_file
from migplan.catalog.vgpu import VgpuCatalog, VgpuModel, VgpuType
from migplan.catalog.vgpu_loader import builtin_vgpu_catalog

__all__ = [
    "Catalog",
    "Engines",
    "GiProfile",
    "GpuModel",
    "VgpuCatalog",
    "VgpuModel",
    "VgpuType",
    "builtin_catalog",
    "builtin_vgpu_catalog",
    "load_catalog",
    "load_catalog_file",
    "normalise_name",
]
