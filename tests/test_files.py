"""migplan.files: atomic replace that never replaces what it should not, and durable appends."""

from __future__ import annotations

import os
import socket
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from migplan.errors import InputError
from migplan.files import append_durable, check_output_path, write_atomic

ROOT = os.geteuid() == 0


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


# --- targets that are not regular files ---------------------------------------------------------------

def test_dev_null_is_refused_and_stays_a_device() -> None:
    with pytest.raises(InputError) as err:
        write_atomic(os.devnull, "x\n")
    assert "/dev/null" in str(err.value) and "character device" in str(err.value) and err.value.hint
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)
    with pytest.raises(InputError, match="character device"):
        append_durable(os.devnull, "x\n")


def test_fifo_socket_and_directory_are_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        for path, kind in ((fifo, "FIFO"), (sock_path, "socket"), (tmp_path, "directory")):
            with pytest.raises(InputError, match=kind) as err:
                write_atomic(path, "x\n")
            assert str(path) in str(err.value)
            with pytest.raises(InputError, match=kind):
                append_durable(path, "x\n")  # never blocks on the FIFO either
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert leftovers(tmp_path) == []


def test_a_link_to_a_device_is_refused_naming_both(tmp_path: Path) -> None:
    link = tmp_path / "out.json"
    link.symlink_to(os.devnull)
    with pytest.raises(InputError) as err:
        write_atomic(link, "x\n")
    assert str(link) in str(err.value) and "/dev/null" in str(err.value)
    assert link.is_symlink()


# --- symlinks --------------------------------------------------------------------------------------

def test_symlink_target_is_replaced_and_the_link_kept(tmp_path: Path) -> None:
    real_dir = tmp_path / "real"
    real_dir.mkdir()
    real = real_dir / "known_hosts"
    real.write_text("old\n")
    real.chmod(0o640)
    link = tmp_path / "link"
    link.symlink_to("real/known_hosts")  # relative
    chain = tmp_path / "chain"
    chain.symlink_to(link)
    write_atomic(chain, "new\n")
    assert chain.is_symlink() and link.is_symlink() and os.readlink(link) == "real/known_hosts"
    assert real.read_text() == "new\n"
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert leftovers(real_dir) == [] and leftovers(tmp_path) == []


def test_dangling_link_creates_its_target_and_loops_are_refused(tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "target")
    write_atomic(link, "x")
    assert link.is_symlink() and (tmp_path / "target").read_text() == "x"
    a, b = tmp_path / "a", tmp_path / "b"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        write_atomic(a, "x")
    into_nowhere = tmp_path / "nowhere"
    into_nowhere.symlink_to(tmp_path / "missing-dir" / "file")
    with pytest.raises(InputError, match="directory does not exist"):
        write_atomic(into_nowhere, "x")


@pytest.mark.skipif(not ROOT, reason="planting a link owned by another user needs root")
def test_a_link_planted_by_someone_else_in_a_sticky_directory_is_not_followed(tmp_path: Path) -> None:
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    link = shared / "out.json"
    link.symlink_to(victim)
    os.lchown(link, 4242, 4242)
    with pytest.raises(InputError, match="refusing to follow"):
        write_atomic(link, "x")
    assert victim.read_text() == "precious\n"
    os.lchown(link, 0, 0)  # our own link: followed
    write_atomic(link, "x")
    assert victim.read_text() == "x"


# --- mode and owner -----------------------------------------------------------------------------------

def test_mode_is_kept_new_files_get_mode_and_keep_mode_false_applies_it(tmp_path: Path) -> None:
    path = tmp_path / "f"
    write_atomic(path, "a", mode=0o600)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o640)
    write_atomic(path, b"b\x00", mode=0o600)  # bytes too; the existing mode wins
    assert path.read_bytes() == b"b\x00" and stat.S_IMODE(path.stat().st_mode) == 0o640
    write_atomic(path, "c", mode=0o604, keep_mode=False)
    assert stat.S_IMODE(path.stat().st_mode) == 0o604
    fresh = tmp_path / "sub" / "g"  # parents created
    write_atomic(fresh, "x")
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o644 & ~umask


