"""The one way the tests drive the nvidia-smi simulator (tests/sim) on a simulated host: every apply, discover and
replan test gets its runner here, never by building one around the simulator itself.

A host is its state file (tests/sim/fleet.py: `write_state(path, host_state(...))`, read back with `read_state`).
Pick the first of these that the test can use:

- `InProcess(state)`: nvidia-smi answered by the simulator in this process, the host's files in a dict, no lock.
  The fast one, and the default. A test that instruments a runner subclasses it.
- `local(state, host)`: a LocalRunner whose `nvidia-smi` is the simulator run as a process, on this machine's
  sh, flock and files: for what needs real processes (a hang waited out by a timeout, the real lock, hooks, the
  files an apply writes, a become prefix). `runner=` a LocalRunner subclass that counts or records.
- `connect(state)` or `connect({name: state})`: the `connect=` of a command (apply, apply --last, replan):
  `local` for each host by its inventory name.
- `serve(monkeypatch, state)`: the simulator in this process's environment, for what builds its own runner:
  the CLI through typer's CliRunner, a `connection: local` host without `connect=`. Undone with the monkeypatch.
- `environ(state)`: the same environment as a dict, for a child process (the migplan console script).

The simulator itself imports nothing from migplan (it is the oracle); this module is the bridge.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

import pytest
from sim.fleet import call_sim, sim_env

from migplan.adapters.runner import (
    DEFAULT_TIMEOUT,
    MAX_TRANSFER_BYTES,
    Completed,
    FilesDone,
    FileToPut,
    LocalRunner,
    Prune,
    RemoteFileMissing,
)

Runner = TypeVar("Runner", bound=LocalRunner)


class _Named(Protocol):
    """An inventory host as a command's `connect` gets it (only its name is used)."""

    @property
    def name(self) -> str: ...


def local(state: Path, host: str = "h1", *, become: Sequence[str] = (),
          runner: type[Runner] = LocalRunner) -> Runner:  # type: ignore[assignment]
    """A runner of real processes on this machine whose `nvidia-smi` is the simulator of host state `state`."""
    return runner(host=host, become=become, env=sim_env(state))


def connect(states: Path | Mapping[str, Path]) -> Callable[[_Named], LocalRunner]:
    """A command's `connect=`: each host, by its name, to `local` over its state (one state: every host)."""
    def to(h: _Named) -> LocalRunner:
        return local(states if isinstance(states, Path) else states[h.name], h.name)
    return to


def environ(state: Path, **extra: str) -> dict[str, str]:
    """This process's environment with the simulator of `state` first on PATH (and `extra`): a child's."""
    return {**sim_env(state), **extra}


def serve(monkeypatch: pytest.MonkeyPatch, state: Path) -> None:
    """Put the simulator of `state` in this process's environment (PATH first, its state file), for the runners
    that the code under test builds itself."""
    for key, value in environ(state).items():
        monkeypatch.setenv(key, value)


class InProcess:
    """A CommandRunner over the simulator's `main` (nvidia-smi only), and flock/cat for the lock; the host's files
    (`mkdir -p`, `rm -f`, put/get, put_files without pruning) in a dict."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.files: dict[str, bytes] = {}

    @property
    def host(self) -> str:
        return "h"

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT, stdin: bytes | None = None) -> Completed:
        if list(argv[:3]) in (["mkdir", "-p", "--"], ["rm", "-f", "--"]):
            for path in argv[3:]:
                if argv[0] == "rm":
                    self.files.pop(path, None)
            return Completed(tuple(argv), 0, "", "")
        assert argv[0] == "nvidia-smi", argv
        code, out, err = call_sim(list(argv), self.state)
        return Completed(tuple(argv), code, out, err)

    def hold(self, argv: Sequence[str], *, ready: str, timeout: float = DEFAULT_TIMEOUT) -> object:
        """No lock in-process (the lock itself is tested against real flock in test_apply_local)."""
        class Held:
            def release(self) -> None:
                pass
        return Held()

    def put_file(self, remote_path: str, data: bytes, *, mode: int = 0o644, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.files[remote_path] = bytes(data)

    def get_file(self, remote_path: str, *, max_bytes: int = MAX_TRANSFER_BYTES,
                 timeout: float = DEFAULT_TIMEOUT) -> bytes:
        if remote_path not in self.files:
            raise RemoteFileMissing(self.host, f"{remote_path} does not exist")
        return self.files[remote_path][: max_bytes + 1]

    def put_files(self, directory: str, files: Sequence[FileToPut], *, prune: Prune | None = None,
                  timeout: float = DEFAULT_TIMEOUT) -> FilesDone:
        written = []
        for f in files:
            path = f"{directory}/{f.name}"
            if self.files.get(path) != f.data:
                self.files[path] = bytes(f.data)
                written.append(f.name)
        return FilesDone(written=tuple(written), unchanged=tuple(f.name for f in files if f.name not in written))
