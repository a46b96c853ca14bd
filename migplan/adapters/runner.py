"""Running commands on a host: the `CommandRunner` protocol, a local runner, and transport errors.

A command is an argv list. Runners never hand a string to a shell they build from host output:
`command_line` checks every token and joins them with `shlex.quote`, which is the only form an
SSH server accepts (it runs the line with the login user's shell).

`DEFAULT_TIMEOUT` (60 s) is THE default time a remote command may take; other modules import it
rather than keeping their own constant.

Files (`put_file`, `get_file`): paths are absolute and checked by `check_remote_path`. A put is
atomic on the host: the data goes to a temporary name in the same directory, which is then renamed
over the path. Without a become prefix the login user does the writing (SFTP over the same SSH
connection for `SshRunner`, `migplan.files.write_atomic` for `LocalRunner`); so writing a
root-owned path then needs a login user that may write there. With a become prefix (`sudo -n`),
the put runs as the become user, through argv commands only (no shell string is built from data):

    sudo -n tee DIR/.NAME.migplan-RANDOM.tmp      (the data on stdin; tee's copy on stdout dropped)
    sudo -n chmod MODE DIR/.NAME.migplan-RANDOM.tmp
    sudo -n mv -f -T DIR/.NAME.migplan-RANDOM.tmp PATH    (rename(2); GNU -T: never "into" a directory)

and a get is `sudo -n head -c MAX+1 -- PATH`. A remote put replaces PATH itself: a symlink at PATH
is replaced, not followed (unlike `write_atomic` for local files).

A set of files in one directory (`put_files`: an apply's assignments.json, env files and last-applied.json)
costs one round trip: one SFTP session as the login user (`SshRunner`), Python's own calls (`LocalRunner`), or,
with a become prefix, ONE exec of `sudo -n sh -c FILES_SCRIPT`. FILES_SCRIPT is a constant of this module (the
same text on every call, checked by the tests); everything that varies (the directory, the names, modes, sizes
and contents) travels on stdin in a framed form (`files_payload`), never on the command line, and the script
checks every header field again before using it. Names are restricted to `NAME` or `SUB/NAME` of letters,
digits and `._-` (not starting with a dot), so no name is ever a pattern, an option or a path out of the
directory. Each file goes to a fresh temporary name next to it (`.NAME.migplan-TOKEN.tmp`, created 0600), is
chmod-ed and renamed over its name with `mv -f -T` only when it differs from what is there (`cmp -s` and the
mode; a symlink there always counts as different and is replaced, not followed), so an unchanged file keeps its
inode and mtime. All the contents are read (and their sizes checked against the header, and the end marker
after the last) before the first rename, so a cut-short upload replaces nothing. `prune` then removes, in one
sub-directory, the regular files whose name ends with its suffix and whose content begins with its marker,
except those just written: stale files that migplan wrote, never anything else. The directory and the
sub-directories written or pruned must be directories, not symbolic links (a link there would make migplan
write and remove files somewhere else): refused, on every runner.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shlex
import stat
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from migplan.adapters import children
from migplan.errors import InputError, MigplanError
from migplan.files import write_atomic
from migplan.text import printable

DEFAULT_TIMEOUT = 60.0  # the one default for a remote command (discover.py & co import it)
MAX_OUTPUT_BYTES = 32 * 1024 * 1024  # a host that floods us is failed, not buffered forever
MAX_TRANSFER_BYTES = 16 * 1024 * 1024  # default bound of get_file, and the most put_file sends
MAX_PATH = 4096  # PATH_MAX
MAX_PATH_COMPONENT = 255  # NAME_MAX
_MAX_TOKEN = 4096


@dataclass(frozen=True)
class Completed:
    """What a finished command left: its exit code and decoded output."""

    argv: tuple[str, ...]
    exit_code: int
    stdout: str
    stderr: str
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(frozen=True)
class FileToPut:
    """One file of a `put_files` set: `name` is `NAME` or `SUB/NAME` inside the set's directory."""

    name: str
    data: bytes
    mode: int = 0o644


@dataclass(frozen=True)
class Prune:
    """Which stale files `put_files` removes: in `subdir`, a regular file whose name is letters, digits and
    `._-` (not starting with a dot) ending with `suffix`, whose content begins with `marker`, and that the set
    does not write."""

    subdir: str
    suffix: str
    marker: str

    def matches(self, name: str) -> bool:
        return bool(_FILE_PART.fullmatch(name)) and name.endswith(self.suffix) and name != self.suffix


@dataclass(frozen=True)
class FilesDone:
    """What a `put_files` did, by name (`SUB/NAME` for files in a sub-directory), in the order it did it."""

    written: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()  # the same content and mode already there: not rewritten (mtime kept)
    removed: tuple[str, ...] = ()  # stale files of `prune`


