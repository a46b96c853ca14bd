"""Memory sizing: the observed peak by default, the margin every plan reports, the headroom rule in
words, fractional MiB rounded up and compute p99 used when asked."""

from __future__ import annotations

import copy
import dataclasses
import json
import textwrap
from pathlib import Path

import pytest
from helpers import migplan_cli
from planner_fixtures import A100, CAT, EXACT, fleet, gpu, profiles, run, wl

from migplan.documents import load_plan, write_plan
from migplan.errors import InputError
from migplan.planner import Policy, build_problem, plan_from_dict, plan_to_dict
from migplan.planner.demand import demand_of, headroom_rule, memory_warning
from migplan.profiles import ComputeStats, MemoryStats, load_profiles

ROOT = Path(__file__).resolve().parent.parent
INV = str(ROOT / "inventory" / "example.yaml")
PROF = str(ROOT / "profiles" / "example")
GIB = 1024


@pytest.fixture()
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    return migplan_cli(monkeypatch, tmp_path)


def _spiky(name: str = "spiky", p99: int = 10 * GIB, **kw: object):  # type: ignore[no-untyped-def]
    """p99 10 GiB (or `p99`), peak 15 GiB."""
    w = wl(name, p99, **kw)  # type: ignore[arg-type]
    return dataclasses.replace(w, memory=MemoryStats(p99 - 2 * GIB, p99 - GIB, p99, 15 * GIB))


# --- the default statistic is the observed peak -----------------------------------------------------

def test_default_sizes_from_the_observed_peak() -> None:
    assert Policy().memory_percentile == "max"
    w = _spiky()
    d = demand_of(w, Policy(), CAT.get(A100), CAT.get(A100))
    assert d.memory_mib >= 15 * GIB * 1.1 and d.memory_mib == 16896 and d.peak_mib == 15 * GIB
    p = run(fleet(gpu("h", 0)), profiles(w), Policy())
    (placed,) = p.workloads
    assert placed.status == "placed" and placed.instance_mib is not None
    assert placed.instance_mib >= 15 * GIB + 1536  # peak + 10% (more than the 512 MiB floor)
    assert placed.margin_mib == placed.instance_mib - 15 * GIB > 0 and placed.peak_mib == 15 * GIB
    assert p.summary.below_peak == 0 and p.summary.memory_warning is None


def test_p99_sizing_is_below_the_peak_and_says_so() -> None:
    # p99 8 GiB + 10% = 9012 MiB fits a 1g.10gb (9856 MiB), 5504 MiB short of the 15 GiB it peaked at
    p = run(fleet(gpu("h", 0)), profiles(_spiky(p99=8 * GIB)), Policy(memory_percentile="p99"))
    (w,) = p.workloads
    assert w.memory_mib == 9012 and w.instance is not None and w.instance_mib == 9856
    assert w.margin_mib == 9856 - 15 * GIB
    assert p.summary.below_peak == 1 and p.summary.min_margin_mib == w.margin_mib
    assert p.summary.memory_warning == ("sized below the observed peak: 1 workload would have exceeded its instance "
                                        "in the history (memory sized from p99, not max)")


def test_whole_gpu_margin_uses_the_gpus_memory() -> None:
    w = wl("big", 30000, host="h", gpu_idx=0)  # runs on the MIG-disabled GPU and stays there
    p = run(fleet(gpu("h", 0)), profiles(w), Policy())
    (placed,) = p.workloads
    full = CAT.get(A100)
    assert placed.instance is None and placed.kept
    assert placed.instance_mib == full.memory_mib == full.full_profile.memory_mib
    assert placed.margin_mib == full.memory_mib - 30000


def test_unplaced_workloads_have_no_margin() -> None:
    p = run(fleet(gpu("h", 0)), profiles(wl("huge", 90000)), Policy())
    (w,) = p.workloads
    assert w.status == "unplaced" and w.instance_mib is None and w.margin_mib is None and w.peak_mib == 90000
    assert p.summary.below_peak == 0 and p.summary.min_margin_mib is None


# --- the example fleet ----------------------------------------------------------------------------

