"""Fixtures for fleet tests: a real sshd on loopback serving simulated GPU hosts (see sshd.py)."""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sshd import NetNamespace, SimHost, SshServer, SudoUsers, ensure_sshd

from migplan.adapters.ssh import SshOptions


@pytest.fixture(scope="session")
def ssh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    sshd, reason = ensure_sshd()
    if sshd is None:
        pytest.skip(reason)
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen is not installed (openssh-client)")
    server = SshServer(tmp_path_factory.mktemp("sshd"), sshd)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@dataclass
class JumpLab:
    """A jump host and a host reachable only through it (tests/fleet/sshd.py, "A jump host and a host behind
    it"): `jump` listens on 127.0.0.1 here and runs `sshd -i` in the lab's namespace, where `target`'s sshd listens
    on 127.0.0.2 (with the nvidia-smi simulator). Each has its own host key; both accept `client_key`."""

    jump: SshServer
    target: SshServer
    netns: NetNamespace

    @property
    def client_key(self) -> Path:
        return self.jump.client_key

    @property
    def behind(self) -> SimHost:
        return self.target.hosts[0]

    def known_hosts_text(self) -> str:
        return self.jump.known_hosts_line("127.0.0.1") + self.target.known_hosts_line(self.behind.address)

    def connect_directly_refused(self) -> bool:
        """True when nothing answers at the target's address and port here (so reaching it proves the jump)."""
        import socket

        try:
            with socket.create_connection((self.behind.address, self.target.port), timeout=2):
                return False
        except ConnectionRefusedError:
            return True


@pytest.fixture(scope="session")
def jump_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JumpLab]:
    sshd, reason = ensure_sshd()
    if sshd is None:
        pytest.skip(reason)
    if shutil.which("ssh-keygen") is None:
        pytest.skip("ssh-keygen is not installed (openssh-client)")
    netns, why = NetNamespace.start()
    if netns is None:
        pytest.skip(why)
    root = tmp_path_factory.mktemp("jump-lab")
    jump = SshServer(root / "jump", sshd, count=1, first=1, netns=netns, inetd=True)
    target: SshServer | None = None
    try:
        jump.start()
        target = SshServer(root / "target", sshd, count=1, first=2, netns=netns,
                           authorized=(jump.client_key.with_suffix(".pub").read_text().strip(),))
        target.start()
        yield JumpLab(jump, target, netns)
    finally:
        for server in (target, jump):
            if server is not None:
                server.stop()
        netns.stop()


@pytest.fixture(scope="session")
def sudo_users(ssh_server: SshServer) -> Iterator[SudoUsers]:
    """Local users `migplan-ok-<pid>` (NOPASSWD sudo for the simulator) and `migplan-pw-<pid>` (sudo asks for a
    password), with a checked sudoers drop-in; skipped with the reason when not root or sudo cannot be installed."""
    users, reason = SudoUsers.setup(ssh_server)
    if users is None:
        pytest.skip(reason)
    try:
        yield users
    finally:
        users.teardown()


@dataclass
class Fleet:
    """Per-test view of the server: fresh host directories, a private known_hosts copy."""

    server: SshServer
    tmp: Path

    def host(self, i: int) -> SimHost:
        return self.server.hosts[i]

    @property
    def known_hosts(self) -> Path:
        return self.tmp / "known_hosts"

    def options(self, **kw: object) -> SshOptions:
        base: dict[str, object] = {"known_hosts": str(self.known_hosts), "ssh_config": None,
                                   "connect_timeout": 5.0, "allow_agent": False, "look_for_keys": False}
        base.update(kw)
        return SshOptions(**base)  # type: ignore[arg-type]

    def host_entry(self, h: SimHost, **extra: object) -> dict[str, object]:
        entry: dict[str, object] = {"address": h.address, "port": self.server.port, "user": _user(),
                                    "key_file": str(self.server.client_key), "discover": True,
                                    # every simulated host is this one machine: one apply lock each
                                    "lock_file": str(h.dir / "apply.lock"), "state_dir": str(h.dir / "etc")}
        entry.update(extra)
        return entry

    def inventory(self, hosts: dict[str, dict[str, object]], name: str = "inventory.yaml") -> Path:
        path = self.tmp / name
        path.write_text(yaml.safe_dump({"version": 1, "hosts": hosts}, sort_keys=False))
        return path


def _user() -> str:
    import getpass

    return getpass.getuser()


@pytest.fixture
def fleet(ssh_server: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Fleet:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)  # never use the developer's agent
    for h in ssh_server.hosts:
        h.reset()
    shutil.copy(ssh_server.known_hosts, tmp_path / "known_hosts")
    return Fleet(ssh_server, tmp_path)
