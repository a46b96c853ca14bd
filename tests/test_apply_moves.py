"""Apply beyond one GPU at a time: the plan's migration order (make-before-break, stop-first) with the
per-move hooks, the host pre-flight, "reset needed" when the driver refuses the Ampere reset, and the
created instances' memory read back (the simulator prints NVIDIA's texts; it imports nothing from migplan)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_runner
from helpers.samples import local_inventory
from sim.fleet import Proc, host_state, read_state, write_state
from sim_runner import InProcess

from migplan.adapters.runner import DEFAULT_TIMEOUT, Completed, FilesDone, FileToPut, Prune
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Instance, Layout
from migplan.commands.apply import _Journal, _MoveHooks
from migplan.fleet.apply import ApplyOptions, GpuOutcome, MoveEvent, apply_host
from migplan.fleet.discover import discover_host
from migplan.fleet.steps import is_read_only
from migplan.inventory import Hooks, Host
from migplan.model.diff import diff
from migplan.model.gpu_plan import Endpoint, GpuPlan, Migration
from migplan.model.state import GpuState

CAT = builtin_catalog()
A100 = CAT.get("A100-SXM4-40GB")
HOST = Host(name="h", address="h", lock_file=f"/tmp/migplan-test-moves-{os.getpid()}.lock")


class Hybrid(InProcess):
    """nvidia-smi in-process (fast); every other command and the files on this machine (hooks, env files)."""

    def __init__(self, state: Path) -> None:
        super().__init__(state)
        self.local = sim_runner.local(state, "h")

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT, stdin: bytes | None = None) -> Completed:
        if argv[0] == "nvidia-smi":
            return super().run(argv, timeout=timeout, stdin=stdin)
        return self.local.run(argv, timeout=timeout, stdin=stdin)

    def put_file(self, remote_path: str, data: bytes, *, mode: int = 0o644, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.local.put_file(remote_path, data, mode=mode, timeout=timeout)

    def put_files(self, directory: str, files: Sequence[FileToPut], *, prune: Prune | None = None,
                  timeout: float = DEFAULT_TIMEOUT) -> FilesDone:
        return self.local.put_files(directory, files, prune=prune, timeout=timeout)


def _state(tmp: Path, layouts: list[list[str] | None], busy: dict[int, list[Proc]] | None = None,
           model: str = "A100-SXM4-40GB", **flags: Any) -> Path:
    st = host_state(model, len(layouts), hostname="h", layouts=[lay or [] for lay in layouts], busy=busy or {},
                    **flags)
    for gpu, lay in zip(st["gpus"], layouts, strict=True):
        if lay is None:
            gpu.update(mig_current=False, mig_pending=False, gpu_instances=[])
    return write_state(tmp / "h.json", st)


def _plans(state: Path, targets: dict[int, list[str] | None], model: str = "A100-SXM4-40GB") -> list[GpuPlan]:
    rec = discover_host(InProcess(state), HOST, CAT)
    arch = CAT.get(model).architecture
    out = []
    for d in rec.gpus:
        st = d.state("h", model)
        assert st is not None
        target = Layout.parse(targets[d.index]) if targets[d.index] is not None else None  # type: ignore[arg-type]
        out.append(GpuPlan(st, target, tuple(diff(st.current, target, gpu=("h", d.index), architecture=arch))))
    return out


def _layouts(state: Path) -> dict[int, Layout | None]:
    return {g.index: g.layout for g in discover_host(InProcess(state), HOST, CAT).gpus}


def _gi(state: Path, gpu: int, start: int) -> int:
    return next(gi["id"] for gi in read_state(state)["gpus"][gpu]["gpu_instances"] if gi["start"] == start)


def _mutating(state: Path) -> list[list[str]]:
    return [a for a in read_state(state)["log"] if not is_read_only(["nvidia-smi", *a])]


def _stop_process(state: Path, pid: int) -> None:
    """What an operator's hook does to the old copy: the process on the source instance exits."""
    st = read_state(state)
    for gpu in st["gpus"]:
        gpu["processes"] = [p for p in gpu["processes"] if p["pid"] != pid]
    write_state(state, st)


