"""The pure parts of replan: the hysteresis decision and its line (also on plans the planner makes), maintenance
windows, the cool-down, the metrics text and the schedule files (checked with the real systemd-analyze where
it is installed; tests/test_replan_schedule.py reads the scheduled command back as cron and systemd do)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
import subprocess
from pathlib import Path

import pytest

from migplan.catalog.layout import Layout
from migplan.commands.schedule import install, remove
from migplan.errors import InputError
from migplan.replan import metrics, schedule
from migplan.replan.decide import Served, Standing, decide, in_cooldown, standing_now, standing_planned
from migplan.replan.policy import ReplanPolicy, parse_window


class _Summary:
    def __init__(self, changed: int) -> None:
        self.gpus_changed = changed


class _Gpu:
    def __init__(self, host: str, index: int, target: list[str] | None) -> None:
        self.host, self.index = host, index
        self.target = Layout.parse(target) if target is not None else None


class _Solve:
    def __init__(self, fallback: str | None) -> None:
        self.fallback = fallback


class _Plan:
    """What decide reads of a plan: whether it changes a GPU, each GPU's target layout, whether it is a fallback."""

    def __init__(self, changed: int = 1, targets: dict[tuple[str, int], list[str] | None] | None = None,
                 fallback: str | None = None) -> None:
        self.summary = _Summary(changed)
        self.solve = _Solve(fallback)
        self.gpus = tuple(_Gpu(h, i, t) for (h, i), t in (targets or {}).items())


def _at(instance: str | None, gpu: int = 0, *, outgrown: bool = False) -> Served:
    return Served(("h", gpu, instance), outgrown)


OUT = Served(None)  # left out
NOW = Standing({"a": _at("3g.20gb@0")}, gpus_used=10, waste_mib=100_000)


@pytest.mark.parametrize(("planned", "applies", "urgent", "words"), [
    (Standing(NOW.workloads, 10, 100_000), False, False, "not applied: frees 0 GPU(s), threshold 1"),
    (Standing(NOW.workloads, 9, 100_000), True, False, "frees 1 GPU(s) (threshold 1)"),
    (Standing(NOW.workloads, 10, 95_000), False, False, "cuts unneeded memory by 5%, threshold 10%"),
    (Standing(NOW.workloads, 10, 80_000), True, False, "cuts unneeded memory by 20% (threshold 10%)"),
])
def test_the_decision_applies_only_past_a_threshold(planned: Standing, applies: bool, urgent: bool,
                                                    words: str) -> None:
    d = decide(NOW, planned, _Plan(), ReplanPolicy())  # type: ignore[arg-type]
    assert (d.apply, d.urgent) == (applies, urgent) and words in d.line, d.line
    assert applies or d.line.endswith("; no demand left out or outgrown"), d.line


def test_a_plan_that_places_and_moves_says_how_many_of_each() -> None:
    now = Standing({"x": OUT, "y": OUT, "z": _at("1g.5gb@0", outgrown=True), "w": _at("2g.10gb@4")}, 10, 100_000)
    planned = Standing({"x": _at("1g.5gb@0", 1), "y": _at("1g.5gb@1", 1), "z": _at("2g.10gb@2"),
                        "w": _at("2g.10gb@4")}, 11, 100_000)
    d = decide(now, planned, _Plan(), ReplanPolicy())  # type: ignore[arg-type]
    assert d.apply and d.urgent
    assert d.reasons == ("places 2 workload(s) now left out",
                         "gives 1 workload(s) that outgrew their instance a larger one"), d.reasons


def test_an_outgrown_workload_the_plan_leaves_out_is_no_move() -> None:
    """Outgrown count falls only because the plan leaves z out (its instance goes), while it places x in its
    stead: no move is claimed and nothing is urgent; the line says what the plan does instead."""
    now = Standing({"x": OUT, "z": _at("1g.5gb@0", outgrown=True)}, 1, 1_000)
    planned = Standing({"x": _at("2g.10gb@0"), "z": OUT}, 1, 1_000)
    plan = _Plan(targets={("h", 0): ["2g.10gb@0"]})
    d = decide(now, planned, plan, ReplanPolicy())  # type: ignore[arg-type]
    assert not d.apply and not d.urgent and "outgrew" not in " ".join(d.reasons), d
    assert d.line == ("not applied: frees 0 GPU(s), threshold 1; cuts unneeded memory by 0%, threshold 10%; "
                      "places 1 workload(s) now left out but leaves out 1 that run now; gives none of the 1 "
                      "workload(s) that outgrew their instance a larger one"), d.line
    alone = decide(Standing({"z": now.workloads["z"]}, 2, 1_000), Standing({"z": OUT}, 1, 1_000), plan,
                   ReplanPolicy())  # type: ignore[arg-type]
    assert not alone.apply and alone.line == "not applied: it would leave out 1 workload(s) that run now"


