"""An apply stopped in the middle (issue 20): each stop signal at each kind of step, through the real console
script in its own process, against the nvidia-smi simulator on a local host.

The matrix: SIGTERM, SIGINT, SIGHUP (handled: the apply stops at once with every child it started) and
SIGKILL (of the apply alone, and of its whole process group, as systemd and a killed cron job do), each while
the simulator holds one step (`-dci`, `-dgi`, `-cgi`) of the change. After each stop: the apply is dead with
that signal, no process of its group is left, the host's apply lock is free, and the GPU is at its checkpoint
or half-done with `inflight.json` saying so. The next apply of the same plan repairs it (finishes it) and
exits 0; a replan, or an apply of another plan, repairs it too. Counts are printed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_runner
from helpers.samples import flat_workload, local_inventory, write_profiles
from planner_fixtures import EXACT, profiles, wl
from sim.fleet import host_state, read_state, write_state

from migplan import documents
from migplan.adapters.solver import PulpSolver
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout
from migplan.commands.apply import ApplyRequest, apply
from migplan.commands.context import build_context
from migplan.commands.fleet import FleetRequest
from migplan.fleet.apply import ApplyOptions, GpuOutcome, apply_host
from migplan.fleet.discover import discover_host
from migplan.fleet.snapshot import Snapshot
from migplan.inventory import Host
from migplan.planner import Plan, plan

# every test starts the migplan console script as a process and kills it mid-step: seconds each
pytestmark = pytest.mark.slow

CAT = builtin_catalog()
BEFORE = ["3g.20gb@0", "3g.20gb@4"]
ROOT = Path(__file__).resolve().parent.parent
# the child starts with SIGINT at its default even when pytest runs as a background job (SIGINT ignored)
LAUNCH = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
          "sys.argv = ['migplan', *sys.argv[1:]]; from migplan.cli.app import main; sys.exit(main())")



def _in_flight(state_dir: Path) -> list[object]:
    """The GPUs the host's inflight.json records as in flight ([]: none, or no file)."""
    f = state_dir / "inflight.json"
    return list(json.loads(f.read_text())["gpus"]) if f.exists() else []

def _world(tmp: Path) -> tuple[Path, Path, Host]:
    state = write_state(tmp / "h1.json", host_state("A100-SXM4-40GB", 1, hostname="h1",
                                                     layouts=[Layout.parse(BEFORE)]))
    host = Host(name="h1", address="h1", connection="local", lock_file=str(tmp / "apply.lock"),
                state_dir=str(tmp / "etc"))
    return state, local_inventory(tmp), host  # the same lock file and state directory as `host`


def _plan(state: Path, host: Host, out: Path) -> Plan:
    """GPU 0 keeps 3g.20gb@0 (a runs there) and turns 3g.20gb@4 into smaller instances for b and c: a destroy,
    then a create."""
    snap = Snapshot((discover_host(sim_runner.local(state), host, CAT),))
    p = plan(snap.fleet_state(catalog=CAT), profiles(wl("a", 15000, host="h1", gpu_idx=0, inst="3g.20gb@0"),
                                                     wl("b", 9000), wl("c", 4000)),
             CAT, EXACT, PulpSolver(time_limit=30))  # type: ignore[arg-type]
    target = p.gpu("h1", 0).target  # type: ignore[union-attr]
    assert target is not None and "3g.20gb@0" in target.as_list() and "3g.20gb@4" not in target.as_list(), target
    assert len(target) > 1, target
    documents.write_plan(str(out), p)
    return p


def _layout(state: Path) -> list[str]:
    g = read_state(state)["gpus"][0]
    names = {19: "1g.5gb", 15: "1g.10gb", 14: "2g.10gb", 9: "3g.20gb", 5: "4g.20gb", 0: "7g.40gb"}
    return sorted(f"{names[gi['profile_id']]}@{gi['start']}" for gi in g["gpu_instances"])


def _hold(state: Path, step: str) -> None:
    st = read_state(state)
    st["faults"] = [{"match": step, "hang": 60}]
    write_state(state, st)


