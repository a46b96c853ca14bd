"""Apply on one simulated host through a local runner: placement-exact, only what changes, verified,
and every GPU ends as planned or exactly as before (the fleet tests do the same over SSH)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_runner
from helpers.samples import local_inventory
from planner_fixtures import EXACT, profiles, wl
from sim.fleet import Proc, host_state, read_state, write_state

from migplan.adapters.recording import RecordingRunner
from migplan.adapters.runner import LocalRunner
from migplan.adapters.solver import PulpSolver
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout
from migplan.fleet.apply import ApplyOptions, GpuOutcome, apply_host
from migplan.fleet.discover import discover_host
from migplan.fleet.snapshot import Snapshot
from migplan.fleet.steps import is_read_only
from migplan.inventory import Host
from migplan.planner import Plan, plan

# every test plans with CBC and runs each nvidia-smi as a real process: seconds each
pytestmark = pytest.mark.slow

CAT = builtin_catalog()
HOST = Host(name="h1", address="h1", lock_file=f"/tmp/migplan-test-apply-{os.getpid()}.lock")


def _runner(state: Path) -> LocalRunner:
    return sim_runner.local(state, "h1")


def _plan(state: Path, *work: object) -> Plan:
    snap = Snapshot((discover_host(_runner(state), HOST, CAT),))
    return plan(snap.fleet_state(catalog=CAT), profiles(*work), CAT, EXACT, PulpSolver(time_limit=30))  # type: ignore[arg-type]


def _layouts(state: Path) -> dict[int, Layout | None]:
    rec = discover_host(_runner(state), HOST, CAT)
    return {g.index: g.layout for g in rec.gpus}


def _host(path: Path, busy: dict[int, list[Proc]] | None = None) -> Path:
    """GPU 0 MIG on with 3g.20gb@0, GPU 1 MIG off (an A100-40GB host)."""
    st = host_state("A100-SXM4-40GB", 2, hostname="h1", layouts=[Layout.parse(["3g.20gb@0"]), None],
                    busy=busy or {})
    st["gpus"][1].update(mig_current=False, mig_pending=False, gpu_instances=[])
    return write_state(path, st)


def _gi_ids(state: Path, gpu: int) -> dict[tuple[int, int], int]:
    """(profile id, start) -> GPU instance id, from the simulator's own state."""
    g = read_state(state)["gpus"][gpu]
    return {(gi["profile_id"], gi["start"]): gi["id"] for gi in g["gpu_instances"]}


@pytest.fixture
def host(tmp_path: Path) -> Path:
    return _host(tmp_path / "h.json")


def test_apply_makes_every_gpu_as_planned_and_keeps_what_it_keeps(host: Path) -> None:
    # three more workloads than GPU 0 can take next to `a`: GPU 1 must be partitioned (MIG on)
    p = _plan(host, wl("a", 15000, host="h1", gpu_idx=0, inst="3g.20gb@0"), wl("b", 9000), wl("c", 4000),
              wl("d", 15000), wl("e", 9000), wl("f", 9000))
    kept = _gi_ids(host, 0)
    assert kept and _layouts(host)[1] is None
    res = apply_host(_runner(host), HOST, [g for g in p.gpus if g.host == "h1"], CAT, ApplyOptions())
    assert {r.gpu: r.outcome for r in res.gpus} == {0: GpuOutcome.APPLIED, 1: GpuOutcome.APPLIED}, res
    assert _layouts(host) == {g.index: g.target for g in p.gpus}
    after = _gi_ids(host, 0)
    assert all(after[k] == v for k, v in kept.items())  # the kept 3g.20gb@0 keeps its GPU instance id
    log = [a for a in read_state(host)["log"] if not is_read_only(["nvidia-smi", *a])]
    assert not any("-dgi" in a or "-dci" in a for a in log)  # nothing was destroyed
    assert p.gpu("h1", 1).current is None and p.gpu("h1", 1).target is not None  # type: ignore[union-attr]
    assert [a for a in log if "-r" in a] == [["-r", "-i", "1"]]  # only the GPU whose mode changed is reset

    again = apply_host(_runner(host), HOST, [g for g in p.gpus if g.host == "h1"], CAT, ApplyOptions())
    assert {r.outcome for r in again.gpus} == {GpuOutcome.UNCHANGED}
    mutating = [a for a in read_state(host)["log"] if not is_read_only(["nvidia-smi", *a])]
    assert mutating == log  # the idempotent re-apply ran no mutating command


