"""The console script's standard output: write errors that say what failed, and a last flush whose failure is
still an exit code (migplan.cli.app.main wraps every command in `named_stdout`).

May import: migplan.errors; migplan.files (only when a write to stdout fails).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from migplan.errors import EXIT_FAILURE


class NamedStdout:
    """sys.stdout whose write errors say what failed: `cannot write standard output: File too large` (a `> file`
    under `ulimit -f`, a full disk), not a bare `File too large`; a closed pipe stays the BrokenPipeError it is
    (the reader left: nothing to report). Everything else is the real stream's."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def _named(self, err: OSError) -> OSError:
        from migplan.files import named_oserror

        return named_oserror(err, "cannot write", "standard output")

    def write(self, text: str) -> int:
        try:
            return int(self._inner.write(text))
        except BrokenPipeError:
            raise
        except OSError as err:
            raise self._named(err) from None

    def flush(self) -> None:
        try:
            self._inner.flush()
        except BrokenPipeError:
            raise
        except OSError as err:
            raise self._named(err) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def flush_stdout() -> None:
    """Flush what the command printed while its exit code can still say so: at interpreter exit a failed flush is
    only "Exception ignored" and exit 120. On failure: one error line, exit 1, and stdout pointed at /dev/null so
    the buffered rest is dropped quietly at exit."""
    try:
        sys.stdout.flush()
    except OSError as err:
        if not isinstance(err, BrokenPipeError):
            sys.stderr.write(f"error: {err.strerror or err}\n")
            sys.stderr.flush()
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        sys.exit(EXIT_FAILURE)


@contextlib.contextmanager
def named_stdout() -> Iterator[None]:
    """Run the block with `NamedStdout` in place of sys.stdout, then `flush_stdout`; the real stream is put back
    after (a caller in this process, a test, gets its own stream back)."""
    real_stdout = sys.stdout
    sys.stdout = NamedStdout(real_stdout)
    try:
        yield
    finally:
        try:
            flush_stdout()
        finally:
            sys.stdout = real_stdout