class CommandRunner(Protocol):
    """Runs argv on one host and moves files to and from it.

    `LocalRunner`, `migplan.adapters.ssh.SshRunner` and `migplan.adapters.recording.RecordingRunner`
    implement it. `stdin` (bytes) is fed to the command, then end-of-file; None sends end-of-file
    at once. `put_file` writes `data` to an absolute path atomically with permission bits `mode`;
    `get_file` returns a regular file's content, failing when it is larger than `max_bytes`; `put_files`
    writes a set of files into one directory in one round trip, leaving unchanged ones alone, and removes the
    stale files `prune` names (module notes).
    """

    @property
    def host(self) -> str: ...

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT,
            stdin: bytes | None = None) -> Completed: ...

    def put_file(self, remote_path: str, data: bytes, *, mode: int = 0o644,
                 timeout: float = DEFAULT_TIMEOUT) -> None: ...

    def get_file(self, remote_path: str, *, max_bytes: int = MAX_TRANSFER_BYTES,
                 timeout: float = DEFAULT_TIMEOUT) -> bytes: ...

    def put_files(self, directory: str, files: Sequence[FileToPut], *, prune: Prune | None = None,
                  timeout: float = DEFAULT_TIMEOUT) -> FilesDone: ...


def run_many(runner: CommandRunner, argvs: Sequence[Sequence[str]], *,
             timeout: float = DEFAULT_TIMEOUT) -> list[Completed]:
    """Several READ-ONLY commands, in one round trip where the runner can (`run_batch`: `SshRunner` sends them
    in one SSH exec), else one by one. Never for mutating commands: a batch that times out may leave the rest of
    its commands running on the host, and one command's failure does not stop the next."""
    batch = getattr(runner, "run_batch", None)
    if batch is None or len(argvs) < 2:
        return [runner.run(list(a), timeout=timeout) for a in argvs]
    done: list[Completed] = batch([list(a) for a in argvs], timeout=timeout)
    return done


class Held(Protocol):
    """A command kept running to hold something (a lock) until `release()`, or until the connection dies."""

    def release(self) -> None: ...


# --- errors ------------------------------------------------------------------------------------

class HostError(MigplanError):
    """A failure on one host; fleet commands report it and carry on with the other hosts."""

    code = "host-error"

    def __init__(self, host: str, message: str, *, hint: str | None = None) -> None:
        super().__init__(f"{host}: {message}", hint=hint)
        self.host = host
        self.detail = message

    def as_dict(self) -> dict[str, str | None]:
        return {"code": self.code, "message": self.detail, "hint": self.hint}


class UnreachableError(HostError):
    code = "unreachable"


class HostKeyUnknownError(HostError):
    code = "host-key-unknown"


class HostKeyChangedError(HostError):
    code = "host-key-changed"


class HostKeyRevokedError(HostError):
    """known_hosts marks the key the server presented `@revoked`: refused, even with accept-new."""

    code = "host-key-revoked"


class AuthError(HostError):
    code = "auth-failed"


class BecomeError(HostError):
    """The privilege prefix (`sudo -n`) refused to run the command."""

    code = "become-failed"


class CommandTimeout(HostError):
    code = "timeout"


class ConnectionLost(HostError):
    code = "connection-lost"


class OutputTooLarge(HostError):
    code = "output-too-large"


class TransferError(HostError):
    """A put_file/get_file that failed on the host (permissions, a directory in the way, ...)."""

    code = "transfer-failed"


class RemoteFileMissing(TransferError):
    code = "remote-file-missing"


class HoldFailed(HostError):
    """A command meant to keep running (see `hold`) exited at once; `exit_code` and `stderr` say why."""

    code = "hold-failed"

    def __init__(self, host: str, message: str, *, exit_code: int, stderr: str) -> None:
        super().__init__(host, message)
        self.exit_code = exit_code
        self.stderr = stderr


class BadCommand(MigplanError):
    """A token that must not reach a shell (a programming error or unvalidated input)."""


class BadPath(BadCommand):
    """A file path for put_file/get_file that is not absolute, too long or has control characters."""


# --- helpers shared by runners -----------------------------------------------------------------

def command_line(argv: Sequence[str]) -> str:
    """Validated argv joined with `shlex.quote`: the exact string an SSH server gets."""
    if not argv:
        raise BadCommand("empty command")
    for token in argv:
        if not isinstance(token, str):
            raise BadCommand(f"command token {token!r} is not a string")
        if len(token) > _MAX_TOKEN or any(ord(c) < 0x20 or c == "\x7f" for c in token):
            raise BadCommand(f"command token {printable(token, 60)!r} has control characters or is too long")
    return " ".join(shlex.quote(t) for t in argv)


BATCH_MARK = "migplan-batch-"  # + 32 random hex digits per exec: the boundary of a batch's outputs
_BATCH_TOKEN = re.compile(BATCH_MARK + "[0-9a-f]{32}")


def batch_token() -> str:
    return BATCH_MARK + secrets.token_hex(16)


