"""migplan's host-key verdicts against the REAL OpenSSH client's, on the same known_hosts files.

For every case, the same file and the same name go to
  ssh -F /dev/null -o StrictHostKeyChecking=yes -o UserKnownHostsFile=FILE -o GlobalKnownHostsFile=/dev/null
      -o BatchMode=yes -p PORT -i KEY user@ADDRESS true
and to migplan (the matcher alone, and a real SshRunner connection), and they must agree: accept
(ssh exits 0) or refuse ("Host key verification failed."). Then with accept-new on: OpenSSH and
migplan agree except for hosts with only @cert-authority lines, where migplan is stricter on purpose
(it records no plain key for a host meant to present certificates).

Servers: the session's test sshd (127.0.0.2.. on a random port), and a second sshd started here on
127.0.0.1 (so that the name `localhost` in any case reaches it), plus, when it can be bound, one on
127.0.0.1:22 for the "plain host name means port 22" rule. All use the session's host key.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import _user
from helpers import free_port
from sshd import SshServer

from migplan.adapters import known_hosts as kh
from migplan.adapters.runner import HostError, HostKeyChangedError, HostKeyRevokedError, HostKeyUnknownError
from migplan.adapters.ssh import SshFleet, SshOptions
from migplan.inventory import Host

# --- an extra sshd on 127.0.0.1 (also used by test_transfer.py) -------------------------------------

@dataclass
class LocalSshd:
    """An sshd with the session server's keys, listening on `address:port`, with SFTP."""

    server: SshServer
    address: str
    port: int
    proc: subprocess.Popen[bytes] | None = None

    def start(self, root: Path) -> str:
        root.mkdir(parents=True, exist_ok=True)
        config = root / f"sshd_config.{self.port}"
        common = self.server.root / "common-bin"
        config.write_text("\n".join([
            f"ListenAddress {self.address}:{self.port}",
            f"HostKey {self.server.root / 'host_ed25519'}",
            f"PidFile {root / f'sshd.{self.port}.pid'}",
            f"AuthorizedKeysFile {self.server.root / 'authorized_keys'}",
            "StrictModes no", "UsePAM no", "PermitRootLogin prohibit-password",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "Subsystem sftp internal-sftp", "MaxStartups 100:30:200", "LogLevel VERBOSE",
            f"SetEnv PATH={common}:/usr/local/bin:/usr/bin:/bin",
        ]) + "\n")
        log = root / f"sshd.{self.port}.log"
        self.proc = subprocess.Popen([self.server.sshd, "-D", "-f", str(config), "-E", str(log)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return log.read_text()[-500:] or "sshd exited"
            try:
                with socket.create_connection((self.address, self.port), timeout=0.5):
                    return ""
            except OSError:
                time.sleep(0.05)
        return "timed out"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_local_sshd(server: SshServer, root: Path, port: int | None = None) -> LocalSshd | None:
    """An sshd on 127.0.0.1 (a random port, or `port`); None when it cannot listen there."""
    for _ in range(3 if port is None else 1):
        sshd = LocalSshd(server, "127.0.0.1", port or free_port())
        if not sshd.start(root):
            return sshd
        sshd.stop()
    return None


@pytest.fixture(scope="module")
def local_sshd(ssh_server: SshServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSshd]:
    sshd = start_local_sshd(ssh_server, tmp_path_factory.mktemp("local-sshd"))
    if sshd is None:
        pytest.skip("cannot start an sshd on 127.0.0.1")
    yield sshd
    sshd.stop()


@pytest.fixture(scope="module")
def port22_sshd(ssh_server: SshServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSshd | None]:
    """An sshd on 127.0.0.1:22 when that port is free and ours to bind (root), else None."""
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 22))
    except OSError:
        yield None
        return
    sshd = start_local_sshd(ssh_server, tmp_path_factory.mktemp("sshd-22"), port=22)
    yield sshd
    if sshd is not None:
        sshd.stop()


# --- keys --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Keys:
    server: str  # "type base64" of the test sshd's host key
    other: str  # another ed25519 key
    rsa: str  # an RSA key (a recorded key of another type)
    garbage_b64: str  # base64 that decodes, but not to a key


