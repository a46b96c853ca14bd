"""known_hosts read and matched the way OpenSSH does (sshd(8), "SSH_KNOWN_HOSTS FILE FORMAT").

No paramiko here: keys are (type, blob) pairs, so the rules can be tested on their own and against
the real `ssh` client (tests/fleet/test_known_hosts_ssh.py).

The name looked up is the one used to connect, lowercased: `host` on port 22, `[host]:port` on any
other port (`host_name`). A line is

    [@marker] patterns keytype base64 [comment]

* `patterns`: comma-separated, matched case-insensitively; `*` and `?` wildcards; a pattern
  starting with `!` that matches makes the whole line not match (whatever else matches). A plain
  `host` pattern matches the name of port 22; for another port the name is `[host]:port`, but when
  NOTHING is recorded under `[host]:port`, OpenSSH retries with the plain `host` and accepts a line
  there that holds exactly the presented key ("checking without port identifier"); so does migplan.
* a hashed entry `|1|base64(salt)|base64(HMAC-SHA1(salt, name))` (`ssh-keygen -H`) matches exactly
  one name.
* `@revoked`: the key is refused for the matching hosts, always (even when another line lists it, and
  even with accept-new). `@cert-authority`: the key is a CA for host certificates; migplan does not
  do certificate authentication, so such lines never make a plain key trusted.
* comments (`#`), blank lines, leading spaces/tabs are ignored; a line that cannot be parsed (bad
  marker, unknown key type, base64 that does not decode to a key of the stated type, bad hash) is
  skipped with a warning naming the file and line, and does not count for any host.

Verdicts for a key a server presents (OpenSSH hostfile.c, check_hostkeys_by_key_or_type):
`OK` when a plain (unmarked) line for the host has exactly that key; otherwise `CHANGED` when the
host has any plain line at all (a key of the same type, or of another type: OpenSSH treats both as
"REMOTE HOST IDENTIFICATION HAS CHANGED"); otherwise `UNKNOWN`. `REVOKED` overrides all three when
a matching `@revoked` line holds the key. For `[host]:port` with nothing recorded, the plain-host
retry above can turn `UNKNOWN` into `OK` (same key) or `REVOKED`.

These rules were checked against OpenSSH 9.2's `ssh` (tests/fleet/test_known_hosts_ssh.py); where
migplan is stricter on purpose: a host with only @cert-authority lines is never recorded by
accept-new, and a key @revoked under the plain host name is refused for `[host]:port` too.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import logging
import os
import re
import stat
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from migplan.errors import InputError
from migplan.files import append_durable, check_replaceable

log = logging.getLogger(__name__)

SSH_PORT = 22
MARKER_REVOKED = "revoked"
MARKER_CA = "cert-authority"
MAX_FILE_BYTES = 64 * 1024 * 1024
_MAX_SUBPATTERN = 1023  # OpenSSH match_pattern_list: a longer sub-pattern never matches
_SALT_LEN = 20  # SHA1 digest size; OpenSSH refuses other salt lengths
_BRACKETED = re.compile(r"\[(.+)\]:([0-9]+)")
_UPPER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")

# Key types OpenSSH reads from known_hosts (the name in the line -> the name inside the blob).
_PLAIN_TYPES = {
    "ssh-ed25519": "ssh-ed25519",
    "ssh-rsa": "ssh-rsa",
    "rsa-sha2-256": "ssh-rsa",  # signature names OpenSSH also accepts for an RSA key
    "rsa-sha2-512": "ssh-rsa",
    "ssh-dss": "ssh-dss",
    "ecdsa-sha2-nistp256": "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384": "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521": "ecdsa-sha2-nistp521",
    "sk-ssh-ed25519@openssh.com": "sk-ssh-ed25519@openssh.com",
    "sk-ecdsa-sha2-nistp256@openssh.com": "sk-ecdsa-sha2-nistp256@openssh.com",
}
_CERT_SUFFIX = "-cert-v01@openssh.com"
_EC_POINT = {"nistp256": 65, "nistp384": 97, "nistp521": 133}


def ascii_lower(text: str) -> str:
    """Lowercase A-Z only, as OpenSSH's tolower() in the C locale."""
    return text.translate(_UPPER)


def host_name(host: str, port: int = SSH_PORT) -> str:
    """The name known_hosts records for a connection: `host`, or `[host]:port` off port 22; lowercased."""
    bare = ascii_lower(host.strip("[]"))
    return bare if port == SSH_PORT else f"[{bare}]:{port}"


