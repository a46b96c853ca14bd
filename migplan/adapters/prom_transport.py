"""The HTTP transport of the Prometheus client (migplan/adapters/prometheus.py): one deadline for the whole
request and a body read that is bounded in size and strict about its framing.

The deadline (`Deadline`) covers the name resolution, every connect attempt, the TLS handshake, the headers
and the body together:

* the resolution runs in a worker thread that is waited for only until the deadline (getaddrinfo cannot be
  interrupted; a resolver that hangs is left behind, a daemon thread, and the request fails at the deadline);
* the addresses a name resolves to are tried in turn (at most `MAX_ADDRESSES`), each given an equal share of
  the time left (the last one all of it), so a name whose first addresses blackhole (`localhost` -> ::1 with
  nothing listening there and its SYNs dropped) costs at most the deadline, not one timeout per address;
* a watchdog thread shuts the connection down when the deadline passes, which ends a blocked connect, TLS
  handshake or read at once (urllib's timeout is per socket operation: a server dripping a byte every half
  second was never cut off). It shuts down a duplicate of the socket's descriptor that it owns, so that it
  still reaches the connection after `ssl` has taken the original socket object over, and can never hit a
  descriptor number reused by someone else.

The body: `read_body` refuses a compressed answer (migplan asks for identity), a Transfer-Encoding other
than chunked, and a Content-Length that is invalid, negative or given twice with different values (RFC 9112
6.3: the framing is then unknown); it decodes chunked answers itself, strictly (http.client takes a negative
chunk size such as `-1` as "read to the end of the connection", without a bound), and stops at `limit` bytes.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from migplan.history.prom_series import AnswerTooLarge, PrometheusError
from migplan.text import printable

# What a resolver returns: getaddrinfo's (family, type, proto, canonname, sockaddr) tuples.
AddrInfo = tuple[int, int, int, str, tuple[Any, ...]]
Resolver = Callable[[str, int], Sequence[AddrInfo]]

MAX_ADDRESSES = 16  # tried per request; a name with more is not worth waiting for
_MAX_LINE = 65536  # as http.client's own limit on a header line
_MAX_TRAILERS = 100  # as http.client's limit on the number of headers
_READ = 1 << 16
_HEX = re.compile(rb"[0-9A-Fa-f]{1,16}")


def system_resolver(host: str, port: int) -> Sequence[AddrInfo]:
    return socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM)


class Deadline:
    """The one deadline of a request: `remaining()` for each step, and a watchdog that shuts down every
    connection the request opened when it passes."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.at = time.monotonic() + timeout
        self._dups: list[socket.socket] = []
        self._lock = threading.Lock()
        self._fired = False
        self._done = False
        self._timer = threading.Timer(timeout, self._fire)
        self._timer.daemon = True

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        with self._lock:
            self._done = True
            for dup in self._dups:
                dup.close()
            self._dups.clear()

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def expired(self) -> bool:
        return self._fired or self.remaining() <= 0

    def track(self, sock: socket.socket) -> None:
        """Watch `sock` (before its connect: a shutdown ends a blocked connect too, on Linux)."""
        with self._lock:
            if self._fired or self._done:
                raise TimeoutError("deadline passed")
            self._dups.append(sock.dup())

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self._fired = True
            for dup in self._dups:
                with contextlib.suppress(OSError):
                    dup.shutdown(socket.SHUT_RDWR)  # a blocked connect/recv/send returns at once


class ConnectFailed(OSError):
    """No connection: the name did not resolve in time or at all, or no address answered. `what` is the
    message (without the URL, which the caller adds); `timed_out` when the deadline ended it."""

    def __init__(self, what: str, *, timed_out: bool = False) -> None:
        super().__init__(what)
        self.what = what
        self.timed_out = timed_out


