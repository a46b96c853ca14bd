"""The catalog half of "the host is the source of truth": conservative offline numbers, driver ranges,
profile variants, engine budgets, device-id and name matching, and what `catalog learn` infers.

Numbers and their sources: tools/build_catalog.py, docs/mig-geometry.md §10, docs/sources.md §5."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from sim.fleet import call_sim, write_host

from migplan import smi
from migplan.catalog import builtin_catalog, load_catalog
from migplan.catalog.geometry import default_ci_profile, driver_version, profile_variant
from migplan.catalog.layout import Layout, check_layout, enumerate_layouts, free_placements
from migplan.commands.fleet import guess_model
from migplan.errors import CatalogError, InputError

CAT = builtin_catalog()
DATA = Path(__file__).parent / "data" / "smi"
RTX = CAT.get("RTX-PRO-6000-SE")


def L(*items: str) -> Layout:
    return Layout.parse(items)


# --- conservative memory: never more than a known driver prints -----------------------------------------

# MiB that real nvidia-smi output printed for a profile, per driver/host (sources: docs/sources.md §5).
REPORTED = {
    ("A100-SXM4-40GB", "2g.10gb"): [9856, 9984],        # UG / A100_PCIE40_OLD (older drivers print more)
    ("A100-SXM4-40GB", "7g.40gb"): [40192, 40448],
    ("A100-SXM4-80GB", "1g.10gb"): [9856, 9728],        # go-nvml mock (= UG) / A100_80_97
    ("A30", "4g.24gb"): [24000, 24064],                 # A30_535 / A30_450
    ("H100-SXM5-80GB", "1g.10gb"): [9984, 9856],        # H100_SXM / H100_GCP_525
    ("H100-SXM5-80GB", "3g.40gb"): [40448, 40320, 40192],  # H100_SXM / H100_P5 / H100_GCP_525
    ("H100-SXM5-80GB", "4g.40gb"): [40448, 40320],
    ("H100-SXM5-80GB", "1g.20gb"): [20096, 19968],     # H100_SXM / H100_GCP_525
    ("H100-SXM5-80GB", "7g.80gb"): [81152, 81024],     # H100_SXM / H100_P5
    # H100_PCIE_570, and the H100 80GB SXM sibling's smallest (H100_GCP_525, H100_P5): inferred for the PCIe board
    ("H100-PCIE-80GB", "1g.10gb"): [9984, 9856],
    # 7g.80gb: and the PCIe board's own 79.00 GiB on driver 525.125.06 (H100_PCIE_525, issue 23): the catalog carried
    # 81024 (p5's 79.12), 128 MiB more than that driver prints
    ("H100-PCIE-80GB", "7g.80gb"): [81152, 81024, 80896],
    ("H100-NVL", "1g.12gb"): [11008, 10880],            # H100_NVL / H100_NVL_ONE
    ("H100-NVL", "7g.94gb"): [95360, 94848],
    ("B200", "1g.23gb"): [22528, 20992],                # B200_166 / B200_187
    ("RTX-PRO-6000-SE", "1g.24gb"): [24192, 23680],     # RTXPRO_SE / RTXPRO_SE_CUBE
    ("RTX-PRO-6000-SE", "4g.96gb"): [97408],
    ("RTX-PRO-6000-WS", "4g.96gb"): [97280],            # RTXPRO_MAXQ
}


@pytest.mark.parametrize(("key", "seen"), sorted(REPORTED.items()), ids=lambda v: "-".join(v) if isinstance(v, tuple)
                         else None)
def test_offline_memory_is_the_smallest_any_known_driver_prints(key: tuple[str, str], seen: list[int]) -> None:
    assert CAT.get(key[0]).profile(key[1]).memory_mib == min(seen)


def test_h100_pcie_is_its_own_model() -> None:
    sxm, pcie = CAT.get("H100-SXM5-80GB"), CAT.get("H100-PCIE-80GB")
    assert "0x2331" in pcie.pci_device_ids and "0x2331" not in sxm.pci_device_ids
    assert not {a.lower() for a in sxm.aliases} & {"h100-pcie-80gb", "h100 pcie"}
    assert [p.sm_count for p in pcie.profiles] == [14, 14, 14, 30, 46, 62, 114]  # real, not the SXM's 16..132
    assert pcie.profile("1g.10gb").memory_mib == 9856 and pcie.profile("1g.10gb").confidence.startswith("real;")
    assert CAT.match("NVIDIA H100 PCIe", memory_total_mib=81559).id == "H100-PCIE-80GB"


def test_h100_pcie_never_claims_more_than_driver_525_prints() -> None:
    """79.00 GiB = 80896 MiB on driver 525.125.06 (H100_PCIE_525): the whole-GPU instance, and so the model's MIG
    memory, is at most that; the SXM board keeps its own figure (its plans must not change)."""
    pcie = CAT.get("H100-PCIE-80GB")
    assert pcie.profile("7g.80gb").memory_mib == pcie.memory_mib == 80896
    assert CAT.get("H100-SXM5-80GB").profile("7g.80gb").memory_mib == 81024
    assert max(p.memory_mib for p in pcie.profiles) <= 80896
    assert "H100_PCIE_525" in pcie.source.split(", ")


def test_h200_nvl_is_its_own_model() -> None:
    """No source shows the H200 NVL's (0x233B) MIG geometry, so it is not filed under the H200 SXM (0x2335):
    its own id, PCI id and names, marked unverified, with the SXM's rows (the least any H200 prints) but 1g.35gb,
    which NVIDIA's mig-parted creates on 0x2335 only."""
    sxm, nvl = CAT.get("H200-141GB"), CAT.get("H200-NVL")
    assert (sxm.pci_device_ids, nvl.pci_device_ids) == (("0x2335",), ("0x233b",))
    assert not {a.lower() for a in sxm.aliases} & {"h200-nvl", "h200 nvl"}
    assert not nvl.verified and nvl.confidence.startswith("UNVERIFIED")
    assert [(p.name, p.id, p.memory_mib, p.sm_count, p.starts) for p in nvl.profiles] == [
        (p.name, p.id, p.memory_mib, p.sm_count, p.starts) for p in sxm.profiles if p.name != "1g.35gb"]
    assert not nvl.has_profile("1g.35gb") and sxm.has_profile("1g.35gb")
    assert all(not p.confidence.startswith("real") for p in nvl.profiles)
    # the three profiles NVIDIA's mig-parted names for 0x233B (all-balanced) are the ones marked as named
    assert {p.name for p in nvl.profiles if p.confidence.startswith("names real")} == {"1g.18gb", "2g.35gb", "3g.71gb"}


