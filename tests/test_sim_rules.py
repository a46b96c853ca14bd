"""The nvidia-smi simulator as an independent oracle: its readers of the verbatim samples, its geometry
against the reference's own numbers, and its placement rules with NVIDIA's texts. Nothing here imports
migplan (the simulator must not either: see the last test)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from sim import geometry as geo
from sim.fleet import call_sim, host_state, write_host, write_state

DATA = Path(__file__).parent / "data"
MODELS = geo.builtin_models()


def sim(path: Path, *args: str) -> tuple[int, str, str]:
    return call_sim(["nvidia-smi", *args], path)


def refused(pid: int | str, error: str) -> str:
    return (f"Unable to create a GPU instance on GPU  0 using profile {pid}: {error}\n"
            f"Failed to create GPU instances: {error}\n")  # nvidia-smi-mig.md §5 verbatim


# --- the readers and the verbatim samples -----------------------------------------------------------

def test_reader_gives_the_reference_table_for_the_a100_sample() -> None:
    """mig-geometry.md §4 lists A100-40GB as `id:name GiB SM xmax` and p8 placements; the sample must read so."""
    rows = geo.read_lgip((DATA / "smi" / "lgip_a100_40gb.txt").read_text())
    assert [(r.id, r.name, r.gib, r.sm, r.total, r.free) for r in rows] == [
        (19, "1g.5gb", "4.75", 14, 7, 7), (20, "1g.5gb+me", "4.75", 14, 1, 1), (15, "1g.10gb", "9.62", 14, 4, 4),
        (14, "2g.10gb", "9.62", 28, 3, 3), (9, "3g.20gb", "19.50", 42, 2, 2), (5, "4g.20gb", "19.50", 56, 1, 1),
        (0, "7g.40gb", "39.25", 98, 1, 1)]
    assert [(r.ce, r.dec, r.enc, r.jpeg, r.ofa) for r in rows][:2] == [(1, 0, 0, 0, 0), (1, 1, 0, 1, 1)]
    assert geo.read_lgipp((DATA / "smi" / "lgipp_a100_40gb.txt").read_text()) == [
        (0, 19, (0, 1, 2, 3, 4, 5, 6), 1), (0, 20, (0, 1, 2, 3, 4, 5, 6), 1), (0, 15, (0, 2, 4, 6), 2),
        (0, 14, (0, 2, 4), 2), (0, 9, (0, 4), 4), (0, 5, (0,), 4), (0, 0, (0,), 8)]
    assert geo.read_lgipp((DATA / "smi" / "lgipp_a30.txt").read_text()) == [
        (0, 14, (0, 1, 2, 3), 1), (0, 21, (0, 1, 2, 3), 1), (0, 5, (0, 2), 2), (0, 6, (0, 2), 2), (0, 0, (0,), 4)]


def test_reader_handles_the_81_column_variant() -> None:
    (row,) = geo.read_lgip((DATA / "smi" / "lgip_gb200_wide_head.txt").read_text())  # GB200, §3
    assert (row.name, row.id, row.free, row.total, row.gib, row.sm, row.dec, row.enc, row.ce, row.jpeg,
            row.ofa) == ("1g.23gb", 19, 7, 7, "22.00", 18, 1, 0, 2, 1, 0)


@pytest.mark.parametrize(("gib", "mib"), [("4.75", 4864), ("9.62", 9856), ("19.62", 20096), ("23.44", 24000),
                                          ("46.38", 47488), ("139.75", 143104)])
def test_gib_to_mib_uses_64_mib_steps(gib: str, mib: int) -> None:
    assert geo.mib_of_gib(gib) == mib  # pairs from mig-catalog.yaml (lgip_gib, memory_mib)
    assert f"{mib / 1024:.2f}" == gib


def test_sample_models_take_every_value_from_their_samples() -> None:
    a100, a30 = MODELS["A100-SXM4-40GB"], MODELS["A30"]
    assert a100.lgip_sample == (DATA / "smi" / "lgip_a100_40gb.txt").read_text()
    assert [(p.name, p.memory_slices, p.starts, p.memory_mib) for p in a100.profiles][::3] == [
        ("1g.5gb", 1, (0, 1, 2, 3, 4, 5, 6), 4864), ("2g.10gb", 2, (0, 2, 4), 9856), ("7g.40gb", 8, (0,), 40192)]
    assert a30.lgipp_sample == (DATA / "smi" / "lgipp_a30.txt").read_text()
    assert {p.id: p.starts for p in a30.profiles} == {14: (0, 1, 2, 3), 21: (0, 1, 2, 3), 5: (0, 2), 6: (0, 2),
                                                     0: (0,)}


@pytest.mark.parametrize(("model", "excerpt"), [("A100-SXM4-40GB", "lgip_a100_40gb_helm_excerpt.txt"),
                                                ("H100-SXM5-80GB", "lgip_h100_80gb_excerpt.txt"),
                                                ("H200-141GB", "lgip_h200_141gb_row.txt")])
def test_table_agrees_with_verbatim_excerpts(model: str, excerpt: str) -> None:
    rows = geo.read_lgip((DATA / "sim" / excerpt).read_text())
    assert rows
    m = MODELS[model]
    for r in rows:
        p = m.profile(r.id)
        assert p is not None and (p.name, p.max_count, p.gib, p.sm_count, p.dec, p.enc) == (
            r.name, r.total, r.gib, r.sm, r.dec, r.enc), r
        if r.ce is not None:
            assert (p.ce, p.jpeg, p.ofa) == (r.ce, r.jpeg, r.ofa), r


def test_a100_rows_with_nothing_free_are_the_helm_readmes(tmp_path: Path) -> None:
    """The same sample printed for a GPU holding 7 x 1g.5gb: Free 0 for 1g.5gb and 7g.40gb, byte for byte."""
    p = write_host(tmp_path / "h.json", "A100-SXM4-40GB", 1, layouts=[f"1g.5gb@{s}" for s in range(7)])
    code, out, _ = sim(p, "mig", "-lgip")
    lines = out.splitlines()
    helm = (DATA / "sim" / "lgip_a100_40gb_helm_excerpt.txt").read_text().splitlines()
    assert code == 0 and lines[5:7] == helm[:2] and lines[-3:-1] == helm[3:]
    assert {r.name: r.free for r in geo.read_lgip(out)} == {"1g.5gb": 0, "1g.5gb+me": 0, "1g.10gb": 0,
                                                           "2g.10gb": 0, "3g.20gb": 0, "4g.20gb": 0, "7g.40gb": 0}


@pytest.mark.parametrize("model", list(MODELS), ids=str)
def test_lgip_and_lgipp_read_back_as_the_model(tmp_path: Path, model: str) -> None:
    """Whatever the simulator prints (a sample or its own rows) reads back as its geometry, on every GPU."""
    m = MODELS[model]
    p = write_host(tmp_path / "h.json", model, 2)
    rows = geo.read_lgip(sim(p, "mig", "-lgip")[1])
    places = geo.read_lgipp(sim(p, "mig", "-lgipp")[1])
    for gpu in (0, 1):
        assert [(r.id, r.name, r.free, r.total, r.gib, r.sm, r.ce, r.dec, r.enc, r.jpeg, r.ofa)
                for r in rows if r.gpu == gpu] == [
            (q.id, q.name, geo.remaining(m, [], q), q.max_count, q.gib, q.sm_count, q.ce, q.dec, q.enc, q.jpeg, q.ofa)
            for q in m.profiles]
        assert [(pid, s, size) for g, pid, s, size in places if g == gpu] == [
            (q.id, q.starts, q.memory_slices) for q in m.profiles]


# --- the placement rules, with NVIDIA's text ------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("model", list(MODELS), ids=str)
def test_every_listed_start_is_accepted_and_every_other_refused(tmp_path: Path, model: str) -> None:
    m = MODELS[model]
    p = write_host(tmp_path / "h.json", model, 1)
    for prof in m.profiles:
        for start in range(m.memory_slices):
            code, out, _ = sim(p, "mig", "-cgi", f"{prof.id}:{start}")
            if start in prof.starts:
                assert code == 0, (prof.name, start, out)
                assert sim(p, "mig", "-dgi")[0] == 0
            else:  # a placement -lgipp does not list
                assert geo.conflicts(m, [(prof.id, start)])[0][0] == "bad-start"
                assert (code, out) == (2, refused(prof.id, "Invalid Argument")), (prof.name, start)


@pytest.mark.parametrize("model", list(MODELS), ids=str)
def test_overlapping_memory_slices_are_refused(tmp_path: Path, model: str) -> None:
    m = MODELS[model]
    small = min(m.profiles, key=lambda q: (q.memory_slices, q.media_extensions, q.id))
    p = write_host(tmp_path / "h.json", model, 1, layouts=[f"{m.full_profile.name}@0"])
    code, out, _ = sim(p, "mig", "-cgi", f"{small.id}:0")
    assert [r for r, _ in geo.conflicts(m, [(m.full_profile.id, 0), (small.id, 0)])][0] == "overlap"
    assert (code, out) == (23, refused(small.id, "Insufficient Resources"))
    p = write_host(tmp_path / "h2.json", model, 1, layouts=[f"{small.name}@{small.starts[0]}"])
    assert [r for r, _ in geo.conflicts(m, [(small.id, small.starts[0])] * 2)] == ["overlap"]  # nothing else
    assert sim(p, "mig", "-cgi", f"{small.name}:{small.starts[0]}") == (
        23, refused(small.name, "Insufficient Resources"), "")
    code, out, _ = sim(p, "mig", "-cgi", f"{small.id}:{small.starts[1]}")
    assert code == 0, out


def test_a_second_media_extensions_instance_is_refused(tmp_path: Path) -> None:
    """A30 has two +me profiles; one +me instance per GPU (UG), although slices and compute would fit."""
    a30 = MODELS["A30"]
    assert [r for r, _ in geo.conflicts(a30, [(21, 0), (6, 2)])] == ["media-extensions"]
    p = write_host(tmp_path / "h.json", "A30", 1, layouts=["1g.6gb+me@0"])
    assert {r.name: r.free for r in geo.read_lgip(sim(p, "mig", "-lgip")[1])}["2g.12gb+me"] == 0
    assert sim(p, "mig", "-cgi", "6:2") == (23, refused(6, "Insufficient Resources"), "")
    assert sim(p, "mig", "-cgi", "5:2")[0] == 0


@pytest.mark.parametrize(("model", "four", "three"), [("A100-SXM4-40GB", "4g.20gb", "3g.20gb"),
                                                     ("A100-SXM4-80GB", "4g.40gb", "3g.40gb")])
def test_an_older_driver_refuses_4g_next_to_3g(tmp_path: Path, model: str, four: str, three: str) -> None:
    """mig-geometry.md §1 (MIG UG "Concepts"): "prior to NVIDIA driver release R510, the combination of a (4 memory,
    4 compute) and a (4 memory, 3 compute) profile was not supported". The reference has no nvidia-smi text for
    that refusal: the simulator prints §5's generic Insufficient Resources (unverified for this case)."""
    m = MODELS[model]
    p4, p3 = m.profile(four), m.profile(three)
    assert p4 is not None and p3 is not None
    both = [(p4.id, 0), (p3.id, 4)]
    assert [r for r, _ in geo.conflicts(m, both, "470.57.02")] == ["combination"]
    assert geo.conflicts(m, both, "510.39.01") == geo.conflicts(m, both, "535.129.03") == geo.conflicts(m, both) == []
    old = write_host(tmp_path / "old.json", model, 1, layouts=[f"{four}@0"], driver_version="470.57.02")
    assert {r.name: r.free for r in geo.read_lgip(sim(old, "mig", "-lgip")[1])}[three] == 0
    assert sim(old, "mig", "-cgi", f"{p3.id}:4") == (23, refused(p3.id, "Insufficient Resources"), "")
    assert sim(old, "mig", "-cgi", f"{three}:0")[0] == 23  # no start: every placement is refused alike
    assert sim(old, "--query-gpu=index,driver_version", "--format=csv,noheader")[1] == "0, 470.57.02\n"
    assert sim(old, "mig", "-dci")[0] == 0 and sim(old, "mig", "-dgi")[0] == 0
    assert sim(old, "mig", "-cgi", f"{p3.id}:4,{p3.id}:0")[0] == 0  # 3g next to 3g: no driver rule
    new = write_host(tmp_path / "new.json", model, 1, layouts=[f"{four}@0"], driver_version="510.39.01")
    assert sim(new, "mig", "-cgi", f"{p3.id}:4")[0] == 0
    assert {r.name: r.free for r in geo.read_lgip(sim(new, "mig", "-lgip")[1])}[three] == 0  # now taken
    with pytest.raises(ValueError, match="combination: .*before driver R510"):
        host_state(model, 1, layouts=[f"{four}@0", f"{three}@4"], driver_version="470.57.02")
    assert host_state(model, 1, layouts=[f"{four}@0", f"{three}@4"])["gpus"][0]["gpu_instances"]


