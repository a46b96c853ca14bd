"""Backtest on a history built by hand, where every number of the answer is worked out below.

Instance memory from NVIDIA's `nvidia-smi mig -lgip` on A100-SXM4-40GB (docs/mig-geometry.md): 1g.5gb
4864 MiB, 1g.10gb and 2g.10gb 9856 MiB, 3g.20gb 19968 MiB; 14 SMs per compute slice, 98 SMs in all.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from migplan.adapters.solver import PulpSolver
from migplan.catalog import builtin_catalog
from migplan.cli.app import app
from migplan.errors import InputError
from migplan.history.backtest import backtest, durations, parse_rule
from migplan.history.rollup import Window
from migplan.history.samples import Place, Sample

A100 = Place(host="h1", gpu=0, gpu_model="A100-SXM4-40GB")
T0 = 1_790_000_000.0
TEST0 = T0 + 100 * 60  # the test window starts after 100 one-minute training samples


def _history() -> list[Sample]:
    s = []
    for i in range(100):  # training: a at 8000 MiB (compute unknown), b at 3000 MiB and 10% of the GPU
        s.append(Sample(T0 + i * 60, "a", 8000.0, None, A100))
        s.append(Sample(T0 + i * 60, "b", 3000.0, 10.0, A100))
    for i in range(100):  # test: a's last 10 samples at 9900 MiB; b's last 10 at 50% of the GPU
        s.append(Sample(TEST0 + i * 60, "a", 9900.0 if i >= 90 else 8000.0, None, A100))
        s.append(Sample(TEST0 + i * 60, "b", 3000.0, 50.0 if i >= 90 else 10.0, A100))
        s.append(Sample(TEST0 + i * 60, "c", 100.0, None, A100))  # never seen in training
    return s


@pytest.fixture(scope="module")
def result():
    h = _history()
    return backtest(h, h, builtin_catalog(), [parse_rule("max+10%"), parse_rule("max+25%")], PulpSolver(),
                    train_window=Window(T0, TEST0, end_open=True), test_window=Window(TEST0, None))


def _w(result, name, rule):
    return next(w for w in result.workloads if w.workload == name and w.rule == rule)


def test_max_plus_10_gives_a_a_10gb_instance_and_10_oom_minutes(result) -> None:
    a = _w(result, "a", "max+10%")
    # need = max(ceil(8000 x 1.1) = 8800, 8000 + 512) = 8800 MiB -> a 9856 MiB instance (1g.10gb or 2g.10gb)
    assert a.need_mib == 8800 and a.instance_mib == 9856 and a.status == "placed"
    assert a.train_peak_mib == 8000 and a.test_peak_mib == 9900
    assert a.oom_samples == 10 and a.oom_minutes == 10.0  # 10 samples of one minute above 9856 MiB
    assert a.unused_mib_mean == pytest.approx(90 * (9856 - 8000) / 100)  # 1670.4
    assert a.compute_unknown_samples == 100 and a.compute_short_samples == 0


def test_max_plus_25_gives_a_20gb_instance_and_no_oom(result) -> None:
    a = _w(result, "a", "max+25%")
    # need = max(10000, 8512) = 10000 MiB: above 9856, so 3g.20gb (19968 MiB)
    assert a.need_mib == 10000 and a.instance_mib == 19968 and a.instance_slices == 3
    assert a.oom_samples == 0 and a.oom_minutes == 0
    assert a.unused_mib_mean == pytest.approx((90 * (19968 - 8000) + 10 * (19968 - 9900)) / 100)  # 11778.0


def test_compute_slices_short_when_the_test_uses_more_compute(result) -> None:
    b = _w(result, "b", "max+10%")
    # 10% of 98 SMs = 9.8 SMs -> 1 slice; need = max(3300, 3512) = 3512 MiB -> 1g.5gb (4864 MiB, 1 slice)
    assert b.instance_mib == 4864 and b.instance_slices == 1 and b.oom_samples == 0
    # 50% of 98 = 49 SMs -> ceil(49 / 14) = 4 slices: 3 short, in the 10 samples at 50%
    assert b.compute_short_samples == 10 and b.compute_short_slices_max == 3


def test_totals_and_gpus_the_plan_uses(result) -> None:
    t10, t25 = result.totals
    assert (t10.rule, t10.oom_workloads, t10.oom_samples, t10.oom_minutes) == ("max+10%", 1, 10, 10.0)
    assert (t25.rule, t25.oom_workloads, t25.oom_samples) == ("max+25%", 0, 0)
    assert t10.placed == t25.placed == 2 and t10.test_samples == 200
    assert t10.memory_allocated_mib == 9856 + 4864 and t25.memory_allocated_mib == 19968 + 4864
    assert t10.gpus_used == 1 and t25.gpus_used == 1  # both fit one A100 (10gb/20gb + 5gb)
    assert t10.headroom_rule == "+10%, at least 512 MiB"


def test_a_workload_only_in_the_test_window_is_not_sized(result) -> None:
    assert result.untrained == {"c": 100}
    assert {w.workload for w in result.workloads} == {"a", "b"}


def test_durations_cap_gaps_at_the_median_interval() -> None:
    assert durations([0, 60, 120, 1000]) == [60, 60, 60, 60]  # the 880 s gap is not 880 s out of memory
    assert durations([5.0]) == [60.0]


@pytest.mark.parametrize(("text", "stat", "headroom", "floor"), [
    ("max+10%", "max", 0.10, 512), ("p99+25%", "p99", 0.25, 512), ("max+0%+0MiB", "max", 0.0, 0),
    ("p95", "p95", 0.0, 512), ("max+12.5%+1024MiB", "max", 0.125, 1024)])
def test_parse_rule(text, stat, headroom, floor) -> None:
    r = parse_rule(text)
    assert (r.memory_percentile, r.headroom, r.headroom_min_mib) == (stat, headroom, floor)


@pytest.mark.parametrize("text", ["max+10", "p90+10%", "max-10%", "", "max+10%+5GiB"])
def test_parse_rule_refuses_bad_rules(text) -> None:
    with pytest.raises(InputError, match="sizing rule"):
        parse_rule(text)


def test_backtest_cli_compares_rules_from_a_csv(tmp_path) -> None:
    path = tmp_path / "h.csv"
    lines = ["timestamp,workload,memory_used_mib,gpu_model"]
    lines += [f"{T0 + i * 60:.0f},a,8000,A100-SXM4-40GB" for i in range(100)]
    lines += [f"{TEST0 + i * 60:.0f},a,{9900 if i >= 90 else 8000},A100-SXM4-40GB" for i in range(100)]
    path.write_text("\n".join(lines) + "\n")
    res = CliRunner().invoke(app, ["backtest", "--csv", str(path), "--train", "100m", "--test", "100m",
                                   "--policy", "max+10%", "--policy", "max+25%", "-o", "json"])
    assert res.exit_code == 0, res.output
    import json

    doc = json.loads(res.stdout)
    got = {t["rule"]: (t["oom_samples"], t["oom_minutes"]) for t in doc["totals"]}
    assert got == {"max+10%": (10, 10.0), "max+25%": (0, 0.0)}


def test_backtest_cli_needs_a_gpu_model_when_the_history_has_none(tmp_path) -> None:
    path = tmp_path / "h.csv"
    path.write_text("timestamp,workload,memory_used_mib\n" + "".join(f"{T0 + i * 60:.0f},a,100\n" for i in range(10)))
    res = CliRunner().invoke(app, ["backtest", "--csv", str(path), "--train", "5m", "--test", "5m"])
    assert res.exit_code == 2 and "--gpu-model" in res.stderr
    res = CliRunner().invoke(app, ["backtest", "--csv", str(path), "--train", "5m", "--test", "5m",
                                   "--gpu-model", "A30"])
    assert res.exit_code == 0, res.output


def test_the_backtest_benchmark_runs_on_a_tiny_history() -> None:
    from bench.backtest import RULES, history, run

    rows = run(history("spikes", 2, seed=1))
    assert [r["rule"] for r in rows] == list(RULES) and all(r["workloads"] == 2 for r in rows)


def test_each_workload_is_sized_on_the_model_it_was_measured_on() -> None:
    """A fleet of two models: the planner must not size an A100 workload on an H100 instance (which packs
    better) or the other way round; the instance it would have got is on its own GPU model."""
    h100 = Place(host="h2", gpu=0, gpu_model="H100-SXM5-80GB")
    s = []
    for i in range(100):
        s.append(Sample(T0 + i * 60, "chat", 18000.0, None, A100))
        s.append(Sample(T0 + i * 60, "infer", 36000.0, None, h100))
        s.append(Sample(TEST0 + i * 60, "chat", 18000.0, None, A100))
        s.append(Sample(TEST0 + i * 60, "infer", 36000.0, None, h100))
    r = backtest(s, s, builtin_catalog(), [parse_rule("max+10%")], PulpSolver(),
                 train_window=Window(T0, TEST0, end_open=True), test_window=Window(TEST0, None))
    got = {w.workload: (w.model, w.instance) for w in r.workloads}
    assert got["chat"][0] == "A100-SXM4-40GB" and got["infer"][0] == "H100-SXM5-80GB", got
    assert got["chat"][1] is not None and got["infer"][1] is not None  # each on an instance of its own model
    assert all(w.oom_samples == 0 for w in r.workloads)


@pytest.mark.parametrize("column", [True, False], ids=["gpu_model-column", "gpu-model-flag"])
def test_utilisation_counts_whatever_gives_the_gpu_model(tmp_path, column) -> None:
    """`--gpu-model` instead of a gpu_model column: the same util_pct rows, the same answer. 'hot' holds
    3000 MiB (a 1g.5gb instance by memory) at 60% of the A100-40GB's 98 SMs in training (58.8 SMs, 5 of
    its 14-SM slices): sized by compute it needs the 7g.40gb instance; its last 10 test samples at 90%
    (89 SMs, 7 slices) still fit it. Before the fix the flag left every sample's compute unknown: 'hot'
    got 1g.5gb and 200 unknown samples."""
    model = ",A100-SXM4-40GB" if column else ""
    lines = ["timestamp,workload,memory_used_mib,util_pct" + (",gpu_model" if column else "")]
    lines += [f"{T0 + i * 60:.0f},hot,3000,60{model}" for i in range(100)]
    lines += [f"{TEST0 + i * 60:.0f},hot,3000,{90 if i >= 90 else 60}{model}" for i in range(100)]
    path = tmp_path / "h.csv"
    path.write_text("\n".join(lines) + "\n")
    args = ["backtest", "--csv", str(path), "--train", "100m", "--test", "100m", "--policy", "max+10%", "-o", "json"]
    res = CliRunner().invoke(app, args + ([] if column else ["--gpu-model", "A100-SXM4-40GB"]))
    assert res.exit_code == 0, res.output
    import json

    doc = json.loads(res.stdout)
    (w,) = doc["workloads"]
    assert (w["instance"], w["test_samples"], w["compute_unknown_samples"], w["compute_short_samples"]) == (
        "7g.40gb@0", 101, 0, 0), w  # 101: the windows end at the last row, so the test begins a minute early
    assert doc["totals"][0]["slices_allocated"] == 7