@pytest.fixture(scope="module")
def keys(ssh_server: SshServer, tmp_path_factory: pytest.TempPathFactory) -> Keys:
    if shutil.which("ssh") is None:
        pytest.skip("the OpenSSH client (ssh) is not installed")
    tmp = tmp_path_factory.mktemp("keys")

    def gen(kind: str, *extra: str) -> str:
        path = tmp / kind
        subprocess.run(["ssh-keygen", "-q", "-t", kind, *extra, "-N", "", "-f", str(path)], check=True)
        return " ".join(path.with_suffix(".pub").read_text().split()[:2])

    server = " ".join(ssh_server.host_key_pub.split()[:2])
    return Keys(server=server, other=gen("ed25519"), rsa=gen("rsa", "-b", "2048"),
                garbage_b64="AAAAC3NzaC1lZDI1NTE5AAAAIGFyYmFnZQ==")


# --- the cases ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    id: str
    lines: tuple[str, ...]  # known_hosts lines; {H} = [ADDRESS]:PORT, {h} = ADDRESS, {P} = PORT, {K}/{O}/{R} keys
    connect: str = "{addr}"  # the name given to ssh and to the inventory (address)
    server: str = "main"  # main (127.0.0.2, the session sshd), local (127.0.0.1), p22 (127.0.0.1:22)
    hash_it: bool = False  # run `ssh-keygen -H` over the file first
    expect: bool | None = None  # what OpenSSH says (documentation; the assertion compares with ssh itself)
    stricter_accept_new: bool = False  # with accept-new OpenSSH records the key, migplan refuses on purpose


CASES = [
    Case("exact", ("{H} {K}",), expect=True),
    Case("empty-file", (), expect=False),
    Case("wrong-key", ("{H} {O}",), expect=False),
    Case("other-key-type-only", ("{H} {R}",), expect=False),
    Case("other-type-then-right-key", ("{H} {R}", "{H} {K}"), expect=True),
    Case("right-key-then-wrong-key", ("{H} {K}", "{H} {O}"), expect=True),
    Case("comma-list", ("foo,{H},bar {K}",), expect=True),
    Case("comments-blank-tabs", ("# comment", "", "   ", "\t{H}\t{K} trailing comment",), expect=True),
    Case("crlf", ("{H} {K}\r",), expect=True),
    # case: OpenSSH lowercases the name it connects with and the patterns
    Case("upper-name-lower-entry", ("[localhost]:{P} {K}",), connect="LOCALHOST", server="local", expect=True),
    Case("lower-name-upper-entry", ("[LOCALHOST]:{P} {K}",), connect="localhost", server="local", expect=True),
    Case("mixed-case-wrong-key", ("[LocalHost]:{P} {O}",), connect="LOCALHOST", server="local", expect=False),
    Case("hashed", ("[localhost]:{P} {K}",), connect="LocalHost", server="local", hash_it=True, expect=True),
    Case("hashed-upper-entry", ("[LOCALHOST]:{P} {K}",), connect="localhost", server="local", hash_it=True),
    Case("hashed-wrong-key", ("[localhost]:{P} {O}",), connect="LOCALHOST", server="local", hash_it=True,
         expect=False),
    Case("hashed-address", ("{H} {K}",), hash_it=True, expect=True),
    # [host]:port versus a plain host: with nothing under [host]:port, OpenSSH retries the plain host
    # ("checking without port identifier") and accepts exactly the presented key there
    Case("plain-host-on-other-port", ("{h} {K}",), expect=True),
    Case("plain-host-wrong-key-on-other-port", ("{h} {O}",), expect=False),
    Case("bracketed-wrong-plain-right", ("{H} {O}", "{h} {K}"), expect=False),
    Case("plain-host-revoked-on-other-port", ("{h} {K}", "@revoked {h} {K}"), expect=False,
         stricter_accept_new=True),
    Case("plain-host-ca-on-other-port", ("@cert-authority {h} {K}",), expect=False, stricter_accept_new=True),
    Case("host:port-without-brackets", ("{h}:{P} {K}",), expect=False),
    Case("wrong-port", ("[{h}]:1 {K}",), expect=False),
    # wildcards and negation
    Case("star", ("* {K}",), expect=True),
    Case("bracketed-star", ("[127.0.0.*]:{P} {K}",), expect=True),
    Case("question-mark", ("[127.0.0.?]:{P} {K}",), expect=True),
    Case("star-without-brackets", ("127.0.0.* {K}",), expect=True),  # via the plain-host retry
    Case("negated", ("[127.0.0.*]:{P},!{H} {K}",), expect=False),
    Case("negated-first", ("!{H},* {K}",), expect=True),  # not for [h]:p, but '*' takes the plain-host retry
    Case("negated-both-names", ("!{H},!{h},* {K}",), expect=False),
    Case("negated-other-host", ("[127.0.0.*]:{P},![127.0.0.99]:{P} {K}",), expect=True),
    Case("negated-wrong-key-is-not-a-change", ("*,!{H} {O}", "{H} {K}"), expect=True),
    # markers
    Case("revoked", ("@revoked {H} {K}", "{H} {K}"), expect=False),
    Case("revoked-star", ("{H} {K}", "@revoked * {K}"), expect=False),
    Case("revoked-other-key", ("@revoked {H} {O}", "{H} {K}"), expect=True),
    Case("cert-authority-only", ("@cert-authority {H} {K}",), expect=False, stricter_accept_new=True),
    Case("cert-authority-star", ("@cert-authority * {O}",), expect=False, stricter_accept_new=True),
    Case("cert-authority-and-key", ("@cert-authority * {O}", "{H} {K}"), expect=True),
    Case("marker-is-case-sensitive", ("@REVOKED {H} {K}", "{H} {K}"), expect=True),
    Case("unknown-marker", ("@bogus {H} {K}",), expect=False),
    # lines that cannot be parsed are skipped
    Case("garbage-then-key", ("this is garbage", "{H} ssh-ed25519 !!!notbase64", "{H} ssh-ed25519", "{H} {K}"),
         expect=True),
    Case("garbage-key-is-not-a-change", ("{H} ssh-ed25519 {G}",), expect=False),
    Case("garbage-key-is-not-a-change-2", ("{H} ssh-ed25519 {G}", "{H} {K}"), expect=True),
    Case("type-mismatch-line-skipped", ("{H} ssh-rsa {Kb64}",), expect=False),
    Case("short-type-name", ("{H} ED25519 {Kb64}",), expect=False),
    Case("rsa-signature-name", ("{H} rsa-sha2-512 {Rb64}",), expect=False),
    Case("unknown-type", ("{H} ssh-foo {Kb64}",), expect=False),
    # port 22: the plain name
    Case("port22-plain", ("{h} {K}",), server="p22", expect=True),
    Case("port22-bracketed", ("[{h}]:22 {K}",), server="p22", expect=False),
    Case("port22-plain-localhost-upper", ("localhost {K}",), connect="LOCALHOST", server="p22", expect=True),
    Case("port22-star-bracketed-only", ("[*]:* {K}",), server="p22", expect=False),
]