def test_example_fleet_default_leaves_nothing_below_its_peak(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("propose", "-i", INV, "-p", PROF, "-o", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    s = doc["summary"]
    assert doc["policy"]["memory_percentile"] == "max"
    assert s["below_peak"] == 0 and s["memory_warning"] is None and s["min_margin_mib"] > 0
    assert s["headroom_rule"] == "+10%, at least 512 MiB"
    placed = [w for w in doc["workloads"] if w["status"] == "placed"]
    assert placed and all(w["margin_mib"] == w["instance_mib"] - w["peak_mib"] >= 0 for w in placed)
    table = cli("propose", "-i", INV, "-p", PROF)
    assert "memory sized from max (observed peak), headroom +10%, at least 512 MiB; below peak 0" in table.stdout
    assert "sized below the observed peak" not in table.stdout


def test_example_fleet_p50_always_warns(cli) -> None:  # type: ignore[no-untyped-def]
    # the example's peaks are within 8% of p50, so the default 10% headroom still covers every one: the
    # warning is there (a non-peak statistic is in use) and counts 0
    r = cli("propose", "-i", INV, "-p", PROF, "--memory-percentile", "p50")
    assert r.exit_code == 0, r.output
    assert ("warning: sized below the observed peak: 0 workloads would have exceeded their instance in the "
            "history (memory sized from p50, not max)") in r.stdout


P50_BARE = ("--memory-percentile", "p50", "--headroom", "0", "--headroom-min-mib", "0")


def test_example_fleet_p50_is_below_the_peak_and_the_table_warns(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("propose", "-i", INV, "-p", PROF, *P50_BARE, "-o", "json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    s = doc["summary"]
    n = s["below_peak"]
    below = sorted(w["name"] for w in doc["workloads"] if w["status"] == "placed" and w["margin_mib"] < 0)
    assert n > 0 and n == len(below) and s["min_margin_mib"] < 0 and s["headroom_rule"] == "none"
    table = cli("propose", "-i", INV, "-p", PROF, *P50_BARE)
    assert table.exit_code == 0, table.output
    who = "1 workload would have exceeded its" if n == 1 else f"{n} workloads would have exceeded their"
    assert (f"warning: sized below the observed peak: {who} instance in the "
            "history (memory sized from p50, not max)") in table.stdout
    assert "Below their observed memory peak" in table.stdout and f"below peak {n}," in table.stdout


# --- the headroom rule in words ------------------------------------------------------------------

@pytest.mark.parametrize(("headroom", "floor", "text"), [
    (0.10, 512, "+10%, at least 512 MiB"),
    (0.0, 512, "+0%, at least 512 MiB"),  # --headroom 0 alone keeps the floor
    (0.10, 0, "+10%"),
    (0.125, 256, "+12.5%, at least 256 MiB"),
    (0.0, 0, "none"),
])
def test_headroom_rule_text(headroom: float, floor: int, text: str) -> None:
    assert headroom_rule(Policy(headroom=headroom, headroom_min_mib=floor)) == text


def test_headroom_zero_still_adds_the_floor(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # the worked example of docs/planner.md: peak 1000 MiB, --headroom 0 -> 1512 MiB; with the floor off, 1000
    w = wl("small", 1000)
    assert demand_of(w, Policy(headroom=0.0), CAT.get(A100), CAT.get(A100)).memory_mib == 1512
    assert demand_of(w, Policy(headroom=0.0, headroom_min_mib=0), CAT.get(A100), CAT.get(A100)).memory_mib == 1000
    assert demand_of(w, Policy(), CAT.get(A100), CAT.get(A100)).memory_mib == 1512  # 10% is 100 < 512
    r = cli("propose", "-i", INV, "-p", PROF, "--headroom", "0", "-o", "json")
    assert r.exit_code == 0 and json.loads(r.stdout)["summary"]["headroom_rule"] == "+0%, at least 512 MiB"
    t = cli("propose", "-i", INV, "-p", PROF, "--headroom", "0")
    assert "headroom +0%, at least 512 MiB;" in t.stdout


def test_memory_warning_wording() -> None:
    assert memory_warning(Policy(), 3) is None
    assert memory_warning(Policy(memory_percentile="p95"), 0) == (
        "sized below the observed peak: 0 workloads would have exceeded their instance in the history "
        "(memory sized from p95, not max)")


# --- profiles: fractional MiB and compute p99 ----------------------------------------------------

def _profile(tmp_path: Path, memory: str, compute: str = "{p50: 0.1, p95: 0.2, max: 0.3}") -> Path:
    f = tmp_path / "p.yaml"
    f.write_text(textwrap.dedent(f"""\
        version: 1
        workloads:
          - name: w
            observed: {{gpu_model: A100-SXM4-40GB}}
            memory_mib: {memory}
            compute: {compute}
        """))
    return f


def test_fractional_mib_rounds_up(tmp_path: Path) -> None:
    (w,) = load_profiles(_profile(tmp_path, "{p50: 1000.2, p95: 1000.9, p99: 2000.0, max: 15900.0000000000001}"))
    assert w.memory == MemoryStats(1001, 1001, 2000, 15901)  # never down, exact values stay


def test_fractional_mib_still_ordered_and_bounded(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="p99 .* is below p95"):
        load_profiles(_profile(tmp_path, "{p50: 1000.2, p95: 1000.9, p99: 1000.5, max: 2000}"))
    with pytest.raises(InputError, match="memory_mib.p50: must be at least 0"):
        load_profiles(_profile(tmp_path, "{p50: -0.5, p95: 1, p99: 1, max: 1}"))
    with pytest.raises(InputError, match="memory_mib.max: must be at most 1048576"):
        load_profiles(_profile(tmp_path, "{p50: 1, p95: 1, p99: 1, max: 1048576.5}"))
    with pytest.raises(InputError, match="memory_mib.max: expected an integer or a finite number"):
        load_profiles(_profile(tmp_path, "{p50: 1, p95: 1, p99: 1, max: .nan}"))


def test_compute_p99_is_read_and_used(tmp_path: Path) -> None:
    (w,) = load_profiles(_profile(tmp_path, "{p50: 1, p95: 1, p99: 1, max: 1}",
                                  "{p50: 0.1, p95: 0.2, p99: 0.25, max: 0.9}"))
    assert w.compute == ComputeStats(p50=0.1, p95=0.2, max=0.9, p99=0.25)
    a100 = CAT.get(A100)
    d = demand_of(w, Policy(compute_percentile="p99"), a100, a100)
    assert d.compute_sm == pytest.approx(0.25 * a100.sm_total)  # p99, not max
    assert demand_of(w, Policy(compute_percentile="max"), a100, a100).compute_sm == pytest.approx(0.9 * a100.sm_total)


def test_compute_p99_is_never_silently_max(tmp_path: Path) -> None:
    (w,) = load_profiles(_profile(tmp_path, "{p50: 1, p95: 1, p99: 1, max: 1}"))  # no compute.p99 recorded
    assert w.compute.p99 is None
    with pytest.raises(InputError, match=r"no compute\.p99") as err:
        demand_of(w, Policy(compute_percentile="p99"), CAT.get(A100), CAT.get(A100))
    assert "workload 'w'" in str(err.value) and "p.yaml:3" in str(err.value)


@pytest.mark.parametrize(("compute", "message"), [
    ("{p50: 0.1, p95: 0.2, p99: 0.15, max: 0.3}", "p99 (0.15) is below p95 (0.2)"),
    ("{p50: 0.1, p95: 0.2, p99: 0.5, max: 0.3}", "max (0.3) is below p99 (0.5)"),
    ("{p50: 0.1, p95: 0.2, p99: 1.5, max: 0.3}", "compute.p99: must be at most 1"),
])
def test_compute_p99_is_checked(tmp_path: Path, compute: str, message: str) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_profiles(_profile(tmp_path, "{p50: 1, p95: 1, p99: 1, max: 1}", compute))


def test_profiles_show_labels_compute_as_a_gpu_share(cli) -> None:  # type: ignore[no-untyped-def]
    r = cli("profiles", "show", "-p", PROF)
    assert r.exit_code == 0, r.output
    assert "GPU SHARE p95" in r.stdout and "SM p95" not in r.stdout
    data = json.loads(cli("profiles", "show", "-p", PROF, "-o", "json").stdout)
    assert set(data[0]["compute"]) == {"p50", "p95", "p99", "max"}


# --- the plan document ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def margin_plan():  # type: ignore[no-untyped-def]
    st = fleet(gpu("h", 0, layout=["3g.20gb@0"]), gpu("h", 1), gpu("h", 2))
    ps = profiles(wl("a", 15000, host="h", gpu_idx=0, inst="3g.20gb@0"), _spiky("b", 8 * GIB), wl("c", 4000),
                  wl("whole", 30000, host="h", gpu_idx=2), wl("huge", 90000))
    return run(st, ps, Policy(memory_percentile="p99", headroom=0.05))


def test_plan_memory_fields_round_trip(margin_plan, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    p = margin_plan
    assert p.summary.below_peak == 1 and p.summary.memory_warning and p.summary.headroom_rule == "+5%, at least 512 MiB"
    by = {w.name: w for w in p.workloads}
    assert by["whole"].instance is None and by["whole"].instance_mib == CAT.get(A100).memory_mib
    assert by["huge"].instance_mib is None and by["b"].margin_mib is not None and by["b"].margin_mib < 0
    for name in ("plan.json", "plan.yaml"):
        write_plan(tmp_path / name, p)
        back = load_plan(tmp_path / name)
        assert back == p
        assert [(w.peak_mib, w.instance_mib, w.margin_mib) for w in back.workloads] == \
               [(w.peak_mib, w.instance_mib, w.margin_mib) for w in p.workloads]


def _placed(d: dict) -> dict:
    return next(w for w in d["workloads"] if w["status"] == "placed")


TAMPERED = {
    "margin edited": (lambda d: _placed(d).update(margin_mib=_placed(d)["margin_mib"] + 1), "margin_mib"),
    "instance MiB edited": (lambda d: _placed(d).update(instance_mib=1), "instance_mib"),
    "peak not an integer": (lambda d: _placed(d).update(peak_mib="lots"), "peak_mib"),
    "peak out of range": (lambda d: _placed(d).update(peak_mib=10**9), "peak_mib"),
    "margin out of range": (lambda d: _placed(d).update(margin_mib=-10**9), "margin_mib"),
    "unplaced with a margin": (lambda d: next(w for w in d["workloads"] if w["status"] != "placed")
                               .update(margin_mib=5), "margin_mib"),
    "below_peak hidden": (lambda d: d["summary"].update(below_peak=0), "summary.below_peak"),
    "below_peak negative": (lambda d: d["summary"].update(below_peak=-1), "summary.below_peak"),
    "least margin edited": (lambda d: d["summary"].update(min_margin_mib=7), "summary.min_margin_mib"),
    "headroom rule edited": (lambda d: d["summary"].update(headroom_rule="none"), "summary.headroom_rule"),
    "headroom rule missing": (lambda d: d["summary"].pop("headroom_rule"), "headroom_rule"),
    "headroom rule null": (lambda d: d["summary"].update(headroom_rule=None), "summary.headroom_rule"),
    "warning removed": (lambda d: d["summary"].update(memory_warning=None), "summary.memory_warning"),
    "warning multi-line": (lambda d: d["summary"].update(memory_warning="a\nb"), "summary.memory_warning"),
    "workload field missing": (lambda d: _placed(d).pop("instance_mib"), "instance_mib"),
}


@pytest.mark.parametrize("case", sorted(TAMPERED))
def test_plan_memory_fields_are_checked(margin_plan, case: str) -> None:  # type: ignore[no-untyped-def]
    mutate, where = TAMPERED[case]
    doc = copy.deepcopy(plan_to_dict(margin_plan))
    mutate(doc)
    with pytest.raises(InputError) as err:
        plan_from_dict(doc, CAT, source="plan.json")
    assert where in str(err.value)


def test_default_plan_has_no_warning_and_exact_policy_rule() -> None:
    st, ps = fleet(gpu("h", 0)), profiles(wl("x", 4000))
    p = run(st, ps, EXACT)
    assert p.summary.headroom_rule == "none" and p.summary.memory_warning is None
    assert build_problem(st, ps, CAT, EXACT).items[0].demand.peak_mib == 4000


def test_profiles_document_keeps_compute_p99(tmp_path: Path) -> None:
    from migplan.documents import write_profiles

    (w,) = load_profiles(_profile(tmp_path, "{p50: 10.5, p95: 11, p99: 12, max: 13.01}",
                                  "{p50: 0.1, p95: 0.2, p99: 0.25, max: 0.9}"))
    out = tmp_path / "again.yaml"
    write_profiles(out, [w])
    (again,) = load_profiles(out)
    assert again.compute.p99 == 0.25 and again.memory == MemoryStats(11, 11, 12, 14)
    assert dataclasses.replace(again, source="") == dataclasses.replace(w, source="")


def test_fitting_profiles_are_the_profiles_that_hold_the_demand() -> None:
    """fitting_profiles (worked out once per size band and remembered) against the definition, profile by
    profile, for demands around every profile size of every catalog model, with and without a floor."""
    import random

    from migplan.planner.demand import Demand, fitting_profiles, slices_needed
    from migplan.profiles import WHOLE_GPU

    rng = random.Random(8)
    for model in CAT.models:
        plain = sorted(model.plain_profiles, key=lambda p: (p.memory_slices, p.compute_slices, p.name))
        sizes = sorted({p.memory_mib for p in plain} | {model.memory_mib})
        floors = [None, *(p.name for p in plain[:3])]
        for _ in range(400):
            mib = max(1, rng.choice(sizes) + rng.choice([-1, 0, 1, -rng.randint(1, 5000)]))
            demand = Demand(mib, rng.uniform(0, model.sm_total * 1.1))
            floor = rng.choice(floors)
            g = slices_needed(demand, model)
            want = [p.name for p in plain if p.memory_mib >= mib and p.compute_slices >= g and (
                floor is None or (p.compute_slices >= model.profile(floor).compute_slices
                                  and p.memory_slices >= model.profile(floor).memory_slices))]
            whole = model.memory_mib >= mib and demand.compute_sm <= model.sm_total + 1e-9
            if whole and (not want or want[0] == model.full_profile.name):
                want.append(WHOLE_GPU)
            assert fitting_profiles(demand, model, floor) == tuple(want), (model.id, mib, demand.compute_sm, floor)