def _move(step: int, name: str, src: tuple[int, str], dst: tuple[int, str], *, mbb: bool) -> Migration:
    return Migration(step, name, Endpoint("h", *src), Endpoint("h", *dst), make_before_break=mbb, stop_first=not mbb)


def test_make_before_break_creates_the_target_before_destroying_the_source(tmp_path: Path) -> None:
    state = _state(tmp_path, [["3g.20gb@0", "3g.20gb@4"], []], busy={0: [Proc(4711, start=0)]})
    kept = _gi(state, 0, 4)
    plans = _plans(state, {0: ["4g.20gb@0", "3g.20gb@4"], 1: ["3g.20gb@0"]})
    seen: list[tuple[MoveEvent, dict[int, Layout | None]]] = []

    def on_move(e: MoveEvent) -> None:
        seen.append((e, _layouts(state)))
        _stop_process(state, 4711)  # the hook moved the workload: its old copy stops
    res = apply_host(InProcess(state), HOST, plans, CAT, ApplyOptions(allow_disrupt=True),  # type: ignore[arg-type]
                     migrations=[_move(1, "w1", (0, "3g.20gb@0"), (1, "3g.20gb@0"), mbb=True)], on_move=on_move)
    assert [r.outcome for r in res.gpus] == [GpuOutcome.APPLIED, GpuOutcome.APPLIED], res
    [(event, during)] = seen
    assert event.phase == "move" and event.gpus == (0, 1)
    # at the hook both copies exist: the new instance on GPU 1 and the old one on GPU 0
    assert Instance(0, "3g.20gb") in during[1].instances and Instance(0, "3g.20gb") in during[0].instances  # type: ignore[union-attr]
    assert event.old_device and event.new_device and event.old_device != event.new_device
    assert event.old_device.startswith("MIG-") and event.new_device.startswith("MIG-")
    log = _mutating(state)
    first_create_on_1 = next(n for n, a in enumerate(log) if "-cgi" in a and a[2] == "1")
    first_destroy_on_0 = next(n for n, a in enumerate(log) if "-dgi" in a and a[2] == "0")
    assert first_create_on_1 < first_destroy_on_0
    assert _layouts(state) == {0: Layout.parse(["4g.20gb@0", "3g.20gb@4"]), 1: Layout.parse(["3g.20gb@0"])}
    assert _gi(state, 0, 4) == kept  # the instance the plan keeps was never touched


@pytest.mark.parametrize("mbb", [False, True], ids=["stop-first", "make-before-break-that-cannot-fit"])
def test_stop_first_destroys_then_creates_with_a_hook_on_each_side(tmp_path: Path, mbb: bool) -> None:
    state = _state(tmp_path, [["3g.20gb@0", "3g.20gb@4"]], busy={0: [Proc(4711, start=0)]})
    plans = _plans(state, {0: ["4g.20gb@0", "3g.20gb@4"]})
    seen: list[tuple[str, str | None, str | None, Layout | None]] = []

    def on_move(e: MoveEvent) -> None:
        seen.append((e.phase, e.old_device, e.new_device, _layouts(state)[0]))
        if e.phase == "stop":
            _stop_process(state, 4711)
    res = apply_host(InProcess(state), HOST, plans, CAT, ApplyOptions(allow_disrupt=True),  # type: ignore[arg-type]
                     migrations=[_move(1, "w1", (0, "3g.20gb@0"), (0, "4g.20gb@0"), mbb=mbb)], on_move=on_move)
    assert res.gpus[0].outcome is GpuOutcome.APPLIED, res
    # 4g.20gb@0 overlaps 3g.20gb@0: it can only exist after the old one is gone, whatever the plan hoped
    assert [s[0] for s in seen] == ["stop", "start"]
    assert seen[0][3] == Layout.parse(["3g.20gb@0", "3g.20gb@4"]) and seen[0][2] is None
    assert seen[1][3] == Layout.parse(["4g.20gb@0", "3g.20gb@4"]) and seen[1][2] and seen[1][2].startswith("MIG-")


