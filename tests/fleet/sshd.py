"""A real OpenSSH server on loopback for tests: one `sshd`, many simulated hosts.

`sshd -D` listens on one port on several loopback addresses (127.0.0.2, 127.0.0.3, ...; one process per
16 addresses, sshd's MAX_LISTEN_SOCKS). A
`Match LocalAddress` block per address sets that "host"'s environment with `SetEnv`:

  PATH=<host dir>/bin:<common bin>:tests/sim/bin:/usr/bin:/bin
  MIGPLAN_SIM_STATE=<host dir>/state.json
  MIGPLAN_SIM_PYTHON=<the interpreter running the tests>

so the nvidia-smi simulator keeps one state file per host, and a test can drop a script into
`<host dir>/bin` (a `sudo` that refuses, a hostile `nvidia-smi`) to change one host only. The common
bin holds a pass-through `sudo` (`sudo -n CMD` runs CMD; root needs no password) and a `python3`
pointing at the interpreter running the tests (the simulator's shebang finds it).

The real-sudo test users (`SudoUsers`, root only; `migplan-ok-<pid>` and `migplan-pw-<pid>`, one pair
per test session) log in with the same client key from their own `~/.ssh/authorized_keys`. A
`Match User ... LocalAddress` block before each host's own block gives them
PATH=tests/sim/bin:/usr/local/bin:/usr/bin:/bin - no pass-through `sudo`, so `sudo` is the system's
real one - and the same per-host MIGPLAN_SIM_* variables (sshd uses the first SetEnv that matches).

The server has its own ed25519 host key and accepts one client key; `known_hosts` lists the host
key for every address, so host-key checking stays on in tests.

A jump host and a host behind it (`JumpLab`, tests/fleet/conftest.py's `jump_lab`, root only): a network
namespace of their own (`NetNamespace`: `unshare --net`, only its loopback up) in which a second `SshServer`
(`netns=`) runs the target's `sshd -D` on 127.0.0.2, so nothing in the tests' own namespace reaches it (a direct
connection is refused); and a third, `inetd=True`, whose listening socket is on 127.0.0.1 in the tests' namespace
and which starts one `sshd -i` per connection inside the lab's namespace (`nsenter`; what systemd's sshd.socket
with Accept=yes does): the real jump host, the only way in. Each server has its own host key.
"""

from __future__ import annotations

import os
import pwd
import re
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from helpers import free_port

REPO = Path(__file__).resolve().parents[2]
SIM_BIN = REPO / "tests" / "sim" / "bin"
SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")
MAX_LISTEN = 16
# Real-sudo test users: SUDO_OK may run the simulator as root without a password, SUDO_PW needs one.
# Users and sudoers are machine-wide and test sessions may run side by side, so each session (pytest
# process) has its own users and drop-in, named by its pid; those of sessions that died are removed.
SESSION = os.getpid()
SUDO_OK, SUDO_PW = f"migplan-ok-{SESSION}", f"migplan-pw-{SESSION}"
SUDO_USERS = (SUDO_OK, SUDO_PW)
SUDOERS_DIR = Path("/etc/sudoers.d")
SUDOERS_DROPIN = SUDOERS_DIR / f"migplan-tests-{SESSION}"  # no "." in the name: sudo would skip it
SESSION_NAME = re.compile(r"migplan-(?:ok|pw|tests)-(\d+)")  # users and drop-ins of one session
USER_MARKER = ".migplan-test-user"  # in the home of a user these tests created

PASS_SUDO = """#!/bin/sh
# test double for sudo: drop the options migplan passes, then run the command
while [ $# -gt 0 ]; do
  case "$1" in
    -n|-E|-H) shift ;;
    -u) shift 2 ;;
    --) shift; break ;;
    *) break ;;
  esac
done
exec "$@"
"""

REFUSING_SUDO = """#!/bin/sh
echo "sudo: a password is required" >&2
exit 1
"""


