"""`migplan replan` on a simulated host through the local runner: decide, apply only when worth it, cool-down,
lock, records, metrics (checked with the real promtool), and a 48-hour replay of stationary demand."""

from __future__ import annotations

import datetime as dt
import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_runner
from helpers.samples import flat_workload, local_inventory, write_profiles
from sim.fleet import host_state, read_state, write_state

from migplan.adapters.state_dir import StateDir
from migplan.commands.context import build_context
from migplan.commands.fleet import FleetRequest
from migplan.commands.replan import (
    EXIT_APPLIED,
    EXIT_FAILED,
    EXIT_LOCKED,
    EXIT_NOTHING,
    ReplanRequest,
    replan,
)
from migplan.fleet.steps import is_read_only

T0 = dt.datetime(2026, 11, 2, 3, 0, tzinfo=dt.timezone.utc)


def _state(tmp_path: Path) -> Path:
    """Where `_setup` puts the simulated host h1."""
    return tmp_path / "h.json"


def _setup(tmp_path: Path, gpus: int = 2, config: dict | None = None) -> Path:
    state = write_state(_state(tmp_path), host_state("A100-SXM4-40GB", gpus, hostname="h1",
                                                        layouts=[None] * gpus))
    st = read_state(state)
    for g in st["gpus"]:
        g.update(mig_current=False, mig_pending=False, gpu_instances=[])
    write_state(state, st)
    local_inventory(tmp_path)
    cfg = {"version": 1, "inventory": "inv.yaml", "profiles": "profiles.yaml",
           "planner": {"headroom": 0.0, "headroom_min_mib": 0}, "replan": config or {}}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    return state


def _profiles(tmp_path: Path, work: dict[str, int]) -> None:
    write_profiles(tmp_path / "profiles.yaml", [flat_workload(n, m) for n, m in sorted(work.items())])


def _run(tmp_path: Path, when: dt.datetime, **kw: object):  # type: ignore[no-untyped-def]
    ctx = build_context(str(tmp_path / "config.yaml"), None, None)
    (tmp_path / "textfile").mkdir(exist_ok=True)  # node_exporter's directory: replan creates none but the state dir
    req = ReplanRequest(fleet=FleetRequest(), state_dir=str(tmp_path / "state"),
                        metrics_file=str(tmp_path / "textfile" / "migplan.prom"), **kw)  # type: ignore[arg-type]
    return replan(ctx, req, now=when, connect=sim_runner.connect(_state(tmp_path)))


def _mutations(state: Path) -> list[list[str]]:
    return [a for a in read_state(state)["log"] if not is_read_only(["nvidia-smi", *a])]


# Not slow though it takes about 4 s: the inner loop's one run of `replan` end to end (commands/replan.py).
def test_first_run_places_new_demand_and_a_second_run_has_nothing_to_do(tmp_path: Path) -> None:
    state = _setup(tmp_path)
    _profiles(tmp_path, {"a": 15000, "b": 9000, "c": 4000})
    r = _run(tmp_path, T0)
    assert r.exit_code == EXIT_APPLIED and r.result == "applied", r.line
    assert "places 3 workload(s) now left out" in r.line
    assert _mutations(state)  # it did change the host
    placed = {w.name for w in r.plan.workloads if w.status == "placed"}  # type: ignore[union-attr]
    assert placed == {"a", "b", "c"}
    n = len(read_state(state)["log"])
    # the same demand, now running where the plan put it: profiles say where each runs
    _profiles_running(tmp_path, r.plan)
    again = _run(tmp_path, T0 + dt.timedelta(hours=1))
    assert again.exit_code == EXIT_NOTHING and again.result == "nothing_to_do", again.line
    assert not [a for a in read_state(state)["log"][n:] if not is_read_only(["nvidia-smi", *a])]
    runs = StateDir(tmp_path / "state").runs()
    assert [x["result"] for x in runs] == ["nothing_to_do", "applied"]  # newest first
    assert runs[1]["gpus_changed"] and runs[1]["exit_code"] == EXIT_APPLIED


def _profiles_running(tmp_path: Path, plan, extra: dict[str, int] | None = None,  # type: ignore[no-untyped-def]
                      sizes: dict[str, int] | None = None) -> None:
    """The profiles as a collector would write them after the apply: each workload observed where it runs."""
    out = []
    for w in plan.workloads:
        if w.status != "placed":
            continue
        m = (sizes or {}).get(w.name, w.memory_mib)
        observed = {"host": w.host, "gpu": w.gpu}
        if w.instance:
            prof, start = w.instance.split("@")
            observed.update(mig_profile=prof, mig_start=int(start))
        out.append(flat_workload(w.name, m, observed=observed))
    out += [flat_workload(n, m) for n, m in sorted((extra or {}).items())]
    write_profiles(tmp_path / "profiles.yaml", out)


