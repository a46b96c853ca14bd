"""Writing files safely (generic helpers, no migplan types beyond `InputError`).

`write_atomic` writes a temporary file in the target's directory, flushes it to disk and renames
it over the target, so a reader sees either the old or the new content, never half of it
(rename(2) is atomic within one file system). What it will and will not replace:

* Only regular files. A target that exists as a directory, a character or block device (such as
  `/dev/null`), a FIFO or a socket is refused with an `InputError`: renaming over `/dev/null` as
  root would turn it into a plain file for every program on the machine.
* Symbolic links are followed deliberately: the link's final target is replaced (the temporary file
  is made in *that* directory, so the rename stays atomic) and the link itself is kept, as `cat >
  link` would do. A link in a sticky, world-writable directory (/tmp) that belongs neither to us nor
  to the directory's owner is refused, as the kernel's `fs.protected_symlinks` does, so nobody can
  aim a root-run migplan at /etc/shadow with a planted link.
* The replaced file keeps its permission bits (unless `keep_mode=False`) and its owner and group.
  When the owner or group cannot be kept (a non-root user replacing someone else's file), the write
  is refused rather than silently handing the file to the current user.
* `private=True` masks the group/other write bits off the final mode, whatever the old file had:
  files such as known_hosts decide whom SSH trusts and must never be writable by others.
* `forbid` (or `check_output_path`) refuses to write onto a file the caller reads (same device and
  inode, also through symlinks), e.g. `--out` naming the inventory it was computed from.

* Inside a trusted state directory (one `check_trusted_dir` accepted in this process: the replan state dir and
  its runs/, plans/, journal/, fetched/) nothing is followed: a link at the final name is refused (lstat), the
  file is renamed over the name itself (rename(2) replaces a link, never writes through it) and no directory is
  created. Anywhere, the temporary file is created O_CREAT | O_EXCL | O_NOFOLLOW (0600) under a random name, so
  a link planted at a guessed temporary name is never opened.

`append_durable` appends whole lines to a journal (O_APPEND, fsync), refusing the same targets; the file is
opened O_NOFOLLOW and checked regular (fstat) after the open, and in a trusted directory the name is not
resolved first: a link there is refused.

Refusals are `InputError`s (the user named the wrong thing); failures of the system calls
themselves (no permission, a file where a directory should be, a symlink loop) are the `OSError`
they were, as before.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import threading
from collections.abc import Iterable
from typing import Any

from migplan.errors import InputError

PathLike = str | os.PathLike[str]

_GROUP_OTHER_WRITE = 0o022
_APPEND_LOCK = threading.Lock()
_UMASK_LOCK = threading.Lock()


# --- what a path is -----------------------------------------------------------------------------

def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link")):
        if test(mode):
            return name
    return "not a regular file"


def _refuse_special(shown: str, real: str, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        via = f" (through the link to {real})" if os.path.abspath(shown) != real else ""
        raise InputError(f"{shown}{via} is {_kind(st.st_mode)}, not a regular file; migplan only replaces "
                         "regular files", source=None,
                         hint="give the path of a regular file (or a new one); to discard output, leave the "
                              "option out instead of naming a device")


def _check_link_is_safe(link: str) -> None:
    """Refuse a link that someone else planted in a sticky world-writable directory (/tmp)."""
    parent = os.path.dirname(link) or "."
    try:
        lst = os.lstat(link)
        dst = os.stat(parent)
    except OSError:
        return
    sticky_public = bool(dst.st_mode & stat.S_ISVTX) and bool(dst.st_mode & stat.S_IWOTH)
    if sticky_public and lst.st_uid not in (os.geteuid(), dst.st_uid):
        raise InputError(f"{link} is a symbolic link owned by uid {lst.st_uid} in the shared directory {parent}; "
                         "refusing to follow it",
                         hint="write to a path in a directory that only you (or root) can write")


# Two walks over a path's components follow links as the kernel does: `resolve_target` (where a write lands) and
# `check_ancestors` (whether every directory on the way may be trusted). They share the steps that are the same
# (`_without_lookup`, `_follow`, MAX_LINKS) but stay two loops on purpose, because they differ where a refusal is
# decided: a missing component ends `resolve_target` with the rest of the path as written (the write creates it)
# but ends `check_ancestors` only after the directory it is missing from is checked; ENOTDIR reaches the writer
# of `resolve_target` as the OSError it is, while `check_ancestors` stops there (the write then fails on its own);
# `resolve_target` counts a link against MAX_LINKS before it checks the link (ELOOP, an OSError) while
# `check_ancestors` checks the directory holding it first and refuses too many links as an InputError. One walker
# would need a switch for each of these three, and which refusal wins, with which message, would hang on them.
MAX_LINKS = 40  # Linux's MAXSYMLINKS


def _without_lookup(resolved: str, part: str) -> str | None:
    """Where the component `part` leads from `resolved` when it names no entry ('' and '.': nowhere, '..': the
    parent); None when it names one, to look up."""
    if part in ("", "."):
        return resolved
    if part == "..":
        return os.path.dirname(resolved)
    return None


def _follow(link: str, resolved: str, pending: list[str]) -> tuple[str, list[str]]:
    """The walk after the symbolic link `link` (in the directory `resolved`): its target's components first, from /
    when the target is absolute."""
    target = os.readlink(link)
    return ("/" if target.startswith("/") else resolved), target.split("/") + pending


def resolve_target(path: PathLike) -> str:
    """The absolute path a write to `path` lands on: every symlink on the way followed and checked.

    Like os.path.realpath, but each link (the file's and its directories') must pass the
    protected-symlinks rule first, since following links ourselves bypasses the kernel's check.
    """
    shown = os.path.abspath(os.fspath(path))
    pending = shown.split("/")[1:]
    resolved = "/"
    links = 0
    while pending:
        part = pending.pop(0)
        lexical = _without_lookup(resolved, part)
        if lexical is not None:
            resolved = lexical
            continue
        candidate = os.path.join(resolved, part)
        try:
            st = os.lstat(candidate)  # other OSErrors (ENOTDIR, EACCES) reach the caller as they are
        except FileNotFoundError:
            return os.path.normpath(os.path.join(candidate, *pending))
        if not stat.S_ISLNK(st.st_mode):
            resolved = candidate
            continue
        links += 1
        if links > MAX_LINKS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), shown)
        _check_link_is_safe(candidate)
        resolved, pending = _follow(candidate, resolved, pending)
    return resolved


def _stat_or_none(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None


def check_output_path(out: PathLike, inputs: Iterable[PathLike]) -> None:
    """Refuse to write `out` when it is the same file (device and inode, through links) as an input."""
    try:
        ost = os.stat(os.fspath(out))
    except OSError:
        return  # does not exist (yet): it cannot be one of the inputs
    for src in inputs:
        try:
            ist = os.stat(os.fspath(src))
        except OSError:
            continue
        if (ost.st_dev, ost.st_ino) == (ist.st_dev, ist.st_ino):
            same = "" if os.path.abspath(os.fspath(out)) == os.path.abspath(os.fspath(src)) else " (the same file)"
            raise InputError(f"refusing to write {os.fspath(out)}: it is {os.fspath(src)}{same}, which migplan "
                             "reads as input", hint="write the output to another path")


def check_replaceable(path: PathLike) -> str:
    """The resolved target of `path` if `write_atomic`/`append_durable` may write it; InputError if not."""
    real = resolve_target(path)
    st = _stat_or_none(real)
    if st is not None:
        _refuse_special(os.fspath(path), real, st)
    return real


# --- atomic replace ---------------------------------------------------------------------------------

def write_atomic(path: PathLike, text: str | bytes, *, mode: int | None = None, private: bool = False,
                 keep_mode: bool = True, forbid: Iterable[PathLike] = ()) -> None:
    """Replace `path` with `text` (see `_write_atomic`); an OSError names the path and the operation."""
    try:
        _write_atomic(path, text, mode=mode, private=private, keep_mode=keep_mode, forbid=forbid)
    except OSError as err:
        raise named_oserror(err, "cannot write", path) from None


def named_oserror(err: OSError, operation: str, path: PathLike) -> OSError:
    """`err` with its message saying what was done to which file ("cannot write /x: File too large"), for errors
    of calls such as write(2) on a descriptor, which carry no file name; already named ones are kept."""
    if err.filename is None and err.strerror and os.fspath(path) in err.strerror:
        return err
    if err.filename is None:
        return OSError(err.errno, f"{operation} {os.fspath(path)}: {err.strerror or err}")
    return OSError(err.errno, f"{operation} {os.fspath(path)}: {err.strerror or err}"
                   + (f" ({err.filename})" if os.fspath(err.filename) != os.fspath(path) else ""))


def _write_atomic(path: PathLike, text: str | bytes, *, mode: int | None = None, private: bool = False,
                  keep_mode: bool = True, forbid: Iterable[PathLike] = ()) -> None:
    """Replace `path` with `text` (str as UTF-8, or bytes) atomically (see the module notes).

    Permissions: an existing file keeps its mode (unless `keep_mode=False`, then `mode` is applied);
    a new file gets `mode`, or 0o644 minus the umask when `mode` is None. `private` then clears the
    group/other write bits. Owner and group of a replaced file are kept (os.chown; refused when
    that is not permitted). Missing parent directories of a plain (non-link) path are created (0o700).
    """
    check_output_path(path, forbid)
    shown = os.fspath(path)
    if in_trusted_dir(shown):  # never through a link there (module notes): lstat, and rename over the name itself
        real = os.path.abspath(shown)
        directory = os.path.dirname(real)
        old = _lstat_or_none(real)
        if old is not None:
            _refuse_link_in_trusted(shown, old)
            _refuse_special(shown, real, old)
    else:
        real = resolve_target(path)
        directory = os.path.dirname(real)
        if not os.path.isdir(directory):
            if os.path.islink(shown):
                raise InputError(f"{shown} is a symbolic link to {real}, whose directory does not exist")
            os.makedirs(directory, mode=0o700, exist_ok=True)
        old = _stat_or_none(real)
        if old is not None:
            _refuse_special(shown, real, old)
    if old is not None and keep_mode:
        final = stat.S_IMODE(old.st_mode)
    elif mode is not None:
        final = mode
    else:
        final = 0o644 & ~_current_umask()
    if private:
        final &= ~_GROUP_OTHER_WRITE
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    fd, tmp = _create_temp(directory, os.path.basename(real))
    try:
        try:
            _write_all(fd, data)
            os.fsync(fd)
            if old is not None:
                _keep_owner(fd, shown, old)
            os.fchmod(fd, final)
        finally:
            os.close(fd)
        os.replace(tmp, real)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def _temp_token() -> str:
    return os.urandom(8).hex()


def _create_temp(directory: str, base: str) -> tuple[int, str]:
    """A new file `.BASE.RANDOM.tmp` in `directory`, created 0600 with O_CREAT | O_EXCL | O_NOFOLLOW: whatever
    sits at that name already (a planted link included) is never opened, written or followed; another name is
    drawn instead, a few times."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | _NOFOLLOW
    for _ in range(16):
        tmp = os.path.join(directory, f".{base}.{_temp_token()}.tmp")
        try:
            return os.open(tmp, flags, 0o600), tmp
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, f"cannot create a temporary file next to {os.path.join(directory, base)}: every "
                                "name tried exists")