def test_an_outgrown_workload_that_keeps_running_in_place_is_not_left_out() -> None:
    """Without consent to disrupt, the plan lists z as not placed, yet z keeps its instance (it stays in the
    target): placing x elsewhere is urgent, and neither a move nor a drop is claimed."""
    now = Standing({"x": OUT, "z": _at("1g.5gb@0", outgrown=True)}, 1, 1_000)
    planned = Standing({"x": _at("2g.10gb@2"), "z": OUT}, 1, 1_000)
    d = decide(now, planned, _Plan(changed=0, targets={("h", 0): ["1g.5gb@0", "2g.10gb@2"]}),
               ReplanPolicy())  # type: ignore[arg-type]
    assert d.apply and d.urgent and d.line == "applied: places 1 workload(s) now left out", d.line
    gone = decide(now, planned, _Plan(changed=1, targets={("h", 0): ["2g.10gb@2"]}),
                  ReplanPolicy())  # type: ignore[arg-type]
    assert not gone.apply and "but leaves out 1 that run now" in gone.line, gone.line


def test_a_plan_that_swaps_who_is_left_out_says_so_when_it_applies() -> None:
    now = Standing({"x": OUT, "y": _at("1g.5gb@0")}, 2, 10_000)
    planned = Standing({"x": _at("1g.5gb@0", 1), "y": OUT}, 1, 10_000)
    d = decide(now, planned, _Plan(targets={("h", 0): None, ("h", 1): ["1g.5gb@0"]}),
               ReplanPolicy())  # type: ignore[arg-type]
    assert d.apply and not d.urgent and d.reasons == ("frees 1 GPU(s) (threshold 1)",)
    assert d.line.endswith("(it also places 1 workload(s) now left out and leaves out 1 that run now)"), d.line


def test_a_plan_that_leaves_out_more_than_it_places_is_not_applied() -> None:
    d = decide(NOW, Standing({"a": OUT}, 5, 0), _Plan(), ReplanPolicy())  # type: ignore[arg-type]
    assert not d.apply and d.line == "not applied: it would leave out 1 workload(s) that run now", d.line
    now = Standing({"a": _at("1g.5gb@0"), "b": _at("1g.5gb@1"), "x": OUT}, 2, 0)
    d = decide(now, Standing({"a": OUT, "b": OUT, "x": _at("3g.20gb@4")}, 1, 0), _Plan(targets={("h", 0): []}),
               ReplanPolicy())  # type: ignore[arg-type]
    assert not d.apply and d.line == "not applied: it would leave out 2 workload(s) that run now, placing 1 now " \
        "left out", d.line
    # a workload the plan does not place but whose instance stays (it may not be stopped) is not left out
    kept = decide(now, Standing({"a": OUT, "b": _at("1g.5gb@1"), "x": OUT}, 1, 0),
                  _Plan(targets={("h", 0): ["1g.5gb@0", "1g.5gb@1"], ("h", 1): None}), ReplanPolicy())  # type: ignore[arg-type]
    assert kept.apply and kept.line == "applied: frees 1 GPU(s) (threshold 1)", kept.line


def test_a_plan_without_changes_is_nothing_to_do() -> None:
    d = decide(NOW, Standing(NOW.workloads, 8, 0), _Plan(changed=0), ReplanPolicy())  # type: ignore[arg-type]
    assert not d.apply and d.line == "nothing to do: the plan changes no GPU"
    left = Standing({"x": OUT, "z": _at("1g.5gb@0", outgrown=True)}, 1, 0)
    same = decide(left, left, _Plan(changed=0, targets={("h", 0): ["1g.5gb@0"]}), ReplanPolicy())  # type: ignore[arg-type]
    assert not same.apply and same.line == "nothing to do: the plan changes no GPU", same.line


def test_a_greedy_fallback_is_never_applied_even_when_it_places_demand() -> None:
    now = Standing({"x": OUT}, 1, 0)
    planned = Standing({"x": _at("1g.5gb@1")}, 1, 0)
    solved = decide(now, planned, _Plan(changed=0), ReplanPolicy())  # type: ignore[arg-type]
    assert solved.apply and solved.urgent  # the same placement from the solver is applied at once
    d = decide(now, planned, _Plan(changed=0, fallback="greedy"), ReplanPolicy())  # type: ignore[arg-type]
    assert not d.apply and not d.urgent
    assert d.line.startswith("not applied: the solver found no plan within its time limit and this is the greedy "
                             "fallback"), d.line


