"""Issue 20: discovery puts each process of a MIG GPU on its GPU instance by plain `nvidia-smi`'s Processes table
(GPU index and GI ID; the CI ID one of that instance's compute instances: docs/nvidia-smi.md §12), read in the
host's one batch of reads, so an instance without a process is idle; where the table says nothing (N/A, no table,
a read that failed, a process it does not list) the rules without it stand. Apply reads the host the same way, and
its stale check is not fooled by a changed way of placing processes. Verbatim public samples
(tests/data/smi/README.md) and the simulator, which prints the table as NVIDIA does (tests/sim)."""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim.fleet import Proc, host_state, read_state, write_state
from sim_runner import InProcess

from migplan import smi
from migplan.adapters.runner import DEFAULT_TIMEOUT, CommandTimeout, Completed
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Instance, Layout
from migplan.fleet.apply import FIRST_READS, ApplyOptions, GpuOutcome, apply_host
from migplan.fleet.discover import READS, discover_host, placed_processes
from migplan.fleet.snapshot import ComputeInstance, DiscoveredInstance
from migplan.inventory import Host
from migplan.model.diff import diff
from migplan.model.gpu_plan import GpuPlan
from migplan.model.state import GpuState, changes
from migplan.smi.mig_table import parse_mig_devices
from migplan.smi.usage import parse_processes

DATA = Path(__file__).parent / "data" / "smi"
CAT = builtin_catalog()
MODEL = CAT.get("A100-SXM4-40GB")
HOST = Host(name="h", address="h", lock_file=f"/tmp/migplan-test-procs-{os.getpid()}.lock")
THREE = ["3g.20gb@0", "2g.10gb@4", "1g.5gb@6"]
G3, G2, G1 = Instance(0, "3g.20gb"), Instance(4, "2g.10gb"), Instance(6, "1g.5gb")


def sample(name: str) -> str:
    return (DATA / name).read_text()


def _rows(name: str) -> list[tuple[object, ...]]:
    return [(r.gpu, r.gi_id, r.ci_id, r.pid, r.kind, r.name, r.used_mib) for r in parse_processes(sample(name))]


# --- the public samples ---------------------------------------------------------------------------------------

def test_the_public_samples_give_each_process_its_gpu_index_gi_and_ci() -> None:
    assert _rows("plain_a100_590_mig_process.txt") == [(0, 2, 0, 3438385, "C", "python", 3796)]
    assert _rows("plain_ug_a100_two_gis.txt") == [(0, 1, 0, 6217, "C", "...inux/release/BlackScholes", 253),
                                                  (0, 2, 0, 6223, "C", "...inux/release/BlackScholes", 253)]
    assert _rows("plain_ug_a100_cis_processes.txt") == [(0, 1, ci, pid, "C", "./BlackScholes", 153) for ci, pid in
                                                        ((0, 59785), (1, 59796), (2, 59885))]
    assert _rows("processes_ug_a100_mps.txt") == [
        (0, 1, 0, 3805, "M+C", "./bin/BlackScholes", 326), (0, 1, 0, 3809, "C", "nvidia-cuda-mps-server", 60),
        (0, 2, 0, 3817, "M+C", "./bin/BlackScholes", 326), (0, 2, 0, 3819, "C", "nvidia-cuda-mps-server", 60)]


def test_the_driver_590_sample_lists_its_four_mig_devices_beside_the_processes() -> None:
    devices = parse_mig_devices(sample("plain_a100_590_mig_process.txt"))
    assert [(d.gpu, d.gi_id, d.ci_id, d.device, d.used_mib, d.total_mib) for d in devices] == [
        (0, 2, 0, 0, 3892, 20096), (0, 3, 0, 1, 62, 9984), (0, 9, 0, 2, 32, 4864), (0, 10, 0, 3, 32, 4864)]


def _app(pid: int, uuid: str = "GPU-parent") -> smi.ComputeApp:
    return smi.ComputeApp(pid=pid, gpu_uuid=uuid, used_memory_mib=153, process_name="./BlackScholes")


def _gi(gi: int, start: int, profile: str, cis: Sequence[int]) -> DiscoveredInstance:
    return DiscoveredInstance(Instance(start, profile), gi, tuple(ComputeInstance(c, profile) for c in cis))


def test_processes_on_three_compute_instances_of_one_gpu_instance_all_go_there() -> None:
    """The MIG User Guide's sample: three processes on CIs 0, 1, 2 of GI 1; GI 2 beside it has none."""
    rows = parse_processes(sample("plain_ug_a100_cis_processes.txt"))
    gis = [_gi(1, 0, "3g.20gb", (0, 1, 2)), _gi(2, 4, "3g.20gb", (0,))]
    apps = [_app(59785), _app(59796), _app(59885)]
    placed, loose = placed_processes(0, "GPU-parent", True, gis, apps, rows)
    assert {i: [p.pid for p in ps] for i, ps in placed.items()} == {Instance(0, "3g.20gb"): [59785, 59796, 59885]}
    assert loose == []
    placed, loose = placed_processes(0, "GPU-parent", True, gis, apps)  # without the table: nothing is known
    assert placed == {} and [p.pid for p in loose] == [59785, 59796, 59885]


