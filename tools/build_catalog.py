"""Build migplan/catalog/data/models.yaml from the research catalog and the host facts below.

Developer tool, not shipped: run it when ../shared/reference/mig-catalog.yaml or a table below changes,
review the diff, commit the result. The output is what `migplan` loads at run time.

    python tools/build_catalog.py ../shared/reference/mig-catalog.yaml > migplan/catalog/data/models.yaml

What the reference does not hold is in this file, each fact with its source key (docs/sources.md §5):
real `nvidia-smi` output of GPUs and drivers the reference lacks (H100 PCIe on drivers 570 and 525, H100 NVL
on another driver, H100 SXM on driver 525, RTX PRO 6000 Blackwell), the MIG User Guide's per-profile driver
notes, the models the reference files under another (A800, H200 NVL), and the inferences migplan makes where no
source prints a value (marked `confidence: inferred`). Where a row or model needs more than its one-line
`confidence:` to say why, a `comment` below becomes a `#` block above it in the output.

The offline catalog is conservative (docs/mig-geometry.md §10): each profile's memory is the smallest
any known driver prints for the model, and a profile that older supported drivers lack carries
`min_driver`.
"""

from __future__ import annotations

import copy
import math
import sys
from typing import Any

import yaml
from yaml.events import SequenceEndEvent


# H200 NVL rows (MIGPARTED_CFG, @bd7160f): the profiles mig-parted's all-balanced names for 0x233B are real names
# with the H200 SXM's numbers; the others no source names for the NVL at all.
_NVL_NAMED = "names real (MIGPARTED_CFG all-balanced for 0x233B); numbers inferred (H200_120)"
_NVL_UNNAMED = "inferred: the H200 SXM row (H200_120); no source names it for 0x233B"

