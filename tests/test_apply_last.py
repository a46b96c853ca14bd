"""`migplan apply --last`: MIG instances vanish at a reboot (and Hopper's MIG mode with them); the layout
applied last on a host is kept there (`last-applied.json`) and re-applied exactly, with the tasks' env files
rewritten for the new MIG device UUIDs. Also the local copy of the fleet's assignments map."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_runner
from helpers.samples import local_inventory, lowmem_catalog
from planner_fixtures import EXACT, profiles, wl
from sim.fleet import host_state, read_state, reboot, write_state

from migplan.adapters.solver import PulpSolver
from migplan.catalog import Catalog, builtin_catalog
from migplan.catalog.layout import Layout
from migplan.commands.apply import ApplyRequest, LastRequest, apply, apply_last
from migplan.commands.context import build_context
from migplan.commands.fleet import FleetRequest
from migplan.documents import write_plan
from migplan.errors import InputError
from migplan.fleet.discover import discover_host
from migplan.fleet.snapshot import Snapshot
from migplan.inventory import Host
from migplan.planner import plan

CAT = builtin_catalog()


def _last(**kw: str) -> LastRequest:
    """apply --last as the boot unit of the simulated host "h1" runs it (its inventory name, not this machine's)."""
    return LastRequest(host_name="h1", **kw)


def _setup(tmp: Path, model: str, monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[Path, Path, Path]:
    """A two-GPU host (GPU 0 partitioned, GPU 1 MIG off), a plan for it, and an inventory (connection local).
    With `monkeypatch`, the host is also served (sim_runner.serve), for tests/test_input_guards.py and
    tests/test_output_errors.py, which run the CLI or a child process on it."""
    st = host_state(model, 2, hostname="h1", layouts=[None, None])
    st["gpus"][1].update(mig_current=False, mig_pending=False)
    state = write_state(tmp / "h.json", st)
    if monkeypatch is not None:
        sim_runner.serve(monkeypatch, state)
    inv = local_inventory(tmp)
    host = Host(name="h1", address="h1")
    snap = Snapshot((discover_host(sim_runner.local(state), host, CAT),))
    big = CAT.get(model).profile("3g.40gb" if model.startswith("H100") else "3g.20gb").memory_mib - 2000
    fs = snap.fleet_state(catalog=CAT)
    p = plan(fs, profiles(wl("a", big, model=model), wl("b", 4000, model=model),
                                                    wl("c", big, model=model), wl("d", big, model=model),
                                                    wl("e", 4000, model=model)),
             Catalog((*CAT.models, *fs.models)), EXACT, PulpSolver(time_limit=30))  # as propose: the host's table
    plan_file = tmp / "plan.json"
    write_plan(plan_file, p)
    return state, inv, plan_file


def _layouts(state: Path) -> dict[int, Layout | None]:
    return {g.index: g.layout for g in discover_host(sim_runner.local(state), Host(name="h1", address="h1"),
                                                      CAT).gpus}


# Slow: each of these plans with CBC and applies through real processes (the simulator as nvidia-smi).
@pytest.mark.slow
@pytest.mark.parametrize("model", ["A100-SXM4-40GB", "H100-SXM5-80GB"])
def test_after_a_reboot_apply_last_restores_the_layout_exactly(tmp_path: Path, model: str) -> None:
    state, inv, plan_file = _setup(tmp_path, model)
    ctx = build_context(None, None, None)
    res = apply(ctx, ApplyRequest(plan=str(plan_file), fleet=FleetRequest(inventory=str(inv))),
                connect=sim_runner.connect(state))
    assert res.exit_code == 0, res.to_dict()
    planned = {g.index: g.target for g in res.plan.gpus}  # type: ignore[union-attr]
    assert any(t is not None and len(t) for t in planned.values())
    assert _layouts(state) == planned
    etc = tmp_path / "etc"
    last = json.loads((etc / "last-applied.json").read_text())
    assert last["kind"] == "migplan/last-applied" and last["host"] == "h1"
    before = json.loads((etc / "assignments.json").read_text())["workloads"]

    after_boot = reboot(state)
    assert all(not g["gpu_instances"] for g in after_boot["gpus"])
    if model.startswith("H100"):
        assert not any(g["mig_current"] for g in after_boot["gpus"])  # Hopper: MIG mode is gone too
    res2 = apply_last(ctx, _last(state_dir=str(etc), lock_file=str(tmp_path / "apply.lock")),
                      connect=sim_runner.connect(state))
    assert res2.exit_code == 0, res2.to_dict()
    assert _layouts(state) == planned  # exactly the layout applied before, placement for placement
    now = json.loads((etc / "assignments.json").read_text())["workloads"]
    assert [(w["name"], w["gpu"], w["instance"]) for w in now] == [(w["name"], w["gpu"], w["instance"]) for w in before]
    moved = [w for w in now if w["instance"] is not None]
    assert moved and all(w["device"].startswith("MIG-") for w in moved)
    old = {w["name"]: w["device"] for w in before}
    assert all(old[w["name"]] != w["device"] for w in moved)  # new MIG devices after the reboot, and the env
    live = {ci["uuid"] for g in read_state(state)["gpus"] for gi in g["gpu_instances"] for ci in gi["cis"]}
    assert {w["device"] for w in moved} <= live  # files name the devices that exist now

    again = apply_last(ctx, _last(state_dir=str(etc), lock_file=str(tmp_path / "apply.lock")),
                       connect=sim_runner.connect(state))
    assert {g.outcome.value for g in again.hosts[0].gpus} == {"unchanged"}


@pytest.mark.slow
def test_the_fleet_map_is_also_written_locally(tmp_path: Path) -> None:
    state, inv, plan_file = _setup(tmp_path, "A100-SXM4-40GB")
    local = tmp_path / "local"
    res = apply(build_context(None, None, None), ApplyRequest(plan=str(plan_file), fleet=FleetRequest(
        inventory=str(inv)), state_dir=str(local)), connect=sim_runner.connect(state))
    assert res.exit_code == 0 and res.local_assignments == str(local / "assignments.json")
    doc = json.loads((local / "assignments.json").read_text())
    on_host = json.loads((tmp_path / "etc" / "assignments.json").read_text())
    assert doc["kind"] == "migplan/fleet-assignments" and doc["hosts"]["h1"] == on_host["workloads"]


def test_apply_last_without_a_last_layout_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read the last applied layout"):
        apply_last(build_context(None, None, None), _last(state_dir=str(tmp_path), lock_file=str(
            tmp_path / "l")), connect=sim_runner.connect(tmp_path / "no-host.json"))  # refused before it connects


@pytest.mark.slow
def test_a_tampered_last_layout_is_refused_naming_the_key(tmp_path: Path) -> None:
    state, inv, plan_file = _setup(tmp_path, "A100-SXM4-40GB")
    ctx = build_context(None, None, None)
    assert apply(ctx, ApplyRequest(plan=str(plan_file), fleet=FleetRequest(inventory=str(inv))),
                 connect=sim_runner.connect(state)).exit_code == 0
    path = tmp_path / "etc" / "last-applied.json"
    doc = json.loads(path.read_text())
    doc["gpus"][0]["layout"] = ["7g.40gb@0", "1g.5gb@0"]
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"gpus\[0\]\.layout"):
        apply_last(ctx, _last(state_dir=str(tmp_path / "etc"), lock_file=str(tmp_path / "l")),
                   connect=sim_runner.connect(state))


@pytest.mark.slow
def test_cli_apply_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from migplan.cli.app import app

    state, inv, plan_file = _setup(tmp_path, "H100-SXM5-80GB")
    sim_runner.serve(monkeypatch, state)  # the CLI builds its own runner
    cli = CliRunner()
    r = cli.invoke(app, ["apply", str(plan_file), "-i", str(inv), "--yes", "-o", "json"])
    assert r.exit_code == 0, r.output
    planned = _layouts(state)
    reboot(state)
    r = cli.invoke(app, ["apply", "--last", "--host-name", "h1", "--state-dir", str(tmp_path / "etc"), "--lock-file",
                         str(tmp_path / "apply.lock"), "-o", "json"])
    assert r.exit_code == 0, r.output
    assert _layouts(state) == planned
    r = cli.invoke(app, ["apply", "--last", str(plan_file)])
    assert r.exit_code == 2 and "--last" in r.output


@pytest.mark.slow
def test_apply_last_on_a_host_whose_own_table_gives_less_than_the_catalog(tmp_path: Path) -> None:
    """The plan was made with the host's own (smaller) profile table; --last re-applies with that table too,
    instead of refusing the GPU for having less memory than the catalog."""
    cat = lowmem_catalog(tmp_path)
    state = write_state(tmp_path / "h.json", host_state("A100-LOWMEM", 1, hostname="h1", catalog_files=[str(cat)]))
    snap = Snapshot((discover_host(sim_runner.local(state), Host(name="h1", address="h1"), CAT),))
    fs = snap.fleet_state(catalog=CAT)
    assert fs.models  # the host's table differs from the catalog
    p = plan(fs, profiles(wl("w", 4800), wl("v", 9000)), Catalog((*CAT.models, *fs.models)), EXACT,
             PulpSolver(time_limit=30))
    write_plan(tmp_path / "plan.json", p)
    inv = local_inventory(tmp_path)
    ctx = build_context(None, None, None)
    assert apply(ctx, ApplyRequest(plan=str(tmp_path / "plan.json"), fleet=FleetRequest(inventory=str(inv))),
                 connect=sim_runner.connect(state)).exit_code == 0
    planned = _layouts(state)
    assert planned[0] is not None and len(planned[0])
    reboot(state)
    res = apply_last(ctx, _last(state_dir=str(tmp_path / "etc"), lock_file=str(tmp_path / "apply.lock")),
                     connect=sim_runner.connect(state))
    assert res.exit_code == 0, res.to_dict()
    assert _layouts(state) == planned


@pytest.mark.slow
def test_last_applied_holds_what_is_on_the_host_after_a_partial_apply(tmp_path: Path) -> None:
    state, inv, plan_file = _setup(tmp_path, "A100-SXM4-40GB")
    st = read_state(state)
    st["gpus"][1]["processes"] = [{"pid": 9, "name": "late.py", "used_memory_mib": 100, "gi": None, "ci": None}]
    write_state(state, st)  # a process started on the MIG-disabled GPU 1 after planning: it is refused
    res = apply(build_context(None, None, None), ApplyRequest(plan=str(plan_file), fleet=FleetRequest(
        inventory=str(inv))), connect=sim_runner.connect(state))
    outcomes = {g.gpu: g.outcome.value for g in res.hosts[0].gpus}
    assert outcomes.get(1) == "refused", res.to_dict()
    last = {g["index"]: g["layout"] for g in json.loads((tmp_path / "etc" / "last-applied.json").read_text())["gpus"]}
    now = _layouts(state)
    assert last == {i: (lay.as_list() if lay is not None else None) for i, lay in now.items()}
    assert last[1] is None  # GPU 1 is still MIG-disabled: --last must not partition it