def _started(state: Path, step: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if any(step in a for a in read_state(state).get("log", [])):
            time.sleep(0.2)  # the command is in its hang now
            return
        if proc.poll() is not None:
            raise AssertionError(f"apply ended ({proc.returncode}) before {step}: {proc.stderr.read()!r}")  # type: ignore[union-attr]
        time.sleep(0.05)
    raise AssertionError(f"apply never reached {step}")


def _group_gone(pgid: int) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _lock_free(path: str) -> bool:
    return subprocess.run(["flock", "--nonblock", path, "true"], timeout=10).returncode == 0


def _kill(tmp: Path, state: Path, inv: Path, plan_path: Path, step: str, how: str) -> int:
    env = sim_runner.environ(state, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, "apply", str(plan_path), "-i", str(inv), "--yes",
                             "--journal", str(tmp / "journal.jsonl"), "--state-dir", str(tmp / "local")],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True, cwd=tmp)
    _hold(state, step)
    _started(state, step, proc)
    sig = {"TERM": signal.SIGTERM, "INT": signal.SIGINT, "HUP": signal.SIGHUP}.get(how, signal.SIGKILL)
    if how == "KILL-group":
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        os.kill(proc.pid, sig)
    code = proc.wait(timeout=30)
    assert proc.stderr is not None
    proc.stderr.close()
    assert _group_gone(proc.pid), f"{how} at {step}: a process of the apply is left"
    st = read_state(state)
    st["faults"] = []
    write_state(state, st)
    return code


STEPS = ("-dci", "-dgi", "-cgi")
SIGNALS = ("TERM", "INT", "HUP", "KILL", "KILL-group")


@pytest.mark.parametrize("how", SIGNALS)
def test_each_signal_at_each_step_stops_cleanly_and_the_next_apply_repairs(tmp_path: Path, how: str) -> None:
    repaired = clean = 0
    for step in STEPS:
        tmp = tmp_path / step.strip("-")
        tmp.mkdir()
        state, inv, host = _world(tmp)
        p = _plan(state, host, tmp / "plan.json")
        code = _kill(tmp, state, inv, tmp / "plan.json", step, how)
        sig = signal.SIGKILL if how.startswith("KILL") else getattr(signal, f"SIG{how}")
        assert code == -sig, (how, step, code)
        assert _lock_free(host.lock_file), f"{how} at {step}: the apply lock is still held"
        after_kill = _layout(state)
        assert _in_flight(tmp / "etc")  # written before the first change
        bare = any(not gi["cis"] for gi in read_state(state)["gpus"][0]["gpu_instances"])
        half = bare or after_kill not in (sorted(BEFORE), sorted(p.gpu("h1", 0).target.as_list()))  # type: ignore[union-attr]
        # held at -dci: nothing took effect; at -dgi: the compute instance is gone; at -cgi: the instance too
        assert half == (step != "-dci"), (step, after_kill, bare)
        ctx = build_context(None, None, None)
        res = apply(ctx, ApplyRequest(plan=str(tmp / "plan.json"), fleet=FleetRequest(inventory=str(inv)),
                                      state_dir=str(tmp / "local")),
                    connect=sim_runner.connect(state))
        assert res.exit_code == 0, res.to_dict()
        assert _layout(state) == sorted(p.gpu("h1", 0).target.as_list())  # type: ignore[union-attr]
        assert not _in_flight(tmp / "etc")
        (only,) = res.hosts[0].gpus
        if half:
            assert only.outcome is GpuOutcome.REPAIRED and "finished to" in only.reason, only
            assert only.repair == "finished", only
            repaired += 1
        else:
            assert only.outcome is GpuOutcome.APPLIED, only
            clean += 1
    print(f"{how}: {len(STEPS)} steps stopped, {repaired} half-done GPU(s) repaired, {clean} applied afresh")


def test_an_apply_of_another_plan_puts_a_half_done_gpu_back_first(tmp_path: Path) -> None:
    state, inv, host = _world(tmp_path)
    _plan(state, host, tmp_path / "plan.json")
    assert _kill(tmp_path, state, inv, tmp_path / "plan.json", "-cgi", "TERM") == -signal.SIGTERM
    assert _layout(state) == ["3g.20gb@0"]
    inflight = json.loads((tmp_path / "etc" / "inflight.json").read_text())
    assert inflight["gpus"][0]["checkpoint"] == BEFORE and inflight["host"] == "h1"
    # a plan with nothing for GPU 0 (here: none at all) does not want the recorded target: put back
    res = apply_host(sim_runner.local(state), host, (), CAT, ApplyOptions())
    (only,) = res.gpus
    assert only.outcome is GpuOutcome.REPAIRED and "rolled back to" in only.reason, only
    assert only.repair == "rolled back", only
    assert _layout(state) == sorted(BEFORE)
    assert not _in_flight(tmp_path / "etc")


