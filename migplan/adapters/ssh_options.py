"""How to connect over SSH: the settings the CLI fills from its flags (no paramiko here, so commands that
never connect, and `--help`, do not pay for importing it)."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
DEFAULT_SSH_CONFIG = "~/.ssh/config"


@dataclass(frozen=True)
class SshOptions:
    """How to connect; the CLI fills it from its flags."""

    known_hosts: str = DEFAULT_KNOWN_HOSTS
    accept_new_host_keys: bool = False
    ssh_config: str | None = DEFAULT_SSH_CONFIG  # None: read no ssh_config
    connect_timeout: float = 10.0
    keepalive_s: int = 15
    allow_agent: bool = True
    look_for_keys: bool = True  # ~/.ssh/id_* when no key is configured