# Our model ids, aliases and facts the research file holds only as prose.
# arch decides MIG-mode semantics (Ampere: reset to take effect; Hopper+: immediate), UG getting-started.
MODELS: list[dict[str, Any]] = [
    {"src": "A30-24GB", "id": "A30", "aliases": ["A30-24GB", "NVIDIA A30"], "arch": "ampere",
     "drivers": "R460 and later (MIG from 460.73.01, UG_DEPLOY). Numbers: driver 535.183.01 (A30_535), also the "
                "smallest memory seen (A30_450, an older driver, prints 4g.24gb as 23.50 GiB). 1g.6gb+me from R470, "
                "2g.12gb+me from R525 (UG; A30_450 lacks it): min_driver."},
    {"src": "A100-SXM4-40GB", "id": "A100-SXM4-40GB",
     "aliases": ["A100-PCIE-40GB", "A100-40GB", "A800-40GB"], "arch": "ampere",
     "drivers": "R450 and later (MIG from 450.80.02, UG_DEPLOY). Numbers: the UG / A100_40_LGIP driver (R525 or "
                "later: it lists 1g.10gb), the smallest seen: older drivers print more (A100_PCIE40_OLD: 2g.10gb "
                "9.75, 3g/4g 19.62, 7g 39.50 GiB). 1g.5gb+me from R470, 1g.10gb from R525 (UG A100 table notes): "
                "min_driver. 4g.20gb with 3g.20gb needs R510 (UG concepts): exclusions."},
    {"src": "A100-80GB", "id": "A100-SXM4-80GB",
     "aliases": ["A100-80GB", "A100-PCIE-80GB", "A100 80GB PCIe"], "arch": "ampere",
     "pci_drop": ["0x20f3", "0x20f5"],  # A800-80GB: its own model below
     "drivers": "R450 and later (UG_DEPLOY). Numbers: the go-nvml mock's (matching the UG), lowered to the "
                "smallest real output: 1g.10gb/1g.10gb+me 9.50 GiB on an older driver (A100_80_97). 1g.10gb+me "
                "from R470 and 1g.20gb from R525 (UG A100 table notes, which name the 80GB profiles too). 4g.40gb "
                "with 3g.40gb needs R510 (UG concepts, by geometry): exclusions."},
    {"copy": "A100-SXM4-80GB", "id": "A800-80GB", "aliases": ["A800-80GB", "A800 80GB PCIe", "A800-PCIE-80GB"],
     "arch": "ampere", "verified": False, "smi_name": ["NVIDIA A800 80GB PCIe"], "pci": ["0x20f3", "0x20f5"],
     "source": ["A800_NAME", "MIGPARTED_CFG"],
     "confidence": "UNVERIFIED: geometry copied from A100-SXM4-80GB (no real A800 -lgip; mig-parted uses its A100-80GB "
                   "configs)",
     "drivers": "R450 and later (UG_DEPLOY, A100); numbers and min_driver copied from A100-SXM4-80GB; the A800 name "
                "was seen with driver 580.119.02 (A800_NAME)."},
    {"src": "H100-80GB", "id": "H100-SXM5-80GB",
     "aliases": ["H100-80GB", "H100 80GB HBM3", "H800-80GB"], "arch": "hopper",
     "pci_drop": ["0x2331"],  # H100 PCIe: its own model below
     "source_add": ["H100_GCP_525"],
     "drivers": "R525 and later (MIG from 525.85.12, UG_DEPLOY). Numbers: the smallest seen per profile: 1g.10gb, "
                "1g.10gb+me, 2g.20gb, 3g.40gb from driver 525.125.06 (H100_GCP_525: 9.62/9.62/19.50/39.25 GiB), "
                "1g.20gb from the same (19.50 GiB; H100_SXM prints 19.62), 4g.40gb and 7g.80gb from AWS p5 "
                "(H100_P5: 39.38 and 79.12 GiB; H100_SXM prints 79.25) (docs/mig-geometry.md §10)."},
    {"table": "H100-PCIE-80GB", "id": "H100-PCIE-80GB", "aliases": ["H100-PCIE", "H100 PCIe"], "arch": "hopper",
     "smi_name": ["NVIDIA H100 PCIe"], "pci": ["0x2331"],
     "source": ["H100_PCIE_570", "H100_PCIE_525", "H100_GCP_525", "H100_P5"],
     "confidence": "profiles real (H100_PCIE_570); memory the smallest H100 80GB sample (inferred; 7g.80gb "
                   "H100_PCIE_525); placements inferred",
     "drivers": (
         "R525 and later (UG_DEPLOY). -lgip from driver 570.169 (H100_PCIE_570: 9.75/19.62/39.50/79.25 GiB); "
         "memory lowered to the smallest any H100 80GB driver prints (525.125.06, H100_GCP_525 "
         "9.62/19.50/39.25 GiB, its 3g.40gb for 4g.40gb too); 7g.80gb the H100 PCIe's own 79.00 GiB on "
         "525.125.06 (H100_PCIE_525), below p5's 79.12.")},
    {"src": "H100-NVL-94GB", "id": "H100-NVL",
     "aliases": ["H100-NVL-94GB", "H100 NVL", "H800 NVL"], "arch": "hopper",
     "source_add": ["H100_NVL_ONE"],
     "drivers": "R525 and later (UG_DEPLOY, H100). Numbers: the smallest seen, H100_NVL_ONE (driver not shown: "
                "10.62/21.50/46.12/92.62 GiB); driver 560.35.03 (H100_NVL) prints 128-512 MiB more."},
    {"src": "H200-141GB", "id": "H200-141GB",
     # The reference's H200-NVL alias and 0x233B: the H200 NVL is its own model below (no source shows its geometry).
     "aliases": ["H200", "H200-SXM5-141GB"], "arch": "hopper", "pci_drop": ["0x233b"],
     "drivers": "R550 and later (MIG from 550.90.07, UG_DEPLOY). Numbers: H200_120 (one driver, version not shown)."},
    {"copy": "H200-141GB", "id": "H200-NVL", "aliases": ["H200-NVL-141GB", "H200 NVL"], "arch": "hopper",
     "verified": False, "smi_name": [], "pci": ["0x233b"],  # the reference's H200-NVL id; its name never seen
     "source": ["H200_120", "MIGPARTED_CFG", "UG_DEPLOY"],
     "confidence": "UNVERIFIED: no H200 NVL -lgip/-lgipp in any source; the H200-141GB rows (H200_120, an H200 SXM) "
                   "but 1g.35gb",
     # The rows kept from H200-141GB, each with its confidence; 1g.35gb is left out (see the comment).
     "copy_rows": {"1g.18gb": _NVL_NAMED, "1g.18gb+me": _NVL_UNNAMED, "2g.35gb": _NVL_NAMED,
                   "3g.71gb": _NVL_NAMED, "4g.71gb": _NVL_UNNAMED, "7g.141gb": _NVL_UNNAMED},
     "comment": (
         "H200 NVL (PCI 0x233B) has its own model: no source shows its MIG geometry. The reference files it under",
         'H200-141GB (mig-catalog.yaml: "H200 NVL name not seen"), its only -lgip (H200_120) is of an H200 SXM '
         "(0x2335),",
         "and NVIDIA's mig-parted config-default.yaml (MIGPARTED_CFG, @bd7160f) names three profiles for 0x233B",
         "(all-balanced: 1g.18gb x2, 2g.35gb, 3g.71gb) but creates all-1g.35gb's four 1g.35gb only on 0x2335 (its",
         "device-filter): so the conservative model has no 1g.35gb (a plan never asks the NVL for it). The other "
         "rows are",
         "the H200 SXM's numbers (the least any source prints for an H200), not verified on an NVL: learn the real",
         "geometry from the host ('migplan catalog learn') before trusting a plan that uses a profile no source "
         "names for it.",
     ),
     "drivers": (
         "R550 and later (UG_DEPLOY, H200). Numbers: H200_120 (an H200 SXM, 0x2335; one driver, version not "
         "shown), the only H200 -lgip found and so the least known; no source prints an H200 NVL row. No "
         "1g.35gb: mig-parted creates it on 0x2335 only (MIGPARTED_CFG all-1g.35gb).")},
    {"src": "GH200-96GB", "id": "GH200-96GB", "aliases": ["GH200", "H100-96GB"], "arch": "hopper",
     # 0x20B6 (PG506-232, an Ampere board) and 0x2329 (H20) share mig-parted's config list, not this geometry:
     # no real MIG output of either is known, so they stay unknown to the catalog.
     "pci_drop": ["0x20b6", "0x2329"], "smi_add": ["NVIDIA GH200 480GB"], "source_add": ["GH200_NAME"],
     "drivers": "R525 and later (UG_DEPLOY, H100). Numbers: GH200_96 (one driver, version not shown)."},
    {"src": "GH200-144GB-HBM3e", "id": "GH200-144GB", "aliases": ["GH200-144GB-HBM3e"], "arch": "hopper",
     "verified": False, "engine_budget": {},
     "drivers": "R525 and later (UG_DEPLOY, H100). Rows 19/20/15/14: GH200_144 (one driver); rows 9/5/0 inferred. "
                "No engine budget: the 7g.144gb engines are printed by no source."},
    {"src": "B200-180GB", "id": "B200", "aliases": ["B200-180GB"], "arch": "blackwell", "verified": False,
     "smi_add": ["NVIDIA B200"], "source_add": ["B200_NAME"], "engine_budget": {"ce": 16},
     "drivers": "R570 and later (MIG from 570.133.20, UG_DEPLOY). Rows 19/20/15/14: the smaller of B200_166 "
                "(Jan 2025, 1g.23gb 22.00 GiB) and B200_187 (Mar 2025, 20.50 GiB); rows 9/5/0 from UG Table 9 with "
                "inferred memory and SMs. Engine budget: copy engines only (UG Table 9: 16); DEC/JPEG/OFA of "
                "7g.180gb are printed by no source."},
    {"table": "RTX-PRO-6000-SE", "id": "RTX-PRO-6000-SE",
     "aliases": ["RTX-PRO-6000-Server", "RTX PRO 6000 Blackwell Server Edition"], "arch": "blackwell",
     "smi_name": ["NVIDIA RTX PRO 6000 Blackwell Server Edition"], "pci": ["0x2bb5"],
     "source": ["RTXPRO_SE", "RTXPRO_SE_CUBE", "RTXPRO_SE_BR", "UG_DEPLOY"],
     "confidence": "real (RTXPRO_SE -lgip and -lgipp; 1g memory from RTXPRO_SE_CUBE)",
     "drivers": "R575 and later (MIG from 575.51.03, UG_DEPLOY). -lgip/-lgipp of RTXPRO_SE (driver not shown: "
                "23.62/47.38/95.12 GiB); the 1g profiles lowered to RTXPRO_SE_CUBE's 23.12 GiB (another host; its "
                "2g/4g rows were not shown). -lgipp counts in twelfths: 1g size 3, 2g size 6, 4g size 12."},
    {"table": "RTX-PRO-6000-WS", "id": "RTX-PRO-6000-WS",
     "aliases": ["RTX PRO 6000 Blackwell Workstation Edition", "RTX PRO 6000 Blackwell Max-Q Workstation Edition"],
     "arch": "blackwell", "verified": False,
     "smi_name": ["NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
                  "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"],
     "pci": ["0x2bb1", "0x2bb4"],  # RTXPRO_WS_PCI: the two Workstation editions (sources disagree which is Max-Q)
     "source": ["RTXPRO_MAXQ", "RTXPRO_SE", "RTXPRO_WS_PCI", "UG_SUPPORTED", "UG_DEPLOY"],
     "confidence": "UNVERIFIED: -lgip real on the Max-Q edition (RTXPRO_MAXQ); placements inferred from the Server "
                   "Edition",
     "drivers": "R575 and later (UG_DEPLOY, 'RTX PRO 6000 Blackwell (all editions)'). -lgip from driver 580.105.08 "
                "(RTXPRO_MAXQ, Max-Q: 4g.96gb 95.00 GiB, 128 MiB less than the Server Edition). The (non-Max-Q) "
                "Workstation Edition's name is NVIDIA's product name (UG_SUPPORTED), never seen printed."},
]

