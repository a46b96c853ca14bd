"""Runners without an sshd: paths, stdin, file transfer, the recording runner, Ctrl-C in the pool,
SshRunner against loopback servers that are not sshd, and ssh_config / key-file errors."""

from __future__ import annotations

import os
import re
import signal
import socket
import stat
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from migplan.adapters.pool import for_each_host
from migplan.adapters.recording import RecordingRunner
from migplan.adapters.runner import (
    DEFAULT_TIMEOUT,
    AuthError,
    BadCommand,
    BadPath,
    LocalRunner,
    OutputTooLarge,
    RemoteFileMissing,
    TransferError,
    UnreachableError,
    check_remote_path,
)
from migplan.adapters.ssh import SshFleet, SshOptions, load_ssh_config, resolve_target
from migplan.errors import InputError
from migplan.inventory import Host

PASS_SUDO = """#!/bin/sh
while [ $# -gt 0 ]; do case "$1" in -n) shift ;; *) break ;; esac; done
exec "$@"
"""


def test_there_is_one_default_timeout() -> None:
    assert DEFAULT_TIMEOUT == 60.0


# --- paths ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/etc/nvidia-mig-manager/config.yaml", "/x", "/a b/ü.txt", "/a/-rf"])
def test_good_remote_paths(path: str) -> None:
    assert check_remote_path(path) == path


@pytest.mark.parametrize("path", ["", "relative/path", "/", "/etc/", "/a//b", "/a/./b", "/a/../b", "/a\nb",
                                  "/a\x00b", "/a\x1bb", "/a\x7fb", "/" + "a" * 256, "/a" * 2049, "-rf"])
def test_bad_remote_paths(path: str) -> None:
    with pytest.raises(BadPath):
        check_remote_path(path)


# --- LocalRunner --------------------------------------------------------------------------------------

def test_local_stdin_and_immediate_eof() -> None:
    runner = LocalRunner()
    data = os.urandom(3 * 1024 * 1024)
    done = runner.run(["sha256sum"], timeout=10, stdin=data)
    import hashlib

    assert done.ok and done.stdout.split()[0] == hashlib.sha256(data).hexdigest()
    start = time.monotonic()
    assert runner.run(["cat"], timeout=10).stdout == ""  # stdin None: end-of-file, not the test's stdin
    assert time.monotonic() - start < 5


def test_local_put_and_get(tmp_path: Path) -> None:
    runner = LocalRunner()
    path = tmp_path / "etc" / "config.yaml"
    runner.put_file(str(path), b"version: v1\n", mode=0o640)
    assert path.read_bytes() == b"version: v1\n" and stat.S_IMODE(path.stat().st_mode) == 0o640
    runner.put_file(str(path), b"version: v2\n", mode=0o600)  # the mode given is the mode it gets
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert runner.get_file(str(path)) == b"version: v2\n"
    with pytest.raises(OutputTooLarge):
        runner.get_file(str(path), max_bytes=4)
    with pytest.raises(RemoteFileMissing):
        runner.get_file(str(tmp_path / "missing"))
    with pytest.raises(TransferError, match="not a regular file"):
        runner.get_file("/dev/zero")
    with pytest.raises(TransferError, match="directory"):
        runner.put_file(str(tmp_path / "etc"), b"x")
    with pytest.raises(BadPath):
        runner.put_file("etc/config.yaml", b"x")
    with pytest.raises(BadCommand):
        runner.put_file(str(path), b"x", mode=0o10000)
    assert [p.name for p in (tmp_path / "etc").iterdir()] == ["config.yaml"]


@pytest.fixture
def sudo(tmp_path: Path) -> str:
    path = tmp_path / "bin" / "sudo"
    path.parent.mkdir()
    path.write_text(PASS_SUDO)
    path.chmod(0o755)
    return str(path)