def resolve(resolver: Resolver, host: str, port: int, deadline: Deadline) -> list[AddrInfo]:
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["infos"] = list(resolver(host, port))
        except BaseException as err:  # handed to the waiting thread, which reports it
            box["error"] = err

    worker = threading.Thread(target=work, name="migplan-resolve", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline.remaining()))
    shown = printable(host, 100)
    if worker.is_alive():
        raise ConnectFailed(f"cannot resolve {shown} within {deadline.timeout:g} s (--http-timeout)",
                            timed_out=True)
    err = box.get("error")
    if isinstance(err, OSError):
        raise ConnectFailed(f"cannot resolve {shown}: {printable(err.strerror or str(err), 120)}")
    if err is not None:
        raise ConnectFailed(f"cannot resolve {shown}: {printable(type(err).__name__ + ': ' + str(err), 120)}")
    infos = [i for i in box.get("infos", []) if isinstance(i, tuple) and len(i) == 5]
    if not infos:
        raise ConnectFailed(f"cannot resolve {shown}: no address")
    return infos


def _address(sockaddr: tuple[Any, ...]) -> str:
    host, port = str(sockaddr[0]), sockaddr[1]
    return printable(f"[{host}]:{port}" if ":" in host else f"{host}:{port}", 80)


def connect(address: tuple[str, int], deadline: Deadline, resolver: Resolver) -> socket.socket:
    """A connected socket to `address` (host, port) within the deadline, or ConnectFailed naming what was
    tried. Replaces socket.create_connection, which gives every address the whole timeout."""
    host, port = address
    infos = resolve(resolver, host, port, deadline)[:MAX_ADDRESSES]
    failures: list[str] = []
    timed_out = False
    for i, (family, kind, proto, _name, sockaddr) in enumerate(infos):
        left = deadline.remaining()
        if left <= 0:
            timed_out = True
            break
        sock = socket.socket(family, kind, proto)
        try:
            deadline.track(sock)
            sock.settimeout(left / (len(infos) - i))  # an equal share of what is left; the last gets all
            sock.connect(sockaddr)
            # Each later operation is bounded by the deadline too (the watchdog ends it in any case).
            sock.settimeout(max(deadline.remaining(), 0.001))
            return sock
        except OSError as err:
            sock.close()
            timed_out = isinstance(err, TimeoutError) or deadline.expired()
            why = "no answer (timed out)" if isinstance(err, TimeoutError) else (err.strerror or str(err))
            failures.append(f"{_address(sockaddr)}: {printable(why, 80)}")
            if deadline.expired():
                break
    tried = "; ".join(failures[:3]) + (f"; {len(failures) - 3} more" if len(failures) > 3 else "")
    left_out = len(infos) - len(failures)
    if timed_out:
        what = f"no connection within {deadline.timeout:g} s (--http-timeout)"
        if tried:
            what += f": {tried}"
        if left_out:
            what += f" ({left_out} address{'es' if left_out > 1 else ''} not tried)"
        raise ConnectFailed(what, timed_out=True)
    if len(failures) == 1:
        raise ConnectFailed(f"cannot connect: {failures[0].partition(': ')[2]}")
    raise ConnectFailed(f"cannot connect to any of {len(failures)} addresses: {tried}")


def watched(conn: http.client.HTTPConnection, deadline: Deadline, resolver: Resolver) -> http.client.HTTPConnection:
    """`conn` connecting through `connect` (resolution and connects within the deadline, watched)."""
    conn._create_connection = (  # type: ignore[attr-defined]  # http.client's private hook, not in typeshed
        lambda address, timeout=None, source_address=None: connect(address, deadline, resolver))
    return conn


# --- the body ---------------------------------------------------------------------------------------------

def _bad(where: str, what: str) -> PrometheusError:
    return PrometheusError(f"{where}: not a valid HTTP answer: {what}",
                           hint="check that the URL is Prometheus' HTTP(S) port (9090 by default), and any proxy "
                                "in between")


def _cut(where: str, what: str) -> PrometheusError:
    return PrometheusError(f"{where}: the answer was cut short ({what})",
                           hint="try again; if it persists, check the server or a proxy in between")


def _too_large(where: str, limit: int) -> AnswerTooLarge:
    size = f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit} bytes"
    return AnswerTooLarge(f"{where}: the answer is larger than {size}",
                          hint="use a larger --step, a shorter --window or a --selector")


