"""The pure parts of replan: the hysteresis decision, maintenance windows, the cool-down, the metrics text and
the schedule files (checked with the real systemd-analyze where it is installed)."""

from __future__ import annotations

import dataclasses
import datetime as dt
import shutil
import subprocess
from pathlib import Path

import pytest

from migplan.commands.schedule import install, remove
from migplan.errors import InputError
from migplan.replan import metrics, schedule
from migplan.replan.decide import Standing, decide, in_cooldown
from migplan.replan.policy import ReplanPolicy, parse_window


class _Summary:
    def __init__(self, changed: int) -> None:
        self.gpus_changed = changed


class _Plan:
    def __init__(self, changed: int = 1) -> None:
        self.summary = _Summary(changed)


NOW = Standing(left_out=0, outgrown=0, gpus_used=10, waste_mib=100_000)


@pytest.mark.parametrize(("planned", "applies", "urgent", "words"), [
    (Standing(0, 0, 10, 100_000), False, False, "not applied: frees 0 GPU(s), threshold 1"),
    (Standing(0, 0, 9, 100_000), True, False, "frees 1 GPU(s) (threshold 1)"),
    (Standing(0, 0, 10, 95_000), False, False, "cuts unneeded memory by 5%, threshold 10%"),
    (Standing(0, 0, 10, 80_000), True, False, "cuts unneeded memory by 20% (threshold 10%)"),
])
def test_the_decision_applies_only_past_a_threshold(planned: Standing, applies: bool, urgent: bool,
                                                    words: str) -> None:
    d = decide(NOW, planned, _Plan(), ReplanPolicy())  # type: ignore[arg-type]
    assert (d.apply, d.urgent) == (applies, urgent) and words in d.line, d.line


def test_demand_left_out_and_outgrown_instances_are_urgent() -> None:
    now = dataclasses.replace(NOW, left_out=2, outgrown=1)
    d = decide(now, Standing(0, 0, 11, 100_000), _Plan(), ReplanPolicy())  # type: ignore[arg-type]
    assert d.apply and d.urgent
    assert d.reasons[:2] == ("places 2 workload(s) now left out", "moves 1 workload(s) that outgrew their instance")


def test_a_plan_that_leaves_out_more_than_runs_now_is_not_applied() -> None:
    now = dataclasses.replace(NOW, left_out=0)
    d = decide(now, Standing(1, 0, 5, 0), _Plan(), ReplanPolicy())  # type: ignore[arg-type]
    assert not d.apply and "would leave out 1 more" in d.line


def test_a_plan_without_changes_is_nothing_to_do() -> None:
    d = decide(NOW, Standing(0, 0, 8, 0), _Plan(changed=0), ReplanPolicy())  # type: ignore[arg-type]
    assert not d.apply and d.line == "nothing to do: the plan changes no GPU"


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


def test_scheduled_commands_are_validated_tokens() -> None:
    with pytest.raises(ValueError):
        schedule.check_argv(["migplan", "replan", "; rm -rf /"])
    with pytest.raises(ValueError):
        schedule.check_argv(["migplan", "replan", "$(id)"])


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