@pytest.mark.parametrize(("name", "pci"), [("NVIDIA H200 NVL", None), ("H200 NVL", None), ("H200-NVL", None),
                                           ("h200-nvl-141gb", None), ("A renamed board", "0x233B10DE"),
                                           ("A renamed board", "0x233b")])
def test_h200_nvl_is_found_by_name_and_by_device_id(name: str, pci: str | None) -> None:
    assert CAT.match(name, pci_device_id=pci).id == "H200-NVL"
    assert CAT.match("NVIDIA H200", memory_total_mib=143771, pci_device_id="0x233510DE").id == "H200-141GB"


def test_nvidia_h200_mig_parted_config_selects_each_board_by_its_own_device_id() -> None:
    """mig-parted config-default.yaml's (@bd7160f) all-balanced entry for 'H200 141GB, H200 NVL' (both device
    ids) selects both models and places on each; its all-1g.35gb entry (0x2335 only) selects the SXM alone, and
    the NVL has no 1g.35gb to place."""
    from migplan import mig_parted, yamldoc
    from migplan.errors import CatalogError

    text = """version: v1
mig-configs:
  all-balanced:
    - device-filter: ["0x233510DE", "0x233B10DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
  all-1g.35gb:
    - device-filter: ["0x233510DE"]
      devices: all
      mig-enabled: true
      mig-devices: {"1g.35gb": 4}
"""
    configs = mig_parted.parse_spec(yamldoc.parse(text, "config.yaml"))
    sxm, nvl = CAT.get("H200-141GB"), CAT.get("H200-NVL")
    (balanced,) = configs["all-balanced"]
    assert balanced.selects(0, sxm) and balanced.selects(0, nvl)
    for model in (sxm, nvl):
        assert mig_parted.place_counts(model, balanced.counts()) is not None
    (sxm_only,) = configs["all-1g.35gb"]
    assert sxm_only.selects(0, sxm) and not sxm_only.selects(0, nvl)
    assert mig_parted.place_counts(sxm, sxm_only.counts()) is not None
    with pytest.raises(CatalogError, match="no MIG profile '1g.35gb'"):
        mig_parted.place_counts(nvl, sxm_only.counts())


