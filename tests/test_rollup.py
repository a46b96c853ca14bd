"""Rollup: exact nearest-rank percentiles, compute converted to a share of the whole GPU, one profile
per workload across hosts, notes, and profiles that the planner reads back.

SM counts from NVIDIA's `nvidia-smi mig -lgip` on A100-SXM4-40GB: 3g.20gb 42 SMs, 1g.5gb 14, the
whole GPU under MIG (7g.40gb) 98."""

from __future__ import annotations

import math
import random

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from migplan import yamldoc
from migplan.catalog import builtin_catalog
from migplan.cli.app import app
from migplan.history.rollup import FEW_SAMPLES, Counts, Window, rollup
from migplan.history.samples import Place, Sample
from migplan.profiles import UNKNOWN_COMPUTE, load_profiles, parse_profiles

CAT = builtin_catalog()
MIG3 = Place(host="h1", gpu=0, gpu_model="A100-SXM4-40GB", mig_profile="3g.20gb", mig_start=4)
WHOLE = Place(host="h2", gpu=1, gpu_model="A100-SXM4-40GB")


def _nearest_rank(values: list[int], p: float) -> int:
    """The oracle: sort, take the ceil(p/100 n)-th smallest."""
    s = sorted(values)
    return s[max(1, math.ceil(p / 100 * len(s))) - 1]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=50_000), min_size=1, max_size=20_000))
def test_counts_give_the_exact_nearest_rank_percentiles(values) -> None:
    c = Counts()
    for v in values:
        c.add(v)
    assert c.nearest_rank([50, 95, 99]) == [_nearest_rank(values, p) for p in (50, 95, 99)]
    assert c.max() == max(values) and c.total == len(values)


def test_counts_memory_grows_with_distinct_values_not_samples() -> None:
    c = Counts()
    for i in range(200_000):
        c.add(1000 + i % 7)
    assert c.distinct() == 7 and c.total == 200_000


def test_memory_percentiles_by_nearest_rank_rounded_up() -> None:
    rnd = random.Random(7)
    mem = [rnd.uniform(1000, 2000) for _ in range(1000)]
    samples = [Sample(1000.0 + i, "w", m, None, MIG3) for i, m in enumerate(mem)]
    (p,) = rollup(samples, CAT).profiles
    whole = [math.ceil(m) for m in mem]
    assert p.document["memory_mib"] == {"p50": _nearest_rank(whole, 50), "p95": _nearest_rank(whole, 95),
                                        "p99": _nearest_rank(whole, 99), "max": max(whole)}
    assert p.workload.memory.max == math.ceil(max(mem))


def test_instance_utilisation_becomes_a_share_of_the_whole_gpu() -> None:
    # 50% of a 3g.20gb (42 SMs) = 21 SMs = 21/98 of the GPU; 100% of the whole GPU = 1
    samples = [Sample(1000.0 + i, "w", 100.0, 50.0, MIG3) for i in range(100)]
    samples += [Sample(2000.0 + i, "v", 100.0, 100.0 if i == 99 else 10.0, WHOLE) for i in range(100)]
    w, v = (p.document for p in rollup(samples, CAT).profiles[::-1])
    assert w["compute"]["max"] == pytest.approx(math.ceil(21 / 98 * 10_000) / 10_000)  # 0.2143
    assert v["compute"] == {"p50": 0.1, "p95": 0.1, "p99": 0.1, "max": 1.0}


def test_unmeasured_compute_stays_unknown_and_is_omitted() -> None:
    samples = [Sample(1000.0 + i, "w", 100.0, None, MIG3) for i in range(100)]
    samples += [Sample(1000.0 + i, "x", 100.0, 50.0, Place(host="h", gpu_model="Z9000", mig_profile="3g.20gb"))
                for i in range(100)]
    w, x = rollup(samples, CAT).profiles
    assert "compute" not in w.document and w.workload.compute is UNKNOWN_COMPUTE
    assert any("compute unknown: no sample measured utilisation" in n for n in w.notes)
    assert "compute" not in x.document and "gpu_model" not in x.document["observed"]
    assert any("'Z9000' is not in the catalog" in n for n in x.notes)


def test_a_workload_on_several_hosts_is_one_profile_with_its_places() -> None:
    samples = [Sample(1000.0 + i, "w", 500.0, None, WHOLE) for i in range(70)]
    samples += [Sample(5000.0 + i, "w", 900.0, None, MIG3) for i in range(30)]
    rolled = rollup(samples, CAT)
    (p,) = rolled.profiles
    obs = p.document["observed"]
    assert (obs["host"], obs["gpu"], obs["mig_profile"], obs["mig_start"]) == ("h1", 0, "3g.20gb", 4)  # latest
    assert [(x["host"], x["samples"]) for x in obs["places"]] == [("h1", 30), ("h2", 70)]
    assert obs["first_seen"] == "1970-01-01T00:16:40Z" and obs["samples"] == 100
    assert list(rolled.documents()) == ["h1"]


