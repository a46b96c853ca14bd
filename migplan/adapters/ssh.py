"""SSH transport (the only module that imports paramiko): one connection per host, strict host keys.

Connection settings come from the inventory first, then `~/.ssh/config` (Host, HostName, User,
Port, IdentityFile, IdentitiesOnly, ProxyJump, ProxyCommand), then defaults (port 22, the local user name,
ssh-agent keys and ~/.ssh/id_*), as Ansible does. A bad value in ssh_config (`Port 22abc`, a
`ProxyCommand` that needs a shell, a malformed `ProxyJump`) is an input error naming the file and line.

Proxies, from the inventory (`Host.ssh_args`: `ansible_ssh_common_args` and the like, read by
migplan.inventory.ssh_args) or else from ssh_config, with OpenSSH's meaning:

* ProxyJump `a,b`: a chain of real SSH connections, each jump host resolved against ssh_config like any host
  (its own ProxyJump or ProxyCommand included, as `ssh -J` does) and its key verified against known_hosts; each
  next hop is reached through a `direct-tcpip` channel of the previous one, passed to paramiko as `sock=`. A jump
  host without an IdentityFile of its own is offered the inventory's key_file (ssh-agent and ~/.ssh/id_* too);
* ProxyCommand: `_ProxyCommand` (paramiko.ProxyCommand, without a shell) reaches the first hop, with `%h %p %r
  %n %%` expanded from the resolved host, port and user (ssh_config's raw text is kept for that: paramiko would
  expand it with ssh_config's values, not the inventory's); what it prints on stderr goes into the error when the
  connection fails;
* an inventory's UserKnownHostsFile: the target's key is verified against that file (jump hosts: --known-hosts).

Host keys are verified by migplan itself, with OpenSSH's rules (`migplan.adapters.known_hosts`):
paramiko's own HostKeys stay empty, so paramiko hands every server key to `_HostKeyPolicy`, which
looks up the lowercased name used to connect (`host`, or `[host]:port` off port 22):

* a recorded key that matches: connect;
* `@revoked` for that key: refused (`HostKeyRevokedError`), always;
* any other recorded key for the host (same type or not, as OpenSSH): refused with both SHA256
  fingerprints (`HostKeyChangedError`), even with `accept_new_host_keys`;
* nothing recorded: refused (`HostKeyUnknownError`) unless `accept_new_host_keys`, which appends
  `name keytype base64` to the file (O_APPEND + fsync; the file keeps its owner, mode and any
  symlink; a new file is 0600; never group/other-writable);
* only `@cert-authority` lines for the host: migplan does not do certificate authentication, so the
  host is unknown, and is refused even with accept-new (a host meant to present certificates must
  not be pinned to a plain key by first use).

Host-key algorithms are negotiated preferring the key types already recorded for the host (as
OpenSSH does), so a host with several keys presents the one known_hosts has.

paramiko's logging (logger "paramiko") never reaches stderr: its records go, at DEBUG, to the
logger `migplan.adapters.ssh.paramiko` (shown with --verbose), and what a connection logged while
being opened feeds its error message (a port that speaks HTTP says so).

Files: `put_file`/`get_file` use SFTP over the same connection as the login user (`posix_rename` for
the atomic replace), or, with a become prefix, argv commands through `run` with stdin (see
`migplan.adapters.runner`). `put_files` (a set of files in one directory) is one SFTP session on the
connection's SFTP channel (no process on the host), or, with a become prefix, one exec of the runner module's
constant FILES_SCRIPT with the files on stdin.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import getpass
import itertools
import logging
import os
import re
import select
import shlex
import socket
import stat
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import paramiko

from migplan import names
from migplan.adapters import known_hosts as kh
from migplan.adapters.runner import (
    DEFAULT_TIMEOUT,
    MAX_OUTPUT_BYTES,
    MAX_TRANSFER_BYTES,
    AuthError,
    CommandTimeout,
    Completed,
    ConnectionLost,
    FilesDone,
    FileToPut,
    Held,
    HoldFailed,
    HostError,
    HostKeyChangedError,
    HostKeyRevokedError,
    HostKeyUnknownError,
    OutputTooLarge,
    Prune,
    RemoteFileMissing,
    TransferError,
    UnreachableError,
    batch_line,
    batch_stdin,
    batch_token,
    check_become,
    check_file_set,
    check_mode,
    check_put_size,
    check_remote_path,
    command_line,
    file_kind,
    get_via_commands,
    put_files_via_script,
    put_files_with,
    put_via_commands,
    split_batch,
    temp_name,
)
from migplan.adapters.ssh_options import SshOptions
from migplan.errors import InputError
from migplan.inventory import Host, JumpHop
from migplan.inventory.ssh_args import SshArgsError, expand, parse_jumps, proxy_command
from migplan.text import printable

log = logging.getLogger(__name__)
paramiko_log = logging.getLogger(__name__ + ".paramiko")  # paramiko's own records, at DEBUG

SSH_PORT = 22
_LOG_CHANNEL = "paramiko.migplan"  # the log channel of migplan's transports
_MAX_KEY_FILE = 1 << 20


# --- paramiko's logging ---------------------------------------------------------------------

class _ParamikoRelay(logging.Handler):
    """paramiko's records: off stderr, relayed at DEBUG, and kept per connection while it opens."""

    migplan_relay = True

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self._captures: dict[str, collections.deque[str]] = {}

    def capture(self, thread_name: str) -> collections.deque[str]:
        buf: collections.deque[str] = collections.deque(maxlen=40)
        self._captures[thread_name] = buf
        return buf

    def forget(self, thread_name: str) -> None:
        self._captures.pop(thread_name, None)

    def emit(self, record: logging.LogRecord) -> None:
        buf = self._captures.get(record.threadName or "")
        relay = paramiko_log.isEnabledFor(logging.DEBUG)
        if buf is None and not relay:
            return
        try:
            message = record.getMessage()
        except Exception:  # a malformed record must never break a connection
            return
        if buf is not None:
            buf.append(message)
        if relay:
            paramiko_log.debug("%s: %s", record.name, message)


def _route_paramiko_logging() -> _ParamikoRelay:
    logger = logging.getLogger("paramiko")
    for handler in logger.handlers:
        if getattr(handler, "migplan_relay", False):
            return handler  # type: ignore[return-value]  # a module reload: keep the first relay
    relay = _ParamikoRelay()
    logger.addHandler(relay)
    logger.propagate = False  # nothing from paramiko reaches the root logger or Python's lastResort
    logging.getLogger(_LOG_CHANNEL).setLevel(logging.DEBUG)  # so that banners are seen while connecting
    return relay


_RELAY = _route_paramiko_logging()
_THREADS = itertools.count(1)


@dataclass(frozen=True)
class Endpoint:
    """One SSH server to log in to (a target or a jump host), fully resolved."""

    hostname: str
    port: int = SSH_PORT
    user: str | None = None
    key_files: tuple[str, ...] = ()
    identities_only: bool = False

    @property
    def known_hosts_name(self) -> str:
        """The name known_hosts records: `host` on port 22, else `[host]:port`; lowercased (OpenSSH)."""
        return kh.host_name(self.hostname, self.port)

    def __str__(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.hostname}:{self.port}"