def _apt_install(package: str, what: str) -> str:
    """Install a Debian package (root only); '' on success, else why not."""
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", package]):
        try:
            subprocess.run(cmd, check=True, capture_output=True, timeout=300, env=env)
        except (OSError, subprocess.SubprocessError) as err:
            return f"{what} is missing and installing {package} failed: {err}"
    return ""


def find_sshd() -> str | None:
    for cand in SSHD_CANDIDATES:
        if os.access(cand, os.X_OK):
            return cand
    return shutil.which("sshd")


def ensure_sshd() -> tuple[str | None, str]:
    """The sshd path, installing openssh-server when root and missing; (None, reason) otherwise."""
    path = find_sshd()
    if path:
        return path, ""
    if os.geteuid() != 0:
        return None, "OpenSSH sshd is not installed and tests do not run as root (apt-get install openssh-server)"
    failed = _apt_install("openssh-server", "OpenSSH sshd")
    if failed:
        return None, failed
    path = find_sshd()
    return (path, "") if path else (None, "openssh-server installed but sshd not found")


def _tool(name: str) -> str | None:
    for cand in (f"/usr/bin/{name}", f"/usr/sbin/{name}", f"/bin/{name}", f"/sbin/{name}"):
        if os.access(cand, os.X_OK):
            return cand
    return shutil.which(name)


def ensure_sudo() -> tuple[str | None, str]:
    """The real sudo (with visudo), installing Debian's `sudo` when root and missing; (None, reason) otherwise."""
    if _tool("sudo") and _tool("visudo"):
        return _tool("sudo"), ""
    if os.geteuid() != 0:
        return None, "sudo is not installed and tests do not run as root (apt-get install sudo)"
    failed = _apt_install("sudo", "sudo")
    if failed:
        return None, failed
    sudo = _tool("sudo")
    return (sudo, "") if sudo and _tool("visudo") else (None, "the sudo package installed but sudo/visudo not found")


def keygen(path: Path, comment: str) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True)
    return path.with_suffix(".pub").read_text().strip()


@dataclass
class SimHost:
    """One simulated host: an address on the shared sshd and its own directory."""

    address: str
    dir: Path

    @property
    def bin(self) -> Path:
        return self.dir / "bin"

    @property
    def state(self) -> Path:
        return self.dir / "state.json"

    def script(self, name: str, text: str) -> Path:
        path = self.bin / name
        path.write_text(text)
        path.chmod(0o755)
        return path

    def reset(self) -> None:
        for child in self.bin.iterdir():
            child.unlink()
        for child in self.dir.iterdir():
            if child.is_file():
                child.unlink()


# Run in the new namespace by `unshare --net`: bring its loopback up (SIOCGIFFLAGS/SIOCSIFFLAGS, IFF_UP; no `ip`
# needed), say so, and live until the tests close its stdin.
_NETNS_HOLDER = """
import fcntl, socket, struct, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sH14x", fcntl.ioctl(s, 0x8913, struct.pack("16sH14x", b"lo", 0)))[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", flags | 1))
print("ready", flush=True)
sys.stdin.read()
"""


