"""`migplan apply` over the real sshd: discover -> propose -> apply --dry-run -> apply --yes -> status."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from conftest import Fleet
from simhosts import Proc, read, state, write
from test_cli_fleet import Run, run  # noqa: F401  (the fixture)

from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout
from migplan.fleet.steps import is_read_only


def _fleet(fleet: Fleet) -> Path:
    a100 = builtin_catalog().get("A100-SXM4-40GB")
    write(fleet.host(0).state, state(a100, 2, hostname="a", layouts=[Layout.parse(["3g.20gb@0"]), None],
                                     mig=[True, False]))
    write(fleet.host(1).state, state("H100-SXM5-80GB", 1, hostname="b", layouts=[Layout.parse(["3g.40gb@4"])],
                                     busy={0: [Proc(4711, start=4)]}))
    return fleet.inventory({"a": fleet.host_entry(fleet.host(0)), "b": fleet.host_entry(fleet.host(1))})


def _profiles(path: Path) -> Path:
    def w(name: str, mib: int) -> dict[str, object]:
        return {"name": name, "memory_mib": {"p50": mib, "p95": mib, "p99": mib, "max": mib},
                "compute": {"p50": 0.05, "p95": 0.1, "max": 0.1}}
    path.write_text(yaml.safe_dump({"version": 1, "workloads": [w("x", 9000), w("y", 4000), w("z", 30000),
                                                                w("h", 35000)]}))
    return path


def _discover_and_plan(run: Run, fleet: Fleet, inv: Path) -> Path:  # noqa: F811
    """discover the fleet into a snapshot, propose from it: the plan file."""
    snap, plan_file = fleet.tmp / "snap.json", fleet.tmp / "plan.json"
    assert run("discover", "-i", str(inv), "--out", str(snap)).exit_code == 0
    r = run("propose", "--snapshot", str(snap), "-p", str(_profiles(fleet.tmp / "p.yaml")), "--out", str(plan_file),
            ssh=False)
    assert r.exit_code == 0, r.output
    return plan_file


def test_plan_then_apply_then_status_matches_the_plan(run: Run, fleet: Fleet) -> None:  # noqa: F811
    inv = _fleet(fleet)
    plan_file = _discover_and_plan(run, fleet, inv)
    doc = json.loads(plan_file.read_text())
    changed = [g for g in doc["gpus"] if g["actions"]]
    assert changed

    dry = run("apply", str(plan_file), "-i", str(inv), "--dry-run", "-o", "json")
    assert dry.exit_code == 0, dry.output
    recorded = [c for h in json.loads(dry.stdout)["hosts"] for c in h["commands"]]
    assert recorded and all(c.startswith("nvidia-smi mig") or c.startswith("nvidia-smi -") for c in recorded)
    for i in (0, 1):  # a dry run changes nothing
        assert not [a for a in read(fleet.host(i).state)["log"] if not is_read_only(["nvidia-smi", *a])]

    refused = run("apply", str(plan_file), "-i", str(inv))  # no --yes and no terminal
    assert refused.exit_code == 2 and "--yes" in refused.output

    journal = fleet.tmp / "journal.jsonl"
    done = run("apply", str(plan_file), "-i", str(inv), "--yes", "--journal", str(journal), "-o", "json")
    assert done.exit_code == 0, done.output
    ran = [c for h in json.loads(done.stdout)["hosts"] for g in h["gpus"] for c in g["commands"]]
    assert sorted(ran) == sorted(recorded)  # the dry run listed exactly what apply ran
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    assert [e["argv"] for e in events if e["event"] == "command"] and any(e["event"] == "verify" for e in events)

    placed = {w["name"]: w for w in doc["workloads"] if w["status"] == "placed"}
    for i, name in ((0, "a"), (1, "b")):  # each host got the map of its workloads to MIG devices
        written = json.loads((fleet.host(i).dir / "etc" / "assignments.json").read_text())
        assert {w["name"] for w in written["workloads"]} == {n for n, w in placed.items() if w["host"] == name}
        assert all(w["device"] and w["device"].startswith(("MIG-", "GPU-")) for w in written["workloads"])

    status = run("status", "-i", str(inv), "-o", "json")
    live = {(h["name"], g["index"]): g["layout"] for h in json.loads(status.stdout)["hosts"] for g in h["gpus"]}
    assert live == {(g["host"], g["index"]): g["target"] for g in doc["gpus"]}
    assert "3g.40gb@4" in live[("b", 0)]  # the busy instance was never touched

    again = run("apply", str(plan_file), "-i", str(inv), "--yes", "-o", "json")
    assert again.exit_code == 0
    assert {g["outcome"] for h in json.loads(again.stdout)["hosts"] for g in h["gpus"]} == {"unchanged"}


def test_the_host_lock_never_outlives_a_dead_connection(fleet: Fleet) -> None:
    import time

    import pytest

    from migplan.adapters.host_lock import HostLocked, acquire
    from migplan.adapters.ssh import SshFleet
    from migplan.inventory import load_inventory

    write(fleet.host(0).state, state("A30", 1, hostname="a"))
    inv = load_inventory(fleet.inventory({"a": fleet.host_entry(fleet.host(0))}), builtin_catalog())
    host = inv.hosts[0]
    with SshFleet(fleet.options()) as one, SshFleet(fleet.options()) as two:
        first = one.runner(host)
        held = acquire(first, host.lock_file)
        with pytest.raises(HostLocked):
            acquire(two.runner(host), host.lock_file)
        transport = first.connection.clients[-1].get_transport()  # drop the TCP connection under the lock
        assert transport is not None
        transport.sock.close()  # type: ignore[union-attr]
        deadline = time.monotonic() + 10
        while True:
            try:
                acquire(two.runner(host), host.lock_file).release()
                break
            except HostLocked:
                assert time.monotonic() < deadline, "the lock outlived its dead connection"
                time.sleep(0.2)
        del held


def test_a_host_failing_the_preflight_is_skipped_and_the_others_are_applied(run: Run, fleet: Fleet) -> None:  # noqa: F811
    inv = _fleet(fleet)
    plan_file = _discover_and_plan(run, fleet, inv)
    changed_hosts = {g["host"] for g in json.loads(plan_file.read_text())["gpus"] if g["actions"]}
    assert "a" in changed_hosts
    st = read(fleet.host(0).state)
    st["cgi_placement"] = False  # host a's driver: `nvidia-smi mig -h` documents no -cgi placement tuple
    write(fleet.host(0).state, st)
    done = run("apply", str(plan_file), "-i", str(inv), "--yes", "-o", "json")
    hosts = {h["host"]: h for h in json.loads(done.stdout)["hosts"]}
    assert "pre-flight failed, nothing changed" in hosts["a"]["error"] and "-cgi PROFILE:START" in hosts["a"]["error"]
    assert not [a for a in read(fleet.host(0).state)["log"] if not is_read_only(["nvidia-smi", *a])]
    if "b" in changed_hosts:
        assert hosts["b"]["ok"] and done.exit_code == 1  # partial: b applied, a skipped
    else:
        assert done.exit_code == 3  # nothing applied
