"""The processes this migplan started, and stopping them all when it is told to stop.

`migplan apply` and `replan` run from cron and systemd, which stop a job with SIGTERM (systemd: then SIGKILL
after TimeoutStopSec), a terminal's hang-up sends SIGHUP, and an operator presses Ctrl-C (SIGINT). Whatever
the signal, a stopped apply must leave nothing behind: no nvidia-smi still running, no lock holder keeping a
host's apply lock. `LocalRunner` registers every child here; `stop_on_signals` turns SIGTERM, SIGINT and
SIGHUP into: kill every registered child (the local lock holders go with them, so the kernel drops their
flocks; SSH sessions end with the process, and with them the remote lock holders), then die of the same
signal, so the parent (shell, cron, systemd) sees the usual 128+N status. A GPU left half-done is recorded on
its host (fleet/inflight.py) and repaired by the next apply or replan. SIGKILL cannot be caught: a killed
migplan's children see their pipes close (the lock holder `cat` ends at end-of-file).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from types import FrameType

_LIVE: set[subprocess.Popen[bytes]] = set()
_GUARD = threading.Lock()
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def track(proc: subprocess.Popen[bytes]) -> None:
    with _GUARD:
        _LIVE.add(proc)


def untrack(proc: subprocess.Popen[bytes]) -> None:
    with _GUARD:
        _LIVE.discard(proc)


def kill_all() -> int:
    """SIGKILL every child still registered (how many were)."""
    with _GUARD:
        procs = list(_LIVE)
    for p in procs:
        with contextlib.suppress(OSError):
            p.kill()
    return len(procs)


def _stop(signum: int, _frame: FrameType | None) -> None:
    kill_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)  # die of it, as without a handler (exit status 128 + signum)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Within: SIGTERM, SIGINT and SIGHUP stop this process at once, with every child it started (see above),
    unless the signal was ignored when migplan started. Only from the main thread (signal handlers can be set
    nowhere else); elsewhere it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    # a signal the parent set to be ignored stays ignored (`nohup` for SIGHUP; a shell's background job for SIGINT)
    old = {s: signal.signal(s, _stop) for s in STOP_SIGNALS if signal.getsignal(s) is not signal.SIG_IGN}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)
