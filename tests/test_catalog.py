"""The shipped catalog: every model loads, matches what nvidia-smi prints, and overrides work."""

from __future__ import annotations

from pathlib import Path

import pytest

from migplan.catalog import builtin_catalog, load_catalog
from migplan.errors import CatalogError, InputError

CAT = builtin_catalog()

# Figures from real nvidia-smi -lgip output (docs/mig-geometry.md §4; sources per model in models.yaml).
EXPECTED = {
    "A30": ("ampere", 4, 4, {"1g.6gb": 14, "1g.6gb+me": 21, "2g.12gb": 5, "2g.12gb+me": 6, "4g.24gb": 0}),
    "A100-SXM4-40GB": ("ampere", 7, 8, {"1g.5gb": 19, "1g.5gb+me": 20, "1g.10gb": 15, "2g.10gb": 14,
                                        "3g.20gb": 9, "4g.20gb": 5, "7g.40gb": 0}),
    "A100-SXM4-80GB": ("ampere", 7, 8, {"1g.10gb": 19, "3g.40gb": 9, "7g.80gb": 0}),
    "H100-SXM5-80GB": ("hopper", 7, 8, {"1g.10gb": 19, "1g.20gb": 15, "2g.20gb": 14, "7g.80gb": 0}),
    "H100-PCIE-80GB": ("hopper", 7, 8, {"1g.10gb": 19, "1g.10gb+me": 20, "1g.20gb": 15, "7g.80gb": 0}),
    "A800-80GB": ("ampere", 7, 8, {"1g.10gb": 19, "7g.80gb": 0}),
    "RTX-PRO-6000-SE": ("blackwell", 4, 12, {"1g.24gb": 14, "1g.24gb+me": 21, "1g.24gb+gfx": 47,
                                             "1g.24gb+me.all": 65, "1g.24gb-me": 67, "2g.48gb": 5, "2g.48gb+gfx": 35,
                                             "2g.48gb+me.all": 64, "2g.48gb-me": 66, "4g.96gb": 0, "4g.96gb+gfx": 32}),
    "RTX-PRO-6000-WS": ("blackwell", 4, 12, {"1g.24gb": 14, "1g.24gb+me.all": 65, "4g.96gb": 0}),
    "H100-NVL": ("hopper", 7, 8, {"1g.12gb": 19, "3g.47gb": 9, "7g.94gb": 0}),
    "H200-141GB": ("hopper", 7, 8, {"1g.18gb": 19, "7g.141gb": 0}),
    "H200-NVL": ("hopper", 7, 8, {"1g.18gb": 19, "2g.35gb": 14, "3g.71gb": 9, "7g.141gb": 0}),  # no 1g.35gb
    "GH200-96GB": ("hopper", 7, 8, {"1g.12gb": 19, "7g.96gb": 0}),
    "GH200-144GB": ("hopper", 7, 8, {"1g.18gb": 19, "7g.144gb": 0}),
    "B200": ("blackwell", 7, 8, {"1g.23gb": 19, "7g.180gb": 0}),
}


@pytest.mark.parametrize("model_id", sorted(EXPECTED))
def test_model_profiles(model_id: str) -> None:
    arch, compute, memory, ids = EXPECTED[model_id]
    m = CAT.get(model_id)
    assert (m.architecture, m.compute_slices, m.memory_slices) == (arch, compute, memory)
    for name, pid in ids.items():
        assert m.profile(name).id == pid
        assert m.profile(pid).name == name
        assert m.profile(f"MIG {name}").id == pid


def test_unverified_models_are_marked() -> None:
    assert {m.id for m in CAT if not m.verified} == {"GH200-144GB", "B200", "A800-80GB", "RTX-PRO-6000-WS",
                                                          "H200-NVL"}


def test_real_values_from_lgip() -> None:
    a100 = CAT.get("A100-SXM4-40GB")
    p = a100.profile("1g.10gb")
    assert (p.memory_mib, p.lgip_gib, p.max_count, p.starts) == (9856, "9.62", 4, (0, 2, 4, 6))
    assert a100.profile("3g.20gb").starts == (0, 4)
    assert a100.profile("7g.40gb").sm_count == 98
    h100 = CAT.get("H100-SXM5-80GB")
    assert h100.profile("1g.20gb").sm_count == 26  # not 16*g: real output (docs/mig-geometry.md §4)
    assert CAT.get("H100-PCIE-80GB").profile("1g.20gb").sm_count == 14  # the PCIe board: real H100_PCIE_570
    assert CAT.get("H100-PCIE-80GB").sm_total == 114
    assert h100.profile("1g.20gb").ci_default_id == 7  # GH200/Hopper: 1_SLICE_REV1
    assert CAT.get("A30").profile("2g.12gb").starts == (0, 2)