def test_local_put_and_get_through_become(tmp_path: Path, sudo: str) -> None:
    runner = LocalRunner(become=(sudo, "-n"))
    target = tmp_path / "root-owned" / "config.yaml"
    target.parent.mkdir()
    data = os.urandom(2 * 1024 * 1024)  # tee echoes it all to stdout: dropped, never buffered
    runner.put_file(str(target), data, mode=0o604)
    assert target.read_bytes() == data and stat.S_IMODE(target.stat().st_mode) == 0o604
    assert runner.get_file(str(target)) == data
    with pytest.raises(OutputTooLarge):
        runner.get_file(str(target), max_bytes=10)
    with pytest.raises(RemoteFileMissing):
        runner.get_file(str(tmp_path / "nothing"))
    (target.parent / "dir").mkdir()
    with pytest.raises(TransferError, match="'mv'"):
        runner.put_file(str(target.parent / "dir"), b"x")  # mv -T never moves *into* a directory
    assert sorted(p.name for p in target.parent.iterdir()) == ["config.yaml", "dir"]  # temp removed
    assert list((target.parent / "dir").iterdir()) == []


# --- RecordingRunner ---------------------------------------------------------------------------------

def test_recording_runner_without_a_host_records_everything() -> None:
    rec = RecordingRunner()
    done = rec.run(["nvidia-smi", "mig", "-dci", "-i", "0"], timeout=5)
    assert done.ok and done.stdout == "" and done.argv == ("nvidia-smi", "mig", "-dci", "-i", "0")
    rec.put_file("/etc/nvidia-mig-manager/config.yaml", b"abc", mode=0o600)
    rec.run(["tee", "/tmp/x"], stdin=b"12345")
    assert [str(a) for a in rec.commands] == [
        "nvidia-smi mig -dci -i 0",
        "put /etc/nvidia-mig-manager/config.yaml (3 bytes, mode 0600)",
        "tee /tmp/x (with 5 bytes on stdin)",
    ]
    assert rec.commands[1].data == b"abc" and rec.host == "dry-run"
    with pytest.raises(TransferError):
        rec.get_file("/etc/hosts")
    with pytest.raises(BadCommand):
        rec.run(["echo", "a\nb"])  # a dry run refuses what a real run would


def test_recording_runner_passes_read_only_commands_through(tmp_path: Path) -> None:
    marker = tmp_path / "touched"
    real = tmp_path / "real.txt"
    real.write_text("on the host\n")
    rec = RecordingRunner(LocalRunner(host="gpu01"), read_only=lambda argv: argv[0] in ("cat", "echo"))
    assert rec.host == "gpu01"
    assert rec.run(["echo", "hello"]).stdout == "hello\n"
    assert rec.run(["touch", str(marker)]).ok
    rec.put_file(str(real), b"replaced\n")
    assert rec.get_file(str(real)) == b"on the host\n"
    assert rec.run(["cat", str(real)]).stdout == "on the host\n"
    assert not marker.exists() and real.read_text() == "on the host\n"
    assert [a.kind for a in rec.commands] == ["run", "put"]
    assert rec.commands[0].argv == ("touch", str(marker))


# --- Ctrl-C in a fleet run ---------------------------------------------------------------------------

@dataclass(frozen=True)
class H:
    name: str


class SlowFleet:
    """Work that blocks until 'closed' (what closing SSH connections does to running commands)."""

    def __init__(self) -> None:
        self.closed = threading.Event()
        self.started: list[str] = []
        self.lock = threading.Lock()

    def work(self, h: H) -> str:
        with self.lock:
            self.started.append(h.name)
        if h.name == "fast":
            return "ok"
        self.closed.wait(20)
        return "ended"


def test_interrupt_from_on_done_stops_at_once() -> None:
    slow = SlowFleet()
    hosts = [H("fast")] + [H(f"slow{i}") for i in range(5)]

    def on_done(done: int, total: int, result: object) -> None:
        raise KeyboardInterrupt

    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        for_each_host(hosts, slow.work, parallel=2, on_done=on_done, on_interrupt=slow.closed.set)
    assert time.monotonic() - start < 2
    assert slow.closed.is_set()
    time.sleep(0.2)
    assert len(slow.started) <= 3  # the hosts not started were cancelled




def test_sigint_during_a_fleet_run_stops_at_once(sigint_raises: None) -> None:
    slow = SlowFleet()
    hosts = [H(f"slow{i}") for i in range(6)]
    timer = threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT))
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            for_each_host(hosts, slow.work, parallel=3, on_interrupt=slow.closed.set)
    finally:
        timer.cancel()
        slow.closed.set()
    assert time.monotonic() - start < 3
    time.sleep(0.2)
    assert len(slow.started) == 3


