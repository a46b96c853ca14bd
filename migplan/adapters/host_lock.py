"""One apply per host at a time: an `flock` on the host, held by a command that lives as long as our
connection to it does.

`flock --verbose --nonblock --conflict-exit-code 75 PATH cat` takes the lock at once or exits 75; with
the lock taken it prints `flock: executing cat` (on stdout, unbuffered through `stdbuf -o0`) and `cat`
waits on its stdin. Releasing closes that stdin. If migplan dies or the connection drops, sshd closes
the channel, `cat` ends and the kernel drops the lock: it never outlives a dead session (util-linux
flock(1); /run/lock is the FHS place for lock files and is writable by every user, so no privilege is
needed).

A connection that dies without a word (a cable pulled, no FIN or RST) is noticed by sshd only through
its keepalives: with OpenSSH's defaults (no ClientAliveInterval) such a lock lasts until TCP gives up.
Hosts applied from cron should set `ClientAliveInterval 15` and `ClientAliveCountMax 4` in sshd_config.
"""

from __future__ import annotations

from typing import Protocol

from migplan.adapters.runner import DEFAULT_TIMEOUT, Held, HoldFailed, HostError

LOCK_PATH = "/run/lock/migplan-apply.lock"
LOCKED_EXIT = 75  # EX_TEMPFAIL
READY = "flock: executing"


class HostLocked(HostError):
    code = "locked"


class CanHold(Protocol):
    @property
    def host(self) -> str: ...

    def hold(self, argv: list[str], *, ready: str, timeout: float = DEFAULT_TIMEOUT) -> Held: ...


def lock_argv(path: str = LOCK_PATH) -> list[str]:
    # stdbuf -o0: flock prints its "executing" line to stdout, which is block-buffered into a pipe and
    # would be lost at exec; unbuffered, it arrives before `cat` starts waiting (coreutils stdbuf(1)).
    return ["stdbuf", "-o0", "flock", "--verbose", "--nonblock", "--conflict-exit-code", str(LOCKED_EXIT), path,
            "cat"]


def acquire(runner: CanHold, path: str = LOCK_PATH, *, timeout: float = DEFAULT_TIMEOUT) -> Held:
    """The host's apply lock, or HostLocked when another apply holds it."""
    try:
        return runner.hold(lock_argv(path), ready=READY, timeout=timeout)
    except HoldFailed as err:
        if err.exit_code == LOCKED_EXIT:
            raise HostLocked(runner.host, f"another migplan apply is running on this host (lock {path})",
                             hint="wait for it to finish; the lock is released when that apply or its "
                                  "connection ends") from None
        if err.exit_code == 127 or "not found" in err.stderr:
            raise HostError(runner.host, "flock or stdbuf is not installed on the host",
                            hint="install util-linux (flock) and coreutils (stdbuf)") from None
        raise HostError(runner.host, f"cannot take the apply lock {path}: {err.stderr.strip()[:200]}") from None
