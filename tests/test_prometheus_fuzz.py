"""A seeded fuzzer of hostile local HTTP servers against the Prometheus client (issue 21).

Each case is a server on 127.0.0.1 that answers every request with one generated response: a status line
(bad versions, huge codes, no reason), a header set (duplicate, negative, huge or non-ASCII Content-Lengths,
Transfer-Encodings, gzip claims with bad data, lines over the limits, bare LF or CR line ends), a framing
(Content-Length, chunked with random sizes, extensions, bad sizes and trailers, or to the close), a body
(a real `query_range` matrix of dcgm-exporter series, mutated: wrong types, NaN strings, huge numbers,
deep nesting, duplicate keys, wrong resultType, `"status":"error"` with odd errorTypes, truncated, bytes
flipped) and a timing (at once, dribbled under or past the deadline, closed early, reset, held open,
an endless body).

About one case in five is a control: an unmutated answer in one of HTTP's valid forms, which must come back
byte for byte. For every case: nothing but the client's PrometheusError reaches the caller; its message is
one printable line naming the URL, without the credentials the client sends, and saying what happened; the
call (query, parse, samples) returns within the deadline plus MARGIN; an answer is never over the size cap,
and the memory traced over the whole run stays bounded (a server streams up to 64 MiB where a cap could be
missed). Counts per outcome are printed. MIGPLAN_FUZZ_CASES (default 300) and MIGPLAN_FUZZ_SEED (default 21)
change the run; a failure names the case index, which `_case(index)` rebuilds.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import random
import re
import socket
import struct
import threading
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from prom_support import POINTS, RawServer, dcgm_dataset, send

from migplan.adapters import prometheus as adapter
from migplan.history import prom_series as ps

CASES = int(os.environ.get("MIGPLAN_FUZZ_CASES", "300"))
SEED = int(os.environ.get("MIGPLAN_FUZZ_SEED", "21"))
WORKERS = 4  # cases at once: the run's wall time, not what a case may take
TIMEOUT = 1.0  # the client's --http-timeout
MARGIN = 3.0  # a correctness bound of the deadline (a loaded 2-core machine), not a speed goal
MAX_BYTES = 256 << 10
STREAM = 64 << 20  # what an endless server sends at most
MEMORY_BOUND = 96 << 20  # traced peak over the run: WORKERS answers and their parses, far below one STREAM
START, END, STEP = 1000.0, 1600.0, 60.0
PASSWORD = "fuzz-s3cret-pw"  # the client's credential, checked never to show in a message
AUTH = base64.b64encode(f"admin:{PASSWORD}".encode()).decode()


# --- the answers -----------------------------------------------------------------------------------------

def _real_answer(rng: random.Random) -> dict[str, Any]:
    """A `query_range` answer as Prometheus gives it for max_over_time(DCGM_FI_DEV_FB_USED[60s]): matrix
    series with dcgm-exporter's labels (prom_support's dataset) and values on the query's grid."""
    data, _ = dcgm_dataset(1_800_000_000)
    raws = [r for r in data.raws if r.metric == "DCGM_FI_DEV_FB_USED"]
    result = []
    for raw in rng.sample(raws, rng.randint(1, len(raws))):
        points = rng.sample(range(POINTS), 10)
        values = [[START + 60 * (k + 1) - rng.choice((0, 0.5)), f"{raw.values[p][1]:g}"] for k, p in enumerate(points)]
        result.append({"metric": dict(raw.labels), "values": values})
    doc: dict[str, Any] = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    if rng.random() < 0.2:
        doc["warnings"] = ["PromQL info: metric might not be a counter"]
    return doc


_ODD = [None, True, 0, -1, 1e308, "", "x", [], {}, [[]], {"a": None}, "NaN", 10**30]
_NUMBER_TEXTS = ["NaN", "+Inf", "-Inf", "nan", "1e999", "-1e999", "0x10", "", " 5", "5 ", "1_000", "١٢٣",
                 "9" * 65, "-0", "1e-400", "\u0000"]


