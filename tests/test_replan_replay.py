"""48 simulated hours of `migplan replan` fed by `migplan collect --local` through the fake NVML.

The world: one host of four A100-40GB GPUs (the nvidia-smi simulator), four services each running alone on
a whole GPU (MIG off), memory jittering a few percent around a fixed level. Every 10 simulated minutes the
collector samples the fake NVML, which is rebuilt from the simulator's own state (instances, processes), so
what NVML reports is where the services really run. Every hour replan rolls up the last 24 h of history and
decides. An `on_move` hook plays the operator's service manager: it moves a service's process in the
simulator's state when apply moves it.

Checked: the first run consolidates (frees GPUs); stationary demand changes no GPU afterwards; a service
growing toward its instance is moved at once (before its peak exceeds the instance); a reboot (the simulator
drops every instance) is repaired by `apply --last`; at every hour every service fits its instance.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_runner
from helpers.samples import local_inventory
from sim.fleet import host_state, read_state, reboot, write_state

from migplan.catalog import builtin_catalog
from migplan.commands.apply import LastRequest, apply_last
from migplan.commands.collect import LocalSettings, collect_local
from migplan.commands.context import build_context
from migplan.commands.fleet import FleetRequest
from migplan.commands.replan import EXIT_APPLIED, EXIT_NOTHING, ReplanRequest, replan
from migplan.history.identity import ProcessFacts
from tests.fake_nvml import FakeGpu, FakeMig, FakeNvml, FakeProcess

CAT = builtin_catalog()
MODEL = CAT.get("A100-SXM4-40GB")
T0 = 1_793_491_200.0  # 2026-11-01T00:00:00Z
BASE = {"svc-a": 5000.0, "svc-b": 7000.0, "svc-c": 3000.0, "svc-d": 8500.0}
PIDS = {name: 1000 + i for i, name in enumerate(sorted(BASE))}

# The operator's service manager, as an on_move hook: moves (phase move/start) or stops (phase stop) the
# workload's process in the simulator's state. Independent of migplan: it edits the simulator's JSON.
HOOK = r'''
import json, os, sys
path = os.environ["MIGPLAN_SIM_STATE"]
name, phase = os.environ["MIGPLAN_WORKLOAD"], os.environ["MIGPLAN_MOVE_PHASE"]
st = json.load(open(path))
moved = None
for g in st["gpus"]:
    for p in list(g["processes"]):
        if p["name"] == name:
            g["processes"].remove(p)
            moved = p
if phase in ("move", "start") and moved is not None:
    gpu, _, inst = os.environ["MIGPLAN_NEW_INSTANCE"].partition(":")
    g = st["gpus"][int(gpu)]
    if inst == "whole":
        moved.update(gi=None, ci=None)
    else:
        start = int(inst.split("@")[1])
        gi = next(x for x in g["gpu_instances"] if x["start"] == start)
        moved.update(gi=gi["id"], ci=gi["cis"][0]["id"])
    g["processes"].append(moved)
if phase == "stop" and moved is not None:
    with open(path + ".stopped", "a") as f:
        f.write(json.dumps(moved) + "\n")
tmp = path + ".hook"
with open(tmp, "w") as f:
    json.dump(st, f)
os.replace(tmp, path)
'''


def _world(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    st = host_state(MODEL.id, 4, hostname="h1", layouts=[None] * 4)
    for i, (g, name) in enumerate(zip(st["gpus"], sorted(BASE), strict=True)):
        g.update(mig_current=False, mig_pending=False, gpu_instances=[])
        g["processes"] = [{"pid": PIDS[name], "name": name, "used_memory_mib": int(BASE[name]), "gi": None,
                           "ci": None}]
        assert g["index"] == i
    state = write_state(tmp / "h.json", st)
    sim_runner.serve(monkeypatch, state)  # apply --last as the boot unit runs it: no connect=, its own runner
    (tmp / "hook.py").write_text(HOOK)
    local_inventory(tmp, hooks={"on_move": [f"{sys.executable} {tmp / 'hook.py'}"]})
    (tmp / "config.yaml").write_text(yaml.safe_dump({
        "version": 1, "inventory": "inv.yaml", "replan": {"allow_disrupt": True, "cooldown_h": 24}}))
    return state


def _restart_stopped(state: Path) -> None:
    """Services the hook stopped (stop-first moves) come back where the plan put them: the simulator's
    processes are re-added on the instance at their planned place by the next `_place` call."""
    stopped = Path(str(state) + ".stopped")
    if stopped.exists():
        stopped.unlink()


def _place(state: Path, placement: dict[str, tuple[int, int | None]]) -> None:
    """Every service runs where `placement` says (after a stop-first move or a reboot its manager restarts it)."""
    st = read_state(state)
    running = {p["name"] for g in st["gpus"] for p in g["processes"]}
    for name, (gpu, start) in placement.items():
        if name in running:
            continue
        g = st["gpus"][gpu]
        gi = next((x for x in g["gpu_instances"] if x["start"] == start), None) if start is not None else None
        g["processes"].append({"pid": PIDS[name], "name": name, "used_memory_mib": 1, "gi": gi and gi["id"],
                               "ci": gi and gi["cis"][0]["id"]})
    write_state(state, st)


def _where(state: Path) -> dict[str, tuple[int, int | None]]:
    """Where each service runs now, from the simulator's state (the truth)."""
    out = {}
    for g in read_state(state)["gpus"]:
        starts = {x["id"]: x["start"] for x in g["gpu_instances"]}
        for p in g["processes"]:
            out[p["name"]] = (g["index"], starts.get(p["gi"]) if p["gi"] is not None else None)
    return out