def test_every_source_key_is_explained() -> None:
    sources = (Path(__file__).parents[1] / "docs" / "sources.md").read_text().split("## §5", 1)[1]
    for m in CAT:
        for key in m.source.split(", "):
            assert f"| `{key}` |" in sources, (m.id, key)


def test_every_model_documents_its_driver_range() -> None:
    for m in CAT:
        assert m.drivers and ("R4" in m.drivers or "R5" in m.drivers), m.id


# --- min_driver -------------------------------------------------------------------------------------------

def test_profiles_older_drivers_lack_carry_min_driver() -> None:
    a100, a30 = CAT.get("A100-SXM4-40GB"), CAT.get("A30")
    assert (a100.profile("1g.5gb+me").min_driver, a100.profile("1g.10gb").min_driver) == ("470", "525")
    assert (a30.profile("1g.6gb+me").min_driver, a30.profile("2g.12gb+me").min_driver) == ("470", "525")
    old = a100.for_driver("460.91.03")
    assert {p.name for p in a100.profiles} - {p.name for p in old.profiles} == {"1g.5gb+me", "1g.10gb"}
    assert a100.for_driver("525.85.12") is a100
    assert [p.name for p in a30.for_driver("470.57.02").profiles if p.variant] == ["1g.6gb+me"]
    # mig-geometry §7: 19 maximal layouts of profiles 19/14/9/5/0, "minus the R510-only 4g+3g layout, the older
    # count of 18": a driver before R510 also refuses 4g.20gb with 3g.20gb (MIG UG "Concepts")
    assert not old.has_profile("1g.10gb") and len(enumerate_layouts(old, maximal=True)) == 18
    r510 = a100.for_driver("510.39.01")
    assert not r510.has_profile("1g.10gb") and len(enumerate_layouts(r510, maximal=True)) == 19


@pytest.mark.parametrize(("text", "parsed"), [("470", (470,)), ("470.57", (470, 57)), ("R525.85.12", (525, 85, 12))])
def test_driver_versions(text: str, parsed: tuple[int, ...]) -> None:
    assert driver_version(text) == parsed


def test_a_branch_without_minor_is_not_taken_for_a_later_minor() -> None:
    p = dataclasses.replace(CAT.get("A30").profile("1g.6gb+me"), min_driver="470.57")
    assert p.offered_by("470.57.02") and p.offered_by("535") and not p.offered_by("470") and not p.offered_by("460")


OVERRIDE = """\
version: 1
models:
  - id: TEST-GPU
    architecture: blackwell
    memory_slices: 4
    compute_slices: 4
    drivers: "R575 and later"
    engine_budget: {dec: 2}
    profiles:
      - {name: 1g.24gb, id: 14, compute_slices: 1, memory_slices: 1, memory_mib: 24064, max_count: 4,
         starts: [0, 1, 2, 3], engines: {dec: 1}}
      - {name: 1g.24gb-me, id: 67, compute_slices: 1, memory_slices: 1, memory_mib: 24064, max_count: 4,
         starts: [0, 1, 2, 3], min_driver: "580.65"}
      - {name: 4g.96gb, id: 0, compute_slices: 4, memory_slices: 4, memory_mib: 96896, max_count: 1, starts: [0],
         engines: {dec: 4}}
"""


def test_override_with_the_new_fields(tmp_path: Path) -> None:
    f = tmp_path / "o.yaml"
    f.write_text(OVERRIDE)
    m = load_catalog([f]).get("TEST-GPU")
    assert (m.drivers, m.engine_budget, m.engine_limits) == ("R575 and later", (("dec", 2),), {"dec": 2})
    assert m.profile("1g.24gb-me").min_driver == "580.65" and m.profile("1g.24gb").min_driver is None
    (c,) = check_layout(m, L("1g.24gb@0", "1g.24gb@1", "1g.24gb@2"))
    assert c.rule == "engines" and "3 decoders (DEC)" in c.message and "has 2" in c.message
    assert all(check_layout(m, lay) == [] for lay in enumerate_layouts(m, profiles=["1g.24gb", "1g.24gb-me"]))
    assert smi.render_catalog_yaml([m]).count("engine_budget: {dec: 2}") == 1