def test_a_second_run_is_refused_by_the_lock_at_once(tmp_path: Path) -> None:
    state = _setup(tmp_path)
    _profiles(tmp_path, {"a": 15000})
    with StateDir(tmp_path / "state").lock():
        r = _run(tmp_path, T0)
    assert r.exit_code == EXIT_LOCKED and r.result == "locked" and "another replan is running" in r.line
    assert not _mutations(state) and not read_state(state)["log"]  # not even a read


@pytest.mark.slow
def test_a_lock_left_by_a_killed_run_is_released(tmp_path: Path) -> None:
    _setup(tmp_path)
    _profiles(tmp_path, {"a": 15000})
    code = (f"import sys, os; sys.path.insert(0, {str(Path.cwd())!r})\n"
            "from migplan.adapters.state_dir import StateDir\n"
            f"with StateDir({str(tmp_path / 'state')!r}).lock():\n    os.kill(os.getpid(), 9)")
    done = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert done.returncode == -9 and (tmp_path / "state" / "replan.lock").exists()
    assert _run(tmp_path, T0).exit_code == EXIT_APPLIED


@pytest.mark.slow
def test_the_metrics_file_is_valid_prometheus_text(tmp_path: Path) -> None:
    _setup(tmp_path)
    _profiles(tmp_path, {"a": 15000, "b": 9000})
    r = _run(tmp_path, T0)
    text = (tmp_path / "textfile" / "migplan.prom").read_text()
    assert 'migplan_last_run_result{result="applied"} 1' in text
    assert f"migplan_last_run_timestamp_seconds {int(T0.timestamp())}" in text
    assert f"migplan_plan_gpus_used {r.plan.summary.gpus_used}" in text  # type: ignore[union-attr]
    assert "migplan_gpus_changed " + str(sum(1 for g in r.plan.gpus if g.actions)) in text  # type: ignore[union-attr]
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (scripts/test.sh installs Debian's prometheus package as root)")
    done = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.slow
def test_the_metrics_file_has_the_decision_each_gpu_changed_and_each_workload_at_risk(tmp_path: Path) -> None:
    """What the Grafana dashboard (dashboards/migplan.json) reads per run, per GPU and per workload."""
    _setup(tmp_path)
    _profiles(tmp_path, {"a": 15000, "b": 9000})
    r = _run(tmp_path, T0)
    text = (tmp_path / "textfile" / "migplan.prom").read_text()
    assert r.result == "applied" and 'migplan_last_run_reason{reason="places_left_out"} 1' in text
    changed = sorted((g.host, g.index) for g in r.plan.gpus if g.actions)  # type: ignore[union-attr]
    assert changed and [ln for ln in text.splitlines() if ln.startswith("migplan_gpu_last_change")] == [
        f'migplan_gpu_last_change_timestamp_seconds{{host="{h}",gpu="{i}"}} {int(T0.timestamp())}' for h, i in changed]
    assert "migplan_workload_at_risk_margin_bytes" not in text
    # the same workloads running where they were put, now wanting 60% headroom (no cool-down holding their GPU as
    # it is): kept where they run, at risk
    _profiles_running(tmp_path, r.plan)
    cfg = yaml.safe_load((tmp_path / "config.yaml").read_text())
    cfg["planner"]["headroom"], cfg["replan"] = 0.6, {"cooldown_h": 0}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    again = _run(tmp_path, T0 + dt.timedelta(hours=1))
    text = (tmp_path / "textfile" / "migplan.prom").read_text()
    risky = [w for w in again.plan.workloads if w.status == "at_risk"]  # type: ignore[union-attr]
    assert {w.name for w in risky} == {"a", "b"}, again.line
    for w in risky:
        assert (f'migplan_workload_at_risk_margin_bytes{{workload="{w.name}",host="{w.host}",gpu="{w.gpu}",'
                f'mig_instance="{w.instance}"}} {w.margin_mib * 1048576}') in text, text
    assert f"migplan_workloads_at_risk {len(risky)}" in text
    assert f'migplan_gpu_last_change_timestamp_seconds{{host="{changed[0][0]}",gpu="{changed[0][1]}"}}' in text
    assert text.count('migplan_last_run_reason{reason="') == 4


@pytest.mark.slow
def test_a_failed_apply_leaves_each_gpu_as_before_and_exits_non_zero(tmp_path: Path) -> None:
    state = _setup(tmp_path, gpus=1)
    st = read_state(state)
    st["faults"] = [{"match": "-cgi", "times": 5, "error": "Insufficient Resources"}]
    write_state(state, st)
    _profiles(tmp_path, {"a": 15000, "b": 9000})
    r = _run(tmp_path, T0)
    assert r.exit_code == EXIT_FAILED and r.result == "failed", r.line
    g = read_state(state)["gpus"][0]
    assert g["gpu_instances"] == []  # rolled back: no instance left behind
    changes = tmp_path / "state" / "gpu-changes.json"
    assert not changes.exists() or json.loads(changes.read_text()) == {}  # no GPU is recorded as changed
    assert StateDir(tmp_path / "state").runs()[0]["result"] == "failed"


@pytest.mark.slow
def test_the_cool_down_holds_a_changed_gpu_unless_demand_is_left_out(tmp_path: Path) -> None:
    """After a change, a non-urgent change on that GPU waits 24 h; new demand does not wait."""
    _setup(tmp_path, gpus=1)
    _profiles(tmp_path, {"a": 15000, "b": 9000})
    first = _run(tmp_path, T0)
    assert first.exit_code == EXIT_APPLIED
    # b went away: its idle instance could be destroyed, but that frees no GPU and places nothing
    _profiles_running(tmp_path, first.plan)
    doc = yaml.safe_load((tmp_path / "profiles.yaml").read_text())
    doc["workloads"] = [w for w in doc["workloads"] if w["name"] != "b"]
    (tmp_path / "profiles.yaml").write_text(yaml.safe_dump(doc))
    r = _run(tmp_path, T0 + dt.timedelta(hours=2))
    assert r.exit_code == EXIT_NOTHING and r.plan.summary.gpus_changed == 0, r.line  # type: ignore[union-attr]
    assert StateDir(tmp_path / "state").runs()[0]["cooling"] == ["h1:0"]
    # new demand that needs a new instance on the cooling GPU (b's idle 2g.10gb is too small): placed at once,
    # the cool-down overridden
    doc["workloads"].append(flat_workload("c", 12000))
    (tmp_path / "profiles.yaml").write_text(yaml.safe_dump(doc))
    r = _run(tmp_path, T0 + dt.timedelta(hours=3))
    assert r.exit_code == EXIT_APPLIED and "cool-down overridden" in r.line, r.line
    assert "c" in {w.name for w in r.plan.workloads if w.status == "placed"}  # type: ignore[union-attr]


@pytest.mark.slow
def test_48_hours_of_stationary_demand_change_each_gpu_at_most_once_a_day(tmp_path: Path) -> None:
    """Hourly runs; demand jitters around a fixed level (never crossing an instance size). A real shift at
    hour 30 (a new workload) is followed by the next run."""
    state = _setup(tmp_path, gpus=2, config={"cooldown_h": 24})
    base = {"a": 14000, "b": 8000, "c": 3500, "d": 8000}
    rng = random.Random(7)
    _profiles(tmp_path, base)
    plan = None
    changes: dict[str, list[int]] = {}
    for hour in range(48):
        if plan is not None:
            jitter = {n: int(m * (1 + rng.uniform(-0.05, 0.05))) for n, m in base.items()}
            _profiles_running(tmp_path, plan, extra={"e": 9000} if hour == 30 else None, sizes=jitter)
        r = _run(tmp_path, T0 + dt.timedelta(hours=hour))
        assert r.exit_code in (EXIT_APPLIED, EXIT_NOTHING), (hour, r.line)
        if r.exit_code == EXIT_APPLIED:
            for h in r.applied.hosts:  # type: ignore[union-attr]
                for g in h.gpus:
                    if g.outcome.value == "applied":
                        changes.setdefault(f"{h.host}:{g.gpu}", []).append(hour)
        if hour == 30:
            assert r.exit_code == EXIT_APPLIED and "now left out" in r.line, r.line
            assert "e" in {w.name for w in r.plan.workloads if w.status == "placed"}  # type: ignore[union-attr]
        plan = r.plan if r.exit_code == EXIT_APPLIED or plan is None else plan
        if hour == 30:
            base["e"] = 9000
    assert changes, "nothing was ever applied: this replay tested nothing"
    for gpu, hours in changes.items():
        non_urgent = [h for h in hours if h not in (0, 30)]
        assert not non_urgent, (gpu, hours)  # only the first placement and the demand shift changed GPUs
    assert len(_mutations(state)) > 0


@pytest.mark.slow
def test_a_workload_growing_toward_its_instance_is_moved_before_it_exceeds_it(tmp_path: Path) -> None:
    """Sized as peak + 10% (at least 512 MiB), a workload whose peak nears its instance's memory has outgrown it
    while its peak still fits: replan (disruption allowed) moves it then, not after an OOM."""
    _setup(tmp_path, gpus=1, config={"allow_disrupt": True})
    cfg = yaml.safe_load((tmp_path / "config.yaml").read_text())
    cfg["planner"] = {}  # the default headroom rule: +10%, at least 512 MiB
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    _profiles(tmp_path, {"a": 8000})
    first = _run(tmp_path, T0)
    assert first.exit_code == EXIT_APPLIED
    a = next(w for w in first.plan.workloads if w.name == "a")  # type: ignore[union-attr]
    assert a.instance and a.instance_mib
    seen = []
    hour = 0
    peak = 8000
    while True:  # grow 2% an hour
        hour += 1
        peak = int(peak * 1.02)
        assert peak <= a.instance_mib, f"hour {hour}: it outgrew its instance ({peak} > {a.instance_mib}) unmoved"
        _profiles_running(tmp_path, first.plan, sizes={"a": peak})
        r = _run(tmp_path, T0 + dt.timedelta(hours=hour))
        seen.append((hour, peak, r.result))
        if r.exit_code == EXIT_APPLIED:
            break
        assert r.exit_code == EXIT_NOTHING, r.line
    assert "outgrew their instance" in r.line, r.line
    moved = next(w for w in r.plan.workloads if w.name == "a")  # type: ignore[union-attr]
    assert moved.instance != a.instance and moved.instance_mib > a.instance_mib  # type: ignore[operator]
    assert peak <= a.instance_mib < peak * 1.1 + 0.5 or a.instance_mib - peak < 512, seen  # moved at the headroom


@pytest.mark.slow
def test_workloads_placed_but_not_started_keep_their_assigned_place(tmp_path: Path) -> None:
    """Profiles without an observed place (nothing has started yet): the assignments the apply wrote on the host
    are read back as each workload's place, so later runs, also past the cool-down, change nothing."""
    state = _setup(tmp_path, gpus=3)
    _profiles(tmp_path, {"a": 15000, "b": 9000, "c": 4000, "d": 30000})
    first = _run(tmp_path, T0)
    assert first.exit_code == EXIT_APPLIED, first.line
    n = len(read_state(state)["log"])
    for hours in (1, 25, 49):  # inside and past the 24 h cool-down
        again = _run(tmp_path, T0 + dt.timedelta(hours=hours))
        assert again.exit_code == EXIT_NOTHING and again.result == "nothing_to_do", (hours, again.line)
        left = [w.name for w in again.plan.workloads if w.status != "placed"]  # type: ignore[union-attr]
        assert not left, left
    assert not [a for a in read_state(state)["log"][n:] if not is_read_only(["nvidia-smi", *a])]


@pytest.mark.slow
def test_instances_no_workload_accounts_for_are_reported_as_orphans(tmp_path: Path) -> None:
    """Assigned instances are never orphans; once a workload leaves the profiles, its instance is reported."""
    _setup(tmp_path, gpus=2)
    _profiles(tmp_path, {"a": 15000, "b": 9000})
    assert _run(tmp_path, T0).exit_code == EXIT_APPLIED
    _run(tmp_path, T0 + dt.timedelta(hours=1))
    assert StateDir(tmp_path / "state").runs()[0]["orphans"] == []
    placed = json.loads((tmp_path / "etc" / "assignments.json").read_text())["workloads"]
    b = next(w for w in placed if w["name"] == "b")
    _profiles(tmp_path, {"a": 15000})
    lines: list[str] = []
    ctx = build_context(str(tmp_path / "config.yaml"), None, None)
    replan(ctx, ReplanRequest(fleet=FleetRequest(), state_dir=str(tmp_path / "state")), report=lines.append,
           now=T0 + dt.timedelta(hours=2), connect=sim_runner.connect(_state(tmp_path)))
    assert StateDir(tmp_path / "state").runs()[0]["orphans"] == [f"h1:{b['gpu']}:{b['instance']}"]
    assert any("event=orphans instances=1" in line for line in lines), lines


def test_a_greedy_fallback_is_recorded_but_never_applied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from migplan.commands import replan as replan_mod
    from tests.test_greedy_fallback import NoIncumbent

    state = _setup(tmp_path)
    _profiles(tmp_path, {"a": 15000})
    monkeypatch.setattr(replan_mod, "planner_solver", lambda *a, **k: NoIncumbent())
    r = _run(tmp_path, T0)
    assert r.exit_code == EXIT_NOTHING and r.plan is not None and r.plan.solve.fallback == "greedy", r.line
    assert "this is the greedy fallback" in r.line and not _mutations(state)
    assert StateDir(tmp_path / "state").runs()[0]["exit_code"] == EXIT_NOTHING
