"""`RecordingRunner`: the runner behind `--dry-run`.

It wraps a real runner (or none). A command the caller's `read_only(argv)` predicate accepts runs
on the real host, so a dry run sees the real state; every other command, and every `put_file`, is
recorded in order and NOT run: it returns a successful `Completed` with empty output. `get_file`
is a read and goes to the real host; `run_batch` of read-only commands goes to it as one batch, as in
a real run. Without an inner runner everything is recorded (and `get_file` fails: there is nothing to
read from).

`commands` is the recorded list (a copy), each a `RecordedAction` whose `str()` is one printable
line: the exact command line an SSH server would get, `put PATH (N bytes, mode 0644)`, or, for a
`put_files` (one round trip in a real run, one step here), `put files in DIR: NAME (N bytes, mode 0644),
...; remove the other SUB/*.SUFFIX files that begin with MARKER`. Recorded argv is what the caller asked for,
without the host's become prefix.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from migplan.adapters.runner import (
    DEFAULT_TIMEOUT,
    MAX_TRANSFER_BYTES,
    CommandRunner,
    Completed,
    FilesDone,
    FileToPut,
    Prune,
    TransferError,
    check_file_set,
    check_mode,
    check_remote_path,
    command_line,
    run_many,
)

ReadOnly = Callable[[Sequence[str]], bool]


def _nothing_is_read_only(argv: Sequence[str]) -> bool:
    return False


@dataclass(frozen=True)
class RecordedAction:
    """A mutating step a dry run did not perform: a command (`kind="run"`), a file put (`"put"`) or a set of
    files (`"files"`: `path` is the directory)."""

    kind: str
    argv: tuple[str, ...] = ()
    path: str = ""
    data: bytes | None = None  # the file content (put) or stdin (run)
    mode: int | None = None
    files: tuple[FileToPut, ...] = ()
    prune: Prune | None = None

    def __str__(self) -> str:
        if self.kind == "files":
            listed = ", ".join(f"{f.name} ({len(f.data)} bytes, mode {f.mode:04o})" for f in self.files)
            stale = f"; remove the other {self.prune.subdir}/*{self.prune.suffix} files that begin with " \
                f"{self.prune.marker}" if self.prune is not None else ""
            return f"put files in {self.path}: {listed or 'none'}{stale}"
        if self.kind == "put":
            size = len(self.data or b"")
            return f"put {self.path} ({size} bytes, mode {self.mode or 0:04o})"
        stdin = f" (with {len(self.data)} bytes on stdin)" if self.data is not None else ""
        return command_line(self.argv) + stdin


class RecordingRunner:
    """Records mutating commands and puts instead of running them; passes read-only ones through."""

    def __init__(self, inner: CommandRunner | None = None, *, read_only: ReadOnly | None = None,
                 host: str | None = None) -> None:
        self._inner = inner
        self._read_only = read_only or _nothing_is_read_only
        self._host = host or (inner.host if inner is not None else "dry-run")
        self._lock = threading.Lock()
        self._actions: list[RecordedAction] = []

    @property
    def host(self) -> str:
        return self._host

    @property
    def commands(self) -> list[RecordedAction]:
        with self._lock:
            return list(self._actions)

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT,
            stdin: bytes | None = None) -> Completed:
        tokens = tuple(argv)
        command_line(tokens)  # the same token rules as a real run, so a dry run fails where a real one would
        if self._inner is not None and self._read_only(tokens):
            return self._inner.run(tokens, timeout=timeout, stdin=stdin)
        with self._lock:
            self._actions.append(RecordedAction("run", tokens, data=None if stdin is None else bytes(stdin)))
        return Completed(tokens, 0, "", "", 0.0)

    def run_batch(self, argvs: Sequence[Sequence[str]], *, timeout: float = DEFAULT_TIMEOUT) -> list[Completed]:
        """Read-only commands go to the host in one batch, as in a real run (`runner.run_many`); a batch with any
        other command is taken one by one, so that one is recorded in its place."""
        tokens = [tuple(a) for a in argvs]
        for t in tokens:
            command_line(t)
        if self._inner is not None and all(self._read_only(t) for t in tokens):
            return run_many(self._inner, tokens, timeout=timeout)
        return [self.run(t, timeout=timeout) for t in tokens]

    def put_file(self, remote_path: str, data: bytes, *, mode: int = 0o644,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        path = check_remote_path(remote_path)
        check_mode(mode)
        with self._lock:
            self._actions.append(RecordedAction("put", ("put", path), path=path, data=bytes(data), mode=mode))

    def put_files(self, directory: str, files: Sequence[FileToPut], *, prune: Prune | None = None,
                  timeout: float = DEFAULT_TIMEOUT) -> FilesDone:
        """Recorded as one step (checked as a real run checks it); nothing is done, so nothing is reported."""
        path, items = check_file_set(self._host, directory, files, prune)
        with self._lock:
            self._actions.append(RecordedAction("files", ("put-files", path), path=path, files=items, prune=prune))
        return FilesDone()

    def get_file(self, remote_path: str, *, max_bytes: int = MAX_TRANSFER_BYTES,
                 timeout: float = DEFAULT_TIMEOUT) -> bytes:
        path = check_remote_path(remote_path)
        if self._inner is None:
            raise TransferError(self._host, f"dry run without a host: cannot read {path}")
        return self._inner.get_file(path, max_bytes=max_bytes, timeout=timeout)
