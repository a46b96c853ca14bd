"""`migplan propose` as a user runs it: the example fleet, output formats, plan files, errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers import migplan_cli

from migplan.adapters.solver import available
from migplan.documents import load_plan

ROOT = Path(__file__).resolve().parent.parent
INV = str(ROOT / "inventory" / "example.yaml")
PROF = str(ROOT / "profiles" / "example")


@pytest.fixture()
def run(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):  # type: ignore[no-untyped-def]
    return migplan_cli(monkeypatch, tmp_path)


def test_example_fleet_table(run) -> None:  # type: ignore[no-untyped-def]
    r = run("propose", "-i", INV, "-p", PROF)
    assert r.exit_code == 0, r.output
    assert "|3g.20gb    |2g.10|1g|  |" in r.stdout
    assert "GPUs used" in r.stdout and "lower bound" in r.stdout and "Left out:" in r.stdout
    risky, left = r.stdout.split("Kept at risk")[1].split("Left out:")
    # the five workloads that outgrew their headroom run on where they are: kept at risk, not left out
    for name in ("code-complete-santacoder", "gemma-7b", "llama3-70b-awq", "llama3-70b-int4", "translate-nllb"):
        assert name in risky and name not in left
    assert "pii-redactor" in left  # new demand with no place: the one workload left out
    assert "kept at risk 5, left out 1" in r.stdout and "(at risk)" in r.stdout
    # stderr is no terminal here: no progress unless --progress (tests/test_progress.py), never on stdout
    assert "model:" not in r.stderr and "solver cbc: optimal in" not in r.stdout
    assert "solver cbc: optimal in" in run("propose", "-i", INV, "-p", PROF, "--progress").stderr


def test_example_fleet_json_and_plan_file(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "plans" / "plan.json"
    missing = run("propose", "-i", INV, "-p", PROF, "--out", str(out))  # migplan creates no directory for --out
    assert missing.exit_code == 2 and "does not exist" in missing.stderr and not out.parent.exists()
    out.parent.mkdir()
    r = run("propose", "-i", INV, "-p", PROF, "-o", "json", "--out", str(out))
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert json.loads(out.read_text()) == doc
    plan = load_plan(out)
    s = plan.summary  # 40 workloads, one with 2 replicas
    assert s.workloads_placed + s.workloads_at_risk + s.workloads_unplaced == 41 and s.workloads_at_risk == 5
    assert plan.solve.status == "optimal" and plan.summary.gpus_used == plan.summary.gpus_lower_bound
    reserved = next(g for g in plan.gpus if (g.host, g.index) == ("gpu-a100-01", 7))
    assert reserved.hold == "reserved" and reserved.actions == ()
    assert not list(out.parent.glob(".*.tmp"))  # the atomic write left no temporary file


def test_allow_disrupt_places_everything(run) -> None:  # type: ignore[no-untyped-def]
    r = run("propose", "-i", INV, "-p", PROF, "--allow-disrupt", "-o", "yaml")
    assert r.exit_code == 0, r.output
    doc = yaml.safe_load(r.stdout)
    s = doc["summary"]
    # the two at-risk workloads with a place that fits move there; the three without one stay where they run,
    # at risk: nothing else is moved, and nothing stopped, just to restore their headroom
    assert s["workloads_unplaced"] == 0 and s["workloads_disrupted"] == 2 and s["workloads_at_risk"] == 3
    assert all(m["target"] is not None for m in doc["migrations"])


def test_unmeetable_pin_and_too_large_are_reported(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump({"version": 1, "workloads": [
        {"name": "huge", "memory_mib": {"p50": 1, "p95": 1, "p99": 900000, "max": 900000},
         "compute": {"p50": 0.1, "p95": 0.1, "max": 0.1}},
        {"name": "lost", "memory_mib": {"p50": 1, "p95": 1, "p99": 1000, "max": 1000},
         "compute": {"p50": 0.1, "p95": 0.1, "max": 0.1}, "pin": {"host": "gpu-nowhere"}},
    ]}))
    r = run("propose", "-i", INV, "-p", str(prof), "-o", "json")
    assert r.exit_code == 0, r.output
    why = {w["name"]: (w["reason"], w["memory_mib"]) for w in json.loads(r.stdout)["workloads"]}
    assert why["huge"][0].startswith("too large: needs 990000 MiB") and why["huge"][1] == 990000
    assert "pinned to gpu-nowhere, which is not in the fleet" in why["lost"][0]


@pytest.mark.parametrize(("args", "code", "message"), [
    (("--solver", "gurobi"), 2, "unknown solver 'gurobi'"),
    (("--keep-free", "30"), 1, "keep-free"),
    (("--memory-percentile", "p42"), 2, "p42"),
    (("--time-limit", "-5"), 2, "--time-limit"),
    (("--gap", "2"), 2, "--gap"),
    (("--headroom", "-0.5"), 2, "--headroom"),
])
def test_errors(run, args: tuple[str, ...], code: int, message: str) -> None:  # type: ignore[no-untyped-def]
    r = run("propose", "-i", INV, "-p", PROF, *args)
    assert r.exit_code == code, r.output
    assert message in r.stderr and "Traceback" not in r.output and r.stdout == ""


def test_missing_profiles_is_an_input_error(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = run("propose", "-i", INV, "-p", str(tmp_path / "none"))
    assert r.exit_code == 2 and "no such file or directory" in r.stderr


@pytest.mark.parametrize("solver", available())
def test_stdout_is_pure_data_with_every_solver(solver: str, tmp_path: Path) -> None:
    # A real process: solver libraries write to file descriptor 1 (HiGHS prints a banner), which
    # CliRunner would not see. `-o json` must still be exactly one JSON document on stdout.
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "migplan.cli.app", "propose", "-i", INV, "-p", PROF,
                           "--solver", solver, "-o", "json"], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["solve"]["solver"] == solver


def test_hosts_to_discover_are_named(run) -> None:  # type: ignore[no-untyped-def]
    r = run("propose", "-i", str(ROOT / "inventory" / "ansible-example.yaml"), "-p", PROF)
    assert r.exit_code == 0, r.output
    assert "left out of this plan: gpu-h100-01" in r.stderr and "--snapshot" in r.stderr


def test_unwritable_out_is_a_message_not_a_traceback(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = run("propose", "-i", INV, "-p", PROF, "--out", str(blocker / "plan.json"))
    assert r.exit_code == 2 and "error:" in r.stderr and str(blocker) in r.stderr  # refused before planning
    assert "Traceback" not in r.output


def _whole_fleet(tmp_path: Path) -> tuple[str, str]:
    inv, prof = tmp_path / "inv.yaml", tmp_path / "prof.yaml"
    inv.write_text("version: 1\nhosts:\n  h1:\n    address: 192.0.2.1\n    gpus:\n"
                   + "".join(f"      - {{index: {i}, model: A100-SXM4-40GB, mig: false}}\n" for i in range(3)))
    prof.write_text("version: 1\nworkloads:\n" + "".join(
        f"  - name: w{i}\n    observed: {{host: h1, gpu: {i}, gpu_model: A100-SXM4-40GB}}\n"
        f"    memory_mib: {{p50: 2000, p95: 2500, p99: 2800, max: 3000}}\n"
        f"    compute: {{p50: 0.01, p95: 0.02, max: 0.03}}\n" for i in range(3)))
    return str(inv), str(prof)


def test_consolidate_table_and_json(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    inv, prof = _whole_fleet(tmp_path)
    r = run("propose", "-i", inv, "-p", prof, "--consolidate")
    assert r.exit_code == 0, r.output
    assert "Migration (in this order):" in r.stdout and "stop first" in r.stdout
    assert "make-before-break" in r.stdout and "GPUs freed (2)" in r.stdout
    assert "GPUs freed per move budget" in r.stdout and "MAX MOVES" in r.stdout
    out = tmp_path / "plan.json"
    r = run("propose", "-i", inv, "-p", prof, "--consolidate", "--max-moves", "2", "-o", "json", "--out", str(out))
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["version"] == 5 and len(doc["migrations"]) <= 2 and len(doc["freed_gpus"]) == 1
    assert doc["consolidation"]["max_moves"] == 2 and doc["policy"]["consolidate"] is True
    assert [m["step"] for m in doc["migrations"]] == list(range(1, len(doc["migrations"]) + 1))
    assert load_plan(str(out), __import__("migplan.catalog", fromlist=["x"]).builtin_catalog()).migrations
    r = run("propose", "-i", inv, "-p", prof, "--consolidate", "-o", "yaml")
    assert r.exit_code == 0 and "migrations:" in r.stdout and "freed_gpus:" in r.stdout


def test_max_moves_without_consolidate_is_a_usage_error(run, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    inv, prof = _whole_fleet(tmp_path)
    r = run("propose", "-i", inv, "-p", prof, "--max-moves", "2")
    assert r.exit_code == 2 and "consolidate" in r.output and "Traceback" not in r.output
