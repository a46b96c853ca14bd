"""The files apply leaves on a host, read back by discovery (issue 20): assignments.json and inflight.json are remote
input. Each hostile or broken form is refused by its strict reader with the field named, and discovery then plans
as if the file were not there, with a note: never a failed host, a traceback or a hang."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_runner
from sim.fleet import host_state, write_state

from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout
from migplan.fleet.discover import discover_host
from migplan.fleet.inflight import BadInFlight, parse_inflight
from migplan.inventory import Host
from migplan.model.assigned import BadAssignments, parse_assignments

CAT = builtin_catalog()


def _doc(**kw: object) -> bytes:
    base: dict[str, object] = {"version": 1, "kind": "migplan/assignments", "host": "h1", "plan": "sha256:ab",
                               "written_at": "2026-11-02T03:00:00Z",
                               "workloads": [{"name": "a", "gpu": 0, "instance": "3g.20gb@0", "device": None}]}
    base.update(kw)
    return json.dumps(base).encode()


BAD_ASSIGNMENTS = {
    "not JSON": b"{",
    "deep": b"[" * 100_000,
    "not UTF-8": b"\xff\xfe",
    "too large": b" " * (4 * 1024 * 1024 + 1),
    "another kind": _doc(kind="migplan/last-applied"),
    "another host": _doc(host="gpu99"),
    "a bad stamp": _doc(written_at="2026-02-30T00:00:00Z"),
    "a bad name": _doc(workloads=[{"name": "$(id)", "gpu": 0, "instance": None}]),
    "a bad GPU": _doc(workloads=[{"name": "a", "gpu": True, "instance": None}]),
    "a bad instance": _doc(workloads=[{"name": "a", "gpu": 0, "instance": "3g.20gb@\u0663"}]),
    "twice": _doc(workloads=[{"name": "a", "gpu": 0, "instance": None}, {"name": "a", "gpu": 1, "instance": None}]),
    "one instance, two workloads": _doc(workloads=[{"name": "a", "gpu": 0, "instance": "1g.5gb@0"},
                                                   {"name": "b", "gpu": 0, "instance": "1g.5gb@0"}]),
    "too many": _doc(workloads=[{"name": f"w{i}", "gpu": 0, "instance": None} for i in range(2000)]),
}


@pytest.mark.parametrize("case", list(BAD_ASSIGNMENTS))
def test_a_hostile_assignments_file_is_refused_by_its_reader(case: str) -> None:
    with pytest.raises(BadAssignments):
        parse_assignments(BAD_ASSIGNMENTS[case], "h1")


def test_replica_names_are_read() -> None:
    got = parse_assignments(_doc(workloads=[{"name": "chat#1", "gpu": 0, "instance": None}]), "h1")
    assert [a.workload for a in got.items] == ["chat#1"]


@pytest.mark.parametrize("data", [b"{", b'{"version": 1, "kind": "migplan/inflight", "host": "h1", "plan": "x", '
                                  b'"started_at": "", "gpus": [{"index": 0, "uuid": "nope", "checkpoint": null, '
                                  b'"target": null}]}',
                                  b'{"version": 1, "kind": "migplan/inflight", "host": "h1", "plan": "x", '
                                  b'"started_at": "", "gpus": [{"index": 0, "uuid": null, "checkpoint": ["9g@0"], '
                                  b'"target": null}]}'])
def test_a_hostile_inflight_file_is_refused_by_its_reader(data: bytes) -> None:
    with pytest.raises(BadInFlight):
        parse_inflight(data, "h1")


@pytest.mark.slow
@pytest.mark.parametrize("what", ["garbage", "fifo", "symlink-to-dev-zero", "directory"])
def test_discovery_notes_an_unusable_state_file_and_plans_without_it(tmp_path: Path, what: str) -> None:
    state = write_state(tmp_path / "h.json", host_state("A100-SXM4-40GB", 1, hostname="h1",
                                                        layouts=[Layout.parse(["3g.20gb@0"])]))
    etc = tmp_path / "etc"
    etc.mkdir()
    for name in ("assignments.json", "inflight.json"):
        path = etc / name
        if what == "garbage":
            path.write_bytes(b"\x00" * 64)
        elif what == "fifo":
            os.mkfifo(path)
        elif what == "symlink-to-dev-zero":
            path.symlink_to("/dev/zero")
        else:
            path.mkdir()
    host = Host(name="h1", address="h1", state_dir=str(etc))
    rec = discover_host(sim_runner.local(state), host, CAT, timeout=10)
    assert rec.ok and rec.assignments is None and rec.inflight is None
    for name in ("assignments.json", "inflight.json"):
        assert any(name in n for n in rec.notes), rec.notes
    assert rec.gpus[0].layout == Layout.parse(["3g.20gb@0"])
