"""Issue 26, "Done when": a mixed fleet discovered, planned in one `propose`, applied on the simulators over the real
sshd, placement for placement and type for type; then a replan with the same demand changes nothing.

The fleet: a bare-metal host `bm01` (two A100s with MIG, the MIG simulator), and three KVM hosts (the vGPU
simulator on top of it): `kvm-a100` (two A100 HGX 40GB, MIG-backed vGPUs only), `kvm-l4` (two L4, equal-size
time-sliced, one VM already running an L4-8C) and `kvm-t4` (two T4, mdev devices). The simulators are the oracle:
what they hold after the apply is compared with the plan's targets, and their logs say what was changed."""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import Fleet
from helpers import migplan_cli
from sim import fleet as mig_sim
from sim import nvidia_smi_sim as mig
from sim_vgpu import fleet as vf
from sim_vgpu import vgpu_table
from simhosts import state, write

from migplan.adapters.ssh import SshFleet
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout
from migplan.commands.apply import ApplyRequest
from migplan.commands.apply import apply as run_apply
from migplan.commands.context import build_context
from migplan.commands.fleet import FleetRequest
from migplan.commands.replan import ReplanRequest, replan
from migplan.documents import load_plan, write_snapshot
from migplan.fleet.discover import discover_fleet
from migplan.fleet.steps import is_read_only
from migplan.inventory import load_inventory

pytestmark = pytest.mark.slow

CATALOG = builtin_catalog()
T0 = dt.datetime(2026, 12, 7, 4, 0, tzinfo=dt.timezone.utc)