@dataclass(frozen=True)
class SshTarget:
    """An inventory host resolved against ssh_config: where to connect and through which jumps; `proxy_command`
    (an argv, expanded) reaches the first hop (jumps[0], or the endpoint); `known_hosts`: the file the endpoint's
    key is verified against instead of --known-hosts (the inventory's UserKnownHostsFile)."""

    name: str
    endpoint: Endpoint
    jumps: tuple[Endpoint, ...] = ()
    become: tuple[str, ...] = ()
    proxy_command: tuple[str, ...] = ()
    known_hosts: str | None = None

    @property
    def route(self) -> str:
        """The way to the host, in words (for --verbose)."""
        hops = [str(ep) for ep in (*self.jumps, self.endpoint)]
        first = f"ProxyCommand {' '.join(self.proxy_command)!r} -> " if self.proxy_command else ""
        return first + " -> ".join(hops)


def fingerprint(key: paramiko.PKey) -> str:
    """`SHA256:<base64, unpadded>`, the form `ssh-keygen -lf` and OpenSSH's prompts print."""
    return str(key.fingerprint)


def public_key(key: paramiko.PKey) -> kh.PublicKey:
    """paramiko's key as known_hosts compares it: the wire blob (and the type named inside it)."""
    blob = key.asbytes()
    try:
        return kh.PublicKey.from_blob(blob)
    except ValueError:
        return kh.PublicKey(key.get_name(), bytes(blob))


# --- ssh_config -----------------------------------------------------------------------------

class _SshConfigFile(paramiko.SSHConfig):
    """paramiko's SSHConfig plus where it came from, so that errors can name the file and line. ProxyCommand is
    left unexpanded (migplan expands %h %p %r with the values the inventory may override)."""

    path: str = ""
    lines: tuple[str, ...] = ()

    def _allowed_tokens(self, key: str) -> list[str]:  # paramiko's hook (SSHConfig._tokenize), not in its stubs
        base = getattr(super(), "_allowed_tokens")  # noqa: B009  # private: tests/test_runner.py checks it is called
        return [] if key == "proxycommand" else list(base(key))


_SETTING = re.compile(r"(\w+)(?:\s*=\s*|\s+)(.+)")  # paramiko's SSHConfig.SETTINGS_REGEX