def test_on_interrupt_failing_still_reraises() -> None:
    def boom() -> None:
        raise RuntimeError("close failed")

    def work(h: H) -> None:
        raise KeyboardInterrupt

    # KeyboardInterrupt in a worker is not a host failure: it reaches the caller too
    with pytest.raises(KeyboardInterrupt):
        for_each_host([H("a")], work, on_interrupt=boom)


# --- SshRunner against servers that are not sshd -----------------------------------------------------

@pytest.fixture
def tcp_server() -> Iterator[Callable[[str], int]]:
    socks: list[socket.socket] = []

    def start(mode: str) -> int:
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(8)
        socks.append(srv)

        def serve() -> None:
            while True:
                try:
                    conn, _ = srv.accept()
                except OSError:
                    return
                if mode == "http":
                    conn.recv(100)
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nServer: nginx\r\nContent-Length: 0\r\n\r\n")
                else:  # reset: a TCP RST once paramiko has sent its banner
                    time.sleep(0.1)
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                conn.close()

        threading.Thread(target=serve, daemon=True).start()
        return int(srv.getsockname()[1])

    yield start
    for s in socks:
        s.close()


def options(tmp_path: Path, **kw: object) -> SshOptions:
    base: dict[str, object] = {"known_hosts": str(tmp_path / "known_hosts"), "ssh_config": None,
                               "connect_timeout": 3.0, "allow_agent": False, "look_for_keys": False}
    base.update(kw)
    return SshOptions(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(("mode", "reason"), [("http", "does not speak SSH: it sent 'HTTP/1.1 400 Bad Request'"),
                                               ("reset", "the SSH handshake")])
def test_a_port_that_is_not_sshd_is_a_clean_unreachable_error(mode: str, reason: str, tmp_path: Path,
                                                              tcp_server: Callable[[str], int],
                                                              capfd: pytest.CaptureFixture[str]) -> None:
    port = tcp_server(mode)
    hosts = [Host(name=f"h{i}", address="127.0.0.1", port=port, user="nobody") for i in range(3)]
    with SshFleet(options(tmp_path)) as ssh:
        results = for_each_host(hosts, lambda h: ssh.runner(h).connect(), parallel=3)
    for r in results:
        assert r.error is not None and isinstance(r.error, UnreachableError), r
        assert reason in r.error.detail and f"127.0.0.1:{port}" in r.error.detail
    time.sleep(0.2)  # paramiko's threads log after the error reached us
    out, err = capfd.readouterr()
    assert out == "" and err == "", f"stray output: {out!r} {err!r}"


def test_paramiko_lines_are_kept_at_debug(tmp_path: Path, tcp_server: Callable[[str], int],
                                         caplog: pytest.LogCaptureFixture) -> None:
    port = tcp_server("http")
    with caplog.at_level("DEBUG", logger="migplan.adapters.ssh.paramiko"), SshFleet(options(tmp_path)) as ssh, \
            pytest.raises(UnreachableError):
        ssh.runner(Host(name="h", address="127.0.0.1", port=port, user="nobody")).connect()
    assert "Banner: HTTP/1.1 400 Bad Request" in caplog.text


# --- key files and ssh_config --------------------------------------------------------------------------

def test_a_key_file_that_is_not_a_key_is_an_auth_error(tmp_path: Path) -> None:
    pub = tmp_path / "id.pub"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "id")], check=True)
    cases = {"binary": os.urandom(300), "text": b"hello\n", "empty": b"", "pub": pub.read_bytes(),
             "truncated": (tmp_path / "id").read_bytes()[:200]}
    for name, data in cases.items():
        key = tmp_path / name
        key.write_bytes(data)
        with SshFleet(options(tmp_path)) as ssh, pytest.raises(AuthError) as err:
            ssh.runner(Host(name="h", address="127.0.0.1", port=1, user="x", key_file=str(key))).connect()
        assert str(key) in str(err.value) and err.value.code == "auth-failed"
        assert ("public key" if name == "pub" else "is not an SSH private key") in str(err.value)