def batch_line(lines: Sequence[str]) -> str:
    """One `sh -c` line running each command line (already built by `command_line`) in turn; after command N it
    prints `\\nTOKEN N EXIT\\n` on stdout and `\\nTOKEN N\\n` on stderr, so `split_batch` can cut both streams
    apart. `sh -c` (not the login shell's own syntax): `$?`, `;` and `>&2` are POSIX; the script is quoted
    whole with shlex.quote, as any token.

    The token is NOT in the line: the script reads it from its stdin (`batch_stdin`, the first and only line)
    into a shell variable that is never exported, and runs each command with `</dev/null`. So the line (what
    /proc/PID/cmdline of the shell and of the login shell show) depends only on the commands, and a command
    finds the token neither in its argv, its environment, its stdin nor its parents' command lines. What it
    can still do (docs/fleet.md): read the shell's memory where the kernel lets it ptrace the shell (root, e.g.
    behind `sudo`; the same user with kernel.yama.ptrace_scope=0)."""
    if not lines:
        raise BadCommand("a batch needs commands")
    steps = "; ".join(f'{line} </dev/null; printf "\\n%s %d %d\\n" "$t" {n} "$?"; printf "\\n%s %d\\n" "$t" {n} >&2'
                      for n, line in enumerate(lines))
    script = 'IFS= read -r t || exit 97; case $t in migplan-batch-*) ;; *) exit 97 ;; esac; ' + steps
    return "sh -c " + shlex.quote(script)


def batch_stdin(token: str) -> bytes:
    """What the exec of a `batch_line` gets on stdin: the token on one line, then end-of-file."""
    if not _BATCH_TOKEN.fullmatch(token):
        raise BadCommand("a batch needs a batch token")
    return token.encode() + b"\n"


def split_batch(host: str, out: bytes, err: bytes, token: str, count: int) -> list[tuple[int, bytes, bytes]]:
    """(exit code, stdout, stderr) of each command of a `batch_line`. The markers must be exactly those the shell
    printed: `count` of them per stream, numbered 0..count-1 in order, nothing after the last. Anything else (a
    command that printed the token, which it is never shown; a shell that did not run the script) is a
    HostError, never a guess at which output belongs to which command."""
    cut_out = _cut(out, token, count, True)
    cut_err = _cut(err, token, count, False)
    if cut_out is None or cut_err is None:
        raise HostError(host, "the output of a batch of reads does not have the boundaries migplan sent (not a POSIX "
                        "sh on the host, or a command printed them); nothing of it is used")
    return [(code, o, e) for (code, o), (_, e) in zip(cut_out, cut_err, strict=True)]


def _cut(data: bytes, token: str, count: int, with_code: bool) -> list[tuple[int, bytes]] | None:
    parts: list[tuple[int, bytes]] = []
    at = 0
    for m in re.finditer(rb"\n" + re.escape(token.encode()) + rb" ([0-9]+)(?: ([0-9]+))?\n", data):
        if int(m.group(1)) != len(parts) or (m.group(2) is None) == with_code:
            return None
        parts.append((int(m.group(2)) if with_code else 0, data[at:m.start()]))
        at = m.end()
    if len(parts) != count or data[at:]:
        return None
    return parts


def check_remote_path(path: str) -> str:
    """An absolute, normalised path without control characters, '.'/'..' or empty components."""
    if not isinstance(path, str):
        raise BadPath(f"file path {path!r} is not a string")
    shown = printable(path, 80)
    if any(ord(c) < 0x20 or c == "\x7f" for c in path):
        raise BadPath(f"file path {shown!r} has control characters")
    if not path.startswith("/") or path == "/" or path.endswith("/"):
        raise BadPath(f"file path {shown!r} must be absolute and name a file")
    if len(path.encode("utf-8", "surrogateescape")) > MAX_PATH:
        raise BadPath(f"file path {shown!r} is longer than {MAX_PATH} bytes")
    for part in path[1:].split("/"):
        if part in ("", ".", ".."):
            raise BadPath(f"file path {shown!r} has an empty, '.' or '..' component")
        if len(part.encode("utf-8", "surrogateescape")) > MAX_PATH_COMPONENT:
            raise BadPath(f"file path {shown!r} has a component longer than {MAX_PATH_COMPONENT} bytes")
    return path


def check_mode(mode: int) -> int:
    if not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= 0o7777:
        raise BadCommand(f"file mode {mode!r} is not in 0..0o7777")
    return mode


def temp_name(path: str) -> str:
    """A fresh, unguessable name next to `path` for an atomic replace."""
    directory, _, base = path.rpartition("/")
    base = base[: MAX_PATH_COMPONENT - 40]
    return f"{directory}/.{base}.migplan-{secrets.token_hex(8)}.tmp"


# argv runner used by the become route: (argv without prefix, stdin, timeout, keep stdout) ->
# (exit code, stdout, stderr), with the become prefix applied and its failures raised.
RawRun = Callable[[Sequence[str], bytes | None, float, bool], tuple[int, bytes, bytes]]


