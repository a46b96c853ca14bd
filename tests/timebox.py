"""Bounds for tests whose defect was a hang: fail instead of hanging the suite."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator


@contextlib.contextmanager
def within(seconds: float) -> Iterator[None]:
    """Fail (instead of hanging the suite) when the block runs longer than `seconds`."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not threading.main_thread():
        start = time.monotonic()
        yield
        assert time.monotonic() - start < seconds * 5
        return

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"took longer than {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