# Memory of profiles the reference gives for another driver than the smallest one known:
# (model id, profile) -> (MiB, source key, confidence of the row's memory).
MEMORY_MIN: dict[tuple[str, str], tuple[int, str, str]] = {
    ("A100-SXM4-80GB", "1g.10gb"): (9728, "A100_80_97", "real"),     # 9.50 GiB, older driver
    ("A100-SXM4-80GB", "1g.10gb+me"): (9728, "A100_80_97", "real"),  # 9.50 GiB
    ("H100-SXM5-80GB", "1g.10gb"): (9856, "H100_GCP_525", "real"),     # 9.62 GiB
    ("H100-SXM5-80GB", "1g.10gb+me"): (9856, "H100_GCP_525", "real"),  # 9.62 GiB
    ("H100-SXM5-80GB", "2g.20gb"): (19968, "H100_GCP_525", "real"),    # 19.50 GiB
    ("H100-SXM5-80GB", "3g.40gb"): (40192, "H100_GCP_525", "real"),    # 39.25 GiB
    ("H100-SXM5-80GB", "4g.40gb"): (40320, "H100_P5", "real"),         # 39.38 GiB (GCP row not shown)
    ("H100-SXM5-80GB", "1g.20gb"): (19968, "H100_GCP_525", "real"),    # 19.50 GiB (H100_SXM: 19.62)
    ("H100-SXM5-80GB", "7g.80gb"): (81024, "H100_P5", "real"),         # 79.12 GiB (H100_SXM: 79.25)
    ("H100-NVL", "1g.12gb"): (10880, "H100_NVL_ONE", "real"),       # 10.62 GiB
    ("H100-NVL", "1g.12gb+me"): (10880, "H100_NVL_ONE", "real"),
    ("H100-NVL", "1g.24gb"): (22016, "H100_NVL_ONE", "real"),       # 21.50 GiB
    ("H100-NVL", "2g.24gb"): (22016, "H100_NVL_ONE", "real"),
    ("H100-NVL", "3g.47gb"): (47232, "H100_NVL_ONE", "real"),       # 46.12 GiB
    ("H100-NVL", "4g.47gb"): (47232, "H100_NVL_ONE", "real"),
    ("H100-NVL", "7g.94gb"): (94848, "H100_NVL_ONE", "real"),       # 92.62 GiB
    ("B200", "1g.23gb"): (20992, "B200_187", "real"),               # 20.50 GiB (B200_166: 22.00)
    ("B200", "1g.23gb+me"): (20992, "B200_187", "real"),
}