# --- keys ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PublicKey:
    """A public key as SSH encodes it: the type name and the wire-format blob."""

    keytype: str
    blob: bytes

    @property
    def fingerprint(self) -> str:
        """`SHA256:<base64, unpadded>`, as `ssh-keygen -lf` prints it."""
        digest = hashlib.sha256(self.blob).digest()
        return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")

    @property
    def base64(self) -> str:
        return base64.b64encode(self.blob).decode("ascii")

    def __str__(self) -> str:
        return f"{self.keytype} {self.fingerprint}"

    @classmethod
    def from_blob(cls, blob: bytes) -> PublicKey:
        """The key in a wire-format blob; ValueError when the blob is not a well-formed key."""
        return cls(_check_blob(blob), bytes(blob))

    @classmethod
    def from_text(cls, keytype: str, data: str) -> PublicKey:
        """`keytype base64` as in known_hosts or a .pub file; ValueError when they do not agree."""
        want = _PLAIN_TYPES.get(keytype)  # exact names only (OpenSSH refuses 'ED25519' here)
        if want is None and not keytype.endswith(_CERT_SUFFIX):
            raise ValueError(f"unknown key type {keytype!r}")
        try:
            blob = base64.b64decode(data.encode("ascii"), validate=True)
        except (binascii.Error, UnicodeEncodeError, ValueError):
            raise ValueError("the key is not valid base64") from None
        key = cls.from_blob(blob)
        if key.keytype != (want or keytype):
            raise ValueError(f"the line says {keytype} but the key is {key.keytype}")
        return key


class _Reader:
    def __init__(self, blob: bytes) -> None:
        self.blob = blob
        self.pos = 0

    def string(self) -> bytes:
        if self.pos + 4 > len(self.blob):
            raise ValueError("truncated key")
        n = int.from_bytes(self.blob[self.pos:self.pos + 4], "big")
        start = self.pos + 4
        if start + n > len(self.blob):
            raise ValueError("truncated key")
        self.pos = start + n
        return self.blob[start:self.pos]

    def mpint(self) -> int:
        raw = self.string()
        if raw and raw[0] & 0x80:
            raise ValueError("negative number in key")
        return int.from_bytes(raw, "big")

    def end(self) -> None:
        if self.pos != len(self.blob):
            raise ValueError("trailing data after the key")


def _check_blob(blob: bytes) -> str:
    """The key type inside a blob, after checking its structure as sshkey_from_blob would."""
    r = _Reader(blob)
    try:
        name = r.string().decode("ascii")
    except UnicodeDecodeError:
        raise ValueError("bad key type in blob") from None
    if name.endswith(_CERT_SUFFIX):
        return name  # certificates: not parsed further (never trusted as a plain host key)
    if name == "ssh-ed25519" or name == "sk-ssh-ed25519@openssh.com":
        if len(r.string()) != 32:
            raise ValueError("bad ed25519 key")
        if name.startswith("sk-"):
            r.string()  # application
    elif name == "ssh-rsa":
        e, n = r.mpint(), r.mpint()
        if e == 0 or n.bit_length() < 1024:
            raise ValueError("RSA key too small")
    elif name == "ssh-dss":
        for _ in range(4):
            r.mpint()
    elif name.startswith(("ecdsa-sha2-", "sk-ecdsa-sha2-")):
        curve = name.removeprefix("sk-").removeprefix("ecdsa-sha2-").removesuffix("@openssh.com")
        if r.string().decode("ascii", "replace") != curve or curve not in _EC_POINT:
            raise ValueError("ECDSA curve does not match the key type")
        point = r.string()
        if len(point) != _EC_POINT[curve] or point[0] != 4:
            raise ValueError("bad ECDSA point")
        if name.startswith("sk-"):
            r.string()
    else:
        raise ValueError(f"unknown key type {name!r}")
    r.end()
    return name


# --- host patterns -----------------------------------------------------------------------------------

def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile("".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern), re.DOTALL)


def match_patterns(name: str, patterns: str) -> bool:
    """OpenSSH match_hostname(name, patterns) == 1: a positive match and no negated one."""
    host = ascii_lower(name)
    positive = False
    for sub in patterns.split(","):
        negated = sub.startswith("!")
        if negated:
            sub = sub[1:]
        if len(sub) >= _MAX_SUBPATTERN:
            return False
        if _glob(ascii_lower(sub)).fullmatch(host):
            if negated:
                return False
            positive = True
    return positive