def test_a_failing_move_hook_rolls_back_both_gpus_of_the_move(tmp_path: Path) -> None:
    state = _state(tmp_path, [["3g.20gb@0", "3g.20gb@4"], []], busy={0: [Proc(4711, start=0)]})
    before = _layouts(state)
    plans = _plans(state, {0: ["4g.20gb@0", "3g.20gb@4"], 1: ["3g.20gb@0"]})
    res = apply_host(InProcess(state), HOST, plans, CAT, ApplyOptions(allow_disrupt=True),  # type: ignore[arg-type]
                     migrations=[_move(1, "w1", (0, "3g.20gb@0"), (1, "3g.20gb@0"), mbb=True)],
                     on_move=lambda e: "the service did not drain")
    assert [r.outcome for r in res.gpus] == [GpuOutcome.ROLLED_BACK, GpuOutcome.ROLLED_BACK], res
    assert "did not drain" in res.gpus[0].reason and "did not drain" in res.gpus[1].reason
    assert _layouts(state) == before
    assert not any("-dgi" in a and a[2] == "0" for a in _mutating(state))  # the busy source was never destroyed


def test_without_allow_disrupt_the_move_order_is_not_used_and_the_busy_gpu_is_skipped(tmp_path: Path) -> None:
    state = _state(tmp_path, [["3g.20gb@0", "3g.20gb@4"], []], busy={0: [Proc(4711, start=0)]})
    plans = _plans(state, {0: ["4g.20gb@0", "3g.20gb@4"], 1: ["3g.20gb@0"]})
    called: list[MoveEvent] = []
    res = apply_host(InProcess(state), HOST, plans, CAT, ApplyOptions(),  # type: ignore[arg-type]
                     migrations=[_move(1, "w1", (0, "3g.20gb@0"), (1, "3g.20gb@0"), mbb=True)],
                     on_move=lambda e: called.append(e) and None)
    assert res.gpus[0].outcome is GpuOutcome.SKIPPED and "--allow-disrupt" in res.gpus[0].reason
    assert res.gpus[1].outcome is GpuOutcome.APPLIED and not called


def test_on_move_hooks_get_the_map_in_the_environment_and_in_a_json_file(tmp_path: Path) -> None:
    state = _state(tmp_path, [["3g.20gb@0", "3g.20gb@4"], []])
    out = tmp_path / "hook"
    out.mkdir()
    host = Host(name="h", address="h", lock_file=HOST.lock_file, state_dir=str(tmp_path / "etc"),
                hooks=Hooks(on_move=(f"sh -c 'cp \"$MIGPLAN_MOVE_FILE\" {out}/$MIGPLAN_MOVE_PHASE.json; "
                                     f"env > {out}/$MIGPLAN_MOVE_PHASE.env'",)))
    runner = Hybrid(state)
    plans = _plans(state, {0: ["4g.20gb@0", "3g.20gb@4"], 1: ["3g.20gb@0"]})
    hooks = _MoveHooks(runner, host, "sha256:" + "0" * 64, _Journal(None, None), ApplyOptions())
    res = apply_host(runner, host, plans, CAT, ApplyOptions(allow_disrupt=True),  # type: ignore[arg-type]
                     migrations=[_move(1, "w1", (0, "3g.20gb@0"), (1, "3g.20gb@0"), mbb=True)], on_move=hooks)
    assert [r.outcome for r in res.gpus] == [GpuOutcome.APPLIED, GpuOutcome.APPLIED], res
    doc = json.loads((out / "move.json").read_text())
    env = dict(line.split("=", 1) for line in (out / "move.env").read_text().splitlines() if "=" in line)
    assert doc["kind"] == "migplan/move" and doc["workload"] == "w1" and doc["gpus"] == [0, 1]
    assert doc["source"]["instance"] == "3g.20gb@0" and doc["target"] == {
        "host": "h", "gpu": 1, "instance": "3g.20gb@0", "device": env["MIGPLAN_NEW_DEVICE"]}
    assert env["MIGPLAN_OLD_DEVICE"] == doc["source"]["device"] and env["MIGPLAN_OLD_DEVICE"].startswith("MIG-")
    assert env["MIGPLAN_NEW_DEVICE"].startswith("MIG-") and env["MIGPLAN_OLD_INSTANCE"] == "0:3g.20gb@0"
    assert env["MIGPLAN_NEW_INSTANCE"] == "1:3g.20gb@0" and env["MIGPLAN_GPUS"] == "0,1"
    new_uuids = {ci["uuid"] for gi in read_state(state)["gpus"][1]["gpu_instances"] for ci in gi["cis"]}
    assert env["MIGPLAN_NEW_DEVICE"] in new_uuids  # the device the simulator really created
    assert hooks.seen and hooks.seen[0]["new_device"] == env["MIGPLAN_NEW_DEVICE"]


