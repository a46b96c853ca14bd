"""The simulator's geometry where no verbatim `nvidia-smi mig -lgip`/`-lgipp` sample exists (read by geometry.py).

Transcribed by hand from the reference's mig-catalog.yaml and mig-geometry.md (/work/shared/reference; not
in the repository, so the values are copied here). It does not come from migplan's catalog. Provenance is
given per model and per row:

  real      the reference copied the value from real nvidia-smi output, but holds no verbatim text of
            it, so nothing here can be checked byte for byte (source short names as in mig-catalog.yaml)
  doc       from the NVIDIA MIG User Guide's tables only
  inferred  derived here or in the reference, not printed by any source found

`unknown` lists the fields of a row that no source gives at all. The simulator still has to print
something for them, so they hold placeholders: the guesses migplan's shipped catalog makes (memory = the
2g profile's MiB per 2 memory slices, SM = the 1g SM count x g, engines the reference does not list = 0),
so that -lgip prints what migplan expects. They are NOT evidence: tests/test_sim_agrees_with_catalog.py
does not compare them.

Verbatim samples used instead of this table (tests/data/sim/README.md):
  A100-SXM4-40GB  -lgip and -lgipp                    every row and placement
  A30             -lgipp                              placements; the rows below are "real"
  H100-SXM5-80GB, H100-NVL  -lgipp (the same text as A100-40GB's, per mig-catalog.yaml placement_sets)

Row: (name, profile id, compute slices, memory slices, MiB, max count, SM, (CE, DEC, ENC, JPEG, OFA),
provenance[, unknown fields]).
"""

from __future__ import annotations

from typing import Any

# -lgipp of every 8-memory-slice GPU (mig-catalog.yaml placement_sets.p8: verbatim on A100-40GB, H100 80GB and
# H100 NVL; "B200 assumed"). Used for the models below that have no -lgipp sample, where it is INFERRED.
P8 = {19: (0, 1, 2, 3, 4, 5, 6), 20: (0, 1, 2, 3, 4, 5, 6), 15: (0, 2, 4, 6), 14: (0, 2, 4), 9: (0, 4), 5: (0,),
      0: (0,)}
P8_INFERRED = "inferred: mig-catalog.yaml placement_sets.p8 (no -lgipp of this model in the reference)"

PLACEHOLDER_ROW = ("memory_mib", "sm_count", "ce", "dec", "enc", "jpeg", "ofa")
PLACEHOLDER_BUT_CE = ("memory_mib", "sm_count", "dec", "enc", "jpeg", "ofa")  # CE from the UG table