def load_ssh_config(path: str | None) -> paramiko.SSHConfig | None:
    """The parsed ssh_config, or None when no path is given or the file does not exist."""
    if path is None:
        return None
    full = os.path.expanduser(path)
    try:
        with open(full, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read ssh config: {err}", source=full) from None
    lines = tuple(text.splitlines())
    for number, line in enumerate(lines, 1):
        if line.strip().lower().startswith("include"):
            log.warning("%s:%d: 'Include' is not supported (paramiko ignores it); hosts defined in "
                        "included files are not seen", full, number)
    try:
        config = _SshConfigFile.from_text(text)
    except Exception as err:  # paramiko raises bare Exception / ConfigParseError on bad lines
        raise InputError(f"cannot parse ssh config: {err}", source=full, line=_bad_line(lines)) from None
    config.path = full
    config.lines = lines
    return config


def _bad_line(lines: Sequence[str]) -> int | None:
    """The first line paramiko cannot parse on its own (each line is parsed independently)."""
    for number, line in enumerate(lines, 1):
        try:
            paramiko.SSHConfig.from_text(line)
        except Exception:  # same as above
            return number
    return None


def _host_block_applies(value: str, name: str) -> bool:
    patterns = value.split()
    lowered = kh.ascii_lower(name)
    if any(p.startswith("!") and kh.match_patterns(lowered, p[1:]) for p in patterns):
        return False
    return any(not p.startswith("!") and kh.match_patterns(lowered, p) for p in patterns)


def _locate(config: paramiko.SSHConfig | None, name: str, keyword: str, value: str | None = None) -> int | None:
    """The line of `keyword` (with `value`, when given and found) in a block that applies to `name`."""
    lines: Sequence[str] = getattr(config, "lines", ())
    applies = True
    candidates: list[tuple[int, str]] = []
    for number, raw in enumerate(lines, 1):
        m = _SETTING.match(raw.strip())
        if not m:
            continue
        key, val = m.group(1).lower(), m.group(2).strip()
        if key == "host":
            applies = _host_block_applies(val, name)
        elif key == "match":
            applies = True  # not evaluated here: any block may have supplied the value
        elif key == keyword and applies:
            candidates.append((number, val.strip('"')))
    exact = [n for n, v in candidates if value is not None and v == value]
    found = exact or [n for n, _ in candidates]
    return found[0] if found else None


def _config_error(config: paramiko.SSHConfig | None, name: str, keyword: str, value: str | None,
                  message: str, hint: str | None = None) -> InputError:
    path = getattr(config, "path", "") or None
    line = _locate(config, name, keyword, value) if path else None
    return InputError(message, source=path, line=line, hint=hint)


def _config_for(config: paramiko.SSHConfig | None, name: str) -> dict[str, Any]:
    if config is None:
        return {}
    try:
        return dict(config.lookup(name))
    except Exception as err:  # token expansion errors, bad Match lines
        raise InputError(f"ssh config lookup for {name!r} failed: {err}",
                         source=getattr(config, "path", "") or None) from None


def _port(value: Any, what: str) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = -1
    if not 1 <= port <= 65535:
        raise InputError(f"{what}: port {value!r} is not a number in 1-65535")
    return port


def _endpoint(config: paramiko.SSHConfig | None, name: str, *, port: int | None = None,
              user: str | None = None, key_file: str | None = None) -> tuple[Endpoint, dict[str, Any]]:
    """Inventory values (arguments) win over ssh_config, which wins over defaults."""
    opts = _config_for(config, name)
    hostname = str(opts.get("hostname", name))
    if not names.ADDRESS.match(hostname):
        raise _config_error(config, name, "hostname", hostname,
                            f"ssh config gives {name!r} the HostName {hostname!r}, which is not a host name or "
                            "address")
    if port is not None:
        resolved_port = port
    else:
        raw_port = opts.get("port", SSH_PORT)
        try:
            resolved_port = _port(raw_port, f"ssh config for {name}")
        except InputError as err:
            raise _config_error(config, name, "port", str(raw_port), err.message,
                                hint="Port takes a number in 1-65535") from None
    keys = (key_file,) if key_file else tuple(opts.get("identityfile", ()))
    identities_only = str(opts.get("identitiesonly", "no")).lower() == "yes"
    return Endpoint(hostname=hostname.strip("[]"), port=resolved_port, user=user or opts.get("user"),
                    key_files=tuple(os.path.expanduser(k) for k in keys),
                    identities_only=identities_only), opts


_MAX_HOPS = 8  # jump hosts in one route, ssh_config's own ProxyJumps included: more is a loop


def _config_proxy(config: paramiko.SSHConfig | None, name: str, opts: dict[str, Any]) -> tuple[str, str] | None:
    """ssh_config's proxy for `name`: ("jump", spec) or ("command", raw text), whichever comes first in the file
    (OpenSSH uses the first of the two); None for neither (or `none`)."""
    jump = str(opts.get("proxyjump") or "none")
    command = opts.get("proxycommand")
    found = []
    if jump.lower() != "none":
        found.append(("jump", jump))
    if command is not None and str(command).lower() != "none":
        found.append(("command", str(command)))
    if len(found) == 2:
        jl, cl = _locate(config, name, "proxyjump"), _locate(config, name, "proxycommand")
        found.sort(key=lambda kv: (jl if kv[0] == "jump" else cl) or 0)
    return found[0] if found else None


def _config_command(config: paramiko.SSHConfig | None, name: str, raw: str) -> tuple[str, ...]:
    try:
        return proxy_command(raw)
    except SshArgsError as err:
        raise _config_error(config, name, "proxycommand", raw, f"{name}: ssh config: {err}", hint=err.hint) from None


def _route(config: paramiko.SSHConfig | None, target: Endpoint, name: str,
           proxy: tuple[str, Any] | None, depth: int = 0) -> tuple[list[Endpoint], tuple[str, ...]]:
    """The jump hosts before `target` (in order) and the expanded ProxyCommand that reaches the first of them (or
    `target`), as OpenSSH builds them: `-J a,b` reaches b with `-J a` (overriding b's own ProxyJump), and the first
    jump host with its own ssh_config (its ProxyJump or ProxyCommand included). `proxy`: ("jump", hops),
    ("command", argv) or None."""
    if proxy is None:
        return [], ()
    kind, value = proxy
    if kind == "command":
        user = target.user or getpass.getuser()
        return [], expand(value, host=target.hostname, port=target.port, user=user, name=name)
    hops: tuple[JumpHop, ...] = value
    if depth + len(hops) > _MAX_HOPS:
        raise InputError(f"the way to {name} has more than {_MAX_HOPS} jump hosts (a ProxyJump loop in ssh "
                         "config?)", source=getattr(config, "path", "") or None,
                         hint="check the ProxyJump lines of the jump hosts")
    last = hops[-1]
    jump, jopts = _endpoint(config, last.host, port=last.port, user=last.user)
    if len(hops) > 1:
        before: tuple[str, Any] | None = ("jump", hops[:-1])
    else:
        found = _config_proxy(config, last.host, jopts)
        before = None
        if found is not None and found[0] == "jump":
            before = ("jump", _config_jumps(config, last.host, found[1]))
        elif found is not None:
            before = ("command", _config_command(config, last.host, found[1]))
    chain, command = _route(config, jump, last.host, before, depth + len(hops))
    return [*chain, jump], command


def _config_jumps(config: paramiko.SSHConfig | None, name: str, spec: str) -> tuple[JumpHop, ...]:
    try:
        return parse_jumps(spec)
    except SshArgsError as err:
        raise _config_error(config, name, "proxyjump", spec, f"{name}: {err}",
                            hint="ProxyJump takes [user@]host[:port], comma-separated") from None


def resolve_target(host: Host, config: paramiko.SSHConfig | None) -> SshTarget:
    """Where and how to reach an inventory host (ssh_config looked up by its address, like `ssh ADDRESS`); the
    inventory's ProxyJump/ProxyCommand (`host.ssh_args`) win over ssh_config's."""
    if host.key_file and not os.path.isfile(os.path.expanduser(host.key_file)):
        raise InputError(f"{host.name}: key_file {host.key_file} does not exist or is not a file",
                         hint="fix key_file (ansible_ssh_private_key_file) in the inventory")
    endpoint, opts = _endpoint(config, host.address, port=host.port, user=host.user, key_file=host.key_file)
    args = host.ssh_args
    proxy: tuple[str, Any] | None = None
    if args is not None and args.proxy is not None:
        proxy = {"jump": ("jump", args.jumps), "command": ("command", args.command)}.get(args.proxy)
    else:
        found = _config_proxy(config, host.address, opts)
        if found is not None and found[0] == "jump":
            proxy = ("jump", _config_jumps(config, host.address, found[1]))
        elif found is not None:
            proxy = ("command", _config_command(config, host.address, found[1]))
    jumps, command = _route(config, endpoint, host.address, proxy)
    if host.key_file:  # a jump host without an IdentityFile of its own is offered the inventory's key too
        jumps = [j if j.key_files else dataclasses.replace(j, key_files=endpoint.key_files) for j in jumps]
    known = os.path.expanduser(args.known_hosts) if args is not None and args.known_hosts else None
    return SshTarget(name=host.name, endpoint=endpoint, jumps=tuple(jumps), become=tuple(host.become),
                     proxy_command=command, known_hosts=known)


# --- key files -----------------------------------------------------------------------------

_KEY_CLASSES: tuple[type[paramiko.PKey], ...] = (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey)
_key_checks: dict[tuple[str, int, int], str | None] = {}
_key_lock = threading.Lock()


def key_file_problem(path: str) -> str | None:
    """Why `path` cannot be used as a private key, or None (a passphrase-protected key is fine here:
    the agent may hold it, and paramiko reports it if not)."""
    try:
        st = os.stat(path)
    except OSError as err:
        return f"cannot be read: {err.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    memo = (path, st.st_mtime_ns, st.st_size)
    with _key_lock:
        if memo in _key_checks:
            return _key_checks[memo]
    problem = _key_problem(path, st.st_size)
    with _key_lock:
        _key_checks[memo] = problem
    return problem


def _key_problem(path: str, size: int) -> str | None:
    if size > _MAX_KEY_FILE:
        return "is too large to be an SSH private key"
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
    except OSError as err:
        return f"cannot be read: {err.strerror}"
    for cls in _KEY_CLASSES:
        try:
            cls.from_private_key_file(path)
            return None
        except paramiko.PasswordRequiredException:
            return None
        except Exception as err:  # paramiko/cryptography raise SSHException, ValueError, UnicodeDecodeError, ...
            log.debug("%s is not a %s: %s", path, cls.__name__, err)
    if re.match(rb"(ssh-|ecdsa-|sk-)\S+ [A-Za-z0-9+/]", head):
        return "is a public key; it must name the private key (the file without .pub)"
    return "is not an SSH private key migplan can use (ed25519, ECDSA or RSA, OpenSSH or PEM format)"


# --- known_hosts ---------------------------------------------------------------------------

class KnownHosts:
    """The known_hosts file, shared by all connections: OpenSSH's matching, thread-safe recording."""

    def __init__(self, path: str, *, writable: bool = False) -> None:
        self.file = kh.KnownHostsFile(path, writable=writable)
        self.path = self.file.path

    def key_types(self, name: str) -> list[str]:
        return self.file.key_types(name)

    def verify(self, host: str, name: str, key: paramiko.PKey, *, accept_new: bool) -> None:
        """Raise the HostKey...Error that known_hosts calls for; record a new key when allowed."""
        pk = public_key(key)
        verdict = self.file.check(name, pk)
        if verdict.status is kh.Status.UNKNOWN and accept_new and not verdict.authorities:
            verdict = self.file.record(name, pk)
            if verdict.ok:
                log.warning("%s: recorded new host key for %s (%s %s) in %s", host, name, pk.keytype,
                            pk.fingerprint, self.path)
                return
        if verdict.ok:
            return
        raise self._refusal(host, verdict)

    def _refusal(self, host: str, v: kh.Verdict) -> HostError:
        sent = f"{v.key.keytype} {v.key.fingerprint}"
        if v.status is kh.Status.REVOKED:
            where = v.matched.where if v.matched else self.path
            return HostKeyRevokedError(
                host, f"the host key of {v.name} ({sent}) is marked @revoked in {where}; refusing to connect",
                hint="the key was revoked on purpose: the host must get a new key, which you then verify "
                     "with its owner and record")
        if v.status is kh.Status.CHANGED:
            old = "; ".join(f"{e.key.keytype} {e.key.fingerprint} (line {e.line})" for e in v.recorded)
            return HostKeyChangedError(
                host, f"HOST KEY CHANGED for {v.name}: {self.path} has {old}, the server sent {sent}",
                hint="someone may be intercepting the connection, or the host was reinstalled; verify with its "
                     f"owner, then remove the old key with 'ssh-keygen -R \"{v.name}\" -f {self.path}'")
        if v.authorities:
            lines = ", ".join(str(e.line) for e in v.authorities)
            return HostKeyUnknownError(
                host, f"{self.path} trusts only a certificate authority (@cert-authority, line {lines}) for "
                f"{v.name}; migplan does not verify host certificates, so the plain key the server sent "
                f"({sent}) is not trusted, and is not recorded even with --accept-new-host-keys",
                hint="verify the host's plain key with its owner and add it as its own line "
                     "(for example with 'ssh-keyscan')")
        return HostKeyUnknownError(
            host, f"host key for {v.name} is not in {self.path} ({sent})",
            hint="check the fingerprint with the host's owner, then re-run with --accept-new-host-keys "
                 "(or add it with 'ssh-keyscan')")


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Sees every connection (paramiko's HostKeys stay empty) and verifies the key with `KnownHosts`."""

    def __init__(self, known: KnownHosts, accept_new: bool, host: str, name: str) -> None:
        self._known = known
        self._accept_new = accept_new
        self._host = host
        self._name = name  # the lowercased name used to connect, not paramiko's spelling

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        self._known.verify(self._host, self._name, key, accept_new=self._accept_new)


def _host_key_algorithms(known_types: Sequence[str], available: Sequence[str]) -> list[str]:
    """`available`, with the algorithms of the recorded key types first (OpenSSH order_hostkeyalgs)."""
    first: list[str] = []
    for keytype in known_types:
        algs = ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa") if keytype == "ssh-rsa" else (keytype,)
        first += [a for a in algs if a in available and a not in first]
    return first + [a for a in available if a not in first]


# --- ProxyCommand --------------------------------------------------------------------------

class _ProxyCommand(paramiko.ProxyCommand):
    """paramiko's ProxyCommand (the argv run without a shell) with three changes: its stderr is read as it comes and
    the last lines kept, for the error when the connection fails (an unread pipe could also stall the command);
    end-of-file is returned as such (paramiko's `recv` waits out its timeout when the command has exited, so a
    dead proxy looked like a slow one); `close` reaps the process (SIGTERM, then SIGKILL after 2 s)."""

    def __init__(self, argv: Sequence[str]) -> None:
        super().__init__(shlex.join(argv))  # paramiko splits it back with shlex.split: the same argv
        self.argv = tuple(argv)
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=8)
        self._reader = threading.Thread(target=self._drain, name="migplan-proxycommand-stderr", daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        err = self.process.stderr
        if err is None:
            return
        pending = b""
        with contextlib.suppress(OSError, ValueError):
            while chunk := err.read1(4096) if hasattr(err, "read1") else err.read(4096):
                pending = (pending + chunk)[-8192:]
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if line.strip():
                        self.stderr_tail.append(printable(line.decode("utf-8", "replace"), 300))
        if pending.strip():
            self.stderr_tail.append(printable(pending.decode("utf-8", "replace"), 300))

    def recv(self, size: int) -> bytes:
        out = self.process.stdout
        assert out is not None
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                ready, _, _ = select.select([out], [], [], wait)
                if ready:
                    return os.read(out.fileno(), size)  # b"": the command exited (end-of-file for paramiko)
            except OSError as err:
                raise paramiko.ProxyCommandFailure(" ".join(self.argv), err.strerror or str(err)) from None
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError()

    def close(self) -> None:
        process = self.process
        if process.poll() is None:
            with contextlib.suppress(OSError):
                process.terminate()
            deadline = time.monotonic() + 2
            while process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            if process.poll() is None:
                with contextlib.suppress(OSError):
                    process.kill()
                process.wait()
        for pipe in (process.stdin, process.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self._reader.join(1)

    def ended(self) -> str:
        """How the command ended, with what it printed on stderr (for an error message)."""
        self._reader.join(0.5)
        code = self.process.poll()
        said = "; ".join(self.stderr_tail)
        state = "is still running" if code is None else f"exited with status {code}"
        return f"ProxyCommand '{' '.join(self.argv)}' {state}" + (f": {said}" if said else " (it printed nothing)")


def _start_proxy(host: str, argv: Sequence[str]) -> _ProxyCommand:
    try:
        return _ProxyCommand(argv)
    except (OSError, ValueError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise UnreachableError(host, f"cannot start ProxyCommand '{' '.join(argv)}': {why}",
                               hint="check the ProxyCommand in the inventory (ansible_ssh_common_args) or ssh "
                                    "config; the program must be on PATH") from None


# --- the runner ----------------------------------------------------------------------------

class _SshHeld:
    def __init__(self, chan: paramiko.Channel) -> None:
        self._chan = chan

    def release(self) -> None:
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            self._chan.shutdown_write()  # end-of-file on the holder's stdin
        self._chan.close()


class SshRunner:
    """Runs argv on one host over a single SSH connection, opened on first use and kept open: the host's
    `CommandRunner`. The connection is `connection` (`_SshConnection`); files go through `_SftpTransfer` (as the
    login user) or `_BecomeTransfer` (through the become prefix), chosen once from the target.

    Commands on one runner run one at a time. `close()` may be called from any thread, also while a
    command runs (it then ends with ConnectionLost at once instead of waiting for its timeout).
    """

    def __init__(self, target: SshTarget, options: SshOptions, known: KnownHosts,
                 target_known: KnownHosts | None = None) -> None:
        self.target = target
        self.connection = _SshConnection(target, options, known, target_known)
        self._files: _SftpTransfer | _BecomeTransfer = (
            _BecomeTransfer(self.connection) if target.become else _SftpTransfer(self.connection))

    @property
    def host(self) -> str:
        return self.target.name

    def connect(self) -> None:
        """Open the connection now (otherwise the first `run` does)."""
        with self.connection.busy:
            self.connection.transport()

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT,
            stdin: bytes | None = None) -> Completed:
        full = (*self.target.become, *argv)
        line = command_line(full)
        start = time.monotonic()
        with self.connection.busy:
            transport = self.connection.transport()
            log.debug("%s: running %s", self.host, line)
            code, out, err = self.connection.exec(transport, full, line, timeout, stdin, True)
        done = Completed(full, code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
                         time.monotonic() - start)
        return check_become(self.host, self.target.become, done)

    def run_batch(self, argvs: Sequence[Sequence[str]], *, timeout: float = DEFAULT_TIMEOUT) -> list[Completed]:
        """Several read-only commands in ONE exec (one channel, one round trip, one login shell on the host): each
        argv validated and quoted as in `run`, with the become prefix, cut apart by a random boundary
        (`runner.batch_line`/`split_batch`) that travels on the exec's stdin, never on its command line.
        `timeout` is for the whole batch. Each result is checked for a refusing become prefix as `run` does."""
        fulls = [(*self.target.become, *argv) for argv in argvs]
        token = batch_token()
        line = batch_line([command_line(f) for f in fulls])
        start = time.monotonic()
        with self.connection.busy:
            transport = self.connection.transport()
            log.debug("%s: running a batch of %d: %s", self.host, len(fulls), line)
            code, out, err = self.connection.exec(transport, (f"a batch of {len(fulls)} reads",), line, timeout,
                                                  batch_stdin(token), True)
        parts = split_batch(self.host, out, err, token, len(fulls))
        took = time.monotonic() - start
        return [check_become(self.host, self.target.become,
                             Completed(f, c, o.decode("utf-8", "replace"), e.decode("utf-8", "replace"), took))
                for f, (c, o, e) in zip(fulls, parts, strict=True)]

    def hold(self, argv: Sequence[str], *, ready: str, timeout: float = DEFAULT_TIMEOUT) -> Held:
        """Start `argv` (without the become prefix) on its own channel and keep it running until `release()`.

        The channel is what keeps it alive: when we close it, or the connection dies (migplan killed, the
        network gone), sshd closes the command's stdin and it ends. That is how the host lock never
        outlives a dead session. Ready once its output (stdout or stderr) contains `ready`; if it exits
        first: HoldFailed."""
        line = command_line(argv)
        with self.connection.busy:
            transport = self.connection.transport()
            log.debug("%s: holding %s", self.host, line)
            try:
                chan = transport.open_session(timeout=self.connection.options.connect_timeout)
                chan.exec_command(line)
            except (paramiko.SSHException, OSError, EOFError) as err:
                self.close()
                raise ConnectionLost(self.host, f"cannot start '{argv[0]}': {_reason(err)}") from None
        seen, deadline = b"", time.monotonic() + timeout
        while ready.encode() not in seen:
            if chan.recv_ready():
                seen += chan.recv(4096)
                continue
            if chan.recv_stderr_ready():
                seen += chan.recv_stderr(4096)
                continue
            if chan.exit_status_ready():
                code = chan.recv_exit_status()
                while chan.recv_ready() or chan.recv_stderr_ready():
                    seen += chan.recv(4096) if chan.recv_ready() else chan.recv_stderr(4096)
                chan.close()
                raise HoldFailed(self.host, f"'{argv[0]}' exited ({code}) before it was ready", exit_code=code,
                                 stderr=seen.decode("utf-8", "replace"))
            if time.monotonic() > deadline:
                chan.close()
                raise CommandTimeout(self.host, f"'{argv[0]}' was not ready within {timeout:g} s")
            time.sleep(0.005)
        return _SshHeld(chan)

    def put_file(self, remote_path: str, data: bytes, *, mode: int = 0o644,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        """Write `data` to `remote_path` atomically with `mode` (SFTP, or become commands; module notes)."""
        path = check_remote_path(remote_path)
        body = check_put_size(self.host, data)
        check_mode(mode)
        self._files.put_file(path, body, mode, timeout)

    def put_files(self, directory: str, files: Sequence[FileToPut], *, prune: Prune | None = None,
                  timeout: float = DEFAULT_TIMEOUT) -> FilesDone:
        """A set of files in one directory in one round trip: one SFTP session, or FILES_SCRIPT through the become
        prefix (module notes of `migplan.adapters.runner`)."""
        path, items = check_file_set(self.host, directory, files, prune)
        return self._files.put_files(path, items, prune, timeout)

    def get_file(self, remote_path: str, *, max_bytes: int = MAX_TRANSFER_BYTES,
                 timeout: float = DEFAULT_TIMEOUT) -> bytes:
        """A regular file's content (at most `max_bytes`), over SFTP or through the become prefix."""
        return self._files.get_file(check_remote_path(remote_path), max_bytes, timeout)

    def close(self, *, final: bool = False) -> None:
        """Close the connection (thread-safe, never waits for a running command).

        `final=True` (the fleet closing) also refuses any new connection, so work still running on
        another thread cannot reopen one.
        """
        self.connection.close(final=final)


class _SshConnection:
    """One host's SSH connection: the chain of clients (jump hosts, then the target) opened on first use and kept,
    the SFTP session on it, and the channels commands run on. `busy` is held by whoever runs a command or a
    transfer on it (one at a time); `close()` never waits for it."""

    def __init__(self, target: SshTarget, options: SshOptions, known: KnownHosts,
                 target_known: KnownHosts | None = None) -> None:
        self.target = target
        self.options = options
        self.known_hosts = known
        self.target_known = target_known  # the inventory's UserKnownHostsFile, for the endpoint only
        self.busy = threading.Lock()  # one command (or transfer) at a time
        self._state = threading.Lock()  # guards clients, _sftp, _closed; never held while waiting
        self.clients: list[paramiko.SSHClient] = []  # jumps first, the target last
        self._sftp: paramiko.SFTPClient | None = None
        self._closed = False  # set by `close(final=True)`: no new connection

    @property
    def host(self) -> str:
        return self.target.name

    def close(self, *, final: bool = False) -> None:
        """Close the SFTP session and every client (thread-safe, never waits for a running command); `final`:
        and refuse any new connection."""
        with self._state:
            clients, self.clients = self.clients, []
            sftp, self._sftp = self._sftp, None
            if final:
                self._closed = True
        if sftp is not None:
            sftp.close()
        for client in reversed(clients):
            client.close()

    def sftp(self, timeout: float) -> paramiko.SFTPClient:
        """The connection's SFTP session, started on first use (or again when its channel closed); the caller holds
        `busy`."""
        transport = self.transport()
        with self._state:
            sftp = self._sftp
        channel = sftp.get_channel() if sftp is not None else None
        if sftp is None or channel is None or channel.closed:
            try:
                sftp = paramiko.SFTPClient.from_transport(transport)
            except (paramiko.SSHException, OSError, EOFError) as err:
                raise TransferError(self.host, f"cannot start SFTP: {_reason(err)}",
                                    hint="enable the sftp subsystem in the host's sshd_config, or give the host a "
                                         "become prefix so files go through commands") from None
            if sftp is None:
                raise TransferError(self.host, "cannot start SFTP")
            with self._state:
                self._sftp = sftp
        channel = sftp.get_channel()
        if channel is not None:
            channel.settimeout(timeout)
        return sftp

    def transport(self) -> paramiko.Transport:
        """The target's live transport, connecting through the jump hosts first if none is open; ConnectionLost
        when it dropped or the fleet closed. The caller holds `busy`."""
        with self._state:
            if self._closed:
                raise ConnectionLost(self.host, "the connection was closed (interrupted)")
            clients = list(self.clients)
        if clients:
            transport = clients[-1].get_transport()
            if transport is not None and transport.is_active():
                return transport
            self.close()
            raise ConnectionLost(self.host, "the SSH connection dropped")
        opened: list[paramiko.SSHClient] = []
        sock: paramiko.Channel | _ProxyCommand | None = None
        if self.target.jumps or self.target.proxy_command:
            log.debug("%s: connecting through %s", self.host, self.target.route)
        if self.target.proxy_command:
            sock = _start_proxy(self.host, self.target.proxy_command)
        try:
            for endpoint in (*self.target.jumps, self.target.endpoint):
                client = self._connect(endpoint, sock)
                opened.append(client)
                sock = None
                if endpoint is not self.target.endpoint:
                    sock = self._tunnel(client, endpoint)
        except BaseException:
            for client in reversed(opened):
                client.close()
            if isinstance(sock, _ProxyCommand):  # the first hop failed: its transport may not own the command
                sock.close()
            raise
        with self._state:
            closed = self._closed
            if not closed:
                self.clients = opened
        if closed:  # the fleet closed while we were connecting
            for client in reversed(opened):
                client.close()
            raise ConnectionLost(self.host, "the connection was closed (interrupted)")
        transport = opened[-1].get_transport()
        assert transport is not None  # just connected
        return transport

    def _tunnel(self, jump: paramiko.SSHClient, via: Endpoint) -> paramiko.Channel:
        """A direct-tcpip channel from the jump host to the next hop (what `ssh -J` does)."""
        nxt = self._next_after(via)
        transport = jump.get_transport()
        assert transport is not None
        try:
            return transport.open_channel("direct-tcpip", (nxt.hostname, nxt.port), ("127.0.0.1", 0),
                                          timeout=self.options.connect_timeout)
        except (paramiko.SSHException, OSError, EOFError) as err:
            raise UnreachableError(self.host, f"jump host {via} cannot reach {nxt.hostname}:{nxt.port}: "
                                   f"{_reason(err)}") from None

    def _next_after(self, endpoint: Endpoint) -> Endpoint:
        hops = (*self.target.jumps, self.target.endpoint)
        return hops[hops.index(endpoint) + 1]

    def _check_keys(self, ep: Endpoint, key_files: Sequence[str]) -> None:
        for path in key_files:
            problem = key_file_problem(path)
            if problem is not None:
                raise AuthError(self.host, f"key file {path} (for {ep}) {problem}",
                                hint="point key_file (ansible_ssh_private_key_file) or IdentityFile at a private "
                                     "key, as made by 'ssh-keygen'")

    def _connect(self, ep: Endpoint, sock: paramiko.Channel | _ProxyCommand | None) -> paramiko.SSHClient:
        opts = self.options
        name = ep.known_hosts_name
        known = self.target_known if self.target_known is not None and ep is self.target.endpoint else self.known_hosts
        if known is not self.known_hosts:
            log.debug("%s: verifying the key of %s against %s (UserKnownHostsFile)", self.host, name, known.path)
        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(_HostKeyPolicy(known, opts.accept_new_host_keys, self.host, name))
        key_files = [k for k in ep.key_files if os.path.isfile(k)]  # as ssh, skip missing IdentityFiles
        self._check_keys(ep, key_files)
        proxy = sock if isinstance(sock, _ProxyCommand) else None
        via = " (via ProxyCommand)" if proxy is not None else " (via jump host)" if sock is not None else ""
        where = f"{ep}{via}"
        thread = f"migplan-ssh-{next(_THREADS)}"
        lines = _RELAY.capture(thread)
        known_types = known.key_types(name)

        def transport_factory(sock: Any, /, **kwargs: Any) -> paramiko.Transport:
            transport = paramiko.Transport(sock, **kwargs)
            transport.name = thread  # so its log records can be told apart from other connections'
            transport.set_log_channel(_LOG_CHANNEL)
            sec = transport.get_security_options()
            sec.key_types = _host_key_algorithms(known_types, list(sec.key_types))
            return transport

        try:
            client.connect(
                # paramiko documents key_filename as 'str or list(str)'; the stub says str only
                ep.hostname, port=ep.port, username=ep.user, key_filename=key_files or None,  # type: ignore[arg-type]  # as documented
                timeout=opts.connect_timeout, banner_timeout=opts.connect_timeout,
                auth_timeout=opts.connect_timeout, channel_timeout=opts.connect_timeout,
                allow_agent=opts.allow_agent and not (ep.identities_only and key_files),
                look_for_keys=opts.look_for_keys and not key_files,
                sock=sock, transport_factory=transport_factory,
            )
        except HostError:
            client.close()
            raise
        except paramiko.PasswordRequiredException:
            client.close()
            raise AuthError(self.host, f"the key for {where} is passphrase-protected",
                            hint="load it into ssh-agent ('ssh-add KEY') so migplan can use it") from None
        except paramiko.AuthenticationException as err:
            client.close()
            raise AuthError(self.host, f"{where} refused authentication: {_reason(err)}",
                            hint="check user, key_file (or IdentityFile) and that the key is in the user's "
                                 "authorized_keys; keys in ssh-agent are tried too") from None
        except TimeoutError:
            client.close()
            if proxy is not None:
                raise UnreachableError(self.host, f"{where}: no answer within {opts.connect_timeout:g} s; "
                                       f"{proxy.ended()}") from None
            raise UnreachableError(self.host, f"{where}: no answer within {opts.connect_timeout:g} s") from None
        except paramiko.ssh_exception.NoValidConnectionsError as err:
            client.close()
            why = "connection refused" if all(isinstance(e, ConnectionRefusedError) for e in err.errors.values()) \
                else _reason(err)
            raise UnreachableError(self.host, f"cannot connect to {where}: {why}",
                                   hint="check that the host is up and sshd listens on that port") from None
        except socket.gaierror as err:
            client.close()
            raise UnreachableError(self.host, f"cannot resolve {ep.hostname}: {err.strerror}") from None
        except (paramiko.SSHException, OSError, EOFError) as err:
            client.close()
            if proxy is not None:
                raise UnreachableError(self.host, f"cannot connect to {where}: {proxy.ended()}",
                                       hint="run the ProxyCommand by hand to see why it cannot reach the host (a jump "
                                            "host's key not in known_hosts, a refused login, the host down)") from None
            raise UnreachableError(self.host, f"cannot connect to {where}: "
                                   f"{_handshake_reason(err, list(lines), opts.connect_timeout)}",
                                   hint="check that the port is the host's sshd") from None
        finally:
            _RELAY.forget(thread)
        transport = client.get_transport()
        if transport is not None:
            _no_delay(transport)
        if transport is not None and opts.keepalive_s > 0:
            transport.set_keepalive(opts.keepalive_s)
        return client

    def exec(self, transport: paramiko.Transport, argv: tuple[str, ...], line: str, timeout: float,
             stdin: bytes | None, keep_stdout: bool) -> tuple[int, bytes, bytes]:
        """Run `line` on a channel of its own: (exit status, stdout, stderr); the caller holds `busy`."""
        start = time.monotonic()
        try:
            chan = transport.open_session(timeout=self.options.connect_timeout)
            chan.exec_command(line)
            if stdin is None:
                chan.shutdown_write()  # end-of-file now: a command that reads stdin never waits for us
        except (paramiko.SSHException, OSError, EOFError) as err:
            self.close()
            raise ConnectionLost(self.host, f"cannot start '{argv[0]}': {_reason(err)}") from None
        try:
            out, err_out = _collect(chan, start + timeout, self.host, argv[0], timeout, stdin, keep_stdout)
            if not chan.exit_status_ready() or not (chan.eof_received or transport.is_active()):
                # closed under us (the fleet closing on Ctrl-C, or the network): paramiko then reports
                # "ready" with exit status -1, which is not what the command did
                self.close()
                raise ConnectionLost(self.host, f"the connection dropped while '{argv[0]}' was running")
            code = chan.recv_exit_status()  # -1: the command died on a signal
        finally:
            chan.close()
        return code, out, err_out


class _SftpTransfer:
    """Files as the login user over the connection's SFTP session: `posix_rename` for the atomic replace, a link at a
    name read refused (paths, sizes and modes are checked by `SshRunner` first)."""

    def __init__(self, connection: _SshConnection) -> None:
        self.connection = connection

    @property
    def host(self) -> str:
        return self.connection.host

    def put_file(self, path: str, body: bytes, mode: int, timeout: float) -> None:
        tmp = temp_name(path)
        with self.connection.busy:
            sftp = self.connection.sftp(timeout)
            try:
                with sftp.open(tmp, "wbx") as fh:
                    fh.chmod(mode)  # before any data is in it
                    fh.set_pipelined(True)
                    fh.write(body)
                sftp.posix_rename(tmp, path)
            except (OSError, paramiko.SSHException, EOFError) as err:
                self._remove_temp(sftp, tmp)
                raise self._transfer_error(f"cannot write {path}", err) from None

    def put_files(self, path: str, items: Sequence[FileToPut], prune: Prune | None, timeout: float) -> FilesDone:
        with self.connection.busy:
            sftp = self.connection.sftp(timeout)
            try:
                return put_files_with(_SftpFiles(sftp), self.host, path, items, prune)
            except (OSError, paramiko.SSHException, EOFError) as err:
                where = f" ({err.filename})" if isinstance(err, OSError) and err.filename else ""
                raise self._transfer_error(f"cannot write the files in {path}{where}", err) from None

    def get_file(self, path: str, max_bytes: int, timeout: float) -> bytes:
        with self.connection.busy:
            sftp = self.connection.sftp(timeout)
            try:
                # lstat: a link at the name is refused, never followed; SFTP has no O_NOFOLLOW, so the opened
                # file is checked again (only a writer of the directory could swap it in between)
                attrs = sftp.lstat(path)
                if attrs.st_mode is not None and stat.S_ISLNK(attrs.st_mode):
                    raise TransferError(self.host, f"{path} is a symbolic link, not a regular file; refusing to "
                                                   "follow it")
                if attrs.st_mode is not None and not stat.S_ISREG(attrs.st_mode):
                    raise TransferError(self.host, f"{path} is not a regular file")
                if attrs.st_size is not None and attrs.st_size > max_bytes:
                    raise OutputTooLarge(self.host, f"{path} is larger than {max_bytes} bytes")
                with sftp.open(path, "rb") as fh:
                    opened = fh.stat()
                    if opened.st_mode is not None and not stat.S_ISREG(opened.st_mode):
                        raise TransferError(self.host, f"{path} is not a regular file")
                    data = fh.read(max_bytes + 1)
            except (OSError, paramiko.SSHException, EOFError) as err:
                raise self._transfer_error(f"cannot read {path}", err) from None
        if len(data) > max_bytes:
            raise OutputTooLarge(self.host, f"{path} is larger than {max_bytes} bytes")
        return bytes(data)

    @staticmethod
    def _remove_temp(sftp: paramiko.SFTPClient, tmp: str) -> None:
        with contextlib.suppress(OSError, paramiko.SSHException, EOFError):
            sftp.remove(tmp)

    def _transfer_error(self, what: str, err: BaseException) -> HostError:
        if isinstance(err, HostError):
            return err
        if isinstance(err, FileNotFoundError) or (isinstance(err, OSError) and err.errno == 2):
            return RemoteFileMissing(self.host, f"{what}: no such file or directory")
        if isinstance(err, TimeoutError):
            return CommandTimeout(self.host, f"{what}: the host did not answer in time")
        if isinstance(err, OSError) and err.strerror:
            return TransferError(self.host, f"{what}: {err.strerror}")
        return TransferError(self.host, f"{what}: {_reason(err)}")


class _BecomeTransfer:
    """Files through the host's become prefix (`sudo -n`): argv commands fed on stdin, and FILES_SCRIPT for a set
    (`migplan.adapters.runner`); paths, sizes and modes are checked by `SshRunner` first."""

    def __init__(self, connection: _SshConnection) -> None:
        self.connection = connection

    @property
    def host(self) -> str:
        return self.connection.host

    def put_file(self, path: str, body: bytes, mode: int, timeout: float) -> None:
        put_via_commands(self.host, self._raw, path, body, mode, timeout)

    def put_files(self, path: str, items: Sequence[FileToPut], prune: Prune | None, timeout: float) -> FilesDone:
        return put_files_via_script(self.host, self._raw, path, items, prune, timeout)

    def get_file(self, path: str, max_bytes: int, timeout: float) -> bytes:
        return get_via_commands(self.host, self._raw, path, max_bytes, timeout)

    def _raw(self, argv: Sequence[str], stdin: bytes | None, timeout: float,
             keep_stdout: bool) -> tuple[int, bytes, bytes]:
        """A command through the become prefix with bytes out; the caller holds no lock."""
        become = self.connection.target.become
        full = (*become, *argv)
        line = command_line(full)
        with self.connection.busy:
            transport = self.connection.transport()
            log.debug("%s: running %s", self.host, line)
            code, out, err = self.connection.exec(transport, full, line, timeout, stdin, keep_stdout)
        check_become(self.host, become, Completed(full, code, "", err.decode("utf-8", "replace")))
        return code, out, err


class _SftpFiles:
    """`runner.FileOps` over one SFTP session (the login user's rights; `posix_rename` replaces)."""

    def __init__(self, sftp: paramiko.SFTPClient) -> None:
        self._sftp = sftp

    def lstat(self, path: str) -> tuple[str, int] | None:
        try:
            attrs = self._sftp.lstat(path)
        except FileNotFoundError:
            return None
        mode = attrs.st_mode or 0
        return file_kind(mode), stat.S_IMODE(mode)

    def mkdir(self, path: str) -> None:
        self._sftp.mkdir(path)

    def listdir(self, path: str) -> list[str]:
        return self._sftp.listdir(path)

    def head(self, path: str, size: int) -> bytes:
        with self._sftp.open(path, "rb") as fh:
            return bytes(fh.read(size))

    def create(self, path: str, data: bytes, mode: int) -> None:
        with self._sftp.open(path, "wbx") as fh:
            fh.chmod(mode)  # before any data is in it
            fh.set_pipelined(True)
            fh.write(data)

    def rename(self, src: str, dst: str) -> None:
        self._sftp.posix_rename(src, dst)

    def remove(self, path: str) -> None:
        self._sftp.remove(path)


def _no_delay(transport: paramiko.Transport) -> None:
    """TCP_NODELAY on the connection's socket. Every request migplan sends is small and waits for its answer
    (channel open, exec, end-of-file, close); with Nagle's algorithm a small packet sent while another is not yet
    acknowledged waits for the peer's delayed ACK (about 40 ms on Linux). Measured on loopback against OpenSSH
    9.2: 48 ms per exec of `true` without, 4.6 ms with (bench/results/apply.md). A jump host's tunnel is a
    channel, not a socket: the outer connection's socket carries it."""
    sock = getattr(transport, "sock", None)
    if isinstance(sock, socket.socket) and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def _handshake_reason(err: BaseException, lines: Sequence[str], timeout: float) -> str:
    """What went wrong before SSH was up, in words (paramiko's own texts are cryptic)."""
    sent = [ln[len("Banner: "):] for ln in lines if ln.startswith("Banner: ")]
    text = str(err)
    if sent:
        return f"the server on that port does not speak SSH: it sent {printable(sent[0], 80)!r}"
    if text.startswith("Indecipherable protocol version"):
        shown = text.partition('"')[2].rstrip('"')
        return f"the server on that port does not speak SSH: it sent {printable(shown, 80)!r}"
    cause: BaseException | None = err
    if text.startswith("Error reading SSH protocol banner"):
        cause = err.__context__ or err.__cause__
    if isinstance(cause, ConnectionResetError) or "reset by peer" in text:
        return "the server reset the connection before the SSH handshake finished"
    if isinstance(cause, EOFError | BrokenPipeError) or (cause is err and text.startswith("Error reading SSH")):
        return "the server closed the connection before the SSH handshake finished (not an SSH server?)"
    if isinstance(cause, TimeoutError):
        return f"no SSH banner within {timeout:g} s"
    if any("reset by peer" in ln for ln in lines):
        return "the server reset the connection before the SSH handshake finished"
    return _reason(err)


@dataclass
class _Buffers:
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)
    dropped: int = 0  # stdout bytes read and not kept


def _feed(chan: paramiko.Channel, pending: memoryview | None) -> tuple[memoryview | None, bool]:
    """Send what the channel window takes of stdin; end-of-file once it is all sent."""
    if pending is None:
        return None, False
    if not pending:
        chan.shutdown_write()
        return None, True
    if not chan.send_ready():
        return pending, False
    try:
        n = chan.send(bytes(pending[:32768]))
    except OSError:  # the command exited without reading everything
        return None, False
    return pending[n:], n > 0


def _collect(chan: paramiko.Channel, deadline: float, host: str, prog: str, timeout: float,
             stdin: bytes | None = None, keep_stdout: bool = True) -> tuple[bytes, bytes]:
    """Feed stdin and read stdout/stderr until the command exits, the deadline passes or output is too big."""
    buf = _Buffers()
    pending = memoryview(stdin) if stdin is not None else None
    pause = 0.001
    while True:
        pending, busy = _feed(chan, pending)
        while chan.recv_ready():
            data = chan.recv(65536)
            if keep_stdout:
                buf.out += data
            else:
                buf.dropped += len(data)
            busy = True
        while chan.recv_stderr_ready():
            buf.err += chan.recv_stderr(65536)
            busy = True
        if len(buf.out) + len(buf.err) > MAX_OUTPUT_BYTES:
            raise OutputTooLarge(host, f"'{prog}' printed more than {MAX_OUTPUT_BYTES} bytes")
        if not busy and (chan.closed or (chan.exit_status_ready() and chan.eof_received)):
            return bytes(buf.out), bytes(buf.err)
        transport = chan.get_transport()
        if not busy and (transport is None or not transport.is_active()):
            return bytes(buf.out), bytes(buf.err)
        if time.monotonic() > deadline:
            raise CommandTimeout(host, f"'{prog}' did not finish within {timeout:g} s")
        if busy:
            pause = 0.001
        else:
            time.sleep(pause)
            pause = min(pause * 2, 0.02)


def _reason(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return text.splitlines()[0] if text else type(err).__name__


# --- a fleet of connections ----------------------------------------------------------------

class SshFleet:
    """Connections to many hosts with shared settings, known_hosts and ssh_config; close() ends all.

    close() is safe from any thread and while commands run (they end with ConnectionLost): pass it as
    `for_each_host(..., on_interrupt=fleet.close)` so Ctrl-C does not wait for the slowest host.
    """

    def __init__(self, options: SshOptions | None = None) -> None:
        self.options = options or SshOptions()
        self.config = load_ssh_config(self.options.ssh_config)
        self.known_hosts = KnownHosts(self.options.known_hosts, writable=self.options.accept_new_host_keys)
        self._known_files: dict[str, KnownHosts] = {self.known_hosts.path: self.known_hosts}  # by path, shared
        self._runners: dict[str, SshRunner] = {}
        self._lock = threading.Lock()

    def target(self, host: Host) -> SshTarget:
        return resolve_target(host, self.config)

    def runner(self, host: Host) -> SshRunner:
        """The runner for a host (created once; its connection opens on first use)."""
        with self._lock:
            if host.name not in self._runners:
                target = self.target(host)
                own = None
                if target.known_hosts is not None:  # the inventory's UserKnownHostsFile for this host
                    path = os.path.expanduser(target.known_hosts)
                    if path not in self._known_files:
                        self._known_files[path] = KnownHosts(path, writable=self.options.accept_new_host_keys)
                    own = self._known_files[path]
                self._runners[host.name] = SshRunner(target, self.options, self.known_hosts, own)
            return self._runners[host.name]

    def close(self) -> None:
        with self._lock:
            runners = list(self._runners.values())
            self._runners.clear()
        for r in runners:
            r.close(final=True)

    def __enter__(self) -> SshFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