def test_private_files_are_never_group_or_world_writable(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    path.write_text("x\n")
    path.chmod(0o666)
    write_atomic(path, "y\n", private=True)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    new = tmp_path / "new_known_hosts"
    write_atomic(new, "y\n", mode=0o666, private=True)
    assert stat.S_IMODE(new.stat().st_mode) == 0o644
    journal = tmp_path / "journal"
    journal.write_text("")
    journal.chmod(0o662)
    append_durable(journal, "line")
    assert stat.S_IMODE(journal.stat().st_mode) == 0o640


@pytest.mark.skipif(not ROOT, reason="changing a file's owner needs root")
def test_owner_and_group_are_kept_when_root(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("old")
    os.chown(path, 4242, 4343)
    path.chmod(0o640)
    write_atomic(path, "new")
    st = path.stat()
    assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (4242, 4343, 0o640)
    assert path.read_text() == "new"


def test_an_owner_that_cannot_be_kept_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "f"
    path.write_text("old")
    real_stat = os.stat

    def other_owner(p: str, *a: Any, **kw: Any) -> os.stat_result:
        st = real_stat(p, *a, **kw)
        if os.fspath(p) == str(path):
            fields = list(st)
            fields[stat.ST_UID] = st.st_uid + 4242
            return os.stat_result(fields)
        return st

    def refuse(*a: object) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "stat", other_owner)
    monkeypatch.setattr(os, "fchown", refuse)
    with pytest.raises(InputError, match="cannot keep the owner") as err:
        write_atomic(path, "new")
    assert str(path) in str(err.value)
    monkeypatch.undo()
    assert path.read_text() == "old" and leftovers(tmp_path) == []


# --- writing onto an input ---------------------------------------------------------------------------

def test_output_onto_an_input_is_refused_also_through_links(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("hosts: {}\n")
    alias = tmp_path / "alias.yaml"
    alias.symlink_to(inventory)
    hard = tmp_path / "hard.yaml"
    os.link(inventory, hard)
    for out in (inventory, alias, hard, tmp_path / "." / "inventory.yaml"):
        with pytest.raises(InputError) as err:
            write_atomic(out, "{}\n", forbid=[inventory])
        assert str(out) in str(err.value) and str(inventory) in str(err.value)
        with pytest.raises(InputError):
            check_output_path(inventory, [out])
    assert inventory.read_text() == "hosts: {}\n"
    check_output_path(tmp_path / "new.json", [inventory])  # a new file is never an input
    check_output_path(tmp_path / "other.json", [tmp_path / "missing.yaml"])
    write_atomic(tmp_path / "plan.json", "{}\n", forbid=[inventory])


# --- durable appends ---------------------------------------------------------------------------------

def test_append_creates_0600_adds_the_newline_and_keeps_links(tmp_path: Path) -> None:
    journal = tmp_path / "state" / "journal.log"
    append_durable(journal, "first")
    append_durable(journal, b"second\n")
    assert journal.read_text() == "first\nsecond\n"
    assert stat.S_IMODE(journal.stat().st_mode) == 0o600
    link = tmp_path / "journal"
    link.symlink_to(journal)
    append_durable(link, "third\n")
    assert link.is_symlink() and journal.read_text() == "first\nsecond\nthird\n"


def test_concurrent_appends_keep_every_line_whole(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    threads, per_thread = 8, 150
    barrier = threading.Barrier(threads)

    def writer(n: int) -> None:
        barrier.wait()
        for i in range(per_thread):
            body = f"{n}:{i}:" + chr(ord("a") + n) * (1 + (i * 97) % 9000)  # up to ~9 kB per line
            append_durable(journal, body)

    workers = [threading.Thread(target=writer, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    lines = journal.read_text().split("\n")
    assert lines[-1] == ""
    lines = lines[:-1]
    assert len(lines) == threads * per_thread
    seen = set()
    for ln in lines:
        n, i, body = ln.split(":")
        assert body == chr(ord("a") + int(n)) * (1 + (int(i) * 97) % 9000)
        seen.add((int(n), int(i)))
    assert len(seen) == threads * per_thread
