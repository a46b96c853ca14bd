"""Writing files safely (generic helpers, no migplan types).

`write_atomic` writes a temporary file in the target's directory, flushes it to disk and renames
it over the target, so a reader sees either the old or the new content, never half of it
(rename(2) is atomic within one file system).
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile


def write_atomic(path: str | os.PathLike[str], text: str, *, mode: int | None = None) -> None:
    """Replace `path` with `text` (UTF-8) atomically.

    The new file keeps the permissions of the file it replaces; a new file gets `mode`, or 0o644
    minus the umask when `mode` is None. Missing parent directories are created (0o700).
    """
    target = os.path.abspath(os.fspath(path))
    directory = os.path.dirname(target)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    try:
        keep: int | None = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        keep = None
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(target)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        if keep is not None:
            os.chmod(tmp, keep)
        elif mode is not None:
            os.chmod(tmp, mode)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o644 & ~umask)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def _fsync_dir(directory: str) -> None:
    """Make the rename durable; some file systems refuse to open a directory (ignored)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