def test_the_driver_rule_is_stated_in_eighths_of_the_memory() -> None:
    """The UG counts the rule in the A100's 8 memory slices: an A30 (4 slices, 4g.24gb the whole GPU) and the RTX
    PRO 6000 (twelfths) are untouched, whatever the driver."""
    a30 = MODELS["A30"]
    assert geo.conflicts(a30, [(0, 0)], "460.73.01") == []
    assert geo.driver_branch("470.57.02") == geo.driver_branch("R470") == 470


CUSTOM = {"version": 1, "models": [{  # a made-up GPU where only the count and compute rules bind
    "id": "Z8", "architecture": "hopper", "memory_slices": 8, "compute_slices": 3,
    "smi_names": ["NVIDIA Z8"], "pci_device_ids": ["0x9998"], "profiles": [
        {"name": "1g.4gb", "id": 19, "compute_slices": 1, "memory_slices": 1, "memory_mib": 4096, "max_count": 2,
         "sm_count": 10, "starts": [0, 1, 2, 3, 4, 5, 6, 7]},
        {"name": "2g.8gb", "id": 14, "compute_slices": 2, "memory_slices": 2, "memory_mib": 8192, "max_count": 4,
         "sm_count": 20, "starts": [0, 2, 4, 6]},
        {"name": "3g.32gb", "id": 0, "compute_slices": 3, "memory_slices": 8, "memory_mib": 32768, "max_count": 1,
         "sm_count": 30, "starts": [0]}]}]}