def test_dry_run_records_exactly_what_apply_then_runs(host: Path, tmp_path: Path) -> None:
    p = _plan(host, wl("a", 15000, host="h1", gpu_idx=0, inst="3g.20gb@0"), wl("b", 9000), wl("c", 4000))
    gpus = [g for g in p.gpus if g.host == "h1"]
    rec = RecordingRunner(_runner(host), read_only=is_read_only)
    dry = apply_host(rec, HOST, gpus, CAT, ApplyOptions(dry_run=True))
    assert {r.outcome for r in dry.gpus} <= {GpuOutcome.WOULD_APPLY, GpuOutcome.UNCHANGED}
    assert _layouts(host)[0] == Layout.parse(["3g.20gb@0"])  # nothing changed
    real = apply_host(_runner(host), HOST, gpus, CAT, ApplyOptions())
    assert [list(a.argv) for a in rec.commands] == [c.split(" ") for r in real.gpus for c in r.commands]


def test_stale_gpu_is_refused_and_the_other_goes_ahead(host: Path) -> None:
    p = _plan(host, wl("b", 9000), wl("c", 4000), wl("d", 15000), wl("e", 9000), wl("f", 9000), wl("g", 9000))
    assert p.gpu("h1", 1).actions  # type: ignore[union-attr]
    _host(host, busy={1: [Proc(77, name="late.py")]})  # a process started on GPU 1 after planning
    res = {r.gpu: r for r in apply_host(_runner(host), HOST, [g for g in p.gpus if g.host == "h1"], CAT,
                                        ApplyOptions()).gpus}
    assert res[1].outcome is GpuOutcome.REFUSED and "whole GPU" in res[1].reason
    assert res[0].outcome in (GpuOutcome.APPLIED, GpuOutcome.UNCHANGED)


def test_a_failing_create_rolls_back_to_the_checkpoint(host: Path) -> None:
    p = _plan(host, wl("a", 15000, host="h1", gpu_idx=0, inst="3g.20gb@0"), wl("b", 9000), wl("c", 4000))
    state = read_state(host)
    # the second item of the create list fails after the first was created: the rollback must remove it
    state["faults"] = [{"match": "-cgi", "gpu": 0, "error": "Insufficient Resources", "after": 1, "times": 1}]
    write_state(host, state)
    before = _layouts(host)
    res = {r.gpu: r for r in apply_host(_runner(host), HOST, [g for g in p.gpus if g.host == "h1"], CAT,
                                        ApplyOptions()).gpus}
    first = next(r for r in res.values() if r.commands)
    assert first.outcome is GpuOutcome.ROLLED_BACK and "Insufficient Resources" in first.reason
    assert _layouts(host)[first.gpu] == before[first.gpu]


def test_one_apply_per_host_and_the_lock_goes_with_its_holder(host: Path) -> None:
    from migplan.adapters.host_lock import HostLocked, acquire

    p = _plan(host, wl("b", 9000))
    held = acquire(_runner(host), HOST.lock_file)
    try:
        with pytest.raises(HostLocked, match="another migplan apply is running"):
            apply_host(_runner(host), HOST, [g for g in p.gpus if g.host == "h1"], CAT, ApplyOptions())
    finally:
        held.release()
    res = apply_host(_runner(host), HOST, [g for g in p.gpus if g.host == "h1"], CAT, ApplyOptions())
    assert {r.outcome for r in res.gpus} <= {GpuOutcome.APPLIED, GpuOutcome.UNCHANGED}