@pytest.mark.parametrize(("name", "memory", "pci", "expected"), [
    ("NVIDIA A100-SXM4-40GB", 40960, None, "A100-SXM4-40GB"),
    ("A100-SXM4-40GB", 40537, None, "A100-SXM4-40GB"),  # R450 drivers print no 'NVIDIA ' prefix
    ("NVIDIA A100-PCIE-40GB", None, None, "A100-SXM4-40GB"),
    ("NVIDIA A100 80GB PCIe", 81920, None, "A100-SXM4-80GB"),
    ("NVIDIA A100-SXM4-80GB", 81251, None, "A100-SXM4-80GB"),
    ("NVIDIA H100 80GB HBM3", 81559, None, "H100-SXM5-80GB"),
    ("NVIDIA H100 PCIe", 81559, "0x233110DE", "H100-PCIE-80GB"),
    ("H100 renamed", None, "0x233110DE", "H100-PCIE-80GB"),
    ("NVIDIA GH200 480GB", 97871, "0x233D10DE", "GH200-96GB"),
    ("NVIDIA A800 80GB PCIe", 81920, None, "A800-80GB"),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 97887, "0x2BB510DE", "RTX-PRO-6000-SE"),
    ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 97887, None, "RTX-PRO-6000-WS"),
    ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", None, None, "RTX-PRO-6000-WS"),
    ("NVIDIA B200", None, None, "B200"),
    ("NVIDIA H100 NVL", 95830, None, "H100-NVL"),
    ("NVIDIA H200", 143771, None, "H200-141GB"),
    ("NVIDIA A30", 24576, None, "A30"),
    ("Some Future Name", None, "0x233510DE", "H200-141GB"),
    ("NVIDIA H200 NVL", 143771, None, "H200-NVL"),  # the alias 'H200 NVL' (the name was never seen printed)
    ("Some Future Name", None, "0x233B10DE", "H200-NVL"),
    ("GH200 renamed", None, "0x2342", "GH200-96GB"),
])
def test_match_what_nvidia_smi_reports(name: str, memory: int | None, pci: str | None, expected: str) -> None:
    assert CAT.match(name, memory_total_mib=memory, pci_device_id=pci).id == expected


def test_unknown_model_says_how_to_add_it() -> None:
    with pytest.raises(CatalogError) as err:
        CAT.match("NVIDIA RTX 4090", memory_total_mib=24564, pci_device_id="0x268410DE")
    assert "--catalog" in str(err.value) and "RTX 4090" in str(err.value)


def test_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(CatalogError, match="1g.5gb"):
        CAT.get("A100-SXM4-40GB").profile("5g.30gb")


OVERRIDE = """\
version: 1
models:
  - id: RTX-PRO-6000
    architecture: blackwell
    memory_slices: 4
    compute_slices: 4
    smi_names: ["NVIDIA RTX PRO 6000 Blackwell Server Edition"]
    profiles:
      - {name: 1g.24gb, id: 14, compute_slices: 1, memory_slices: 1, memory_mib: 24064, max_count: 4,
         starts: [0, 1, 2, 3]}
      - {name: 2g.48gb, id: 5, compute_slices: 2, memory_slices: 2, memory_mib: 48384, max_count: 2, starts: [0, 2]}
      - {name: 4g.96gb, id: 0, compute_slices: 4, memory_slices: 4, memory_mib: 96896, max_count: 1, starts: [0]}
  - id: A30
    architecture: ampere
    memory_slices: 4
    compute_slices: 4
    profiles:
      - {name: 4g.24gb, id: 0, compute_slices: 4, memory_slices: 4, memory_mib: 24000, max_count: 1, starts: [0]}
"""


def test_override_adds_and_replaces_models(tmp_path: Path) -> None:
    f = tmp_path / "extra.yaml"
    f.write_text(OVERRIDE)
    cat = load_catalog([f])
    assert cat.match("NVIDIA RTX PRO 6000 Blackwell Server Edition").id == "RTX-PRO-6000"
    assert [p.name for p in cat.get("A30").profiles] == ["4g.24gb"]
    assert len(cat) == len(CAT) + 1


