"""The host apply lock against another user on the host (issue 21): a link, a FIFO, a directory or someone else's
file at the lock's name, or a lock directory others can rename entries in, is refused before `flock` opens
anything (migplan.adapters.host_lock, LOCK_SCRIPT); nothing is created or opened through a link, and the GPUs
are left as they were. Run with the real sh, coreutils and flock, through LocalRunner and the simulator."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import sim_runner
from planner_fixtures import EXACT, profiles, wl
from sim.fleet import host_state, read_state, write_state

from migplan.adapters.host_lock import LOCK_SCRIPT, HostLocked, acquire, lock_argv
from migplan.adapters.runner import BadPath, HostError, LocalRunner
from migplan.adapters.solver import PulpSolver
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout
from migplan.fleet.apply import ApplyOptions, apply_host
from migplan.fleet.discover import discover_host
from migplan.fleet.snapshot import Snapshot
from migplan.inventory import Host
from migplan.planner import plan

NOBODY = 65534
CAT = builtin_catalog()


def _lock_dir(tmp_path: Path, mode: int = 0o1777) -> Path:
    """A /run/lock-like directory: shared and sticky."""
    d = tmp_path / "lock"
    d.mkdir()
    d.chmod(mode)
    return d


def _refused(path: Path, match: str) -> None:
    with pytest.raises(HostError, match="refusing the apply lock") as err:
        acquire(LocalRunner(), str(path), timeout=20)
    assert not isinstance(err.value, HostLocked)
    assert match in str(err.value) and str(path) in str(err.value), str(err.value)


def test_a_new_lock_is_created_ours_and_private_and_works(tmp_path: Path) -> None:
    lock = _lock_dir(tmp_path) / "migplan-apply.lock"
    held = acquire(LocalRunner(), str(lock), timeout=20)
    try:
        st = os.lstat(lock)
        assert stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o600
        assert sorted(os.listdir(lock.parent)) == ["migplan-apply.lock"]  # the temporary name is gone
        with pytest.raises(HostLocked):
            acquire(LocalRunner(), str(lock), timeout=20)
    finally:
        held.release()
    acquire(LocalRunner(), str(lock), timeout=20).release()  # an existing lock file of ours: taken again


@pytest.mark.parametrize("aim", ["victim-file", "dangling", "dev-null"])
def test_a_link_at_the_lock_name_is_refused_and_nothing_is_created_or_opened(tmp_path: Path, aim: str) -> None:
    victim = tmp_path / "shadow"
    victim.write_text("root:secret\n")
    target = {"victim-file": victim, "dangling": tmp_path / "etc-nologin", "dev-null": Path("/dev/null")}[aim]
    lock = _lock_dir(tmp_path) / "migplan-apply.lock"
    lock.symlink_to(target)
    os.lchown(lock, NOBODY, NOBODY)  # planted by another user
    before = victim.stat().st_mtime_ns
    _refused(lock, "is a symbolic link; refusing to follow it")
    assert victim.read_text() == "root:secret\n" and victim.stat().st_mtime_ns == before
    assert not (tmp_path / "etc-nologin").exists() and os.path.islink(lock)


def test_a_fifo_at_the_lock_name_is_refused_without_blocking(tmp_path: Path) -> None:
    lock = _lock_dir(tmp_path) / "migplan-apply.lock"
    os.mkfifo(lock)
    _refused(lock, "is not a regular file")


def test_a_directory_at_the_lock_name_is_refused(tmp_path: Path) -> None:
    lock = _lock_dir(tmp_path) / "migplan-apply.lock"
    lock.mkdir()
    _refused(lock, "is not a regular file")


def test_someone_elses_file_at_the_lock_name_is_refused(tmp_path: Path) -> None:
    lock = _lock_dir(tmp_path) / "migplan-apply.lock"
    lock.write_text("")
    os.chown(lock, NOBODY, NOBODY)  # they could hold it to block applies, or remove it to split the lock
    _refused(lock, f"is owned by uid {NOBODY}, not by uid {os.geteuid()}")


def test_a_lock_directory_others_can_rename_in_is_refused(tmp_path: Path) -> None:
    lock = _lock_dir(tmp_path, 0o777) / "migplan-apply.lock"  # world-writable, not sticky
    _refused(lock, "is writable by group or others (mode 777) and not sticky")
    assert os.listdir(lock.parent) == []


def test_a_lock_directory_owned_by_another_user_is_refused(tmp_path: Path) -> None:
    d = _lock_dir(tmp_path, 0o755)
    os.chown(d, NOBODY, NOBODY)
    _refused(d / "migplan-apply.lock", f"is owned by uid {NOBODY}, not by root or uid {os.geteuid()}")
    assert os.listdir(d) == []


def test_the_path_is_an_argument_never_part_of_the_script(tmp_path: Path) -> None:
    d = _lock_dir(tmp_path)
    odd = d / "a lock; touch PWNED"  # blanks and ; are one argv token, quoted over SSH
    assert lock_argv(str(odd)) == ["sh", "-c", LOCK_SCRIPT, "sh", str(odd)]
    acquire(LocalRunner(), str(odd), timeout=20).release()
    assert sorted(os.listdir(d)) == ["a lock; touch PWNED"] and not (tmp_path / "PWNED").exists()
    with pytest.raises(BadPath):
        lock_argv("relative/lock")


def test_the_script_is_posix_sh(tmp_path: Path) -> None:
    for shell in ("dash", "bash", "busybox"):
        exe = next((Path(p) / shell for p in os.environ["PATH"].split(":") if (Path(p) / shell).exists()), None)
        if exe is None:
            continue
        argv = [str(exe), *(["sh"] if shell == "busybox" else []), "-n", "-c", LOCK_SCRIPT]
        assert subprocess.run(argv, capture_output=True, timeout=10).returncode == 0, shell


@pytest.mark.slow
def test_apply_on_a_host_with_a_planted_lock_link_changes_no_gpu(tmp_path: Path) -> None:
    st = host_state("A100-SXM4-40GB", 2, hostname="h1", layouts=[Layout.parse(["3g.20gb@0"]), None])
    st["gpus"][1].update(mig_current=False, mig_pending=False, gpu_instances=[])
    state = write_state(tmp_path / "h.json", st)
    victim = tmp_path / "shadow"
    victim.write_text("root:secret\n")
    lock = _lock_dir(tmp_path) / "migplan-apply.lock"
    lock.symlink_to(victim)
    host = Host(name="h1", address="h1", lock_file=str(lock), state_dir=str(tmp_path / "etc"))
    runner = sim_runner.local(state)  # the real sh and flock meet the planted link
    snap = Snapshot((discover_host(runner, host, CAT),))
    p = plan(snap.fleet_state(catalog=CAT), profiles(wl("a", 4000), wl("b", 9000)), CAT, EXACT,
             PulpSolver(time_limit=30))
    before = read_state(state)
    with pytest.raises(HostError, match="is a symbolic link; refusing to follow it"):
        apply_host(runner, host, [g for g in p.gpus if g.host == "h1"], CAT, ApplyOptions())
    assert read_state(state)["gpus"] == before["gpus"] and victim.read_text() == "root:secret\n"
    assert not (tmp_path / "etc").exists()


def test_a_refused_lock_leaves_no_child_registered(tmp_path: Path) -> None:
    from migplan.adapters import children

    lock = _lock_dir(tmp_path) / "migplan-apply.lock"
    lock.symlink_to(tmp_path / "x")
    registered = len(children._LIVE)  # what the stop-signal handler would kill
    _refused(lock, "is a symbolic link")
    assert len(children._LIVE) == registered  # the holder that exited is not kept
