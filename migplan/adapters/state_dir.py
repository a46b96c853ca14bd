"""The replan state directory (default /var/lib/migplan): its lock, the runs it keeps, and GPU change times.

    replan.lock          flock(2)-held for the whole run; a second run finds it taken and exits at once.
                         The kernel drops the lock when the process dies, so a killed run never blocks the next.
    runs/RUN.json        one per run: when, the decision line, the result, the plan summary (newest N kept)
    plans/RUN.json       the plan document of that run (same N)
    gpu-changes.json     {"host:index": unix time of the last change migplan made to that GPU}

Every file is replaced atomically (migplan.files.write_atomic), so a crash leaves the previous version.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from migplan.errors import InputError, MigplanError
from migplan.files import write_atomic

DEFAULT_STATE_DIR = "/var/lib/migplan"
MAX_RUN_FILE = 8 * 1024 * 1024


class Locked(MigplanError):
    """Another replan holds the state directory's lock."""


class StateDir:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    @contextlib.contextmanager
    def lock(self) -> Iterator[None]:
        try:
            self.path.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as e:
            raise InputError(f"cannot create the state directory: {e.strerror}", source=str(self.path),
                             hint="run as root, or pass --state-dir DIR") from None
        fd = os.open(self.path / "replan.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
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
        if plan_doc is not None:
            write_atomic(self.path / "plans" / f"{run_id}.json", json.dumps(plan_doc, indent=1) + "\n", mode=0o600)
        write_atomic(self.path / "runs" / f"{run_id}.json", json.dumps(dict(run), indent=1) + "\n", mode=0o600)
        for sub in ("runs", "plans"):
            files = sorted((self.path / sub).glob("*.json"))
            for old in files[:-keep] if keep > 0 else []:
                with contextlib.suppress(FileNotFoundError):
                    old.unlink()

    def runs(self, last: int = 20) -> list[dict[str, Any]]:
        """The newest `last` runs, newest first; unreadable files are reported as such, never raised."""
        out = []
        for f in sorted((self.path / "runs").glob("*.json"), reverse=True)[:last]:
            try:
                if f.stat().st_size > MAX_RUN_FILE:
                    raise ValueError("too large")
                doc = json.loads(f.read_text())
                out.append(doc if isinstance(doc, dict) else {"id": f.stem, "error": "not a JSON object"})
            except (OSError, ValueError) as e:
                out.append({"id": f.stem, "error": f"unreadable: {e}"})
        return out

    def plan_path(self, run_id: str) -> Path:
        return self.path / "plans" / f"{run_id}.json"

    # --- GPU change times --------------------------------------------------------------------------

    def last_changed(self) -> dict[tuple[str, int], float]:
        f = self.path / "gpu-changes.json"
        try:
            doc = json.loads(f.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise InputError(f"unreadable: {e}", source=str(f), hint="remove it to forget the change times") from None
        out: dict[tuple[str, int], float] = {}
        for key, t in (doc.items() if isinstance(doc, dict) else ()):
            host, _, idx = str(key).rpartition(":")
            if host and idx.isdigit() and isinstance(t, (int, float)):
                out[(host, int(idx))] = float(t)
        return out

    def mark_changed(self, keys: list[tuple[str, int]], when: float) -> None:
        if not keys:
            return
        times = self.last_changed()
        times.update({k: when for k in keys})
        doc = {f"{h}:{i}": t for (h, i), t in sorted(times.items())}
        write_atomic(self.path / "gpu-changes.json", json.dumps(doc, indent=1) + "\n", mode=0o600)

    # --- where each workload was last assigned (hosts that answered) -------------------------------------------

    def last_hosts(self) -> dict[str, str]:
        """workload -> the host whose assignments.json named it when that host last answered (`remember_hosts`)."""
        f = self.path / "workload-hosts.json"
        try:
            doc = json.loads(f.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as e:
            raise InputError(f"unreadable: {e}", source=str(f), hint="remove it to forget where workloads were") \
                from None
        return {str(k): str(v) for k, v in (doc.items() if isinstance(doc, dict) else ()) if isinstance(v, str)}

    def remember_hosts(self, answered: set[str], placed: Mapping[str, str]) -> dict[str, str]:
        """Keep, for every workload, the host that answered now and names it (`placed`), or the host it was on when
        that host last answered, if that host did not answer now; written when it changes. Returns the map."""
        old = self.last_hosts()
        new = {w: h for w, h in old.items() if h not in answered and w not in placed}
        new.update(placed)
        if new != old:
            write_atomic(self.path / "workload-hosts.json", json.dumps(dict(sorted(new.items())), indent=1) + "\n",
                         mode=0o600)
        return new
