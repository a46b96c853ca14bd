"""Run a pure function over many inputs in forked worker processes, results in input order (Linux).

Why: reading tens of thousands of workload profiles is CPU-bound Python (YAML composition and checks,
~150 us per workload); a machine that plans a large fleet has several cores. Each worker is a
`os.fork()` of this process, so it needs no import, no pickled function and no start-up; it sends its
results back pickled through a pipe and leaves with `os._exit` (no atexit handler, no flush of the
parent's stdio buffers).

Errors: a worker that fails on an input reports only *which* input failed; the parent then calls the
function on that input itself, so the exception raised is the very one a sequential run raises, with its
message, file and line (exceptions with keyword fields do not survive pickling). Inputs are merged in
order and the first failing input wins, as in a sequential loop.

When it runs sequentially instead (same results): one job asked or one CPU usable, too few inputs, no
`os.fork`, or other threads running in this process (forking a threaded process can deadlock the child
on a lock another thread held). A worker that dies, or whose answer cannot be read, is redone in process.
Ctrl-C: the workers get the terminal's SIGINT too; in any case they are killed and reaped before the
exception goes on.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

MAX_JOBS = 8  # beyond this the pickling and the parent's merge dominate (bench/large_inputs.py)
NICE = 5  # workers run this much nicer than the parent, which works meanwhile and then waits for them


CPU_MAX = "/sys/fs/cgroup/cpu.max"  # cgroup v2: "QUOTA PERIOD" or "max PERIOD" (a container's CPU limit)


def cgroup_cpus(text: str) -> int | None:
    """Whole CPUs a cgroup v2 `cpu.max` allows (at least 1), None when it sets no limit or cannot be read."""
    parts = text.split()
    if len(parts) != 2 or not parts[0].isdigit() or not parts[1].isdigit() or int(parts[1]) == 0:
        return None
    return max(1, int(parts[0]) // int(parts[1]))


def usable_cpus() -> int:
    """CPUs this process may use: its affinity mask (e.g. a container's cpuset), lowered to its cgroup's CPU
    quota when one is set (a container limited to 2 CPUs on a 64-CPU host), at least 1."""
    try:
        cpus = max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cpus = max(1, os.cpu_count() or 1)
    try:
        with open(CPU_MAX, encoding="ascii") as fh:
            quota = cgroup_cpus(fh.read(100))
    except (OSError, ValueError):
        quota = None
    return min(cpus, quota) if quota is not None else cpus


def default_jobs() -> int:
    """Workers to use: MIGPLAN_JOBS when set to a positive integer, else the usable CPUs (at most MAX_JOBS)."""
    raw = os.environ.get("MIGPLAN_JOBS", "").strip()
    if raw.isdigit() and int(raw) > 0:
        return int(raw)
    return min(MAX_JOBS, usable_cpus())


def _threads() -> int:
    """Threads running in this process, this one included."""
    return threading.active_count()


def can_fork() -> bool:
    return hasattr(os, "fork") and sys.platform.startswith("linux") and _threads() == 1


def chunks(weights: Sequence[int], jobs: int) -> list[range]:
    """Split indices 0..n-1 into at most `jobs` consecutive ranges of about equal total weight."""
    n = len(weights)
    jobs = max(1, min(jobs, n))
    total = sum(max(1, w) for w in weights)
    out: list[range] = []
    start, acc = 0, 0
    for i, w in enumerate(weights):
        acc += max(1, w)
        if len(out) < jobs - 1 and acc >= total * (len(out) + 1) / jobs and i + 1 < n:
            out.append(range(start, i + 1))
            start = i + 1
    out.append(range(start, n))
    return [r for r in out if len(r)]


def _work(fn: Callable[[T], R], items: Sequence[T], part: range) -> tuple[list[R], int | None]:
    """fn over items[part]: (the results before the first failure, the index that failed or None)."""
    done: list[R] = []
    for i in part:
        try:
            done.append(fn(items[i]))
        except Exception:  # the parent redoes this input and raises what it raises
            return done, i
    return done, None


def _child(fn: Callable[[T], R], items: Sequence[T], part: range, fd: int,
           nice: int) -> None:  # pragma: no cover - child
    code = 0
    try:
        with contextlib.suppress(ValueError, OSError):
            signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends a worker at once
        if nice:
            with contextlib.suppress(OSError, AttributeError):
                os.nice(nice)  # the parent's own work (the inventory, meanwhile) is the critical path
        blob = pickle.dumps(_work(fn, items, part), protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(blob)
        while view:
            view = view[os.write(fd, view):]
    except BaseException:  # anything: the parent redoes the part
        code = 1
    finally:
        os._exit(code)


def _read_all(fd: int) -> bytes:
    parts: list[bytes] = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)


class Pending(Generic[T, R]):
    """Work handed to forked workers: `result()` collects it (doing the parent's share first, if it kept
    one), `cancel()` kills and reaps whatever still runs. Use it as a context manager."""

    def __init__(self, fn: Callable[[T], R], items: Sequence[T], parts: list[range], own: range | None,
                 nice: int = NICE) -> None:
        self.fn, self.items, self.own = fn, items, own
        self.workers: list[tuple[int, int, range]] = []  # (pid, read end or -1 once closed, part), not reaped
        try:
            for part in parts:
                r, w = os.pipe()
                pid = os.fork()
                if pid == 0:  # pragma: no cover - the child
                    os.close(r)
                    _child(fn, items, part, w, nice)
                os.close(w)
                self.workers.append((pid, r, part))
        except BaseException:
            self.cancel()
            raise

    def __enter__(self) -> Pending[T, R]:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.cancel()

    def __iter__(self) -> Iterator[R]:
        """The results in input order, each as soon as it is known; a failing input raises when reached, so
        a caller that checks each result as it comes sees exactly what a sequential loop would show it."""
        if self.own is not None:
            for i in self.own:
                yield self.fn(self.items[i])
        workers = self.workers
        while workers:
            pid, fd, part = workers[0]
            try:
                blob = _read_all(fd)
            finally:
                os.close(fd)
                workers[0] = (pid, -1, part)
            _, status = os.waitpid(pid, 0)
            workers.pop(0)
            got: tuple[list[R], int | None] | None = None
            if status == 0:
                try:
                    got = pickle.loads(blob)  # noqa: S301 - our own forked worker's answer, on a pipe only we hold
                except Exception:  # an unreadable answer: redone here
                    got = None
            done, failed = got if got is not None else ([], part.start)
            yield from done
            if failed is not None:
                for i in range(failed, part.stop):
                    yield self.fn(self.items[i])  # raises here, in order, as a sequential run would

    def result(self) -> list[R]:
        return list(self)

    def cancel(self) -> None:
        """Kill and reap every worker not yet collected (after an error, Ctrl-C, or work no longer needed)."""
        while self.workers:
            pid, fd, _ = self.workers.pop()
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)


class _Inline(Pending[T, R]):
    """The same interface, run in this process when `result()` is called."""

    def __init__(self, fn: Callable[[T], R], items: Sequence[T]) -> None:
        self.fn, self.items, self.own, self.workers = fn, items, range(len(items)), []

    def __iter__(self) -> Iterator[R]:
        return (self.fn(x) for x in self.items)


def fork_start(fn: Callable[[T], R], items: Sequence[T], *, jobs: int | None = None,
               weights: Sequence[int] | None = None, keep_share: bool = True) -> Pending[T, R]:
    """Start [fn(x) for x in items] in `jobs` processes now; `result()` gives it, in order.

    `keep_share`: the parent does the first share itself when `result()` is called (best when it has
    nothing else to do meanwhile); without it every share goes to a worker, and the parent is free for
    other work until `result()`. `weights` (e.g. file sizes) balance the shares; `fn` must be free of side
    effects the parent needs, and its results picklable. Runs inline (at `result()`) when forking is not
    possible or not worth it (see the module docstring)."""
    jobs = default_jobs() if jobs is None else jobs
    if jobs <= 1 or len(items) < 2 or not can_fork():
        return _Inline(fn, items)
    parts = chunks(list(weights) if weights is not None else [1] * len(items), jobs)
    try:
        if keep_share:
            return Pending(fn, items, parts[1:], parts[0])
        return Pending(fn, items, parts, None)
    except OSError:  # no more processes or pipes (EAGAIN, EMFILE): the started ones are reaped; run here
        return _Inline(fn, items)