def put_via_commands(host: str, raw: RawRun, path: str, data: bytes, mode: int, timeout: float) -> None:
    """put_file as the become user: tee to a temp name, chmod, mv -f -T (see the module notes)."""
    tmp = temp_name(path)
    code, _, err = raw(["tee", tmp], data, timeout, False)
    if code != 0:
        raw(["rm", "-f", tmp], None, timeout, True)
        raise _transfer_error(host, f"cannot write {tmp}", err)
    for argv in (["chmod", f"{mode:04o}", tmp], ["mv", "-f", "-T", tmp, path]):
        code, _, err = raw(argv, None, timeout, True)
        if code != 0:
            raw(["rm", "-f", tmp], None, timeout, True)
            raise _transfer_error(host, f"'{argv[0]}' for {path} failed", err)


# get_file as the become user (one fixed script, the path and the byte bound its only arguments): a link at
# the name is refused, never followed (to /etc/shadow or a device), and so is anything but a regular file, which
# `test -f` tells without opening it (a FIFO would block `head`); GNU `head -c` then reads no more than asked.
# Between the tests and the read only someone who may write the directory could swap the name: in a host's
# state_dir that is root (docs/fleet.md).
GET_SCRIPT = ('p=$1; if [ -L "$p" ]; then echo "migplan-get: is a symbolic link, not a regular file" >&2; exit 78; fi; '
              'if [ ! -e "$p" ]; then echo "migplan-get: No such file" >&2; exit 79; fi; '
              'if [ ! -f "$p" ]; then echo "migplan-get: not a regular file" >&2; exit 78; fi; '
              'exec head -c "$2" -- "$p"')
_GET_MISSING = 79


def get_via_commands(host: str, raw: RawRun, path: str, max_bytes: int, timeout: float) -> bytes:
    """get_file as the become user: `GET_SCRIPT` (bounded on the host already)."""
    code, out, err = raw(["sh", "-c", GET_SCRIPT, "sh", path, str(max_bytes + 1)], None, timeout, True)
    if code != 0:
        text = err.decode("utf-8", "replace")
        if code == _GET_MISSING or "No such file" in text:
            raise RemoteFileMissing(host, f"{path} does not exist")
        if text.startswith("migplan-get: "):
            raise TransferError(host, f"{path} {text.removeprefix('migplan-get: ').strip()}; refusing to read it")
        raise _transfer_error(host, f"cannot read {path}", err)
    if len(out) > max_bytes:
        raise OutputTooLarge(host, f"{path} is larger than {max_bytes} bytes")
    return out


def _transfer_error(host: str, what: str, stderr: bytes) -> TransferError:
    first = next((ln for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()), "")
    return TransferError(host, f"{what}: {printable(first, 200)}" if first else what)


def check_put_size(host: str, data: bytes) -> bytes:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise BadCommand("put_file data must be bytes")
    if len(data) > MAX_TRANSFER_BYTES:
        raise TransferError(host, f"refusing to send {len(data)} bytes (at most {MAX_TRANSFER_BYTES})")
    return bytes(data)


# --- a set of files in one round trip (put_files) ------------------------------------------------

MAX_SET_FILES = 4096  # files in one put_files
FILES_MAGIC = "migplan-files 1"
_FILE_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")  # room left for `.NAME.migplan-TOKEN.tmp`
_SET_DIR = re.compile(r"/[A-Za-z0-9@%+=:,./_-]*")  # no blank, quote or pattern character: one shell word
_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,16}")
_MARKER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}=")
_TOKEN = re.compile(r"[0-9a-f]{32}")

