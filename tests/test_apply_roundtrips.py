"""Round trips of one host's apply (issue 10: at most 4 per changed GPU, host overhead included): the reads go
in two batches, and the journal lists every command the host ran (each nvidia-smi the simulator logged)."""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim.fleet import host_state, read_state, sim_env, write_state  # noqa: E402

from migplan.adapters.runner import DEFAULT_TIMEOUT, Completed, LocalRunner  # noqa: E402
from migplan.catalog import builtin_catalog  # noqa: E402
from migplan.commands.apply import _Journal, apply_one_host  # noqa: E402
from migplan.fleet.apply import ApplyOptions, GpuOutcome  # noqa: E402
from migplan.fleet.assignments import LastApplied, Placement  # noqa: E402
from migplan.fleet.diff import diff  # noqa: E402
from migplan.fleet.state import GpuState  # noqa: E402
from migplan.fleet.steps import is_read_only  # noqa: E402
from migplan.inventory import Host  # noqa: E402
from migplan.layout import Layout  # noqa: E402
from migplan.planner.plan import GpuPlan  # noqa: E402

CAT = builtin_catalog()
MODEL = CAT.get("A100-SXM4-40GB")
BEFORE = Layout.parse(["3g.20gb@0", "3g.20gb@4"])
AFTER = Layout.parse(["3g.20gb@0", "2g.10gb@4", "1g.5gb@6"])
GPUS = 8


class Trips:
    """The simulated host behind a local runner, counting what would each be one SSH round trip: a command, a
    batch of reads (`run_batch`, one exec), a file put, the lock."""

    def __init__(self, state: Path) -> None:
        self.local = LocalRunner(host="h1", env=sim_env(state))
        self.trips: list[str] = []

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

    def get_file(self, path: str, **kw: Any) -> bytes:
        self.trips.append(f"get {path}")
        return self.local.get_file(path, **kw)

    def hold(self, argv: Sequence[str], **kw: Any) -> Any:
        self.trips.append("lock")
        return self.local.hold(argv, **kw)


def _host(tmp: Path) -> tuple[Path, Host, list[GpuPlan]]:
    """The benchmark's host: GPUs 0..5 re-partitioned (one instance destroyed, two created), 6 and 7 MIG off -> on."""
    st = host_state("A100-SXM4-40GB", GPUS, hostname="h1",
                    layouts=[BEFORE if i < GPUS - 2 else Layout() for i in range(GPUS)])
    for gpu in st["gpus"][GPUS - 2:]:
        gpu.update(mig_current=False, mig_pending=False, gpu_instances=[])
    path = write_state(tmp / "h1.json", st)
    host = Host(name="h1", address="h1", state_dir=str(tmp / "etc"), lock_file=str(tmp / "apply.lock"))
    plans = []
    for gpu in st["gpus"]:
        current = BEFORE if gpu["mig_current"] else None
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


def test_an_eight_gpu_host_costs_at_most_four_round_trips_per_changed_gpu(tmp_path: Path) -> None:
    state, host, plans = _host(tmp_path)
    runner = Trips(state)
    rep = _apply(runner, host, plans, tmp_path / "j.jsonl")
    assert rep.error is None and [g.outcome for g in rep.gpus] == [GpuOutcome.APPLIED] * GPUS, rep
    mutating = [t for t in runner.trips if t.startswith("nvidia-smi") and not is_read_only(t.split())]
    assert len(mutating) == 3 * GPUS  # -dci, -dgi, -cgi (or -mig, -r, -cgi) per GPU: nothing batched across GPUs
    overhead = [t for t in runner.trips if t not in mutating]
    # the lock, the reads before (pre-flight help + state, plain nvidia-smi's processes among them) and after
    # (read-back, memory, UUIDs), mkdir, the assignments, one env file (the one placed workload), last-applied.json
    assert overhead == ["lock", "batch of 10", "batch of 5", f"mkdir -p -- {host.state_dir}/env",
                        f"put {host.state_dir}/assignments.json", f"put {host.state_dir}/env/chat.env",
                        f"put {host.state_dir}/last-applied.json"], overhead
    assert len(runner.trips) / GPUS <= 4
    assert rep.assignments[0].device and rep.assignments[0].device.startswith("MIG-")
    env = (tmp_path / "etc" / "env" / "chat.env").read_text()
    assert f"CUDA_VISIBLE_DEVICES={rep.assignments[0].device}\n" in env
    gi = next(g for g in read_state(state)["gpus"][0]["gpu_instances"] if (g["profile_id"], g["start"]) == (14, 4))
    assert rep.assignments[0].device == gi["cis"][0]["uuid"]  # the simulator's own UUID of 2g.10gb@4


def test_the_devices_table_matches_uuids_exactly_where_the_listing_order_would_not() -> None:
    from migplan import smi
    from migplan.fleet.apply import _uuids_of

    gis = [smi.GpuInstanceRow(gpu=0, profile_name="3g.20gb", profile_id=9, gi_id=1, start=0, size=4),
           smi.GpuInstanceRow(gpu=0, profile_name="2g.10gb", profile_id=14, gi_id=3, start=4, size=2)]
    cis = [smi.ComputeInstanceRow(gpu=0, gi_id=1, ci_id=0, profile_name="3g.20gb", profile_id=2),
           smi.ComputeInstanceRow(gpu=0, gi_id=3, ci_id=0, profile_name="2g.10gb", profile_id=1)]
    devices = [smi.MigDevice(0, "2g.10gb", 0, "MIG-aaaa"), smi.MigDevice(0, "3g.20gb", 1, "MIG-bbbb")]
    table = {0: (3, 0), 1: (1, 0)}  # device 0 is GI 3: not the ascending-GI order
    assert _uuids_of(0, gis, cis, devices, table) == {(3, 0): "MIG-aaaa", (1, 0): "MIG-bbbb"}
    assert _uuids_of(0, gis, cis, devices) == {(1, 0): "MIG-aaaa", (3, 0): "MIG-bbbb"}  # the order rule
    assert _uuids_of(0, gis, cis, devices, {0: (3, 0)}) == {(1, 0): "MIG-aaaa", (3, 0): "MIG-bbbb"}  # partial


def test_the_journal_lists_every_command_the_host_ran(tmp_path: Path) -> None:
    state, host, plans = _host(tmp_path)
    _apply(Trips(state), host, plans, tmp_path / "j.jsonl")
    ran = [["nvidia-smi", *a] for a in read_state(state)["log"]]  # the simulator's own record
    assert sorted(map(tuple, _journal_argv(tmp_path / "j.jsonl"))) == sorted(map(tuple, ran))


def test_reapplying_reads_once_and_changes_nothing(tmp_path: Path) -> None:
    state, host, plans = _host(tmp_path)
    _apply(Trips(state), host, plans, tmp_path / "j.jsonl")
    before = len(read_state(state)["log"])
    done = [_planned_again(p) for p in plans]
    runner = Trips(state)
    rep = _apply(runner, host, done, tmp_path / "j2.jsonl")
    assert [g.outcome for g in rep.gpus] == [GpuOutcome.UNCHANGED] * GPUS
    assert runner.trips[:2] == ["lock", "batch of 10"] and not any(t.startswith("nvidia-smi") for t in runner.trips)
    assert len(read_state(state)["log"]) - before == 10  # the one batch of reads, nothing else on the GPUs
    assert rep.assignments[0].device and rep.assignments[0].device.startswith("MIG-")


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