def hash_name(name: str, salt: bytes) -> str:
    """`|1|salt|hash` for a name, as `ssh-keygen -H` writes it."""
    digest = hmac.new(salt, name.encode("utf-8"), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def _hashed_salt(field_text: str) -> bytes:
    """The salt of a `|1|salt|hash` field; ValueError when OpenSSH could not use it."""
    parts = field_text.split("|")
    if len(parts) != 4 or parts[1] != "1":
        raise ValueError("bad hashed host name")
    try:
        salt = base64.b64decode(parts[2], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("bad hashed host name (salt is not base64)") from None
    if len(salt) != _SALT_LEN:
        raise ValueError("bad hashed host name (salt length)")
    return salt


# --- lines -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Entry:
    """One usable known_hosts line."""

    hosts: str  # the pattern list, or the `|1|salt|hash` field
    key: PublicKey
    marker: str | None  # None, MARKER_REVOKED or MARKER_CA
    source: str
    line: int
    salt: bytes | None = None  # set for hashed entries

    @property
    def hashed(self) -> bool:
        return self.salt is not None

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"

    def matches(self, name: str) -> bool:
        """Does this line apply to `name` (as `host_name` gives it)?"""
        if self.salt is not None:
            return hmac.compare_digest(hash_name(ascii_lower(name), self.salt), self.hosts)
        return match_patterns(name, self.hosts)


@dataclass(frozen=True)
class BadLine:
    source: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.reason}; line ignored"


def parse_line(text: str, source: str, number: int) -> Entry | BadLine | None:
    """One line: an Entry, a BadLine (skipped, with why) or None for a comment/blank line."""
    body = text.rstrip("\r\n").lstrip(" \t")
    if not body or body.startswith("#"):
        return None
    fields = [f for f in re.split(r"[ \t]+", body) if f]
    marker = None
    if fields[0].startswith("@"):
        marker = {"@revoked": MARKER_REVOKED, "@cert-authority": MARKER_CA}.get(fields[0])
        if marker is None:
            return BadLine(source, number, f"unknown marker {fields[0][:40]!r}")
        fields = fields[1:]
    if len(fields) < 3:
        return BadLine(source, number, "expected 'hosts keytype base64-key'")
    hosts, keytype, data = fields[0], fields[1], fields[2]
    salt = None
    if hosts.startswith("|"):
        try:
            salt = _hashed_salt(hosts)
        except ValueError as err:
            return BadLine(source, number, str(err))
    try:
        key = PublicKey.from_text(keytype, data)
    except ValueError as err:
        return BadLine(source, number, f"not a usable key ({err})")
    return Entry(hosts, key, marker, source, number, salt)


def parse(text: str, source: str, *, warn: Callable[[BadLine], None] | None = None) -> list[Entry]:
    """Every usable line of a known_hosts text; each unusable one goes to `warn` (default: a log warning)."""
    entries: list[Entry] = []
    for number, line in enumerate(text.split("\n"), 1):
        got = parse_line(line, source, number)
        if isinstance(got, Entry):
            entries.append(got)
        elif isinstance(got, BadLine):
            (warn or _warn)(got)
    return entries


def _warn(bad: BadLine) -> None:
    log.warning("%s", bad)


# --- verdicts ----------------------------------------------------------------------------------------

class Status(enum.Enum):
    OK = "ok"
    CHANGED = "changed"
    REVOKED = "revoked"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class Verdict:
    """What known_hosts says about `key` presented for `name`."""

    status: Status
    name: str
    key: PublicKey
    matched: Entry | None = None  # OK: the line with the key; REVOKED: the @revoked line
    recorded: tuple[Entry, ...] = ()  # CHANGED: the plain lines for the host (same key type first)
    authorities: tuple[Entry, ...] = ()  # @cert-authority lines that apply to the host

    @property
    def ok(self) -> bool:
        return self.status is Status.OK


def _check_name(entries: Sequence[Entry], name: str, key: PublicKey) -> Verdict:
    mine = [e for e in entries if e.matches(name)]
    plain = [e for e in mine if e.marker is None]
    authorities = tuple(e for e in mine if e.marker == MARKER_CA)
    revoked = next((e for e in mine if e.marker == MARKER_REVOKED and e.key.blob == key.blob), None)
    if revoked is not None:
        return Verdict(Status.REVOKED, name, key, matched=revoked, authorities=authorities)
    same = next((e for e in plain if e.key.blob == key.blob), None)
    if same is not None:
        return Verdict(Status.OK, name, key, matched=same, authorities=authorities)
    if plain:
        ordered = sorted(plain, key=lambda e: e.key.keytype != key.keytype)
        return Verdict(Status.CHANGED, name, key, recorded=tuple(ordered), authorities=authorities)
    return Verdict(Status.UNKNOWN, name, key, authorities=authorities)


def without_port(name: str) -> str | None:
    """`[host]:port` -> `host` (the name OpenSSH retries with); None for a name without a port."""
    m = _BRACKETED.fullmatch(name)
    return m.group(1) if m else None


def check(entries: Iterable[Entry], name: str, key: PublicKey) -> Verdict:
    """The verdict for `key` presented by the server reached as `name` (see the module notes).

    As OpenSSH (sshconnect.c, "checking without port identifier"): when nothing at all is recorded
    for `[host]:port`, a line for the plain `host` holding exactly this key is accepted too. Anything
    else found under the plain name leaves the host unknown, except a matching `@revoked` line, which
    migplan honours (stricter than OpenSSH, which would then treat the host as new).
    """
    listed = list(entries)
    verdict = _check_name(listed, name, key)
    plain_name = without_port(name)
    if verdict.status is not Status.UNKNOWN or plain_name is None:
        return verdict
    fallback = _check_name(listed, plain_name, key)
    authorities = verdict.authorities + fallback.authorities
    if fallback.status in (Status.OK, Status.REVOKED):
        return Verdict(fallback.status, name, key, matched=fallback.matched, authorities=authorities)
    return Verdict(Status.UNKNOWN, name, key, authorities=authorities)


# --- the file ----------------------------------------------------------------------------------------

@dataclass
class KnownHostsFile:
    """A known_hosts file: loaded once, checked from many threads, new keys appended (thread-safe).

    `writable=True` (accept-new) checks up front that new keys can be recorded there: a directory,
    a device such as /dev/null, a FIFO or a socket is refused with an InputError.
    """

    path: str
    writable: bool = False
    entries: list[Entry] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _by_name: dict[str, list[Entry]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.path = os.path.expanduser(self.path)
        if self.writable:
            try:
                check_replaceable(self.path)
            except InputError as err:
                raise InputError(f"cannot record new host keys in {self.path}: {err.message}",
                                 hint="give --known-hosts a regular file (it is created when missing)") from None
        self.entries = self._load()

    def _load(self) -> list[Entry]:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return []
        except OSError as err:
            raise InputError(f"cannot read known hosts: {err.strerror}", source=self.path) from None
        if not stat.S_ISREG(st.st_mode):
            if os.path.realpath(self.path) == os.devnull:
                return []
            raise InputError("known hosts is not a regular file", source=self.path,
                             hint="give --known-hosts a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise InputError(f"known hosts is larger than {MAX_FILE_BYTES} bytes", source=self.path)
        if st.st_mode & 0o022:
            log.warning("%s is writable by group or others: whoever can write it decides which hosts migplan "
                        "trusts (chmod go-w %s)", self.path, self.path)
        try:
            with open(self.path, encoding="utf-8", errors="surrogateescape", newline="") as fh:
                text = fh.read(MAX_FILE_BYTES + 1)
        except OSError as err:
            raise InputError(f"cannot read known hosts: {err.strerror}", source=self.path) from None
        return parse(text, self.path)

    def _matching(self, name: str) -> list[Entry]:
        """The lines for `name` (cached: hashed lines cost an HMAC each; hold the lock)."""
        found = self._by_name.get(name)
        if found is None:
            found = self._by_name[name] = [e for e in self.entries if e.matches(name)]
        return found

    def check(self, name: str, key: PublicKey) -> Verdict:
        with self._lock:
            candidates = list(self._matching(name))
            plain_name = without_port(name)
            if plain_name is not None:
                candidates += [e for e in self._matching(plain_name) if e not in candidates]
            return check(candidates, name, key)

    def key_types(self, name: str) -> list[str]:
        """The plain key types recorded for `name`, in file order (to prefer them when negotiating)."""
        with self._lock:
            found: list[str] = []
            for e in self._matching(name):
                if e.marker is None and e.key.keytype not in found:
                    found.append(e.key.keytype)
            return found

    def record(self, name: str, key: PublicKey) -> Verdict:
        """Accept-new: append `name keytype base64` when `name` is still unknown; the verdict either way.

        The check and the append happen under one lock, so two connections to the same host add one
        line, and a key recorded meanwhile by another connection is checked like any other.
        """
        with self._lock:
            verdict = check(self.entries, name, key)
            if verdict.status is not Status.UNKNOWN or verdict.authorities:
                return verdict
            line = f"{ascii_lower(name)} {key.keytype} {key.base64}\n"
            append_durable(self.path, self._separator() + line, mode=0o600, private=True)
            self.entries.append(Entry(ascii_lower(name), key, None, self.path, self._line_count()))
            self._by_name.clear()
            return Verdict(Status.OK, name, key, matched=self.entries[-1])

    def _separator(self) -> str:
        """A newline first when the file does not end with one (the new line must stand alone)."""
        try:
            with open(self.path, "rb") as fh:
                fh.seek(0, os.SEEK_END)
                if fh.tell() == 0:
                    return ""
                fh.seek(-1, os.SEEK_END)
                return "" if fh.read(1) == b"\n" else "\n"
        except OSError:
            return ""

    def _line_count(self) -> int:
        try:
            with open(self.path, "rb") as fh:
                return sum(1 for _ in fh)
        except OSError:
            return 0