def test_ssh_config_errors_name_the_file_and_line(tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text("# fleet\nHost other\n  Port 2200\n\nHost gpu-*\n  User ops\n  Port 22abc\n"
                   "Host jumpy\n  ProxyJump ops@bad host:22\nHost proxied\n  ProxyCommand nc %h %p | cat\n"
                   "Host *\n  ProxyJump none\n")
    config = load_ssh_config(str(cfg))
    with pytest.raises(InputError) as err:
        resolve_target(Host(name="g", address="gpu-01"), config)
    assert str(err.value).startswith(f"{cfg}:7: ") and "22abc" in str(err.value)
    with pytest.raises(InputError) as err:
        resolve_target(Host(name="j", address="jumpy"), config)
    assert str(err.value).startswith(f"{cfg}:9: ") and "ProxyJump" in str(err.value)
    with pytest.raises(InputError) as err:
        resolve_target(Host(name="p", address="proxied"), config)
    assert str(err.value).startswith(f"{cfg}:11: ") and "ProxyCommand" in str(err.value)
    assert "needs a shell" in str(err.value)  # a ProxyCommand paramiko would run differently (no shell) is refused
    assert resolve_target(Host(name="o", address="other"), config).endpoint.port == 2200
    cfg.write_text("Host a\n  Port 22\n  Port\n")
    with pytest.raises(InputError) as err:
        load_ssh_config(str(cfg))
    assert str(err.value).startswith(f"{cfg}:3: ")


def test_ssh_config_proxycommand_is_expanded_with_the_inventory_values(tmp_path: Path) -> None:
    """paramiko expands %h %p %r in ProxyCommand with ssh_config's own values; migplan keeps the raw text (its
    _SshConfigFile turns paramiko's expansion off for that key) and expands it with the host's real port and user,
    which the inventory may override: a paramiko that stopped calling the hook would fail here."""
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host gpu-*\n  HostName %h.example.net\n  User cfg-user\n  Port 2200\n"
                   "  ProxyCommand ssh -W %h:%p -l %r -o Tag=100%% bastion\n")
    config = load_ssh_config(str(cfg))
    target = resolve_target(Host(name="g", address="gpu-7", port=2222, user="ops"), config)
    assert target.proxy_command == ("ssh", "-W", "gpu-7.example.net:2222", "-l", "ops", "-o", "Tag=100%", "bastion")
    assert target.jumps == () and (target.endpoint.port, target.endpoint.user) == (2222, "ops")
    target = resolve_target(Host(name="g", address="gpu-7"), config)
    assert target.proxy_command[2:5] == ("gpu-7.example.net:2200", "-l", "cfg-user")


def test_a_host_error_names_the_host_once() -> None:
    from migplan.adapters.pool import as_host_error
    from migplan.errors import InputError

    err = as_host_error("h1", InputError("h1: key_file /tmp does not exist or is not a file", hint="fix it"))
    assert str(err).startswith("h1: key_file /tmp") and "h1: h1:" not in str(err) and err.code == "input"


# --- batches of reads: several argv in one exec, cut apart by a random boundary -------------------------

def _run_line(line: str, stdin: bytes = b"") -> tuple[int, bytes, bytes]:
    """What an SSH server does with a command line: the login shell runs it (here /bin/sh), stdin the channel's."""
    done = subprocess.run(["/bin/sh", "-c", line], input=stdin, capture_output=True, timeout=30, check=False)
    return done.returncode, done.stdout, done.stderr


def _run_batch(argvs: list[list[str]], token: str) -> tuple[str, bytes, bytes]:
    from migplan.adapters.runner import batch_line, batch_stdin, command_line

    line = batch_line([command_line(a) for a in argvs])
    _, out, err = _run_line(line, batch_stdin(token))
    return line, out, err


