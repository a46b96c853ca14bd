"""adapters.forkmap: the same results and the same first error as a plain loop, with real forked workers;
and profile reading through it (documents.load_profiles on large sets of files, against profiles.load_profiles,
which reads them one by one)."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from migplan import documents, profiles
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
    # forkmap runs sequentially while other threads run (forking them could deadlock a child). Threads left
    # alive by earlier test modules (test_runner.py's TCP servers stay blocked in accept() after their socket
    # is closed) would make every test here sequential and fail: count only the threads this test starts.
    leftover = {t for t in threading.enumerate() if t is not threading.main_thread()}
    monkeypatch.setattr(forkmap, "_threads", lambda: sum(1 for t in threading.enumerate() if t not in leftover))

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
    monkeypatch.setattr(documents, "PARALLEL_BYTES", 0)
    monkeypatch.setenv("MIGPLAN_JOBS", "2")


def read_sequentially(path: Path) -> profiles.ProfileSet:
    return profiles.load_profiles(path)


def test_profiles_read_in_parallel_are_the_same(parallel: None, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    write_profiles(tmp_path / "p", files=12, per_file=20)
    seen: list[int] = []
    real = documents.read_profile_file
    monkeypatch.setattr(documents, "read_profile_file", lambda f: (seen.append(os.getpid()), real(f))[1])
    both = documents.load_profiles(tmp_path / "p")
    assert len(both.workloads) == 240 and [w.name for w in both] == [f"w{i:05d}" for i in range(240)]
    assert set(seen) == {os.getpid()}  # only the parent's own share is recorded here: the rest ran elsewhere
    assert len(seen) < 12
    assert both == read_sequentially(tmp_path / "p")


def both_errors(path: Path) -> tuple[InputError, InputError]:
    """The error reading `path` in two processes, and reading it in one."""
    with pytest.raises(InputError) as par:
        documents.load_profiles(path)
    with pytest.raises(InputError) as seq:
        read_sequentially(path)
    assert no_children_left()
    return par.value, seq.value


def test_a_duplicate_across_shares_is_the_sequential_error(parallel: None, tmp_path: Path) -> None:
    write_profiles(tmp_path / "p", files=10, per_file=5)
    last = tmp_path / "p" / "p009.yaml"
    last.write_text(last.read_text().replace("w00045", "w00002"))
    par, seq = both_errors(tmp_path / "p")
    assert str(par) == str(seq) and "defined twice" in str(par)
    assert (par.source, par.line) == (seq.source, seq.line) == (str(last), 3)


def test_a_bad_file_in_a_worker_is_the_sequential_error(parallel: None, tmp_path: Path) -> None:
    write_profiles(tmp_path / "p", files=10, per_file=5)
    bad = tmp_path / "p" / "p008.yaml"
    bad.write_text(bad.read_text().replace("priority: 41", "priority: [41"))
    par, seq = both_errors(tmp_path / "p")
    assert str(par) == str(seq) and par.source == str(bad)


def test_an_earlier_duplicate_wins_over_a_later_bad_file(parallel: None, tmp_path: Path) -> None:
    """Read one by one, a duplicate in file 6 stops the read before file 8 is parsed: in two processes file 8
    is parsed by then, yet its error must not come first."""
    write_profiles(tmp_path / "p", files=10, per_file=5)
    dup = tmp_path / "p" / "p006.yaml"
    dup.write_text(dup.read_text().replace("w00030", "w00002"))
    bad = tmp_path / "p" / "p008.yaml"
    bad.write_text(bad.read_text().replace("priority: 41", "priority: [41"))
    par, seq = both_errors(tmp_path / "p")
    assert str(par) == str(seq) and "defined twice" in str(par) and par.source == str(dup)


def test_start_profiles_reads_while_the_caller_works_and_gives_the_same(parallel: None, tmp_path: Path) -> None:
    write_profiles(tmp_path / "p", files=12, per_file=20)
    with documents.start_profiles(str(tmp_path / "p")) as pending:
        assert len(FORKED) == 2  # both shares are the workers': the caller reads the inventory meanwhile
        got = pending.result()
    assert got == read_sequentially(tmp_path / "p") and no_children_left()


def test_a_cancelled_read_leaves_no_process(parallel: None, tmp_path: Path) -> None:
    write_profiles(tmp_path / "p", files=12, per_file=20)
    documents.start_profiles(str(tmp_path / "p")).cancel()
    assert FORKED and no_children_left()
