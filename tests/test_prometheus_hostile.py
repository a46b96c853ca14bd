"""The Prometheus client against hostile local HTTP servers (issue 21): raw sockets on 127.0.0.1 that drip,
lie, flood or are not HTTP at all. Each case must end, within the one deadline (`--http-timeout`) plus a small
margin, in a correct result or in one PrometheusError naming the URL, printable, with a hint; never a
traceback, never a hang. The servers' loops are bounded and stop when the case ends."""

from __future__ import annotations

import gzip
import json
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest

from migplan.adapters import prometheus as adapter
from migplan.errors import InputError, MigplanError
from migplan.history import prom_series as ps

TIMEOUT = 1.5  # the client's --http-timeout in these cases
MARGIN = 1.0  # what a case may take past it (thread wake-ups, a loaded CI machine)
MAX_BYTES = 1 << 20

GOOD = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
    {"metric": {"Hostname": "h1", "gpu": "0"}, "values": [[100, "5"]]}]}}).encode()

Handler = Callable[[socket.socket, threading.Event], None]


def _request(conn: socket.socket) -> bytes:
    """Read the request's head (bounded), so that the answer goes after it as a real server's would."""
    conn.settimeout(5)
    seen = b""
    while b"\r\n\r\n" not in seen and len(seen) < 65536:
        block = conn.recv(4096)
        if not block:
            break
        seen += block
    return seen


def _send(conn: socket.socket, data: bytes) -> bool:
    try:
        conn.sendall(data)
        return True
    except OSError:
        return False


def _drip(conn: socket.socket, stop: threading.Event, head: bytes, byte: bytes) -> None:
    _send(conn, head)
    for _ in range(600):  # one byte every 0.05 s: at most 30 s, but the case stops it far sooner
        if stop.wait(0.05) or not _send(conn, byte):
            return


def _answer(head: bytes, body: bytes = b"") -> Handler:
    def handler(conn: socket.socket, stop: threading.Event) -> None:
        _send(conn, head + body)  # then closes

    return handler


def _drip_headers(conn: socket.socket, stop: threading.Event) -> None:
    _drip(conn, stop, b"HTTP/1.1 200 OK\r\nX-Slow: ", b"a")


def _drip_body(conn: socket.socket, stop: threading.Event) -> None:
    _drip(conn, stop, b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + GOOD[:1], b" ")


def _drip_status(conn: socket.socket, stop: threading.Event) -> None:
    _drip(conn, stop, b"H", b"T")


