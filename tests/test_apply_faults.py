"""Faults at every step of an apply, one run per (step, fault): each run ends with the GPU exactly as
planned or exactly as before, and the result says which (the simulator injects NVIDIA's real errors,
hangs, dropped connections, a process appearing on the instance about to be destroyed, a command that
reports success but did nothing (a verification mismatch), and a refused reset).

Runs: 3 re-partition steps (-dci, -dgi, -cgi) x 10 faults + a process appearing before -dci = 31, plus the
mode change (-mig, -r, -cgi on an Ampere GPU going from MIG off to a partition) x 9 faults = 27: 58 runs over
5 distinct steps."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_runner
from sim.fleet import host_state, read_state, write_state
from sim_runner import InProcess

from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout
from migplan.fleet.apply import ApplyOptions, GpuOutcome, apply_host
from migplan.fleet.discover import discover_host
from migplan.inventory import Host
from migplan.model.diff import diff
from migplan.model.gpu_plan import GpuPlan
from migplan.model.state import GpuState

CAT = builtin_catalog()
MODEL = CAT.get("A100-SXM4-40GB")
BEFORE = Layout.parse(["3g.20gb@0", "3g.20gb@4"])
TARGET = Layout.parse(["3g.20gb@0", "2g.10gb@4", "1g.5gb@6"])
HOST = Host(name="h", address="h", lock_file=f"/tmp/migplan-test-faults-{os.getpid()}.lock")
STEPS = ("-dci", "-dgi", "-cgi")
ERRORS = ("In use by another client", "Insufficient Resources", "Invalid Argument", "Not Supported",
          "Insufficient Permissions", "Unknown Error")
FAULTS = [{"error": e} for e in ERRORS] + [{"drop": "before"}, {"drop": "after"}, {"hang": 8},
                                            {"exit": 0, "stdout": ""}]  # "succeeded", did nothing: mismatch
# a process starts on 3g.20gb@4 (which the plan destroys) just before its compute instance is destroyed
CASES = [(step, fault) for step in STEPS for fault in FAULTS] + [("-dci", {"spawn": 4})]
MODE_STEPS = ("-mig", "-r", "-cgi")
MODE_FAULTS = [{"error": e} for e in ERRORS] + [{"drop": "before"}, {"drop": "after"}, {"exit": 0, "stdout": ""}]
MODE_CASES = [(step, fault) for step in MODE_STEPS for fault in MODE_FAULTS]


def _run(tmp_path: Path, step: str, fault: dict[str, object]) -> tuple[GpuOutcome, Layout | None, str]:
    state = write_state(tmp_path / "h.json", host_state("A100-SXM4-40GB", 1, hostname="h", layouts=[BEFORE]))
    # a hang needs a real process for the timeout; everything else runs in-process (fast)
    runner = sim_runner.local(state, "h") if "hang" in fault else InProcess(state)
    res, _ = _apply_with_fault(state, runner, BEFORE, step, fault)
    return res.outcome, discover_host(InProcess(state), HOST, CAT).gpus[0].layout, res.reason


def _apply_with_fault(state: Path, runner: Any, current: Layout | None, step: str,
                      fault: dict[str, object]) -> tuple[Any, dict[str, Any]]:
    """Apply current -> TARGET on GPU 0 with one fault armed at `step`: (its GPU result, the host state after).
    The fault must have fired, or the run tested nothing."""
    uuid = discover_host(runner, HOST, CAT).gpus[0].uuid
    observed = GpuState(host="h", index=0, model=MODEL.id, uuid=uuid, mig_enabled=current is not None,
                        layout=current)
    plan = GpuPlan(observed, TARGET, tuple(diff(current, TARGET, gpu=("h", 0), architecture=MODEL.architecture)))
    st = read_state(state)
    st["faults"] = [{"match": step, "times": 1, **fault}]
    write_state(state, st)
    res = apply_host(runner, HOST, [plan], CAT, ApplyOptions(timeout=3.0)).gpus[0]  # type: ignore[arg-type]
    st = read_state(state)
    assert st["faults"][0].get("fired") == 1, "the fault never fired: this run tested nothing"
    return res, st


def _id(step: str, fault: dict[str, object]) -> str:
    return f"{step}-{'-'.join(f'{k}={v}' for k, v in fault.items())}"


# a hang runs in a real process and waits out the apply's timeout: slow; the others run in-process
@pytest.mark.parametrize(("step", "fault"), [
    pytest.param(s, f, id=_id(s, f), marks=[pytest.mark.slow] if "hang" in f else []) for s, f in CASES])
def test_every_fault_leaves_the_gpu_as_planned_or_as_before(tmp_path: Path, step: str,
                                                            fault: dict[str, object]) -> None:
    outcome, final, reason = _run(tmp_path, step, fault)
    assert final in (BEFORE, TARGET), (final, reason)
    if "spawn" in fault:  # the driver refuses to destroy an instance in use: nothing running is ever destroyed
        assert outcome is GpuOutcome.ROLLED_BACK and "In use by another client" in reason, reason
    if outcome is GpuOutcome.APPLIED:
        assert final == TARGET
    else:
        assert outcome is GpuOutcome.ROLLED_BACK and final == BEFORE, (outcome, final, reason)


def _run_mode(tmp_path: Path, step: str, fault: dict[str, object]) -> tuple[GpuOutcome, Layout | None, bool, str]:
    st = host_state("A100-SXM4-40GB", 1, hostname="h")
    st["gpus"][0].update(mig_current=False, mig_pending=False, gpu_instances=[])
    state = write_state(tmp_path / "h.json", st)
    res, st = _apply_with_fault(state, InProcess(state), None, step, fault)
    gpu = st["gpus"][0]
    return (res.outcome, discover_host(InProcess(state), HOST, CAT).gpus[0].layout,
            gpu["mig_current"] == gpu["mig_pending"], res.reason)


@pytest.mark.parametrize(("step", "fault"), MODE_CASES, ids=[_id(s, f) for s, f in MODE_CASES])
def test_every_fault_of_a_mode_change_leaves_the_gpu_as_planned_or_as_before(tmp_path: Path, step: str,
                                                                             fault: dict[str, object]) -> None:
    outcome, final, settled, reason = _run_mode(tmp_path, step, fault)
    assert settled, "a MIG mode change was left pending"
    if outcome is GpuOutcome.APPLIED:
        assert final == TARGET
    else:
        assert outcome is GpuOutcome.ROLLED_BACK and final is None, (outcome, final, reason)  # MIG off, as before
    if step == "-r" and fault.get("error") == "In use by another client":
        assert reason.startswith("reset needed:")