def test_a_ci_that_the_gpu_instance_does_not_have_leaves_that_process_unplaced_and_says_so() -> None:
    rows = parse_processes(sample("plain_ug_a100_cis_processes.txt"))
    gis = [_gi(1, 0, "3g.20gb", (0, 1)), _gi(2, 4, "3g.20gb", (0,))]  # CI 2 is not listed by -lci
    notes: list[str] = []
    placed, loose = placed_processes(0, "GPU-parent", True, gis, [_app(59785), _app(59885)], rows, notes)
    assert [p.pid for p in placed[Instance(0, "3g.20gb")]] == [59785] and [p.pid for p in loose] == [59885]
    assert notes == ["GPU 0: plain 'nvidia-smi' lists 1 process(es) on a GPU or compute instance that 'nvidia-smi "
                     "mig -lgi'/'-lci' do not list (PID 59885: GPU instance 1, compute instance 2); they are placed "
                     "without it"]


def test_an_mps_server_and_its_client_on_one_gpu_instance_and_a_pid_on_another_gpu() -> None:
    rows = parse_processes(sample("processes_ug_a100_mps.txt"))
    gis = [_gi(1, 0, "3g.20gb", (0,)), _gi(2, 4, "3g.20gb", (0,))]
    placed, loose = placed_processes(0, "GPU-parent", True, gis, [_app(p) for p in (3805, 3809, 3817, 3819)], rows)
    assert {i.start: [p.pid for p in ps] for i, ps in placed.items()} == {0: [3805, 3809], 4: [3817, 3819]}
    # the same table read for GPU 1 names no process of it: GPU 1's processes are placed without it
    placed, loose = placed_processes(1, "GPU-parent", True, gis, [_app(3805)], rows)
    assert placed == {} and [p.pid for p in loose] == [3805]


# --- discovery on the simulator ---------------------------------------------------------------------------------

def _host(tmp: Path, busy: dict[int, list[Proc]], layouts: Sequence[Sequence[str]] = (THREE,)) -> Path:
    return write_state(tmp / "h.json", host_state("A100-SXM4-40GB", len(layouts), hostname="h",
                                                  layouts=[list(x) for x in layouts], busy=busy))


class Batches(InProcess):
    """The simulated host, counting round trips: a command, or a batch of reads (`run_batch`: one SSH exec)."""

    def __init__(self, state: Path) -> None:
        super().__init__(state)
        self.trips: list[str] = []

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT, stdin: bytes | None = None) -> Completed:
        self.trips.append(" ".join(argv))
        return super().run(argv, timeout=timeout, stdin=stdin)

    def run_batch(self, argvs: Sequence[Sequence[str]], *, timeout: float = DEFAULT_TIMEOUT) -> list[Completed]:
        self.trips.append(f"batch of {len(argvs)}")
        return [super(Batches, self).run(a, timeout=timeout) for a in argvs]


def test_a_process_makes_only_its_own_gpu_instance_busy_and_costs_no_extra_round_trip(tmp_path: Path) -> None:
    state = _host(tmp_path, {0: [Proc(4711, "train.py", 2048, start=4)]})
    runner = Batches(state)
    rec = discover_host(runner, HOST, CAT)
    (g,) = rec.gpus
    assert g.busy_instances == (G2,) and g.processes == ()
    assert {i.instance: [(p.pid, p.name, p.used_memory_mib) for p in i.processes] for i in g.instances} == {
        G3: [], G2: [(4711, "train.py", 2048)], G1: []}
    st = g.state("h")
    assert st is not None and st.busy == (G2,)  # what the planner sees: 3g.20gb@0 and 1g.5gb@6 are idle
    assert not rec.notes, rec.notes
    # `--query-gpu` on its own, then every other read in one batch, plain nvidia-smi among them
    assert runner.trips == [" ".join(smi.query_gpus()), f"batch of {len(READS) - 1}"]
    assert read_state(state)["log"].count([]) == 1  # plain `nvidia-smi`, once for the host
    assert set(READS) <= set(FIRST_READS)  # apply reads the host as discovery does