@pytest.mark.parametrize(("old", "new", "message"), [
    ("starts: [0, 2]}", "starts: [0, 3]}", "runs past memory slice 3"),
    ("memory_mib: 48384", "memory_mib: -5", "must be at least 1"),
    ("compute_slices: 2,", "compute_slices: 9,", "exceeds the model's 4 compute slices"),
    ("architecture: blackwell", "architecture: volta", "unknown architecture"),
    ("max_count: 2,", "max_count: 2, colour: red,", "unknown key 'colour'"),
    ("id: 5,", "id: 14,", "profile id 14 listed twice"),
    ("memory_slices: 4\n    compute_slices: 4\n    smi", "memory_slices: four\n    compute_slices: 4\n    smi",
     "expected an integer"),
])
def test_override_is_validated_strictly(tmp_path: Path, old: str, new: str, message: str) -> None:
    f = tmp_path / "bad.yaml"
    assert old in OVERRIDE
    f.write_text(OVERRIDE.replace(old, new, 1))
    with pytest.raises(InputError) as err:
        load_catalog([f])
    text = str(err.value)
    assert message in text and str(f) in text
    assert err.value.line is not None


# --- the cache of the shipped catalog (migplan/catalog/cache.py) ----------------------------------------

def _data() -> bytes:
    from migplan.catalog.loader import BUILTIN_PATH

    return Path(BUILTIN_PATH).read_bytes()


def test_cache_round_trip_equals_the_strict_parse(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from migplan.catalog import cache
    from migplan.catalog.loader import parse_builtin

    monkeypatch.setenv("MIGPLAN_CACHE_DIR", str(tmp_path))
    data = _data()
    parsed = parse_builtin(data)
    assert cache.load(data) is None  # nothing written yet
    cache.store(data, parsed)
    (written,) = tmp_path.glob("catalog-*.json")
    assert cache.load(data) == parsed  # every field, types included (tuples stay tuples)
    assert cache.load(data + b"\n# changed\n") is None  # other data: another key, never the stale file
    cache.store(data + b"\n", parsed)
    assert not written.exists()  # the older key's file was removed


def test_cache_ignores_a_corrupt_foreign_or_shared_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from migplan.catalog import cache
    from migplan.catalog.loader import parse_builtin

    monkeypatch.setenv("MIGPLAN_CACHE_DIR", str(tmp_path))
    data = _data()
    cache.store(data, parse_builtin(data))
    (path,) = tmp_path.glob("catalog-*.json")
    good = path.read_text()
    path.write_text(good[: len(good) // 2])  # truncated
    assert cache.load(data) is None
    path.write_text(good.replace('"memory_slices"', '"memory_slicez"', 1))  # another shape
    assert cache.load(data) is None
    path.write_text(good)
    os.chmod(path, 0o666)  # writable by others: not trusted
    assert cache.load(data) is None
    os.chmod(path, 0o644)
    assert cache.load(data) is not None


def test_unwritable_or_disabled_cache_still_loads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from migplan.catalog import cache
    from migplan.catalog.loader import builtin_catalog, parse_builtin

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("MIGPLAN_CACHE_DIR", str(blocker / "cache"))  # cannot be created: no error, no cache
    cache.store(_data(), parse_builtin(_data()))
    assert cache.load(_data()) is None
    builtin_catalog.cache_clear()
    try:
        assert builtin_catalog().models == CAT.models
        monkeypatch.setenv("MIGPLAN_CACHE_DIR", "none")
        assert cache.cache_dir() is None
        builtin_catalog.cache_clear()
        assert builtin_catalog().models == CAT.models
    finally:
        builtin_catalog.cache_clear()


def test_cache_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from migplan.catalog import cache

    monkeypatch.delenv("MIGPLAN_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.cache_dir() == str(tmp_path / "migplan")


def test_lookup_index_agrees_with_a_linear_scan() -> None:
    from migplan.catalog.catalog import normalise_name

    for m in CAT:
        for name in (m.id, *m.aliases, *m.smi_names, m.id.lower(), f"NVIDIA {m.id}"):
            key = normalise_name(name)
            by_id = [x for x in CAT if normalise_name(x.id) == key]
            named = [x for x in CAT if key in {normalise_name(n) for n in (x.id, *x.aliases, *x.smi_names)}]
            assert CAT.find(name) == (by_id or named)[0], name
    assert CAT.find("no such GPU") is None
