"""Prometheus over HTTP(S) (stdlib urllib only): `query_range` with a timeout, a bounded answer and
TLS verified.

Credentials come from files (`--basic-auth-file` holding `USER:PASSWORD` on its first line,
`--bearer-token-file` holding the token), never from the command line, where `ps` shows them to every
user, and never in a log line or an error message: only the file's name is ever shown. A URL with
`user:pass@` in it is refused for the same reason. Redirects are refused, not followed: urllib would
resend the Authorization header to wherever a redirect points.

Prometheus' API (docs/querying/api.md): GET /api/v1/query_range?query=&start=&end=&step=[&timeout=];
errors come back as HTTP 400/422/503 with a JSON envelope {"status":"error","errorType","error"}.
"""

from __future__ import annotations

import base64
import logging
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import IO, Any

from migplan.errors import InputError
from migplan.history.prom_series import AnswerTooLarge, PrometheusError, error_message
from migplan.text import printable

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 60.0
# One answer. A 10,000-point chunk of 1,000 series is about 200 MiB of JSON and several times that
# once parsed, so larger answers are refused and the caller asks for half the time range instead.
DEFAULT_MAX_BYTES = 32 << 20
_MAX_ERROR_BYTES = 64 << 10
_MAX_SECRET_FILE = 64 << 10
_READ = 1 << 16


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
    parts = urllib.parse.urlsplit(url.strip())
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


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> None:
        raise PrometheusError(f"{printable(req.full_url.split('?')[0], 200)} redirected ({code}) to "
                              f"{printable(newurl.split('?')[0], 200)}; redirects are not followed",
                              hint="give the final URL with --prometheus (credentials are never resent "
                                   "to another address)")


class PrometheusClient:
    """`query_range` against one server. `opener` can be replaced in tests; nothing else is global."""

    def __init__(self, url: str, *, credentials: Credentials | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 max_bytes: int = DEFAULT_MAX_BYTES, ca_file: str | None = None) -> None:
        self.base = check_url(url)
        self.credentials = credentials
        self.timeout = timeout
        self.max_bytes = max_bytes
        try:
            context = ssl.create_default_context(cafile=ca_file)  # verification on, hostname checked
        except (OSError, ssl.SSLError) as err:
            raise InputError(f"cannot load CA file {ca_file}: {printable(str(err), 200)}", key="--ca-file") from None
        self._opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=context), _NoRedirect())

    def query_range(self, query: str, start: float, end: float, step: float) -> bytes:
        params = urllib.parse.urlencode({"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                         "step": f"{step:g}", "timeout": f"{max(1, int(self.timeout))}s"})
        url = f"{self.base}/api/v1/query_range?{params}"
        # check_url admitted only http(s); S310's file:// concern does not apply.
        req = urllib.request.Request(url, headers={"Accept": "application/json",  # noqa: S310
                                                   "User-Agent": "migplan (collect --prometheus)"})
        if self.credentials is not None:
            req.add_unredirected_header("Authorization", self.credentials.header)
        log.debug("GET %s/api/v1/query_range query=%s start=%.0f end=%.0f step=%g%s", self.base, query, start, end,
                  step, f" ({self.credentials.origin})" if self.credentials else "")
        where = f"{self.base}/api/v1/query_range"
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                return _bounded(resp, self.max_bytes, where)
        except urllib.error.HTTPError as err:
            raise _http_error(err, where, self.credentials) from None
        except urllib.error.URLError as err:
            raise _unreachable(err.reason, where) from None
        except (TimeoutError, ConnectionError, ssl.SSLError) as err:
            raise _unreachable(err, where) from None


def _bounded(resp: IO[bytes], limit: int, where: str) -> bytes:
    """Read at most `limit` bytes; a longer answer is refused, not truncated into nonsense."""
    parts: list[bytes] = []
    size = 0
    while True:
        block = resp.read(_READ)
        if not block:
            return b"".join(parts)
        size += len(block)
        if size > limit:
            raise AnswerTooLarge(f"{where}: the answer is larger than {limit >> 20} MiB",
                                  hint="use a larger --step, a shorter --window or a --selector")
        parts.append(block)


def _http_error(err: urllib.error.HTTPError, where: str, creds: Credentials | None) -> PrometheusError:
    try:
        body = err.read(_MAX_ERROR_BYTES) if err.fp is not None else b""
    except OSError:
        body = b""
    detail = error_message(body) or printable(body.decode("utf-8", "replace"), 300) or printable(str(err.reason), 100)
    hint = None
    if err.code in (401, 403):
        hint = (f"Prometheus refused the credentials ({creds.origin})" if creds else
                "Prometheus wants credentials: pass --basic-auth-file FILE or --bearer-token-file FILE")
    elif err.code == 400 and "11,000 points" in detail:
        hint = "use a larger --step (migplan splits the window; this is a bug if it happens)"
    return PrometheusError(f"{where}: HTTP {err.code}: {detail}", hint=hint)


def _unreachable(reason: object, where: str) -> PrometheusError:
    if isinstance(reason, ssl.SSLCertVerificationError):
        why = printable(reason.verify_message or str(reason))
        return PrometheusError(f"{where}: TLS certificate not trusted: {why}",
                               hint="pass --ca-file with the CA that signed the server's certificate")
    if isinstance(reason, TimeoutError):
        return PrometheusError(f"{where}: no answer in time", hint="raise --timeout, or query less at once "
                                                                   "(a larger --step, a --selector)")
    text = reason.strerror if isinstance(reason, OSError) and reason.strerror else str(reason)
    return PrometheusError(f"{where}: cannot connect: {printable(text, 200)}",
                           hint="check the URL, and that this machine can reach the server")