def test_a_host_without_mig_reads_no_mig_listing_and_no_processes_table(tmp_path: Path) -> None:
    st = host_state("A100-SXM4-40GB", 1, hostname="h", busy={0: [Proc(9, "whole.py")]})
    st["gpus"][0].update(mig_current=False, mig_pending=False, gpu_instances=[])
    runner = Batches(write_state(tmp_path / "h.json", st))
    (g,) = discover_host(runner, HOST, CAT).gpus
    assert not g.mig_current and [p.pid for p in g.processes] == [9]
    assert runner.trips == [" ".join(smi.query_gpus()), "batch of 3"]  # -L, --query-compute-apps, driver versions


def test_the_verbatim_driver_590_table_places_the_process_by_its_gi_id(tmp_path: Path) -> None:
    """The simulated host laid out with the sample's GPU instance ids (GI 2, 3, 9, 10; a 3g, a 2g and two 1g, as
    its MIG devices table shows), its process, and plain `nvidia-smi` answered with the public text itself."""
    st = host_state("A100-SXM4-40GB", 1, hostname="h", layouts=[["2g.10gb@0", "1g.5gb@2", "1g.5gb@3", "3g.20gb@4"]])
    for gi in st["gpus"][0]["gpu_instances"]:
        gi["id"] = {0: 3, 2: 9, 3: 10, 4: 2}[gi["start"]]
    st["gpus"][0]["processes"] = [{"pid": 3438385, "name": "python", "used_memory_mib": 3796, "gi": 2, "ci": 0}]
    text = sample("plain_a100_590_mig_process.txt")
    runner = Answering(write_state(tmp_path / "h.json", st), lambda done: Completed(done.argv, 0, text, ""))
    (g,) = discover_host(runner, HOST, CAT).gpus
    assert g.busy_instances == (Instance(4, "3g.20gb"),) and g.processes == ()
    assert {i.gi_id: [p.pid for p in i.processes] for i in g.instances} == {3: [], 9: [], 10: [], 2: [3438385]}


class Answering(InProcess):
    """The simulated host, with plain `nvidia-smi` answered by `change` (given the simulator's own answer; it may
    raise, as a runner does) the first `times` times it is asked."""

    def __init__(self, state: Path, change: Callable[[Completed], Completed], times: int = 1_000) -> None:
        super().__init__(state)
        self.change, self.times = change, times

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT, stdin: bytes | None = None) -> Completed:
        done = super().run(argv, timeout=timeout, stdin=stdin)
        if list(argv) == ["nvidia-smi"] and self.times > 0:
            self.times -= 1
            return self.change(done)
        return done


def _text(done: Completed, text: str) -> Completed:
    return Completed(done.argv, 0, text, "")


def _na(done: Completed) -> Completed:  # what drivers print outside MIG mode, here on a MIG GPU's process
    return _text(done, re.sub(r"(?m)^(\|\s+0)\s+\d+\s+\d+(\s+4711\s)", r"\1   N/A  N/A\2", done.stdout))


def _timeout(done: Completed) -> Completed:
    raise CommandTimeout("h", "'nvidia-smi' did not finish within 60 s")


FALLBACKS: dict[str, tuple[Callable[[Completed], Completed], str]] = {
    "N/A columns": (_na, "cannot be placed on one GPU instance"),
    "no Processes table": (lambda d: _text(d, d.stdout.split("| Processes:")[0]), "cannot be placed"),
    "a process it does not list": (lambda d: _text(d, d.stdout.replace(" 4711 ", " 4712 ")), "cannot be placed"),
    "an unreadable row": (lambda d: _text(d, d.stdout.replace("4711      C", "4711  $(rm)")),
                          "plain 'nvidia-smi': cannot read nvidia-smi (Processes table) output, line"),
    "the read fails": (lambda d: Completed(d.argv, 255, "", "Unknown Error\n"), "plain 'nvidia-smi' failed (exit 255)"),
    "the read times out": (_timeout, "plain 'nvidia-smi' not read ('nvidia-smi' did not finish within 60 s)"),
    "a CI that -lci does not list": (lambda d: _text(d, re.sub(r"(?m)^(\|\s+0\s+\d+)\s+0(\s+4711\s)", r"\1    5\2",
                                                                d.stdout)), "'-lci' do not list (PID 4711"),
}


@pytest.mark.parametrize("case", list(FALLBACKS))
def test_where_the_table_says_nothing_every_instance_counts_as_busy_and_a_note_says_why(
        tmp_path: Path, case: str) -> None:
    change, note = FALLBACKS[case]
    state = _host(tmp_path, {0: [Proc(4711, start=4)]})
    seen: list[str] = []

    def watch(done: Completed) -> Completed:
        seen.append(done.stdout)
        return change(done)
    rec = discover_host(Answering(state, watch), HOST, CAT)
    (g,) = rec.gpus
    assert rec.ok and g.layout == Layout.parse(THREE)
    assert g.busy_instances == (G3, G2, G1) and [p.pid for p in g.processes] == [4711]
    assert any(note in n for n in rec.notes), rec.notes
    assert seen and "4711" in seen[0]  # the table was asked for, and it listed the process before the change


