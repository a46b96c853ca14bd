"""adapters.forkmap: the same results and the same first error as a plain loop, with real forked workers;
and profile reading through it (profiles.load_profiles on large sets of files)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from migplan import profiles
from migplan.adapters import forkmap
from migplan.errors import InputError


def fork_map(fn: Any, items: list[Any], **kw: Any) -> list[Any]:
    """[fn(x) for x in items] through forked workers, the parent doing the first share."""
    with forkmap.fork_start(fn, items, **kw) as pending:
        return pending.result()


FORKED: list[int] = []  # the workers forked by the current test (the `forks` fixture records them)


@pytest.fixture(autouse=True)
def forks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    FORKED.clear()
    real = os.fork

    def fork() -> int:
        pid = real()
        if pid:
            FORKED.append(pid)
        return pid

    monkeypatch.setattr(os, "fork", fork)
    return FORKED


def no_children_left() -> bool:
    """Every worker this test forked has been reaped (other children of the test process, such as a
    session's sshd, are not this module's)."""
    for pid in FORKED:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        return False
    return True


class Refused(Exception):
    def __init__(self, message: str, *, item: int) -> None:  # a keyword field: lost by pickling
        super().__init__(message)
        self.item = item


def test_results_are_a_plain_loops_in_order() -> None:
    items = list(range(40))
    for jobs in (1, 2, 3, 8):
        assert fork_map(lambda x: x * x, items, jobs=jobs) == [x * x for x in items]
    assert len(FORKED) == 0 + 1 + 2 + 7 and no_children_left()


def test_work_really_runs_in_other_processes() -> None:
    pids = fork_map(lambda _x: os.getpid(), list(range(6)), jobs=3)
    assert pids[0] == os.getpid() and len(set(pids)) == 3  # the parent's share first, then two workers
    assert no_children_left()
    mine = os.nice(0)
    nices = fork_map(lambda _x: os.nice(0), list(range(4)), jobs=2)
    assert nices[:2] == [mine, mine] and nices[2:] == [min(19, mine + forkmap.NICE)] * 2  # workers yield to it


def test_the_first_failing_input_raises_its_own_exception() -> None:
    def fn(x: int) -> int:
        if x in (7, 13):
            raise Refused(f"item {x} refused", item=x)
        return x

    with pytest.raises(Refused) as caught:
        fork_map(fn, list(range(20)), jobs=3)  # 7 and 13 fall in two workers' shares
    assert str(caught.value) == "item 7 refused" and caught.value.item == 7
    assert no_children_left()


def test_a_failure_in_the_parents_share_comes_before_the_workers() -> None:
    def fn(x: int) -> int:
        if x in (1, 15):
            raise Refused(f"item {x}", item=x)
        return x

    with pytest.raises(Refused, match="item 1"):
        fork_map(fn, list(range(20)), jobs=2)
    assert no_children_left()


def test_a_worker_that_dies_is_redone_in_process() -> None:
    parent = os.getpid()

    def fn(x: int) -> int:
        if x == 12 and os.getpid() != parent:
            os._exit(9)  # the worker dies without an answer
        return -x

    assert fork_map(fn, list(range(16)), jobs=2) == [-x for x in range(16)]
    assert no_children_left()


def test_sequential_while_other_threads_run() -> None:
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        pids = fork_map(lambda _x: os.getpid(), list(range(6)), jobs=3)
    finally:
        stop.set()
        t.join()
    assert set(pids) == {os.getpid()}


def test_jobs_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIGPLAN_JOBS", "1")
    assert forkmap.default_jobs() == 1
    assert set(fork_map(lambda _x: os.getpid(), list(range(6)))) == {os.getpid()}
    monkeypatch.setenv("MIGPLAN_JOBS", "3")
    assert forkmap.default_jobs() == 3
    monkeypatch.setenv("MIGPLAN_JOBS", "lots")
    assert forkmap.default_jobs() == min(forkmap.MAX_JOBS, forkmap.usable_cpus())


def test_a_containers_cpu_quota_lowers_the_jobs() -> None:
    assert forkmap.cgroup_cpus("200000 100000\n") == 2
    assert forkmap.cgroup_cpus("50000 100000") == 1  # half a CPU: still one worker, the parent
    assert forkmap.cgroup_cpus("max 100000") is None
    assert forkmap.cgroup_cpus("garbage") is None and forkmap.cgroup_cpus("1 0") is None


def test_no_processes_left_to_fork_means_reading_here(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = os.fork

    def fork_once() -> int:
        calls.append(1)
        if len(calls) > 1:
            raise BlockingIOError(11, "Resource temporarily unavailable")
        return real()

    monkeypatch.setattr(os, "fork", fork_once)
    pids = fork_map(lambda _x: os.getpid(), list(range(6)), jobs=3)
    assert set(pids) == {os.getpid()} and len(calls) == 2
    assert len(FORKED) == 1 and no_children_left()  # the one started worker was killed and reaped


def test_chunks_are_consecutive_and_balanced_by_weight() -> None:
    assert forkmap.chunks([1] * 10, 2) == [range(0, 5), range(5, 10)]
    assert forkmap.chunks([9, 1, 1, 1, 1, 1, 1, 1, 1, 1], 2) == [range(0, 1), range(1, 10)]
    assert forkmap.chunks([1, 1], 5) == [range(0, 1), range(1, 2)]
    parts = forkmap.chunks([3, 1, 4, 1, 5, 9, 2, 6], 3)
    assert [i for r in parts for i in r] == list(range(8)) and len(parts) == 3


# --- profile reading ----------------------------------------------------------------------------

def write_profiles(directory: Path, files: int, per_file: int) -> None:
    directory.mkdir()
    n = 0
    for f in range(files):
        lines = ["version: 1", "workloads:"]
        for _ in range(per_file):
            lines += [f"- name: w{n:05d}", "  observed: {gpu_model: A100-SXM4-40GB}",
                      "  memory_mib: {p50: 4000, p95: 5000, p99: 5500, max: 6000}",
                      "  compute: {p50: 0.1, p95: 0.2, p99: 0.25, max: 0.3}", f"  priority: {n % 100 + 1}"]
            n += 1
        (directory / f"p{f:03d}.yaml").write_text("\n".join(lines) + "\n")


@pytest.fixture()
def parallel(monkeypatch: pytest.MonkeyPatch) -> None:
    """Profiles read by two processes whatever their size and this machine's CPUs."""
    monkeypatch.setattr(profiles, "PARALLEL_BYTES", 0)
    monkeypatch.setenv("MIGPLAN_JOBS", "2")


