"""A real Slurm on 127.0.0.1 for tests/test_slurm_real.py: Debian's slurm-wlm (22.05) with munge, one slurmctld and
one slurmd for one node, every daemon started by the test as root in a temporary folder, on free ports, with its
own munge socket and key, and stopped by its process id at the end (`SlurmCluster.stop`).

The node's GPUs do not exist here. slurmd 22.05 refuses a gres.conf device file that is missing ("fatal: can't
stat gres.conf file /dev/nvidia0") and complains of one that is not a character device ("is not a valid character
or block device"), so slurmd runs in a private mount namespace (`unshare -m --propagation private`, NS_SCRIPT)
whose /dev is a fresh tmpfs holding the real /dev/null, /dev/zero, /dev/urandom ... (bind mounts) and a character
device node for every /dev/nvidia* file the gres.conf names (major 195, NVIDIA's for /dev/nvidiaN; 234 for the
capability files: nothing opens them, Slurm only stats them). The machine's own /dev is never written.

`systemctl` on the PATH the tests give the hook scripts is FAKE_SYSTEMCTL: `systemctl restart slurmd` restarts this
slurmd (in a new namespace, so the device nodes follow the gres.conf installed since), as the unit would.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from helpers import free_port

BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "scontrol", "sinfo", "sbatch", "squeue", "scancel",
            "unshare", "mknod", "mount")

NS_SCRIPT = r"""#!/bin/sh
# Run "$@" (slurmd) in this private mount namespace with a /dev of its own: the real basic devices bound in,
# and a character device node for each /dev/nvidia* path in $GRES_CONF (tests/helpers/slurm_cluster.py).
set -eu
real=$ROOT/realdev
mkdir -p "$real"
mount --bind /dev "$real"
mount -t tmpfs -o mode=755 tmpfs /dev
for n in null zero full random urandom tty; do touch "/dev/$n"; mount --bind "$real/$n" "/dev/$n"; done
mkdir /dev/pts /dev/shm /dev/nvidia-caps
mount --bind "$real/pts" /dev/pts
mount -t tmpfs tmpfs /dev/shm
umount "$real"
if [ -f "$GRES_CONF" ]; then
  for p in $(grep -v '^#' "$GRES_CONF" | grep -o '/dev/nvidia[-a-z0-9/]*' | sort -u); do
    n=${p##*[!0-9]}
    case $p in /dev/nvidia-caps/*) mknod "$p" c 234 "$n" ;; *) mknod "$p" c 195 "$n" ;; esac
  done
fi
exec "$@"
"""

FAKE_SYSTEMCTL = r"""#!/bin/sh
# Test double of `systemctl restart slurmd` (tests/helpers/slurm_cluster.py): stops this test's slurmd by the pid in
# its SlurmdPidFile and starts it again the way the fixture does. Like systemd's stop (systemd.kill(5),
# TimeoutStopSec= defaults to 90 s): SIGTERM, wait, SIGKILL, and start only once the old one is gone. A slurmd that
# `scontrol reconfigure` left waiting for a gres.conf device file ignores SIGTERM until it gives up (about 20 s);
# starting the new one beside it lost the port to it, and the node never registered (a CI run).
[ "$*" = "restart slurmd" ] || { echo "fake systemctl: only 'restart slurmd' here, not '$*'" >&2; exit 1; }
# The fixture's slurmd is the test process's child: once dead it stays a zombie until reaped, and kill -0 still
# finds it, so "running" is read from /proc/PID/stat's state field.
running() { [ -r "/proc/$1/stat" ] && [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)" != Z ]; }
pid=$(cat "$ROOT/slurmd.pid" 2>/dev/null || true)
if [ -n "$pid" ]; then
  kill "$pid" 2>/dev/null || true
  i=0
  while running "$pid" && [ $i -lt 900 ]; do sleep 0.1; i=$((i + 1)); done
  if running "$pid"; then
    kill -9 "$pid" 2>/dev/null || true
    while running "$pid"; do sleep 0.1; done
  fi
fi
nohup unshare -m --propagation private sh "$ROOT/ns.sh" slurmd -D -N "$NODE" >> "$ROOT/slurmd.out" 2>&1 < /dev/null &
"""

BASE_CONF = """\
ClusterName=migplantest
SlurmctldHost=localhost(127.0.0.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/socket
StateSaveLocation={root}/ctld
SlurmdSpoolDir={root}/d
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
ReturnToService=2
MpiDefault=none
# the node's line, as a site writes it (no Gres yet: migplan export slurm --slurm-conf adds it)
NodeName={node} NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP
"""


def unavailable() -> str | None:
    """Why a real Slurm cannot be started here (None: it can)."""
    if os.geteuid() != 0:
        return "the real Slurm tests run the daemons and a private mount namespace as root; not root here"
    missing = [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
    if missing:
        return (f"{', '.join(missing)} not installed: apt-get install slurm-wlm munge (bash scripts/test.sh does, "
                "as root)")
    probe = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        return f"cannot make a private mount namespace here (unshare -m): {probe.stderr.decode()[:200]}"
    return None


class SlurmCluster:
    """munged + slurmctld + one slurmd (node `node`) under `root`; `env` runs Slurm's clients against it."""

    def __init__(self, root: Path, node: str = "h1") -> None:
        self.root, self.node = root, node
        self.conf_dir = root / "etc"
        self.conf_dir.mkdir(parents=True)
        for d in ("ctld", "d", "munge", "bin"):
            (root / d).mkdir()
        (root / "munge").chmod(0o700)
        (root / "ns.sh").write_text(NS_SCRIPT)
        systemctl = root / "bin" / "systemctl"
        systemctl.write_text(FAKE_SYSTEMCTL)
        systemctl.chmod(0o755)
        self.base_conf = BASE_CONF.format(ctld_port=free_port(), d_port=free_port(), root=root, node=node)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.started = False
        self.env = {**os.environ, "SLURM_CONF": str(self.conf_dir / "slurm.conf"), "ROOT": str(root), "NODE": node,
                    "GRES_CONF": str(self.conf_dir / "gres.conf"),
                    "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}{os.pathsep}/usr/sbin"}

    # --- files ----------------------------------------------------------------------------------------
    def write(self, slurm_conf: str, gres_conf: str | None) -> None:
        (self.conf_dir / "slurm.conf").write_text(slurm_conf)
        gres = self.conf_dir / "gres.conf"
        if gres_conf is None:
            gres.unlink(missing_ok=True)
        else:
            gres.write_text(gres_conf)

    # --- daemons --------------------------------------------------------------------------------------
    def _spawn(self, argv: list[str], log: str) -> subprocess.Popen[bytes]:
        with open(self.root / log, "ab") as out:
            proc = subprocess.Popen(argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.procs.append(proc)
        return proc

    def start(self) -> None:
        self.start_munge()
        self.start_ctld()
        self.start_slurmd()

    def start_munge(self) -> None:
        """munged with a fresh key and its own socket (slurm.conf's AuthInfo=socket=...)."""
        self.started = True
        m = self.root / "munge"
        key = m / "munge.key"
        subprocess.run(["mungekey", "-c", "-k", str(key), "-b", "1024"], check=True, capture_output=True)
        self._spawn(["munged", "-F", "-f", f"--socket={m / 'socket'}", f"--key-file={key}",
                     f"--pid-file={m / 'pid'}", f"--seed-file={m / 'seed'}", f"--log-file={m / 'log'}"],
                    "munged.out")
        wait_for(lambda: (m / "socket").exists(), 20, "munged's socket")

    def start_ctld(self) -> None:
        self._spawn(["slurmctld", "-D", "-i"], "slurmctld.out")
        wait_for(lambda: "is UP" in self.run(["scontrol", "ping"]).stdout, 30, "slurmctld to answer",
                 lambda: self.log("slurmctld.out") + self.log("slurmctld.log"))

    def start_slurmd(self) -> None:
        self._spawn(["unshare", "-m", "--propagation", "private", "sh", str(self.root / "ns.sh"),
                     "slurmd", "-D", "-N", self.node], "slurmd.out")
        self.wait_registered()

    def wait_registered(self, timeout: float = 30) -> None:
        wait_for(lambda: self.state() not in ("", "unknown", "unknown*", "down*", "idle*", "drained*"), timeout,
                 f"slurmd of {self.node} to register", lambda: self.log("slurmd.out") + self.log("slurmctld.log"))

    def _stop_pid(self, pidfile: Path) -> None:
        try:
            pid = int(pidfile.read_text().strip())
        except (OSError, ValueError):
            return
        if not _ours(pid, self.root):
            return
        os.kill(pid, signal.SIGTERM)
        wait_for(lambda: not _alive(pid), 30, f"process {pid} to stop")
        for p in self.procs:  # reap it when it is our child
            if p.pid == pid:
                p.wait(10)

    def stop_ctld(self) -> None:
        self._stop_pid(self.root / "slurmctld.pid")

    def restart_ctld(self) -> None:
        """As an operator does after changing slurm.conf on Slurm 22.05 (scontrol(1), node Gres=)."""
        self.stop_ctld()
        self.start_ctld()

    def stop(self) -> None:
        if not self.started:
            return
        if _alive_pidfile(self.root / "slurmctld.pid", self.root):
            self.run(["scancel", "--full", "-u", "root"])
            with contextlib.suppress(AssertionError):  # the sweep below ends what is left
                wait_for(lambda: not self.run(["squeue", "-h"]).stdout.strip(), 15, "the jobs to end")
        self._stop_pid(self.root / "slurmd.pid")
        self.stop_ctld()
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)
        # what the daemons started and left (a job's slurmstepd and script): every process whose environment
        # carries this cluster's ROOT=, by its id
        for pid in [int(d.name) for d in Path("/proc").iterdir() if d.name.isdigit()]:
            if pid != os.getpid() and _alive(pid) and _ours(pid, self.root):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)

    # --- clients --------------------------------------------------------------------------------------
    def run(self, argv: list[str], env: Mapping[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(argv, env={**self.env, **(env or {})}, capture_output=True, text=True, timeout=timeout)

    def state(self) -> str:
        return self.run(["sinfo", "-h", "-N", "-n", self.node, "-o", "%T"]).stdout.strip()

    def reason(self) -> str:
        return self.run(["sinfo", "-h", "-N", "-n", self.node, "-o", "%E"]).stdout.strip()

    def show(self) -> dict[str, str]:
        """`scontrol show node -o NODE` as fields (Reason= keeps its spaces: it runs to the end of the line)."""
        line = self.run(["scontrol", "show", "node", "-o", self.node]).stdout.strip()
        head, _, reason = line.partition(" Reason=")
        out = dict(tok.split("=", 1) for tok in head.split() if "=" in tok)
        if reason:
            out["Reason"] = reason
        return out

    def log(self, name: str) -> str:
        try:
            return (self.root / name).read_text()[-3000:]
        except OSError:
            return ""


def _alive(pid: int) -> bool:
    """Running (a zombie, exited but not yet reaped by its parent, is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def _alive_pidfile(pidfile: Path, root: Path) -> bool:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return False
    return _alive(pid) and _ours(pid, root)


def _ours(pid: int, root: Path) -> bool:
    """Whether `pid` is a daemon this cluster started: its environment names our folder (ROOT=...)."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"ROOT={root}".encode() in env


def wait_for(check: Callable[[], bool], timeout: float, what: str, details: Callable[[], str] = lambda: "") -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}\n{details()}")
        time.sleep(0.2)