# Profiles older supported drivers lack (UG "Supported MIG Profiles" notes): (model id, profile) -> branch.
MIN_DRIVER: dict[tuple[str, str], str] = {
    ("A30", "1g.6gb+me"): "470",
    ("A30", "2g.12gb+me"): "525",
    ("A100-SXM4-40GB", "1g.5gb+me"): "470",
    ("A100-SXM4-40GB", "1g.10gb"): "525",
    ("A100-SXM4-80GB", "1g.10gb+me"): "470",
    ("A100-SXM4-80GB", "1g.20gb"): "525",
}

# Profiles older supported drivers refuse on one GPU: model id -> [(profiles, the branch that lifted it)]. MIG UG
# "Concepts" (mig-geometry.md §1): "prior to NVIDIA driver release R510, the combination of a (4 memory, 4 compute)
# and a (4 memory, 3 compute) profile was not supported". Stated by geometry, so it holds for the A100-80GB names
# too (and the A800-80GB copies it). Hopper and later need R525 or newer for MIG at all (UG_DEPLOY): no entry.
R510_REASON = 'MIG User Guide, "Concepts": not supported together before NVIDIA driver R510'
EXCLUSIONS: dict[str, list[tuple[list[str], str]]] = {
    "A100-SXM4-40GB": [(["4g.20gb", "3g.20gb"], "510")],
    "A100-SXM4-80GB": [(["4g.40gb", "3g.40gb"], "510")],
}

# SM counts no source prints (the reference's placeholders were a mock's 16*g / 18*g). Conservative values from
# the real Hopper ratios (H100/H200/GH200-96GB -lgip: 1g 16, 1g double memory 26, 2g 32, 3g 60, 4g 64, 7g 132):
# for each target profile, the smallest over the model's real rows r of floor(SM(r) * hopper(target) / hopper(r)).
HOPPER_SM = {(1, 1): 16, (1, 2): 26, (2, 2): 32, (3, 4): 60, (4, 4): 64, (7, 8): 132}