# The one script `put_files` runs through a become prefix (`sudo -n sh -c FILES_SCRIPT`): the same text on every
# call; all it works on comes on stdin (`files_payload`) and is checked here again. One line (a command token
# has no control characters); POSIX sh, cmp and find, plus GNU `head -c` (reads no further than asked) and
# `mv -T`.
# Phase 1 reads every file to `.NAME.migplan-TOKEN.tmp` (0600, noclobber) and checks its size; nothing is
# replaced before the end marker is read. Phase 2: `cmp -s` and the mode decide whether a file is replaced
# (chmod, `mv -f -T`) or left alone. Phase 3 prunes (its directory is checked before phase 2). `fail` removes
# this call's temporary files.
FILES_SCRIPT = " ".join(line.strip() for line in r"""
export LC_ALL=C; d=/nonexistent; k=none;
fail() { rm -f -- "$d"/.*".migplan-$k.tmp" "$d"/*/.*".migplan-$k.tmp"; printf "migplan-files: %s\n" "$1" >&2;
  exit 1; };
IFS= read -r l || fail "no file set on stdin";
[ "$l" = "migplan-files 1" ] || fail "stdin is not a migplan file set";
IFS= read -r d && IFS= read -r k || fail "the header is cut short";
case $k in "" | *[!0-9a-f]*) k=none; fail "bad token";; esac;
case $d in /*) ;; *) d=/nonexistent; fail "the directory is not absolute";; esac;
case $d in *[!A-Za-z0-9@%+=:,./_-]* | */../* | */.. | */./* | */. | *//* | */) d=/nonexistent;
  fail "bad directory";; esac;
[ -h "$d" ] && fail "$d is a symbolic link";
mkdir -p -- "$d" && [ -d "$d" ] || fail "cannot create the directory $d";
printf "begin %s\n" "$k";
todo=""; keep=" "; pd=""; sx=""; mk=""; ended=0;
while IFS=" " read -r w a b c; do
  case $w in
  f)
    case $a in [0-7][0-7][0-7][0-7]) ;; *) fail "bad mode";; esac;
    case $b in "" | *[!0-9]*) fail "bad size";; esac;
    case $c in "" | [!A-Za-z0-9_]* | */[!A-Za-z0-9_]* | */ | */*/* | *[!A-Za-z0-9._/-]*) fail "bad file name";; esac;
    case $keep in *" $c "*) fail "$c is twice in the set";; esac;
    case $c in */*) s=$d/${c%/*};; *) s=$d;; esac;
    if [ "$s" != "$d" ]; then [ -h "$s" ] && fail "$s is a symbolic link";
      mkdir -p -- "$s" && [ -d "$s" ] || fail "cannot create the directory $s"; fi;
    t=$s/.${c##*/}.migplan-$k.tmp;
    (umask 077 && set -C && head -c "$b" > "$t") || fail "cannot write $t";
    n=$(wc -c < "$t"); [ "$((n))" -eq "$b" ] || fail "the content of $c is cut short";
    todo="$todo $a:$c"; keep="$keep$c ";;
  p)
    case $a in "" | [!A-Za-z0-9_]* | *[!A-Za-z0-9._-]*) fail "bad prune directory";; esac;
    case $b in .[A-Za-z0-9]*) ;; *) fail "bad prune suffix";; esac;
    case $b in .*[!A-Za-z0-9]*) fail "bad prune suffix";; esac;
    case $c in "" | *[!A-Za-z0-9_=]*) fail "bad prune marker";; esac;
    pd=$a; sx=$b; mk=$c;;
  end) ended=1; break;;
  *) fail "bad header line";;
  esac;
done;
[ "$ended" = 1 ] || fail "the file set is cut short";
n=$(head -c 1 | wc -c); [ "$((n))" -eq 0 ] || fail "data after the end of the file set";
q=$d/$pd; [ -n "$pd" ] && [ -h "$q" ] && fail "$q is a symbolic link";
for e in $todo; do
  m=${e%%:*}; c=${e#*:}; p=$d/$c;
  case $c in */*) s=$d/${c%/*};; *) s=$d;; esac;
  t=$s/.${c##*/}.migplan-$k.tmp;
  if [ -f "$p" ] && [ ! -h "$p" ] && cmp -s -- "$t" "$p" && [ -n "$(find "$p" -prune -perm "$m" -print)" ]; then
    rm -f -- "$t"; printf "%s %s\n" = "$c";
  else
    chmod "$m" "$t" && mv -f -T -- "$t" "$p" || fail "cannot replace $p"; printf "%s %s\n" + "$c";
  fi;
done;
if [ -n "$pd" ]; then
  if [ -d "$q" ]; then
    for f in "$q"/*"$sx"; do
      n=${f##*/};
      case $n in "$sx" | [!A-Za-z0-9_]* | *[!A-Za-z0-9._-]*) continue;; esac;
      case $keep in *" $pd/$n "*) continue;; esac;
      [ -f "$f" ] && [ ! -h "$f" ] || continue;
      [ "$(head -c "${#mk}" -- "$f")" = "$mk" ] || continue;
      rm -f -- "$f" || fail "cannot remove $f"; printf "%s %s\n" - "$pd/$n";
    done;
  fi;
fi;
printf "done %s\n" "$k"
""".strip().splitlines())


def files_argv() -> list[str]:
    """The command `put_files` runs through a become prefix (always the same: the data is on stdin)."""
    return ["sh", "-c", FILES_SCRIPT]


def check_file_set(host: str, directory: str, files: Sequence[FileToPut],
                   prune: Prune | None) -> tuple[str, tuple[FileToPut, ...]]:
    """The checked directory and files of a `put_files` (module notes): BadPath/BadCommand for what no runner
    may send, TransferError for a set larger than MAX_TRANSFER_BYTES."""
    path = check_remote_path(directory)
    if not _SET_DIR.fullmatch(path):
        raise BadPath(f"directory {printable(path, 80)!r} has characters other than letters, digits and "
                      "@%+=:,./_-")
    items = tuple(files)
    if len(items) > MAX_SET_FILES:
        raise BadCommand(f"{len(items)} files in one set (at most {MAX_SET_FILES})")
    seen: set[str] = set()
    total = 0
    for f in items:
        if not isinstance(f, FileToPut) or not isinstance(f.name, str):
            raise BadCommand(f"{f!r} is not a FileToPut")
        parts = f.name.split("/")
        if len(parts) > 2 or not all(_FILE_PART.fullmatch(p) for p in parts):
            raise BadPath(f"file name {printable(f.name, 80)!r} is not NAME or SUB/NAME of letters, digits and ._- "
                          "(not starting with a dot)")
        if f.name in seen:
            raise BadCommand(f"{f.name} is twice in the set")
        seen.add(f.name)
        check_remote_path(f"{path}/{f.name}")
        check_mode(f.mode)
        total += len(check_put_size(host, f.data))
    if total > MAX_TRANSFER_BYTES:
        raise TransferError(host, f"refusing to send {total} bytes (at most {MAX_TRANSFER_BYTES})")
    if prune is not None and not (isinstance(prune, Prune) and _FILE_PART.fullmatch(prune.subdir)
                                  and _SUFFIX.fullmatch(prune.suffix) and _MARKER.fullmatch(prune.marker)):
        raise BadCommand(f"{prune!r} is not a sub-directory, a suffix (.ext) and a marker (KEY=)")
    return path, items