@pytest.mark.parametrize(("old", "new", "message"), [
    ('min_driver: "580.65"', 'min_driver: "five"', "is not a driver version"),
    ('min_driver: "580.65"', 'min_driver: "580.65.1.2"', "is not a driver version"),
    ("engine_budget: {dec: 2}", "engine_budget: {gpu: 2}", "unknown key 'gpu'"),
    ("engine_budget: {dec: 2}", "engine_budget: {dec: -1}", "must be at least 0"),
    ('drivers: "R575 and later"', 'drivers: "R575\\u0007"', "control characters"),
])
def test_new_fields_are_validated(tmp_path: Path, old: str, new: str, message: str) -> None:
    f = tmp_path / "bad.yaml"
    assert old in OVERRIDE
    f.write_text(OVERRIDE.replace(old, new, 1))
    with pytest.raises(InputError) as err:
        load_catalog([f])
    assert message in str(err.value) and err.value.line is not None


# --- variants and engine budgets --------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "variant"), [
    ("3g.20gb", ""), ("1g.5gb+me", "+me"), ("1g.24gb+me.all", "+me.all"), ("1g.24gb-me", "-me"),
    ("4g.96gb+gfx", "+gfx"), ("1c.3g.20gb", ""), ("2g.48gb+gfx,me", "+gfx,me"),
])
def test_variant_is_parsed_from_the_name(name: str, variant: str) -> None:
    assert profile_variant(name) == variant


def test_rtx_pro_variants() -> None:
    assert {p.name: p.variant for p in RTX.profiles if p.compute_slices == 1} == {
        "1g.24gb": "", "1g.24gb+me": "+me", "1g.24gb+gfx": "+gfx", "1g.24gb+me.all": "+me.all", "1g.24gb-me": "-me"}
    assert {p.base_name for p in RTX.profiles} == {"1g.24gb", "2g.48gb", "4g.96gb"}
    assert [p.name for p in RTX.plain_profiles] == ["1g.24gb", "2g.48gb", "4g.96gb"]
    assert [p.name for p in RTX.profiles if p.media_extensions] == ["1g.24gb+me"]  # only `+me` is "the one +me"
    assert RTX.full_profile.name == "4g.96gb"
    assert RTX.engine_limits == {"ce": 4, "dec": 4, "enc": 4, "jpeg": 4, "ofa": 1}


def test_me_all_leaves_the_media_engines_to_no_one_else() -> None:
    conflicts = check_layout(RTX, L("1g.24gb+me.all@0", "1g.24gb@3"))  # the example
    assert {c.rule for c in conflicts} == {"engines"}
    assert any("5 decoders (DEC)" in c.message and "has 4" in c.message for c in conflicts)
    assert any("5 encoders (ENC)" in c.message for c in conflicts)
    assert check_layout(RTX, L("1g.24gb+me.all@0", "1g.24gb-me@3", "1g.24gb-me@6", "2g.48gb-me@6")) != []  # overlap
    assert check_layout(RTX, L("1g.24gb+me.all@0", "1g.24gb-me@3", "2g.48gb-me@6")) == []
    free = free_placements(RTX, L("1g.24gb+me.all@0"))
    assert free and all(i.profile.endswith("-me") for i in free)
    (ofa,) = [c for c in check_layout(RTX, L("1g.24gb+me@0", "2g.48gb+me.all@6")) if "OFA" in c.message]
    assert "2 optical flow accelerators" in ofa.message


def test_enumeration_keeps_the_engine_budget() -> None:
    everything = [p.name for p in RTX.profiles]
    layouts = enumerate_layouts(RTX, profiles=everything)
    assert layouts and all(check_layout(RTX, lay) == [] for lay in layouts)
    assert L("1g.24gb+me.all@0", "1g.24gb@3") not in layouts
    maximal = enumerate_layouts(RTX, profiles=everything, maximal=True)
    assert L("1g.24gb+me.all@0", "1g.24gb-me@3", "1g.24gb-me@6", "1g.24gb-me@9") in maximal
    assert L("1g.24gb+me.all@0") not in maximal
    assert len(enumerate_layouts(RTX, maximal=True)) == 5  # plain profiles: the A30-like 4-slice family


def test_a30_one_media_extension_is_also_the_engine_budget() -> None:
    a30 = CAT.get("A30")
    rules = {c.rule for c in check_layout(a30, L("1g.6gb+me@0", "2g.12gb+me@2"))}
    assert rules == {"media-extensions", "engines"}  # JPEG 1 + 1 and OFA 1 + 1 of a 4g.24gb's 1 each
    assert all(check_layout(a30, lay) == [] for lay in enumerate_layouts(a30, profiles=[p.name for p in a30.profiles]))