# --- pre-flight ---------------------------------------------------------------------------------

def test_a_driver_whose_cgi_takes_no_placement_fails_the_preflight_and_nothing_runs(tmp_path: Path) -> None:
    state = _state(tmp_path, [["3g.20gb@0"], []], cgi_placement=False)
    res = apply_host(InProcess(state), HOST, _plans(state, {0: ["3g.20gb@0", "3g.20gb@4"], 1: ["7g.40gb@0"]}), CAT,
                     ApplyOptions())  # type: ignore[arg-type]
    assert res.gpus == () and res.preflight is not None
    assert "pre-flight failed, nothing changed" in res.preflight and "-cgi PROFILE:START" in res.preflight
    assert _mutating(state) == []


def test_gpu_models_must_match_the_plan(tmp_path: Path) -> None:
    state = _state(tmp_path, [["3g.20gb@0"]])
    [gp] = _plans(state, {0: ["3g.20gb@0", "3g.20gb@4"]})
    a30 = GpuState(host="h", index=0, model="A30", uuid=gp.uuid, mig_enabled=True, layout=Layout())
    wrong = GpuPlan(a30, Layout.parse(["2g.12gb@0"]), tuple(diff(Layout(), Layout.parse(["2g.12gb@0"]))))
    res = apply_host(InProcess(state), HOST, [wrong], CAT, ApplyOptions())  # type: ignore[arg-type]
    assert res.preflight and "GPU 0 is a A100" in res.preflight and "made for a A30" in res.preflight
    assert _mutating(state) == []


def test_a_become_prefix_that_refuses_fails_the_preflight(tmp_path: Path) -> None:
    state = _state(tmp_path, [["3g.20gb@0"]])
    sudo = tmp_path / "bin" / "sudo"
    sudo.parent.mkdir()
    sudo.write_text("#!/bin/sh\necho 'sudo: a password is required' >&2\nexit 1\n")
    sudo.chmod(0o755)
    runner = sim_runner.local(state, "h", become=(str(sudo), "-n"))
    plans = _plans(state, {0: ["3g.20gb@0", "3g.20gb@4"]})
    seen = len(read_state(state)["log"])
    res = apply_host(runner, HOST, plans, CAT, ApplyOptions())
    assert res.preflight and "a password is required" in res.preflight
    assert len(read_state(state)["log"]) == seen  # not even a read reached nvidia-smi


# --- reset needed -------------------------------------------------------------------------------

@pytest.mark.parametrize(("flags", "expect"), [
    ({"reset_holders": ["nvidia-persistenced"]}, "nvidia-persistenced"),
    ({"mode_reset": "not-supported"}, "reboot"),
], ids=["persistence-daemon", "vm-without-reset"])
def test_a_refused_reset_reports_reset_needed_and_rolls_back(tmp_path: Path, flags: dict[str, Any],
                                                             expect: str) -> None:
    state = _state(tmp_path, [None, None])
    st = read_state(state)
    st["gpus"][1].update(flags)
    write_state(state, st)
    res = apply_host(InProcess(state), HOST, _plans(state, {0: None, 1: ["7g.40gb@0"]}), CAT,
                     ApplyOptions())  # type: ignore[arg-type]
    [r] = [g for g in res.gpus if g.gpu == 1]
    assert r.outcome is GpuOutcome.ROLLED_BACK, r
    assert r.reason.startswith("reset needed:") and expect in r.reason and any(expect in s for s in r.reset_needed)
    gpu = read_state(state)["gpus"][1]
    assert (gpu["mig_current"], gpu["mig_pending"]) == (False, False)  # the pending mode change was undone
    assert [a for a in _mutating(state) if a[:1] == ["-r"]] == [["-r", "-i", "1"]]  # only that GPU, once