# Models the reference does not hold: -lgip rows as (name, id, g, memory slices, MiB, max, SM,
# (CE, DEC, ENC, JPEG, OFA), confidence), and -lgipp starts by id.
_H100_PCIE_ENG = {"1": (1, 1, 0, 1, 0), "1me": (1, 1, 0, 1, 1), "2": (2, 2, 0, 2, 0), "3": (3, 3, 0, 3, 0),
                  "4": (4, 4, 0, 4, 0), "7": (8, 7, 0, 7, 1)}
_PCIE_MEM = "real; memory inferred (own {gib} GiB; {src} {low})"
_RTX_1G, _RTX_2G, _RTX_4G = (1, 3), (2, 6), (4, 12)
TABLES: dict[str, dict[str, Any]] = {
    "H100-PCIE-80GB": {
        "memory_slices": 8, "compute_slices": 7,
        "placements": {19: [0, 1, 2, 3, 4, 5, 6], 20: [0, 1, 2, 3, 4, 5, 6], 15: [0, 2, 4, 6], 14: [0, 2, 4],
                       9: [0, 4], 5: [0], 0: [0]},
        "rows": [
            ("1g.10gb", 19, 1, 1, 9856, 7, 14, _H100_PCIE_ENG["1"],
             _PCIE_MEM.format(gib="9.75", src="H100_GCP_525", low="9.62")),
            ("1g.10gb+me", 20, 1, 1, 9856, 1, 14, _H100_PCIE_ENG["1me"],
             _PCIE_MEM.format(gib="9.75", src="H100_GCP_525", low="9.62")),
            ("1g.20gb", 15, 1, 2, 19968, 4, 14, _H100_PCIE_ENG["1"],
             _PCIE_MEM.format(gib="19.62", src="H100_GCP_525", low="19.50")),
            ("2g.20gb", 14, 2, 2, 19968, 3, 30, _H100_PCIE_ENG["2"],
             _PCIE_MEM.format(gib="19.62", src="H100_GCP_525", low="19.50")),
            ("3g.40gb", 9, 3, 4, 40192, 2, 46, _H100_PCIE_ENG["3"],
             _PCIE_MEM.format(gib="39.50", src="H100_GCP_525", low="39.25")),
            ("4g.40gb", 5, 4, 4, 40192, 1, 62, _H100_PCIE_ENG["4"],
             _PCIE_MEM.format(gib="39.50", src="H100_GCP_525 3g.40gb", low="39.25")),
            ("7g.80gb", 0, 7, 8, 80896, 1, 114, _H100_PCIE_ENG["7"],
             "real; memory the smallest printed (H100_PCIE_525 79.00 GiB; own 79.25; H100_P5 79.12)"),
        ],
        "comments": {
            "7g.80gb": (
                "7g.80gb: 80896 MiB = 79.00 GiB, what an H100 PCIe prints on driver 525.125.06 (H100_PCIE_525, "
                "docs/sources.md",
                "§5), 128 MiB below the 81024 (79.12 GiB, the SXM board's AWS p5) this row carried: the catalog never "
                "claims",
                "more than a real driver prints. The reference holds no H100 PCIe output (its mig-geometry.md §4: "
                '"not',
                'separately evidenced"); its smallest H100 80GB 7g.80gb is H100_P5\'s 79.12 GiB.',
            ),
        },
    },
    "RTX-PRO-6000-SE": {
        "memory_slices": 12, "compute_slices": 4,
        "placements": {14: [0, 3, 6, 9], 21: [0, 3, 6, 9], 47: [0, 3, 6, 9], 65: [0, 3, 6, 9], 67: [0, 3, 6, 9],
                       5: [0, 6], 35: [0, 6], 64: [0, 6], 66: [0, 6], 0: [0], 32: [0]},
        "rows": [
            ("1g.24gb", 14, *_RTX_1G, 23680, 4, 46, (1, 1, 1, 1, 0), "real (memory RTXPRO_SE_CUBE 23.12 GiB)"),
            ("1g.24gb+me", 21, *_RTX_1G, 23680, 1, 46, (1, 1, 1, 1, 1), "real (memory RTXPRO_SE_CUBE 23.12 GiB)"),
            ("1g.24gb+gfx", 47, *_RTX_1G, 23680, 4, 46, (1, 1, 1, 1, 0), "real (memory RTXPRO_SE_CUBE 23.12 GiB)"),
            ("1g.24gb+me.all", 65, *_RTX_1G, 23680, 1, 46, (1, 4, 4, 4, 1),
             "real (memory RTXPRO_SE_CUBE 23.12 GiB)"),
            ("1g.24gb-me", 67, *_RTX_1G, 23680, 4, 46, (1, 0, 0, 0, 0),
             "real; memory inferred (RTXPRO_SE 23.62; as the other 1g rows)"),
            ("2g.48gb", 5, *_RTX_2G, 48512, 2, 94, (2, 2, 2, 2, 0), "real"),
            ("2g.48gb+gfx", 35, *_RTX_2G, 48512, 2, 94, (2, 2, 2, 2, 0), "real"),
            ("2g.48gb+me.all", 64, *_RTX_2G, 48512, 1, 94, (2, 4, 4, 4, 1), "real"),
            ("2g.48gb-me", 66, *_RTX_2G, 48512, 2, 94, (2, 0, 0, 0, 0), "real"),
            ("4g.96gb", 0, *_RTX_4G, 97408, 1, 188, (4, 4, 4, 4, 1), "real"),
            ("4g.96gb+gfx", 32, *_RTX_4G, 97408, 1, 188, (4, 4, 4, 4, 1), "real"),
        ],
    },
    "RTX-PRO-6000-WS": {
        "memory_slices": 12, "compute_slices": 4, "placements_from": "RTX-PRO-6000-SE",
        "rows": [
            ("1g.24gb", 14, *_RTX_1G, 24192, 4, 46, (1, 1, 1, 1, 0), "real"),
            ("1g.24gb+me", 21, *_RTX_1G, 24192, 1, 46, (1, 1, 1, 1, 1), "real"),
            ("1g.24gb+gfx", 47, *_RTX_1G, 24192, 4, 46, (1, 1, 1, 1, 0), "real"),
            ("1g.24gb+me.all", 65, *_RTX_1G, 24192, 1, 46, (1, 4, 4, 4, 1), "real"),
            ("1g.24gb-me", 67, *_RTX_1G, 24192, 4, 46, (1, 0, 0, 0, 0), "real"),
            ("2g.48gb", 5, *_RTX_2G, 48512, 2, 94, (2, 2, 2, 2, 0), "real"),
            ("2g.48gb+gfx", 35, *_RTX_2G, 48512, 2, 94, (2, 2, 2, 2, 0), "real"),
            ("2g.48gb+me.all", 64, *_RTX_2G, 48512, 1, 94, (2, 4, 4, 4, 1), "real"),
            ("2g.48gb-me", 66, *_RTX_2G, 48512, 2, 94, (2, 0, 0, 0, 0), "real"),
            ("4g.96gb", 0, *_RTX_4G, 97280, 1, 188, (4, 4, 4, 4, 1), "real"),
            ("4g.96gb+gfx", 32, *_RTX_4G, 97280, 1, 188, (4, 4, 4, 4, 1), "real"),
        ],
    },
}

