"""SSH transport (the only module that imports paramiko): one connection per host, strict host keys.

Connection settings come from the inventory first, then `~/.ssh/config` (Host, HostName, User,
Port, IdentityFile, IdentitiesOnly, ProxyJump), then defaults (port 22, the local user name,
ssh-agent keys and ~/.ssh/id_*), as Ansible does.

Host keys (ecosystem notes §1.3): a host missing from known_hosts is refused unless the caller
opted in to `accept_new_host_keys`, which records the key (appending to the file atomically);
a key that differs from the recorded one is always refused with both SHA256 fingerprints, as
OpenSSH's "REMOTE HOST IDENTIFICATION HAS CHANGED" does.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import paramiko

from migplan import names
from migplan.adapters.runner import (
    DEFAULT_TIMEOUT,
    MAX_OUTPUT_BYTES,
    AuthError,
    CommandTimeout,
    Completed,
    ConnectionLost,
    HostError,
    HostKeyChangedError,
    HostKeyUnknownError,
    OutputTooLarge,
    UnreachableError,
    check_become,
    command_line,
)
from migplan.errors import InputError
from migplan.files import write_atomic
from migplan.inventory import Host

log = logging.getLogger(__name__)

DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
DEFAULT_SSH_CONFIG = "~/.ssh/config"
SSH_PORT = 22


@dataclass(frozen=True)
class SshOptions:
    """How to connect; the CLI fills it from its flags."""

    known_hosts: str = DEFAULT_KNOWN_HOSTS
    accept_new_host_keys: bool = False
    ssh_config: str | None = DEFAULT_SSH_CONFIG  # None: read no ssh_config
    connect_timeout: float = 10.0
    keepalive_s: int = 15
    allow_agent: bool = True
    look_for_keys: bool = True  # ~/.ssh/id_* when no key is configured


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
        """The name known_hosts records: `host` on port 22, else `[host]:port` (OpenSSH format)."""
        return self.hostname if self.port == SSH_PORT else f"[{self.hostname}]:{self.port}"

    def __str__(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.hostname}:{self.port}"


@dataclass(frozen=True)
class SshTarget:
    """An inventory host resolved against ssh_config: where to connect and through which jumps."""

    name: str
    endpoint: Endpoint
    jumps: tuple[Endpoint, ...] = ()
    become: tuple[str, ...] = ()


def fingerprint(key: paramiko.PKey) -> str:
    """`SHA256:<base64, unpadded>`, the form `ssh-keygen -lf` and OpenSSH's prompts print."""
    return str(key.fingerprint)


# --- ssh_config -----------------------------------------------------------------------------

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
    for number, line in enumerate(text.splitlines(), 1):
        if line.strip().lower().startswith("include"):
            log.warning("%s:%d: 'Include' is not supported (paramiko ignores it); hosts defined in "
                        "included files are not seen", full, number)
    try:
        return paramiko.SSHConfig.from_text(text)
    except Exception as err:  # paramiko raises bare Exception / ConfigParseError on bad lines
        raise InputError(f"cannot parse ssh config: {err}", source=full) from None


def _config_for(config: paramiko.SSHConfig | None, name: str) -> dict[str, Any]:
    if config is None:
        return {}
    try:
        return dict(config.lookup(name))
    except Exception as err:  # token expansion errors, bad Match lines
        raise InputError(f"ssh config lookup for {name!r} failed: {err}") from None


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
        raise InputError(f"ssh config gives {name!r} the HostName {hostname!r}, which is not a host name or address")
    resolved_port = port if port is not None else _port(opts.get("port", SSH_PORT), f"ssh config for {name}")
    keys = (key_file,) if key_file else tuple(opts.get("identityfile", ()))
    identities_only = str(opts.get("identitiesonly", "no")).lower() == "yes"
    return Endpoint(hostname=hostname.strip("[]"), port=resolved_port, user=user or opts.get("user"),
                    key_files=tuple(os.path.expanduser(k) for k in keys),
                    identities_only=identities_only), opts