def custom_host(tmp_path: Path, layout: list[str]) -> tuple[Path, Any]:
    cat = tmp_path / "z8.yaml"
    cat.write_text(yaml.safe_dump(CUSTOM))
    p = write_host(tmp_path / "h.json", "Z8", 1, layouts=layout, catalog_files=[str(cat)])
    return p, geo.find_model("Z8", [str(cat)])


def test_too_many_of_one_profile_is_refused(tmp_path: Path) -> None:
    p, z8 = custom_host(tmp_path, ["1g.4gb@0", "1g.4gb@1"])
    assert [r for r, _ in geo.conflicts(z8, [(19, 0), (19, 1), (19, 2)])] == ["max-count"]
    assert sim(p, "mig", "-cgi", "19:2") == (23, refused(19, "Insufficient Resources"), "")
    assert {r.name: (r.free, r.total) for r in geo.read_lgip(sim(p, "mig", "-lgip")[1])} == {
        "1g.4gb": (0, 2), "2g.8gb": (0, 4), "3g.32gb": (0, 1)}


def test_compute_slices_beyond_the_gpu_are_refused(tmp_path: Path) -> None:
    p, z8 = custom_host(tmp_path, ["2g.8gb@0"])
    assert [r for r, _ in geo.conflicts(z8, [(14, 0), (14, 2)])] == ["compute"]
    assert sim(p, "mig", "-cgi", "2g.8gb:2") == (23, refused("2g.8gb", "Insufficient Resources"), "")
    code, out, _ = sim(p, "mig", "-cgi", "1g.4gb,1g.4gb")  # no start given: the driver picks; 1 compute left
    assert code == 23 and out.splitlines()[1:] == refused("1g.4gb", "Insufficient Resources").splitlines()
    assert out.startswith("Successfully created GPU instance ID ")