# Default compute-instance profile per GI compute-slice count (mig-catalog.yaml ci_profiles_by_gi_slices;
# NVML_COMPUTE_INSTANCE_PROFILE_<n>_SLICE).
CI_DEFAULT = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}
# Where a default CI was seen in real output: (model id, compute slices, memory slices) -> source.
CI_SEEN = {
    ("GH200-96GB", 1, 2): "GH200_96 '-C' on 1g.24gb: (ID  7)",
    ("RTX-PRO-6000-SE", 1, 3): "RTXPRO_SE '-cgi ... -C': 1g.24gb (ID  0)",
    ("RTX-PRO-6000-SE", 2, 6): "RTXPRO_SE '-cgi ... -C': 2g.48gb (ID  1)",
    ("RTX-PRO-6000-WS", 1, 3): "RTXPRO_MAXQ '-cgi 14 -C': (ID  0)",
    ("H100-PCIE-80GB", 1, 1): "H100_PCIE_570 '-cgi 19,... -C': (ID  0)",
}
ENGINES = ("ce", "dec", "enc", "jpeg", "ofa")


class _Commented(dict[str, Any]):
    """A model or profile the output carries a `#` block above: the why its one-line confidence cannot hold."""

    def __init__(self, data: dict[str, Any], comment: tuple[str, ...]) -> None:
        super().__init__(data)
        self.comment = comment


def _commented(data: dict[str, Any], comment: tuple[str, ...] | None) -> dict[str, Any]:
    return _Commented(data, comment) if comment else data