def test_a_batch_gives_each_command_its_own_output_and_exit_code() -> None:
    from migplan.adapters.runner import batch_token, split_batch

    argvs = [["printf", "%s", "no newline"], ["sh", "-c", "echo out; echo err >&2; exit 3"],
             ["printf", "%s|", "a b", "$(touch /tmp/never)", "it's"], ["true"], ["printf", "two\\n\\n"]]
    token = batch_token()
    _, out, err = _run_batch(argvs, token)
    parts = split_batch("h", out, err, token, len(argvs))
    assert parts == [(0, b"no newline", b""), (3, b"out\n", b"err\n"), (0, b"a b|$(touch /tmp/never)|it's|", b""),
                     (0, b"", b""), (0, b"two\n\n", b"")]
    assert not os.path.exists("/tmp/never")


def test_the_batch_line_holds_no_token_and_is_the_same_for_every_exec() -> None:
    from migplan.adapters.runner import BATCH_MARK, batch_line, batch_stdin, batch_token, command_line

    lines = [command_line(["nvidia-smi", "-L"]), command_line(["sudo", "-n", "nvidia-smi", "mig", "-lgi"])]
    first, second = batch_token(), batch_token()
    assert batch_line(lines) == batch_line(lines)  # nothing in it varies between execs: no secret in it
    assert first not in batch_line(lines) and second not in batch_line(lines)
    assert not re.search(BATCH_MARK + "[0-9a-f]", batch_line(lines))
    assert batch_stdin(first) == first.encode() + b"\n"


# A hostile command: everything a child can read of its own process and of its parents (argv, environ,
# stdin, the parents' command lines and environments, up to init), searched for a token.
_SNOOP = r"""
import os, re, sys
pat = re.compile(rb"migplan-batch-[0-9a-f]{32}")
seen = [open("/proc/self/cmdline", "rb").read(), open("/proc/self/environ", "rb").read(), sys.stdin.buffer.read()]
pid = os.getppid()
for _ in range(64):
    for name in ("cmdline", "environ"):
        try:
            seen.append(open(f"/proc/{pid}/{name}", "rb").read())
        except OSError:
            pass
    try:
        seen.append(os.read(os.open(f"/proc/{pid}/fd/0", os.O_RDONLY | os.O_NONBLOCK), 4096))
    except OSError:
        pass
    stat = open(f"/proc/{pid}/stat", "rb").read()
    pid = int(stat.rsplit(b")", 1)[1].split()[1])
    if pid <= 1:
        break
found = [m.group().decode() for part in seen for m in pat.finditer(part)]
if found:
    print("\n" + found[0] + " 1 0")
print("searched", len(seen))
"""


def test_a_hostile_command_cannot_find_the_token_from_its_parents(tmp_path: Path) -> None:
    import sys

    from migplan.adapters.runner import HostError, batch_token, split_batch

    snoop = tmp_path / "nvidia-smi"
    snoop.write_text(_SNOOP)
    token = batch_token()
    line, out, err = _run_batch([[sys.executable, str(snoop)], ["echo", "real"]], token)
    assert token not in line
    parts = split_batch("h", out, err, token, 2)  # it found nothing to forge with: the boundaries are the shell's
    assert parts[0][0] == 0 and re.fullmatch(rb"searched [0-9]+\n", parts[0][1]) and parts[1] == (0, b"real\n", b"")
    # the same command, given the token as the old line gave it (on the command line), does find it and
    # forges a boundary: one marker too many, so nothing of the batch is used
    exposed = [sys.executable, str(snoop), token]
    _, out, err = _run_batch([exposed, ["echo", "real"]], token)
    assert out.startswith(b"\n" + token.encode() + b" 1 0\n")
    with pytest.raises(HostError, match="boundaries"):
        split_batch("h", out, err, token, 2)


def test_a_batch_without_its_token_on_stdin_runs_nothing() -> None:
    from migplan.adapters.runner import batch_line, command_line

    for stdin in (b"", b"not-a-token\n"):
        code, out, _ = _run_line(batch_line([command_line(["echo", "ran"])]), stdin)
        assert code == 97 and out == b""


