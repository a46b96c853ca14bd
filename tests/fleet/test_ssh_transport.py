"""SshRunner against a real OpenSSH server: host keys, auth, sudo, timeouts, ssh_config, ProxyJump."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import Fleet, _user

from migplan.adapters.pool import for_each_host
from migplan.adapters.runner import (
    AuthError,
    BadCommand,
    BecomeError,
    CommandTimeout,
    HostKeyChangedError,
    HostKeyUnknownError,
    LocalRunner,
    UnreachableError,
    command_line,
)
from migplan.adapters.ssh import SshFleet, resolve_target
from migplan.errors import InputError
from migplan.inventory import Host


def host_for(fleet: Fleet, i: int, **kw: object) -> Host:
    h = fleet.host(i)
    base: dict[str, object] = {"name": f"h{i}", "address": h.address, "port": fleet.server.port, "user": _user(),
                               "key_file": str(fleet.server.client_key)}
    base.update(kw)
    return Host(**base)  # type: ignore[arg-type]


def test_runs_argv_quoted_and_reuses_one_connection(fleet: Fleet) -> None:
    with SshFleet(fleet.options()) as ssh:
        runner = ssh.runner(host_for(fleet, 0))
        done = runner.run(["printf", "%s|", "a b", "$(touch /tmp/never)", "it's"], timeout=10)
        assert done.ok and done.stdout == "a b|$(touch /tmp/never)|it's|"
        transport = runner.connection.clients[-1].get_transport()
        for _ in range(3):
            assert runner.run(["true"], timeout=10).ok
        assert runner.connection.clients[-1].get_transport() is transport
        failed = runner.run(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=10)
        assert (failed.exit_code, failed.stdout, failed.stderr) == (3, "out\n", "err\n")
    assert not os.path.exists("/tmp/never")


def test_unknown_host_key_is_refused_with_fingerprint(fleet: Fleet) -> None:
    fleet.known_hosts.write_text("")
    with SshFleet(fleet.options()) as ssh, pytest.raises(HostKeyUnknownError) as err:
        ssh.runner(host_for(fleet, 0)).run(["true"], timeout=10)
    fp = subprocess.run(["ssh-keygen", "-lf", str(fleet.server.root / "host_ed25519.pub")],
                        capture_output=True, text=True, check=True).stdout.split()[1]
    assert fp.startswith("SHA256:") and fp in str(err.value)
    assert "--accept-new-host-keys" in str(err.value)
    assert fleet.known_hosts.read_text() == ""


def test_accept_new_records_the_key_then_verifies_it(fleet: Fleet) -> None:
    fleet.known_hosts.write_text("# keep this comment\n")
    fleet.known_hosts.chmod(0o644)
    with SshFleet(fleet.options(accept_new_host_keys=True)) as ssh:
        assert ssh.runner(host_for(fleet, 0)).run(["true"], timeout=10).ok
    text = fleet.known_hosts.read_text()
    assert text.startswith("# keep this comment\n")
    assert text.count("\n") == 2 and f"[{fleet.host(0).address}]:{fleet.server.port} ssh-ed25519 " in text
    assert (fleet.known_hosts.stat().st_mode & 0o777) == 0o644
    # OpenSSH itself accepts the recorded line
    r = subprocess.run(["ssh-keygen", "-F", f"[{fleet.host(0).address}]:{fleet.server.port}", "-f",
                        str(fleet.known_hosts)], capture_output=True, text=True)
    assert r.returncode == 0
    with SshFleet(fleet.options()) as ssh:  # strict again: now known
        assert ssh.runner(host_for(fleet, 0)).run(["true"], timeout=10).ok


def test_changed_host_key_always_fails_showing_both_fingerprints(fleet: Fleet, tmp_path: Path) -> None:
    other = tmp_path / "other"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    kind, blob = other.with_suffix(".pub").read_text().split()[:2]
    name = f"[{fleet.host(0).address}]:{fleet.server.port}"
    fleet.known_hosts.write_text(f"{name} {kind} {blob}\n")
    before = fleet.known_hosts.read_text()
    with SshFleet(fleet.options(accept_new_host_keys=True)) as ssh, pytest.raises(HostKeyChangedError) as err:
        ssh.runner(host_for(fleet, 0)).run(["true"], timeout=10)

    def fp(path: Path) -> str:
        return subprocess.run(["ssh-keygen", "-lf", str(path)], capture_output=True, text=True,
                              check=True).stdout.split()[1]

    msg = str(err.value)
    assert "HOST KEY CHANGED" in msg
    assert fp(other.with_suffix(".pub")) in msg and fp(fleet.server.root / "host_ed25519.pub") in msg
    assert fleet.known_hosts.read_text() == before


def test_hashed_known_hosts_entries_match(fleet: Fleet) -> None:
    subprocess.run(["ssh-keygen", "-H", "-f", str(fleet.known_hosts)], check=True, capture_output=True)
    assert "|1|" in fleet.known_hosts.read_text()
    with SshFleet(fleet.options()) as ssh:
        assert ssh.runner(host_for(fleet, 1)).run(["true"], timeout=10).ok


def test_down_host_and_silent_host_are_unreachable(fleet: Fleet) -> None:
    with SshFleet(fleet.options()) as ssh, pytest.raises(UnreachableError) as err:
        ssh.runner(host_for(fleet, 0, address="127.0.0.254")).run(["true"], timeout=10)
    assert "refused" in str(err.value).lower() or "cannot connect" in str(err.value)
    with socket.socket() as silent:  # accepts TCP, never says a word: banner timeout
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        port = silent.getsockname()[1]
        start = time.monotonic()
        with SshFleet(fleet.options(connect_timeout=1.0)) as ssh, pytest.raises(UnreachableError):
            ssh.runner(host_for(fleet, 0, address="127.0.0.1", port=port)).run(["true"], timeout=10)
        assert time.monotonic() - start < 5


def test_refused_key_is_an_auth_error(fleet: Fleet, tmp_path: Path) -> None:
    stranger = tmp_path / "stranger"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(stranger)], check=True)
    with SshFleet(fleet.options()) as ssh, pytest.raises(AuthError) as err:
        ssh.runner(host_for(fleet, 0, key_file=str(stranger))).run(["true"], timeout=10)
    assert err.value.code == "auth-failed" and err.value.hint


def test_ssh_agent_keys_are_used(fleet: Fleet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sock = tmp_path / "agent.sock"
    agent = subprocess.Popen(["ssh-agent", "-D", "-a", str(sock)], stdout=subprocess.DEVNULL)
    try:
        for _ in range(100):
            if sock.exists():
                break
            time.sleep(0.02)
        env = {**os.environ, "SSH_AUTH_SOCK": str(sock)}
        subprocess.run(["ssh-add", str(fleet.server.client_key)], env=env, check=True, capture_output=True)
        monkeypatch.setenv("SSH_AUTH_SOCK", str(sock))
        with SshFleet(fleet.options(allow_agent=True)) as ssh:
            assert ssh.runner(host_for(fleet, 0, key_file=None)).run(["true"], timeout=10).ok
    finally:
        agent.terminate()
        agent.wait(5)


def test_failing_sudo_is_a_become_error(fleet: Fleet) -> None:
    from sshd import REFUSING_SUDO

    fleet.host(0).script("sudo", REFUSING_SUDO)
    with SshFleet(fleet.options()) as ssh:
        with pytest.raises(BecomeError) as err:
            ssh.runner(host_for(fleet, 0, become=("sudo", "-n"))).run(["true"], timeout=10)
        assert "sudo: a password is required" in str(err.value) and err.value.hint
        assert ssh.runner(host_for(fleet, 1, become=("sudo", "-n"))).run(["true"], timeout=10).ok


def test_command_timeout_keeps_the_connection(fleet: Fleet) -> None:
    with SshFleet(fleet.options()) as ssh:
        runner = ssh.runner(host_for(fleet, 0))
        start = time.monotonic()
        with pytest.raises(CommandTimeout):
            runner.run(["sleep", "5"], timeout=0.5)
        assert time.monotonic() - start < 3
        assert runner.run(["echo", "still here"], timeout=10).stdout == "still here\n"


def test_ssh_config_supplies_hostname_port_user_identity(fleet: Fleet, tmp_path: Path) -> None:
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host gpu-a\n  HostName {fleet.host(2).address}\n  Port {fleet.server.port}\n"
                   f"  User {_user()}\n  IdentityFile {fleet.server.client_key}\n"
                   f"Host *\n  Port 1\n")
    with SshFleet(fleet.options(ssh_config=str(cfg))) as ssh:
        host = Host(name="gpu-a", address="gpu-a")
        target = ssh.target(host)
        assert (target.endpoint.hostname, target.endpoint.port) == (fleet.host(2).address, fleet.server.port)
        done = ssh.runner(host).run(["sh", "-c", "echo $SSH_CONNECTION"], timeout=10)
        assert done.stdout.split()[2] == fleet.host(2).address
        # the inventory wins over ssh_config
        assert ssh.target(Host(name="gpu-a", address="gpu-a", port=2022)).endpoint.port == 2022


def test_proxyjump_goes_through_the_jump_host(fleet: Fleet, tmp_path: Path) -> None:
    jump, target = fleet.host(3), fleet.host(4)
    cfg = tmp_path / "ssh_config"
    cfg.write_text(f"Host inner\n  HostName {target.address}\n"
                   f"  ProxyJump {_user()}@{jump.address}:{fleet.server.port}\n"
                   f"Host *\n  IdentityFile {fleet.server.client_key}\n  Port {fleet.server.port}\n")
    with SshFleet(fleet.options(ssh_config=str(cfg))) as ssh:
        host = Host(name="inner", address="inner", user=_user())
        assert [j.hostname for j in ssh.target(host).jumps] == [jump.address]
        runner = ssh.runner(host)
        done = runner.run(["sh", "-c", "echo $SSH_CONNECTION"], timeout=10)
        assert done.stdout.split()[2] == target.address
        jump_client, target_client = runner.connection.clients
        assert jump_client.get_transport().getpeername()[0] == jump.address  # type: ignore[union-attr]
        import paramiko

        assert isinstance(target_client.get_transport().sock, paramiko.Channel)  # type: ignore[union-attr]
    cfg.write_text(f"Host inner\n  HostName {target.address}\n  Port 1\n"
                   f"  ProxyJump {_user()}@{jump.address}:{fleet.server.port}\n"
                   f"Host *\n  IdentityFile {fleet.server.client_key}\n")
    with SshFleet(fleet.options(ssh_config=str(cfg))) as ssh, pytest.raises(UnreachableError, match="jump host"):
        ssh.runner(Host(name="inner", address="inner", user=_user())).run(["true"], timeout=10)


def test_a_proxycommand_that_needs_a_shell_is_refused_clearly(tmp_path: Path) -> None:
    import paramiko

    cfg = paramiko.SSHConfig.from_text("Host x\n  ProxyCommand nc %h %p 2>/dev/null\n")
    with pytest.raises(InputError, match="needs a shell.*without one") as err:
        resolve_target(Host(name="x", address="x"), cfg)
    assert err.value.hint is not None and "ProxyJump" in err.value.hint


def test_bounded_parallelism_and_per_host_errors(fleet: Fleet) -> None:
    hosts = [host_for(fleet, i) for i in range(6)] + [host_for(fleet, 6, name="down", address="127.0.0.254")]
    seen: list[str] = []
    with SshFleet(fleet.options()) as ssh:
        start = time.monotonic()
        results = for_each_host(hosts, lambda h: ssh.runner(h).run(["sleep", "0.4"], timeout=10).exit_code,
                                parallel=7, on_done=lambda done, total, r: seen.append(f"{done}/{total} {r.host}"))
        elapsed = time.monotonic() - start
    assert [r.host for r in results] == [h.name for h in hosts]
    assert [r.value for r in results[:6]] == [0] * 6
    assert results[6].error is not None and results[6].error.code == "unreachable"
    assert len(seen) == 7 and seen[-1].startswith("7/7")
    assert elapsed < 2.0  # ran side by side, not 6 x 0.4 s plus connects


def test_command_tokens_are_checked() -> None:
    assert command_line(["nvidia-smi", "-i", "0"]) == "nvidia-smi -i 0"
    assert command_line(["echo", "a;b"]) == "echo 'a;b'"
    for bad in (["echo", "a\nb"], ["echo", "a\x00"], []):
        with pytest.raises(BadCommand):
            command_line(bad)


def test_local_runner_runs_without_a_shell() -> None:
    done = LocalRunner().run(["echo", "$HOME;", "x"], timeout=5)
    assert done.stdout == "$HOME; x\n"
    assert LocalRunner().run(["definitely-not-a-command-xyz"], timeout=5).exit_code == 127


def test_a_batch_of_reads_is_one_exec_with_each_output_and_exit_code_apart(fleet: Fleet) -> None:
    with SshFleet(fleet.options()) as ssh:
        runner = ssh.runner(host_for(fleet, 0, become=("sudo", "-n")))  # the pass-through sudo of the test sshd
        runner.connect()
        transport = runner.connection.clients[-1].get_transport()
        assert transport is not None
        opened: list[object] = []
        real_open = transport.open_session

        def counting_open(*a: object, **kw: object) -> object:
            opened.append(a)
            return real_open(*a, **kw)  # type: ignore[arg-type]

        transport.open_session = counting_open  # type: ignore[method-assign]
        sent: list[tuple[str, bytes | None]] = []
        real_exec = runner.connection.exec

        def recording_exec(t: object, argv: tuple[str, ...], line: str, timeout: float, stdin: bytes | None,
                           keep: bool) -> tuple[int, bytes, bytes]:
            sent.append((line, stdin))
            return real_exec(t, argv, line, timeout, stdin, keep)  # type: ignore[arg-type]

        runner.connection.exec = recording_exec  # type: ignore[method-assign]
        done = runner.run_batch([["printf", "%s", "no newline"], ["sh", "-c", "echo out; echo err >&2; exit 3"],
                                 ["printf", "%s|", "a b", "$(touch /tmp/never)", "it's"]], timeout=10)
        assert len(opened) == 1  # one channel, one exec
        [(line, stdin)] = sent
        assert stdin is not None and re.fullmatch(rb"migplan-batch-[0-9a-f]{32}\n", stdin)  # the token: on stdin
        assert stdin.strip().decode() not in line and "migplan-batch-" in line  # ... never on the command line
        assert [(d.exit_code, d.stdout, d.stderr) for d in done] == [
            (0, "no newline", ""), (3, "out\n", "err\n"), (0, "a b|$(touch /tmp/never)|it's|", "")]
        assert done[0].argv == ("sudo", "-n", "printf", "%s", "no newline")
    assert not os.path.exists("/tmp/never")


def test_a_batch_through_a_refusing_sudo_is_a_become_error(fleet: Fleet) -> None:
    from sshd import REFUSING_SUDO

    fleet.host(0).script("sudo", REFUSING_SUDO)
    with SshFleet(fleet.options()) as ssh, pytest.raises(BecomeError):
        ssh.runner(host_for(fleet, 0, become=("sudo", "-n"))).run_batch([["true"], ["true"]], timeout=10)


def test_the_connection_does_not_wait_on_nagle(fleet: Fleet) -> None:
    # each request is small and waits for its answer: without TCP_NODELAY a packet waits for the server's
    # delayed ACK (~40 ms per exec on Linux, bench/results/apply.md)
    with SshFleet(fleet.options()) as ssh:
        runner = ssh.runner(host_for(fleet, 0))
        runner.connect()
        transport = runner.connection.clients[-1].get_transport()
        assert transport is not None
        assert transport.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0  # type: ignore[union-attr]