# The same, on plans the planner makes (CBC) from a problem: one A100 with 1g.5gb@0 1g.5gb@1 2g.10gb@2 3g.20gb@4,
# where `a` (8,000 MiB sized) has outgrown its 1g.5gb and `b` fits its own.
def _decided(allow_disrupt: bool, *extra: str) -> tuple[str, dict[str, tuple[str | None, int | None, str | None]]]:
    from planner_fixtures import CAT, EXACT, fleet, gpu, placed, profiles, run, wl

    from migplan.planner.problem import build_problem

    state = fleet(gpu("h", 0, layout=["1g.5gb@0", "1g.5gb@1", "2g.10gb@2", "3g.20gb@4"]))
    ps = profiles(wl("a", 8000, host="h", gpu_idx=0, inst="1g.5gb@0"),
                  wl("b", 3000, host="h", gpu_idx=0, inst="1g.5gb@1"), *(wl(n, 3000) for n in extra))
    policy = dataclasses.replace(EXACT, allow_disrupt=allow_disrupt)
    plan = run(state, ps, policy)
    d = decide(standing_now(build_problem(state, ps, CAT, policy)), standing_planned(plan), plan, ReplanPolicy())
    return d.line, placed(plan)


def test_planned_lines_say_what_the_planner_did() -> None:
    line, where = _decided(True)  # moves a
    assert line == "applied: gives 1 workload(s) that outgrew their instance a larger one", line
    assert where["a"] == ("h", 0, "2g.10gb@2")
    line, where = _decided(False)  # may not move a: it keeps running where it is, nothing to do
    assert line == "nothing to do: the plan changes no GPU" and "a" not in where, line
    # may not move a, places c: urgent for c, and no move claimed (it was "moves 1 workload(s) that outgrew
    # their instance": a counted as relieved because the plan left it out)
    line, where = _decided(False, "c")
    assert line == "applied: places 1 workload(s) now left out" and "c" in where and "a" not in where, line


def test_the_cool_down_names_gpus_changed_within_it() -> None:
    t = 1_000_000.0
    times = {("a", 0): t - 3600, ("a", 1): t - 25 * 3600, ("b", 0): t - 23.9 * 3600}
    assert in_cooldown(times, t, ReplanPolicy(cooldown_h=24)) == {("a", 0), ("b", 0)}
    assert in_cooldown(times, t, ReplanPolicy(cooldown_h=0)) == set()


@pytest.mark.parametrize(("text", "inside", "outside"), [
    ("Sat,Sun 02:00-06:00", "2026-11-07T03:00", "2026-11-06T03:00"),  # Saturday vs Friday
    ("Mon-Fri 01:00-03:30", "2026-11-06T03:29", "2026-11-06T03:30"),
    ("daily 23:00-02:00", "2026-11-03T01:59", "2026-11-03T02:00"),  # past midnight
    ("Sun 23:00-01:00", "2026-11-09T00:30", "2026-11-10T00:30"),  # Monday 00:30 belongs to Sunday's window
    ("Fri-Mon 00:00-24:00", "2026-11-08T12:00", "2026-11-04T12:00"),  # wraps the week: Sunday yes, Wednesday no
])
def test_maintenance_windows(text: str, inside: str, outside: str) -> None:
    w = parse_window(text)
    assert w.contains(dt.datetime.fromisoformat(inside).replace(tzinfo=dt.timezone.utc))
    assert not w.contains(dt.datetime.fromisoformat(outside).replace(tzinfo=dt.timezone.utc))


@pytest.mark.parametrize("bad", ["Sat 02:00", "Funday 01:00-02:00", "Mon 25:00-26:00", "Mon 02:00-02:00",
                                 "Mon 02:61-03:00", ""])
def test_a_bad_window_is_refused_with_the_format(bad: str) -> None:
    with pytest.raises(InputError) as e:
        parse_window(bad, "config.yaml: replan.maintenance_windows")
    assert "config.yaml: replan.maintenance_windows" in str(e.value) and "Sat,Sun 02:00-06:00" in (e.value.hint or "")


def test_disruption_only_inside_a_window_and_only_when_allowed() -> None:
    sat = dt.datetime(2026, 11, 7, 3, tzinfo=dt.timezone.utc)
    fri = dt.datetime(2026, 11, 6, 3, tzinfo=dt.timezone.utc)
    w = (parse_window("Sat,Sun 02:00-06:00"),)
    assert ReplanPolicy(allow_disrupt=True, windows=w).may_disrupt(sat)
    assert not ReplanPolicy(allow_disrupt=True, windows=w).may_disrupt(fri)
    assert not ReplanPolicy(allow_disrupt=False, windows=w).may_disrupt(sat)
    assert ReplanPolicy(allow_disrupt=True).may_disrupt(fri)


