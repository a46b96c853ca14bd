"""`sizing: auto` (commands/sizing.py): propose and replan size by the rule `backtest --sweep` recommends for the
fleet, calibrated from its history (a store, a CSV, Prometheus: tests/test_prometheus.py) at most once per
cool-down, kept in the state directory; the plan records the choice and its figures; with too little history, no
history, or no rule meeting the target, the default rule, and the plan says why. It never picks a rule its own
backtest shows above the target."""

from __future__ import annotations

import datetime as dt
import json
import sys
from pathlib import Path

import pytest
import yaml
from helpers import migplan_cli
from helpers.sizing_fleets import T0, truth_history, write_csv
from hypothesis import given
from hypothesis import strategies as st

from migplan.errors import InputError
from migplan.history.sweep import Figures, choose, read_record

ROOT = Path(__file__).resolve().parent.parent
INV = str(ROOT / "inventory" / "example.yaml")
PROF = str(ROOT / "profiles" / "example")


@pytest.fixture()
def cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    return migplan_cli(monkeypatch, tmp_path)


@pytest.fixture(scope="module")
def fleet_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_csv(tmp_path_factory.mktemp("auto") / "fleet.csv", truth_history())


# --- the choice itself ---------------------------------------------------------------------------------------------

_figures = st.lists(st.builds(Figures, rule=st.sampled_from(["max+10%", "max+1spread", "p99+25%", "max+60%", "max"]),
                              oom_mean=st.floats(0, 1), oom_worst=st.floats(0, 1), ratio_mean=st.floats(0, 2),
                              ratio_worst=st.floats(0, 2), splits=st.just(3)), max_size=12)


@given(_figures, st.floats(0, 1))
def test_auto_never_picks_a_rule_its_backtest_shows_above_the_target(figs: list[Figures], target: float) -> None:
    pick, reason = choose(figs, target)
    meeting = [f for f in figs if f.oom_mean <= target + 1e-12]
    if pick is None:
        assert not meeting and ("no rule" in reason)
    else:
        assert pick.oom_mean <= target + 1e-12 and pick in meeting
        assert pick.ratio_mean == min(f.ratio_mean for f in meeting)  # and the cheapest of those that do


# --- propose ---------------------------------------------------------------------------------------------------------

@pytest.mark.slow  # a sweep of 63 plans, then propose
def test_propose_sizing_auto_from_a_csv_records_the_rule_and_keeps_the_calibration(cli, fleet_csv: Path,  # type: ignore[no-untyped-def]
                                                                                   tmp_path: Path) -> None:
    state = tmp_path / "state"
    r = cli("propose", "-i", INV, "-p", PROF, "--sizing", "auto", "--sizing-history", str(fleet_csv),
            "--state-dir", str(state), "-o", "json")
    assert r.exit_code == 0, r.output
    assert "event=sizing-calibrated" in r.stderr and "event=sizing rule=max+1spread auto=yes" in r.stderr
    doc = json.loads(r.stdout)
    s = doc["sizing"]
    assert (s["mode"], s["rule"], s["recommended"], s["target_oom"], s["splits"]) == ("auto", "max+1spread", True,
                                                                                      0.01, 3)
    assert (s["oom_rate_mean"], s["oom_rate_worst"]) == (0.0, 0.0) and s["source"] == str(fleet_csv)
    assert doc["policy"]["headroom_spread"] == 1.0 and doc["policy"]["headroom"] == 0.0
    kept = json.loads((state / "sizing.json").read_text())
    cal = read_record(kept)
    assert cal.source == str(fleet_csv) and len(cal.figures) == 21 and kept["floor"] == 512
    # the same again within the cool-down: no sweep; another target: chosen again from the kept figures, no sweep
    r = cli("propose", "-i", INV, "-p", PROF, "--sizing", "auto", "--sizing-history", str(fleet_csv),
            "--state-dir", str(state), "--target-oom", "20%")
    assert r.exit_code == 0, r.output
    assert "event=sizing-calibrated" not in r.stderr
    line = next(x for x in r.stdout.splitlines() if x.startswith("sizing auto: "))
    assert line.startswith("sizing auto: ") and "at most 20% of workloads out of memory" in line
    assert f"from {fleet_csv}" in line


@pytest.mark.slow
def test_a_written_plan_with_its_sizing_reads_back_and_a_forged_rule_is_refused(cli, fleet_csv: Path,  # type: ignore[no-untyped-def]
                                                                                 tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    r = cli("propose", "-i", INV, "-p", PROF, "--sizing", "auto", "--sizing-history", str(fleet_csv),
            "--state-dir", str(tmp_path / "state"), "--out", str(out), "--report", str(tmp_path / "p.html"))
    assert r.exit_code == 0, r.output
    from migplan.catalog import builtin_catalog
    from migplan.documents import load_plan

    plan = load_plan(str(out), builtin_catalog())
    assert plan.sizing is not None and plan.sizing.rule == "max+1spread" and plan.sizing.recommended
    assert "sizing auto: max+1spread" in (tmp_path / "p.html").read_text()
    doc = json.loads(out.read_text())
    doc["sizing"]["rule"] = "max+10%"
    out.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="'max\\+10%' is not the plan's memory rule \\(max\\+1spread\\)"):
        load_plan(str(out), builtin_catalog())
    doc["sizing"].update(rule="max+1spread", oom_rate_mean=2.0)
    out.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="sizing.oom_rate_mean"):
        load_plan(str(out), builtin_catalog())