def _instance_mib(state: Path, gpu: int, start: int | None) -> int:
    g = read_state(state)["gpus"][gpu]
    if start is None:
        return MODEL.memory_mib
    gi = next(x for x in g["gpu_instances"] if x["start"] == start)
    return next(p.memory_mib for p in MODEL.profiles if p.id == gi["profile_id"])


def _nvml(state: Path, now: float, memory: dict[str, float]) -> FakeNvml:
    """The fake NVML showing the simulator's GPUs, instances and processes, with each service's memory."""
    gpus = []
    for g in read_state(state)["gpus"]:
        migs, index = [], {}
        for x in sorted(g["gpu_instances"], key=lambda x: x["start"]):
            prof = next(p for p in MODEL.profiles if p.id == x["profile_id"])
            index[x["id"]] = len(migs)
            migs.append(FakeMig(x["id"], prof.id, prof.name, x["start"], prof.memory_slices,
                                ci_id=x["cis"][0]["id"], memory_mib=prof.memory_mib))
        procs = [FakeProcess(p["pid"], memory[p["name"]], 10.0, mig=index.get(p["gi"]) if p["gi"] is not None else None,
                             start=T0 - 3600) for p in g["processes"]]
        gpus.append(FakeGpu(uuid=g["uuid"], mig=bool(g["mig_current"]), migs=migs, processes=procs))
    return FakeNvml(gpus, now=now)


@pytest.mark.slow
def test_48_hours_of_replan_fed_by_the_collector(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = _world(tmp_path, monkeypatch)
    history = tmp_path / "history"
    names = {pid: name for name, pid in PIDS.items()}
    rng = random.Random(11)
    ctx = build_context(str(tmp_path / "config.yaml"), None, None)
    level = dict(BASE)
    applied_at: list[int] = []
    placement = _where(state)
    assert all(start is None for _, start in placement.values())  # four whole GPUs, one service each
    for hour in range(48):
        if hour >= 30:
            level["svc-b"] = BASE["svc-b"] * (1 + 0.03 * (hour - 29))  # svc-b grows 3% an hour from hour 30
        for minute in range(0, 60, 10):
            t = T0 + hour * 3600 + minute * 60
            memory = {n: m * (1 + rng.uniform(-0.03, 0.03)) for n, m in level.items()}
            for name, (gpu, start) in _where(state).items():  # nothing ever runs out of its instance's memory
                assert memory[name] <= _instance_mib(state, gpu, start), (hour, minute, name, memory[name])
            fake = _nvml(state, t, memory)
            collect_local(LocalSettings(history=str(history), host="h1"), CAT, nvml=fake,
                          facts=lambda pid: ProcessFacts(pid, env={"MIGPLAN_WORKLOAD": names[pid]}),
                          now=lambda fake=fake: fake.now)
        now = dt.datetime.fromtimestamp(T0 + hour * 3600 + 3599, dt.timezone.utc)
        # the hourly run collects first: the host's store is fetched (here through the local runner)
        r = replan(ctx, ReplanRequest(fleet=FleetRequest(), state_dir=str(tmp_path / "state"), collect=True,
                                      remote_history=str(history / "history.sqlite"), window_s=24 * 3600.0),
                   now=now, connect=sim_runner.connect(state))
        assert r.exit_code in (EXIT_APPLIED, EXIT_NOTHING), (hour, r.line, r.applied and r.applied.to_dict())
        if r.exit_code == EXIT_APPLIED:
            applied_at.append(hour)
            placement = {w.name: (w.gpu, int(w.instance.split("@")[1]) if w.instance else None)
                         for w in r.plan.workloads if w.status == "placed"}  # type: ignore[union-attr, misc]
            _restart_stopped(state)
            _place(state, placement)
            assert _where(state) == placement, (hour, _where(state), placement)
        if hour == 0:
            assert r.exit_code == EXIT_APPLIED and "frees" in r.line, r.line
            assert r.plan.summary.gpus_used < 4  # type: ignore[union-attr]
        if hour == 40:  # the host reboots: every instance and process is gone; the boot unit restores
            reboot(state)
            done = apply_last(build_context(None, None, None), LastRequest(state_dir=str(tmp_path / "etc"),
                                                                           lock_file=str(tmp_path / "apply.lock"),
                                                                           host_name="h1"))
            assert done.exit_code == 0, done.to_dict() if hasattr(done, "to_dict") else done
            _place(state, placement)
            assert _where(state) == placement
    # consolidation at hour 0; svc-b moved while its peak still fit (the loop asserts it never exceeded)
    assert applied_at[0] == 0 and len(applied_at) == 2 and 30 <= applied_at[1] < 40, applied_at
    assert _instance_mib(state, *placement["svc-b"]) > 9856  # it left its 2g.10gb-sized instance
    runs = [json.loads(f.read_text()) for f in sorted((tmp_path / "state" / "runs").glob("*.json"))]
    assert len(runs) == 48 and {r["result"] for r in runs} <= {"applied", "nothing_to_do", "not_applied"}
    assert os.path.exists(tmp_path / "state" / "gpu-changes.json")