def test_metrics_text_has_help_and_type_for_every_sample_and_skips_unknowns() -> None:
    text = metrics.render(metrics.RunMetrics(1_700_000_000.5, "partial", gpus_used=3, gap=None, solve_seconds=0.25))
    lines = text.splitlines()
    samples = [ln.split("{")[0].split(" ")[0] for ln in lines if not ln.startswith("#")]
    for name in set(samples):
        assert f"# HELP {name} " in text and f"# TYPE {name} gauge" in text
    assert "migplan_plan_gap_ratio" not in text  # unknown: not exported as a made-up 0
    assert 'migplan_last_run_result{result="partial"} 1' in text and text.endswith("\n")
    assert "migplan_last_run_timestamp_seconds 1700000000.5" in text
    with pytest.raises(ValueError):
        metrics.render(metrics.RunMetrics(0, "bogus"))


def test_every_reason_decide_gives_has_its_metric_code() -> None:
    """Each verb decide() starts a reason with maps to one `migplan_last_run_reason` code (none is dropped)."""
    moved = Standing({"x": OUT, "z": _at("1g.5gb@0", outgrown=True)}, 10, 100_000)
    every = decide(moved, Standing({"x": _at("1g.5gb@0", 1), "z": _at("2g.10gb@2")}, 9, 50_000), _Plan(),
                   ReplanPolicy())  # type: ignore[arg-type]
    assert len(every.reasons) == 4, every.reasons
    assert metrics.reason_codes(every.reasons) == {c for _, c in metrics.REASONS}
    text = metrics.render(metrics.RunMetrics(1, "applied", reasons=every.reasons))
    assert all(f'migplan_last_run_reason{{reason="{c}"}} 1' in text for _, c in metrics.REASONS), text
    frees = decide(NOW, Standing(NOW.workloads, 9, 100_000), _Plan(), ReplanPolicy())  # type: ignore[arg-type]
    text = metrics.render(metrics.RunMetrics(1, "applied", reasons=frees.reasons))
    assert 'migplan_last_run_reason{reason="frees_gpus"} 1' in text
    assert 'migplan_last_run_reason{reason="cuts_waste"} 0' in text
    nothing = metrics.render(metrics.RunMetrics(1, "nothing_to_do", reasons=()))
    reason_lines = [ln for ln in nothing.splitlines() if ln.startswith("migplan_last_run_reason{")]
    assert len(reason_lines) == 4 and all(ln.endswith("} 0") for ln in reason_lines), nothing
    assert "migplan_last_run_reason" not in metrics.render(metrics.RunMetrics(1, "locked"))  # no decision: unknown


