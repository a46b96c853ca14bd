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

A hostile user on the host. /run/lock is world-writable (and sticky), and the lock runs as the login user
(usually root; `hold` does not use the become prefix), so another user there could plant a symbolic link at
the lock's name (flock(1) opens it O_CREAT and would create or open whatever it points to, as root) or a file
of their own (and hold it, or remove it, splitting the lock). So the lock runs through LOCK_SCRIPT, one
constant `sh -c` text with the path as its only argument (never spliced into the script), which before `flock`:

1. refuses the path's directory unless it is owned by root or the lock user and, when group- or
   other-writable, sticky (so only root, the directory's owner and an entry's owner can rename or remove
   entries in it);
2. creates the lock file when there is nothing at the name, without following anything: `mktemp` (O_EXCL,
   mode 0600) next to it, then `ln -T` (link(2) never follows a link at the new name and fails if anything
   is there), then removes the temporary name;
3. refuses the name unless it is, now, not a symbolic link, a regular file, and owned by the lock user
   (`test -L`, `-f`, `-O`); exit LOCK_REFUSED (77) with one line saying why.

After 3 the entry can no longer change under us: it is our file in a directory where, by 1, only root or
its owner (root, or us) can rename or remove it; so `flock` opens the file that was checked (no TOCTOU), and
with mode 0600 no other user can open it to hold the lock either. Not protected: root or the lock user
itself doing otherwise; directories above the lock's directory (not checked on the host); a lock file made
0644 by an older migplan (still accepted: ours, only readable by others, who could then hold the lock and
block applies; remove it once). The kernel's fs.protected_symlinks (and protected_regular), on by default on
current distributions, refuse link-following in sticky directories as well, but are not relied on.
"""

from __future__ import annotations

from typing import Protocol

from migplan.adapters.runner import DEFAULT_TIMEOUT, Held, HoldFailed, HostError, check_remote_path
from migplan.text import printable

LOCK_PATH = "/run/lock/migplan-apply.lock"
LOCKED_EXIT = 75  # EX_TEMPFAIL
LOCK_REFUSED = 77  # EX_NOPERM: the lock's path is not safe to open (module notes)
READY = "flock: executing"
_REFUSED_PREFIX = "migplan-lock: "

# The checks before flock (module notes), POSIX sh plus coreutils (stat -c, mktemp, ln -T, id) and util-linux's
# flock; "$1" is the lock path, never part of the text. One line per refusal, prefixed, on stderr.
LOCK_SCRIPT = (
    'p=$1; d=${p%/*}; d=${d:-/}; me=$(id -u); '
    'no() { echo "migplan-lock: $*" >&2; exit 77; }; '
    's=$(stat -L -c "%u %a" -- "$d") || no "cannot stat the directory $d"; set -- $s; '
    '[ "$1" = 0 ] || [ "$1" = "$me" ] || no "the directory $d is owned by uid $1, not by root or uid $me"; '
    'm=$((0$2)); '
    'if [ $((m & 18)) -ne 0 ] && [ $((m & 512)) -eq 0 ]; then '
    'no "the directory $d is writable by group or others (mode $2) and not sticky"; fi; '
    'if [ ! -e "$p" ] && [ ! -L "$p" ]; then '
    't=$(mktemp -- "$p.XXXXXXXXXX") || no "cannot create a file in $d"; '
    'ln -T -- "$t" "$p" 2>/dev/null; rm -f -- "$t"; fi; '
    '[ ! -L "$p" ] || no "$p is a symbolic link; refusing to follow it"; '
    '[ -f "$p" ] || no "$p is not a regular file"; '
    '[ -O "$p" ] || no "$p is owned by uid $(stat -c %u -- "$p"), not by uid $me (the user taking the lock)"; '
    'exec stdbuf -o0 flock --verbose --nonblock --conflict-exit-code 75 "$p" cat'
)


class HostLocked(HostError):
    code = "locked"


class CanHold(Protocol):
    @property
    def host(self) -> str: ...

    def hold(self, argv: list[str], *, ready: str, timeout: float = DEFAULT_TIMEOUT) -> Held: ...


def lock_argv(path: str = LOCK_PATH) -> list[str]:
    # stdbuf -o0: flock prints its "executing" line to stdout, which is block-buffered into a pipe and
    # would be lost at exec; unbuffered, it arrives before `cat` starts waiting (coreutils stdbuf(1)).
    # "sh" is $0; the path is $1, one argv token (quoted by runner.command_line over SSH).
    return ["sh", "-c", LOCK_SCRIPT, "sh", check_remote_path(path)]


def acquire(runner: CanHold, path: str = LOCK_PATH, *, timeout: float = DEFAULT_TIMEOUT) -> Held:
    """The host's apply lock, or HostLocked when another apply holds it."""
    try:
        return runner.hold(lock_argv(path), ready=READY, timeout=timeout)
    except HoldFailed as err:
        if err.exit_code == LOCKED_EXIT:
            raise HostLocked(runner.host, f"another migplan apply is running on this host (lock {path})",
                             hint="wait for it to finish; the lock is released when that apply or its "
                                  "connection ends") from None
        if err.exit_code == LOCK_REFUSED and _REFUSED_PREFIX in err.stderr:
            why = err.stderr.split(_REFUSED_PREFIX, 1)[1].strip().splitlines()[0]
            raise HostError(runner.host, f"refusing the apply lock {path}: {printable(why, 300)}",
                            hint="remove what is at the lock's path, or set the host's lock_file to a path in a "
                                 "directory only root (or the login user) can write") from None
        if err.exit_code == 127 or "not found" in err.stderr:
            raise HostError(runner.host, "flock or stdbuf is not installed on the host",
                            hint="install util-linux (flock) and coreutils (stdbuf)") from None
        raise HostError(runner.host, f"cannot take the apply lock {path}: {err.stderr.strip()[:200]}") from None
