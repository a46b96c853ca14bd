"""The replan state directory (default /var/lib/migplan): its lock, the runs it keeps, and GPU change times.

    replan.lock          flock(2)-held for the whole run; a second run finds it taken and exits at once.
                         The kernel drops the lock when the process dies, so a killed run never blocks the next.
    runs/RUN.json        one per run: when, the decision line, the result, the plan summary (newest N kept)
    plans/RUN.json       the plan document of that run (same N)
    gpu-changes.json     {"host:index": unix time of the last change migplan made to that GPU}
    workload-hosts.json  {"workload": the host whose assignments named it when that host last answered}
    sizing.json          `sizing: auto`'s calibration: the last sweep's figures per rule (history/sweep.py `record`)
    k8s-inflight.json    `replan --via gpu-operator`: {"node": {"previous", "config", "cordoned"}} for each node
                         whose change has begun and not ended (a run killed mid-change leaves it for the next)
    journal/, fetched/   apply journals of each run; the histories `replan --collect` fetched

Every file is replaced atomically (migplan.files.write_atomic), so a crash leaves the previous version.

Trusted: replan runs as root from cron and acts on what it reads here, so the directory and each of its
subdirectories must be a real directory (not a symbolic link) owned by the running user or root and not
writable by group or others (`files.check_trusted_dir`), below directories nobody else can change
(`files.check_ancestors`: owned by root or us, not group/other-writable unless sticky, like /tmp, whose entry
must then be ours or root's); every file is opened without following a link and only if it is a regular file
(O_NOFOLLOW | O_NONBLOCK, then fstat: a FIFO never blocks), read up to MAX_STATE_BYTES and parsed nested at
most MAX_JSON_DEPTH deep; every write there (here, in replan's plan and journal writers) refuses a link at the
name and renames over the name itself (`files.write_atomic` and `append_durable` in a trusted directory).
Anything else is an InputError (exit 2) naming the path, before any host is touched.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from migplan.errors import InputError, MigplanError
from migplan.files import (
    MAX_STATE_BYTES,
    check_trusted_dir,
    ensure_trusted_dir,
    loads_state,
    read_trusted,
    write_atomic,
)

DEFAULT_STATE_DIR = "/var/lib/migplan"
MAX_RUN_FILE = MAX_STATE_BYTES
_SUBDIRS = ("runs", "plans", "journal", "fetched")
_WHAT = "the state directory"


def state_dir_option(option: object, configured: object) -> str:
    """What names the state directory in an error: the option, the config key, or the default's own words."""
    return "--state-dir" if option else "replan.state_dir" if configured else f"{_WHAT} (default)"


class Locked(MigplanError):
    """Another replan holds the state directory's lock."""