def _lstat_or_none(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None


def _refuse_link_in_trusted(shown: str, st: os.stat_result) -> None:
    if stat.S_ISLNK(st.st_mode):
        raise InputError(f"{shown} is a symbolic link in a trusted state directory; refusing to follow it",
                         hint="remove the link")


def _keep_owner(fd: int, shown: str, old: os.stat_result) -> None:
    now = os.fstat(fd)
    if (now.st_uid, now.st_gid) == (old.st_uid, old.st_gid):
        return
    try:
        os.fchown(fd, old.st_uid, old.st_gid)
    except PermissionError:
        raise InputError(f"cannot keep the owner of {shown} (uid {old.st_uid}, gid {old.st_gid}): replacing it "
                         f"as uid {os.geteuid()} would change who owns it; refusing",
                         hint="run as the file's owner or as root, or write to another path") from None


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _current_umask() -> int:
    """The process umask without the racy umask(0)/umask(old) dance when /proc tells it."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    with _UMASK_LOCK:
        umask = os.umask(0o077)
        os.umask(umask)
    return umask


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


# --- durable appends ---------------------------------------------------------------------------------

def append_durable(path: PathLike, text: str | bytes, *, mode: int = 0o600, private: bool = True) -> None:
    """Append `text` durably (see `_append_durable`); an OSError names the path and the operation."""
    try:
        _append_durable(path, text, mode=mode, private=private)
    except OSError as err:
        raise named_oserror(err, "cannot append to", path) from None


def _append_durable(path: PathLike, text: str | bytes, *, mode: int = 0o600, private: bool = True) -> None:
    """Append `text` (a newline is added when missing) to a journal and fsync it before returning.

    Opens with O_APPEND (created with `mode`, 0o600 by default; the directory is fsynced when the
    file was created) and writes the whole text with one write(2) under a process-wide lock, so lines
    from several threads never interleave and O_APPEND keeps them whole against other processes.
    Symlinks are followed and non-regular targets refused as in `write_atomic`. `private` clears the
    group/other write bits of an existing file.
    """
    shown = os.fspath(path)
    strict = in_trusted_dir(shown)
    if strict:  # the name itself, opened O_NOFOLLOW below: a link there is refused, never followed
        real = os.path.abspath(shown)
        old = _lstat_or_none(real)
        if old is not None:
            _refuse_link_in_trusted(shown, old)
            _refuse_special(shown, real, old)
    else:
        real = check_replaceable(path)
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    if not data.endswith(b"\n"):
        data += b"\n"
    if not strict and not os.path.isdir(os.path.dirname(real)):
        os.makedirs(os.path.dirname(real), mode=0o700, exist_ok=True)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    created = False
    try:
        fd = os.open(real, flags | os.O_CREAT | os.O_EXCL, mode)
        created = True
    except FileExistsError:
        fd = _open_existing(shown, real, flags)
    try:
        st = os.fstat(fd)
        _refuse_special(shown, real, st)  # swapped in after the check (never blocks: O_NONBLOCK)
        if private and st.st_mode & _GROUP_OTHER_WRITE:
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & ~_GROUP_OTHER_WRITE)
        with _APPEND_LOCK:
            _write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        _fsync_dir(os.path.dirname(real))


def _open_existing(shown: str, real: str, flags: int) -> int:
    try:
        return os.open(real, flags)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENXIO):  # a link or a FIFO with no reader swapped in
            raise InputError(f"{shown} is not a regular file; migplan only appends to regular files") from None
        raise


# --- trusted state: directories only we (or root) can write, files opened without following links -------------

MAX_STATE_BYTES = 4 * 1024 * 1024  # a state file (run record, change times, last-applied layout)
MAX_JSON_DEPTH = 64  # nesting of a state document (migplan writes 4 or 5 levels)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


_TRUSTED: set[tuple[str, int, int]] = set()  # (absolute path, st_dev, st_ino) of each directory found trusted


def in_trusted_dir(path: PathLike) -> bool:
    """Whether `path`'s directory is one `check_trusted_dir` accepted in this process (same path, same inode)."""
    directory = os.path.dirname(os.path.abspath(os.fspath(path)))
    try:
        st = os.lstat(directory)
    except OSError:
        return False
    return (directory, st.st_dev, st.st_ino) in _TRUSTED


def check_trusted_dir(path: PathLike, what: str) -> None:
    """Refuse `path` unless it is a real directory (not a symbolic link) owned by us or root and writable by
    no group or other user, and every directory above it is safe too (`check_ancestors`): migplan, run as root
    from cron, trusts what it finds there. InputError naming `what` (an option or a role) and the path;
    FileNotFoundError when it does not exist."""
    shown = os.fspath(path)
    st = os.lstat(shown)
    check_ancestors(shown, what)
    hint = f"make it a directory owned by uid {os.geteuid()} (or root) with mode 0700 (chmod go-w), or name another"
    if stat.S_ISLNK(st.st_mode):
        raise InputError(f"{what} {shown} is a symbolic link; refusing to keep trusted state through it", hint=hint)
    if not stat.S_ISDIR(st.st_mode):
        raise InputError(f"{what} {shown} is {_kind(st.st_mode)}, not a directory", hint=hint)
    if st.st_uid not in (os.geteuid(), 0):
        raise InputError(f"{what} {shown} is owned by uid {st.st_uid}, not by uid {os.geteuid()} or root; "
                         "refusing to trust it", hint=hint)
    if st.st_mode & _GROUP_OTHER_WRITE:
        raise InputError(f"{what} {shown} is writable by group or others (mode {stat.S_IMODE(st.st_mode):04o}); "
                         "refusing to trust it", hint=hint)
    _TRUSTED.add((os.path.abspath(shown), st.st_dev, st.st_ino))


def check_ancestors(path: PathLike, what: str) -> None:
    """Refuse `path` when a directory above it could be changed by another user, as OpenSSH's StrictModes does:
    every directory looked up on the way to it (symbolic links followed, and the directories holding the links
    checked too) must be owned by root or by us and not writable by group or others; a sticky directory such as
    /tmp (mode 1777) may be, but then the entry in it that the path goes through must be owned by root or by us
    (nobody else can rename or remove it there). Otherwise another user could swap a directory or a link above
    a state directory that a root cron job trusts. `path` itself need not exist (nor its last directories: only
    those that exist are checked). InputError naming `what`, the path and the offending directory."""
    shown = os.fspath(path)
    me = os.geteuid()
    pending = os.path.abspath(shown).split("/")[1:]
    resolved = "/"
    links = 0
    while pending:
        part = pending.pop(0)
        lexical = _without_lookup(resolved, part)
        if lexical is not None:
            resolved = lexical
            continue
        candidate = os.path.join(resolved, part)
        try:
            entry = os.lstat(candidate)
        except (FileNotFoundError, NotADirectoryError):
            entry = None
        _check_ancestor(resolved, entry, candidate, shown, what, me)
        if entry is None:
            return
        if not stat.S_ISLNK(entry.st_mode):
            resolved = candidate
            continue
        links += 1
        if links > MAX_LINKS:
            raise InputError(f"{what} {shown}: too many levels of symbolic links")
        resolved, pending = _follow(candidate, resolved, pending)


def _check_ancestor(directory: str, entry: os.stat_result | None, candidate: str, shown: str, what: str,
                    me: int) -> None:
    st = os.stat(directory)
    hint = f"make every directory above {shown} owned by root (or uid {me}) and not writable by group or others"
    if st.st_uid not in (0, me):
        raise InputError(f"{what} {shown}: the directory {directory} above it is owned by uid {st.st_uid}, not by "
                         f"root or uid {me}; refusing to trust it", hint=hint)
    if not st.st_mode & _GROUP_OTHER_WRITE:
        return
    mode = f"mode {stat.S_IMODE(st.st_mode):04o}"
    if not st.st_mode & stat.S_ISVTX:
        raise InputError(f"{what} {shown}: the directory {directory} above it is writable by group or others "
                         f"({mode}); refusing to trust it", hint=hint)
    if entry is not None and entry.st_uid not in (0, me):
        raise InputError(f"{what} {shown}: {candidate} is owned by uid {entry.st_uid} in the shared sticky directory "
                         f"{directory} ({mode}); refusing to trust it", hint=hint)


def ensure_trusted_dir(path: PathLike, what: str) -> None:
    """`check_trusted_dir`, after creating `path` (mode 0700) when missing; only `path` itself is created, never a
    parent (InputError when the parent does not exist)."""
    shown = os.fspath(path)
    check_ancestors(shown, what)  # before creating anything under an untrusted directory
    try:
        os.mkdir(shown, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:
        raise InputError(f"{what} {shown}: its parent directory does not exist; migplan creates only the "
                         "directory named", hint="create the parent directory first, or name another") from None
    except OSError as err:
        raise InputError(f"{what} {shown}: cannot create it: {err.strerror}",
                         hint="run as root, or name a directory you can write") from None
    check_trusted_dir(shown, what)


def read_trusted(path: PathLike, *, max_bytes: int = MAX_STATE_BYTES) -> bytes:
    """The bytes of a state file, opened without following a symbolic link and without blocking on a FIFO
    (O_NOFOLLOW | O_NONBLOCK, then fstat): InputError for a link, anything but a regular file, or more than
    `max_bytes`; FileNotFoundError when it does not exist; other OSErrors name the path."""
    shown = os.fspath(path)
    try:
        fd = os.open(shown, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | _NOFOLLOW)
    except FileNotFoundError:
        raise
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise InputError(f"{shown} is a symbolic link; refusing to read state through it",
                             hint="remove the link") from None
        raise OSError(err.errno, f"cannot open {shown}: {err.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise InputError(f"{shown} is {_kind(st.st_mode)}, not a regular file; refusing to read it",
                             hint="remove it")
        if st.st_size > max_bytes:
            raise InputError(f"{shown} is {st.st_size} bytes, more than the {max_bytes} a state file may be",
                             hint="remove it")
        try:
            data = fh.read(max_bytes + 1)
        except OSError as err:
            raise OSError(err.errno, f"cannot read {shown}: {err.strerror}") from None
    if len(data) > max_bytes:
        raise InputError(f"{shown} is more than the {max_bytes} bytes a state file may be", hint="remove it")
    return data


def json_depth_ok(text: str, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether the JSON text nests arrays and objects at most `max_depth` deep (strings skipped), checked before
    parsing so a deep document is a clear error rather than a RecursionError."""
    if text.count("[") + text.count("{") <= max_depth:
        return True
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > max_depth:
                return False
        elif ch in "]}":
            depth -= 1
    return True


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads_state(data: bytes, source: str, *, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """A state file's JSON document: UTF-8, nested at most `max_depth` deep, no NaN or Infinity; InputError
    naming `source` otherwise."""
    import json

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"not UTF-8 text (byte {err.start})", source=source, hint="remove it") from None
    if not json_depth_ok(text, max_depth):
        raise InputError(f"JSON nested deeper than {max_depth} levels", source=source, hint="remove it")
    try:
        return json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as err:
        raise InputError(f"not valid JSON: {err}", source=source, hint="remove it") from None


# --- output paths given as options, checked before anything runs ---------------------------------------------

def check_output_option(path: str, option: str, *, kind: str = "file") -> None:
    """Refuse, before any host is touched, an output path that migplan could not write as the option means:
    `kind="file"`: an existing regular file, or a new name in an existing directory (symbolic links followed and
    checked as `write_atomic` does: a dangling link into a missing directory is refused); `kind="dir"`: an
    existing directory or a new name in an existing directory (migplan creates only the directory named).
    InputError naming `option` and `path`, one line."""
    if not path or "\0" in path:
        raise InputError(f"{option} {path!r}: not a path", hint=f"give {option} a file path")
    try:
        real = resolve_target(path)
    except InputError as err:
        raise InputError(f"{option}: {err.message}", hint=err.hint) from None
    except OSError as err:
        raise InputError(f"{option} {path}: {err.strerror}", hint="name a path that can be written") from None
    via = f" (a symbolic link to {real})" if os.path.islink(path) else ""
    try:
        st: os.stat_result | None = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise InputError(f"{option} {path}{via}: {err.strerror}", hint="name a path that can be written") from None
    if st is not None:
        want_dir = kind == "dir"
        if want_dir and not stat.S_ISDIR(st.st_mode):
            raise InputError(f"{option} {path}{via} is {_kind(st.st_mode)}, not a directory",
                             hint=f"give {option} a directory")
        if not want_dir and not stat.S_ISREG(st.st_mode):
            raise InputError(f"{option} {path}{via} is {_kind(st.st_mode)}, not a regular file; migplan only "
                             "writes regular files", hint=f"give {option} a regular file (or a new one)")
        target = real if want_dir else os.path.dirname(real)
        if not os.access(target, os.W_OK):
            raise InputError(f"{option} {path}{via}: no permission to write {target}",
                             hint="run as a user who may write there, or name another path")
        return
    parent = os.path.dirname(real) or "."
    if not os.path.isdir(parent):
        raise InputError(f"{option} {path}{via}: the directory {parent} does not exist; migplan does not "
                         "create it", hint=f"create {parent} first, or name a path in an existing directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"{option} {path}{via}: no permission to create it in {parent}",
                         hint="run as a user who may write there, or name another path")


def check_output_options(*given: tuple[str | None, str, str]) -> None:
    """`check_output_option` for each (path, option, kind) given (None: the option was left out)."""
    for path, option, kind in given:
        if path is not None:
            check_output_option(path, option, kind=kind)
