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
2g profile's MiB per 2 memory slices, engines the reference does not list = 0), so that -lgip prints what
migplan expects. They are NOT evidence: tests/test_sim_agrees_with_catalog.py does not compare them. SM
counts no source prints are worked out here by the rule in SM_NOTE (conservative, inferred) and compared.

Facts the reference does not hold (newer samples found in public issues, docs and repositories; short
names as in migplan's docs/sources.md §5, where each is described): H100_PCIE_570, H100_GCP_525,
H100_NVL_ONE, RTXPRO_SE, RTXPRO_SE_CUBE, RTXPRO_MAXQ, RTXPRO_WS_PCI, GH200_NAME. Memory is the smallest a
known driver prints for the model (the simulator plays the conservative host), except where a verbatim
excerpt pins a row. `engine_budget` (optional) lists the engine kinds whose whole-GPU count is known;
without it the whole-GPU profile's engines are the budget. `"profiles": "<model id>"` copies that model's
rows (an INFERRED geometry).

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

# -lgipp of RTX PRO 6000 Blackwell (RTXPRO_SE, migplan docs/sources.md §5; not in the reference).
CUBE = "real RTXPRO_SE; MiB RTXPRO_SE_CUBE (23.12 GiB)"
CUBE_INFERRED = "real RTXPRO_SE; MiB inferred (as the other 1g rows; RTXPRO_SE 23.62)"
RTX_P12 = {14: (0, 3, 6, 9), 21: (0, 3, 6, 9), 47: (0, 3, 6, 9), 65: (0, 3, 6, 9), 67: (0, 3, 6, 9), 5: (0, 6),
           35: (0, 6), 64: (0, 6), 66: (0, 6), 0: (0,), 32: (0,)}

PLACEHOLDER_BUT_SM = ("memory_mib", "ce", "dec", "enc", "jpeg", "ofa")  # SM: SM_NOTE
PLACEHOLDER_BUT_CE_SM = ("memory_mib", "dec", "enc", "jpeg", "ofa")  # CE from the UG table, SM: SM_NOTE

# SM counts no source prints (GH200-144GB and B200 3g/4g/7g). Worked out here from the reference's real Hopper
# -lgip rows (H100 80GB, H200, GH200-96GB all print 1g 16, double-memory 1g 26, 2g 32, 3g 60, 4g 64, 7g 132):
# target = the smallest, over the model's own real rows r, of floor(SM(r) * Hopper(target) / Hopper(r)).
# GH200-144GB (real 16/26/32, as Hopper): 60/64/132. B200 (real 18/30/36): 3g min(67, 69, 67) = 67, 4g 72,
# 7g min(148, 152, 148) = 148. INFERRED (a conservative guess), not output of any GPU; the older placeholders
# (16*g, 18*g: 48/112, 54/126) were a public mock's linear values.
SM_NOTE = "inferred: the smallest Hopper-ratio value (SM_NOTE)"

# Rows whose simulated host (the driver its verbatim sample comes from) prints more than another known driver:
# (model id, profile id) -> (the least MiB, its source). The simulator still prints its own host's value; the
# offline catalog must carry the least (docs/sources.md §5 names the sources).
SMALLEST_KNOWN_MIB: dict[tuple[str, int], tuple[int, str]] = {
    ("H100-SXM5-80GB", 15): (19968, "H100_GCP_525: driver 525.125.06 prints 1g.20gb 19.50 GiB"),
    ("H100-SXM5-80GB", 0): (81024, "H100_P5: AWS p5 prints 7g.80gb 79.12 GiB"),
    ("H100-PCIE-80GB", 0): (80896, "H100_PCIE_525: an H100 PCIe on driver 525.125.06 prints 7g.80gb 79.00 GiB "
                                   "(reported in migplan issue 23; not in the reference)"),
}

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
            ("1g.10gb", 19, 1, 1, 9728, 7, 14, (1, 0, 0, 0, 0), "names real; MiB real A100_80_97 (9.50 GiB, older "
                                                                "driver; the mock's 9856 is more); DEC 0 real"),
            ("1g.10gb+me", 20, 1, 1, 9728, 1, 14, (1, 1, 0, 1, 1), "names real; MiB real A100_80_97 (9.50 GiB); "
                                                                   "engines inferred from A100-40GB"),
            ("1g.20gb", 15, 1, 2, 19968, 4, 14, (1, 1, 0, 0, 0), "names real; MiB mock; DEC inferred from A100-40GB"),
            ("2g.20gb", 14, 2, 2, 19968, 3, 28, (2, 1, 0, 0, 0), "names real; MiB mock"),
            ("3g.40gb", 9, 3, 4, 40192, 2, 42, (3, 2, 0, 0, 0), "names real; MiB mock"),
            ("4g.40gb", 5, 4, 4, 40192, 1, 56, (4, 2, 0, 0, 0), "names real; MiB mock"),
            ("7g.80gb", 0, 7, 8, 80384, 1, 98, (7, 5, 0, 1, 1), "names real; MiB mock"),
        ],
    },
    {
        "id": "A800-80GB", "architecture": "ampere", "memory_slices": 8, "compute_slices": 7,
        "smi_name": "NVIDIA A800 80GB PCIe", "pci_device_id": "0x20F3",
        "placements": P8, "placements_source": "INFERRED: copied from A100-SXM4-80GB",
        "source": "INFERRED: no A800 -lgip/-lgipp in the reference; the rows are the A100-SXM4-80GB rows above "
                  "(mig-parted's config-default.yaml applies its A100-80GB configs to the A800-80GB PCI ids "
                  "0x20F3/0x20F5, mig-catalog.yaml MIGPARTED_CFG); the name is in nvidia-smi-mig.md §2's list",
        "profiles": "A100-SXM4-80GB",
    },
    {
        "id": "H100-SXM5-80GB", "architecture": "hopper", "memory_slices": 8, "compute_slices": 7,
        "smi_name": "NVIDIA H100 80GB HBM3", "pci_device_id": "0x2330", "lgipp": "smi/lgipp_a100_40gb.txt",
        "source": "rows real (mig-catalog.yaml H100-80GB: UG, H100_SXM, H100_P5); MiB the smallest a known driver "
                  "prints, except rows 15 and 0, which are checked against the verbatim excerpt "
                  "tests/data/sim/lgip_h100_80gb_excerpt.txt (H100_SXM) and so keep its values; 'H100_GCP_525' = "
                  "Google Cloud's A3 page, driver 525.125.06 (migplan docs/sources.md §5, not in the reference)",
        "profiles": [
            ("1g.10gb", 19, 1, 1, 9856, 7, 16, (1, 1, 0, 1, 0), "real H100_SXM; MiB H100_GCP_525 (9.62; SXM 9.75)"),
            ("1g.10gb+me", 20, 1, 1, 9856, 1, 16, (1, 1, 0, 1, 1), "real H100_SXM; MiB H100_GCP_525 (9.62)"),
            ("1g.20gb", 15, 1, 2, 20096, 4, 26, (1, 1, 0, 1, 0), "real H100_SXM (verbatim excerpt; H100_GCP_525 "
                                                                 "prints 19.50: SMALLEST_KNOWN_MIB)"),
            ("2g.20gb", 14, 2, 2, 19968, 3, 32, (2, 2, 0, 2, 0), "real H100_SXM; MiB H100_GCP_525 (19.50)"),
            ("3g.40gb", 9, 3, 4, 40192, 2, 60, (3, 3, 0, 3, 0), "real H100_SXM; MiB H100_GCP_525 (39.25; p5 39.38)"),
            ("4g.40gb", 5, 4, 4, 40320, 1, 64, (4, 4, 0, 4, 0), "real H100_SXM; MiB H100_P5 (39.38)"),
            ("7g.80gb", 0, 7, 8, 81152, 1, 132, (8, 7, 0, 7, 1), "real H100_SXM (verbatim excerpt; p5 prints 79.12: "
                                                                  "SMALLEST_KNOWN_MIB)"),
        ],
    },
    {
        "id": "H100-PCIE-80GB", "architecture": "hopper", "memory_slices": 8, "compute_slices": 7,
        "smi_name": "NVIDIA H100 PCIe", "pci_device_id": "0x2331", "placements": P8, "placements_source": P8_INFERRED,
        "source": "not in the reference: a public H100 PCIe tutorial ('H100_PCIE_570', driver 570.169, migplan "
                  "docs/sources.md §5) prints -lgip with SMs 14/14/14/30/46/62/114 and 9.75/19.62/39.50/79.25 GiB; "
                  "PCI id 0x2331 from mig-catalog.yaml (MIGPARTED_CFG). MiB INFERRED: the smallest an H100 80GB "
                  "driver prints (H100_GCP_525 9.62/19.50/39.25; H100_P5 79.12), lower than this board's own",
        "profiles": [
            ("1g.10gb", 19, 1, 1, 9856, 7, 14, (1, 1, 0, 1, 0), "real H100_PCIE_570; MiB inferred (own 9984)"),
            ("1g.10gb+me", 20, 1, 1, 9856, 1, 14, (1, 1, 0, 1, 1), "real H100_PCIE_570; MiB inferred (own 9984)"),
            ("1g.20gb", 15, 1, 2, 19968, 4, 14, (1, 1, 0, 1, 0), "real H100_PCIE_570; MiB inferred (own 20096)"),
            ("2g.20gb", 14, 2, 2, 19968, 3, 30, (2, 2, 0, 2, 0), "real H100_PCIE_570; MiB inferred (own 20096)"),
            ("3g.40gb", 9, 3, 4, 40192, 2, 46, (3, 3, 0, 3, 0), "real H100_PCIE_570; MiB inferred (own 40448)"),
            ("4g.40gb", 5, 4, 4, 40192, 1, 62, (4, 4, 0, 4, 0), "real H100_PCIE_570; MiB inferred (own 40448)"),
            ("7g.80gb", 0, 7, 8, 81024, 1, 114, (8, 7, 0, 7, 1), "real H100_PCIE_570; MiB inferred (own 81152; "
                                                                  "H100_PCIE_525 prints 79.00: SMALLEST_KNOWN_MIB)"),
        ],
    },
    {
        "id": "H100-NVL", "architecture": "hopper", "memory_slices": 8, "compute_slices": 7,
        "smi_name": "NVIDIA H100 NVL", "pci_device_id": "0x2321", "lgipp": "smi/lgipp_a100_40gb.txt",
        "source": "rows real (mig-catalog.yaml H100-NVL-94GB: H100_NVL, driver 560.35.03); MiB from the smaller "
                  "-lgip in github.com/OpenNebula/docs (vGPU/MIG page, 'H100_NVL_ONE', not in the reference): "
                  "10.62/21.50/46.12/92.62 GiB where H100_NVL prints 10.75/21.62/46.38/93.12",
        "profiles": [
            ("1g.12gb", 19, 1, 1, 10880, 7, 16, (1, 1, 0, 1, 0), "real H100_NVL; MiB H100_NVL_ONE"),
            ("1g.12gb+me", 20, 1, 1, 10880, 1, 16, (1, 1, 0, 1, 1), "real H100_NVL; MiB H100_NVL_ONE"),
            ("1g.24gb", 15, 1, 2, 22016, 4, 26, (1, 1, 0, 1, 0), "real H100_NVL; MiB H100_NVL_ONE"),
            ("2g.24gb", 14, 2, 2, 22016, 3, 32, (2, 2, 0, 2, 0), "real H100_NVL; MiB H100_NVL_ONE"),
            ("3g.47gb", 9, 3, 4, 47232, 2, 60, (3, 3, 0, 3, 0), "real H100_NVL; MiB H100_NVL_ONE"),
            ("4g.47gb", 5, 4, 4, 47232, 1, 64, (4, 4, 0, 4, 0), "real H100_NVL; MiB H100_NVL_ONE"),
            ("7g.94gb", 0, 7, 8, 94848, 1, 132, (8, 7, 0, 7, 1), "real H100_NVL; MiB H100_NVL_ONE"),
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
        "id": "H200-NVL", "architecture": "hopper", "memory_slices": 8, "compute_slices": 7,
        "smi_name": "NVIDIA H200 NVL", "pci_device_id": "0x233B", "unknown_identity": ("smi_name",),
        "placements": P8, "placements_source": P8_INFERRED,
        "source": "INFERRED: the reference files the H200 NVL (PCI 0x233B) under H200-141GB (mig-catalog.yaml: "
                  "pci_device_id H200-NVL 0x233B, 'H200 NVL name not seen') and holds no -lgip of it: the rows are the "
                  "H200-141GB rows above (H200_120, an H200 SXM) but row 15 (1g.35gb), which mig-parted's "
                  "config-default.yaml (MIGPARTED_CFG) creates on 0x2335 only; the product name is a placeholder",
        "profiles": [
            ("1g.18gb", 19, 1, 1, 16384, 7, 16, (1, 1, 0, 1, 0), "inferred: H200_120's row"),
            ("1g.18gb+me", 20, 1, 1, 16384, 1, 16, (1, 1, 0, 1, 1), "inferred: H200_120's row"),
            ("2g.35gb", 14, 2, 2, 33024, 3, 32, (2, 2, 0, 2, 0), "inferred: H200_120's row"),
            ("3g.71gb", 9, 3, 4, 71168, 2, 60, (3, 3, 0, 3, 0), "inferred: H200_120's row"),
            ("4g.71gb", 5, 4, 4, 71168, 1, 64, (4, 4, 0, 4, 0), "inferred: H200_120's row"),
            ("7g.141gb", 0, 7, 8, 143104, 1, 132, (8, 7, 0, 7, 1), "inferred: H200_120's row"),
        ],
    },
    {
        "id": "GH200-96GB", "architecture": "hopper", "memory_slices": 8, "compute_slices": 7,
        "smi_name": "NVIDIA GH200 480GB", "pci_device_id": "0x233D",
        "placements": P8, "placements_source": P8_INFERRED,
        "source": "rows real (mig-catalog.yaml GH200-96GB: GH200_96); placements inferred; the product name "
                  "'NVIDIA GH200 480GB' is not in the reference: public configs and logs print it for the 96 GB "
                  "GH200 ('GH200_NAME', migplan docs/sources.md §5)",
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
                  "MiB and engines unknown - placeholders; SM the conservative Hopper value, see SM_NOTE); "
                  "placements inferred; no engine budget (the 7g engines are printed by no source)",
        "engine_budget": {},
        "profiles": [
            ("1g.18gb", 19, 1, 1, 17920, 7, 16, (1, 1, 0, 1, 0), "real GH200_144"),
            ("1g.18gb+me", 20, 1, 1, 17920, 1, 16, (1, 1, 0, 1, 1), "real GH200_144"),
            ("1g.36gb", 15, 1, 2, 36096, 4, 26, (1, 1, 0, 1, 0), "real GH200_144"),
            ("2g.36gb", 14, 2, 2, 36096, 3, 32, (2, 2, 0, 2, 0), "real GH200_144"),
            ("3g.72gb", 9, 3, 4, 72192, 2, 60, (0, 0, 0, 0, 0), "inferred (name only); SM " + SM_NOTE,
             PLACEHOLDER_BUT_SM),
            ("4g.72gb", 5, 4, 4, 72192, 1, 64, (0, 0, 0, 0, 0), "inferred (name only); SM " + SM_NOTE,
             PLACEHOLDER_BUT_SM),
            ("7g.144gb", 0, 7, 8, 144384, 1, 132, (0, 0, 0, 0, 0), "inferred (name only); SM " + SM_NOTE,
             PLACEHOLDER_BUT_SM),
        ],
    },
    {
        "id": "B200", "architecture": "blackwell", "memory_slices": 8, "compute_slices": 7,
        "smi_name": "NVIDIA B200", "pci_device_id": "0x2901", "unknown_identity": ("smi_name",),
        "placements": P8, "placements_source": P8_INFERRED,
        "source": "mig-catalog.yaml B200-180GB: rows 19/20/15/14 real (B200_166 = mig-parted PR #166 and B200_187 = "
                  "PR #187; 1g.23gb is the smaller PR #187 value, 20.50 GiB, where PR #166 prints 22.00); rows 9/5/0 "
                  "doc (UG Table 9: name, max count, CE; MiB, DEC/ENC/JPEG/OFA unknown - placeholders; SM the "
                  "conservative Hopper-ratio value, see SM_NOTE); placements inferred; the product name is 'not "
                  "verified'; engine budget: copy engines only (UG Table 9: 7g.180gb has 16)",
        "engine_budget": {"ce": 16},
        "profiles": [
            ("1g.23gb", 19, 1, 1, 20992, 7, 18, (2, 1, 0, 1, 0), "real B200_187 (B200_166: 22.00 GiB)"),
            ("1g.23gb+me", 20, 1, 1, 20992, 1, 18, (2, 1, 0, 1, 1), "real B200_187 (B200_166: 22.00 GiB)"),
            ("1g.45gb", 15, 1, 2, 45312, 4, 30, (2, 1, 0, 1, 0), "real B200_166"),
            ("2g.45gb", 14, 2, 2, 45312, 3, 36, (4, 2, 0, 2, 0), "real B200_166 (UG says DEC 1 / JPEG 1)"),
            ("3g.90gb", 9, 3, 4, 90624, 2, 67, (6, 0, 0, 0, 0), "doc UG Table 9; SM " + SM_NOTE,
             PLACEHOLDER_BUT_CE_SM),
            ("4g.90gb", 5, 4, 4, 90624, 1, 72, (8, 0, 0, 0, 0), "doc UG Table 9; SM " + SM_NOTE,
             PLACEHOLDER_BUT_CE_SM),
            ("7g.180gb", 0, 7, 8, 181248, 1, 148, (16, 0, 0, 0, 0), "doc UG Table 9; SM " + SM_NOTE,
             PLACEHOLDER_BUT_CE_SM),
        ],
    },
    {
        "id": "RTX-PRO-6000-SE", "architecture": "blackwell", "memory_slices": 12, "compute_slices": 4,
        "smi_name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "pci_device_id": "0x2BB5",
        "placements": RTX_P12, "placements_source": "real RTXPRO_SE -lgipp (twelfths: 1g 3, 2g 6, 4g 12)",
        "source": "not in the reference: a public walkthrough on an RTX PRO 6000 Blackwell Server Edition "
                  "('RTXPRO_SE', migplan docs/sources.md §5) prints -lgip, -lgipp, -cgi -C and -L; "
                  "bigstack-oss/cubecos #312 ('RTXPRO_SE_CUBE') prints the 1g rows as 23.12 GiB (the smaller, used "
                  "here) and PCI 10de:2bb5",
        "profiles": [
            ("1g.24gb", 14, 1, 3, 23680, 4, 46, (1, 1, 1, 1, 0), CUBE),
            ("1g.24gb+me", 21, 1, 3, 23680, 1, 46, (1, 1, 1, 1, 1), CUBE),
            ("1g.24gb+gfx", 47, 1, 3, 23680, 4, 46, (1, 1, 1, 1, 0), CUBE),
            ("1g.24gb+me.all", 65, 1, 3, 23680, 1, 46, (1, 4, 4, 4, 1), CUBE),
            ("1g.24gb-me", 67, 1, 3, 23680, 4, 46, (1, 0, 0, 0, 0), CUBE_INFERRED),
            ("2g.48gb", 5, 2, 6, 48512, 2, 94, (2, 2, 2, 2, 0), "real RTXPRO_SE"),
            ("2g.48gb+gfx", 35, 2, 6, 48512, 2, 94, (2, 2, 2, 2, 0), "real RTXPRO_SE"),
            ("2g.48gb+me.all", 64, 2, 6, 48512, 1, 94, (2, 4, 4, 4, 1), "real RTXPRO_SE"),
            ("2g.48gb-me", 66, 2, 6, 48512, 2, 94, (2, 0, 0, 0, 0), "real RTXPRO_SE"),
            ("4g.96gb", 0, 4, 12, 97408, 1, 188, (4, 4, 4, 4, 1), "real RTXPRO_SE"),
            ("4g.96gb+gfx", 32, 4, 12, 97408, 1, 188, (4, 4, 4, 4, 1), "real RTXPRO_SE"),
        ],
    },
    {
        "id": "RTX-PRO-6000-WS", "architecture": "blackwell", "memory_slices": 12, "compute_slices": 4,
        "smi_name": "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "pci_device_id": "0x2BB4",
        "placements": RTX_P12, "placements_source": "INFERRED: the Server Edition's -lgipp (no Workstation -lgipp)",
        "source": "not in the reference: a public blog on an RTX PRO 6000 Blackwell Max-Q Workstation Edition "
                  "('RTXPRO_MAXQ', driver 580.105.08) prints -lgip, -cgi 14 -C and -L; PCI ids 0x2BB4/0x2BB1 from "
                  "public configs ('RTXPRO_WS_PCI'; they disagree which one is the Max-Q)",
        "profiles": [
            ("1g.24gb", 14, 1, 3, 24192, 4, 46, (1, 1, 1, 1, 0), "real RTXPRO_MAXQ"),
            ("1g.24gb+me", 21, 1, 3, 24192, 1, 46, (1, 1, 1, 1, 1), "real RTXPRO_MAXQ"),
            ("1g.24gb+gfx", 47, 1, 3, 24192, 4, 46, (1, 1, 1, 1, 0), "real RTXPRO_MAXQ"),
            ("1g.24gb+me.all", 65, 1, 3, 24192, 1, 46, (1, 4, 4, 4, 1), "real RTXPRO_MAXQ"),
            ("1g.24gb-me", 67, 1, 3, 24192, 4, 46, (1, 0, 0, 0, 0), "real RTXPRO_MAXQ"),
            ("2g.48gb", 5, 2, 6, 48512, 2, 94, (2, 2, 2, 2, 0), "real RTXPRO_MAXQ"),
            ("2g.48gb+gfx", 35, 2, 6, 48512, 2, 94, (2, 2, 2, 2, 0), "real RTXPRO_MAXQ"),
            ("2g.48gb+me.all", 64, 2, 6, 48512, 1, 94, (2, 4, 4, 4, 1), "real RTXPRO_MAXQ"),
            ("2g.48gb-me", 66, 2, 6, 48512, 2, 94, (2, 0, 0, 0, 0), "real RTXPRO_MAXQ"),
            ("4g.96gb", 0, 4, 12, 97280, 1, 188, (4, 4, 4, 4, 1), "real RTXPRO_MAXQ"),
            ("4g.96gb+gfx", 32, 4, 12, 97280, 1, 188, (4, 4, 4, 4, 1), "real RTXPRO_MAXQ"),
        ],
    },
]