def _parse_jump(spec: str) -> tuple[str, int | None, str | None]:
    """`[user@]host[:port]` or `ssh://[user@]host[:port]` -> (host, port, user)."""
    text = spec.strip()
    if text.startswith("ssh://"):
        text = text[len("ssh://"):]
    user, _, rest = text.rpartition("@")
    host, port = rest, None
    if rest.startswith("["):  # [v6::addr]:port
        host, _, tail = rest[1:].partition("]")
        port = _port(tail[1:], f"ProxyJump {spec!r}") if tail.startswith(":") else None
    elif rest.count(":") == 1:
        host, _, p = rest.partition(":")
        port = _port(p, f"ProxyJump {spec!r}")
    if not names.ADDRESS.match(host) or (user and not names.SAFE_TOKEN.match(user)):
        raise InputError(f"ProxyJump {spec!r} is not [user@]host[:port]")
    return host, port, user or None


def resolve_target(host: Host, config: paramiko.SSHConfig | None) -> SshTarget:
    """Where and how to reach an inventory host (ssh_config looked up by its address, like `ssh ADDRESS`)."""
    if host.key_file and not os.path.isfile(os.path.expanduser(host.key_file)):
        raise InputError(f"{host.name}: key_file {host.key_file} does not exist or is not a file",
                         hint="fix key_file (ansible_ssh_private_key_file) in the inventory")
    endpoint, opts = _endpoint(config, host.address, port=host.port, user=host.user, key_file=host.key_file)
    if "proxycommand" in opts:
        raise InputError(f"{host.name}: ssh config sets ProxyCommand, which migplan does not run",
                         hint="use 'ProxyJump [user@]jumphost[:port]' instead")
    jumps: list[Endpoint] = []
    spec = str(opts.get("proxyjump", "none"))
    if spec.lower() != "none":
        for hop in spec.split(","):
            jhost, jport, juser = _parse_jump(hop)
            jump, _ = _endpoint(config, jhost, port=jport, user=juser)
            jumps.append(jump)
    return SshTarget(name=host.name, endpoint=endpoint, jumps=tuple(jumps), become=tuple(host.become))


# --- known_hosts ---------------------------------------------------------------------------

class KnownHosts:
    """The known_hosts file, shared by all connections (thread-safe, appended atomically)."""

    def __init__(self, path: str) -> None:
        self.path = os.path.expanduser(path)
        self._lock = threading.Lock()
        self._keys = paramiko.HostKeys()
        try:
            self._keys.load(self.path)
        except FileNotFoundError:
            pass
        except (OSError, UnicodeDecodeError, paramiko.SSHException) as err:
            raise InputError(f"cannot read known hosts: {err}", source=self.path) from None

    def lookup(self, name: str) -> dict[str, paramiko.PKey]:
        with self._lock:
            found = self._keys.lookup(name)
            return dict(found) if found is not None else {}

    def add(self, name: str, key: paramiko.PKey) -> None:
        """Record a new key: the file's text plus one line, written atomically (0600 when new)."""
        line = f"{name} {key.get_name()} {key.get_base64()}\n"
        with self._lock:
            try:
                with open(self.path, encoding="utf-8") as fh:
                    text = fh.read()
            except FileNotFoundError:
                text = ""
            if text and not text.endswith("\n"):
                text += "\n"
            write_atomic(self.path, text + line, mode=0o600)
            self._keys.add(name, key.get_name(), key)


