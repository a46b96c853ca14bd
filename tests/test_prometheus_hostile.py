"""The Prometheus client against hostile local HTTP servers (issue 21): raw sockets on 127.0.0.1 that drip,
lie, flood or are not HTTP at all. Each case must end, within the one deadline (`--http-timeout`) plus a small
margin, in a correct result or in one PrometheusError naming the URL, printable, with a hint; never a
traceback, never a hang. The servers' loops are bounded and stop when the case ends."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import socket
import ssl
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prom_support import Handler, RawServer, blackhole, send

from migplan.adapters import prom_transport as adapter_transport
from migplan.adapters import prometheus as adapter
from migplan.errors import InputError, MigplanError
from migplan.history import prom_series as ps

_send = send
_Server = RawServer

TIMEOUT = 1.5  # the client's --http-timeout in these cases
MARGIN = 1.0  # what a case may take past it (thread wake-ups, a loaded CI machine)
MAX_BYTES = 1 << 20

GOOD = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": [
    {"metric": {"Hostname": "h1", "gpu": "0"}, "values": [[100, "5"]]}]}}).encode()

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


def _negative_chunk(conn: socket.socket, stop: threading.Event) -> None:
    # http.client reads a chunk of size -1 as "to the end of the connection", unbounded
    _send(conn, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n")
    for _ in range(2048):
        if stop.is_set() or not _send(conn, b"x" * 0x10000):
            return


def _error_negative_chunk(conn: socket.socket, stop: threading.Event) -> None:
    _send(conn, b"HTTP/1.1 500 Oops\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\n")
    for _ in range(2048):
        if stop.is_set() or not _send(conn, b"x" * 0x10000):
            return


def _endless_trailers(conn: socket.socket, stop: threading.Event) -> None:
    _send(conn, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n")
    for _ in range(100_000):
        if stop.is_set() or not _send(conn, b"X-Trailer: y\r\n" * 64):
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
    # RFC 9112 6.3: an invalid or conflicting Content-Length leaves the framing unknown; the answer is refused
    Case("content-length not a number", _answer(b"HTTP/1.1 200 OK\r\nContent-Length: lots\r\n\r\n", GOOD),
         r"not a valid HTTP answer: Content-Length 'lots' is not a byte count"),
    Case("content-length negative", _answer(b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", GOOD),
         r"Content-Length '-1' is not a byte count"),
    Case("content-length in non-ASCII digits", _answer(b"HTTP/1.1 200 OK\r\nContent-Length: \xb2\r\n\r\n", GOOD),
         r"is not a byte count"),
    Case("two different content-lengths", _answer(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nContent-Length: "
                                                  + str(len(GOOD)).encode() + b"\r\n\r\n", GOOD),
         r"conflicting Content-Length headers"),
    Case("the same content-length twice", _answer(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nContent-Length: %d"
                                                  b"\r\n\r\n" % (len(GOOD), len(GOOD)), GOOD), ""),
    Case("a negative chunk size, then endless data", _negative_chunk, r"chunk size '-1' is not a hexadecimal"),
    Case("a chunk longer than its size", _answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                                 b"2\r\nabcd\r\n0\r\n\r\n"), r"longer than its size says"),
    Case("endless trailers", _endless_trailers, r"more than 100 trailer lines"),
    Case("chunked, without the last chunk", _answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                                    + f"{len(GOOD):x}\r\n".encode() + GOOD + b"\r\n"),
         r"cut short .*the chunked answer did not end"),
    Case("a gzip transfer-coding", _answer(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
                                           b"0\r\n\r\n"), r"Transfer-Encoding gzip, chunked"),
    Case("HTTP 500, chunked with a negative size", _error_negative_chunk, r"HTTP 500"),
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
    Case("a reason phrase that echoes a URL with credentials",
         _answer(b"HTTP/1.1 502 Bad http://u:s3cret@x.example/ gateway\r\nContent-Length: 0\r\n\r\n"),
         r"HTTP 502: Bad http://x\.example/ gateway"),
    Case("redirect to a URL with credentials", _http("302 Found", "Location: http://admin:s3cret@evil.example/p?q=1"
                                                                  "\r\n"), r"to http://evil\.example/p;"),
]


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


@pytest.mark.slow
def test_the_client_against_hostile_servers(serve: Callable[[Handler], _Server]) -> None:
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


@pytest.mark.slow
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


@pytest.mark.slow
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


# --- the deadline covers the resolution and every connect attempt (issue 21) ---------------------------------

BOUND = 3.0  # what the deadline may be overshot by in these tests: a correctness bound, not a speed goal


class _FakeResolver:
    """Answers every name with `addresses` (127.0.0.1 ports), as getaddrinfo would; or hangs, or fails."""

    def __init__(self, ports: list[int], *, hang: threading.Event | None = None,
                 error: OSError | None = None) -> None:
        self.ports, self.hang, self.error = ports, hang, error
        self.calls: list[tuple[str, int]] = []

    def __call__(self, host: str, port: int) -> list[adapter_transport.AddrInfo]:
        self.calls.append((host, port))
        if self.hang is not None:
            self.hang.wait(30)
        if self.error is not None:
            raise self.error
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", p)) for p in self.ports]


def _timed(client: adapter.PrometheusClient) -> tuple[bytes | ps.PrometheusError, float]:
    start = time.monotonic()
    try:
        got: bytes | ps.PrometheusError = client.query_range("up", 1, 2, 1)
    except ps.PrometheusError as err:
        got = err
    return got, time.monotonic() - start


@pytest.mark.slow
def test_several_blackholed_addresses_share_one_deadline() -> None:
    with blackhole() as port:
        if port is None:
            pytest.skip("this kernel does not drop SYNs to a full accept queue: no blackhole on loopback")
        resolver = _FakeResolver([port] * 4)  # each one alone would take the whole timeout before issue 21
        client = adapter.PrometheusClient("http://prom.test:9090", timeout=TIMEOUT, resolver=resolver)
        got, took = _timed(client)
    assert resolver.calls == [("prom.test", 9090)]
    assert isinstance(got, ps.PrometheusError), got
    assert got.message.startswith("http://prom.test:9090/api/v1/query_range: no connection within 1.5 s "
                                  f"(--http-timeout): 127.0.0.1:{port}: no answer (timed out)"), got.message
    assert "raise --http-timeout" in (got.hint or "")
    assert took <= TIMEOUT + BOUND, f"{took:.2f} s for 4 blackholed addresses"


@pytest.mark.slow
def test_a_blackholed_first_address_leaves_time_for_the_next(serve: Callable[[Handler], _Server]) -> None:
    srv = serve(_http("200 OK", "", GOOD))
    with blackhole() as port:
        if port is None:
            pytest.skip("this kernel does not drop SYNs to a full accept queue: no blackhole on loopback")
        client = adapter.PrometheusClient("http://localhost:9090", timeout=TIMEOUT,
                                          resolver=_FakeResolver([port, srv.port]))
        got, took = _timed(client)
    assert got == GOOD, got
    assert took <= TIMEOUT + BOUND


@pytest.mark.slow
def test_a_resolver_that_hangs_is_cut_off_at_the_deadline() -> None:
    release = threading.Event()
    try:
        client = adapter.PrometheusClient("http://prom.test:9090", timeout=TIMEOUT,
                                          resolver=_FakeResolver([1], hang=release))
        got, took = _timed(client)
    finally:
        release.set()
    assert isinstance(got, ps.PrometheusError), got
    assert got.message == "http://prom.test:9090/api/v1/query_range: cannot resolve prom.test within 1.5 s " \
                          "(--http-timeout)"
    assert TIMEOUT - 0.1 <= took <= TIMEOUT + BOUND


def test_a_name_that_does_not_resolve_is_one_message() -> None:
    client = adapter.PrometheusClient("http://prom.test:9090", timeout=TIMEOUT, resolver=_FakeResolver(
        [], error=socket.gaierror(socket.EAI_NONAME, "Name or service not known")))
    got, _ = _timed(client)
    assert isinstance(got, ps.PrometheusError)
    assert got.message == ("http://prom.test:9090/api/v1/query_range: cannot resolve prom.test: "
                           "Name or service not known")
    assert "check the URL" in (got.hint or "")
    got, _ = _timed(adapter.PrometheusClient("http://prom.test:9090", timeout=TIMEOUT, resolver=_FakeResolver([])))
    assert isinstance(got, ps.PrometheusError) and got.message.endswith("cannot resolve prom.test: no address")


def test_every_refused_address_is_named() -> None:
    ports = []
    with socket.socket() as a, socket.socket() as b:
        for s in (a, b):
            s.bind(("127.0.0.1", 0))  # bound, never listening: refused
            ports.append(s.getsockname()[1])
        got, took = _timed(adapter.PrometheusClient("http://prom.test:9090", timeout=TIMEOUT,
                                                    resolver=_FakeResolver(ports)))
    assert isinstance(got, ps.PrometheusError)
    assert got.message == (f"http://prom.test:9090/api/v1/query_range: cannot connect to any of 2 addresses: "
                           f"127.0.0.1:{ports[0]}: Connection refused; 127.0.0.1:{ports[1]}: Connection refused")
    assert took < TIMEOUT


def _tls_context(tmp_path: Path) -> tuple[ssl.SSLContext, str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed: cannot make a test certificate")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(cert), "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(str(cert), str(key))
    return ctx, str(cert)


@pytest.mark.slow
def test_the_deadline_holds_over_tls_too(tmp_path: Path) -> None:
    # ssl takes the socket object over (the original is detached): the watchdog must still reach the connection
    ctx, cert = _tls_context(tmp_path)
    srv = RawServer(_drip_body, tls=ctx)
    try:
        got, took = _timed(adapter.PrometheusClient(f"https://127.0.0.1:{srv.port}", timeout=TIMEOUT, ca_file=cert))
    finally:
        srv.close()
    assert isinstance(got, ps.PrometheusError), got
    assert re.search(TIMED_OUT, got.message), got.message
    assert took <= TIMEOUT + MARGIN


@pytest.mark.slow
def test_a_tls_handshake_that_never_comes_is_cut_off(serve: Callable[[Handler], _Server], tmp_path: Path) -> None:
    _, cert = _tls_context(tmp_path)
    srv = serve(_silent)  # accepts the TCP connection, never answers the ClientHello
    got, took = _timed(adapter.PrometheusClient(f"https://127.0.0.1:{srv.port}", timeout=TIMEOUT, ca_file=cert))
    assert isinstance(got, ps.PrometheusError), got
    assert "1.5 s (--http-timeout)" in got.message, got.message
    assert took <= TIMEOUT + MARGIN