def files_payload(directory: str, files: Sequence[FileToPut], prune: Prune | None, token: str) -> bytes:
    """FILES_SCRIPT's stdin: `migplan-files 1`, the directory, the token, `p SUBDIR SUFFIX MARKER` (when
    pruning), per file `f MODE SIZE NAME` and then exactly SIZE bytes, and `end` (all checked by
    `check_file_set` first)."""
    if not _TOKEN.fullmatch(token):
        raise BadCommand("a file set needs a token of 32 hex digits")
    out = [f"{FILES_MAGIC}\n{directory}\n{token}\n".encode()]
    if prune is not None:
        out.append(f"p {prune.subdir} {prune.suffix} {prune.marker}\n".encode())
    for f in files:
        out += [f"f {f.mode:04o} {len(f.data)} {f.name}\n".encode(), bytes(f.data)]
    out.append(b"end\n")
    return b"".join(out)


def parse_files_output(host: str, out: bytes, token: str, files: Sequence[FileToPut],
                       prune: Prune | None) -> FilesDone:
    """FILES_SCRIPT's stdout: after `begin TOKEN` (anything a login shell printed before it is ignored), one line
    per file (`+ NAME` written, `= NAME` unchanged), one per pruned file (`- SUB/NAME`), then `done TOKEN`.
    Anything else is a HostError, never a guess (only names this set could touch are accepted)."""
    lines = out.decode("utf-8", "replace").split("\n")
    begin = f"begin {token}"
    start = len(lines) - 1 - lines[::-1].index(begin) if begin in lines else -1
    body = lines[start + 1:] if start >= 0 else []
    names = [f.name for f in files]
    written: list[str] = []
    unchanged: list[str] = []
    removed: list[str] = []
    bad = start < 0 or body[-2:] != [f"done {token}", ""]
    for line in body[:-2] if not bad else ():
        tag, _, name = line.partition(" ")
        if tag in "+=" and tag and name in names and name not in written and name not in unchanged:
            (written if tag == "+" else unchanged).append(name)
        elif tag == "-" and prune is not None and name.startswith(prune.subdir + "/") and name not in names \
                and prune.matches(name[len(prune.subdir) + 1:]) and name not in removed:
            removed.append(name)
        else:
            bad = True
    if bad or sorted((*written, *unchanged)) != sorted(names):
        raise HostError(host, "the file set's script did not report what it did as migplan's script does (not a "
                        "POSIX sh with GNU coreutils on the host?); the files may be partly written")
    return FilesDone(tuple(written), tuple(unchanged), tuple(removed))


def put_files_via_script(host: str, raw: RawRun, directory: str, files: Sequence[FileToPut], prune: Prune | None,
                         timeout: float) -> FilesDone:
    """put_files as the become user: one exec of FILES_SCRIPT, the set on stdin (module notes)."""
    token = secrets.token_hex(16)
    code, out, err = raw(files_argv(), files_payload(directory, files, prune, token), timeout, True)
    if code != 0:
        raise _transfer_error(host, f"cannot write the files in {directory}", err)
    return parse_files_output(host, out, token, files, prune)


class FileOps(Protocol):
    """What `put_files_with` needs of a file system (this machine's, or a host's over SFTP). Every call may
    raise OSError; none follows a symbolic link at `path` except `head`, which is only called on what
    `lstat` found to be a regular file."""

    def lstat(self, path: str) -> tuple[str, int] | None: ...  # ("dir"|"file"|"link"|"other", mode bits)

    def mkdir(self, path: str) -> None: ...

    def listdir(self, path: str) -> list[str]: ...

    def head(self, path: str, size: int) -> bytes: ...  # at most `size` bytes of a regular file

    def create(self, path: str, data: bytes, mode: int) -> None: ...  # a new file (exclusive), exactly `mode`

    def rename(self, src: str, dst: str) -> None: ...  # rename(2): replaces dst (a link there, not its target)

    def remove(self, path: str) -> None: ...


def file_kind(mode: int) -> str:
    return "link" if stat.S_ISLNK(mode) else "dir" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) \
        else "other"