def test_replan_repairs_before_it_plans(tmp_path: Path) -> None:
    from migplan.commands.replan import EXIT_APPLIED, ReplanRequest, replan

    state, inv, host = _world(tmp_path)
    _plan(state, host, tmp_path / "plan.json")
    assert _kill(tmp_path, state, inv, tmp_path / "plan.json", "-cgi", "HUP") == -signal.SIGHUP
    write_profiles(tmp_path / "profiles.yaml", [flat_workload("a", 15000), flat_workload("b", 9000)])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"version": 1, "inventory": str(inv),
                                                          "profiles": str(tmp_path / "profiles.yaml"),
                                                          "planner": {"headroom": 0.0, "headroom_min_mib": 0}}))
    ctx = build_context(str(tmp_path / "config.yaml"), None, None)
    r = replan(ctx, ReplanRequest(state_dir=str(tmp_path / "state")),
               now=dt.datetime(2026, 11, 2, 3, 0, tzinfo=dt.timezone.utc), connect=sim_runner.connect(state))
    assert r.line.startswith("repaired 1 GPU(s) an interrupted apply left half-done"), r.line
    assert r.exit_code == EXIT_APPLIED, r.line
    assert not _in_flight(tmp_path / "etc")
    assert _layout(state) != ["3g.20gb@0"]  # finished (and planned from there)


def test_a_host_unreachable_after_the_kill_is_repaired_when_it_returns(tmp_path: Path) -> None:
    from migplan.commands.replan import EXIT_APPLIED, ReplanRequest, replan

    state, inv, host = _world(tmp_path)
    _plan(state, host, tmp_path / "plan.json")
    assert _kill(tmp_path, state, inv, tmp_path / "plan.json", "-cgi", "KILL") == -signal.SIGKILL
    write_profiles(tmp_path / "profiles.yaml", [flat_workload("a", 15000)])
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"version": 1, "inventory": str(inv),
                                                          "profiles": str(tmp_path / "profiles.yaml")}))
    ctx = build_context(str(tmp_path / "config.yaml"), None, None)
    st = read_state(state)
    st["ssh"] = "down"
    write_state(state, st)
    when = dt.datetime(2026, 11, 2, 3, 0, tzinfo=dt.timezone.utc)
    down = replan(ctx, ReplanRequest(state_dir=str(tmp_path / "state")), now=when, connect=sim_runner.connect(state))
    assert not down.line.startswith("repaired") and _in_flight(tmp_path / "etc")  # the record waits on the host
    assert _layout(state) == ["3g.20gb@0"]
    st = read_state(state)
    st["ssh"] = "ok"
    write_state(state, st)
    back = replan(ctx, ReplanRequest(state_dir=str(tmp_path / "state")), now=when + dt.timedelta(hours=24),
                  connect=sim_runner.connect(state))
    assert back.line.startswith("repaired 1 GPU(s)") and back.exit_code == EXIT_APPLIED, back.line
    assert not _in_flight(tmp_path / "etc") and _layout(state) != ["3g.20gb@0"]


def test_killing_only_the_shell_that_started_apply_lets_it_finish(tmp_path: Path) -> None:
    """cron's `sh -c` (or a terminal's shell) killed with SIGKILL: apply is not signalled, carries on and ends the GPU
    as planned; then nothing of it is left and the lock is free."""
    state, inv, host = _world(tmp_path)
    p = _plan(state, host, tmp_path / "plan.json")
    env = sim_runner.environ(state, PYTHONPATH=str(ROOT))
    line = " ".join([sys.executable, "-c", repr(LAUNCH), "apply", str(tmp_path / "plan.json"), "-i", str(inv),
                     "--yes", "--state-dir", str(tmp_path / "local")])
    st = read_state(state)
    st["faults"] = [{"match": "-cgi", "hang": 2}]  # slow enough to kill the shell while apply is in the middle
    write_state(state, st)
    shell = subprocess.Popen(["sh", "-c", line + " >/dev/null 2>&1; echo done"], env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, start_new_session=True, cwd=tmp_path)
    _started(state, "-cgi", shell)
    shell.kill()
    assert shell.wait(timeout=30) == -signal.SIGKILL
    assert _group_gone(shell.pid), "apply did not finish on its own"
    assert _layout(state) == sorted(p.gpu("h1", 0).target.as_list())  # type: ignore[union-attr]
    assert not _in_flight(tmp_path / "etc") and _lock_free(host.lock_file)