def test_one_instance_with_a_compute_instance_still_gets_its_process_without_the_table(tmp_path: Path) -> None:
    state = _host(tmp_path, {0: [Proc(77, start=0)]}, layouts=(["7g.40gb@0"],))
    rec = discover_host(Answering(state, lambda d: Completed(d.argv, 255, "", "Unknown Error\n")), HOST, CAT)
    assert rec.gpus[0].busy_instances == (Instance(0, "7g.40gb"),) and rec.gpus[0].processes == ()


# --- apply: the host read again the same way, and a changed way of placing processes is no change ------------

BEFORE = Layout.parse(["3g.20gb@0", "2g.10gb@4"])
GROW = Layout.parse(["3g.20gb@0", "2g.10gb@4", "1g.5gb@6"])  # creates 1g.5gb@6 only
SPLIT = Layout.parse(["2g.10gb@0", "2g.10gb@2", "2g.10gb@4"])  # destroys 3g.20gb@0


def _plan(state: Path, target: Layout, busy: tuple[Instance, ...]) -> GpuPlan:
    uuid = read_state(state)["gpus"][0]["uuid"]
    observed = GpuState(host="h", index=0, model=MODEL.id, uuid=uuid, mig_enabled=True, layout=BEFORE, busy=busy)
    return GpuPlan(observed, target, tuple(diff(BEFORE, target, gpu=("h", 0), architecture=MODEL.architecture)))


def _apply(runner: Any, plan: GpuPlan) -> Any:
    return apply_host(runner, HOST, [plan], CAT, ApplyOptions()).gpus[0]


def _layout(state: Path) -> Layout | None:
    return discover_host(InProcess(state), HOST, CAT).gpus[0].layout


def test_a_plan_from_a_discovery_without_the_table_is_not_refused_for_that(tmp_path: Path) -> None:
    """The plan's discovery (an older migplan, or a host whose table could not be read) had every instance busy;
    read with the table, only 2g.10gb@4 is: the GPU has not changed, and the plan, which destroys nothing, runs."""
    state = _host(tmp_path, {0: [Proc(4711, start=4)]}, layouts=([str(i) for i in BEFORE.instances],))
    plan = _plan(state, GROW, busy=(G3, G2))
    live = discover_host(InProcess(state), HOST, CAT).gpus[0].state("h")
    assert changes(plan.observed, live) == ["GPU 0: 3g.20gb@0 no longer busy"]  # what a plain comparison says
    res = _apply(InProcess(state), plan)
    assert res.outcome is GpuOutcome.APPLIED, res
    assert _layout(state) == GROW


def test_a_plan_made_with_the_table_is_not_refused_when_the_table_cannot_be_read_now(tmp_path: Path) -> None:
    state = _host(tmp_path, {0: [Proc(4711, start=4)]}, layouts=([str(i) for i in BEFORE.instances],))
    failing = Answering(state, lambda d: Completed(d.argv, 255, "", "Unknown Error\n"), times=1)  # the first read
    res = _apply(failing, _plan(state, GROW, busy=(G2,)))
    assert res.outcome is GpuOutcome.APPLIED, res
    assert _layout(state) == GROW


def test_an_instance_that_may_be_busy_is_not_destroyed_when_the_table_cannot_be_read(tmp_path: Path) -> None:
    state = _host(tmp_path, {0: [Proc(4711, start=4)]}, layouts=([str(i) for i in BEFORE.instances],))
    failing = Answering(state, lambda d: Completed(d.argv, 255, "", "Unknown Error\n"))
    res = _apply(failing, _plan(state, SPLIT, busy=(G2,)))  # the plan destroys 3g.20gb@0, idle when planned
    assert res.outcome is GpuOutcome.SKIPPED and "3g.20gb@0" in res.reason and "--allow-disrupt" in res.reason
    assert _layout(state) == BEFORE and not any("-dgi" in a for a in read_state(state)["log"])
    res = _apply(InProcess(state), _plan(state, SPLIT, busy=(G2,)))  # read with the table: 3g.20gb@0 is idle
    assert res.outcome is GpuOutcome.APPLIED, res
    assert _layout(state) == SPLIT


def test_a_process_started_since_the_plan_still_makes_it_stale(tmp_path: Path) -> None:
    state = _host(tmp_path, {0: [Proc(4711, start=4), Proc(4800, start=0)]},
                  layouts=([str(i) for i in BEFORE.instances],))
    res = _apply(InProcess(state), _plan(state, GROW, busy=(G2,)))
    assert res.outcome is GpuOutcome.REFUSED and "processes now run on 3g.20gb@0" in res.reason
    assert _layout(state) == BEFORE