def _real_dir(ops: FileOps, host: str, path: str, *, create: bool) -> bool:
    """Whether `path` is a directory (made, with its missing parents, when `create`); a link or a file there is
    a TransferError."""
    found = ops.lstat(path)
    if found is None and create:
        parent = path.rpartition("/")[0]
        if parent and ops.lstat(parent) is None:
            _real_dir(ops, host, parent, create=True)
        ops.mkdir(path)
        found = ops.lstat(path)
    if found is None:
        return False
    if found[0] == "link":
        raise TransferError(host, f"{path} is a symbolic link; migplan writes only into a real directory there")
    if found[0] != "dir":
        raise TransferError(host, f"{path} is not a directory")
    return True


def put_files_with(ops: FileOps, host: str, directory: str, files: Sequence[FileToPut],
                   prune: Prune | None) -> FilesDone:
    """put_files as FILES_SCRIPT does it, through `ops` (the set already checked by `check_file_set`): a file
    with the same content and mode is left alone, any other is written to a temporary name and renamed over its
    name; then the stale files of `prune` are removed."""
    _real_dir(ops, host, directory, create=True)
    for sub in dict.fromkeys(f.name.rpartition("/")[0] for f in files if "/" in f.name):
        _real_dir(ops, host, f"{directory}/{sub}", create=True)
    where = f"{directory}/{prune.subdir}" if prune is not None else ""
    pruned = prune is not None and _real_dir(ops, host, where, create=False)  # refused before anything is written
    written: list[str] = []
    unchanged: list[str] = []
    for f in files:
        path = f"{directory}/{f.name}"
        found = ops.lstat(path)
        if found == ("file", f.mode) and ops.head(path, len(f.data) + 1) == f.data:
            unchanged.append(f.name)
            continue
        tmp = temp_name(path)
        try:
            ops.create(tmp, f.data, f.mode)
            ops.rename(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                ops.remove(tmp)
            raise
        written.append(f.name)
    removed: list[str] = []
    if prune is not None and pruned:
        names = {f.name for f in files}
        marker = prune.marker.encode()
        for name in sorted(ops.listdir(where)):
            rel, path = f"{prune.subdir}/{name}", f"{where}/{name}"
            found = ops.lstat(path) if prune.matches(name) and rel not in names else None
            if found is not None and found[0] == "file" and ops.head(path, len(marker)) == marker:
                ops.remove(path)
                removed.append(rel)
    return FilesDone(tuple(written), tuple(unchanged), tuple(removed))


class LocalFiles:
    """`FileOps` on this machine (os calls; a created file is fsynced before its rename)."""

    def lstat(self, path: str) -> tuple[str, int] | None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return None
        return file_kind(st.st_mode), stat.S_IMODE(st.st_mode)

    def mkdir(self, path: str) -> None:
        os.mkdir(path)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def head(self, path: str, size: int) -> bytes:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                return b""
            return fh.read(size)

    def create(self, path: str, data: bytes, mode: int) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), mode)
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def remove(self, path: str) -> None:
        os.unlink(path)


def check_become(host: str, become: Sequence[str], done: Completed) -> Completed:
    """Raise BecomeError when the privilege prefix itself failed (sudo prints `sudo: ...`).

    `sudo -n` exits 1 with "sudo: a password is required" (or "... is not in the sudoers file",
    "a terminal is required") before running anything.
    """
    if not become or done.ok:
        return done
    first = next((ln for ln in done.stderr.splitlines() if ln.strip()), "")
    prog = become[0].rsplit("/", 1)[-1]
    if first.startswith(f"{prog}: "):
        raise BecomeError(host, f"'{' '.join(become)}' failed: {printable(first, 200)}",
                          hint=f"allow the login user to run nvidia-smi with '{' '.join(become)}' "
                               "without a password (sudoers NOPASSWD), or log in as root")
    return done


# --- local runner --------------------------------------------------------------------------------

