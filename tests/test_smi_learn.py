"""learn_model from -lgip/-lgipp, and catalog YAML rendering (round trip through the catalog reader)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from migplan import smi
from migplan.catalog import builtin_catalog, load_catalog_file
from migplan.errors import InputError

DATA = Path(__file__).parent / "data" / "smi"
CAT = builtin_catalog()


def test_learn_a100_from_verbatim_samples() -> None:
    learned = smi.learn_model((DATA / "lgip_a100_40gb.txt").read_text(), (DATA / "lgipp_a100_40gb.txt").read_text(),
                              "A100-LEARNED", architecture="ampere", smi_names=["NVIDIA A100-SXM4-40GB"])
    real = CAT.get("A100-SXM4-40GB")
    assert (learned.memory_slices, learned.compute_slices, learned.confidence) == (8, 7, "learned")
    assert len(learned.profiles) == len(real.profiles)
    for got in learned.profiles:
        want = real.profile(got.id)
        assert (got.name, got.compute_slices, got.memory_slices, got.max_count, got.sm_count, got.starts,
                got.media_extensions, got.engines) == (want.name, want.compute_slices, want.memory_slices,
                                                       want.max_count, want.sm_count, want.starts,
                                                       want.media_extensions, want.engines)
        assert abs(got.memory_mib - want.memory_mib) <= 6 and got.lgip_gib == want.lgip_gib
        assert got.ci_default_verified is False


def test_learn_refuses_inconsistent_input() -> None:
    lgip = (DATA / "lgip_a100_40gb.txt").read_text()
    with pytest.raises(smi.SmiParseError, match="no placements"):
        smi.learn_model(lgip, (DATA / "lgipp_a30.txt").read_text(), "X", architecture="ampere")
    with pytest.raises(smi.SmiParseError, match="no profiles for GPU 1"):
        smi.learn_model(lgip, (DATA / "lgipp_a100_40gb.txt").read_text(), "X", architecture="ampere", gpu=1)
    with pytest.raises(InputError, match="architecture"):
        smi.learn_model(lgip, (DATA / "lgipp_a100_40gb.txt").read_text(), "X", architecture="volta")
    lgipp = (DATA / "lgipp_a100_40gb.txt").read_text().replace("{0}:8", "{0}:4")  # no whole-GPU profile
    with pytest.raises(InputError, match="whole-GPU"):
        smi.learn_model(lgip, lgipp, "X", architecture="ampere")


def test_builtin_catalog_round_trips_through_yaml(tmp_path: Path) -> None:
    path = tmp_path / "override.yaml"
    path.write_text(smi.render_catalog_yaml(CAT.models))
    assert load_catalog_file(path) == list(CAT.models)


def test_hostile_names_are_quoted(tmp_path: Path) -> None:
    m = dataclasses.replace(CAT.get("A30"), id='X: "1" - evil', aliases=("a#b", "{c}"), source="x'y",
                            drivers='R470: "quoted" #not-a-comment')
    path = tmp_path / "o.yaml"
    path.write_text(smi.render_catalog_yaml([m]))
    (back,) = load_catalog_file(path)
    assert (back.id, back.aliases, back.source, back.drivers) == (m.id, m.aliases, m.source, m.drivers)


def test_specific_junk_raises_parse_error() -> None:
    for text in ["|   0  MIG 1g.5gb  19  -1  0:1 |\n", "|   0  MIG rm;x   19   1   0:1   |\n", "hello\n",
                 "|   0  MIG 1g.5gb  19  99999  0:1 |\n"]:
        with pytest.raises(smi.SmiParseError):
            smi.parse_gpu_instances(text)
    with pytest.raises(smi.SmiParseError):
        smi.parse_query_gpus("0, GPU-a, n, 00000000:01:00.0, -5, Enabled, Enabled, 0x20B010DE\n")
    with pytest.raises(smi.SmiParseError):
        smi.parse_query_gpus("0, GPU-a, n, 00000000:01:00.0, 5, Maybe, Enabled, 0x20B010DE\n")
    with pytest.raises(smi.SmiParseError):
        smi.parse_gi_placements("GPU  0 Profile ID 19 Placements: {0,1,-2}:1\n")