def _endless(conn: socket.socket, stop: threading.Event) -> None:
    _send(conn, b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n[")
    for _ in range(2048):  # 64 KiB blocks: 128 MiB at most, refused at MAX_BYTES
        if stop.is_set() or not _send(conn, b"1," * 32768):
            return


def _endless_chunked(conn: socket.socket, stop: threading.Event) -> None:
    _send(conn, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    for _ in range(2048):
        if stop.is_set() or not _send(conn, b"10000\r\n" + b"x" * 0x10000 + b"\r\n"):
            return


def _held(head: bytes) -> Handler:
    def handler(conn: socket.socket, stop: threading.Event) -> None:
        _send(conn, head)
        stop.wait(30)  # keeps the connection open

    return handler


def _silent(conn: socket.socket, stop: threading.Event) -> None:
    stop.wait(30)  # reads the request, never answers


def _close(conn: socket.socket, stop: threading.Event) -> None:
    pass  # closes without a word


def _reset(conn: socket.socket, stop: threading.Event) -> None:
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close sends RST


def _bomb() -> bytes:
    return gzip.compress(b" " * (64 << 20), 9)  # 64 MiB of spaces in ~64 KiB


@dataclass(frozen=True)
class Case:
    name: str
    handler: Handler
    expect: str  # a regex the error must match; "" for a correct result


def _http(status: str, headers: str = "", body: bytes = b"", length: int | None = None) -> Handler:
    size = len(body) if length is None else length
    head = f"HTTP/1.1 {status}\r\n{headers}Content-Length: {size}\r\nConnection: close\r\n\r\n".encode()
    return _answer(head, body)


TIMED_OUT = r"no complete answer within 1\.5 s \(--http-timeout\)"
NOT_HTTP = r"not an HTTP server|not a valid HTTP answer|closed the connection without answering"
CASES = [
    Case("good answer", _http("200 OK", "Content-Type: application/json\r\n", GOOD), ""),
    Case("good answer, HTTP/1.0, no length", _answer(b"HTTP/1.0 200 OK\r\n\r\n", GOOD), ""),
    Case("good answer, chunked", _answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                         + f"{len(GOOD):x}\r\n".encode() + GOOD + b"\r\n0\r\n\r\n"), ""),
    Case("status line dripped", _drip_status, TIMED_OUT),
    Case("headers dripped", _drip_headers, TIMED_OUT),
    Case("body dripped", _drip_body, TIMED_OUT),
    Case("no answer at all", _silent, TIMED_OUT),
    Case("an SSH banner", _answer(b"SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13\r\n"),
         r"not an HTTP server \(it answered 'SSH-2\.0-OpenSSH_9\.6p1 Ubuntu-3ubuntu13'\)"),
    Case("binary status line", _answer(b"\x00\xff\x1b[31mHTTP\x07\r\n\r\n"), NOT_HTTP),
    Case("empty status line", _answer(b"\r\n\r\n"), NOT_HTTP),
    Case("a bad status code", _answer(b"HTTP/1.1 abc OK\r\n\r\n"), NOT_HTTP),
    Case("closed without a word", _close, NOT_HTTP + "|connection was dropped"),
    Case("reset", _reset, NOT_HTTP + "|connection was dropped"),
    Case("200 headers", _answer(b"HTTP/1.1 200 OK\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(200))
                                + b"\r\n"), r"not a valid HTTP answer"),
    Case("a 100 KiB header line", _answer(b"HTTP/1.1 200 OK\r\nX-Big: " + b"y" * 100_000 + b"\r\n\r\n"),
         r"not a valid HTTP answer"),
    Case("endless body", _endless, r"larger than 1 MiB"),
    Case("endless chunked body", _endless_chunked, r"larger than 1 MiB"),
    Case("content-length over the limit", _http("200 OK", "", b"{}", length=1 << 40), r"larger than 1 MiB"),
    Case("content-length longer than the body", _http("200 OK", "", GOOD[:20], length=1000), r"cut short"),
    Case("content-length longer than the body, kept open", _held(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n"
                                                                 b"\r\n" + GOOD[:20]), TIMED_OUT),
    Case("content-length shorter than the body", _http("200 OK", "", GOOD, length=10), r"invalid JSON"),
    Case("content-length not a number", _answer(b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n", GOOD),
         ""),  # read to the end of the connection, as HTTP/1.0: the answer is whole
    Case("a bad chunk size", _answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n"),
         NOT_HTTP + "|cut short"),
    Case("not JSON", _http("200 OK", "Content-Type: text/html\r\n", b"<html>\x1b]0;pwned\x07</html>"),
         r"invalid JSON"),
    Case("deeply nested JSON", _http("200 OK", "", b"[" * 200_000 + b"]" * 200_000), r"invalid JSON"),
    Case("JSON that is not a matrix", _http("200 OK", "", b'{"status":"success","data":[]}'),
         r"not a Prometheus query_range answer"),
    Case("a gzip answer not asked for", _http("200 OK", "Content-Encoding: gzip\r\n", gzip.compress(GOOD)),
         r"compressed \(gzip\)"),
    Case("a gzip bomb", _http("200 OK", "Content-Encoding: gzip\r\n", _bomb()), r"compressed \(gzip\)"),
    Case("a gzip bomb without the header", _http("200 OK", "", _bomb()), r"invalid JSON"),
    Case("HTTP 500 with a huge page", _http("500 Internal Server Error", "", b"<p>oops</p>" * 200_000),
         r"HTTP 500"),
    Case("HTTP 503 error envelope", _http("503 Service Unavailable", "", json.dumps(
        {"status": "error", "errorType": "unavailable", "error": "\x1b[2Jbusy"}).encode()), r"HTTP 503: unavailable"),
    *[Case(f"redirect {code} to another host", _http(f"{code} Moved", "Location: http://169.254.169.254/x?t=1\r\n"),
           rf"redirected \({code}\) to http://169\.254\.169\.254/x; redirects are not followed")
      for code in (301, 302, 303, 307, 308)],
    Case("redirect to a URL with credentials", _http("302 Found", "Location: http://admin:s3cret@evil.example/p?q=1"
                                                                  "\r\n"), r"to http://evil\.example/p;"),
]


class _Server:
    """A raw TCP server on 127.0.0.1: each connection gets `handler` on a thread of its own, until `stop`."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.stop = threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.threads = [threading.Thread(target=self._serve, daemon=True)]
        self.threads[0].start()

    def _serve(self) -> None:
        for _ in range(600):  # bounded: 60 s at most, stopped far sooner
            if self.stop.is_set():
                return
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            t = threading.Thread(target=self._one, args=(conn,), daemon=True)
            self.threads.append(t)
            t.start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            try:
                _request(conn)
                self.handler(conn, self.stop)
            except OSError:
                pass

    def close(self) -> None:
        self.stop.set()
        for t in list(self.threads):
            t.join(10)
        self.sock.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], _Server]]:
    servers: list[_Server] = []

    def make(handler: Handler) -> _Server:
        servers.append(_Server(handler))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def _read(url: str) -> list[ps.Series]:
    client = adapter.PrometheusClient(url, timeout=TIMEOUT, max_bytes=MAX_BYTES)
    body = client.query_range("DCGM_FI_DEV_FB_USED", 100, 200, 60)
    return ps.parse_matrix(body, source=f"{url}/api/v1/query_range DCGM_FI_DEV_FB_USED")


def test_the_client_against_hostile_servers(serve: Callable[[Handler], _Server]) -> None:
    import re

    print(f"{len(CASES)} hostile-server cases")
    assert len(CASES) >= 35
    failures = []
    for case in CASES:
        srv = serve(case.handler)
        url = f"http://127.0.0.1:{srv.port}"
        start = time.monotonic()
        try:
            got: list[ps.Series] | MigplanError = _read(url)
        except ps.PrometheusError as err:
            got = err
        took = time.monotonic() - start
        srv.close()
        if took > TIMEOUT + MARGIN:
            failures.append(f"{case.name}: took {took:.2f} s")
        if not case.expect:
            if not (isinstance(got, list) and [s.values for s in got] == [((100.0, 5.0),)]):
                failures.append(f"{case.name}: expected the one series, got {got!r}")
            continue
        if not isinstance(got, ps.PrometheusError):
            failures.append(f"{case.name}: expected an error, got {got!r}")
            continue
        text = str(got)
        if not re.search(case.expect, text):
            failures.append(f"{case.name}: {text!r} does not match {case.expect!r}")
        if f"{url}/api/v1/query_range" not in got.message or not got.hint:
            failures.append(f"{case.name}: {text!r} does not name the URL or has no hint")
        if "s3cret" in text or any(ord(c) < 0x20 and c != "\n" or c == "\x7f" for c in text) or "Traceback" in text:
            failures.append(f"{case.name}: {text!r} is not one printable message")
    assert not failures, "\n".join(failures)


def test_the_deadline_is_the_whole_request_not_each_read(serve: Callable[[Handler], _Server]) -> None:
    srv = serve(_drip_body)  # a byte every 0.05 s: never idle for a per-read timeout
    start = time.monotonic()
    with pytest.raises(ps.PrometheusError, match=TIMED_OUT) as info:
        adapter.PrometheusClient(f"http://127.0.0.1:{srv.port}", timeout=TIMEOUT).query_range("up", 1, 2, 1)
    assert TIMEOUT - 0.1 <= time.monotonic() - start <= TIMEOUT + MARGIN
    assert "raise --http-timeout" in (info.value.hint or "")


def test_connection_refused_names_the_url_and_what_to_do() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: refused
        with pytest.raises(ps.PrometheusError, match=rf"http://127\.0\.0\.1:{port}/api/v1/query_range: "
                                                     r"cannot connect") as info:
            adapter.PrometheusClient(f"http://127.0.0.1:{port}", timeout=TIMEOUT).query_range("up", 1, 2, 1)
    assert "check the URL" in (info.value.hint or "")


@pytest.mark.parametrize("url", ["http://127.0.0.1:9090/\r\nX-Injected: 1", "http://127.0.0.1:9090/a b",
                                 "http://127.0.0.1:9090\t/x", "http://127.0.0.1:9090/\x00"])
def test_a_url_with_control_characters_or_spaces_is_refused(url: str) -> None:
    with pytest.raises(InputError, match="spaces or control characters") as info:
        adapter.PrometheusClient(url)
    assert "\r" not in str(info.value) and "\n" not in str(info.value).split("\n  hint:")[0]


@pytest.mark.parametrize("handler,needle", [
    (_drip_headers, "no complete answer within 2 s (--http-timeout)"),
    (_http("200 OK", "", b"<html>not prometheus</html>"), "invalid JSON"),
    (_answer(b"SSH-2.0-OpenSSH_9.6\r\n"), "not an HTTP server"),
])
def test_migplan_collect_gives_one_message_naming_the_url(serve: Callable[[Handler], _Server], handler: Handler,
                                                          needle: str) -> None:
    from typer.testing import CliRunner

    from migplan.cli.app import app

    srv = serve(handler)
    url = f"http://127.0.0.1:{srv.port}"
    start = time.monotonic()
    res = CliRunner().invoke(app, ["collect", "--prometheus", url, "--start", "1000", "--end", "1600",
                                   "--step", "60s", "--http-timeout", "2"])
    assert time.monotonic() - start < 2 + MARGIN + 1  # + the CLI's own start
    assert res.exit_code != 0 and (res.exception is None or isinstance(res.exception, SystemExit)), res.output
    assert needle in res.output and f"{url}/api/v1/query_range" in res.output, res.output
    assert "Traceback" not in res.output and "hint:" in res.output