class _Dumper(yaml.SafeDumper):
    """SafeDumper that writes a _Commented list item's comment lines above its `- `, at the item's indent.

    PyYAML has no comments: the representer puts `comment` on the node, serialize_node hands it to the node's
    first event (its MappingStartEvent), and the emitter writes it when that event starts a block sequence item
    (models and profiles always are)."""

    _LAYOUT = ("comment",)
    _pending: dict[str, tuple[str, ...]] | None = None

    def serialize_node(self, node: yaml.Node, parent: yaml.Node | None, index: Any) -> None:
        layout = {k: getattr(node, k) for k in self._LAYOUT if getattr(node, k, None)}
        if layout:
            self._pending = layout  # the node's own first event is the next one emitted
        super().serialize_node(node, parent, index)

    def emit(self, event: yaml.Event) -> None:
        if self._pending:
            for k, v in self._pending.items():
                setattr(event, k, v)
            self._pending = None
        super().emit(event)

    def expect_block_sequence_item(self, first: bool = False) -> None:
        comment = getattr(self.event, "comment", None)
        if comment and not isinstance(self.event, SequenceEndEvent):
            for line in comment:
                self.write_indent()
                text = "# " + line
                self.stream.write(text)
                self.column += len(text)
                self.whitespace = self.indention = False
        super().expect_block_sequence_item(first)


def _represent_commented(dumper: _Dumper, data: _Commented) -> yaml.Node:
    node = dumper.represent_dict(data)
    node.comment = data.comment  # type: ignore[attr-defined]
    return node


_Dumper.add_representer(_Commented, _represent_commented)


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


def _ci_default(model_id: str, arch: str, g: int, mem: int, one_slice_mem: int) -> tuple[int, bool]:
    """(default CI profile id, seen in real output), as migplan.catalog.geometry.default_ci_profile decides."""
    if g == 1 and mem > one_slice_mem and arch != "ampere":
        ci = 7  # Hopper+: 1_SLICE_REV1 on the double-memory 1g profile (GH200_96)
    else:
        ci = CI_DEFAULT.get(g, 0)
    if (model_id, g, mem) in CI_SEEN:
        return ci, True
    if g == 1 and mem > one_slice_mem:
        return ci, False  # the double-memory 1g: seen on GH200 only (A100: 0 or 7, never seen)
    return ci, model_id not in TABLES  # the reference's -lcip facts cover its models' plain sizes


def _inferred_sm(g: int, mem: int, real: list[tuple[int, int, int]]) -> int:
    """Conservative SMs of a profile with no real value (HOPPER_SM ratios; see its comment)."""
    target = HOPPER_SM[(g, mem)]
    return min(math.floor(sm * target / HOPPER_SM[(rg, rm)]) for rg, rm, sm in real if (rg, rm) in HOPPER_SM)