def test_connection_local_discovers_and_applies_on_this_machine(host: Path, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """`connection: local` (and Ansible's `ansible_connection: local`): the same commands, locks and checks,
    without SSH."""
    import json

    import yaml
    from typer.testing import CliRunner

    from migplan.cli.app import app

    sim_runner.serve(monkeypatch, host)  # the CLI builds its own runner
    inv = tmp_path / "inv.yaml"
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"h1": {
        "ansible_connection": "local", "migplan_discover": True,
        "migplan_lock_file": str(tmp_path / "apply.lock"), "migplan_state_dir": str(tmp_path / "etc")}}}}))
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump({"version": 1, "workloads": [
        {"name": "b", "memory_mib": {"p50": 9000, "p95": 9000, "p99": 9000, "max": 9000},
         "compute": {"p50": 0.05, "p95": 0.1, "max": 0.1}}]}))
    cli = CliRunner()
    snap, plan_file = tmp_path / "snap.json", tmp_path / "plan.json"
    r = cli.invoke(app, ["discover", "-i", str(inv), "--out", str(snap), "--known-hosts", str(tmp_path / "kh")])
    assert r.exit_code == 0, r.output
    r = cli.invoke(app, ["propose", "--snapshot", str(snap), "-p", str(prof), "--out", str(plan_file)])
    assert r.exit_code == 0, r.output
    r = cli.invoke(app, ["apply", str(plan_file), "-i", str(inv), "--yes", "-o", "json",
                         "--known-hosts", str(tmp_path / "kh")])
    assert r.exit_code == 0, r.output
    doc = json.loads(plan_file.read_text())
    assert _layouts(host) == {g["index"]: (Layout.parse(g["target"]) if g["target"] is not None else None)
                              for g in doc["gpus"]}


def _local_inventory(tmp_path: Path, hooks: dict[str, list[str]]) -> Path:
    return local_inventory(tmp_path, hooks=hooks)


def _plan_file(host: Path, tmp_path: Path) -> Path:
    from migplan.documents import write_plan

    p = _plan(host, wl("a", 15000, host="h1", gpu_idx=0, inst="3g.20gb@0"), wl("b", 9000), wl("c", 4000))
    out = tmp_path / "plan.json"
    write_plan(out, p)
    return out


def test_hooks_run_around_the_apply_with_what_changes(host: Path, tmp_path: Path) -> None:
    from migplan.commands.apply import ApplyRequest, apply
    from migplan.commands.context import build_context
    from migplan.commands.fleet import FleetRequest

    out = tmp_path / "hooks.out"
    inv = _local_inventory(tmp_path, {"pre_apply": [f"sh -c 'echo pre $MIGPLAN_GPUS > {out}'"],
                                      "post_apply": [f"sh -c 'echo post $MIGPLAN_RESULT >> {out}'"]})
    req = ApplyRequest(plan=str(_plan_file(host, tmp_path)), fleet=FleetRequest(inventory=str(inv)))
    res = apply(build_context(None, None, None), req, connect=sim_runner.connect(host))
    assert res.exit_code == 0, res.to_dict()
    changed = ",".join(str(g.index) for g in res.plan.gpus if g.actions)
    assert out.read_text().split("\n")[:2] == [f"pre {changed}", "post ok"]
    # tasks find their partition: the map on the host, and one env file per workload
    doc = json.loads((tmp_path / "etc" / "assignments.json").read_text())
    assert {w["name"] for w in doc["workloads"]} == {"a", "b", "c"} and doc["kind"] == "migplan/assignments"
    assert all(w["device"] and w["device"].startswith("MIG-") for w in doc["workloads"])
    env = (tmp_path / "etc" / "env" / "b.env").read_text()
    mine = next(w for w in doc["workloads"] if w["name"] == "b")
    assert f"CUDA_VISIBLE_DEVICES={mine['device']}" in env and f"MIGPLAN_INSTANCE={mine['instance']}" in env


def test_a_failing_pre_apply_hook_skips_the_host(host: Path, tmp_path: Path) -> None:
    from migplan.commands.apply import EXIT_NOTHING_APPLIED, ApplyRequest, apply
    from migplan.commands.context import build_context
    from migplan.commands.fleet import FleetRequest

    inv = _local_inventory(tmp_path, {"pre_apply": ["sh -c 'echo drain refused >&2; exit 3'"]})
    before = _layouts(host)
    req = ApplyRequest(plan=str(_plan_file(host, tmp_path)), fleet=FleetRequest(inventory=str(inv)))
    res = apply(build_context(None, None, None), req, connect=sim_runner.connect(host))
    assert res.exit_code == EXIT_NOTHING_APPLIED
    assert "pre_apply hook" in (res.hosts[0].error or "") and "drain refused" in (res.hosts[0].error or "")
    assert _layouts(host) == before
