"""put_file / get_file / put_files and stdin over a real sshd, and Ctrl-C during a fleet run over SSH.

SFTP needs the sftp subsystem; these tests use their own extra
sshd on 127.0.0.1 from test_known_hosts_ssh.py (same keys, `Subsystem sftp internal-sftp`, PATH with
the pass-through `sudo`).
"""

from __future__ import annotations

import hashlib
import os
import signal
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Fleet, _user
from sshd import SshServer
from test_known_hosts_ssh import LocalSshd, start_local_sshd

from migplan.adapters.pool import for_each_host
from migplan.adapters.runner import (
    FILES_SCRIPT,
    ConnectionLost,
    FilesDone,
    FileToPut,
    OutputTooLarge,
    Prune,
    RemoteFileMissing,
    TransferError,
    command_line,
)
from migplan.adapters.ssh import SshFleet, SshRunner
from migplan.inventory import Host


@pytest.fixture(scope="module")
def sftp_sshd(ssh_server: SshServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSshd]:
    sshd = start_local_sshd(ssh_server, tmp_path_factory.mktemp("sftp-sshd"))
    if sshd is None:
        pytest.skip("cannot start an sshd on 127.0.0.1")
    yield sshd
    sshd.stop()


@pytest.fixture
def ssh(fleet: Fleet, sftp_sshd: LocalSshd) -> Iterator[SshFleet]:
    fleet.known_hosts.write_text(fleet.server.known_hosts_line("127.0.0.1").replace(
        f":{fleet.server.port} ", f":{sftp_sshd.port} "))
    with SshFleet(fleet.options()) as s:
        yield s


def runner(ssh: SshFleet, fleet: Fleet, sftp_sshd: LocalSshd, **kw: object) -> SshRunner:
    base: dict[str, object] = {"name": "local", "address": "127.0.0.1", "port": sftp_sshd.port, "user": _user(),
                               "key_file": str(fleet.server.client_key)}
    base.update(kw)
    return ssh.runner(Host(**base))  # type: ignore[arg-type]


def test_sftp_put_is_atomic_with_the_mode_and_get_is_bounded(ssh: SshFleet, fleet: Fleet, sftp_sshd: LocalSshd,
                                                             tmp_path: Path) -> None:
    r = runner(ssh, fleet, sftp_sshd)
    target = tmp_path / "etc" / "config.yaml"
    target.parent.mkdir()
    target.write_text("old\n")
    target.chmod(0o644)
    data = os.urandom(3 * 1024 * 1024 + 17)
    r.put_file(str(target), data, mode=0o600)
    assert target.read_bytes() == data and stat.S_IMODE(target.stat().st_mode) == 0o600
    assert os.listdir(target.parent) == ["config.yaml"]  # no temp file left
    assert r.get_file(str(target)) == data
    with pytest.raises(OutputTooLarge):
        r.get_file(str(target), max_bytes=1000)
    with pytest.raises(RemoteFileMissing):
        r.get_file(str(tmp_path / "missing"))
    with pytest.raises(TransferError, match="not a regular file"):
        r.get_file(str(tmp_path))
    with pytest.raises(TransferError):
        r.put_file(str(tmp_path / "no-such-dir" / "x"), b"x")
    (target.parent / "adir").mkdir()
    with pytest.raises(TransferError):
        r.put_file(str(target.parent / "adir"), b"x")  # rename onto a directory fails
    assert sorted(os.listdir(target.parent)) == ["adir", "config.yaml"]
    assert r.run(["echo", "same connection"], timeout=10).stdout == "same connection\n"
    assert len(r.connection.clients) == 1


def test_put_and_get_through_become(ssh: SshFleet, fleet: Fleet, sftp_sshd: LocalSshd, tmp_path: Path) -> None:
    r = runner(ssh, fleet, sftp_sshd, name="become", become=("sudo", "-n"))
    target = tmp_path / "etc" / "config.yaml"
    target.parent.mkdir()
    data = os.urandom(2 * 1024 * 1024)  # tee copies it to stdout: read and dropped while stdin is sent
    r.put_file(str(target), data, mode=0o640)
    assert target.read_bytes() == data and stat.S_IMODE(target.stat().st_mode) == 0o640
    assert os.listdir(target.parent) == ["config.yaml"]
    assert r.get_file(str(target)) == data
    with pytest.raises(RemoteFileMissing):
        r.get_file(str(tmp_path / "missing"))


