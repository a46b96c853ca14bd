"""Catalog documents written back: the override file `catalog learn` writes, and the models a plan
carries (built from hosts' own profile tables), in the schema `catalog.loader` reads (pure)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import yaml

from migplan.catalog.geometry import ENGINE_KINDS, GiProfile, GpuModel
from migplan.catalog.loader import CATALOG_VERSION


def _q(value: str) -> str:
    """A YAML double-quoted scalar (JSON strings are valid YAML)."""
    return json.dumps(value)


def _flow(items: Iterable[str]) -> str:
    return "[" + ", ".join(items) + "]"


def _profile_yaml(p: GiProfile) -> list[str]:
    e = p.engines
    return [
        f"  - name: {_q(p.name)}", f"    id: {p.id}", f"    compute_slices: {p.compute_slices}",
        f"    memory_slices: {p.memory_slices}", f"    memory_mib: {p.memory_mib}", f"    max_count: {p.max_count}",
        f"    sm_count: {p.sm_count}", f"    starts: {_flow(str(s) for s in p.starts)}",
        f"    media_extensions: {str(p.media_extensions).lower()}",
        f"    engines: {{ce: {e.ce}, dec: {e.dec}, enc: {e.enc}, jpeg: {e.jpeg}, ofa: {e.ofa}}}",
        f"    ci_default_id: {p.ci_default_id}", f"    ci_default_verified: {str(p.ci_default_verified).lower()}",
        f"    confidence: {_q(p.confidence)}",
    ] + ([f"    min_driver: {_q(p.min_driver)}"] if p.min_driver is not None else [])


def _whole_yaml(m: GpuModel) -> list[str]:
    """A GPU without MIG (`loader._whole_model`): its memory and SM count, no profiles."""
    return [f"- id: {_q(m.id)}", "  mig: false", f"  memory_mib: {m.whole_memory_mib}",
            f"  sm_count: {m.whole_sm_count}", f"  smi_names: {_flow(_q(n) for n in m.smi_names)}",
            f"  verified: {str(m.verified).lower()}", f"  confidence: {_q(m.confidence)}", f"  source: {_q(m.source)}"]


def _model_yaml(m: GpuModel) -> list[str]:
    if not m.mig:
        return _whole_yaml(m)
    out = [
        f"- id: {_q(m.id)}", f"  aliases: {_flow(_q(a) for a in m.aliases)}",
        f"  smi_names: {_flow(_q(n) for n in m.smi_names)}",
        f"  pci_device_ids: {_flow(_q(d) for d in m.pci_device_ids)}",
        f"  architecture: {_q(m.architecture)}", f"  memory_slices: {m.memory_slices}",
        f"  compute_slices: {m.compute_slices}", f"  verified: {str(m.verified).lower()}",
        f"  confidence: {_q(m.confidence)}", f"  source: {_q(m.source)}",
    ]
    if m.engine_budget is not None:
        out.append("  engine_budget: {" + ", ".join(f"{k}: {v}" for k, v in m.engine_budget
                                                      if k in ENGINE_KINDS) + "}")
    if m.drivers:
        out.append(f"  drivers: {_q(m.drivers)}")
    if m.exclusions:
        out.append("  exclusions:")
        for e in m.exclusions:
            out.append(f"  - profiles: {_flow(_q(n) for n in e.profiles)}")
            if e.min_driver is not None:
                out.append(f"    min_driver: {_q(e.min_driver)}")
            if e.reason:
                out.append(f"    reason: {_q(e.reason)}")
    out.append("  profiles:")
    for p in m.profiles:
        out += _profile_yaml(p)
    return out


def render_catalog_yaml(models: Iterable[GpuModel]) -> str:
    """A catalog override document (schema of migplan/catalog/data/models.yaml) for `--catalog`."""
    lines = ["# migplan catalog override (learned from nvidia-smi; check before trusting it)",
             f"version: {CATALOG_VERSION}", "models:"]
    for m in models:
        lines += _model_yaml(m)
    return "\n".join(lines) + "\n"


def models_to_list(models: Iterable[GpuModel]) -> list[dict[str, Any]]:
    """The `models:` entries of a catalog document as plain data (read back by `loader.parse_catalog`)."""
    doc = yaml.safe_load(render_catalog_yaml(models))
    out: list[dict[str, Any]] = doc["models"] or []
    return out