@dataclass
class Where:
    address: str
    port: int


def _where(case: Case, ssh_server: SshServer, local: LocalSshd, p22: LocalSshd | None) -> Where:
    if case.server == "main":
        return Where(ssh_server.hosts[0].address, ssh_server.port)
    if case.server == "local":
        return Where(local.address, local.port)
    if p22 is None:
        pytest.skip("port 22 on 127.0.0.1 is not free (or not ours to bind)")
    return Where(p22.address, 22)


def write_known_hosts(path: Path, case: Case, keys: Keys, where: Where) -> None:
    bracketed = f"[{where.address}]:{where.port}"
    text = "".join(ln.format(H=bracketed, h=where.address, P=where.port, K=keys.server, O=keys.other,
                             R=keys.rsa, G=keys.garbage_b64, Kb64=keys.server.split()[1],
                             Rb64=keys.rsa.split()[1]) + "\n"
                   for ln in case.lines)
    path.write_text(text)
    if case.hash_it:
        subprocess.run(["ssh-keygen", "-H", "-f", str(path)], check=True, capture_output=True)
        assert "|1|" in path.read_text()


def ssh_start(known: Path, name: str, port: int, key: Path, *, accept_new: bool = False) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["ssh", "-F", "/dev/null", "-o", f"StrictHostKeyChecking={'accept-new' if accept_new else 'yes'}",
         "-o", f"UserKnownHostsFile={known}", "-o", "GlobalKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
         "-o", "CheckHostIP=no", "-o", "UpdateHostKeys=no", "-o", "IdentitiesOnly=yes",
         "-o", "ConnectTimeout=5", "-p", str(port), "-i", str(key), f"{_user()}@{name}", "true"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def ssh_verdict(proc: subprocess.Popen[str]) -> bool:
    """True: ssh logged in; False: "Host key verification failed."; anything else fails the test."""
    _, err = proc.communicate(timeout=30)
    if proc.returncode == 0:
        return True
    assert "Host key verification failed" in err, f"ssh failed for another reason: {err}"
    return False


def ssh_accepts(known: Path, name: str, port: int, key: Path, *, accept_new: bool = False) -> bool:
    return ssh_verdict(ssh_start(known, name, port, key, accept_new=accept_new))


def migplan_accepts(known: Path, name: str, port: int, key: Path, *, accept_new: bool = False) -> bool:
    options = SshOptions(known_hosts=str(known), accept_new_host_keys=accept_new, ssh_config=None,
                         connect_timeout=5.0, allow_agent=False, look_for_keys=False)
    with SshFleet(options) as ssh:
        runner = ssh.runner(Host(name="h", address=name, port=port, user=_user(), key_file=str(key)))
        try:
            runner.connect()
        except (HostKeyUnknownError, HostKeyChangedError, HostKeyRevokedError):
            return False
        except HostError as err:
            raise AssertionError(f"migplan failed for another reason: {err}") from None
    return True


def matcher_accepts(known: Path, name: str, port: int, server_key: str) -> bool:
    keytype, data = server_key.split()
    return kh.KnownHostsFile(str(known)).check(kh.host_name(name, port), kh.PublicKey.from_text(keytype, data)).ok


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_migplan_agrees_with_openssh(case: Case, ssh_server: SshServer, local_sshd: LocalSshd,
                                     port22_sshd: LocalSshd | None, keys: Keys, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    where = _where(case, ssh_server, local_sshd, port22_sshd)
    name = case.connect.format(addr=where.address)
    known = tmp_path / "known_hosts"
    write_known_hosts(known, case, keys, where)
    before = known.read_bytes()
    proc = ssh_start(known, name, where.port, ssh_server.client_key)  # runs while migplan connects
    ours = migplan_accepts(known, name, where.port, ssh_server.client_key)
    openssh = ssh_verdict(proc)
    if case.expect is not None:
        assert openssh is case.expect, f"OpenSSH itself says {'accept' if openssh else 'refuse'}"
    assert matcher_accepts(known, name, where.port, keys.server) is openssh
    assert ours is openssh
    assert known.read_bytes() == before  # strict checking never writes
    if openssh:
        return  # accept-new changes nothing for a host that is known and matches

    # accept-new, each on its own copy of the file
    ssh_copy, our_copy = tmp_path / "kh.ssh", tmp_path / "kh.migplan"
    ssh_copy.write_bytes(before)
    our_copy.write_bytes(before)
    proc = ssh_start(ssh_copy, name, where.port, ssh_server.client_key, accept_new=True)
    ours_new = migplan_accepts(our_copy, name, where.port, ssh_server.client_key, accept_new=True)
    openssh_new = ssh_verdict(proc)
    if case.stricter_accept_new:
        # deliberately stricter: never pin a plain key to a CA-only host, never record a revoked key
        assert openssh_new and not ours_new
        assert our_copy.read_bytes() == before
        return
    assert ours_new is openssh_new
    if openssh_new:  # both recorded the key: the same line
        added_ssh = ssh_copy.read_bytes()[len(before):].decode()
        added_ours = our_copy.read_bytes()[len(before):].decode()
        assert added_ours.strip() == added_ssh.strip()
        assert added_ours.split()[0] == kh.host_name(name, where.port)
    else:
        assert our_copy.read_bytes() == before


def test_accept_new_line_is_what_openssh_writes_for_an_upper_case_name(ssh_server: SshServer,
                                                                     local_sshd: LocalSshd, tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    assert migplan_accepts(ours, "LocalHost", local_sshd.port, ssh_server.client_key, accept_new=True)
    assert ssh_accepts(theirs, "LocalHost", local_sshd.port, ssh_server.client_key, accept_new=True)
    assert ours.read_text() == theirs.read_text()
    assert ours.read_text().startswith(f"[localhost]:{local_sshd.port} ssh-ed25519 ")
    assert oct(os.stat(ours).st_mode & 0o777) == "0o600"