def _content_length(values: list[str], where: str) -> int | None:
    """The one Content-Length, or None without one; an invalid, negative or conflicting one is refused."""
    found = {v.strip() for value in values for v in value.split(",")}
    if not found:
        return None
    if len(found) > 1:
        raise _bad(where, f"conflicting Content-Length headers ({printable(', '.join(sorted(found)), 60)})")
    text = found.pop()
    if not (text.isascii() and text.isdigit() and len(text) <= 19):
        raise _bad(where, f"Content-Length {printable(text, 40)!r} is not a byte count")
    return int(text)


def read_body(resp: http.client.HTTPResponse, limit: int, where: str, *, truncate: bool = False) -> bytes:
    """The answer's body, at most `limit` bytes; a longer one is refused, not truncated into nonsense
    (with `truncate`, for an error page: its first `limit` bytes)."""
    headers = resp.headers
    encoding = (headers.get("Content-Encoding") or "identity").strip().lower()
    if encoding != "identity":
        raise PrometheusError(f"{where}: the answer is compressed ({printable(encoding, 40)}), which migplan did not "
                              "ask for", hint="check that the URL is the Prometheus server, not a proxy that "
                                              "rewrites answers")
    codings = [c.strip().lower() for v in headers.get_all("Transfer-Encoding") or [] for c in v.split(",")]
    if codings and codings != ["chunked"]:
        raise PrometheusError(f"{where}: the answer has Transfer-Encoding {printable(', '.join(codings), 60)}, "
                              "which migplan did not ask for and does not read",
                              hint="check that the URL is the Prometheus server, not a proxy that rewrites answers")
    if codings:
        return _dechunk(resp, limit, where, truncate)  # Content-Length is ignored with chunked (RFC 9112 6.3)
    length = _content_length(headers.get_all("Content-Length") or [], where)
    if length is not None and length > limit and not truncate:
        raise _too_large(where, limit)
    parts: list[bytes] = []
    size = 0
    while True:
        block = resp.read(_READ)
        if not block:
            if length is not None and size < length:  # read(amt) does not raise IncompleteRead for it
                raise _cut(where, f"{size} bytes, {length - size} more expected")
            return b"".join(parts)
        size += len(block)
        if size > limit:
            if truncate:
                return b"".join(parts) + block[:len(block) - (size - limit)]
            raise _too_large(where, limit)
        parts.append(block)


def _dechunk(resp: http.client.HTTPResponse, limit: int, where: str, truncate: bool) -> bytes:
    """Chunked transfer coding (RFC 9112 7.1), read from the response's buffered socket file, strictly."""
    fp = resp.fp
    if fp is None:
        return b""
    parts: list[bytes] = []
    size = 0
    while True:
        line = fp.readline(_MAX_LINE + 1)
        if len(line) > _MAX_LINE:
            raise _bad(where, "a chunk-size line is longer than 64 KiB")
        if not line.endswith(b"\n"):  # the connection ended before the last (empty) chunk
            raise _cut(where, f"{size} bytes, the chunked answer did not end")
        text = line.split(b";", 1)[0].strip(b" \t\r\n")
        if not _HEX.fullmatch(text):
            raise _bad(where, f"chunk size {printable(text.decode('latin-1'), 40)!r} is not a hexadecimal number")
        n = int(text, 16)
        if n == 0:
            _trailers(fp, where)
            return b"".join(parts)
        if size + n > limit:
            if not truncate:
                raise _too_large(where, limit)
            n = limit - size
            if n == 0:
                return b"".join(parts)
        while n:
            block = fp.read(min(n, _READ))
            if not block:
                raise _cut(where, f"{size} bytes, {n} more expected in the chunk")
            parts.append(block)
            size += len(block)
            n -= len(block)
        if truncate and size >= limit:
            return b"".join(parts)
        end = fp.read(2)
        if end != b"\r\n":
            if len(end) < 2:
                raise _cut(where, f"{size} bytes, at the end of a chunk")
            raise _bad(where, "a chunk is longer than its size says")


def _trailers(fp: Any, where: str) -> None:
    for _ in range(_MAX_TRAILERS + 1):
        line = fp.readline(_MAX_LINE + 1)
        if len(line) > _MAX_LINE:
            raise _bad(where, "a trailer line is longer than 64 KiB")
        if line in (b"\r\n", b"\n", b""):  # the end (an EOF instead of the last CRLF is tolerated)
            return
    raise _bad(where, f"more than {_MAX_TRAILERS} trailer lines")
