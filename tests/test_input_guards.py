"""Hostile values that used to pass or end in a traceback (issue 21): dates in documents, numbers of the
float options, maintenance windows, and `apply --last` on a machine the record was not written for."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
import json
import sys
from pathlib import Path

import pytest
from planner_fixtures import CAT, fleet, gpu, profiles, run, wl
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_runner
from test_apply_last import _setup

from migplan import names
from migplan.cli.app import app
from migplan.commands.apply import ApplyRequest, LastRequest, _check_age, apply, apply_last, own_names
from migplan.commands.context import build_context
from migplan.commands.fleet import FleetRequest
from migplan.config import load_config
from migplan.errors import InputError
from migplan.planner import plan_from_dict, plan_to_dict
from migplan.replan.policy import parse_window

NOW = dt.datetime(2026, 12, 1, 12, 0, 0, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def plan_doc() -> dict[str, object]:
    st = fleet(gpu("h", 0), gpu("h", 1))
    return plan_to_dict(run(st, profiles(wl("a", 4000), wl("b", 9000))))


# --- dates ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["yesterday", "2026-02-30T00:00:00Z", "2026-12-01T25:00:00Z",
                                  "2026-12-01 08:00:00", "2026-12-01T08:00:00+01:00", "２０２６-12-01T08:00:00Z",
                                  "2026-12-01T08:00:00Z\n"])
def test_a_plan_with_a_date_that_is_no_time_is_refused_naming_created_at(plan_doc, text: str) -> None:
    doc = copy.deepcopy(plan_doc)
    doc["created_at"] = text
    with pytest.raises(InputError, match="created_at") as err:
        plan_from_dict(doc, CAT)
    assert "UTC time" in str(err.value)


def _dated(plan_doc: dict[str, object], when: str):
    doc = copy.deepcopy(plan_doc)
    doc["created_at"] = when
    return plan_from_dict(doc, CAT)


def test_a_plan_dated_in_the_future_is_refused_beyond_the_clock_skew(plan_doc) -> None:
    req = ApplyRequest(plan="plan.json", max_age_h=24)
    with pytest.raises(InputError, match="in the future") as err:
        _check_age(_dated(plan_doc, "2099-01-01T00:00:00Z"), req, NOW)
    assert "created_at" in str(err.value) and "plan.json" in str(err.value)
    soon = (NOW + dt.timedelta(seconds=names.CLOCK_SKEW_S + 60)).strftime("%Y-%m-%dT%H:%M:%SZ")
    with pytest.raises(InputError, match="in the future"):
        _check_age(_dated(plan_doc, soon), req, NOW)
    skewed = (NOW + dt.timedelta(seconds=names.CLOCK_SKEW_S - 60)).strftime("%Y-%m-%dT%H:%M:%SZ")
    _check_age(_dated(plan_doc, skewed), req, NOW)  # a few minutes of skew between two machines: fine
    _check_age(_dated(plan_doc, "2099-01-01T00:00:00Z"), dataclasses.replace(req, force_stale=True), NOW)
    with pytest.raises(InputError, match="h ago"):
        _check_age(_dated(plan_doc, "2026-11-29T12:00:00Z"), req, NOW)


def test_cli_apply_of_a_plan_with_a_bad_date_is_one_error_line(tmp_path: Path, plan_doc) -> None:
    doc = copy.deepcopy(plan_doc)
    doc["created_at"] = "2026-02-30T00:00:00Z"
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(doc))
    r = CliRunner().invoke(app, ["apply", str(f), "-i", str(tmp_path / "none.yaml"), "--yes"])
    assert r.exit_code == 2, r.output
    assert "created_at" in r.output and "Traceback" not in r.output and r.exception is None or \
        isinstance(r.exception, SystemExit)


def test_utc_stamp() -> None:
    assert names.utc_stamp("2026-12-01T08:00:00Z") == dt.datetime(2026, 12, 1, 8, tzinfo=dt.timezone.utc)
    assert names.utc_stamp("2024-02-29T00:00:00Z") is not None
    for bad in ("2025-02-29T00:00:00Z", "", None, 5, "2026-12-01T08:00:00"):
        assert names.utc_stamp(bad) is None


# --- numbers of the float options ------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["apply", "plan.json", "--timeout", "inf"], ["apply", "plan.json", "--timeout", "1e999"],
    ["apply", "plan.json", "--timeout", "nan"], ["apply", "plan.json", "--connect-timeout", "inf"],
    ["apply", "plan.json", "--max-age", "inf"], ["apply", "plan.json", "--max-age", "nan"],
    ["apply", "plan.json", "--timeout", "1e300"],
    ["propose", "--time-limit", "inf"], ["propose", "--gap", "nan"], ["propose", "--headroom", "inf"],
    ["collect", "--local", "--retention-days", "inf"], ["collect", "--local", "--retention-days", "1" + "0" * 400],
    ["collect", "--prometheus", "http://x", "--http-timeout", "inf"],
])
def test_float_options_refuse_inf_nan_and_overflow_up_front(args: list[str]) -> None:
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2, r.output
    option = next(a for a in args if a.startswith("--") and a not in ("--local", "--prometheus"))
    assert option in r.output
    assert not isinstance(r.exception, (OverflowError, ValueError))


def test_the_shared_check() -> None:
    from migplan.cli.options import finite

    assert finite(3.5) == 3.5 and finite(None) is None
    for bad in (float("inf"), float("-inf"), float("nan"), float("1e999")):
        with pytest.raises(Exception, match="not a finite number"):
            finite(bad)


# --- maintenance windows ----------------------------------------------------------------------------

@pytest.mark.parametrize("text", ["Saturnalia 02:00-06:00", "Mon- 01:00-02:00", "-Fri 01:00-02:00",
                                  "Mon 0\u0663:00-04:00", "Mon \u0661\u0662:00-13:00", "Mo 01:00-02:00",
                                  "Mon-Frisky 01:00-02:00", "Sundays 01:00-02:00", "Mon\u00a001:00-02:00"])
def test_windows_take_whole_day_names_and_ascii_digits(text: str) -> None:
    with pytest.raises(InputError, match="maintenance_windows"):
        parse_window(text)


def test_windows_still_read() -> None:
    assert parse_window("Saturday 02:00-06:00") == parse_window("sat 02:00-06:00")
    assert parse_window("Mon-Fri 01:00-03:30").days == frozenset(range(5))
    every = parse_window("always")
    assert every.days == frozenset(range(7)) and all(every.contains(NOW + dt.timedelta(minutes=m))
                                                      for m in range(0, 7 * 1440, 37))


def test_an_empty_window_list_is_refused_not_read_as_any_time(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("version: 1\nreplan:\n  allow_disrupt: true\n  maintenance_windows: []\n")
    with pytest.raises(InputError, match="maintenance_windows") as err:
        load_config(str(cfg))
    assert "always" in (err.value.hint or str(err.value))
    cfg.write_text("version: 1\nreplan:\n  allow_disrupt: true\n  maintenance_windows: [always]\n")
    assert load_config(str(cfg)).replan["maintenance_windows"] == ("always",)


# --- apply --last: this machine's record only -------------------------------------------------------

def _applied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    state, inv, plan_file = _setup(tmp_path, "A100-SXM4-40GB", monkeypatch)
    ctx = build_context(None, None, None)
    assert apply(ctx, ApplyRequest(plan=str(plan_file), fleet=FleetRequest(inventory=str(inv))),
                 connect=sim_runner.connect(state)).exit_code == 0
    return tmp_path / "etc"


def _last(etc: Path, tmp_path: Path, **kw: str) -> object:
    return apply_last(build_context(None, None, None), LastRequest(state_dir=str(etc), lock_file=str(
        tmp_path / "apply.lock"), **kw), connect=sim_runner.connect(tmp_path / "h.json"))  # _setup's state


@pytest.mark.slow
def test_apply_last_refuses_a_record_of_another_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    etc = _applied(tmp_path, monkeypatch)
    path = etc / "last-applied.json"
    doc = json.loads(path.read_text())
    doc["host"] = "gpu99"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="'gpu99'") as err:
        _last(etc, tmp_path, host_name="h1")
    assert "host" in str(err.value) and "--host-name" in (err.value.hint or "")
    with pytest.raises(InputError, match="'gpu99'"):
        _last(etc, tmp_path)  # this machine's own names are not gpu99 either
    assert "gpu99" not in own_names()


@pytest.mark.slow
def test_apply_last_answers_to_the_machines_own_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    etc = _applied(tmp_path, monkeypatch)
    path = etc / "last-applied.json"
    doc = json.loads(path.read_text())
    doc["host"] = own_names()[-1]  # the short name
    path.write_text(json.dumps(doc))
    assert _last(etc, tmp_path).exit_code == 0  # type: ignore[attr-defined]


@pytest.mark.slow
def test_apply_last_refuses_a_gpu_without_a_uuid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    etc = _applied(tmp_path, monkeypatch)
    path = etc / "last-applied.json"
    doc = json.loads(path.read_text())
    doc["gpus"][0]["uuid"] = None
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"gpus\[0\]\.uuid: GPU 0 has no UUID"):
        _last(etc, tmp_path, host_name="h1")


@pytest.mark.slow
def test_apply_last_refuses_a_record_of_other_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """None of the record's GPUs is here: another machine's record, refused whole. (One GPU replaced in its slot
    is refused alone, the others re-applied: tests/test_apply_files.py.)"""
    etc = _applied(tmp_path, monkeypatch)
    path = etc / "last-applied.json"
    doc = json.loads(path.read_text())
    for k, g in enumerate(doc["gpus"]):
        g["uuid"] = f"GPU-00000000-0000-0000-0000-00000000000{k}"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"none of the 2 GPU\(s\)"):
        _last(etc, tmp_path, host_name="h1")


@pytest.mark.slow
def test_cli_apply_last_of_another_host_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    etc = _applied(tmp_path, monkeypatch)
    path = etc / "last-applied.json"
    doc = json.loads(path.read_text())
    doc["host"], doc["gpus"][0]["uuid"] = "gpu99", None
    path.write_text(json.dumps(doc))
    r = CliRunner().invoke(app, ["apply", "--last", "--state-dir", str(etc), "--lock-file",
                                 str(tmp_path / "apply.lock")])
    assert r.exit_code == 2 and "gpu99" in r.output, r.output


# --- options that only `apply --last` reads, given with a PLAN --------------------------------------------------

@pytest.mark.parametrize("option", ["--host-name", "--lock-file"])
def test_apply_of_a_plan_refuses_an_option_only_last_reads(tmp_path: Path, plan_doc, option: str) -> None:
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(plan_doc))
    value = "gpu7" if option == "--host-name" else str(tmp_path / "apply.lock")
    r = CliRunner().invoke(app, ["apply", str(f), "-i", str(tmp_path / "none.yaml"), "--yes", option, value,
                                 "--journal", str(tmp_path / "j.jsonl")])
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and f"{option} is only for --last" in errors[0], r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.json"]  # no journal, no lock, nothing written


# --- a plan for hosts the inventory does not have ------------------------------------------------------------

def test_apply_of_a_plan_for_hosts_not_in_the_inventory_is_refused_before_anything(tmp_path: Path, plan_doc) -> None:
    """Nothing of such a plan would be applied, and exit 0 would tell cron it was: exit 2 naming the hosts, no
    journal written; with --limit (the operator named what to apply) it is a warning and nothing is done."""
    f = tmp_path / "plan.json"
    f.write_text(json.dumps(plan_doc))
    inv = tmp_path / "inventory.yaml"
    inv.write_text("version: 1\nhosts:\n  other:\n    address: 127.0.0.1\n    connection: local\n"
                   "    gpus:\n      - {index: 0, model: A100-SXM4-40GB}\n")
    journal = tmp_path / "j.jsonl"
    r = CliRunner().invoke(app, ["apply", str(f), "-i", str(inv), "--yes", "--journal", str(journal)])
    assert r.exit_code == 2, r.output
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "not in the inventory: h;" in errors[0] and str(f) in errors[0], r.stderr
    assert not journal.exists()
    limited = CliRunner().invoke(app, ["apply", str(f), "-i", str(inv), "--yes", "--limit", "other",
                                       "--journal", str(journal), "-o", "json"])
    assert limited.exit_code == 0, limited.output
    assert "left alone: h" in limited.stderr
    assert json.loads(limited.stdout)["hosts"] == []