def test_budgets_only_where_a_source_gives_the_whole_gpu_engines() -> None:
    assert CAT.get("B200").engine_limits == {"ce": 16}  # UG Table 9; 7g DEC/JPEG/OFA printed by no source
    assert CAT.get("GH200-144GB").engine_limits == {}
    assert CAT.get("H100-SXM5-80GB").engine_limits == {"ce": 8, "dec": 7, "enc": 0, "jpeg": 7, "ofa": 1}


# --- inferred SM counts -----------------------------------------------------------------------------------

def test_inferred_sm_counts_are_conservative_not_the_mock() -> None:
    gh = CAT.get("GH200-144GB")
    assert [(gh.profile(n).sm_count, gh.profile(n).confidence) for n in ("3g.72gb", "4g.72gb", "7g.144gb")] == [
        (60, "inferred"), (64, "inferred"), (132, "inferred")]  # the real Hopper values (GH200-96GB, H100, H200)
    b200 = CAT.get("B200")
    assert [(b200.profile(n).sm_count, b200.profile(n).confidence) for n in ("3g.90gb", "4g.90gb", "7g.180gb")] == [
        (67, "inferred"), (72, "inferred"), (148, "inferred")]  # Hopper ratios on B200's real 18/30/36
    assert [b200.profile(n).sm_count for n in ("1g.23gb", "1g.45gb", "2g.45gb")] == [18, 30, 36]  # real


# --- device ids and names ---------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "pci"), [("NVIDIA PG506-232", "0x20B610DE"), ("NVIDIA H20", "0x232910DE")])
def test_device_ids_without_real_output_are_not_gh200(name: str, pci: str) -> None:
    assert all(pci[:6].lower() not in m.pci_device_ids for m in CAT)
    with pytest.raises(CatalogError) as err:
        CAT.match(name, memory_total_mib=97871, pci_device_id=pci)
    assert "is not in the MIG catalog" in str(err.value) and "catalog learn" in str(err.value)


def test_gh200_keeps_its_own_ids_and_gains_its_name() -> None:
    gh = CAT.get("GH200-96GB")
    assert set(gh.pci_device_ids) == {"0x2342", "0x233d"} and gh.architecture == "hopper"
    assert CAT.match("Renamed", pci_device_id="0x233D10DE").id == "GH200-96GB"
    assert CAT.match("NVIDIA GH200 480GB").id == "GH200-96GB"


def test_a800_is_its_own_unverified_model() -> None:
    a800, a100 = CAT.get("A800-80GB"), CAT.get("A100-SXM4-80GB")
    assert not a800.verified and a800.architecture == "ampere" and a800.reset_required_for_mode
    assert {"0x20f3", "0x20f5"} <= set(a800.pci_device_ids) and not {"0x20f3", "0x20f5"} & set(a100.pci_device_ids)
    assert [(p.name, p.memory_mib) for p in a800.profiles] == [(p.name, p.memory_mib) for p in a100.profiles]
    assert {p.confidence for p in a800.profiles} == {"inferred"}


def test_an_override_with_a_shipped_name_wins(tmp_path: Path) -> None:
    f = tmp_path / "o.yaml"
    f.write_text(OVERRIDE.replace("    drivers:", '    smi_names: ["NVIDIA RTX PRO 6000 Blackwell Server Edition"]\n'
                                  "    drivers:"))
    assert load_catalog([f]).match("NVIDIA RTX PRO 6000 Blackwell Server Edition").id == "TEST-GPU"
    assert CAT.match("NVIDIA RTX PRO 6000 Blackwell Server Edition").id == "RTX-PRO-6000-SE"


# --- catalog learn ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("name", "arch"), [
    ("NVIDIA B200", "blackwell"), ("NVIDIA B100", "blackwell"), ("NVIDIA B300 SXM6 AC", "blackwell"),
    ("NVIDIA GB200", "blackwell"), ("NVIDIA GB300", "blackwell"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "blackwell"),
    ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "blackwell"),
    ("NVIDIA H100 80GB HBM3", "hopper"), ("NVIDIA H100 PCIe", "hopper"), ("NVIDIA H100 NVL", "hopper"),
    ("NVIDIA H200", "hopper"), ("NVIDIA H20", "hopper"), ("NVIDIA H800", "hopper"), ("NVIDIA GH200 480GB", "hopper"),
    ("NVIDIA A100-SXM4-40GB", "ampere"), ("A100-SXM4-40GB", "ampere"), ("NVIDIA A30", "ampere"),
    ("NVIDIA A800 80GB PCIe", "ampere"), ("NVIDIA PG506-232", "ampere"),
    ("NVIDIA A10", None), ("NVIDIA L40S", None), ("NVIDIA RTX 4090", None),
])
def test_guess_architecture_from_the_product_name(name: str, arch: str | None) -> None:
    assert guess_model(name)[1] == arch


