"""Run one piece of work per host on a bounded thread pool; a failing host never stops the others."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from migplan.adapters.runner import HostError
from migplan.errors import MigplanError

log = logging.getLogger(__name__)

R = TypeVar("R")


class Named(Protocol):
    @property
    def name(self) -> str: ...


H = TypeVar("H", bound=Named)


@dataclass(frozen=True)
class HostResult(Generic[R]):
    """What one host's work returned, or the error it ended with, and how long it took: the one per-host result
    of fleet work (discover, status, collect, install, apply, repair). The value carries no host name or error
    of its own: they are this record's."""

    host: str
    value: R | None = None
    error: HostError | None = None
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


def as_host_error(host: str, err: BaseException) -> HostError:
    """Every failure on a host as a HostError with a stable code (`smi-...`, `input`, `internal-error`)."""
    if isinstance(err, HostError):
        return err
    if isinstance(err, MigplanError):
        wrapped = HostError(host, err.message.removeprefix(f"{host}: "), hint=err.hint)  # no "h1: h1: ..."
        wrapped.code = _code_of(err)
        return wrapped
    if isinstance(err, OSError) and not isinstance(err, (ConnectionError, TimeoutError)):
        # a local file (the journal under `ulimit -f`, a full disk): migplan.files names the path and the operation
        wrapped = HostError(host, f"{err.strerror or err}" + (f": {err.filename}" if err.filename else ""),
                            hint="free the disk or raise the limit, or name another file")
        wrapped.code = "io-error"
        return wrapped
    log.debug("%s: unexpected error", host, exc_info=err)
    wrapped = HostError(host, f"unexpected {type(err).__name__}: {err}",
                        hint="this is a migplan bug; re-run with --verbose and report it")
    wrapped.code = "internal-error"
    return wrapped


def _code_of(err: MigplanError) -> str:
    code = getattr(err, "code", None)
    if isinstance(code, str):
        return code
    name = type(err).__name__.removesuffix("Error")
    kebab = "".join("-" + c.lower() if c.isupper() else c for c in name).lstrip("-")
    return kebab or "error"


def for_each_host(
    hosts: Sequence[H],
    work: Callable[[H], R],
    *,
    parallel: int = 8,
    on_done: Callable[[int, int, HostResult[R]], None] | None = None,
    on_interrupt: Callable[[], None] | None = None,
) -> list[HostResult[R]]:
    """`work(host)` for every host, at most `parallel` at a time; results in the order of `hosts`.

    `on_done(done, total, result)` is called from the calling thread as each host finishes.

    Ctrl-C (KeyboardInterrupt in the calling thread, also one raised by `on_done`) stops at once:
    hosts not started are cancelled, running ones are not waited for, `on_interrupt()` is called
    (pass e.g. `SshFleet.close`, so that running commands end now rather than at their timeout),
    and the KeyboardInterrupt is re-raised. Threads already running are not waited for here, but
    they run until their work returns (and Python joins them at exit): closing their connections
    (on_interrupt, or leaving the `with SshFleet(...)` block) is what makes them end at once.
    """
    if parallel < 1:
        raise MigplanError("--parallel must be at least 1")
    results: dict[int, HostResult[R]] = {}

    def one(host: H) -> HostResult[R]:
        start = time.monotonic()
        try:
            return HostResult(host.name, value=work(host), duration_s=time.monotonic() - start)
        except Exception as err:  # one host's failure, whatever it is, is that host's result
            return HostResult(host.name, error=as_host_error(host.name, err), duration_s=time.monotonic() - start)

    pool = ThreadPoolExecutor(max_workers=min(parallel, max(1, len(hosts))), thread_name_prefix="migplan-host")
    try:
        futures = {pool.submit(one, h): i for i, h in enumerate(hosts)}
        for done, fut in enumerate(as_completed(futures), 1):
            result = fut.result()
            results[futures[fut]] = result
            if on_done is not None:
                on_done(done, len(hosts), result)
    except KeyboardInterrupt:
        pool.shutdown(wait=False, cancel_futures=True)
        if on_interrupt is not None:
            try:
                on_interrupt()
            except Exception:  # closing is best effort; the interrupt is what must get through
                log.debug("on_interrupt failed", exc_info=True)
        raise
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return [results[i] for i in range(len(hosts))]