def _nodes(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _nodes(v, (*path, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _nodes(v, (*path, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    parent = doc
    for p in path[:-1]:
        parent = parent[p]
    parent[path[-1]] = value
    return doc


def _mutate_doc(rng: random.Random, doc: dict[str, Any], notes: list[str]) -> bytes:
    kind = rng.choice(["type", "type", "number", "number", "time", "resultType", "error", "labels", "pair",
                       "nesting", "dupkey", "hugeint", "truncate", "bytes", "encoding"])
    notes.append(f"body:{kind}")
    series = doc["data"]["result"]
    if kind == "type":  # a node of the wrong type somewhere
        for _ in range(rng.randint(1, 3)):
            path = rng.choice(_nodes(doc))
            doc = _set(doc, path, rng.choice(_ODD))
    elif kind == "number":
        s = rng.choice(series)
        s["values"][rng.randrange(len(s["values"]))][1] = rng.choice(_NUMBER_TEXTS)
    elif kind == "time":
        s = rng.choice(series)
        s["values"][rng.randrange(len(s["values"]))][0] = rng.choice([-1, 1e308, -1e308, 10**18, 0.1, START - 1,
                                                                       END + 1, "1000", True])
    elif kind == "resultType":
        doc["data"]["resultType"] = rng.choice(["vector", "scalar", "string", "streams", None, 7, "MATRIX"])
    elif kind == "error":
        doc = {"status": "error", "errorType": rng.choice([None, 422, ["bad_data"], "\x1b[31mbad\x07", "x" * 10000,
                                                           "bad_data", "execution", "timeout"]),
               "error": rng.choice([None, "", "exceeded maximum resolution of 11,000 points per timeseries",
                                    "\r\nX-Injected: 1", {"nested": "error"}, "é" * 2000])}
        if rng.random() < 0.5:
            doc["data"] = {"resultType": "matrix", "result": []}
    elif kind == "labels":
        s = rng.choice(series)
        s["metric"] = rng.choice([
            {**s["metric"], "Hostname": rng.choice(["", "a" * 5000, "h\nX: y", "../../etc", "é", "\x00"])},
            {**s["metric"], "gpu": rng.choice(["-1", "999999999999999999999", "0x1", "", "٣", "1.5"])},
            {**s["metric"], "GPU_I_PROFILE": rng.choice(["99g.1tb", "", "1g.5gb\n", "x" * 300])},
            {f"l{i}": "v" for i in range(300)},
            {**s["metric"], "exported_pod": "", "exported_namespace": "ns"},
        ])
    elif kind == "pair":
        s = rng.choice(series)
        s["values"][rng.randrange(len(s["values"]))] = rng.choice([[1020], [1020, "1", "2"], {"t": 1}, "1020",
                                                                   [None, "1"], [[1020], "1"], []])
    else:
        return _mutate_text(rng, doc, kind)
    return json.dumps(doc).encode()


def _mutate_text(rng: random.Random, doc: dict[str, Any], kind: str) -> bytes:
    if kind == "nesting":
        depth = rng.choice([100, 1000, 100_000])
        return json.dumps(doc).replace('"values": [', '"values": ' + "[" * depth, 1).replace(
            "]}", "]" * depth + "]}", 1).encode()
    elif kind == "dupkey":
        text = json.dumps(doc)
        return rng.choice([text.replace('"status": "success"', '"status": "success", "status": "error"'),
                           text.replace('"resultType": "matrix"', '"resultType": "matrix", "resultType": "vector"'),
                           text.replace('"data": {', '"data": {"result": 5, ', 1)]).encode()
    elif kind == "hugeint":  # past float's range, and past Python's int-digit limit
        digits = rng.choice([400, 5000])
        return json.dumps(doc).replace(f"[{START + 60}", f"[1{'0' * digits}", 1).replace(
            '"values": [[', f'"values": [[1{"0" * digits}, "1"], [', 1).encode()
    elif kind == "truncate":
        raw = json.dumps(doc).encode()
        return raw[: rng.randrange(len(raw))]
    elif kind == "bytes":
        raw = bytearray(json.dumps(doc).encode())
        for _ in range(rng.randint(1, 8)):
            raw[rng.randrange(len(raw))] = rng.randrange(256)
        return bytes(raw)
    elif kind == "encoding":
        text = json.dumps(doc, ensure_ascii=False)
        return rng.choice([b"\xef\xbb\xbf" + text.encode(), text.encode("utf-16"), text.encode() + b"\xff\xfe",
                           text.encode() + b"\x00" * 10, text.encode("latin-1", "replace") + b"\xe9"])
    raise AssertionError(kind)


# --- the HTTP framing ------------------------------------------------------------------------------------

_VALID_STATUS = [b"HTTP/1.1 200 OK", b"HTTP/1.1 200 ", b"HTTP/1.0 200 OK",
                 b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK"]
_BAD_STATUS = [b"HTTP/2 200 OK", b"HTTP/2.0 200 OK", b"HTTP/9.9 200 OK", b"http/1.1 200 OK", b"HTTP/1.1 2000 OK",
               b"HTTP/1.1 99999999999999999999999 OK", b"HTTP/1.1 099 OK", b"HTTP/1.1 -200 OK", b"HTTP/1.1",
               b"HTTP/1.1 200 \xff\xfe\x1b[2J", b"ICY 200 OK", b"HTTP/1.1 204 No Content", b"HTTP/1.1 101 Switching",
               b"HTTP/1.1 400 Bad Request", b"HTTP/1.1 422 Unprocessable Entity", b"HTTP/1.1 503 Unavailable",
               b"HTTP/1.1 500 Internal Server Error", b"HTTP/1.1 401 Unauthorized", b"HTTP/1.1 404 Not Found",
               b"HTTP/1.1 302 Found\r\nLocation: http://admin:evil-pw@evil.example/",
               b"HTTP/1.1 200 " + b"K" * 70_000, b"", b"\x00\x01\x02", b"HTTP/1.1 1\xb2\xb3 OK"]


@dataclass
class _Case:
    index: int
    notes: list[str] = field(default_factory=list)
    pieces: list[tuple[float, bytes]] = field(default_factory=list)  # (seconds to wait before, bytes)
    after: str = "close"  # close | hold | rst | endless
    valid: bool = False
    body: bytes = b""


def _chunked(rng: random.Random, body: bytes, notes: list[str], mutate: bool) -> bytes:
    out = []
    i = 0
    while i < len(body):
        n = len(body[i:i + rng.randint(1, 4096)])
        size = rng.choice([f"{n:x}", f"{n:X}", f"00{n:x}"]).encode()
        ext = rng.choice([b"", b"", b";name=value", b';a="b c"', b";" + b"e" * 1000])
        out.append(size + ext + b"\r\n" + body[i:i + n] + b"\r\n")
        i += n
    trailer = rng.choice([b"", b"", b"X-Trailer: 1\r\n"])
    end = [b"0\r\n" + trailer + b"\r\n"]
    if mutate:
        kind = rng.choice(["size", "size", "longer", "shorter", "nolast", "trailers", "longtrailer", "crlf", "ext",
                           "flood"])
        notes.append(f"chunk:{kind}")
        k = rng.randrange(len(out)) if out else 0
        if kind == "size" and out:
            bad = rng.choice([b"-1", b"zz", b"1 2", b"0x10", b"", b"f" * 20, b"+10", b"1_0", b"\xb2", b" "])
            out[k] = bad + out[k][out[k].index(b"\r\n"):]
        elif kind == "longer" and out:
            out[k] = out[k][:-2] + b"EXTRA\r\n"
        elif kind == "shorter" and out:
            out[k] = out[k][: out[k].index(b"\r\n") + 3] + b"\r\n"
        elif kind == "nolast":
            end = []
        elif kind == "flood" and out:  # a size that is no size, then STREAM bytes (_case streams them)
            bad = rng.choice([b"-1", b"-10", b"ffffffffffff", b"7fffffff"])
            out, end = [bad + b"\r\n" + out[0][out[0].index(b"\r\n") + 2:-2]], []
        elif kind == "trailers":
            end = [b"0\r\n" + b"X-T: y\r\n" * rng.choice([50, 101, 5000]) + b"\r\n"]
        elif kind == "longtrailer":
            end = [b"0\r\nX-T: " + b"y" * 70_000 + b"\r\n\r\n"]
        elif kind == "crlf" and out:
            out[k] = out[k].replace(b"\r\n", b"\n")
        elif kind == "ext" and out:
            out[k] = out[k].replace(b"\r\n", b";" + b"e" * 70_000 + b"\r\n", 1)
    return b"".join(out + end)


def _headers(rng: random.Random, body: bytes, notes: list[str], mutate: bool, chunks: bool,
             http10: bool) -> tuple[bytes, bytes]:
    """(header lines, body as framed) for a body; `chunks`: chunked, its framing mutated."""
    lines = [b"Content-Type: application/json"]
    mode = "chunked" if chunks else "close" if http10 else rng.choice(["length", "length", "chunked", "close"])
    framed = body
    if mode == "length":
        lines.append(b"Content-Length: %d" % len(body))
    elif mode == "chunked":
        lines.append(b"Transfer-Encoding: chunked")
        framed = _chunked(rng, body, notes, chunks)
    else:
        lines.append(b"Connection: close")
    if mutate:
        lines, framed = _mutate_headers(rng, lines, body, framed, notes)
    return b"".join(ln + b"\r\n" for ln in lines), framed


def _mutate_headers(rng: random.Random, lines: list[bytes], body: bytes, framed: bytes,
                    notes: list[str]) -> tuple[list[bytes], bytes]:
    kind = rng.choice(["length", "length", "length", "te", "gzip", "gzipbad", "ce", "longline", "many",
                       "nonascii", "nocolon", "fold", "emptyname", "none"])
    notes.append(f"headers:{kind}")
    if kind == "length":
        value = rng.choice([b"-1", b"-100", b"%d" % (2**64), b"1" + b"0" * 30, b"lots", b"  %d  " % len(body),
                            b"+%d" % len(body), b"0x10", b"\xb2", b"%d, %d" % (len(body), len(body) + 1),
                            b"%d" % (len(body) + 10), b"%d" % max(0, len(body) - 10), b"0"])
        lines.append(b"Content-Length: " + value)
        if rng.random() < 0.5:
            lines.append(b"Content-Length: %d" % len(body))
    elif kind == "te":
        lines.append(b"Transfer-Encoding: " + rng.choice([b"gzip, chunked", b"chunked, gzip", b"identity",
                                                          b"Chunked", b"chunked, chunked", b"xchunked", b""]))
    elif kind == "gzip":
        lines.append(b"Content-Encoding: gzip")
        framed = gzip.compress(body)
        lines = [ln for ln in lines if not ln.startswith((b"Content-Length", b"Transfer-Encoding"))]
        lines.append(b"Content-Length: %d" % len(framed))
    elif kind == "gzipbad":
        lines.append(b"Content-Encoding: " + rng.choice([b"gzip", b"GZIP", b"deflate", b"br"]))
    elif kind == "ce":
        lines.append(b"Content-Encoding: " + rng.choice([b"identity", b"", b"identity, gzip", b"\xff"]))
    elif kind == "longline":
        lines.append(b"X-Big: " + b"y" * rng.choice([60_000, 70_000, 1 << 20]))
    elif kind == "many":
        lines += [b"X-%d: y" % i for i in range(rng.choice([90, 101, 1000]))]
    elif kind == "nonascii":
        lines.append(rng.choice([b"X-\xff\xfe: \xe9\xe8", b"Content-Type: application/json; charset=\xff",
                                 b"X-Ctl: \x1b[2J\x07"]))
    elif kind == "nocolon":
        lines.insert(rng.randrange(len(lines) + 1), b"this is not a header")
    elif kind == "fold":
        lines.append(b"X-Folded: a\r\n  continued")
    elif kind == "emptyname":
        lines.append(b": value")
    return lines, framed


def _case(index: int) -> _Case:
    rng = random.Random(f"{SEED}:{index}")
    case = _Case(index)
    doc = _real_answer(rng)
    case.valid = rng.random() < 0.2
    families = set() if case.valid else set(rng.sample(["status", "headers", "chunks", "body", "timing", "crlf"],
                                                       rng.randint(1, 3)))
    body = _mutate_doc(rng, doc, case.notes) if "body" in families else json.dumps(doc).encode()
    case.body = body
    if "status" in families:
        status = rng.choice(_BAD_STATUS)
        case.notes.append(f"status:{status[:30]!r}")
    else:
        status = rng.choice(_VALID_STATUS)
    http10 = status.startswith(b"HTTP/1.0") or (not status.startswith(b"HTTP/1.1") and rng.random() < 0.5)
    head, framed = _headers(rng, body, case.notes, "headers" in families, "chunks" in families, http10)
    response = status + b"\r\n" + head + b"\r\n" + framed
    if "crlf" in families:
        kind = rng.choice(["lf", "cr", "noblank"])
        case.notes.append(f"crlf:{kind}")
        cut = len(response) - len(framed)
        top = response[:cut]
        top = {"lf": top.replace(b"\r\n", b"\n"), "cr": top.replace(b"\r\n", b"\r"),
               "noblank": top[:-2]}[kind]
        response = top + framed
    if "timing" in families:
        kind = rng.choice(["slow", "early", "early", "rst", "hold", "endless", "fastdrip"])
        case.notes.append(f"timing:{kind}")
        if kind == "slow":  # past the deadline
            case.pieces = _split(rng, response, 40, 0.1)
        elif kind == "fastdrip":
            case.pieces = _split(rng, response, 20, 0.01)
        elif kind in ("early", "rst"):
            case.pieces = [(0.0, response[: rng.randrange(max(1, len(response)))])]
            case.after = "close" if kind == "early" else "rst"
        else:
            case.pieces = [(0.0, response)]
            case.after = kind
    elif case.valid and rng.random() < 0.3:  # dribbled well under the deadline
        case.notes.append("timing:underdeadline")
        case.pieces = _split(rng, response, 20, 0.01)
    else:
        case.pieces = [(0.0, response)]
    if "chunk:flood" in case.notes:
        case.pieces, case.after = [(0.0, response)], "endless"
    if case.valid and b"Content-Length" in head and rng.random() < 0.3:
        case.after = "hold"  # keep-alive after a complete answer: the client must not wait for the close
    if case.valid:
        case.notes.append(f"valid:{status[:16]!r}")
    return case


def _split(rng: random.Random, data: bytes, n: int, delay: float) -> list[tuple[float, bytes]]:
    cuts = sorted(rng.sample(range(1, len(data)), min(n, len(data) - 1))) if len(data) > 1 else []
    bounds = [0, *cuts, len(data)]
    return [(delay if i else 0.0, data[a:b]) for i, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False))]


def _handler(case: _Case) -> Callable[[socket.socket, threading.Event], None]:
    def handler(conn: socket.socket, stop: threading.Event) -> None:
        for delay, data in case.pieces:
            if (delay and stop.wait(delay)) or not send(conn, data):
                return
        if case.after == "hold":
            stop.wait(30)
        elif case.after == "rst":
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close sends RST
        elif case.after == "endless":
            block = b"1," * 32768
            for _ in range(STREAM // len(block)):
                if stop.is_set() or not send(conn, block):
                    return

    return handler


# --- running a case --------------------------------------------------------------------------------------

@dataclass
class _Outcome:
    index: int
    kind: str  # "ok" or the error's kind
    failures: list[str]
    took: float = 0.0


def _kind(message: str, url: str) -> str:
    """An error message's category for the counts: its words after the URL, numbers and quotes elided."""
    text = message.split(f"{url}/api/v1/query_range", 1)[-1].lstrip(": ")
    text = re.sub(r"'[^']*'|\([^)]*\)|\d+", "_", text)
    return " ".join(text.split()[:6])[:80]


def _run(case: _Case) -> _Outcome:
    srv = RawServer(_handler(case))
    url = f"http://127.0.0.1:{srv.port}"
    failures: list[str] = []
    kind = "ok"
    creds = adapter.Credentials(f"Basic {AUTH}", "basic auth from /fuzz/prom.auth")
    client = adapter.PrometheusClient(url, credentials=creds, timeout=TIMEOUT, max_bytes=MAX_BYTES)
    q = ps.QUERIES[0]
    start = time.monotonic()
    try:
        body = client.query_range(q.promql(STEP), START, END, STEP)
        if len(body) > MAX_BYTES:
            failures.append(f"an answer of {len(body)} bytes, over the cap of {MAX_BYTES}")
        if case.valid and body != case.body:
            failures.append(f"a valid answer came back altered ({len(body)} of {len(case.body)} bytes)")
        tally = ps.Tally()
        series = ps.parse_matrix(body, source=f"{url}/api/v1/query_range {q.metric}", start=START, end=END,
                                 tally=tally)
        ps.to_samples([(q, series)], ps.Options(), tally)
    except ps.PrometheusError as err:
        kind = _kind(err.message, url)
        if case.valid:
            failures.append(f"a valid answer was refused: {err.message}")
        line = err.message
        if "\n" in line or "\r" in line or any(not c.isprintable() for c in line):
            failures.append(f"not one printable line: {line!r}")
        if not line.startswith(f"{url}/api/v1/query_range") or len(line) < len(url) + 30:
            failures.append(f"does not name the URL and what happened: {line!r}")
        if PASSWORD in str(err) or AUTH in str(err):
            failures.append(f"shows the client's credentials: {str(err)!r}")
        if re.search(r"://[^/\s@]*@", str(err)):  # e.g. a Location or reason phrase echoed: shown without
            failures.append(f"shows a URL's credentials: {str(err)!r}")
    except BaseException as err:  # what the fuzzer is for: anything else is a defect
        kind = f"UNEXPECTED {type(err).__name__}"
        failures.append(f"{type(err).__name__} reached the caller: {str(err)[:200]!r}")
    took = time.monotonic() - start
    srv.close()
    if took > TIMEOUT + MARGIN:
        failures.append(f"took {took:.2f} s, past the deadline of {TIMEOUT} s + {MARGIN} s")
    return _Outcome(case.index, kind, [f"case {case.index} ({', '.join(case.notes)}): {f}" for f in failures], took)


@pytest.mark.slow
def test_the_client_against_fuzzed_servers() -> None:
    cases = [_case(i) for i in range(CASES)]
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        with ThreadPoolExecutor(WORKERS) as pool:
            outcomes = list(pool.map(_run, cases))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    counts = Counter("ok" if o.kind == "ok" else "error: " + o.kind for o in outcomes)
    print(f"\n{CASES} fuzzed cases (seed {SEED}), {sum(c.valid for c in cases)} controls; traced peak "
          f"{peak / (1 << 20):.1f} MiB; slowest case {max(o.took for o in outcomes):.2f} s (deadline {TIMEOUT:g} s)")
    for kind, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"{n:5d}  {kind}")
    failures = [f for o in outcomes for f in o.failures]
    assert not failures, f"{len(failures)} failures:\n" + "\n".join(failures[:40])
    assert peak < MEMORY_BOUND, f"traced memory peaked at {peak >> 20} MiB"
    assert counts["ok"] >= sum(c.valid for c in cases)  # the controls, at least, came through


@pytest.mark.parametrize("index", [3, 5, 8, 17, 42, 77, 123, 256])
def test_migplan_collect_against_fuzzed_servers(index: int) -> None:
    """A few cases through the CLI: exit 1 with one `error:` line naming the URL, or exit 0; no traceback."""
    from typer.testing import CliRunner

    from migplan.cli.app import app

    case = _case(index)
    expected = _run(case)  # the library's outcome for the same server
    srv = RawServer(_handler(case))
    url = f"http://127.0.0.1:{srv.port}"
    try:
        start = time.monotonic()
        res = CliRunner().invoke(app, ["collect", "--prometheus", url, "--start", f"{START:g}", "--end", f"{END:g}",
                                       "--step", "60s", "--http-timeout", f"{TIMEOUT:g}"])
        took = time.monotonic() - start
    finally:
        srv.close()
    assert res.exception is None or isinstance(res.exception, SystemExit), (case.notes, res.output)
    assert "Traceback" not in res.output
    errors = [ln for ln in res.output.splitlines() if ln.startswith("error:")]
    if expected.kind == "ok":
        assert res.exit_code == 0 and not errors, (case.notes, res.output)
        assert took <= len(ps.QUERIES) * (TIMEOUT + MARGIN)
    else:
        assert res.exit_code == 1, (case.notes, res.output)
        assert len(errors) == 1 and errors[0].startswith(f"error: {url}/api/v1/query_range"), (case.notes, res.output)
        assert PASSWORD not in res.output
        assert took <= TIMEOUT + MARGIN + 2  # + the CLI's own start