def _sim_tables(tmp_path: Path, model: str) -> tuple[str, str]:
    p = write_host(tmp_path / "h.json", model, 1)
    return call_sim(["nvidia-smi", "mig", "-lgip"], p)[1], call_sim(["nvidia-smi", "mig", "-lgipp"], p)[1]


def test_learn_rtx_pro_variants_and_engine_budget(tmp_path: Path) -> None:
    lgip, lgipp = _sim_tables(tmp_path, "RTX-PRO-6000-SE")  # the simulator's own -lgip/-lgipp (tests/sim)
    name = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    model_id, arch = guess_model(name)
    assert arch == "blackwell"
    learned = smi.learn_model(lgip, lgipp, model_id, architecture=arch, smi_names=[name], driver="580.105.08")
    assert (learned.memory_slices, learned.compute_slices) == (12, 4)
    assert {p.name: p.variant for p in learned.profiles if p.compute_slices == 2} == {
        "2g.48gb": "", "2g.48gb+gfx": "+gfx", "2g.48gb+me.all": "+me.all", "2g.48gb-me": "-me"}
    assert learned.engine_limits == RTX.engine_limits
    assert learned.profile("1g.24gb+me.all").engines == RTX.profile("1g.24gb+me.all").engines
    assert {c.rule for c in check_layout(learned, L("1g.24gb+me.all@0", "1g.24gb@3"))} == {"engines"}
    assert [p.name for p in learned.plain_profiles] == ["1g.24gb", "2g.48gb", "4g.96gb"]
    assert {p.name: p.ci_default_id for p in learned.plain_profiles} == {"1g.24gb": 0, "2g.48gb": 1, "4g.96gb": 3}
    assert "580.105.08" in learned.drivers


def test_learned_default_ci_of_the_double_memory_1g(tmp_path: Path) -> None:
    # Hopper: CI profile 7 (1_SLICE_REV1), as the real GH200 run printed; Ampere: 0 (never seen), unverified.
    (created,) = smi.parse_actions((DATA / "cci_default_gh200_1g24gb.txt").read_text())
    assert (created.profile_name, created.profile_id) == ("1g.24gb", 7)
    gh = CAT.get("GH200-96GB").profile("1g.24gb")
    assert (gh.ci_default_id, gh.ci_default_verified) == (created.profile_id, True)
    lgip, lgipp = _sim_tables(tmp_path, "H100-SXM5-80GB")
    hopper = smi.learn_model(lgip, lgipp, "H", architecture="hopper")
    assert (hopper.profile(15).ci_default_id, hopper.profile(15).ci_default_verified) == (7, False)
    assert [hopper.profile(i).ci_default_id for i in (19, 20, 14, 9, 5, 0)] == [0, 0, 1, 2, 3, 4]
    ampere = smi.learn_model((DATA / "lgip_a100_40gb.txt").read_text(), (DATA / "lgipp_a100_40gb.txt").read_text(),
                             "A", architecture="ampere")
    assert ampere.profile(15).ci_default_id == 0 == CAT.get("A100-SXM4-40GB").profile(15).ci_default_id
    assert not CAT.get("A100-SXM4-40GB").profile(15).ci_default_verified
    assert default_ci_profile("blackwell", 1, 2, 1) == 7 and default_ci_profile("blackwell", 1, 3, 3) == 0


def test_learn_h100_pcie_from_the_simulator(tmp_path: Path) -> None:
    lgip, lgipp = _sim_tables(tmp_path, "H100-PCIE-80GB")
    learned = smi.learn_model(lgip, lgipp, "H100-PCIe", architecture=guess_model("NVIDIA H100 PCIe")[1] or "")
    assert [p.sm_count for p in learned.profiles] == [p.sm_count for p in CAT.get("H100-PCIE-80GB").profiles]
    assert learned.sm_total == 114