MODELS: list[dict[str, Any]] = [
    {
        "id": "A100-SXM4-40GB", "architecture": "ampere", "memory_slices": 8, "compute_slices": 7,
        "smi_name": "NVIDIA A100-SXM4-40GB", "pci_device_id": "0x20B0",
        "lgip": "smi/lgip_a100_40gb.txt", "lgipp": "smi/lgipp_a100_40gb.txt",
    },
    {
        "id": "A30", "architecture": "ampere", "memory_slices": 4, "compute_slices": 4,
        "smi_name": "NVIDIA A30", "pci_device_id": "0x20B7", "lgipp": "smi/lgipp_a30.txt",
        "source": "rows real (mig-catalog.yaml A30-24GB: A30_535, driver 535); placements verbatim -lgipp",
        "profiles": [
            ("1g.6gb", 14, 1, 1, 5952, 4, 14, (1, 1, 0, 0, 0), "real A30_535 (UG table says DEC 0; -lgip prints 1)"),
            ("1g.6gb+me", 21, 1, 1, 5952, 1, 14, (1, 1, 0, 1, 1), "real A30_535"),
            ("2g.12gb", 5, 2, 2, 11968, 2, 28, (2, 2, 0, 0, 0), "real A30_535"),
            ("2g.12gb+me", 6, 2, 2, 11968, 1, 28, (2, 2, 0, 1, 1), "real A30_535 (absent before R525)"),
            ("4g.24gb", 0, 4, 4, 24000, 1, 56, (4, 4, 0, 1, 1), "real A30_535 (23.44 GiB; 23.50 on older drivers)"),
        ],
    },
    {
        "id": "A100-SXM4-80GB", "architecture": "ampere", "memory_slices": 8, "compute_slices": 7,
        "smi_name": "NVIDIA A100-SXM4-80GB", "pci_device_id": "0x20B2",
        "placements": P8, "placements_source": "real per mig-catalog.yaml A100-80GB (names/ids/placements real)",
        "source": "mig-catalog.yaml A100-80GB: names, ids, placements real; MiB from the go-nvml mock, which the "
                  "reference calls consistent with the UG (an older real driver prints other GiB)",
        "profiles": [
            ("1g.10gb", 19, 1, 1, 9856, 7, 14, (1, 0, 0, 0, 0), "names real; MiB mock; DEC 0 real (A100_80_97)"),
            ("1g.10gb+me", 20, 1, 1, 9856, 1, 14, (1, 1, 0, 1, 1), "names real; MiB mock; engines inferred from "
                                                                   "A100-40GB"),
            ("1g.20gb", 15, 1, 2, 19968, 4, 14, (1, 1, 0, 0, 0), "names real; MiB mock; DEC inferred from A100-40GB"),
            ("2g.20gb", 14, 2, 2, 19968, 3, 28, (2, 1, 0, 0, 0), "names real; MiB mock"),
            ("3g.40gb", 9, 3, 4, 40192, 2, 42, (3, 2, 0, 0, 0), "names real; MiB mock"),
            ("4g.40gb", 5, 4, 4, 40192, 1, 56, (4, 2, 0, 0, 0), "names real; MiB mock"),
            ("7g.80gb", 0, 7, 8, 80384, 1, 98, (7, 5, 0, 1, 1), "names real; MiB mock"),
        ],
    },
    {
        "id": "H100-SXM5-80GB", "architecture": "hopper", "memory_slices": 8, "compute_slices": 7,
        "smi_name": "NVIDIA H100 80GB HBM3", "pci_device_id": "0x2330", "lgipp": "smi/lgipp_a100_40gb.txt",
        "source": "rows real (mig-catalog.yaml H100-80GB: UG, H100_SXM); rows 15 and 0 also checked against the "
                  "verbatim excerpt tests/data/sim/lgip_h100_80gb_excerpt.txt",
        "profiles": [
            ("1g.10gb", 19, 1, 1, 9984, 7, 16, (1, 1, 0, 1, 0), "real H100_SXM"),
            ("1g.10gb+me", 20, 1, 1, 9984, 1, 16, (1, 1, 0, 1, 1), "real H100_SXM"),
            ("1g.20gb", 15, 1, 2, 20096, 4, 26, (1, 1, 0, 1, 0), "real H100_SXM (verbatim excerpt)"),
            ("2g.20gb", 14, 2, 2, 20096, 3, 32, (2, 2, 0, 2, 0), "real H100_SXM"),
            ("3g.40gb", 9, 3, 4, 40448, 2, 60, (3, 3, 0, 3, 0), "real H100_SXM (39.38 GiB on AWS p5)"),
            ("4g.40gb", 5, 4, 4, 40448, 1, 64, (4, 4, 0, 4, 0), "real H100_SXM"),
            ("7g.80gb", 0, 7, 8, 81152, 1, 132, (8, 7, 0, 7, 1), "real H100_SXM (verbatim excerpt)"),
        ],
    },
    {
        "id": "H100-NVL", "architecture": "hopper", "memory_slices": 8, "compute_slices": 7,
        "smi_name": "NVIDIA H100 NVL", "pci_device_id": "0x2321", "lgipp": "smi/lgipp_a100_40gb.txt",
        "source": "rows real (mig-catalog.yaml H100-NVL-94GB: H100_NVL, driver 560.35.03)",
        "profiles": [
            ("1g.12gb", 19, 1, 1, 11008, 7, 16, (1, 1, 0, 1, 0), "real H100_NVL"),
            ("1g.12gb+me", 20, 1, 1, 11008, 1, 16, (1, 1, 0, 1, 1), "real H100_NVL"),
            ("1g.24gb", 15, 1, 2, 22144, 4, 26, (1, 1, 0, 1, 0), "real H100_NVL"),
            ("2g.24gb", 14, 2, 2, 22144, 3, 32, (2, 2, 0, 2, 0), "real H100_NVL"),
            ("3g.47gb", 9, 3, 4, 47488, 2, 60, (3, 3, 0, 3, 0), "real H100_NVL"),
            ("4g.47gb", 5, 4, 4, 47488, 1, 64, (4, 4, 0, 4, 0), "real H100_NVL"),
            ("7g.94gb", 0, 7, 8, 95360, 1, 132, (8, 7, 0, 7, 1), "real H100_NVL"),
        ],
    },
    {
        "id": "H200-141GB", "architecture": "hopper", "memory_slices": 8, "compute_slices": 7,
        "smi_name": "NVIDIA H200", "pci_device_id": "0x2335", "placements": P8, "placements_source": P8_INFERRED,
        "source": "rows real (mig-catalog.yaml H200-141GB: UG, H200_120 = NVIDIA/mig-parted #120); row 0 also "
                  "checked against the verbatim line tests/data/sim/lgip_h200_141gb_row.txt; placements inferred",
        "profiles": [
            ("1g.18gb", 19, 1, 1, 16384, 7, 16, (1, 1, 0, 1, 0), "real H200_120"),
            ("1g.18gb+me", 20, 1, 1, 16384, 1, 16, (1, 1, 0, 1, 1), "real H200_120"),
            ("1g.35gb", 15, 1, 2, 33024, 4, 26, (1, 1, 0, 1, 0), "real H200_120"),
            ("2g.35gb", 14, 2, 2, 33024, 3, 32, (2, 2, 0, 2, 0), "real H200_120"),
            ("3g.71gb", 9, 3, 4, 71168, 2, 60, (3, 3, 0, 3, 0), "real H200_120"),
            ("4g.71gb", 5, 4, 4, 71168, 1, 64, (4, 4, 0, 4, 0), "real H200_120"),
            ("7g.141gb", 0, 7, 8, 143104, 1, 132, (8, 7, 0, 7, 1), "real H200_120 (verbatim line)"),
        ],
    },
    {
        "id": "GH200-96GB", "architecture": "hopper", "memory_slices": 8, "compute_slices": 7,
        "smi_name": "NVIDIA GH200-96GB", "pci_device_id": "0x233D", "unknown_identity": ("smi_name",),
        "placements": P8, "placements_source": P8_INFERRED,
        "source": "rows real (mig-catalog.yaml GH200-96GB: GH200_96); placements inferred; the product name is "
                  "not in the reference (placeholder)",
        "profiles": [
            ("1g.12gb", 19, 1, 1, 11264, 7, 16, (1, 1, 0, 1, 0), "real GH200_96"),
            ("1g.12gb+me", 20, 1, 1, 11264, 1, 16, (1, 1, 0, 1, 1), "real GH200_96"),
            ("1g.24gb", 15, 1, 2, 23552, 4, 26, (1, 1, 0, 1, 0), "real GH200_96"),
            ("2g.24gb", 14, 2, 2, 23552, 3, 32, (2, 2, 0, 2, 0), "real GH200_96"),
            ("3g.48gb", 9, 3, 4, 47616, 2, 60, (3, 3, 0, 3, 0), "real GH200_96"),
            ("4g.48gb", 5, 4, 4, 47616, 1, 64, (4, 4, 0, 4, 0), "real GH200_96"),
            ("7g.96gb", 0, 7, 8, 95232, 1, 132, (8, 7, 0, 7, 1), "real GH200_96"),
        ],
    },
    {
        "id": "GH200-144GB", "architecture": "hopper", "memory_slices": 8, "compute_slices": 7,
        "smi_name": "NVIDIA GH200-144GB", "pci_device_id": "0x2348", "unknown_identity": ("smi_name",),
        "placements": P8, "placements_source": P8_INFERRED,
        "source": "mig-catalog.yaml GH200-144GB-HBM3e: rows 19/20/15/14 real (GH200_144 = mig-parted PR #139); "
                  "rows 9/5/0 INFERRED (names from the mig-parted config only; max count from the 8-slice family; "
                  "MiB, SM and engines unknown - placeholders); placements inferred",
        "profiles": [
            ("1g.18gb", 19, 1, 1, 17920, 7, 16, (1, 1, 0, 1, 0), "real GH200_144"),
            ("1g.18gb+me", 20, 1, 1, 17920, 1, 16, (1, 1, 0, 1, 1), "real GH200_144"),
            ("1g.36gb", 15, 1, 2, 36096, 4, 26, (1, 1, 0, 1, 0), "real GH200_144"),
            ("2g.36gb", 14, 2, 2, 36096, 3, 32, (2, 2, 0, 2, 0), "real GH200_144"),
            ("3g.72gb", 9, 3, 4, 72192, 2, 48, (0, 0, 0, 0, 0), "inferred (name only)", PLACEHOLDER_ROW),
            ("4g.72gb", 5, 4, 4, 72192, 1, 64, (0, 0, 0, 0, 0), "inferred (name only)", PLACEHOLDER_ROW),
            ("7g.144gb", 0, 7, 8, 144384, 1, 112, (0, 0, 0, 0, 0), "inferred (name only)", PLACEHOLDER_ROW),
        ],
    },
    {
        "id": "B200", "architecture": "blackwell", "memory_slices": 8, "compute_slices": 7,
        "smi_name": "NVIDIA B200", "pci_device_id": "0x2901", "unknown_identity": ("smi_name",),
        "placements": P8, "placements_source": P8_INFERRED,
        "source": "mig-catalog.yaml B200-180GB: rows 19/20/15/14 real (B200_166 = mig-parted PR #166; PR #187 prints "
                  "1g.23gb as 20.50 GiB); rows 9/5/0 doc (UG Table 9: name, max count, CE; MiB, SM, DEC/ENC/JPEG/OFA "
                  "unknown - placeholders); placements inferred; the product name is 'not verified'",
        "profiles": [
            ("1g.23gb", 19, 1, 1, 22528, 7, 18, (2, 1, 0, 1, 0), "real B200_166"),
            ("1g.23gb+me", 20, 1, 1, 22528, 1, 18, (2, 1, 0, 1, 1), "real B200_166"),
            ("1g.45gb", 15, 1, 2, 45312, 4, 30, (2, 1, 0, 1, 0), "real B200_166"),
            ("2g.45gb", 14, 2, 2, 45312, 3, 36, (4, 2, 0, 2, 0), "real B200_166 (UG says DEC 1 / JPEG 1)"),
            ("3g.90gb", 9, 3, 4, 90624, 2, 54, (6, 0, 0, 0, 0), "doc UG Table 9", PLACEHOLDER_BUT_CE),
            ("4g.90gb", 5, 4, 4, 90624, 1, 72, (8, 0, 0, 0, 0), "doc UG Table 9", PLACEHOLDER_BUT_CE),
            ("7g.180gb", 0, 7, 8, 181248, 1, 126, (16, 0, 0, 0, 0), "doc UG Table 9", PLACEHOLDER_BUT_CE),
        ],
    },
]
