"""A CommandRunner over the simulator's `main`, in-process (fast; no timeouts: hangs need a real process)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sim.fleet import call_sim

from migplan.adapters.runner import (
    DEFAULT_TIMEOUT,
    MAX_TRANSFER_BYTES,
    Completed,
    FilesDone,
    FileToPut,
    Prune,
    RemoteFileMissing,
)


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