class _LocalHeld:
    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc

    def release(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()  # the holder (`cat`) reads end-of-file and exits
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        children.untrack(self._proc)


class LocalRunner:
    """Runs argv on this machine with subprocess (no shell), optionally behind a become prefix."""

    def __init__(self, *, become: Sequence[str] = (), host: str = "localhost",
                 env: dict[str, str] | None = None) -> None:
        self._become = tuple(become)
        self._host = host
        self._env = env

    @property
    def host(self) -> str:
        return self._host

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT,
            stdin: bytes | None = None) -> Completed:
        full = (*self._become, *argv)
        start = time.monotonic()
        code, out, err = self._spawn(full, stdin, timeout)
        done = Completed(tuple(full), code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                         time.monotonic() - start)
        return check_become(self._host, self._become, done)

    def hold(self, argv: Sequence[str], *, ready: str, timeout: float = DEFAULT_TIMEOUT) -> Held:
        """Start `argv` (without the become prefix) and keep it running, its stdin open, until `release()`;
        it counts as started once its output contains `ready`. If it exits first: HoldFailed."""
        command_line(argv)
        try:
            proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, env=self._env)
        except OSError as err:
            raise HostError(self._host, f"cannot run '{argv[0]}': {err.strerror}") from None
        children.track(proc)  # the lock holder: killed with migplan on a stop signal (the kernel drops the flock)
        assert proc.stdout is not None
        seen, deadline = b"", time.monotonic() + timeout
        while ready.encode() not in seen:
            line = proc.stdout.readline()  # the holder prints `ready` on a line of its own, then blocks
            if not line:
                code = proc.wait()
                children.untrack(proc)
                raise HoldFailed(self._host, f"'{argv[0]}' exited ({code}) before it was ready", exit_code=code,
                                 stderr=seen.decode("utf-8", "replace"))
            seen += line
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                children.untrack(proc)
                raise CommandTimeout(self._host, f"'{argv[0]}' was not ready within {timeout:g} s")
        return _LocalHeld(proc)

    def _spawn(self, full: tuple[str, ...], stdin: bytes | None, timeout: float) -> tuple[int, bytes, bytes]:
        command_line(full)  # same token rules as over SSH
        try:  # Popen + communicate is subprocess.run's own body, with the child registered while it runs
            proc = subprocess.Popen(list(full), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self._env,
                                    stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE)
        except FileNotFoundError:
            return 127, b"", f"{full[0]}: command not found".encode()
        except OSError as failed:
            raise HostError(self._host, f"cannot run '{full[0]}': {failed.strerror}") from None
        children.track(proc)  # a stop signal kills it with migplan (adapters/children.py)
        try:
            out, err = proc.communicate(input=stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise CommandTimeout(self._host, f"'{full[0]}' did not finish within {timeout:g} s") from None
        finally:
            children.untrack(proc)
        if len(out) + len(err) > MAX_OUTPUT_BYTES:
            raise OutputTooLarge(self._host, f"'{full[0]}' printed more than {MAX_OUTPUT_BYTES} bytes")
        return proc.returncode, out, err

    def _raw(self, argv: Sequence[str], stdin: bytes | None, timeout: float,
             keep_stdout: bool) -> tuple[int, bytes, bytes]:
        full = (*self._become, *argv)
        code, out, err = self._spawn(full, stdin, timeout)
        check_become(self._host, self._become, Completed(full, code, "", err.decode("utf-8", "replace")))
        return code, out if keep_stdout else b"", err

    def put_file(self, remote_path: str, data: bytes, *, mode: int = 0o644,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        """Atomic write with exactly `mode`: `write_atomic`, or the become route (module notes)."""
        path = check_remote_path(remote_path)
        body = check_put_size(self._host, data)
        check_mode(mode)
        if self._become:
            put_via_commands(self._host, self._raw, path, body, mode, timeout)
            return
        try:
            write_atomic(path, body, mode=mode, keep_mode=False)
        except InputError as err:
            raise TransferError(self._host, err.message, hint=err.hint) from None
        except OSError as err:
            raise TransferError(self._host, f"cannot write {path}: {err.strerror}") from None

    def put_files(self, directory: str, files: Sequence[FileToPut], *, prune: Prune | None = None,
                  timeout: float = DEFAULT_TIMEOUT) -> FilesDone:
        """A set of files in one directory (module notes): os calls, or FILES_SCRIPT through the become prefix."""
        path, items = check_file_set(self._host, directory, files, prune)
        if self._become:
            return put_files_via_script(self._host, self._raw, path, items, prune, timeout)
        try:
            return put_files_with(LocalFiles(), self._host, path, items, prune)
        except OSError as err:
            where = f" ({err.filename})" if err.filename else ""
            raise TransferError(self._host, f"cannot write the files in {path}: {err.strerror}{where}") from None

    def get_file(self, remote_path: str, *, max_bytes: int = MAX_TRANSFER_BYTES,
                 timeout: float = DEFAULT_TIMEOUT) -> bytes:
        path = check_remote_path(remote_path)
        if self._become:
            return get_via_commands(self._host, self._raw, path, max_bytes, timeout)
        # O_NOFOLLOW: a link planted in the host's state directory is refused, never followed (to /etc/shadow, a
        # device); O_NONBLOCK: a FIFO there never blocks the open; fstat then refuses all but a regular file.
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            raise RemoteFileMissing(self._host, f"{path} does not exist") from None
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise TransferError(self._host, f"{path} is a symbolic link, not a regular file; refusing to "
                                                "follow it") from None
            raise TransferError(self._host, f"cannot read {path}: {err.strerror}") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > max_bytes:  # before fdopen, which has its own errors
            os.close(fd)
            if not stat.S_ISREG(st.st_mode):
                raise TransferError(self._host, f"{path} is not a regular file")
            raise OutputTooLarge(self._host, f"{path} is larger than {max_bytes} bytes")
        with os.fdopen(fd, "rb") as fh:
            try:
                data = fh.read(max_bytes + 1)
            except OSError as err:
                raise TransferError(self._host, f"cannot read {path}: {err.strerror}") from None
        if len(data) > max_bytes:
            raise OutputTooLarge(self._host, f"{path} is larger than {max_bytes} bytes")
        return data
