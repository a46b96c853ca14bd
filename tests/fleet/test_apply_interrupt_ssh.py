"""An apply stopped in the middle, over the real sshd (issue 20): the console script in its own process
session applies a plan to a simulated host while the simulator holds a step; it is stopped by a signal. Then:
it died of that signal, no process of its group is left on this side, the host's apply lock (held through the
SSH session) is free, inflight.json on the host records the change, and the next apply over SSH finishes the
half-done GPU ("repaired") and exits 0. Every stop signal (handled: the process closes its sessions; SIGKILL
of the apply or of its group: the kernel closes the sockets) at every kind of step (`-dci`, `-dgi`, `-cgi`);
tests/test_apply_interrupt.py runs the same matrix through a local runner."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import Fleet
from simhosts import read, state, write
from test_cli_fleet import Run, run  # noqa: F401  (the fixture)

from migplan.catalog.layout import Layout

ROOT = Path(__file__).resolve().parents[2]
LAUNCH = ("import signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); sys.argv = ['migplan', *sys.argv[1:]]; "
          "from migplan.cli.app import main; sys.exit(main())")



def _in_flight(state_dir: Path) -> list[object]:
    """The GPUs the host's inflight.json records as in flight ([]: none, or no file)."""
    f = state_dir / "inflight.json"
    return list(json.loads(f.read_text())["gpus"]) if f.exists() else []

def _profiles(path: Path) -> Path:
    def w(name: str, mib: int, **obs: object) -> dict[str, object]:
        return {"name": name, "memory_mib": {"p50": mib, "p95": mib, "p99": mib, "max": mib},
                "compute": {"p50": 0.05, "p95": 0.1, "max": 0.1}, **({"observed": obs} if obs else {})}
    path.write_text(yaml.safe_dump({"version": 1, "workloads": [
        w("a", 15000, host="a", gpu=0, mig_profile="3g.20gb", mig_start=0), w("b", 8000), w("c", 4000)]}))
    return path


def _layout(path: Path) -> list[tuple[int, int, bool]]:
    return sorted((gi["profile_id"], gi["start"], bool(gi["cis"])) for gi in read(path)["gpus"][0]["gpu_instances"])


AFTER = {"-dci": [(9, 0, True), (9, 4, True)],  # held before it took effect: nothing changed yet
         "-dgi": [(9, 0, True), (9, 4, False)],  # 3g.20gb@4's compute instance destroyed, the GPU instance not
         "-cgi": [(9, 0, True)]}  # 3g.20gb@4 destroyed, nothing created yet


@pytest.mark.parametrize("step", list(AFTER))
@pytest.mark.parametrize("how", ["TERM", "INT", "HUP", "KILL", "KILL-group"])
def test_a_stopped_apply_over_ssh_frees_the_lock_and_the_next_apply_repairs(run: Run, fleet: Fleet,  # noqa: F811
                                                                           how: str, step: str) -> None:
    h = fleet.host(0)
    write(h.state, state("A100-SXM4-40GB", 1, hostname="a", layouts=[Layout.parse(["3g.20gb@0", "3g.20gb@4"])]))
    inv = fleet.inventory({"a": fleet.host_entry(h)})
    snap, plan_file = fleet.tmp / "snap.json", fleet.tmp / "plan.json"
    assert run("discover", "-i", str(inv), "--out", str(snap)).exit_code == 0
    made = run("propose", "--snapshot", str(snap), "-p", str(_profiles(fleet.tmp / "p.yaml")), "--out",
               str(plan_file), ssh=False)
    assert made.exit_code == 0, made.output
    target = json.loads(plan_file.read_text())["gpus"][0]["target"]
    assert "3g.20gb@4" not in target and len(target) > 1, target
    st = read(h.state)
    st["faults"] = [{"match": step, "hang": 60}]
    write(h.state, st)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CONFIG_HOME": str(fleet.tmp / "xdg")}
    env.pop("SSH_AUTH_SOCK", None)
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, "apply", str(plan_file), "-i", str(inv), "--yes",
                             "--known-hosts", str(fleet.known_hosts), "--ssh-config", "none"],
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    deadline = time.monotonic() + 60
    while not any(step in a for a in read(h.state).get("log", [])):
        assert proc.poll() is None and time.monotonic() < deadline, f"apply never reached {step}"
        time.sleep(0.05)
    time.sleep(0.3)
    sig = signal.SIGKILL if how.startswith("KILL") else getattr(signal, f"SIG{how}")
    if how == "KILL-group":
        os.killpg(proc.pid, sig)
    else:
        os.kill(proc.pid, sig)
    code = proc.wait(timeout=30)
    assert code == -sig
    deadline = time.monotonic() + 10
    while True:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "a process of the apply is left"
        time.sleep(0.05)
    assert _layout(h.state) == AFTER[step]
    inflight = json.loads((h.dir / "etc" / "inflight.json").read_text())
    assert inflight["gpus"][0]["target"] == target
    st = read(h.state)
    st["faults"] = []
    write(h.state, st)
    deadline = time.monotonic() + 15  # sshd ends the remote lock holder once it sees the session gone
    while True:
        again = run("apply", str(plan_file), "-i", str(inv), "--yes", "-o", "json")
        if again.exit_code == 0 or "another migplan apply is running" not in again.output:
            break
        assert time.monotonic() < deadline, "the host's apply lock outlived the stopped apply"
        time.sleep(0.2)
    assert again.exit_code == 0, again.output
    (gpu,) = json.loads(again.stdout)["hosts"][0]["gpus"]
    if step == "-dci":  # nothing was half-done: an apply as any other (its record settled)
        assert gpu["outcome"] == "applied", gpu
    else:
        assert gpu["outcome"] == "repaired" and gpu["repair"] == "finished" and "finished to" in gpu["reason"], gpu
    assert sorted(gpu["layout"]) == sorted(target)
    assert not _in_flight(h.dir / "etc")