def read_sequentially(path: Path, monkeypatch: pytest.MonkeyPatch) -> profiles.ProfileSet:
    with monkeypatch.context() as m:
        m.setenv("MIGPLAN_JOBS", "1")
        return profiles.load_profiles(path)


def test_profiles_read_in_parallel_are_the_same(parallel: None, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    write_profiles(tmp_path / "p", files=12, per_file=20)
    seen: list[int] = []
    real = profiles._read_file
    monkeypatch.setattr(profiles, "_read_file", lambda f: (seen.append(os.getpid()), real(f))[1])
    both = profiles.load_profiles(tmp_path / "p")
    assert len(both.workloads) == 240 and [w.name for w in both] == [f"w{i:05d}" for i in range(240)]
    assert set(seen) == {os.getpid()}  # only the parent's own share is recorded here: the rest ran elsewhere
    assert len(seen) < 12
    assert both == read_sequentially(tmp_path / "p", monkeypatch)


def both_errors(path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[InputError, InputError]:
    """The error reading `path` in two processes, and reading it in one."""
    with pytest.raises(InputError) as par:
        profiles.load_profiles(path)
    with pytest.raises(InputError) as seq:
        read_sequentially(path, monkeypatch)
    assert no_children_left()
    return par.value, seq.value


def test_a_duplicate_across_shares_is_the_sequential_error(parallel: None, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    write_profiles(tmp_path / "p", files=10, per_file=5)
    last = tmp_path / "p" / "p009.yaml"
    last.write_text(last.read_text().replace("w00045", "w00002"))
    par, seq = both_errors(tmp_path / "p", monkeypatch)
    assert str(par) == str(seq) and "defined twice" in str(par)
    assert (par.source, par.line) == (seq.source, seq.line) == (str(last), 3)


def test_a_bad_file_in_a_worker_is_the_sequential_error(parallel: None, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    write_profiles(tmp_path / "p", files=10, per_file=5)
    bad = tmp_path / "p" / "p008.yaml"
    bad.write_text(bad.read_text().replace("priority: 41", "priority: [41"))
    par, seq = both_errors(tmp_path / "p", monkeypatch)
    assert str(par) == str(seq) and par.source == str(bad)


def test_an_earlier_duplicate_wins_over_a_later_bad_file(parallel: None, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Read one by one, a duplicate in file 6 stops the read before file 8 is parsed: in two processes file 8
    is parsed by then, yet its error must not come first."""
    write_profiles(tmp_path / "p", files=10, per_file=5)
    dup = tmp_path / "p" / "p006.yaml"
    dup.write_text(dup.read_text().replace("w00030", "w00002"))
    bad = tmp_path / "p" / "p008.yaml"
    bad.write_text(bad.read_text().replace("priority: 41", "priority: [41"))
    par, seq = both_errors(tmp_path / "p", monkeypatch)
    assert str(par) == str(seq) and "defined twice" in str(par) and par.source == str(dup)


# --- prefetch: the console script begins reading the profiles of `propose` before its own start-up -------

@pytest.mark.parametrize(("argv", "env", "path"), [
    (["propose", "-p", "prof", "-i", "inv.yaml"], {}, "prof"),
    (["propose", "--profiles", "a", "--profiles=b"], {}, "b"),  # the last one counts, as in click
    (["propose", "--profiles=a", "-p", "b"], {}, "b"),
    (["propose", "-i", "inv.yaml"], {"MIGPLAN_PROFILES": "env"}, "env"),
    (["propose", "-p", "prof"], {"MIGPLAN_PROFILES": "env"}, "prof"),
    (["propose", "-i", "inv.yaml"], {}, None),
    (["propose", "-p", "prof", "--help"], {}, None),
    (["propose", "--", "-p", "prof"], {}, None),
    (["profiles", "show", "-p", "prof"], {}, None),  # only `propose`
    (["-v", "propose", "-p", "prof"], {}, None),  # root options first: typer's alone
    (["propose", "-p"], {}, None),
    ([], {"MIGPLAN_PROFILES": "env"}, None),
])
def test_which_command_lines_prefetch_their_profiles(argv: list[str], env: dict[str, str], path: str | None) -> None:
    from migplan.cli.entry import prefetch_path

    assert prefetch_path(argv, env) == path


def test_a_prefetched_read_is_taken_over_and_reads_the_same(parallel: None, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    write_profiles(tmp_path / "p", files=12, per_file=20)
    profiles.prefetch(f"{tmp_path / 'p'}/")
    started = len(FORKED)
    assert started >= 1  # its workers run before anyone asks for the profiles
    with profiles.start_profiles(str(tmp_path / "p")) as pending:  # the same directory, written otherwise
        assert len(FORKED) == started  # taken over: nothing started again
        got = pending.result()
    assert got == read_sequentially(tmp_path / "p", monkeypatch)
    assert not profiles._PREFETCHED and no_children_left()


def test_a_prefetch_of_another_path_is_left_alone_and_then_stopped(parallel: None, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    write_profiles(tmp_path / "a", files=6, per_file=10)
    write_profiles(tmp_path / "b", files=6, per_file=10)
    profiles.prefetch(str(tmp_path / "a"))
    with profiles.start_profiles(str(tmp_path / "b")) as pending:
        got = pending.result()
    assert got == read_sequentially(tmp_path / "b", monkeypatch)
    assert list(profiles._PREFETCHED) == [str(tmp_path / "a")]
    profiles.drop_prefetched()
    assert not profiles._PREFETCHED and no_children_left()


def _console(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> int:
    from migplan.cli import entry

    monkeypatch.setattr("sys.argv", ["migplan", *argv])
    with pytest.raises(SystemExit) as done:
        entry.main()
    return int(done.value.code or 0)


@pytest.mark.slow
def test_the_console_script_prefetches_propose_and_plans_the_same(parallel: None, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from bench.large_inputs import write_instance
    from migplan.cli import entry

    inventory, profs, _ = write_instance(64, str(tmp_path))
    made: list[object] = []
    real = profiles.PendingProfiles.__init__

    def counted(self: profiles.PendingProfiles, *a: Any, **k: Any) -> None:
        made.append(a)
        real(self, *a, **k)

    monkeypatch.setattr(profiles.PendingProfiles, "__init__", counted)
    argv = ["propose", "-i", inventory, "-p", profs, "-o", "json"]
    assert _console(argv, monkeypatch) == 0
    early = json.loads(capsys.readouterr().out)
    assert len(made) == 1 and len(FORKED) >= 1  # one read, begun by the prefetch and taken over by propose
    monkeypatch.setattr(entry, "prefetch_path", lambda _argv: None)
    assert _console(argv, monkeypatch) == 0
    plain = json.loads(capsys.readouterr().out)
    assert len(made) == 2
    for doc in (early, plain):  # when it was made, and how long CBC took
        doc.pop("created_at"), doc["solve"].pop("time_s")
    assert early == plain and early["summary"]["workloads_placed"] > 0
    assert not profiles._PREFETCHED and no_children_left()


def test_a_command_line_that_fails_stops_the_prefetched_workers(parallel: None, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    write_profiles(tmp_path / "p", files=12, per_file=20)
    assert _console(["propose", "-p", str(tmp_path / "p"), "--no-such-option"], monkeypatch) == 2
    assert "No such option" in capsys.readouterr().err
    assert FORKED and not profiles._PREFETCHED and no_children_left()


# --- Forked: one call in another process (the planner's GPU checks, planner/background.py) --------------

def _pid_and(x: int, *, fail: bool = False) -> tuple[int, int]:
    if fail:
        raise Refused(f"no {x}", item=x)
    return os.getpid(), x * 2


def test_a_forked_call_runs_elsewhere_and_gives_its_result(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIGPLAN_JOBS", "2")
    handle = forkmap.Forked().start(_pid_and, 21)
    assert len(FORKED) == 1  # started at once, before its result is asked for
    pid, value = handle.result()
    assert value == 42 and pid == FORKED[0] != os.getpid() and no_children_left()


def test_a_forked_call_that_fails_raises_the_plain_calls_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIGPLAN_JOBS", "2")
    handle = forkmap.Forked().start(lambda: _pid_and(7, fail=True))
    with pytest.raises(Refused, match="no 7") as err:
        handle.result()
    assert err.value.item == 7 and len(FORKED) == 1 and no_children_left()  # redone here: its keyword field kept


def test_a_cancelled_forked_call_leaves_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIGPLAN_JOBS", "2")
    forkmap.Forked().start(time_sleep, 5).cancel()
    assert len(FORKED) == 1 and no_children_left()


def time_sleep(seconds: float) -> None:
    import time

    time.sleep(seconds)


def test_one_job_runs_the_call_here_when_its_result_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MIGPLAN_JOBS", "1")
    handle = forkmap.Forked().start(_pid_and, 3)
    assert not FORKED
    assert handle.result() == (os.getpid(), 6)


def test_the_planner_checks_large_plans_elsewhere_and_plans_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    from planner_fixtures import CAT, fleet, gpu, profiles, wl

    from migplan.adapters.solver import PulpSolver
    from migplan.planner import Policy, plan
    from migplan.planner import planner as planner_mod
    from migplan.planner.background import Here

    monkeypatch.setenv("MIGPLAN_JOBS", "2")
    state = fleet(*[gpu("h1", i, layout=["3g.20gb@0", "3g.20gb@4"] if i % 2 else None) for i in range(4)])
    profs = profiles(*[wl(f"w{i}", 3000 + 2500 * i, 0.05 + 0.1 * (i % 5)) for i in range(9)])
    small = plan(state, profs, CAT, Policy(), PulpSolver(time_limit=30), background=forkmap.Forked())
    assert not FORKED  # 4 GPUs: fewer than BACKGROUND_MIN_GPUS, the checks are cheaper than a fork
    monkeypatch.setattr(planner_mod, "BACKGROUND_MIN_GPUS", 4)
    there = plan(state, profs, CAT, Policy(), PulpSolver(time_limit=30), background=forkmap.Forked())
    assert len(FORKED) == 2 and no_children_left()  # the GPUs' checks, then the workloads' ones
    here = plan(state, profs, CAT, Policy(), PulpSolver(time_limit=30), background=Here())
    assert (there.summary, there.gpus, there.workloads) == (here.summary, here.gpus, here.workloads)
    assert (small.summary, small.gpus, small.workloads) == (here.summary, here.gpus, here.workloads)


def test_a_gpu_check_that_fails_elsewhere_still_refuses_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU checks find wrong actions in a forked process: the plan is refused as when they run here."""
    from planner_fixtures import CAT, fleet, gpu, profiles, wl

    from migplan.adapters.solver import PulpSolver
    from migplan.planner import Policy, plan
    from migplan.planner import planner as planner_mod
    from migplan.planner.background import Here
    from migplan.planner.plan import PlanError

    monkeypatch.setenv("MIGPLAN_JOBS", "2")
    monkeypatch.setattr(planner_mod, "BACKGROUND_MIN_GPUS", 0)  # a small fleet's checks go there too
    real = planner_mod.diff
    monkeypatch.setattr(planner_mod, "diff", lambda *a, **k: real(*a, **k)[1:])  # the first action lost
    state = fleet(gpu("h1", 0), gpu("h1", 1))
    profs = profiles(wl("a", 4000), wl("b", 15000))
    for background in (forkmap.Forked(), Here()):
        with pytest.raises(PlanError, match="actions do not turn the current layout into the target"):
            plan(state, profs, CAT, Policy(), PulpSolver(time_limit=30), background=background)
    assert len(FORKED) == 2 and no_children_left()


def test_a_workload_check_that_fails_elsewhere_still_refuses_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """A workload the problem never had in the plan, found by the workloads' checks in a forked process."""
    from planner_fixtures import CAT, fleet, gpu, profiles, wl

    from migplan.adapters.solver import PulpSolver
    from migplan.planner import Policy, plan
    from migplan.planner import planner as planner_mod
    from migplan.planner.background import Here
    from migplan.planner.plan import PlanError

    monkeypatch.setenv("MIGPLAN_JOBS", "2")
    monkeypatch.setattr(planner_mod, "BACKGROUND_MIN_GPUS", 0)  # a small fleet's checks go there too
    real = planner_mod._workload

    def renamed(problem: Any, it: Any, mapped: Any) -> Any:
        import dataclasses

        w = real(problem, it, mapped)
        return dataclasses.replace(w, name="ghost") if w.name == "b" else w  # a replica the problem never had

    monkeypatch.setattr(planner_mod, "_workload", renamed)
    state = fleet(gpu("h1", 0), gpu("h1", 1))
    profs = profiles(wl("a", 4000), wl("b", 15000))
    for background in (forkmap.Forked(), Here()):
        with pytest.raises(PlanError, match="every workload replica must appear exactly once"):
            plan(state, profs, CAT, Policy(), PulpSolver(time_limit=30), background=background)
    assert len(FORKED) == 2 and no_children_left()