@pytest.mark.parametrize("become", [(), ("sudo", "-n")], ids=["sftp", "become"])
def test_put_files_is_one_round_trip_prunes_and_keeps_unchanged_files(ssh: SshFleet, fleet: Fleet,
                                                                      sftp_sshd: LocalSshd, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch,
                                                                      become: tuple[str, ...]) -> None:
    """All files of a set in one round trip: no exec at all over SFTP (one session on the SFTP channel), one exec of
    the constant script through the become prefix (the pass-through `sudo` of this sshd's PATH)."""
    r = runner(ssh, fleet, sftp_sshd, name="files", become=become)
    r.connect()
    execs: list[str] = []
    real = r.connection.exec
    monkeypatch.setattr(r.connection, "exec", lambda *a: execs.append(a[2]) or real(*a))
    etc = tmp_path / "etc"
    (etc / "env").mkdir(parents=True)
    (etc / "env" / "stale.env").write_text("MIGPLAN_WORKLOAD=stale\n")
    (etc / "env" / "custom.env").write_text("FOO=1\n")
    prune = Prune("env", ".env", "MIGPLAN_WORKLOAD=")
    files = [FileToPut("env/a.env", b"MIGPLAN_WORKLOAD=a\n"), FileToPut("assignments.json", os.urandom(300_000)),
             FileToPut("last-applied.json", b"{}\n", 0o600)]
    assert r.put_files(str(etc), files, prune=prune) == FilesDone(
        written=("env/a.env", "assignments.json", "last-applied.json"), removed=("env/stale.env",))
    assert execs == ([command_line([*become, "sh", "-c", FILES_SCRIPT])] if become else [])
    assert (etc / "assignments.json").read_bytes() == files[1].data
    assert stat.S_IMODE((etc / "last-applied.json").stat().st_mode) == 0o600
    assert sorted(os.listdir(etc / "env")) == ["a.env", "custom.env"]
    stamps = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in etc.rglob("*") if p.is_file()}
    assert r.put_files(str(etc), files, prune=prune) == FilesDone(
        unchanged=("env/a.env", "assignments.json", "last-applied.json"))
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in etc.rglob("*") if p.is_file()} == stamps
    (etc / "env").rename(tmp_path / "real-env")
    (etc / "env").symlink_to(tmp_path / "real-env")
    with pytest.raises(TransferError, match="symbolic link"):
        r.put_files(str(etc), files, prune=prune)
    assert sorted(os.listdir(tmp_path / "real-env")) == ["a.env", "custom.env"]
    assert len(execs) == (3 if become else 0) and len(r.connection.clients) == 1


def test_stdin_is_streamed_while_output_is_read(ssh: SshFleet, fleet: Fleet, sftp_sshd: LocalSshd) -> None:
    r = runner(ssh, fleet, sftp_sshd)
    data = os.urandom(4 * 1024 * 1024)
    done = r.run(["sha256sum"], timeout=30, stdin=data)
    assert done.ok and done.stdout.split()[0] == hashlib.sha256(data).hexdigest()
    echoed = r.run(["cat"], timeout=30, stdin=b"x" * 3_000_000)  # output as big as the input: no deadlock
    assert echoed.stdout == "x" * 3_000_000
    start = time.monotonic()
    assert r.run(["cat"], timeout=10).stdout == ""  # no stdin: end-of-file at once
    assert time.monotonic() - start < 5




def test_ctrl_c_during_a_fleet_run_over_ssh_stops_at_once(fleet: Fleet, sigint_raises: None) -> None:
    hosts = [Host(name=f"h{i}", address=fleet.host(i).address, port=fleet.server.port, user=_user(),
                  key_file=str(fleet.server.client_key)) for i in range(4)]
    errors: list[BaseException] = []
    with SshFleet(fleet.options()) as ssh:
        for h in hosts:
            ssh.runner(h).connect()

        def work(h: Host) -> int:
            try:
                return ssh.runner(h).run(["sleep", "30"], timeout=60).exit_code
            except BaseException as err:
                errors.append(err)
                raise

        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
        start = time.monotonic()
        timer.start()
        try:
            with pytest.raises(KeyboardInterrupt):
                for_each_host(hosts, work, parallel=2, on_interrupt=ssh.close)
        finally:
            timer.cancel()
        assert time.monotonic() - start < 3
    deadline = time.monotonic() + 5
    while len(errors) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(errors) == 2 and all(isinstance(e, ConnectionLost) for e in errors)  # ended, not at 30 s


@pytest.mark.parametrize("become", [(), ("sudo", "-n")], ids=["sftp", "become"])
def test_get_file_over_ssh_refuses_a_link_and_a_fifo(ssh: SshFleet, fleet: Fleet, sftp_sshd: LocalSshd,
                                                     tmp_path: Path, become: tuple[str, ...]) -> None:
    """A link planted in a host's state directory is refused, never followed, over SFTP (lstat) and through
    become (the fixed GET_SCRIPT); a FIFO is refused without blocking."""
    r = runner(ssh, fleet, sftp_sshd, name="getlinks-" + ("become" if become else "sftp"), become=become)
    secret = tmp_path / "shadow"
    secret.write_bytes(b"root:$6$secret\n")
    state = tmp_path / "state"
    state.mkdir()
    (state / "assignments.json").symlink_to(secret)
    with pytest.raises(TransferError, match="symbolic link, not a regular file") as err:
        r.get_file(str(state / "assignments.json"))
    assert "secret" not in str(err.value)
    os.mkfifo(state / "inflight.json")
    with pytest.raises(TransferError, match="not a regular file"):
        r.get_file(str(state / "inflight.json"), timeout=20)
    (state / "last-applied.json").write_bytes(b"{}")
    assert r.get_file(str(state / "last-applied.json")) == b"{}"
