"""A CommandRunner over the simulator's `main`, in-process (fast; no timeouts: hangs need a real process)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sim.fleet import call_sim

from migplan.adapters.runner import DEFAULT_TIMEOUT, Completed


class InProcess:
    """A CommandRunner over the simulator's `main` (nvidia-smi only), and flock/cat for the lock."""

    def __init__(self, state: Path) -> None:
        self.state = state

    @property
    def host(self) -> str:
        return "h"

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT, stdin: bytes | None = None) -> Completed:
        assert argv[0] == "nvidia-smi", argv
        code, out, err = call_sim(list(argv), self.state)
        return Completed(tuple(argv), code, out, err)

    def hold(self, argv: Sequence[str], *, ready: str, timeout: float = DEFAULT_TIMEOUT) -> object:
        """No lock in-process (the lock itself is tested against real flock in test_apply_local)."""
        class Held:
            def release(self) -> None:
                pass
        return Held()
