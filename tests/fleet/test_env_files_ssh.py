"""Env files reconciled on every apply, over the real sshd (issue 20): written only for instances that exist after
verification, removed for workloads no longer on the host, one host per workload. Plans are made by the CLI
(discover, propose), applied by the CLI over SSH with host keys checked."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from conftest import Fleet
from simhosts import read, state, write
from test_cli_fleet import Run, run  # noqa: F401  (the fixture)

from migplan.catalog.layout import Layout


def _w(name: str, mib: int, **pin: object) -> dict[str, object]:
    return {"name": name, "memory_mib": {"p50": mib, "p95": mib, "p99": mib, "max": mib},
            "compute": {"p50": 0.05, "p95": 0.1, "max": 0.1}, **({"pin": pin} if pin else {})}


def _apply(run: Run, fleet: Fleet, inv: Path, workloads: list[dict[str, object]], name: str) -> dict:  # noqa: F811
    snap, plan_file, prof = fleet.tmp / f"{name}.snap.json", fleet.tmp / f"{name}.plan.json", fleet.tmp / "p.yaml"
    prof.write_text(yaml.safe_dump({"version": 1, "workloads": workloads}))
    assert run("discover", "-i", str(inv), "--out", str(snap)).exit_code in (0, 1)
    made = run("propose", "--snapshot", str(snap), "-p", str(prof), "--out", str(plan_file), ssh=False)
    assert made.exit_code == 0, made.output
    done = run("apply", str(plan_file), "-i", str(inv), "--yes", "-o", "json")
    return {"exit": done.exit_code, **json.loads(done.stdout)}


def _env(fleet: Fleet, i: int) -> dict[str, str]:
    d = fleet.host(i).dir / "etc" / "env"
    return {p.name: p.read_text() for p in sorted(d.iterdir())} if d.exists() else {}


def test_env_files_follow_the_assignments_on_every_apply(run: Run, fleet: Fleet) -> None:  # noqa: F811
    for i, name in ((0, "a"), (1, "b")):
        write(fleet.host(i).state, state("A100-SXM4-40GB", 1, hostname=name,
                                         layouts=[Layout.parse(["3g.20gb@0", "3g.20gb@4"])]))
    inv = fleet.inventory({"a": fleet.host_entry(fleet.host(0)), "b": fleet.host_entry(fleet.host(1))})

    first = _apply(run, fleet, inv, [_w("w1", 9000, host="a"), _w("w2", 9000, host="b")], "first")
    assert first["exit"] == 0, first
    devices = {a["workload"]: a["device"] for h in first["hosts"] for a in h["assignments"]}
    assert set(_env(fleet, 0)) == {"w1.env"} and set(_env(fleet, 1)) == {"w2.env"}  # one host per workload
    assert f"CUDA_VISIBLE_DEVICES={devices['w1']}\n" in _env(fleet, 0)["w1.env"]
    (fleet.host(0).dir / "etc" / "env" / "notes.txt").write_text("mine\n")  # not migplan's: never touched

    # w1 leaves the profiles, w3 arrives on a: w1's file goes, w2's stays as it was (not rewritten)
    before = (fleet.host(1).dir / "etc" / "env" / "w2.env").stat().st_mtime_ns
    second = _apply(run, fleet, inv, [_w("w2", 9000, host="b"), _w("w3", 4000, host="a")], "second")
    assert second["exit"] == 0, second
    assert set(_env(fleet, 0)) == {"w3.env", "notes.txt"} and set(_env(fleet, 1)) == {"w2.env"}
    assert (fleet.host(1).dir / "etc" / "env" / "w2.env").stat().st_mtime_ns == before

    # w4 needs a new instance on b, whose create fails: b's GPU is rolled back, w4 gets no env file
    st = read(fleet.host(1).state)
    st["faults"] = [{"match": "-cgi", "times": 1, "exit": 2,
                     "stdout": "Unable to create a GPU instance on GPU  0 using profile 14: Insufficient Resources\n"
                               "Failed to create GPU instances: Insufficient Resources\n"}]
    write(fleet.host(1).state, st)
    third = _apply(run, fleet, inv, [_w("w2", 9000, host="b"), _w("w3", 4000, host="a"), _w("w4", 4000, host="b"),
                                     _w("w5", 4000, host="b")], "third")
    outcomes = {(h["host"], g["gpu"]): g["outcome"] for h in third["hosts"] for g in h["gpus"]}
    assert outcomes[("b", 0)] == "rolled-back", third
    assert "w4.env" not in _env(fleet, 1) and "w5.env" not in _env(fleet, 1) and "w2.env" in _env(fleet, 1)
    listed = json.loads((fleet.host(1).dir / "etc" / "assignments.json").read_text())["workloads"]
    assert {w["name"] for w in listed} == {"w2"}  # exactly those whose instance exists