def test_per_gpu_change_times_and_at_risk_workloads_are_labelled_and_escaped() -> None:
    text = metrics.render(metrics.RunMetrics(
        1, "applied", gpu_changed_at=(("gpu-b", 1, 1_700_000_000.0), ("gpu-a", 0, 1_699_990_000.5)),
        at_risk=(metrics.AtRisk('ns/odd"name\\x', "gpu-a", 0, "3g.20gb@4", 158),
                 metrics.AtRisk("big", "gpu-a", 1, None, 1))))
    assert ('migplan_gpu_last_change_timestamp_seconds{host="gpu-a",gpu="0"} 1699990000.5\n'
            'migplan_gpu_last_change_timestamp_seconds{host="gpu-b",gpu="1"} 1700000000\n') in text
    assert ('migplan_workload_at_risk_margin_bytes{workload="ns/odd\\"name\\\\x",host="gpu-a",gpu="0",'
            f'mig_instance="3g.20gb@4"}} {158 * 1048576}') in text
    assert ('migplan_workload_at_risk_margin_bytes{workload="big",host="gpu-a",gpu="1",mig_instance="whole"} 1048576'
            in text)
    for name in ("migplan_gpu_last_change_timestamp_seconds", "migplan_workload_at_risk_margin_bytes"):
        assert f"# HELP {name} " in text and f"# TYPE {name} gauge" in text and text.count(f"# TYPE {name} ") == 1
    bare = metrics.render(metrics.RunMetrics(1, "nothing_to_do", gpu_changed_at=(), at_risk=()))
    assert "migplan_gpu_" not in bare and "migplan_workload_at_risk_margin" not in bare  # none: no family at all
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (scripts/test.sh installs Debian's prometheus package as root)")
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(("every", "cron", "calendar"), [
    ("15m", "*/15 * * * *", "*:0/15"), ("1h", "0 * * * *", "hourly"), ("6h", "0 */6 * * *", "00/6:00")])
def test_schedule_cadence(every: str, cron: str, calendar: str) -> None:
    s = schedule.Schedule(every=every, argv=("/usr/local/bin/migplan", "replan", "--quiet"))
    assert f"{cron} root /usr/local/bin/migplan replan --quiet\n" in schedule.cron_entry(s)
    assert f"OnCalendar={calendar}\n" in schedule.replan_units(s)[schedule.REPLAN_TIMER]


@pytest.mark.parametrize("every", ["7m", "5h", "0m", "90m", "2d", "1"])
def test_a_cadence_that_does_not_divide_an_hour_or_a_day_is_refused(every: str) -> None:
    with pytest.raises(ValueError):
        schedule.Schedule(every=every).minutes()


def test_install_is_idempotent_and_remove_removes_everything(tmp_path: Path) -> None:
    s = schedule.Schedule(every="1h", argv=("/usr/bin/migplan", "replan", "--quiet"))
    files = {schedule.CRON_PATH: schedule.cron_entry(s),
             f"{schedule.UNIT_DIR}/{schedule.RESTORE_SERVICE}": schedule.restore_unit("/usr/bin/migplan")}
    first = install(files, root=str(tmp_path))
    assert [ln.split(":")[0] for ln in first] == ["wrote", "wrote"]
    cron = tmp_path / "etc" / "cron.d" / "migplan"
    assert cron.read_text() == files[schedule.CRON_PATH] and oct(cron.stat().st_mode & 0o777) == "0o644"
    assert [ln.split(":")[0] for ln in install(files, root=str(tmp_path))] == ["unchanged", "unchanged"]
    assert sorted(remove(root=str(tmp_path))) == sorted(f"removed: {tmp_path}{p}" for p in files)
    assert remove(root=str(tmp_path)) == ["nothing to remove"]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed here")
def test_the_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    exe = tmp_path / "migplan"
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(0o755)
    s = schedule.Schedule(every="6h", argv=(str(exe), "replan", "--quiet"))
    units = {**schedule.replan_units(s), schedule.RESTORE_SERVICE: schedule.restore_unit(str(exe))}
    for name, text in units.items():
        (tmp_path / name).write_text(text)
    done = subprocess.run(["systemd-analyze", "verify", *(str(tmp_path / n) for n in units)], capture_output=True,
                          text=True, timeout=120)
    # verify also reports on units it loads as dependencies that this container lacks: only our files count
    ours = [ln for ln in (done.stdout + done.stderr).splitlines() if any(n in ln for n in units)]
    assert not ours, ours


def test_schedule_show_prints_each_file_and_refuses_a_bad_cadence() -> None:
    from typer.testing import CliRunner

    from migplan.cli.app import app

    r = CliRunner().invoke(app, ["schedule", "show", "--with", "cron", "--every", "15m", "--at-boot", "--",
                                 "-i", "/etc/migplan/inventory.yaml"])
    assert r.exit_code == 0, r.output
    assert "# /etc/cron.d/migplan\n" in r.output and "# /etc/systemd/system/migplan-restore.service\n" in r.output
    assert "*/15 * * * * root " in r.output and " replan --quiet -i /etc/migplan/inventory.yaml\n" in r.output
    bad = CliRunner().invoke(app, ["schedule", "show", "--every", "7m"])
    assert bad.exit_code == 2 and "divisor" in bad.output


def test_replan_history_lists_the_runs_newest_first(tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from migplan.adapters.state_dir import StateDir
    from migplan.cli.app import app

    sd = StateDir(tmp_path)
    sd.record("20261101T000000-000000", {"id": "a", "at": "2026-11-01T00:00:00Z", "result": "applied",
                                          "line": "applied: frees 2 GPU(s) (threshold 1)"}, None, 10)
    sd.record("20261101T010000-000000", {"id": "b", "at": "2026-11-01T01:00:00Z", "result": "nothing_to_do",
                                          "line": "nothing to do: the plan changes no GPU"}, None, 10)
    r = CliRunner().invoke(app, ["replan", "--history", "--state-dir", str(tmp_path), "-o", "json"])
    assert r.exit_code == 0, r.output
    assert [x["id"] for x in json.loads(r.stdout)] == ["b", "a"]
    t = CliRunner().invoke(app, ["replan", "--history", "--state-dir", str(tmp_path)])
    assert t.exit_code == 0 and t.output.index("nothing_to_do") < t.output.index("applied: frees 2")
