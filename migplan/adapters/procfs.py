"""What /proc says about GPU processes, for workload identity: on this host, or on a host over a runner.

Only what `migplan.history.identity` needs: the command line, the executable, the cgroup file and the
few environment variables of `identity.ENV_KEYS`. /proc/PID/environ is readable by the process's owner
and root only; a process that is gone or unreadable simply has fewer facts.

Over a runner, three commands read every pid at once, all with grep's `-H` so each record starts with
the file it came from, which the process cannot forge (`-z` makes records NUL-separated, and no
argument or environment string can contain a NUL):

    grep -a -s -H '' /proc/P1/cgroup /proc/P2/cgroup ...              (written by the kernel)
    grep -a -s -z -H '' /proc/P1/cmdline ...                          (one record per argument)
    grep -a -s -z -H -E '^(MIGPLAN_WORKLOAD|POD_NAME|...)=' /proc/P1/environ ...
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from migplan.history.identity import ENV_KEYS, ProcessFacts

if TYPE_CHECKING:
    from migplan.adapters.runner import CommandRunner

MAX_READ = 256 * 1024  # a /proc file larger than this is cut (cmdline and environ are bounded by ARG_MAX)
_MAX_PIDS_PER_COMMAND = 500
_RECORD = re.compile(r"\A/proc/(\d{1,10})/(cgroup|cmdline|environ):(.*)\Z", re.S)


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(MAX_READ)
    except OSError:  # exited, or not ours to read
        return None


def _env(raw: bytes | None) -> dict[str, str]:
    out = {}
    for item in (raw or b"").split(b"\0"):
        key, sep, value = item.partition(b"=")
        name = key.decode("utf-8", "replace")
        if sep and name in ENV_KEYS:
            out[name] = value.decode("utf-8", "replace")
    return out


def local_facts(pid: int, proc: str = "/proc") -> ProcessFacts:
    """One process of this host."""
    base = f"{proc}/{int(pid)}"
    cmd = _read(f"{base}/cmdline") or b""
    try:
        exe: str | None = os.readlink(f"{base}/exe")
    except OSError:
        comm = _read(f"{base}/comm")
        exe = comm.decode("utf-8", "replace").strip() if comm else None
    cgroup = (_read(f"{base}/cgroup") or b"").decode("utf-8", "replace")
    args = tuple(a.decode("utf-8", "replace") for a in cmd.split(b"\0") if a)
    return ProcessFacts(int(pid), args, exe, cgroup, _env(_read(f"{base}/environ")))


def remote_facts(runner: CommandRunner, pids: Iterable[int], *, names: dict[int, str] | None = None,
                 timeout: float = 30.0) -> dict[int, ProcessFacts]:
    """Every pid of a host, read with three grep commands per batch (see the module notes)."""
    wanted = sorted({int(p) for p in pids if 0 < int(p) < 2**31})
    cgroup: dict[int, list[str]] = {}
    cmdline: dict[int, list[str]] = {}
    env: dict[int, dict[str, str]] = {}
    keys = "|".join(ENV_KEYS)
    for i in range(0, len(wanted), _MAX_PIDS_PER_COMMAND):
        batch = wanted[i:i + _MAX_PIDS_PER_COMMAND]
        for kind, flags in (("cgroup", ["-a", "-s", "-H", ""]), ("cmdline", ["-a", "-s", "-z", "-H", ""]),
                            ("environ", ["-a", "-s", "-z", "-H", "-E", f"^({keys})="])):
            done = runner.run(["grep", *flags, *[f"/proc/{p}/{kind}" for p in batch]], timeout=timeout)
            sep = "\n" if kind == "cgroup" else "\0"
            for record in done.stdout.split(sep):
                m = _RECORD.match(record)
                if not m or m.group(2) != kind:
                    continue
                pid, value = int(m.group(1)), m.group(3)
                if kind == "cgroup":
                    cgroup.setdefault(pid, []).append(value)
                elif kind == "cmdline":
                    cmdline.setdefault(pid, []).append(value)
                else:
                    key, _, val = value.partition("=")
                    if key in ENV_KEYS:
                        env.setdefault(pid, {})[key] = val
    out = {}
    for pid in wanted:
        args = tuple(a for a in cmdline.get(pid, []) if a)
        out[pid] = ProcessFacts(pid, args, (names or {}).get(pid), "\n".join(cgroup.get(pid, [])), env.get(pid, {}))
    return out