@pytest.mark.parametrize("out,err", [
    (b"", b""),  # the shell did not run the script
    (b"\nTOKEN 0 0\n", b""),  # no stderr markers
    (b"\nTOKEN 1 0\n\nTOKEN 0 0\n", b"\nTOKEN 1\n\nTOKEN 0\n"),  # out of order
    (b"\nTOKEN 0 0\n\nTOKEN 1 0\nafter", b"\nTOKEN 0\n\nTOKEN 1\n"),  # text after the last boundary
    (b"\nTOKEN 0\n\nTOKEN 1\n", b"\nTOKEN 0\n\nTOKEN 1\n"),  # stdout markers without exit codes
    (b"\nTOKEN 0 0\n\nTOKEN 1 0\n\nTOKEN 1 0\n", b"\nTOKEN 0\n\nTOKEN 1\n"),  # a forged extra boundary
])
def test_a_batch_without_exactly_the_boundaries_sent_is_refused(out: bytes, err: bytes) -> None:
    from migplan.adapters.runner import HostError, batch_token, split_batch

    token = batch_token()
    with pytest.raises(HostError):
        split_batch("h", out.replace(b"TOKEN", token.encode()), err.replace(b"TOKEN", token.encode()), token, 2)


def test_batch_line_takes_only_validated_lines_and_a_real_token() -> None:
    from migplan.adapters.runner import batch_line, batch_stdin, batch_token

    with pytest.raises(BadCommand):
        batch_stdin("migplan-batch-short")
    with pytest.raises(BadCommand):
        batch_stdin(batch_token() + "\nextra")
    with pytest.raises(BadCommand):
        batch_line([])
    assert batch_token() != batch_token()


class _FakeHost:
    """Answers argv from a table and counts what reached it; `run_batch` is one call (an independent fake)."""

    def __init__(self, fail_batches: bool = False) -> None:
        self.calls: list[object] = []
        self.fail_batches = fail_batches
        self.n = 0

    @property
    def host(self) -> str:
        return "h"

    def run(self, argv: list[str], *, timeout: float = DEFAULT_TIMEOUT, stdin: bytes | None = None) -> object:
        from migplan.adapters.runner import Completed

        self.calls.append(tuple(argv))
        self.n += 1
        return Completed(tuple(argv), 0, f"{' '.join(argv)} #{self.n}", "")

    def run_batch(self, argvs: list[list[str]], *, timeout: float = DEFAULT_TIMEOUT) -> list[object]:
        from migplan.adapters.runner import Completed, ConnectionLost

        if self.fail_batches:
            raise ConnectionLost("h", "gone")
        self.calls.append(("batch", *map(tuple, argvs)))
        self.n += 1
        return [Completed(tuple(a), 0, f"{' '.join(a)} #{self.n}", "") for a in argvs]

    def put_file(self, *a: object, **kw: object) -> None:
        self.calls.append("put")

    def get_file(self, *a: object, **kw: object) -> bytes:
        return b""


def test_prefetched_reads_are_answered_until_another_command_runs() -> None:
    from migplan.adapters.smi_session import BatchedReads

    fake = _FakeHost()
    reads = BatchedReads(fake)  # type: ignore[arg-type]
    assert reads.prefetch([["nvidia-smi", "-L"], ["nvidia-smi", "mig", "-i", "3", "-lgi"]])
    assert fake.calls == [("batch", ("nvidia-smi", "-L"), ("nvidia-smi", "mig", "-lgi"))]  # one host-wide -lgi
    assert reads.run(["nvidia-smi", "mig", "-i", "0", "-lgi"]).stdout == "nvidia-smi mig -lgi #1"
    assert reads.run(["nvidia-smi", "-L"]).stdout == "nvidia-smi -L #1" and len(fake.calls) == 1
    reads.run(["nvidia-smi", "mig", "-i", "0", "-dgi", "-gi", "1"])  # a change: what was read is forgotten
    assert not reads.has([["nvidia-smi", "-L"]])
    assert reads.run(["nvidia-smi", "-L"]).stdout == "nvidia-smi -L #3"


def test_a_failed_prefetch_leaves_each_read_to_the_host() -> None:
    from migplan.adapters.smi_session import BatchedReads

    fake = _FakeHost(fail_batches=True)
    reads = BatchedReads(fake)  # type: ignore[arg-type]
    assert not reads.prefetch([["nvidia-smi", "-L"], ["nvidia-smi", "-h"]])
    assert reads.run(["nvidia-smi", "-L"]).stdout == "nvidia-smi -L #1" and fake.calls == [("nvidia-smi", "-L")]