def _vm(name: str, mib: int, typ: str, **observed: object) -> dict[str, Any]:
    return {"name": name, "kind": "vm", "observed": {"vgpu_type": typ, **observed},
            "memory_mib": {"p50": mib * 7 // 10, "p95": mib * 9 // 10, "p99": mib, "max": mib}}


def _process(name: str, mib: int) -> dict[str, Any]:
    return {"name": name, "observed": {"gpu_model": "A100-SXM4-40GB"},
            "memory_mib": {"p50": mib * 7 // 10, "p95": mib * 9 // 10, "p99": mib, "max": mib}}


def _setup(fleet: Fleet, tmp: Path) -> tuple[Path, Path, dict[str, Path], dict[str, str]]:
    hosts = {"bm01": fleet.host(0), "kvm-a100": fleet.host(1), "kvm-l4": fleet.host(2), "kvm-t4": fleet.host(3)}
    write(hosts["bm01"].state, state("A100-SXM4-40GB", 2, hostname="bm01",
                                     layouts=[Layout.parse(["3g.20gb@0", "3g.20gb@4"]), None], mig=[True, False]))
    for name, models in (("kvm-a100", ["A100-SXM4-40GB"] * 2), ("kvm-l4", ["L4"] * 2), ("kvm-t4", ["T4"] * 2)):
        vf.shims(hosts[name].bin)
        vf.write_host(hosts[name].state, models, hostname=name, vfs_enabled=name == "kvm-l4")
    # a VM already runs on the L4 host: its L4-8C on GPU 0 must stay as it is
    running = vf.add_vgpu(hosts["kvm-l4"].state, 0, "L4-8C")
    vf.vm_start(hosts["kvm-l4"].state, running, "l4-run", fb_used_mib=5000,
                uuid="0e0e0e0e-1111-4222-8333-444444444444")
    settings = {"kvm-a100": {"board": "A100X", "modes": ["mig_backed"]}, "kvm-l4": {"board": "L4"},
                "kvm-t4": {"board": "T4"}}
    inv = fleet.inventory({name: fleet.host_entry(h, **({"vgpu": settings[name]} if name in settings else {}))
                           for name, h in hosts.items()})
    workloads = [_process("infer-a", 9000), _process("infer-b", 15000),
                 *(_vm(f"vm:llm-{i}", 15000, "A100X-3-20C") for i in range(3)),
                 _vm("vm:small-a", 4000, "A100X-1-5C"),
                 _vm("vm:l4-run", 5000, "L4-8C", host="kvm-l4", gpu=0),
                 *(_vm(f"vm:l4-{i}", 6000, "L4-8C") for i in range(3)),
                 *(_vm(f"vm:t4-{i}", 3000, "T4-4C") for i in range(2))]
    prof = tmp / "profiles.yaml"
    prof.write_text(yaml.safe_dump({"version": 1, "workloads": workloads}))
    roots = {name: str(vf.sysroot(h.state)) for name, h in hosts.items() if name != "bm01"}
    return inv, prof, {n: h.state for n, h in hosts.items()}, roots


def _discover(fleet: Fleet, inv: Path, roots: dict[str, str], out: Path) -> None:
    with SshFleet(fleet.options()) as ssh:
        snap = discover_fleet(load_inventory(inv, CATALOG), CATALOG, ssh.runner, parallel=4, vgpu=True,
                              sysfs_root=roots)
    assert all(h.ok for h in snap.hosts), [h.error for h in snap.hosts]
    write_snapshot(out, snap)


def _gis(st: dict[str, Any], g: dict[str, Any]) -> dict[int, str]:
    """The MIG simulator's GPU instances of a GPU: id -> PROFILE@START (its own geometry's names)."""
    model = mig.model_of(st, g)
    if model is None or not g.get("mig_current"):
        return {}
    return {int(gi["id"]): f"{mig.gi_profile(model, gi).name}@{gi['start']}" for gi in g.get("gpu_instances", [])}


def _held(path: Path) -> dict[int, list[tuple[str, str | None]]]:
    """The vGPU simulator's own record per GPU: (type name without its prefix, GPU instance placement or None)."""
    st = vf.read_state(path)
    out: dict[int, list[tuple[str, str | None]]] = {}
    for i, g in enumerate(st["gpus"]):
        model = vgpu_table.model(g["vgpu"]["model"]) if "vgpu" in g else None
        gis = _gis(st, g)
        out[i] = sorted((model.type(int(v["type"])).short if model else str(v["type"]),  # type: ignore[union-attr]
                         gis.get(v.get("gi")) if v.get("gi") is not None else None)
                        for v in g.get("vgpu", {}).get("vgpus", []))
    return out


def _mutations(states: dict[str, Path]) -> int:
    """nvidia-smi commands that change something, and sysfs writes, over every host."""
    n = 0
    for p in states.values():
        st = mig_sim.read_state(p)
        n += sum(1 for a in st["log"] if not is_read_only(["nvidia-smi", *a]))
        n += len(st.get("vgpu", {}).get("writes", []))
    return n


def test_mixed_fleet_discovered_planned_in_one_solve_applied_and_then_stationary(
        fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    t0 = time.monotonic()
    for key in [k for k in os.environ if k.startswith("MIGPLAN_")]:
        monkeypatch.delenv(key)
    inv, prof, states, roots = _setup(fleet, tmp_path)
    snap = tmp_path / "snapshot.yaml"
    _discover(fleet, inv, roots, snap)

    # one propose: the MIG plan of bm01 and the vGPU plan of the three KVM hosts, one document
    cli = migplan_cli(monkeypatch, tmp_path)
    plan_path = tmp_path / "plan.yaml"
    res = cli("propose", "--snapshot", str(snap), "-i", str(inv), "-p", str(prof), "--out", str(plan_path))
    assert res.exit_code == 0, res.output
    plan = load_plan(plan_path)
    assert plan.version == 6 and plan.vgpu is not None
    assert {g.host for g in plan.gpus} == {"bm01"}
    assert {w.name for w in plan.workloads} == {"infer-a", "infer-b"}
    vms = {v.name: v for v in plan.vgpu.vms}
    assert {n: v.status for n, v in vms.items()} == {**{n: "placed" for n in vms if n != "vm:l4-run"},
                                                     "vm:l4-run": "kept"}
    assert (vms["vm:l4-run"].host, vms["vm:l4-run"].gpu, vms["vm:l4-run"].vgpu_type) == ("kvm-l4", 0, "L4-8C")
    assert {vms[f"vm:llm-{i}"].vgpu_type for i in range(3)} == {"A100X-3-20C"}
    assert vms["vm:small-a"].vgpu_type == "A100X-1-5C"
    assert all(v.host == "kvm-t4" and v.vgpu_type == "T4-4C" for n, v in vms.items() if n.startswith("vm:t4"))
    assert plan.vgpu.gpus_used == plan.vgpu.gpu_lower_bound == 5  # A100 2 (3 x 20 GB + 5 GB), L4 2, T4 1

    print(f"discover + propose {time.monotonic() - t0:.1f} s")
    # apply: every host as planned
    req = ApplyRequest(plan=str(plan_path), fleet=FleetRequest(inventory=str(inv), ssh=fleet.options()),
                       journal=str(tmp_path / "journal.jsonl"))
    done = run_apply(build_context(None, None, "json"), req, sysfs_root=roots, sriov_manage="sriov-manage")
    assert done.exit_code == 0, json.dumps(done.to_dict(), indent=1)[:3000]
    for h in done.hosts:
        for g in h.gpus:
            assert g.outcome.value in ("applied", "unchanged"), (h.host, g.gpu, g.outcome, g.reason)

    print(f"apply {time.monotonic() - t0:.1f} s")
    # placement for placement, type for type: what the simulators hold is the plan's targets
    for g in plan.vgpu.gpus:
        want = sorted((s.type_name, s.placement) for s in g.slots)
        assert _held(states[g.host])[g.index] == want, (g.host, g.index)
        sim_gpu = vf.read_state(states[g.host])["gpus"][g.index]
        assert bool(sim_gpu.get("mig_current")) == (g.mode == "mig_backed"), (g.host, g.index)
        assert not vf.read_state(states[g.host])["vgpu"].get("bypassed")
    bm = mig_sim.read_state(states["bm01"])
    for g in plan.gpus:
        got = sorted(_gis(bm, bm["gpus"][g.index]).values())
        assert got == sorted(g.target.as_list() if g.target is not None else []), g.index

    # the VMs start on the vGPUs made for them, named as `collect --vgpu` names their workloads
    for g in plan.vgpu.gpus:
        for dev_vm in _devices_for(states[g.host], g.index, [s for s in g.slots if s.vm and not s.running]):
            vf.vm_start(states[g.host], dev_vm[0], dev_vm[1].removeprefix("vm:"), fb_used_mib=1000)

    # a replan with the same demand changes nothing
    before = _mutations(states)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({"version": 1, "inventory": str(inv), "profiles": str(prof)}))
    ctx = build_context(str(tmp_path / "config.yaml"), None, None)
    with SshFleet(fleet.options()) as ssh:
        again = replan(ctx, ReplanRequest(fleet=FleetRequest(ssh=fleet.options()), state_dir=str(tmp_path / "st")),
                       now=T0, connect=ssh.runner, sysfs_root=roots)
    assert again.plan is not None and again.plan.vgpu is not None, again.line
    assert [a for g in again.plan.vgpu.gpus for a in g.actions] == []
    assert {v.name: v.status for v in again.plan.vgpu.vms} == {n: "kept" for n in vms}
    assert _mutations(states) == before, again.line
    print(f"replan {time.monotonic() - t0:.1f} s: {again.line}")


def _devices_for(path: Path, gpu: int, slots: list[Any]) -> list[tuple[str, str]]:
    """(device, VM name) for each planned vGPU of a GPU: the simulator's device holding that type (and GPU instance),
    one each, in the plan's order."""
    st = vf.read_state(path)
    g = st["gpus"][gpu]
    model = vgpu_table.model(g["vgpu"]["model"])
    gis = _gis(st, g)
    free = [(v["dev"], model.type(int(v["type"])).short,  # type: ignore[union-attr]
             gis.get(v.get("gi")) if v.get("gi") is not None else None)
            for v in g["vgpu"]["vgpus"] if not v.get("vm")]
    out = []
    for s in slots:
        hit = next(f for f in free if f[1] == s.type_name and f[2] == s.placement)
        free.remove(hit)
        out.append((hit[0], s.vm))
    return out
