"""Build migplan/catalog/data/models.yaml from the research catalog.

Developer tool, not shipped: run it when ../shared/reference/mig-catalog.yaml changes,
review the diff, commit the result. The output is what `migplan` loads at run time.

    python tools/build_catalog.py ../shared/reference/mig-catalog.yaml > migplan/catalog/data/models.yaml
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

# Our model ids, aliases and facts the research file holds only as prose.
# arch decides MIG-mode semantics (Ampere: reset to take effect; Hopper+: immediate), UG getting-started.
MODELS: list[dict[str, Any]] = [
    {"src": "A30-24GB", "id": "A30", "aliases": ["A30-24GB", "NVIDIA A30"], "arch": "ampere"},
    {"src": "A100-SXM4-40GB", "id": "A100-SXM4-40GB",
     "aliases": ["A100-PCIE-40GB", "A100-40GB", "A800-40GB"], "arch": "ampere"},
    {"src": "A100-80GB", "id": "A100-SXM4-80GB",
     "aliases": ["A100-80GB", "A100-PCIE-80GB", "A100 80GB PCIe", "A800-80GB"], "arch": "ampere"},
    {"src": "H100-80GB", "id": "H100-SXM5-80GB",
     "aliases": ["H100-80GB", "H100 80GB HBM3", "H100-PCIE-80GB", "H100 PCIe", "H800-80GB"], "arch": "hopper"},
    {"src": "H100-NVL-94GB", "id": "H100-NVL",
     "aliases": ["H100-NVL-94GB", "H100 NVL", "H800 NVL"], "arch": "hopper"},
    {"src": "H200-141GB", "id": "H200-141GB",
     "aliases": ["H200", "H200-SXM5-141GB", "H200-NVL", "H200 NVL"], "arch": "hopper"},
    {"src": "GH200-96GB", "id": "GH200-96GB", "aliases": ["GH200", "H100-96GB"], "arch": "hopper"},
    {"src": "GH200-144GB-HBM3e", "id": "GH200-144GB", "aliases": ["GH200-144GB-HBM3e"], "arch": "hopper",
     "verified": False},
    {"src": "B200-180GB", "id": "B200", "aliases": ["B200-180GB"], "arch": "blackwell", "verified": False},
]

# Default compute-instance profile per GI compute-slice count (mig-catalog.yaml ci_profiles_by_gi_slices).
CI_DEFAULT = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}


def _pci_ids(raw: Any) -> list[str]:
    out: list[str] = []
    vals = raw.values() if isinstance(raw, dict) else [raw]
    for v in vals:
        out.extend(v if isinstance(v, list) else [v])
    return [v.lower() for v in out]


def _smi_names(raw: list[str] | None) -> list[str]:
    names = []
    for n in raw or []:
        if "(" in n:  # prose annotation such as "(not verified)"
            continue
        names.append(n)
    return names


def build(ref: dict[str, Any]) -> dict[str, Any]:
    out = []
    for m in MODELS:
        g = ref["gpus"][m["src"]]
        base = {p["name"]: p for p in g["gi_profiles"]}
        profiles = []
        for p in g["gi_profiles"]:
            me = p["name"].endswith("+me")
            plain = base.get(p["name"][:-3]) if me else p
            pl = g["placements"][p["id"]]
            conf = p.get("confidence", "real")
            mem = p.get("memory_mib")
            sm = p.get("sm")
            if mem is None:  # inferred: the same memory per slice as the verified 2-slice profile
                two = next(q for q in g["gi_profiles"] if q["id"] == 14 and "memory_mib" in q)
                mem = two["memory_mib"] * p["mem_slices"] // 2
                conf = "inferred"
            if sm is None:
                one = next(q for q in g["gi_profiles"] if q["id"] == 19)
                sm = one["sm"] * p["g"]
                conf = "inferred"
            ci_default = CI_DEFAULT[p["g"]]
            ci_verified = True
            if p["g"] == 1 and p["mem_slices"] == 2:
                # GH200 real output creates CI profile 7 (1_SLICE_REV1) on profile 15; seen on Hopper only.
                ci_default = 7 if m["arch"] != "ampere" else 0
                ci_verified = m["src"] == "GH200-96GB"
            profiles.append({
                "name": p["name"],
                "id": p["id"],
                "compute_slices": p["g"],
                "memory_slices": p["mem_slices"],
                "memory_mib": mem,
                "max_count": p.get("max", min(len(pl["starts"]), g["compute_slices"] // p["g"])),
                "sm_count": sm,
                "starts": list(pl["starts"]),
                "media_extensions": me,
                "engines": {k: p.get(k, plain.get(k, 0)) for k in ("ce", "dec", "enc", "jpeg", "ofa")},
                "ci_default_id": ci_default,
                "ci_default_verified": ci_verified,
                "confidence": conf,
            })
        out.append({
            "id": m["id"],
            "aliases": m["aliases"],
            "smi_names": _smi_names(g.get("smi_name")),
            "pci_device_ids": _pci_ids(g.get("pci_device_id", [])),
            "architecture": m["arch"],
            "memory_slices": g["memory_slices"],
            "compute_slices": g["compute_slices"],
            "verified": m.get("verified", True),
            "confidence": str(g.get("confidence", "real")),
            "source": ", ".join(g.get("source", [])),
            "profiles": profiles,
        })
    return {"version": 1, "models": out}


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as fh:
        ref = yaml.safe_load(fh)
    print("# Generated by tools/build_catalog.py from migplan's notes on real nvidia-smi output; each model's `source:`")
    print("# keys are explained in docs/sources.md §5.")
    print("# Values are copied from real nvidia-smi output unless a profile says confidence: inferred/doc.")
    print(yaml.safe_dump(build(ref), sort_keys=False, width=120, default_flow_style=None), end="")


if __name__ == "__main__":
    main()
