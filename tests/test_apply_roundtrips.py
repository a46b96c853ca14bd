"""Round trips of one host's apply (issue 10: at most 4 per changed GPU, host overhead included): the reads go
in two batches, all the host's files in one `put_files` (issue 20; with a become prefix too: one exec of the
constant script), and the journal lists every command the host ran (each nvidia-smi the simulator logged)."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_runner
from helpers.local_runners import Counted, pass_through_sudo
from sim.fleet import host_state, read_state, write_state

from migplan.adapters.runner import (
    DEFAULT_TIMEOUT,
    FILES_SCRIPT,
    Completed,
    FilesDone,
    FileToPut,
    Prune,
)
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout
from migplan.commands.apply import _Journal, apply_one_host
from migplan.fleet.apply import ApplyOptions, GpuOutcome
from migplan.fleet.assignments import LastApplied, Placement
from migplan.fleet.steps import is_read_only
from migplan.inventory import Host
from migplan.model.diff import diff
from migplan.model.gpu_plan import GpuPlan
from migplan.model.state import GpuState

CAT = builtin_catalog()
MODEL = CAT.get("A100-SXM4-40GB")
BEFORE = Layout.parse(["3g.20gb@0", "3g.20gb@4"])
AFTER = Layout.parse(["3g.20gb@0", "2g.10gb@4", "1g.5gb@6"])
GPUS = 8


class Trips:
    """The simulated host behind a local runner, counting what would each be one SSH round trip: a command, a
    batch of reads (`run_batch`, one exec), a file put, a set of files (`put_files`), the lock. `become`: the
    runner's prefix (a pass-through stand-in for `sudo -n`); `file_execs`: the processes each put_files started."""

    def __init__(self, state: Path, become: Sequence[str] = ()) -> None:
        self.local = sim_runner.local(state, "h1", become=become, runner=Counted)
        self.trips: list[str] = []
        self.file_execs: list[list[tuple[str, ...]]] = []
        self.files: list[FilesDone] = []

    @property
    def host(self) -> str:
        return "h1"

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT, stdin: bytes | None = None) -> Completed:
        self.trips.append(" ".join(argv))
        return self.local.run(argv, timeout=timeout, stdin=stdin)

    def run_batch(self, argvs: Sequence[Sequence[str]], *, timeout: float = DEFAULT_TIMEOUT) -> list[Completed]:
        self.trips.append(f"batch of {len(argvs)}")
        return [self.local.run(a, timeout=timeout) for a in argvs]

    def put_file(self, path: str, data: bytes, *, mode: int = 0o644, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.trips.append(f"put {path}")
        self.local.put_file(path, data, mode=mode, timeout=timeout)

    def put_files(self, directory: str, files: Sequence[FileToPut], *, prune: Prune | None = None,
                  timeout: float = DEFAULT_TIMEOUT) -> FilesDone:
        self.trips.append(f"put_files {directory}")
        seen = len(self.local.execs)
        done = self.local.put_files(directory, files, prune=prune, timeout=timeout)
        self.file_execs.append(self.local.execs[seen:])
        self.files.append(done)
        return done

    def get_file(self, path: str, **kw: Any) -> bytes:
        self.trips.append(f"get {path}")
        return self.local.get_file(path, **kw)

    def hold(self, argv: Sequence[str], **kw: Any) -> Any:
        self.trips.append("lock")
        return self.local.hold(argv, **kw)


def _file_trips(runner: Trips, host: Host) -> list[str]:
    """The trips that wrote (or made a directory for) the files an apply leaves: assignments, env, last-applied,
    and the in-flight record (fleet/inflight.py: read under the lock, written before the first change, settled
    with the other files)."""
    ours = (f"{host.state_dir}/assignments.json", f"{host.state_dir}/env", f"{host.state_dir}/last-applied.json",
            f"{host.state_dir}/inflight.json")
    return [t for t in runner.trips if t.startswith("put_files ") or any(o in t for o in ours)]


def _files_shape(host: Host, changes: bool = True) -> list[str]:
    """What `_file_trips` must be: the record read; when anything changes, the record written before the first
    change; then ONE round trip for every file the apply leaves (the settled record among them)."""
    read = f"get {host.state_dir}/inflight.json"
    put = f"put_files {host.state_dir}"
    return [read, put, put] if changes else [read, put]


def _shape(trips: Sequence[str]) -> list[str]:
    """The trips with each read batch as `batch` (what is in a batch is test_apply_readback's business)."""
    return ["batch" if t.startswith("batch of ") else t for t in trips]


def _host(tmp: Path, changed: int = GPUS) -> tuple[Path, Host, list[GpuPlan]]:
    """The benchmark's host: GPUs 0..5 re-partitioned (one instance destroyed, two created), 6 and 7 MIG off -> on.
    `changed` < GPUS: only GPUs 0..changed-1 are re-partitioned, the others are already as planned."""
    if changed < GPUS:
        layouts = [BEFORE if i < changed else AFTER for i in range(GPUS)]
    else:
        layouts = [BEFORE if i < GPUS - 2 else Layout() for i in range(GPUS)]
    st = host_state("A100-SXM4-40GB", GPUS, hostname="h1", layouts=layouts)
    for gpu in st["gpus"][GPUS - 2:] if changed == GPUS else ():
        gpu.update(mig_current=False, mig_pending=False, gpu_instances=[])
    path = write_state(tmp / "h1.json", st)
    host = Host(name="h1", address="h1", state_dir=str(tmp / "etc"), lock_file=str(tmp / "apply.lock"))
    plans = []
    for gpu, layout in zip(st["gpus"], layouts, strict=True):
        current = layout if gpu["mig_current"] else None
        observed = GpuState(host="h1", index=gpu["index"], model=MODEL.id, uuid=gpu["uuid"],
                            mig_enabled=current is not None, layout=current)
        plans.append(GpuPlan(observed, AFTER, tuple(diff(current, AFTER, gpu=("h1", gpu["index"]),
                                                         architecture=MODEL.architecture))))
    return path, host, plans


def _apply(runner: Trips, host: Host, plans: list[GpuPlan], journal: Path, dry_run: bool = False) -> Any:
    last = LastApplied("h1", "sha256:" + "0" * 64, "2026-12-01T00:00:00Z", (), ())
    return apply_one_host(host, runner, plans, CAT, fingerprint=last.plan, items=[Placement("chat", 0, "2g.10gb@4")],
                          last=last, migrations=(), dry_run=dry_run, options=ApplyOptions(dry_run=dry_run),
                          journal=_Journal(None if dry_run else str(journal), None), stamp=last.applied_at)


def _journal_argv(path: Path) -> list[list[str]]:
    out: list[list[str]] = []
    for line in path.read_text().splitlines():
        e = json.loads(line)
        if e["event"] == "reads":
            out += e["argv"]
        elif e["event"] == "command":
            out.append(e["argv"])
    return out


# Slow: each of these applies to an eight-GPU host through real processes (every nvidia-smi one process).
@pytest.mark.slow
@pytest.mark.parametrize("become", [False, True], ids=["login-user", "become"])
def test_an_eight_gpu_host_costs_at_most_four_round_trips_per_changed_gpu(tmp_path: Path, become: bool) -> None:
    state, host, plans = _host(tmp_path)
    runner = Trips(state, pass_through_sudo(tmp_path / "bin") if become else ())
    rep = _apply(runner, host, plans, tmp_path / "j.jsonl")
    assert rep.error is None and [g.outcome for g in rep.gpus] == [GpuOutcome.APPLIED] * GPUS, rep
    mutating = [t for t in runner.trips if t.startswith("nvidia-smi") and not is_read_only(t.split())]
    assert len(mutating) == 3 * GPUS  # -dci, -dgi, -cgi (or -mig, -r, -cgi) per GPU: nothing batched across GPUs
    overhead = [t for t in runner.trips if t not in mutating]
    # the lock, the reads before (pre-flight help + state) and after (read-back, memory, UUIDs), and ONE round
    # trip for every file the apply leaves: assignments.json, the placed workload's env file, last-applied.json
    assert _shape(overhead)[:2] == ["lock", "batch"] and _shape(overhead).count("batch") == 2, overhead
    assert _file_trips(runner, host) == _files_shape(host), overhead
    assert len(runner.trips) / GPUS <= 4, runner.trips
    # with a become prefix the files are one exec: the constant script, the data on stdin; without, no process
    script = [(*runner.local._become, "sh", "-c", FILES_SCRIPT)]
    assert runner.file_execs == ([script, script] if become else [[], []])  # the record, then the files
    assert runner.files == [FilesDone(written=("inflight.json",)), FilesDone(
        written=("env/chat.env", "assignments.json", "last-applied.json", "inflight.json"))]
    assert rep.assignments[0].device and rep.assignments[0].device.startswith("MIG-")
    env = (tmp_path / "etc" / "env" / "chat.env").read_text()
    assert f"CUDA_VISIBLE_DEVICES={rep.assignments[0].device}\n" in env
    gi = next(g for g in read_state(state)["gpus"][0]["gpu_instances"] if (g["profile_id"], g["start"]) == (14, 4))
    assert rep.assignments[0].device == gi["cis"][0]["uuid"]  # the simulator's own UUID of 2g.10gb@4


@pytest.mark.slow
@pytest.mark.parametrize("changed", [1, 2, 8])
def test_the_files_are_one_round_trip_whatever_changes(tmp_path: Path, changed: int) -> None:
    """The lock, two read batches, 3 per changed GPU and ONE for the files, with a become prefix too (where each
    file used to cost three: tee, chmod, mv), plus the in-flight record's read and its write before the first
    change: 9, 12 and 30 in all (bench/apply_files.py)."""
    state, host, plans = _host(tmp_path, changed=changed)
    runner = Trips(state, pass_through_sudo(tmp_path / "bin"))
    rep = _apply(runner, host, plans, tmp_path / "j.jsonl")
    assert [g.outcome for g in rep.gpus].count(GpuOutcome.APPLIED) == changed, rep
    assert len([t for t in runner.trips if t.startswith("nvidia-smi")]) == 3 * changed, runner.trips
    assert _shape(runner.trips).count("batch") == 2, runner.trips
    assert _file_trips(runner, host) == _files_shape(host), runner.trips
    assert [len(e) for e in runner.file_execs] == [1, 1]
    assert [p.name for p in (tmp_path / "etc" / "env").iterdir()] == ["chat.env"]
    assert (tmp_path / "etc" / "assignments.json").is_file() and (tmp_path / "etc" / "last-applied.json").is_file()


def test_the_devices_table_matches_uuids_exactly_where_the_listing_order_would_not() -> None:
    from migplan import smi
    from migplan.fleet.devices import _uuids_of

    gis = [smi.GpuInstanceRow(gpu=0, profile_name="3g.20gb", profile_id=9, gi_id=1, start=0, size=4),
           smi.GpuInstanceRow(gpu=0, profile_name="2g.10gb", profile_id=14, gi_id=3, start=4, size=2)]
    cis = [smi.ComputeInstanceRow(gpu=0, gi_id=1, ci_id=0, profile_name="3g.20gb", profile_id=2),
           smi.ComputeInstanceRow(gpu=0, gi_id=3, ci_id=0, profile_name="2g.10gb", profile_id=1)]
    devices = [smi.MigDevice(0, "2g.10gb", 0, "MIG-aaaa"), smi.MigDevice(0, "3g.20gb", 1, "MIG-bbbb")]
    table = {0: (3, 0), 1: (1, 0)}  # device 0 is GI 3: not the ascending-GI order
    assert _uuids_of(0, gis, cis, devices, table) == {(3, 0): "MIG-aaaa", (1, 0): "MIG-bbbb"}
    assert _uuids_of(0, gis, cis, devices) == {(1, 0): "MIG-aaaa", (3, 0): "MIG-bbbb"}  # the order rule
    assert _uuids_of(0, gis, cis, devices, {0: (3, 0)}) == {(1, 0): "MIG-aaaa", (3, 0): "MIG-bbbb"}  # partial


@pytest.mark.slow
def test_the_journal_lists_every_command_the_host_ran(tmp_path: Path) -> None:
    state, host, plans = _host(tmp_path)
    _apply(Trips(state), host, plans, tmp_path / "j.jsonl")
    ran = [["nvidia-smi", *a] for a in read_state(state)["log"]]  # the simulator's own record
    assert sorted(map(tuple, _journal_argv(tmp_path / "j.jsonl"))) == sorted(map(tuple, ran))


@pytest.mark.slow
@pytest.mark.parametrize("become", [False, True], ids=["login-user", "become"])
def test_reapplying_reads_once_changes_nothing_and_rewrites_no_file(tmp_path: Path, become: bool) -> None:
    state, host, plans = _host(tmp_path)
    prefix = pass_through_sudo(tmp_path / "bin") if become else ()
    _apply(Trips(state, prefix), host, plans, tmp_path / "j.jsonl")
    before = len(read_state(state)["log"])
    files = sorted(p for p in (tmp_path / "etc").rglob("*") if p.is_file())
    stamps = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in files}
    done = [_planned_again(p) for p in plans]
    runner = Trips(state, prefix)
    rep = _apply(runner, host, done, tmp_path / "j2.jsonl")
    assert [g.outcome for g in rep.gpus] == [GpuOutcome.UNCHANGED] * GPUS
    assert not any(t.startswith("nvidia-smi") for t in runner.trips) and _shape(runner.trips)[:2] == ["lock", "batch"]
    assert _file_trips(runner, host) == _files_shape(host, changes=False), runner.trips
    batched = int(runner.trips[1].split()[-1])
    assert len(read_state(state)["log"]) - before == batched  # the one batch of reads, nothing else on the GPUs
    assert rep.assignments[0].device and rep.assignments[0].device.startswith("MIG-")
    # the same content: no file rewritten (same inode, same mtime), nothing left behind
    assert runner.files == [FilesDone(unchanged=("env/chat.env", "assignments.json", "last-applied.json"))]
    assert sorted(p for p in (tmp_path / "etc").rglob("*") if p.is_file()) == files
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in files} == stamps
    events = [json.loads(x) for x in (tmp_path / "j2.jsonl").read_text().splitlines()]
    assert [(e["written"], e["unchanged"], e["removed"]) for e in events if e["event"] == "files"] == [
        ([], ["env/chat.env", "assignments.json", "last-applied.json"], [])]


@pytest.mark.slow
def test_a_dry_run_records_exactly_the_mutating_commands_a_real_run_journals(tmp_path: Path) -> None:
    state, host, plans = _host(tmp_path)
    dry = _apply(Trips(state), host, plans, tmp_path / "none.jsonl", dry_run=True)
    assert not (tmp_path / "none.jsonl").exists()
    _apply(Trips(state), host, plans, tmp_path / "j.jsonl")
    events = [json.loads(x) for x in (tmp_path / "j.jsonl").read_text().splitlines()]
    assert list(dry.commands) == [" ".join(e["argv"]) for e in events if e["event"] == "command"]


def _planned_again(p: GpuPlan) -> GpuPlan:
    """The same GPU planned again after the apply: observed = target, no actions."""
    observed = dataclasses.replace(p.observed, mig_enabled=True, layout=AFTER)
    return GpuPlan(observed, AFTER, ())