def test_too_little_history_sizes_by_the_default_rule_and_says_so(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    short = write_csv(tmp_path / "short.csv", truth_history(days=3))
    r = cli("propose", "-i", INV, "-p", PROF, "--sizing", "auto", "--sizing-history", str(short),
            "--state-dir", str(tmp_path / "state"), "-o", "json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)["sizing"]
    assert (s["rule"], s["recommended"]) == ("max+10%", False)
    assert s["reason"].startswith("too little history to calibrate from (the history spans 2d 23h")
    assert "warning: sizing auto: sized by the default rule max+10%: too little history" in r.stderr
    assert not (tmp_path / "state" / "sizing.json").exists()  # nothing was calibrated
    r = cli("propose", "-i", INV, "-p", PROF, "--sizing", "auto", "--state-dir", str(tmp_path / "state"))
    assert r.exit_code == 0, r.output
    assert "sizing auto: max+10%, the default rule: no calibration yet and no history to calibrate from" in r.stdout


def _kept(state: Path, figures: list[tuple[str, float, float]]) -> None:
    state.mkdir(mode=0o700)
    doc = {"kind": "migplan/sizing-calibration", "version": 1, "calibrated_at": 1.0, "source": "x.csv",
           "train_s": 604800.0, "test_s": 86400.0, "splits": 3, "families": [], "first": 0, "last": 1, "workloads": 9,
           "correlated_bursts": [], "floor": 512,
           "rules": [{"rule": r, "oom_rate": {"mean": o, "worst": o}, "whole_gpu_ratio": {"mean": c, "worst": c}}
                     for r, o, c in figures]}
    (state / "sizing.json").write_text(json.dumps(doc))


def test_a_kept_calibration_is_used_without_a_history_and_no_rule_above_the_target(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    state = tmp_path / "state"
    _kept(state, [("max+10%", 0.05, 0.5), ("max+1spread", 0.008, 0.6), ("max+60%", 0.0, 0.9)])
    r = cli("propose", "-i", INV, "-p", PROF, "--sizing", "auto", "--state-dir", str(state), "-o", "json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)["sizing"]
    assert (s["rule"], s["recommended"], s["oom_rate_mean"]) == ("max+1spread", True, 0.008)
    assert "older than the cool-down" in r.stderr  # calibrated at 1970: stale, and nothing to recalibrate from
    r = cli("propose", "-i", INV, "-p", PROF, "--sizing", "auto", "--state-dir", str(state), "--target-oom", "0.5%",
            "-o", "json")
    s = json.loads(r.stdout)["sizing"]
    assert (s["rule"], s["recommended"]) == ("max+60%", True)
    r = cli("propose", "-i", INV, "-p", PROF, "--sizing", "auto", "--state-dir", str(state), "--target-oom", "0",
            "-o", "json")
    s = json.loads(r.stdout)["sizing"]
    assert (s["rule"], s["recommended"]) == ("max+60%", True)  # 0 meets 0
    (state / "sizing.json").write_text((state / "sizing.json").read_text().replace('"mean": 0.0', '"mean": 0.02'))
    r = cli("propose", "-i", INV, "-p", PROF, "--sizing", "auto", "--state-dir", str(state), "--target-oom", "0",
            "-o", "json")
    s = json.loads(r.stdout)["sizing"]
    assert (s["rule"], s["recommended"]) == ("max+10%", False)  # none meets 0: the default, never one above it
    assert s["reason"].startswith("no rule keeps the mean share of workloads out of memory at or below 0%")


def test_a_broken_calibration_is_ignored_with_a_warning(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    state = tmp_path / "state"
    _kept(state, [("max+10%", 0.05, 0.5)])
    (state / "sizing.json").write_text((state / "sizing.json").read_text().replace('"max+10%"', '"max+10"'))
    r = cli("propose", "-i", INV, "-p", PROF, "--sizing", "auto", "--state-dir", str(state))
    assert r.exit_code == 0, r.output
    assert "event=sizing-record-ignored" in r.stderr and "sizing rule 'max+10' is not STAT" in r.stderr
    assert "sizing auto: max+10%, the default rule" in r.stdout


def test_auto_options_are_checked(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = cli("propose", "-i", INV, "-p", PROF, "--target-oom", "1%")
    assert r.exit_code == 2 and "--target-oom: goes with --sizing auto" in r.stderr
    r = cli("propose", "-i", INV, "-p", PROF, "--sizing", "auto", "--headroom", "0.2", "--state-dir",
            str(tmp_path / "s"))
    assert r.exit_code == 2 and "sizing auto chooses the whole memory rule: leave out --headroom" in r.stderr
    r = cli("propose", "-i", INV, "-p", PROF, "--sizing", "auto", "--target-oom", "one", "--state-dir",
            str(tmp_path / "s"))
    assert r.exit_code == 2 and "'one' is not a share of workloads" in r.stderr and "Traceback" not in r.output
    r = cli("propose", "-i", INV, "-p", PROF, "--sizing", "auto", "--sizing-history", str(tmp_path / "no.csv"),
            "--state-dir", str(tmp_path / "s"))
    assert r.exit_code == 2 and "no.csv: --sizing-history / sizing.history: no such file or directory" in r.stderr


@pytest.mark.slow
def test_config_sizing_auto_with_its_history_and_target(cli, fleet_csv: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = tmp_path / "config.yaml"
    cfg.write_text(yaml.safe_dump({"version": 1, "sizing": {"rule": "auto", "target_oom": "20%",
                                                            "history": str(fleet_csv), "cooldown_h": 6},
                                   "replan": {"state_dir": str(tmp_path / "state")}}))
    r = cli("propose", "--config", str(cfg), "-i", INV, "-p", PROF, "-o", "json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)["sizing"]
    assert s["recommended"] and s["target_oom"] == 0.2 and s["oom_rate_mean"] <= 0.2
    assert (tmp_path / "state" / "sizing.json").exists()


@pytest.mark.slow  # a history store written, swept by backtest and by propose --sizing auto
def test_sweep_and_auto_from_a_history_store(cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from migplan.adapters.history_store import HistoryStore, store_path

    samples = truth_history()
    with HistoryStore(store_path(tmp_path / "hist")) as store:
        for i in range(0, len(samples), 5000):
            with store.run(samples[i].timestamp, "nvml") as run:
                run.add(samples[i:i + 5000])
                run.finished = samples[i].timestamp
    r = cli("backtest", "--history", str(tmp_path / "hist"), "--sweep", "--policy", "max+{10,60}%",
            "--policy", "max+1spread", "-o", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["recommended"] == "max+1spread"
    r = cli("propose", "-i", INV, "-p", PROF, "--sizing", "auto", "--sizing-history", str(tmp_path / "hist"),
            "--state-dir", str(tmp_path / "state"), "-o", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["sizing"]["rule"] == "max+1spread"


# --- replan -------------------------------------------------------------------------------------------------------

@pytest.mark.slow  # a sweep, then a replan on the simulator
def test_replan_sizing_auto_plans_with_the_chosen_rule_and_records_it(tmp_path: Path, fleet_csv: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import sim_runner
    from helpers.samples import flat_workload, local_inventory, write_profiles
    from sim.fleet import host_state, read_state, write_state

    from migplan.adapters.state_dir import StateDir
    from migplan.commands.context import build_context
    from migplan.commands.fleet import FleetRequest
    from migplan.commands.replan import ReplanRequest, replan

    state = write_state(tmp_path / "h.json", host_state("A100-SXM4-40GB", 2, hostname="h1", layouts=[None] * 2))
    st_ = read_state(state)
    for g in st_["gpus"]:
        g.update(mig_current=False, mig_pending=False, gpu_instances=[])
    write_state(state, st_)
    local_inventory(tmp_path)
    write_profiles(tmp_path / "profiles.yaml", [flat_workload("a", 9000), flat_workload("b", 4000)])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"version": 1, "inventory": "inv.yaml",
                                                          "profiles": "profiles.yaml", "sizing": "auto"}))
    ctx = build_context(str(tmp_path / "config.yaml"), None, None)
    lines: list[str] = []
    req = ReplanRequest(fleet=FleetRequest(), state_dir=str(tmp_path / "state"), sizing_history=str(fleet_csv),
                        dry_run=True)
    when = dt.datetime.fromtimestamp(T0 + 20 * 86400, tz=dt.timezone.utc)
    res = replan(ctx, req, now=when, connect=sim_runner.connect(state), report=lines.append)
    assert res.plan is not None and res.plan.sizing is not None, res.line
    assert res.plan.sizing.rule == "max+1spread" and res.plan.policy["headroom_spread"] == 1.0
    assert any("event=sizing rule=max+1spread auto=yes" in x for x in lines)
    (run,) = StateDir(tmp_path / "state").runs()
    assert run["sizing"]["rule"] == "max+1spread" and run["sizing"]["recommended"]
    # an hour later: the calibration is kept (cool-down 24 h), not made again
    lines.clear()
    res = replan(ctx, req, now=when + dt.timedelta(hours=1), connect=sim_runner.connect(state), report=lines.append)
    assert res.plan is not None and res.plan.sizing is not None and res.plan.sizing.rule == "max+1spread"
    assert not any("sizing-calibrated" in x for x in lines)
