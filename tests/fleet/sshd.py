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

The server has its own ed25519 host key and accepts one client key; `known_hosts` lists the host
key for every address, so host-key checking stays on in tests.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SIM_BIN = REPO / "tests" / "sim" / "bin"
SSHD_CANDIDATES = ("/usr/sbin/sshd", "/usr/local/sbin/sshd")
MAX_LISTEN = 16

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
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"], ["apt-get", "install", "-y", "-q", "openssh-server"]):
        try:
            subprocess.run(cmd, check=True, capture_output=True, timeout=300, env=env)
        except (OSError, subprocess.SubprocessError) as err:
            return None, f"OpenSSH sshd is missing and installing it failed: {err}"
    path = find_sshd()
    return (path, "") if path else (None, "openssh-server installed but sshd not found")


def keygen(path: Path, comment: str) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                   check=True, capture_output=True)
    return path.with_suffix(".pub").read_text().strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


@dataclass
class SshServer:
    root: Path
    sshd: str
    count: int = 24
    port: int = 0
    hosts: list[SimHost] = field(default_factory=list)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

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
        shutil.copy(self.client_key.with_suffix(".pub"), self.root / "authorized_keys")
        common = self.root / "common-bin"
        common.mkdir()
        (common / "sudo").write_text(PASS_SUDO)
        (common / "sudo").chmod(0o755)
        (common / "python3").symlink_to(sys.executable)
        self.hosts = []
        for i in range(self.count):
            h = SimHost(f"127.0.0.{i + 2}", self.root / "hosts" / f"127.0.0.{i + 2}")
            h.bin.mkdir(parents=True)
            self.hosts.append(h)
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation dir
        last = ""
        for _ in range(5):
            self.port = _free_port()
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
            f"AuthorizedKeysFile {self.root / 'authorized_keys'}",
            "StrictModes no", "UsePAM no", "PermitRootLogin prohibit-password",
            "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "AllowTcpForwarding yes", "MaxStartups 100:30:200", "MaxSessions 50",
            "LogLevel VERBOSE",
        ]
        for h in self.hosts:
            path = f"{h.bin}:{common}:{SIM_BIN}:/usr/local/bin:/usr/bin:/bin"
            env = f"PATH={path} MIGPLAN_SIM_STATE={h.state} MIGPLAN_SIM_PYTHON={sys.executable}"
            lines += [f"Match LocalAddress {h.address}", f"  SetEnv {env}"]
        return "\n".join(lines) + "\n"

    def _launch(self, config: Path, log: Path, chunk: list[SimHost]) -> str:
        log.write_text("")
        proc = subprocess.Popen([self.sshd, "-D", "-f", str(config), "-E", str(log)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.procs.append(proc)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return log.read_text()[-2000:] or "sshd exited"
            if all(self._listening(h.address) for h in (chunk[0], chunk[-1])):
                return ""
            time.sleep(0.05)
        return "timed out waiting for sshd to listen"

    def _listening(self, address: str) -> bool:
        try:
            with socket.create_connection((address, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(5)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(5)
        self.procs = []
