"""Prometheus over HTTP(S) (stdlib urllib only): `query_range` with a timeout, a bounded answer and
TLS verified.

Credentials come from files (`--basic-auth-file` holding `USER:PASSWORD` on its first line,
`--bearer-token-file` holding the token), never from the command line, where `ps` shows them to every
user, and never in a log line or an error message: only the file's name is ever shown. A URL with
`user:pass@` in it is refused for the same reason. Redirects are refused, not followed: urllib would
resend the Authorization header to wherever a redirect points.

One deadline per request: `timeout` (`--http-timeout`) bounds the name resolution, every connect attempt,
the TLS handshake, the headers and the body together, and the answer is bounded in size (`max_bytes`) and
strictly framed: migplan/adapters/prom_transport.py does both. Every failure of the HTTP client (not an HTTP
server, a header line too long, a name that does not resolve, a connection refused, reset or cut short, the
deadline) is one PrometheusError naming the URL (which never holds credentials: `check_url`) and what to do.

Prometheus' API (docs/querying/api.md): GET /api/v1/query_range?query=&start=&end=&step=[&timeout=];
errors come back as HTTP 400/422/503 with a JSON envelope {"status":"error","errorType","error"}.
"""

from __future__ import annotations

import base64
import http.client
import logging
import os
import re
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from migplan.adapters.prom_transport import ConnectFailed, Deadline, Resolver, read_body, system_resolver, watched
from migplan.errors import InputError
from migplan.history.prom_series import PrometheusError, error_message
from migplan.text import printable

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 60.0
# One answer. A 10,000-point chunk of 1,000 series is about 200 MiB of JSON and several times that
# once parsed, so larger answers are refused and the caller asks for half the time range instead.
DEFAULT_MAX_BYTES = 32 << 20
_MAX_ERROR_BYTES = 64 << 10
_MAX_SECRET_FILE = 64 << 10


@dataclass(frozen=True)
class Credentials:
    """The Authorization header value, kept out of repr() so that it never reaches a log or a traceback."""

    header: str = field(repr=False)
    origin: str  # "basic auth from FILE" / "bearer token from FILE": what may be shown


def _secret_file(path: str, option: str) -> str:
    try:
        with open(path, "rb") as f:
            raw = f.read(_MAX_SECRET_FILE + 1)
    except OSError as err:
        raise InputError(f"cannot read {path}: {err.strerror or err}", key=option,
                         hint="give a file readable by this user (mode 0600)") from None
    if len(raw) > _MAX_SECRET_FILE:
        raise InputError(f"{path} is larger than {_MAX_SECRET_FILE} bytes; it is not a credentials file", key=option)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text", key=option) from None
    lines = text.splitlines()
    value = lines[0].strip() if lines else ""
    if not value:
        raise InputError(f"{path} is empty", key=option)
    # CR, LF and other controls in a header value would split the request (header injection).
    if any(not c.isprintable() for c in value):
        raise InputError(f"{path}: the first line holds control characters", key=option)
    return value


def basic_auth(path: str) -> Credentials:
    value = _secret_file(path, "--basic-auth-file")
    user, sep, password = value.partition(":")
    if not sep or not user:
        raise InputError(f"{path}: expected USER:PASSWORD on the first line", key="--basic-auth-file")
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return Credentials(f"Basic {token}", f"basic auth from {path}")


def bearer_token(path: str) -> Credentials:
    value = _secret_file(path, "--bearer-token-file")
    if any(c.isspace() for c in value) or not value.isascii():
        raise InputError(f"{path}: a bearer token is one word of ASCII characters", key="--bearer-token-file")
    return Credentials(f"Bearer {value}", f"bearer token from {path}")


def loose_permissions(path: str) -> bool:
    """True when group or others may read the credentials file (worth a warning, as ssh does)."""
    try:
        return bool(os.stat(path).st_mode & 0o077)
    except OSError:
        return False


def check_url(url: str) -> str:
    """The base URL, normalised (no trailing slash); refused with credentials, a query or a fragment."""
    url = url.strip()
    if any(ord(c) <= 0x20 or c == "\x7f" for c in url):  # urlsplit would silently drop CR, LF and TAB
        raise InputError(f"{printable(url, 200)!r} holds spaces or control characters", key="--prometheus",
                         hint="give the server's base URL, e.g. http://prometheus.monitoring:9090")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"{printable(url, 200)!r} is not an http:// or https:// URL", key="--prometheus",
                         hint="e.g. http://prometheus.monitoring:9090 or https://prom.example.com/prometheus")
    if parts.username is not None or parts.password is not None:
        raise InputError("the URL holds credentials; they would show in the process list", key="--prometheus",
                         hint="put USER:PASSWORD in a file and pass --basic-auth-file FILE")
    if parts.query or parts.fragment:
        raise InputError("the URL must not have a query (?...) or fragment (#...)", key="--prometheus",
                         hint="give the server's base URL; migplan adds /api/v1/query_range")
    try:
        _ = parts.port
    except ValueError:
        raise InputError(f"{printable(url, 200)!r} has an invalid port", key="--prometheus") from None
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def shown_url(url: str) -> str:
    """`url` as an error message may show it: without `user:password@`, a query or a fragment, printable."""
    try:
        parts = urllib.parse.urlsplit(url)
        netloc = parts.netloc.rpartition("@")[2]
        return printable(urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, "", "")), 200)
    except ValueError:
        return "(an invalid URL)"


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        raise PrometheusError(f"{shown_url(req.full_url)} redirected ({code}) to "
                              f"{shown_url(newurl)}; redirects are not followed",
                              hint="give the final URL with --prometheus (credentials are never resent "
                                   "to another address)")


