"""`migplan discover`, `status` and `catalog learn` through typer's CliRunner against the real sshd."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import Fleet
from simhosts import Proc, state, write
from typer.testing import CliRunner, Result

from migplan import smi
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout
from migplan.cli.app import app
from migplan.documents import load_snapshot_state

Run = Callable[..., Result]


@pytest.fixture()
def run(fleet: Fleet, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Run:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    for var in ("MIGPLAN_OUTPUT", "MIGPLAN_CONFIG", "MIGPLAN_INVENTORY", "MIGPLAN_CATALOG", "MIGPLAN_KNOWN_HOSTS",
                "MIGPLAN_SSH_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    runner = CliRunner()

    def invoke(*args: str, ssh: bool = True) -> Result:
        extra = ["--known-hosts", str(fleet.known_hosts), "--ssh-config", "none"] if ssh else []
        return runner.invoke(app, [*args, *extra])

    return invoke


def small_fleet(fleet: Fleet) -> Path:
    a30 = builtin_catalog().get("A30")
    write(fleet.host(0).state, state(a30, 2, hostname="g1", layouts=[Layout.parse(["2g.12gb@0", "1g.6gb@3"]), None],
                                     busy={1: []}, pending={1: False}))
    write(fleet.host(1).state, state("H100-SXM5-80GB", 1, hostname="g2", layouts=[Layout.parse(["3g.40gb@4"])],
                                     busy={0: [Proc(4711, start=4)]}))
    return fleet.inventory({
        "g1": fleet.host_entry(fleet.host(0), discover=False, gpus=[
            {"index": 0, "model": "A30", "layout": ["4g.24gb@0"]}, {"index": 1, "model": "A30"}]),
        "g2": fleet.host_entry(fleet.host(1)),
        "down": fleet.host_entry(fleet.host(2), address="127.0.0.254"),
    })


def test_discover_writes_snapshot_and_reports_partial_failure(run: Run, fleet: Fleet) -> None:
    inv = small_fleet(fleet)
    out = fleet.tmp / "snap.json"
    r = run("discover", "-i", str(inv), "--out", str(out), "-o", "json", "--parallel", "2")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert doc["version"] == 1 and [h["name"] for h in doc["hosts"]] == ["g1", "g2", "down"]
    assert doc["hosts"][2]["error"]["code"] == "unreachable"
    assert "[3/3]" in r.stderr and "down: FAILED (unreachable)" in r.stderr and "Traceback" not in r.output
    state_ = load_snapshot_state(out)
    assert {(g.host, g.index) for g in state_} == {("g1", 0), ("g1", 1), ("g2", 0)}
    assert state_.gpu("g2", 0).busy == Layout.parse(["3g.40gb@4"]).instances  # type: ignore[union-attr]
    r = run("discover", "-i", str(inv), "--limit", "g2,nothing*", "-o", "yaml")
    assert r.exit_code == 0, r.output
    assert [h["name"] for h in yaml.safe_load(r.stdout)["hosts"]] == ["g2"]


def test_status_table_shows_pictures_busy_pending_and_drift(run: Run, fleet: Fleet) -> None:
    inv = small_fleet(fleet)
    r = run("status", "-i", str(inv), "--limit", "g*")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "|2g.12|  |1g|" in out  # A30: 2g at 0-1, slot 2 free, 1g at 3
    assert "|3g.40gb" in out and "3g.40gb@4 (pid 4711)" in out
    assert "on->off pending" in out
    assert "differs from inventory: GPU 0: layout is 2g.12gb@0 1g.6gb@3, inventory says 4g.24gb@0" in out
    assert "[2/2]" in r.stderr


def test_status_json_reports_failed_hosts_exit_1(run: Run, fleet: Fleet) -> None:
    write(fleet.host(1).state, state("H100-SXM5-80GB", 1, hostname="g2", layouts=[Layout.parse(["3g.40gb@4"])],
                                     busy={0: [Proc(4711, start=4)]}))
    inv = fleet.inventory({"g2": fleet.host_entry(fleet.host(1)),
                           "down": fleet.host_entry(fleet.host(2), address="127.0.0.254")})
    r = run("status", "-i", str(inv), "-o", "json")
    assert r.exit_code == 1
    data = json.loads(r.stdout)
    assert data["summary"]["failed"] == ["down"]
    g2 = next(h for h in data["hosts"] if h["name"] == "g2")
    assert g2["gpus"][0]["busy"] == ["3g.40gb@4"] and g2["gpus"][0]["picture"].startswith("|")
    assert "down: cannot connect" in r.stderr and "connection refused" in r.stderr


def test_status_from_a_saved_snapshot(run: Run, fleet: Fleet) -> None:
    inv = small_fleet(fleet)
    snap = fleet.tmp / "snap.yaml"
    run("discover", "-i", str(inv), "--out", str(snap), "--limit", "g2")
    r = run("status", "--snapshot", str(snap), "-o", "yaml", ssh=False)
    assert r.exit_code == 0, r.output
    assert yaml.safe_load(r.stdout)["hosts"][0]["gpus"][0]["layout"] == ["3g.40gb@4"]
    snap.write_text(snap.read_text().replace("version: 1", "version: 7"))
    r = run("status", "--snapshot", str(snap), ssh=False)
    assert r.exit_code == 2 and "unsupported snapshot version 7" in r.stderr


def test_host_keys_unknown_then_accepted(run: Run, fleet: Fleet) -> None:
    write(fleet.host(0).state, state("A30", 1, hostname="k"))
    inv = fleet.inventory({"k": fleet.host_entry(fleet.host(0))})
    fleet.known_hosts.write_text("")
    r = run("discover", "-i", str(inv))
    assert r.exit_code == 1 and "host-key-unknown" in r.stderr and "--accept-new-host-keys" in r.stderr
    r = run("discover", "-i", str(inv), "--accept-new-host-keys")
    assert r.exit_code == 0, r.output
    assert "recorded new host key" in r.stderr and "SHA256:" in r.stderr
    assert fleet.host(0).address in fleet.known_hosts.read_text()


def test_usage_errors_exit_2(run: Run, fleet: Fleet) -> None:
    assert run("discover", "-i", str(fleet.tmp / "missing.yaml")).exit_code == 2
    inv = fleet.inventory({"k": fleet.host_entry(fleet.host(0))})
    r = run("discover", "-i", str(inv), "--limit", "nomatch")
    assert r.exit_code == 2 and "matches no host" in r.stderr
    assert run("discover", "-i", str(inv), "--parallel", "0").exit_code == 2


def test_catalog_learn_then_discover_with_the_learned_model(run: Run, fleet: Fleet, tmp_path: Path) -> None:
    x100 = dataclasses.replace(builtin_catalog().get("A100-SXM4-40GB"), id="X100-40GB", aliases=(),
                               smi_names=("NVIDIA X100",), pci_device_ids=("0x9999",))
    sim_catalog = tmp_path / "sim-catalog.yaml"
    sim_catalog.write_text(smi.render_catalog_yaml([x100]))
    write(fleet.host(0).state, state(x100, 1, hostname="x", layouts=[Layout.parse(["3g.20gb@4"])],
                                     catalog_files=[str(sim_catalog)]))
    inv = fleet.inventory({"x": fleet.host_entry(fleet.host(0))})
    r = run("discover", "-i", str(inv))
    assert r.exit_code == 1 and "unknown-model" in r.stderr and "migplan catalog learn --host x" in r.stderr
    learned = tmp_path / "learned.yaml"
    r = run("catalog", "learn", "--host", "x", "-i", str(inv), "--architecture", "ampere", "--out", str(learned))
    assert r.exit_code == 0, r.output
    doc: dict[str, Any] = yaml.safe_load(learned.read_text())
    assert doc["models"][0]["id"] == "X100" and doc["models"][0]["smi_names"] == ["NVIDIA X100"]
    r = run("status", "-i", str(inv), "--catalog", str(learned), "-o", "json")
    assert r.exit_code == 0, r.output
    gpu = json.loads(r.stdout)["hosts"][0]["gpus"][0]
    assert gpu["model"] == "X100" and gpu["layout"] == ["3g.20gb@4"]


def test_discover_then_propose_from_the_snapshot(run: Run, fleet: Fleet) -> None:
    """The loop's first half end to end: live state over SSH -> snapshot -> plan against that state."""
    inv = small_fleet(fleet)
    snap = fleet.tmp / "snap.json"
    assert run("discover", "-i", str(inv), "--limit", "g1,g2", "--out", str(snap)).exit_code == 0
    prof = fleet.tmp / "profiles.yaml"
    prof.write_text(yaml.safe_dump({"version": 1, "workloads": [
        {"name": "new-a", "memory_mib": {"p50": 4000, "p95": 4500, "p99": 5000, "max": 5100},
         "compute": {"p50": 0.05, "p95": 0.1, "max": 0.2}},
        {"name": "new-b", "memory_mib": {"p50": 30000, "p95": 33000, "p99": 35000, "max": 35500},
         "compute": {"p50": 0.2, "p95": 0.3, "max": 0.4}},
    ]}))
    plan_file = fleet.tmp / "plan.json"
    r = run("propose", "--snapshot", str(snap), "-p", str(prof), "--out", str(plan_file), "-o", "json", ssh=False)
    assert r.exit_code == 0, r.output
    doc = json.loads(plan_file.read_text())
    assert doc == json.loads(r.stdout)
    assert doc["fingerprint"] == load_snapshot_state(snap).fingerprint()
    gpus = {(g["host"], g["index"]): g for g in doc["gpus"]}
    assert "3g.40gb@4" in gpus[("g2", 0)]["target"]  # busy (a process runs there): kept
    where = {w["name"]: (w["host"], w["gpu"], w["instance"]) for w in doc["workloads"]}
    assert where["new-b"][:2] == ("g2", 0)  # only the H100 has room for 35 GB, beside the busy instance
    assert where["new-a"][0] == "g1"