@dataclass
class NetNamespace:
    """A network namespace with only its own loopback, held by a small process; `prefix` runs a command in it."""

    proc: subprocess.Popen[bytes]

    @classmethod
    def start(cls) -> tuple[NetNamespace | None, str]:
        """The namespace, or (None, why not): it needs root (CAP_SYS_ADMIN) and util-linux's unshare and nsenter."""
        if os.geteuid() != 0:
            return None, "a network namespace for the jump host tests needs root (unshare --net)"
        missing = [t for t in ("unshare", "nsenter") if _tool(t) is None]
        if missing:
            return None, f"{', '.join(missing)} not found (util-linux)"
        proc = subprocess.Popen([str(_tool("unshare")), "--net", "--", sys.executable, "-c", _NETNS_HOLDER],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert proc.stdout is not None
        ready = select.select([proc.stdout], [], [], 10)[0]
        line = proc.stdout.readline() if ready else b""
        if line.strip() != b"ready":
            proc.kill()
            _, err = proc.communicate(timeout=10)
            return None, f"unshare --net failed: {err.decode(errors='replace').strip()[-300:] or 'no answer'}"
        return cls(proc), ""

    @property
    def prefix(self) -> list[str]:
        return [str(_tool("nsenter")), f"--net=/proc/{self.proc.pid}/ns/net"]

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


@dataclass
class SshServer:
    """sshd serving `count` simulated hosts on 127.0.0.`first`... (see the module's notes). `netns`: sshd runs in
    that namespace (ready when its log says it listens); `inetd`: a listening socket here, and one `sshd -i` per
    connection (in `netns` when given); `authorized`: public keys accepted besides the server's own client key."""

    root: Path
    sshd: str
    count: int = 24
    port: int = 0
    hosts: list[SimHost] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    first: int = 2
    netns: NetNamespace | None = None
    inetd: bool = False
    authorized: tuple[str, ...] = ()
    _listener: socket.socket | None = None

    @property
    def client_key(self) -> Path:
        return self.root / "client_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def host_key_pub(self) -> str:
        return (self.root / "host_ed25519.pub").read_text().strip()

    def known_hosts_line(self, address: str) -> str:
        kind, blob = self.host_key_pub.split()[:2]
        return f"[{address}]:{self.port} {kind} {blob}\n"

    def start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        keygen(self.root / "host_ed25519", "migplan-test-host")
        keygen(self.client_key, "migplan-test-client")
        keys = [self.client_key.with_suffix(".pub").read_text().strip(), *self.authorized]
        (self.root / "authorized_keys").write_text("".join(k + "\n" for k in keys))
        common = self.root / "common-bin"
        common.mkdir()
        (common / "sudo").write_text(PASS_SUDO)
        (common / "sudo").chmod(0o755)
        (common / "python3").symlink_to(sys.executable)
        self.hosts = []
        for i in range(self.count):
            h = SimHost(f"127.0.0.{i + self.first}", self.root / "hosts" / f"127.0.0.{i + self.first}")
            h.bin.mkdir(parents=True)
            self.hosts.append(h)
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        last = ""
        for _ in range(5):
            self.port = free_port()
            last = self._launch_all(common)
            if not last:
                self.known_hosts.write_text("".join(self.known_hosts_line(h.address) for h in self.hosts))
                return
        raise RuntimeError(f"sshd did not start: {last}")

    def _launch_all(self, common: Path) -> str:
        """sshd listens on at most 16 sockets (MAX_LISTEN_SOCKS): one process per 16 addresses."""
        for n, first in enumerate(range(0, len(self.hosts), MAX_LISTEN)):
            chunk = self.hosts[first:first + MAX_LISTEN]
            config = self.root / f"sshd_config.{n}"
            config.write_text(self._config(chunk, common, n))
            failed = self._launch(config, self.root / f"sshd.{n}.log", chunk)
            if failed:
                self.stop()
                return failed
        return ""

    def _config(self, chunk: list[SimHost], common: Path, n: int) -> str:
        lines = [f"ListenAddress {h.address}:{self.port}" for h in chunk]
        lines += [
            f"HostKey {self.root / 'host_ed25519'}",
            f"PidFile {self.root / f'sshd.{n}.pid'}",
            f"AuthorizedKeysFile {self.root / 'authorized_keys'} .ssh/authorized_keys",
            "StrictModes no", "UsePAM no", "PermitRootLogin prohibit-password",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "AllowTcpForwarding yes", "MaxStartups 100:30:200", "MaxSessions 50",
            "LogLevel VERBOSE", "Subsystem sftp internal-sftp",  # apply writes the assignments over SFTP
        ]
        for h in self.hosts:
            sim = f"MIGPLAN_SIM_STATE={h.state} MIGPLAN_SIM_PYTHON={sys.executable}"
            lines += [f"Match User {','.join(SUDO_USERS)} LocalAddress {h.address}",
                      f"  SetEnv PATH={SIM_BIN}:/usr/local/bin:/usr/bin:/bin {sim}"]
            path = f"{h.bin}:{common}:{SIM_BIN}:/usr/local/bin:/usr/bin:/bin"
            lines += [f"Match LocalAddress {h.address}", f"  SetEnv PATH={path} {sim}"]
        return "\n".join(lines) + "\n"

    def _launch(self, config: Path, log: Path, chunk: list[SimHost]) -> str:
        log.write_text("")
        prefix = self.netns.prefix if self.netns is not None else []
        if self.inetd:
            return self._serve_inetd([*prefix, self.sshd, "-i", "-f", str(config), "-E", str(log)], chunk)
        proc = subprocess.Popen([*prefix, self.sshd, "-D", "-f", str(config), "-E", str(log)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(proc)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return log.read_text()[-2000:] or "sshd exited"
            if self.netns is not None:  # not reachable from here: its log says when it listens
                said = log.read_text()
                if all(f"Server listening on {h.address} port {self.port}." in said for h in (chunk[0], chunk[-1])):
                    return ""
            elif all(self._listening(h.address) for h in (chunk[0], chunk[-1])):
                return ""
            time.sleep(0.05)
        return "timed out waiting for sshd to listen"

    def _serve_inetd(self, argv: list[str], chunk: list[SimHost]) -> str:
        """A socket listening here on the first host's address, and `argv` (sshd -i) for each connection, with
        the connection as its stdin and stdout."""
        listener = socket.socket()
        try:
            listener.bind((chunk[0].address, self.port))
        except OSError as err:
            listener.close()
            return f"cannot listen on {chunk[0].address}:{self.port}: {err}"
        listener.listen(64)
        self._listener = listener

        def accept() -> None:
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:  # closed by stop()
                    return
                with conn:
                    self.procs.append(subprocess.Popen(argv, stdin=conn, stdout=conn, stderr=subprocess.DEVNULL))

        threading.Thread(target=accept, name=f"inetd-{self.port}", daemon=True).start()
        return ""

    def _listening(self, address: str) -> bool:
        try:
            with socket.create_connection((address, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        for proc in list(self.procs):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        self.procs = []


# --- real sudo --------------------------------------------------------------------------------------

SUDOERS_SAFE_PATH = re.compile(r"[A-Za-z0-9_./+-]+")  # no space, comma, colon, '=', '#' or quote in sudoers


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_dead_sessions() -> None:
    """Users and drop-ins left by test sessions that are gone (killed before their teardown)."""
    for entry in pwd.getpwall():
        m = SESSION_NAME.fullmatch(entry.pw_name)
        if m and int(m.group(1)) != SESSION and not _alive(int(m.group(1))) \
                and (Path(entry.pw_dir) / USER_MARKER).exists():
            subprocess.run([str(_tool("userdel")), "--remove", "--force", entry.pw_name], capture_output=True,
                           timeout=60)
    for path in SUDOERS_DIR.glob("migplan-tests-*"):
        m = SESSION_NAME.fullmatch(path.name)
        if m and int(m.group(1)) != SESSION and not _alive(int(m.group(1))):
            path.unlink(missing_ok=True)


def sudoers_text() -> str:
    """The drop-in: SUDO_OK runs the simulator as root without a password, SUDO_PW only with one.

    sudo resets PATH and the environment, so for these two users only, `secure_path` puts tests/sim/bin
    first (`sudo -n nvidia-smi` finds the simulator, which the rules name by its absolute path) and
    `env_keep` passes on the host's state file and interpreter. Only root can log in as these users: their
    password is "*" and the client key lives in root's pytest directory.
    """
    users = ",".join(SUDO_USERS)
    smi = SIM_BIN / "nvidia-smi"
    return (f"# migplan tests (tests/fleet/sshd.py SudoUsers), session {SESSION}: removed when it ends\n"
            f'Defaults:{users} secure_path="{SIM_BIN}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"\n'
            f'Defaults:{users} env_keep += "MIGPLAN_SIM_STATE MIGPLAN_SIM_PYTHON"\n'
            f"{SUDO_OK} ALL=(root) NOPASSWD: {smi}\n"
            f"{SUDO_PW} ALL=(root) {smi}\n")


@dataclass
class SudoUsers:
    """Two local users that log in to the test sshd with its client key, for tests of the real sudo."""

    sudo: str
    ok: str = SUDO_OK
    pw: str = SUDO_PW
    owned: list[str] = field(default_factory=list)  # users these tests created (removed at teardown)

    @classmethod
    def setup(cls, server: SshServer) -> tuple[SudoUsers | None, str]:
        """Create the users and install the sudoers drop-in; (None, why not) when this machine cannot."""
        if os.geteuid() != 0:
            return None, "the real-sudo tests create local users and a sudoers drop-in, so they need root"
        sudo, why = ensure_sudo()
        if sudo is None:
            return None, why
        missing = [t for t in ("useradd", "userdel", "visudo") if _tool(t) is None]
        if missing:
            return None, f"the real-sudo tests need {', '.join(missing)} (passwd and sudo packages)"
        if not SUDOERS_SAFE_PATH.fullmatch(str(SIM_BIN)):
            return None, f"the simulator's path {SIM_BIN} has characters a sudoers rule cannot hold"
        remove_dead_sessions()
        for name in SUDO_USERS:
            try:
                home = Path(pwd.getpwnam(name).pw_dir)
            except KeyError:
                continue
            if not (home / USER_MARKER).exists():
                return None, f"a user {name!r} exists that these tests did not create; not touching it"
        users = cls(sudo)
        try:
            key = server.client_key.with_suffix(".pub").read_text()
            for name in SUDO_USERS:
                users._add_user(name, key)
            users._install_sudoers()
            listed = subprocess.run([sudo, "-l", "-U", SUDO_OK], capture_output=True, text=True, timeout=30)
        except BaseException:
            users.teardown()
            raise
        if f"NOPASSWD: {SIM_BIN / 'nvidia-smi'}" not in listed.stdout:
            users.teardown()
            return None, f"sudo does not read {SUDOERS_DROPIN} (no @includedir /etc/sudoers.d?): {listed.stdout!r}"
        return users, ""

    def _add_user(self, name: str, key: str) -> None:
        try:
            pwd.getpwnam(name)  # left by this session's pid before (it has the marker, checked in setup)
        except KeyError:
            subprocess.run([str(_tool("useradd")), "--create-home", "--shell", "/bin/sh", "--password", "*",
                            "--comment", "migplan test user", name], check=True, capture_output=True, timeout=60)
        self.owned.append(name)
        entry = pwd.getpwnam(name)
        home = Path(entry.pw_dir)
        (home / USER_MARKER).write_text(f"created by migplan's tests (tests/fleet/sshd.py), session {SESSION}\n")
        ssh = home / ".ssh"
        ssh.mkdir(mode=0o700, exist_ok=True)
        (ssh / "authorized_keys").write_text(key)
        (ssh / "authorized_keys").chmod(0o600)
        for path in (ssh, ssh / "authorized_keys", home / USER_MARKER):
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def _install_sudoers(self) -> None:
        """Check the drop-in with `visudo -cf`, then put it in place (mode 0440) in one rename."""
        tmp = SUDOERS_DROPIN.with_name(SUDOERS_DROPIN.name + ".new")  # a "." in the name: sudo ignores it
        tmp.write_text(sudoers_text())
        tmp.chmod(0o440)
        check = subprocess.run([str(_tool("visudo")), "-cf", str(tmp)], capture_output=True, text=True, timeout=30)
        if check.returncode != 0:
            tmp.unlink()
            raise RuntimeError(f"visudo refused the test sudoers drop-in: {check.stdout}{check.stderr}")
        os.replace(tmp, SUDOERS_DROPIN)

    def teardown(self) -> None:
        SUDOERS_DROPIN.unlink(missing_ok=True)
        for name in self.owned:
            subprocess.run([str(_tool("userdel")), "--remove", "--force", name], capture_output=True, timeout=60)
        self.owned = []