class StateDir:
    def __init__(self, path: str | os.PathLike[str], what: str = _WHAT) -> None:
        """`what` names where the path came from in every refusal (`--state-dir`, `replan.state_dir`)."""
        self.path = Path(path)
        self.what = what

    def prepare(self) -> None:
        """Create the directory (only it, never a parent) and its subdirectories when missing, and check that
        each is trusted (module notes); InputError otherwise. Called by `lock`; safe to call again."""
        ensure_trusted_dir(self.path, self.what)
        for sub in _SUBDIRS:
            ensure_trusted_dir(self.path / sub, self.what + "'s")

    def subdir(self, name: str) -> Path:
        """`journal`, `fetched`...: the subdirectory, created and checked (`prepare`)."""
        ensure_trusted_dir(self.path / name, self.what + "'s")
        return self.path / name

    def check(self) -> bool:
        """For readers (`replan --history`): False when the directory does not exist; InputError when it (or a
        subdirectory that exists) is not trusted."""
        try:
            check_trusted_dir(self.path, self.what)
        except FileNotFoundError:
            return False
        for sub in _SUBDIRS:
            with contextlib.suppress(FileNotFoundError):
                check_trusted_dir(self.path / sub, self.what + "'s")
        return True

    def _read(self, name: str) -> Any:
        """A state file's document; None when it does not exist; InputError when it is not a regular file, too
        large, too deep or not JSON."""
        f = self.path / name
        try:
            data = read_trusted(f)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise InputError(f"unreadable: {e.strerror or e}", source=str(f), hint="remove it") from None
        return loads_state(data, str(f))

    def _write(self, path: Path, text: str) -> None:
        """Replace a state file; a link or anything but a regular file in its place is refused (not followed)."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise InputError(f"{path} is not a regular file (a symbolic link, a FIFO or a device); refusing to "
                             "replace it", hint="remove it")
        write_atomic(path, text, mode=0o600)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        self.prepare()
        lock = self.path / "replan.lock"
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0),
                         0o600)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENXIO):
                raise InputError(f"{lock} is a symbolic link or a FIFO; refusing to open it", hint="remove it") \
                    from None
            raise InputError(f"cannot open the lock: {e.strerror}", source=str(lock),
                             hint="run as root, or pass --state-dir DIR") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                what = "not a regular file" if not stat.S_ISREG(st.st_mode) else f"a file with {st.st_nlink} links"
                raise InputError(f"{lock} is {what}; refusing to use it as the lock", hint="remove it")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise Locked(f"another replan is running (lock {self.path / 'replan.lock'} is held)") from None
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            yield
        finally:
            os.close(fd)  # closing releases the flock

    # --- runs --------------------------------------------------------------------------------------

    def record(self, run_id: str, run: Mapping[str, Any], plan_doc: Mapping[str, Any] | None, keep: int) -> None:
        self.prepare()
        if plan_doc is not None:
            self._write(self.path / "plans" / f"{run_id}.json", json.dumps(plan_doc, indent=1) + "\n")
        self._write(self.path / "runs" / f"{run_id}.json", json.dumps(dict(run), indent=1) + "\n")
        for sub in ("runs", "plans"):
            files = sorted((self.path / sub).glob("*.json"))
            for old in files[:-keep] if keep > 0 else []:  # unlink removes a link itself, never its target
                with contextlib.suppress(FileNotFoundError):
                    old.unlink()

    def runs(self, last: int = 20) -> list[dict[str, Any]]:
        """The newest `last` runs, newest first; unreadable files are reported as such, never raised."""
        if not self.check():
            return []
        out = []
        for f in sorted((self.path / "runs").glob("*.json"), reverse=True)[:last]:
            try:
                doc = self._read(f"runs/{f.name}")
                out.append(doc if isinstance(doc, dict) else {"id": f.stem, "error": "not a JSON object"})
            except InputError as e:
                out.append({"id": f.stem, "error": f"unreadable: {e.message}"})
        return out

    def plan_path(self, run_id: str) -> Path:
        return self.path / "plans" / f"{run_id}.json"

    # --- GPU change times --------------------------------------------------------------------------

    def last_changed(self) -> dict[tuple[str, int], float]:
        doc = self._read("gpu-changes.json")
        out: dict[tuple[str, int], float] = {}
        for key, t in (doc.items() if isinstance(doc, dict) else ()):
            host, _, idx = str(key).rpartition(":")
            # ASCII digits only: int() takes other scripts' digits ("\u0663") as numbers
            if host and idx.isascii() and idx.isdigit() and len(idx) < 6 and isinstance(t, (int, float)) \
                    and not isinstance(t, bool):
                out[(host, int(idx))] = float(t)
        return out

    def mark_changed(self, keys: list[tuple[str, int]], when: float) -> None:
        if not keys:
            return
        times = self.last_changed()
        times.update({k: when for k in keys})
        doc = {f"{h}:{i}": t for (h, i), t in sorted(times.items())}
        self._write(self.path / "gpu-changes.json", json.dumps(doc, indent=1) + "\n")

    # --- Kubernetes nodes whose change through the MIG manager has begun and not ended ------------------------

    def k8s_inflight(self) -> dict[str, dict[str, Any]]:
        """node -> {"previous": its label before, "config": the label set, "cordoned": cordoned by migplan}."""
        doc = self._read("k8s-inflight.json")
        return {str(k): v for k, v in (doc.items() if isinstance(doc, dict) else ()) if isinstance(v, dict)}

    def set_k8s_inflight(self, node: str, entry: Mapping[str, Any] | None) -> None:
        """Record that `node`'s change begins (`entry`) or has ended (None); written before the first write to it."""
        doc = self.k8s_inflight()
        if entry is None and node not in doc:
            return
        if entry is None:
            doc.pop(node)
        else:
            doc[node] = dict(entry)
        self._write(self.path / "k8s-inflight.json", json.dumps(dict(sorted(doc.items())), indent=1) + "\n")

    # --- sizing: auto's calibration ------------------------------------------------------------------------------

    def sizing_record(self) -> Any:
        """The calibration `sizing: auto` last wrote (a JSON document, checked by its reader), or None."""
        if not self.check():
            return None
        return self._read("sizing.json")

    def set_sizing_record(self, doc: Mapping[str, Any]) -> None:
        self.prepare()
        self._write(self.path / "sizing.json", json.dumps(dict(doc), indent=1) + "\n")

    # --- where each workload was last assigned (hosts that answered) -------------------------------------------

    def last_hosts(self) -> dict[str, str]:
        """workload -> the host whose assignments.json named it when that host last answered (`remember_hosts`)."""
        doc = self._read("workload-hosts.json")
        return {str(k): str(v) for k, v in (doc.items() if isinstance(doc, dict) else ()) if isinstance(v, str)}

    def remember_hosts(self, answered: set[str], placed: Mapping[str, str]) -> dict[str, str]:
        """Keep, for every workload, the host that answered now and names it (`placed`), or the host it was on when
        that host last answered, if that host did not answer now; written when it changes. Returns the map."""
        old = self.last_hosts()
        new = {w: h for w, h in old.items() if h not in answered and w not in placed}
        new.update(placed)
        if new != old:
            self._write(self.path / "workload-hosts.json", json.dumps(dict(sorted(new.items())), indent=1) + "\n")
        return new