def test_a_refused_reset_names_the_processes_on_the_gpu(tmp_path: Path) -> None:
    state = _state(tmp_path, [None], busy={0: [Proc(999, name="jupyter")]})
    st = read_state(state)
    st["gpus"][0]["reset_holders"] = ["Xorg"]
    write_state(state, st)
    res = apply_host(InProcess(state), HOST, _plans(state, {0: ["7g.40gb@0"]}), CAT,
                     ApplyOptions(allow_disrupt=True))  # type: ignore[arg-type]
    assert res.gpus[0].outcome is GpuOutcome.ROLLED_BACK and "process 999 (jupyter)" in res.gpus[0].reason


# --- memory read back ---------------------------------------------------------------------------

def test_a_created_instance_with_less_memory_than_planned_is_rolled_back(tmp_path: Path) -> None:
    state = _state(tmp_path, [["3g.20gb@0"]])
    st = read_state(state)
    st["gpus"][0]["instance_memory_mib"] = {"2g.10gb": 9000}  # the driver hands out less than -lgip promised
    write_state(state, st)
    res = apply_host(InProcess(state), HOST, _plans(state, {0: ["3g.20gb@0", "2g.10gb@4", "1g.5gb@6"]}), CAT,
                     ApplyOptions())  # type: ignore[arg-type]
    r = res.gpus[0]
    assert r.outcome is GpuOutcome.ROLLED_BACK, r
    assert f"2g.10gb@4 has 9000 MiB, the plan assumed {A100.profile('2g.10gb').memory_mib} MiB" in r.reason
    assert _layouts(state)[0] == Layout.parse(["3g.20gb@0"])


def test_created_instances_with_the_planned_memory_are_applied(tmp_path: Path) -> None:
    state = _state(tmp_path, [["3g.20gb@0"]])
    res = apply_host(InProcess(state), HOST, _plans(state, {0: ["3g.20gb@0", "2g.10gb@4", "1g.5gb@6"]}), CAT,
                     ApplyOptions())  # type: ignore[arg-type]
    assert res.gpus[0].outcome is GpuOutcome.APPLIED
    assert [] in read_state(state)["log"]  # plain `nvidia-smi`: the MIG devices table with their memory was read