def test_few_samples_are_noted() -> None:
    samples = [Sample(1000.0 + i, "w", 500.0, 5.0, WHOLE) for i in range(FEW_SAMPLES - 1)]
    (p,) = rollup(samples, CAT).profiles
    assert any(n.startswith("rests on few samples") for n in p.notes)
    samples.append(Sample(99_999.0, "w", 500.0, 5.0, WHOLE))
    (p,) = rollup(samples, CAT).profiles
    assert not any(n.startswith("rests on few samples") for n in p.notes)


def test_only_samples_in_the_window_count() -> None:
    samples = [Sample(float(t), "w", float(t), None, WHOLE) for t in range(0, 1000)]
    rolled = rollup(samples, CAT, Window(100, 199))
    (p,) = rolled.profiles
    assert p.document["memory_mib"]["max"] == 199 and p.document["observed"]["samples"] == 100
    assert (rolled.samples_seen, rolled.samples_in_window) == (1000, 100)
    assert rollup(samples, CAT, Window(100, 199, end_open=True)).profiles[0].workload.memory.max == 198


def test_documents_parse_as_profiles(tmp_path) -> None:
    samples = [Sample(1000.0 + i, "w", 500.5, 30.0, MIG3) for i in range(100)]
    samples += [Sample(1000.0 + i, "u", 500.5, None, WHOLE) for i in range(100)]
    for host, doc in rollup(samples, CAT).documents().items():
        (tmp_path / f"{host}.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    pset = load_profiles(tmp_path)
    by = {w.name: w for w in pset}
    assert by["w"].memory.max == 501 and by["w"].observed.mig_profile == "3g.20gb"
    assert by["w"].compute.known and by["w"].observed.places[0].samples == 100
    assert not by["u"].compute.known and by["u"].compute.percentile("p95") == 0.0


def test_end_to_end_csv_import_then_propose(tmp_path) -> None:
    csv = tmp_path / "m.csv"
    rows = ["timestamp,workload,host,gpu,memory_used_mib,util_pct,gpu_model"]
    for i in range(120):
        t = 1_793_491_200 + 60 * i
        rows.append(f"{t},chat,gpu1,0,{15000 + i},20,A100-SXM4-40GB")
        rows.append(f"{t},embed,gpu1,1,{3000 + i % 5},,A100-SXM4-40GB")
    csv.write_text("\n".join(rows) + "\n")
    out = tmp_path / "profiles"
    res = CliRunner().invoke(app, ["profiles", "import", str(csv), "--out", str(out)])
    assert res.exit_code == 0, res.output
    inv = tmp_path / "inv.yaml"
    inv.write_text("version: 1\nhosts:\n  gpu1:\n    address: 192.0.2.1\n    gpus:\n"
                   "      - {index: 0, model: A100-SXM4-40GB}\n      - {index: 1, model: A100-SXM4-40GB}\n")
    res = CliRunner().invoke(app, ["propose", "-i", str(inv), "-p", str(out), "-o", "json", "--allow-disrupt"])
    assert res.exit_code == 0, res.output
    import json

    plan = json.loads(res.stdout)
    by = {w["name"]: w for w in plan["workloads"]}
    # chat peaks at 15119 MiB: need max(ceil(16630.9), 15631) = 16631 MiB
    assert by["chat"]["peak_mib"] == 15119 and by["chat"]["memory_mib"] == 16631 and by["chat"]["status"] == "placed"
    assert by["embed"]["peak_mib"] == 3004 and by["embed"]["status"] == "placed"  # compute unknown: memory decides
    assert plan["summary"]["below_peak"] == 0


def test_rolled_documents_are_strictly_valid_profiles() -> None:
    samples = [Sample(1000.0 + i, "w", 10.0, 1.0, MIG3) for i in range(3)]
    docs = rollup(samples, CAT).documents()
    node = yamldoc.parse(yaml.safe_dump(docs["h1"], sort_keys=False), "x.yaml")
    assert node is not None
    (w,) = parse_profiles(node)
    assert w.observed.notes[0].startswith("rests on few samples") and w.observed.compute_samples == 3


def test_profiles_build_from_the_on_host_history_store(tmp_path) -> None:
    from migplan.adapters.history_store import HistoryStore

    with HistoryStore(tmp_path / "history.sqlite") as store:
        for run in range(3):
            with store.run(1_793_491_200.0 + 60 * run, "test") as writer:
                writer.add([Sample(1_793_491_200.0 + 60 * run, "w", 1000.0 + run, 50.0, MIG3, "nvml"),
                            Sample(1_793_491_200.0 + 60 * run, "v", 10.0, None, WHOLE, "nvml")])
    out = tmp_path / "profiles"
    res = CliRunner().invoke(app, ["profiles", "build", "--history", str(tmp_path), "--out", str(out)])
    assert res.exit_code == 0, res.output
    by = {w.name: w for w in load_profiles(out)}
    assert by["w"].memory.max == 1002 and by["w"].observed.samples == 3 and by["w"].observed.host == "h1"
    assert not by["v"].compute.known
    assert sorted(p.name for p in out.iterdir()) == ["h1.yaml", "h2.yaml"]


def test_profiles_build_from_a_missing_store_is_exit_2(tmp_path) -> None:
    res = CliRunner().invoke(app, ["profiles", "build", "--history", str(tmp_path / "none.sqlite"), "--dry-run"])
    assert res.exit_code == 2, res.output


def test_profiles_show_marks_unknown_compute(tmp_path) -> None:
    docs = rollup([Sample(1000.0 + i, "u", 10.0, None, WHOLE) for i in range(3)], CAT).documents()
    (tmp_path / "h2.yaml").write_text(yaml.safe_dump(docs["h2"], sort_keys=False))
    res = CliRunner().invoke(app, ["profiles", "show", "-p", str(tmp_path)])
    assert res.exit_code == 0 and res.stdout.splitlines()[2].split()[7] == "?", res.output
    res = CliRunner().invoke(app, ["profiles", "show", "-p", str(tmp_path), "-o", "json"])
    import json

    assert json.loads(res.stdout)[0]["compute"] is None


def test_compute_from_several_models_is_a_share_of_the_latest_model() -> None:
    # 100% of an A30 (MIG off: 56 SMs, the 4g.24gb's count) then 50% of an A100-40GB (98 SMs): as shares of the
    # A100 (where it runs now), 56/98 and 49/98
    a30 = Place(host="h3", gpu=0, gpu_model="A30")
    samples = [Sample(1000.0 + i, "w", 100.0, 100.0, a30) for i in range(50)]
    samples += [Sample(2000.0 + i, "w", 100.0, 50.0, WHOLE) for i in range(50)]
    (p,) = rollup(samples, CAT).profiles
    c = p.document["compute"]
    assert c["max"] == pytest.approx(math.ceil(56 / 98 * 10_000) / 10_000)
    assert c["p50"] == pytest.approx(0.5) and p.document["observed"]["gpu_model"] == "A100-SXM4-40GB"
    assert any("ran on 2 GPU models: compute is a share of A100-SXM4-40GB" in n for n in p.notes)


A30 = Place(host="h3", gpu=0, gpu_model="A30")  # MIG off: 56 SMs


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(min_value=0, max_value=100)), min_size=1, max_size=9_000))
def test_compute_percentiles_over_two_models_are_the_nearest_ranks_of_each_samples_share(rows) -> None:
    """The documented definition, per sample in whole integers: SMs on a 1/100 grid rounded up, then a share of
    the reference model (the A100, 98 SMs, where the last sample ran) in 1/10000 rounded up, at most 1."""
    samples = [Sample(1000.0 + i, "w", 100.0, float(u), A30 if on_a30 else WHOLE) for i, (on_a30, u) in enumerate(rows)]
    samples.append(Sample(1e6, "w", 100.0, 1.0, WHOLE))
    grid = [u * (56 if on_a30 else 98) for on_a30, u in rows] + [98]  # util% x SMs = SMs x 100
    shares = [min(10_000, -(-g * 100 // 98)) for g in grid]  # ceil(g / 100 / 98 x 10000)
    (p,) = rollup(samples, CAT).profiles
    assert p.document["compute"] == {k: _nearest_rank(shares, q) / 10_000 for k, q in
                                     (("p50", 50), ("p95", 95), ("p99", 99), ("max", 100))}
    assert p.document["observed"]["compute_samples"] == len(samples)


def test_a_profiles_workload_says_what_its_document_says() -> None:
    samples = [Sample(1000.0 + 60 * i, "w", 100.0 + i, 20.0, MIG3) for i in range(70)]
    samples += [Sample(1000.0 + 60 * i, "v", 50.0, None, WHOLE) for i in range(5)]
    v, w = rollup(samples, CAT).profiles
    for p in (v, w):
        d, o, wl = p.document, p.document["observed"], p.workload
        assert (wl.name, wl.source, wl.observed.notes) == (p.name, "rollup", p.notes)
        assert (wl.observed.host, wl.observed.gpu, wl.observed.gpu_model, wl.observed.mig_profile,
                wl.observed.mig_start) == (o.get("host"), o.get("gpu"), o.get("gpu_model"), o.get("mig_profile"),
                                           o.get("mig_start"))
        assert (wl.observed.window_start, wl.observed.window_end, wl.observed.samples, wl.observed.first_seen,
                wl.observed.last_seen, wl.observed.compute_samples) == \
            (o["window"]["start"], o["window"]["end"], o["samples"], o["first_seen"], o["last_seen"],
             o["compute_samples"])
        assert vars(wl.memory) == d["memory_mib"]
    assert v.workload.compute == UNKNOWN_COMPUTE and "compute" not in v.document
    assert (w.workload.compute.p50, w.workload.compute.p99, w.workload.compute.max) == \
        (w.document["compute"]["p50"], w.document["compute"]["p99"], w.document["compute"]["max"])
    assert w.workload.compute.known and w.workload.observed.mig_profile == "3g.20gb"
    assert w.workload is w.workload  # made once