class _HostKeyPolicy(paramiko.MissingHostKeyPolicy):
    """Called by paramiko only for a host with no recorded key (a changed key never gets here)."""

    def __init__(self, known: KnownHosts, accept_new: bool, host: str) -> None:
        self._known = known
        self._accept_new = accept_new
        self._host = host

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        if not self._accept_new:
            raise HostKeyUnknownError(
                self._host, f"host key for {hostname} is not in {self._known.path} "
                f"({key.get_name()} {fingerprint(key)})",
                hint="check the fingerprint with the host's owner, then re-run with --accept-new-host-keys "
                     "(or add it with 'ssh-keyscan')")
        self._known.add(hostname, key)
        client.get_host_keys().add(hostname, key.get_name(), key)
        log.warning("%s: recorded new host key for %s (%s %s) in %s", self._host, hostname, key.get_name(),
                    fingerprint(key), self._known.path)


# --- the runner ----------------------------------------------------------------------------

class SshRunner:
    """Runs argv on one host over a single SSH connection, opened on first use and kept open."""

    def __init__(self, target: SshTarget, options: SshOptions, known: KnownHosts) -> None:
        self.target = target
        self._options = options
        self._known = known
        self._lock = threading.Lock()
        self._clients: list[paramiko.SSHClient] = []  # jumps first, the target last

    @property
    def host(self) -> str:
        return self.target.name

    def connect(self) -> None:
        """Open the connection now (otherwise the first `run` does)."""
        with self._lock:
            self._transport()

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT) -> Completed:
        full = (*self.target.become, *argv)
        line = command_line(full)
        with self._lock:
            transport = self._transport()
            log.debug("%s: running %s", self.host, line)
            done = self._exec(transport, full, line, timeout)
        return check_become(self.host, self.target.become, done)

    def close(self) -> None:
        with self._lock:
            for client in reversed(self._clients):
                client.close()
            self._clients.clear()

    # -- connecting ---------------------------------------------------------------------------
    def _transport(self) -> paramiko.Transport:
        if self._clients:
            transport = self._clients[-1].get_transport()
            if transport is not None and transport.is_active():
                return transport
            self._close()
            raise ConnectionLost(self.host, "the SSH connection dropped")
        sock: paramiko.Channel | None = None
        try:
            for endpoint in (*self.target.jumps, self.target.endpoint):
                client = self._connect(endpoint, sock)
                self._clients.append(client)
                sock = None
                if endpoint is not self.target.endpoint:
                    sock = self._tunnel(client, endpoint)
        except BaseException:
            self._close()
            raise
        transport = self._clients[-1].get_transport()
        assert transport is not None  # just connected
        return transport

    def _close(self) -> None:
        for client in reversed(self._clients):
            client.close()
        self._clients.clear()

    def _tunnel(self, jump: paramiko.SSHClient, via: Endpoint) -> paramiko.Channel:
        """A direct-tcpip channel from the jump host to the next hop (what `ssh -J` does)."""
        nxt = self._next_after(via)
        transport = jump.get_transport()
        assert transport is not None
        try:
            return transport.open_channel("direct-tcpip", (nxt.hostname, nxt.port), ("127.0.0.1", 0),
                                          timeout=self._options.connect_timeout)
        except (paramiko.SSHException, OSError, EOFError) as err:
            raise UnreachableError(self.host, f"jump host {via} cannot reach {nxt.hostname}:{nxt.port}: "
                                   f"{_reason(err)}") from None

    def _next_after(self, endpoint: Endpoint) -> Endpoint:
        hops = (*self.target.jumps, self.target.endpoint)
        return hops[hops.index(endpoint) + 1]

    def _connect(self, ep: Endpoint, sock: paramiko.Channel | None) -> paramiko.SSHClient:
        opts = self._options
        client = paramiko.SSHClient()
        for keytype, key in self._known.lookup(ep.known_hosts_name).items():
            client.get_host_keys().add(ep.known_hosts_name, keytype, key)
        client.set_missing_host_key_policy(_HostKeyPolicy(self._known, opts.accept_new_host_keys, self.host))
        key_files = [k for k in ep.key_files if os.path.isfile(k)]  # as ssh, skip missing IdentityFiles
        where = f"{ep}" + (" (via jump host)" if sock is not None else "")
        try:
            client.connect(
                # paramiko documents key_filename as 'str or list(str)'; the stub says str only
                ep.hostname, port=ep.port, username=ep.user, key_filename=key_files or None,  # type: ignore[arg-type]
                timeout=opts.connect_timeout, banner_timeout=opts.connect_timeout,
                auth_timeout=opts.connect_timeout, channel_timeout=opts.connect_timeout,
                allow_agent=opts.allow_agent and not (ep.identities_only and key_files),
                look_for_keys=opts.look_for_keys and not key_files,
                sock=sock,
            )
        except HostError:
            client.close()
            raise
        except paramiko.BadHostKeyException as err:
            client.close()
            raise HostKeyChangedError(
                self.host, f"HOST KEY CHANGED for {ep.known_hosts_name}: {self._known.path} has "
                f"{err.expected_key.get_name()} {fingerprint(err.expected_key)}, the server sent "
                f"{err.key.get_name()} {fingerprint(err.key)}",
                hint="someone may be intercepting the connection, or the host was reinstalled; verify with its "
                     f"owner, then remove the old key with 'ssh-keygen -R \"{ep.known_hosts_name}\" -f "
                     f"{self._known.path}'") from None
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
            raise UnreachableError(self.host, f"cannot connect to {where}: {_reason(err)}") from None
        transport = client.get_transport()
        if transport is not None and opts.keepalive_s > 0:
            transport.set_keepalive(opts.keepalive_s)
        return client

    # -- running -----------------------------------------------------------------------------
    def _exec(self, transport: paramiko.Transport, argv: tuple[str, ...], line: str, timeout: float) -> Completed:
        start = time.monotonic()
        try:
            chan = transport.open_session(timeout=self._options.connect_timeout)
            chan.exec_command(line)
        except (paramiko.SSHException, OSError, EOFError) as err:
            self._close()
            raise ConnectionLost(self.host, f"cannot start '{argv[0]}': {_reason(err)}") from None
        try:
            out, err_out = _collect(chan, start + timeout, self.host, argv[0], timeout)
            if not chan.exit_status_ready():
                self._close()
                raise ConnectionLost(self.host, f"the connection dropped while '{argv[0]}' was running")
            code = chan.recv_exit_status()  # -1: the command died on a signal
        finally:
            chan.close()
        return Completed(argv, code, out.decode("utf-8", "replace"), err_out.decode("utf-8", "replace"),
                         time.monotonic() - start)