def test_a_dry_run_sends_read_only_batches_and_records_the_rest() -> None:
    fake = _FakeHost()
    rec = RecordingRunner(fake, read_only=lambda a: a[0] == "nvidia-smi")  # type: ignore[arg-type]
    done = rec.run_batch([["nvidia-smi", "-L"], ["nvidia-smi", "-h"]])
    assert [d.stdout for d in done] == ["nvidia-smi -L #1", "nvidia-smi -h #1"] and not rec.commands
    rec.run_batch([["nvidia-smi", "-L"], ["mkdir", "-p", "/x"]])
    assert [str(c) for c in rec.commands] == ["mkdir -p /x"] and fake.calls[-1] == ("nvidia-smi", "-L")


# --- LocalRunner.get_file never follows a link, never blocks (issue 21) -----------------------------------------

def _planted(tmp_path: Path, target: str | Path) -> Path:
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    link = state / "assignments.json"
    link.symlink_to(target)
    return link


@pytest.mark.parametrize("route", ["direct", "become"])
@pytest.mark.parametrize("target", ["regular", "/dev/zero", "directory", "dangling"])
def test_get_file_refuses_a_symbolic_link(tmp_path: Path, sudo: str, target: str, route: str) -> None:
    """Directly (O_NOFOLLOW) and through the become prefix (GET_SCRIPT: the route SSH hosts with `become` take
    too), a link is refused and what it points to is never read."""
    secret = tmp_path / "shadow"
    secret.write_bytes(b"root:$6$secret\n")
    (tmp_path / "dir").mkdir()
    aim = {"regular": secret, "/dev/zero": Path("/dev/zero"), "directory": tmp_path / "dir",
           "dangling": tmp_path / "nowhere"}[target]
    link = _planted(tmp_path, aim)
    runner, refusal = ((LocalRunner(), "refusing to follow it") if route == "direct" else
                       (LocalRunner(become=(sudo, "-n")), "refusing to read it"))
    with pytest.raises(TransferError, match=f"is a symbolic link, not a regular file; {refusal}") as err:
        runner.get_file(str(link))
    assert str(link) in str(err.value) and "secret" not in str(err.value)


def test_local_get_file_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "inflight.json"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(TransferError, match="is not a regular file"):
        LocalRunner().get_file(str(fifo))
    assert time.monotonic() - start < 5


def test_local_get_file_refuses_a_file_too_large_before_reading_it(tmp_path: Path) -> None:
    big = tmp_path / "last-applied.json"
    with open(big, "wb") as fh:
        fh.truncate(1 << 40)  # sparse: a read would take minutes and a terabyte of memory
    with pytest.raises(OutputTooLarge, match=f"{big} is larger than 1000 bytes"):
        LocalRunner().get_file(str(big), max_bytes=1000)


def test_local_get_file_still_reads_through_a_linked_directory(tmp_path: Path) -> None:
    """Only the final name must not be a link (O_NOFOLLOW): a state dir reached through /etc -> /usr/etc works."""
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "a.json").write_bytes(b"{}")
    (tmp_path / "via").symlink_to(tmp_path / "real")
    assert LocalRunner().get_file(str(tmp_path / "via" / "a.json")) == b"{}"


# --- ... nor through the become prefix (GET_SCRIPT) ---------------------------------------------------------------

def test_get_file_through_become_refuses_a_fifo_and_a_directory_without_blocking(tmp_path: Path, sudo: str) -> None:
    fifo = tmp_path / "inflight.json"
    os.mkfifo(fifo)
    runner = LocalRunner(become=(sudo, "-n"))
    start = time.monotonic()
    for path in (fifo, tmp_path):
        with pytest.raises(TransferError, match="not a regular file; refusing to read it"):
            runner.get_file(str(path), timeout=30)
    assert time.monotonic() - start < 20  # a `head` on the FIFO would wait for the whole timeout each time
    with pytest.raises(RemoteFileMissing):
        runner.get_file(str(tmp_path / "nothing"))
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "a.json").write_bytes(b"{}")
    (tmp_path / "via").symlink_to(tmp_path / "real")
    assert runner.get_file(str(tmp_path / "via" / "a.json")) == b"{}"  # a linked directory above is fine