def _reference_profiles(m: dict[str, Any], g: dict[str, Any]) -> list[dict[str, Any]]:
    base = {p["name"]: p for p in g["gi_profiles"]}
    real_sm = [(p["g"], p["mem_slices"], p["sm"]) for p in g["gi_profiles"] if "sm" in p]
    one_slice = min(p["mem_slices"] for p in g["gi_profiles"] if p["g"] == 1)
    profiles = []
    for p in g["gi_profiles"]:
        me = p["name"].endswith("+me")
        plain = base.get(p["name"][:-3]) if me else p
        pl = g["placements"][p["id"]]
        conf = p.get("confidence", "real")
        mem = p.get("memory_mib")
        sm = p.get("sm")
        if mem is None:  # inferred: the 2-slice profile's MiB per slice, a lower bound on every Hopper sample
            two = next(q for q in g["gi_profiles"] if q["id"] == 14 and "memory_mib" in q)
            mem = two["memory_mib"] * p["mem_slices"] // 2
            conf = "inferred"
        if sm is None:
            sm = _inferred_sm(p["g"], p["mem_slices"], real_sm)
            conf = "inferred"
        low = MEMORY_MIN.get((m["id"], p["name"]))
        if low is not None:
            mem = low[0]
            conf = conf if low[2] == "real" and conf == "real" else "inferred"
        ci_default, ci_seen = _ci_default(m["id"], m["arch"], p["g"], p["mem_slices"], one_slice)
        out = {
            "name": p["name"],
            "id": p["id"],
            "compute_slices": p["g"],
            "memory_slices": p["mem_slices"],
            "memory_mib": mem,
            "max_count": p.get("max", min(len(pl["starts"]), g["compute_slices"] // p["g"])),
            "sm_count": sm,
            "starts": list(pl["starts"]),
            "media_extensions": me,
            "engines": {k: p.get(k, plain.get(k, 0)) for k in ENGINES},
            "ci_default_id": ci_default,
            "ci_default_verified": ci_seen,
            "confidence": conf,
        }
        if (m["id"], p["name"]) in MIN_DRIVER:
            out["min_driver"] = MIN_DRIVER[(m["id"], p["name"])]
        profiles.append(out)
    return profiles


def _table_profiles(m: dict[str, Any]) -> list[dict[str, Any]]:
    t = TABLES[m["table"]]
    places = t.get("placements") or TABLES[t["placements_from"]]["placements"]
    one_slice = min(r[3] for r in t["rows"] if r[2] == 1)
    comments = t.get("comments", {})
    unknown = set(comments) - {r[0] for r in t["rows"]}
    if unknown:
        raise SystemExit(f"{m['table']}: comments on rows the table lacks: {sorted(unknown)}")
    out = []
    for name, pid, g, mem_slices, mib, mx, sm, engines, conf in t["rows"]:
        ci_default, ci_seen = _ci_default(m["id"], m["arch"], g, mem_slices, one_slice)
        out.append(_commented({
            "name": name, "id": pid, "compute_slices": g, "memory_slices": mem_slices, "memory_mib": mib,
            "max_count": mx, "sm_count": sm, "starts": list(places[pid]), "media_extensions": name.endswith("+me"),
            "engines": dict(zip(ENGINES, engines, strict=True)), "ci_default_id": ci_default,
            "ci_default_verified": ci_seen, "confidence": conf,
        }, comments.get(name)))
    return out


def _copied_profiles(m: dict[str, Any], like: dict[str, Any]) -> list[dict[str, Any]]:
    """The profiles of the model m copies: all of them inferred, or only its copy_rows with their confidence."""
    if "copy_rows" not in m:
        # Shared lists and dicts: the output writes them as YAML aliases of the original's (&idNNN).
        return [dict(p, confidence="inferred") for p in like["profiles"]]
    rows = m["copy_rows"]
    unknown = set(rows) - {p["name"] for p in like["profiles"]}
    if unknown:
        raise SystemExit(f"{m['id']}: copy_rows {sorted(unknown)} not in {m['copy']}")
    # Deep copies: the model's own rows in the output, not aliases of the original's.
    return [dict(copy.deepcopy(dict(p)), confidence=rows[p["name"]]) for p in like["profiles"] if p["name"] in rows]


def build(ref: dict[str, Any]) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    built: dict[str, dict[str, Any]] = {}
    for m in MODELS:
        if "src" in m:
            g = ref["gpus"][m["src"]]
            entry = {
                "id": m["id"],
                "aliases": m["aliases"],
                "smi_names": _smi_names(g.get("smi_name")) + m.get("smi_add", []),
                "pci_device_ids": [p for p in _pci_ids(g.get("pci_device_id", [])) if p not in m.get("pci_drop", [])],
                "architecture": m["arch"],
                "memory_slices": g["memory_slices"],
                "compute_slices": g["compute_slices"],
                "verified": m.get("verified", True),
                "confidence": str(g.get("confidence", "real")),
                "source": ", ".join(g.get("source", []) + m.get("source_add", [])),
                "profiles": _reference_profiles(m, g),
            }
        else:
            like = built[m["copy"]] if "copy" in m else None
            t = TABLES.get(m.get("table", ""), {})
            profiles = _copied_profiles(m, like) if like is not None else _table_profiles(m)
            entry = {
                "id": m["id"], "aliases": m["aliases"], "smi_names": m["smi_name"], "pci_device_ids": m.get("pci", []),
                "architecture": m["arch"],
                "memory_slices": like["memory_slices"] if like is not None else t["memory_slices"],
                "compute_slices": like["compute_slices"] if like is not None else t["compute_slices"],
                "verified": m.get("verified", True), "confidence": m["confidence"], "source": ", ".join(m["source"]),
                "profiles": profiles,
            }
        if "engine_budget" in m:
            entry["engine_budget"] = m["engine_budget"]
        entry["drivers"] = m["drivers"]
        rules = EXCLUSIONS.get(m["id"]) or EXCLUSIONS.get(m.get("copy", ""))
        if rules:
            entry["exclusions"] = [{"profiles": list(names), "min_driver": branch, "reason": R510_REASON}
                                   for names, branch in rules]
        built[m["id"]] = entry
        out.append(_commented(entry, m.get("comment")))
    return {"version": 1, "models": out}


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as fh:
        ref = yaml.safe_load(fh)
    print("# Generated by tools/build_catalog.py from migplan's notes on real nvidia-smi output; each model's")
    print("# `source:` keys are explained in docs/sources.md §5.")
    print("# Values are copied from real nvidia-smi output unless a profile says confidence: inferred/doc.")
    print("# Offline numbers are conservative: the smallest memory any known driver prints (docs/mig-geometry.md §10).")
    print(yaml.dump(build(ref), Dumper=_Dumper, sort_keys=False, width=120, default_flow_style=None), end="")


if __name__ == "__main__":
    main()