def test_a_move_to_a_mig_disabled_gpu_enables_mig_there_first_and_stops_what_the_step_names(tmp_path: Path) -> None:
    """Execution model of planner/migration.py: idle instances the plan drops go first (step 0); a step's
    `stops` leave before its target is created; the target GPU gets its MIG mode (with a reset of that one
    Ampere GPU) at the step, so make-before-break holds across a mode change."""
    state = _state(tmp_path, [["3g.20gb@0", "2g.10gb@4", "1g.5gb@6"], None],
                   busy={0: [Proc(4711, start=0), Proc(4712, start=4)]})
    plans = _plans(state, {0: ["4g.20gb@0"], 1: ["3g.20gb@0"]})
    idle = _gi(state, 0, 6)
    phases: list[tuple[str, str, Layout | None, Layout | None]] = []

    def on_move(e: MoveEvent) -> None:
        now = _layouts(state)
        phases.append((e.workload, e.phase, now[0], now[1]))
        if e.phase in ("move", "stop"):
            _stop_process(state, 4711 if e.workload == "w1" else 4712)
    moves = [Migration(1, "w1", Endpoint("h", 0, "3g.20gb@0"), Endpoint("h", 1, "3g.20gb@0"),
                       make_before_break=True, stop_first=False, stops=("w2",)),
             Migration(2, "w2", Endpoint("h", 0, "2g.10gb@4"), Endpoint("h", 0, "4g.20gb@0"),
                       make_before_break=False, stop_first=True)]
    res = apply_host(InProcess(state), HOST, plans, CAT, ApplyOptions(allow_disrupt=True),  # type: ignore[arg-type]
                     migrations=moves, on_move=on_move)
    assert [r.outcome for r in res.gpus] == [GpuOutcome.APPLIED, GpuOutcome.APPLIED], res
    log = _mutating(state)
    assert log[0][:4] == ["mig", "-i", "0", "-dci"] and log[0][-1] == str(idle)  # step 0: the idle 1g.5gb@6
    assert "1g.5gb" not in str(phases[0][2])  # step 0: the idle 1g.5gb@6 was gone before the first hook
    assert [(w, p) for w, p, *_ in phases] == [("w2", "stop"), ("w1", "move"), ("w2", "start")]
    _, _, gpu0_at_move, gpu1_at_move = phases[1]
    assert gpu1_at_move == Layout.parse(["3g.20gb@0"]) and Instance(0, "3g.20gb") in gpu0_at_move.instances  # type: ignore[union-attr]
    assert ["-i", "1", "-mig", "1"] in log and ["-r", "-i", "1"] in log and ["-r", "-i", "0"] not in log
    assert _layouts(state) == {0: Layout.parse(["4g.20gb@0"]), 1: Layout.parse(["3g.20gb@0"])}


@pytest.mark.slow  # plans with CBC and applies through real processes
def test_a_planned_move_runs_its_on_move_hook_end_to_end(tmp_path: Path) -> None:
    """The planner's own migrations (Plan.migrations, read back from the plan document) drive the hooks."""
    import dataclasses

    from planner_fixtures import EXACT, profiles, wl

    from migplan.adapters.solver import PulpSolver
    from migplan.commands.apply import ApplyRequest, apply
    from migplan.commands.context import build_context
    from migplan.commands.fleet import FleetRequest
    from migplan.documents import write_plan
    from migplan.fleet.snapshot import Snapshot
    from migplan.planner import plan

    st = host_state("A100-SXM4-40GB", 2, hostname="h1", layouts=[["3g.20gb@0"], []],
                    busy={0: [Proc(77, start=0)]})
    st["gpus"][1].update(mig_current=False, mig_pending=False)
    state = write_state(tmp_path / "h.json", st)
    snap = Snapshot((discover_host(sim_runner.local(state), Host(name="h1", address="h1"), CAT),))
    p = plan(snap.fleet_state(catalog=CAT), profiles(wl("a", 21000, host="h1", gpu_idx=0, inst="3g.20gb@0"),
                                                    wl("b", 9000)),
             CAT, dataclasses.replace(EXACT, allow_disrupt=True), PulpSolver(time_limit=30))
    moves = getattr(p, "migrations", ())
    assert moves, "the planner moves the outgrown workload 'a' (Plan.migrations)"
    write_plan(tmp_path / "plan.json", p)
    out = tmp_path / "hook"
    out.mkdir()
    inv = local_inventory(tmp_path, hooks={
        "on_move": [f"sh -c 'env > {out}/$MIGPLAN_WORKLOAD.$MIGPLAN_MOVE_PHASE.env'"]})
    res = apply(build_context(None, None, None), ApplyRequest(plan=str(tmp_path / "plan.json"), fleet=FleetRequest(
        inventory=str(inv)), allow_disrupt=True), connect=sim_runner.connect(state))
    assert res.exit_code == 0, res.to_dict()
    [m] = moves
    [env_file] = list(out.glob(f"{m.workload}.*.env"))
    env = dict(line.split("=", 1) for line in env_file.read_text().splitlines() if "=" in line)
    assert env["MIGPLAN_WORKLOAD"] == m.workload and env["MIGPLAN_OLD_DEVICE"].startswith("MIG-")
    assert env["MIGPLAN_NEW_DEVICE"].startswith(("MIG-", "GPU-"))
    assert res.hosts[0].moves and res.hosts[0].moves[0]["workload"] == m.workload
