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

from sshd import SimHost, SshServer, SudoUsers, ensure_sshd

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