@dataclass
class _Buffers:
    out: bytearray = field(default_factory=bytearray)
    err: bytearray = field(default_factory=bytearray)


def _collect(chan: paramiko.Channel, deadline: float, host: str, prog: str,
             timeout: float) -> tuple[bytes, bytes]:
    """Read stdout and stderr until the command exits, the deadline passes or the output is too big."""
    buf = _Buffers()
    pause = 0.001
    while True:
        busy = False
        while chan.recv_ready():
            buf.out += chan.recv(65536)
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
    """Connections to many hosts with shared settings, known_hosts and ssh_config; close() ends all."""

    def __init__(self, options: SshOptions | None = None) -> None:
        self.options = options or SshOptions()
        self.config = load_ssh_config(self.options.ssh_config)
        self.known_hosts = KnownHosts(self.options.known_hosts)
        self._runners: dict[str, SshRunner] = {}
        self._lock = threading.Lock()

    def target(self, host: Host) -> SshTarget:
        return resolve_target(host, self.config)

    def runner(self, host: Host) -> SshRunner:
        """The runner for a host (created once; its connection opens on first use)."""
        with self._lock:
            if host.name not in self._runners:
                self._runners[host.name] = SshRunner(self.target(host), self.options, self.known_hosts)
            return self._runners[host.name]

    def close(self) -> None:
        with self._lock:
            runners = list(self._runners.values())
            self._runners.clear()
        for r in runners:
            r.close()

    def __enter__(self) -> SshFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