class _HttpHandler(urllib.request.HTTPHandler):
    def __init__(self, resolver: Resolver) -> None:
        super().__init__()
        self._resolver = resolver

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        deadline = _deadline_of(req)
        return self.do_open(lambda host, **kw: watched(http.client.HTTPConnection(host, **kw), deadline,
                                                       self._resolver), req)


class _HttpsHandler(urllib.request.HTTPSHandler):
    def __init__(self, context: ssl.SSLContext, resolver: Resolver) -> None:
        super().__init__(context=context)
        self._tls = context
        self._resolver = resolver

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        deadline = _deadline_of(req)
        return self.do_open(lambda host, **kw: watched(http.client.HTTPSConnection(host, **kw), deadline,
                                                       self._resolver), req, context=self._tls)


def _deadline_of(req: urllib.request.Request) -> Deadline:
    deadline = getattr(req, "migplan_deadline", None)
    if not isinstance(deadline, Deadline):
        raise TypeError("a request of PrometheusClient carries its Deadline")  # a bug: every request has one
    return deadline


class PrometheusClient:
    """`query_range` against one server. `resolver` (host, port -> getaddrinfo's tuples) can be replaced in
    tests; nothing else is global."""

    def __init__(self, url: str, *, credentials: Credentials | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 max_bytes: int = DEFAULT_MAX_BYTES, ca_file: str | None = None,
                 resolver: Resolver = system_resolver) -> None:
        self.base = check_url(url)
        self.credentials = credentials
        self.timeout = timeout
        self.max_bytes = max_bytes
        try:
            context = ssl.create_default_context(cafile=ca_file)  # verification on, hostname checked
        except (OSError, ssl.SSLError) as err:
            raise InputError(f"cannot load CA file {ca_file}: {printable(str(err), 200)}", key="--ca-file") from None
        self._opener = urllib.request.build_opener(_HttpHandler(resolver), _HttpsHandler(context, resolver),
                                                   _NoRedirect())

    def query_range(self, query: str, start: float, end: float, step: float) -> bytes:
        params = urllib.parse.urlencode({"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                         "step": f"{step:g}", "timeout": f"{max(1, int(self.timeout))}s"})
        url = f"{self.base}/api/v1/query_range?{params}"
        # check_url admitted only http(s); S310's file:// concern does not apply.
        req = urllib.request.Request(url, headers={"Accept": "application/json",  # noqa: S310 - http(s) only
                                                   "Accept-Encoding": "identity",
                                                   "User-Agent": "migplan (collect --prometheus)"})
        if self.credentials is not None:
            req.add_unredirected_header("Authorization", self.credentials.header)
        log.debug("GET %s/api/v1/query_range query=%s start=%.0f end=%.0f step=%g%s", self.base, query, start, end,
                  step, f" ({self.credentials.origin})" if self.credentials else "")
        where = printable(f"{self.base}/api/v1/query_range", 300)
        with Deadline(self.timeout) as deadline:
            req.migplan_deadline = deadline  # type: ignore[attr-defined]  # read back (getattr) when the connection opens
            try:
                with self._opener.open(req, timeout=self.timeout) as resp:
                    body = read_body(resp, self.max_bytes, where)
                if deadline.expired():  # the watchdog may have cut the body short at the deadline
                    raise _timed_out(where, self.timeout)
                return body
            except PrometheusError:
                if deadline.expired():  # a body cut short by the watchdog is the deadline, not the server
                    raise _timed_out(where, self.timeout) from None
                raise
            except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as err:
                raise _failure(err, where, self.timeout, self.credentials, deadline.expired()) from None


def _failure(err: Exception, where: str, timeout: float, creds: Credentials | None,
             expired: bool) -> PrometheusError:
    """One PrometheusError for whatever urllib, http.client, ssl or the socket raised."""
    reason = err.reason if isinstance(err, urllib.error.URLError) and not isinstance(err, urllib.error.HTTPError) \
        else err
    if isinstance(reason, ConnectFailed):  # says itself which phase the deadline ended, if it did
        return PrometheusError(f"{where}: {reason.what}", hint=(
            "raise --http-timeout, or check that this machine can reach the server" if reason.timed_out
            else "check the URL, and that this machine can reach the server"))
    if expired:
        return _timed_out(where, timeout)
    if isinstance(reason, urllib.error.HTTPError):
        return _http_error(reason, where, creds)
    return _client_error(reason, where, timeout)


def _http_error(err: urllib.error.HTTPError, where: str, creds: Credentials | None) -> PrometheusError:
    body = b""
    if isinstance(err.fp, http.client.HTTPResponse):  # the first 64 KiB of the page, framed strictly
        try:
            body = read_body(err.fp, _MAX_ERROR_BYTES, where, truncate=True)
        except (PrometheusError, http.client.HTTPException, OSError, ValueError):
            body = b""
    detail = _without_userinfo(error_message(body) or printable(body.decode("utf-8", "replace"), 300)
                               or printable(str(err.reason), 100))
    hint = None
    if err.code in (401, 403):
        hint = (f"Prometheus refused the credentials ({creds.origin})" if creds else
                "Prometheus wants credentials: pass --basic-auth-file FILE or --bearer-token-file FILE")
    elif err.code == 400 and "11,000 points" in detail:
        hint = "use a larger --step (migplan splits the window; this is a bug if it happens)"
    elif err.code == 404:
        hint = "check the URL: Prometheus' base URL (or its API prefix), e.g. http://prometheus:9090"
    elif err.code >= 500:
        hint = "Prometheus (or a proxy in front of it) failed: try again, or query less at once (a larger --step)"
    else:
        hint = "check the URL and the query; the message is the server's own"
    return PrometheusError(f"{where}: HTTP {err.code}: {detail}", hint=hint)


_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s@]*@")


def _without_userinfo(text: str) -> str:
    """Server text as a message may show it: a URL's `user:password@` removed, as `shown_url` does (a
    reason phrase or error page can echo a URL with credentials in it)."""
    return _USERINFO.sub(r"\1", text)


def _timed_out(where: str, timeout: float) -> PrometheusError:
    return PrometheusError(f"{where}: no complete answer within {timeout:g} s (--http-timeout)",
                           hint="raise --http-timeout, or query less at once (a larger --step, a --selector)")


def _client_error(reason: object, where: str, timeout: float) -> PrometheusError:
    """One message for whatever the HTTP client raised (urllib's URLError reason, http.client, the socket)."""
    if isinstance(reason, TimeoutError | socket.timeout):
        return _timed_out(where, timeout)
    if isinstance(reason, ssl.SSLError):  # also a ValueError (SSLCertVerificationError) and an OSError
        return _unreachable(reason, where)
    if isinstance(reason, http.client.RemoteDisconnected):
        return PrometheusError(f"{where}: the server closed the connection without answering",
                               hint="check that the URL is Prometheus' HTTP(S) port (9090 by default)")
    if isinstance(reason, http.client.BadStatusLine):
        line = _without_userinfo(printable(str(getattr(reason, "line", reason)).strip(), 80))
        return PrometheusError(f"{where}: not an HTTP server (it answered {line!r})",
                               hint="check that the URL is Prometheus' HTTP(S) port (9090 by default), not "
                                    "another service")
    if isinstance(reason, http.client.IncompleteRead):
        return PrometheusError(f"{where}: the answer was cut short ({len(reason.partial)} bytes, "
                               f"{reason.expected if reason.expected is not None else 'more'} more expected)",
                               hint="try again; if it persists, check the server or a proxy in between")
    if isinstance(reason, http.client.InvalidURL):
        return PrometheusError(f"{where}: invalid URL: {printable(str(reason), 120)}",
                               hint="give the server's base URL, e.g. http://prometheus.monitoring:9090")
    if isinstance(reason, http.client.HTTPException | ValueError):
        what = _without_userinfo(printable(str(reason) or type(reason).__name__, 120))
        return PrometheusError(f"{where}: not a valid HTTP answer: {what}",
                               hint="check that the URL is Prometheus' HTTP(S) port (9090 by default)")
    if isinstance(reason, ConnectionResetError | BrokenPipeError | ConnectionAbortedError):
        return PrometheusError(f"{where}: the connection was dropped: {printable(reason.strerror or str(reason), 120)}",
                               hint="try again; if it persists, check the server or a proxy in between")
    return _unreachable(reason, where)


def _unreachable(reason: object, where: str) -> PrometheusError:
    if isinstance(reason, ssl.SSLCertVerificationError):
        why = printable(reason.verify_message or str(reason))
        return PrometheusError(f"{where}: TLS certificate not trusted: {why}",
                               hint="pass --ca-file with the CA that signed the server's certificate")
    if isinstance(reason, TimeoutError):
        return PrometheusError(f"{where}: no answer in time", hint="raise --http-timeout, or query less at once "
                                                                   "(a larger --step, a --selector)")
    text = reason.strerror if isinstance(reason, OSError) and reason.strerror else str(reason)
    return PrometheusError(f"{where}: cannot connect: {printable(text, 200)}",
                           hint="check the URL, and that this machine can reach the server")