@pytest.mark.parametrize(("layout", "rule"), [(["3g.20gb@2"], "bad-start"), (["4g.20gb@0", "2g.10gb@2"], "overlap"),
                                             (["1g.5gb+me@0", "1g.5gb+me@1"], "max-count"),
                                             (["9g.40gb@0"], "unknown-profile")])
def test_host_states_with_an_invalid_layout_are_refused(tmp_path: Path, layout: list[str], rule: str) -> None:
    with pytest.raises(ValueError, match=f"invalid layout .* on A100-SXM4-40GB: .*{rule}: "):
        host_state("A100-SXM4-40GB", 1, layouts=layout)


def test_an_unknown_model_names_the_table_to_extend() -> None:
    with pytest.raises(KeyError, match="no geometry for GPU model 'X9'.*geometry_inferred.py"):
        host_state("X9", 1)


def test_the_simulator_runs_with_migplan_unimportable(tmp_path: Path) -> None:
    """tests/sim imports nothing of migplan: a host is built and driven with `import migplan` failing."""
    state = tmp_path / "h.json"
    write_state(state, host_state("H100-SXM5-80GB", 1, layouts=["3g.40gb@4"]))
    code = f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "migplan":
            raise ImportError("migplan is blocked")
sys.meta_path.insert(0, Block())
sys.path.insert(0, {str(Path(__file__).parent)!r})
from sim.fleet import call_sim, host_state, write_state
write_state({str(tmp_path / "g.json")!r}, host_state("A30", 2, layouts=["2g.12gb@0"]))
for argv in (["mig", "-cgi", "9:0", "-C"], ["mig", "-lgip"], ["mig", "-lgipp"], ["mig", "-lgi"], ["-L"]):
    rc, out, err = call_sim(["nvidia-smi", *argv], {str(state)!r})
    assert rc == 0, (argv, out, err)
assert not [m for m in sys.modules if m.startswith("migplan")]
print("ok")
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout) == (0, "ok\n"), r.stderr
