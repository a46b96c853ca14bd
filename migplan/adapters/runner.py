"""Running commands on a host: the `CommandRunner` protocol, a local runner, and transport errors.

A command is an argv list. Runners never hand a string to a shell they build from host output:
`command_line` checks every token and joins them with `shlex.quote`, which is the only form an
SSH server accepts (it runs the line with the login user's shell).
"""

from __future__ import annotations

import shlex
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from migplan.errors import MigplanError

DEFAULT_TIMEOUT = 60.0
MAX_OUTPUT_BYTES = 32 * 1024 * 1024  # a host that floods us is failed, not buffered forever
_MAX_TOKEN = 4096


@dataclass(frozen=True)
class Completed:
    """What a finished command left: its exit code and decoded output."""

    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class CommandRunner(Protocol):
    """Runs argv on one host. `LocalRunner` and `migplan.adapters.ssh.SshRunner` implement it."""

    @property
    def host(self) -> str: ...

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT) -> Completed: ...


# --- errors ------------------------------------------------------------------------------------

class HostError(MigplanError):
    """A failure on one host; fleet commands report it and carry on with the other hosts."""

    code = "host-error"

    def __init__(self, host: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(f"{host}: {message}", hint=hint)
        self.host = host
        self.detail = message

    def as_dict(self) -> dict[str, str | None]:
        return {"code": self.code, "message": self.detail, "hint": self.hint}


class UnreachableError(HostError):
    code = "unreachable"


class HostKeyUnknownError(HostError):
    code = "host-key-unknown"


class HostKeyChangedError(HostError):
    code = "host-key-changed"


class AuthError(HostError):
    code = "auth-failed"


class BecomeError(HostError):
    """The privilege prefix (`sudo -n`) refused to run the command."""

    code = "become-failed"


class CommandTimeout(HostError):
    code = "timeout"


class ConnectionLost(HostError):
    code = "connection-lost"


class OutputTooLarge(HostError):
    code = "output-too-large"


class BadCommand(MigplanError):
    """A token that must not reach a shell (a programming error or unvalidated input)."""


# --- helpers shared by runners -----------------------------------------------------------------

def command_line(argv: Sequence[str]) -> str:
    """Validated argv joined with `shlex.quote`: the exact string an SSH server gets."""
    if not argv:
        raise BadCommand("empty command")
    for token in argv:
        if not isinstance(token, str):
            raise BadCommand(f"command token {token!r} is not a string")
        if len(token) > _MAX_TOKEN or any(ord(c) < 0x20 or c == "\x7f" for c in token):
            raise BadCommand(f"command token {printable(token, 60)!r} has control characters or is too long")
    return " ".join(shlex.quote(t) for t in argv)


def printable(text: str, limit: int = 300) -> str:
    """Host output made safe for a terminal or log: no escape sequences, one bounded line."""
    clean = "".join(c if c.isprintable() else " " for c in text.replace("\r", " ").replace("\n", " | "))
    clean = " ".join(clean.split())
    return clean if len(clean) <= limit else clean[: limit - 3] + "..."


def check_become(host: str, become: Sequence[str], done: Completed) -> Completed:
    """Raise BecomeError when the privilege prefix itself failed (sudo prints `sudo: ...`).

    `sudo -n` exits 1 with "sudo: a password is required" (or "... is not in the sudoers file",
    "a terminal is required") before running anything.
    """
    if not become or done.ok:
        return done
    first = next((ln for ln in done.stderr.splitlines() if ln.strip()), "")
    prog = become[0].rsplit("/", 1)[-1]
    if first.startswith(f"{prog}: "):
        raise BecomeError(host, f"'{' '.join(become)}' failed: {printable(first, 200)}",
                          hint=f"allow the login user to run nvidia-smi with '{' '.join(become)}' "
                               "without a password (sudoers NOPASSWD), or log in as root")
    return done


# --- local runner --------------------------------------------------------------------------------

class LocalRunner:
    """Runs argv on this machine with subprocess (no shell), optionally behind a become prefix."""

    def __init__(self, *, become: Sequence[str] = (), host: str = "localhost",
                 env: dict[str, str] | None = None) -> None:
        self._become = tuple(become)
        self._host = host
        self._env = env

    @property
    def host(self) -> str:
        return self._host

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT) -> Completed:
        full = (*self._become, *argv)
        command_line(full)  # same token rules as over SSH
        start = time.monotonic()
        try:
            proc = subprocess.run(list(full), capture_output=True, timeout=timeout, check=False, env=self._env)
        except subprocess.TimeoutExpired:
            raise CommandTimeout(self._host, f"'{full[0]}' did not finish within {timeout:g} s") from None
        except FileNotFoundError:
            return Completed(tuple(full), 127, "", f"{full[0]}: command not found", time.monotonic() - start)
        except OSError as err:
            raise HostError(self._host, f"cannot run '{full[0]}': {err.strerror}") from None
        if len(proc.stdout) + len(proc.stderr) > MAX_OUTPUT_BYTES:
            raise OutputTooLarge(self._host, f"'{full[0]}' printed more than {MAX_OUTPUT_BYTES} bytes")
        done = Completed(tuple(full), proc.returncode, proc.stdout.decode("utf-8", "replace"),
                         proc.stderr.decode("utf-8", "replace"), time.monotonic() - start)
        return check_become(self._host, self._become, done)
