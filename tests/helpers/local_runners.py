"""Local-runner instruments shared by the apply tests: a LocalRunner that keeps the argv of every process it starts,
and a pass-through become prefix (what the real `sudo -n` is to them; its own rules: tests/fleet/test_sudo.py).
With the simulator: `sim_runner.local(state, become=pass_through_sudo(...), runner=Counted)`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from migplan.adapters.runner import LocalRunner


class Counted(LocalRunner):
    """A local runner that keeps the argv of every process it starts (each one SSH exec on a real host)."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.execs: list[tuple[str, ...]] = []

    def _spawn(self, full: tuple[str, ...], stdin: bytes | None, timeout: float) -> tuple[int, bytes, bytes]:
        self.execs.append(full)
        return super()._spawn(full, stdin, timeout)


def pass_through_sudo(where: Path) -> tuple[str, ...]:
    """A become prefix that runs its argv as it is (the real sudo's rules: tests/fleet/test_sudo.py)."""
    where.mkdir(parents=True, exist_ok=True)
    stub = where / "sudo"
    stub.write_text('#!/bin/sh\nexec "$@"\n')
    stub.chmod(0o755)
    return (str(stub),)
