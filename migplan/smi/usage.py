"""nvidia-smi for a short usage sample where a host keeps no history: accounted apps and `pmon` (pure).

Builders return argv from constants and range-checked integers; parsers read untrusted text with bounds.

* `--query-accounted-apps=gpu_uuid,pid,gpu_utilization,max_memory_usage,time --format=csv,noheader,nounits`
  (nvidia-smi-mig.md §14): one line per process accounting knows, running ones with time 0. Accounting
  must be on (`nvidia-smi -am 1`); it is off in MIG mode. A disabled or unsupported query prints an error
  and exits non-zero, which callers treat as "no accounting data".
* `nvidia-smi pmon -c N`: N one-second samples of per-process SM %, in two layouts seen in public output:
  `# gpu pid type sm mem enc dec command` (older drivers) and `# gpu pid type sm mem enc dec jpg ofa
  command` (newer; some add `fb ccpm`). Columns are found by the header's names, so either layout reads.
  `-` is "no value": an idle process, or a MIG GPU, where utilisation is not attributed (reported as None,
  not 0). A GPU without processes prints a row of dashes.
* Plain `nvidia-smi`: its "Processes:" table is the one text that names each process's GPU instance and
  compute instance (`GI ID`, `CI ID`; `N/A` outside MIG mode; nvidia-smi-mig.md §13: `--query-compute-apps`
  has no such field). Rows as in public output of drivers 470-550 (79 and 89 columns wide):
  `|    0   N/A  N/A      2806      G   /usr/lib/xorg/Xorg                296MiB |`; a long name is cut to
  `...` and its tail; "No running processes found" is an empty table.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from migplan.smi._base import fail, lines_of, num
from migplan.smi.commands import CSV_FORMAT, NVIDIA_SMI

ACCOUNTED_FIELDS = ("gpu_uuid", "pid", "gpu_utilization", "max_memory_usage", "time")
MAX_PMON_SAMPLES = 60
_UUID = re.compile(r"\AGPU-[0-9A-Fa-f-]{8,64}\Z")
_NA = ("N/A", "[N/A]", "[Not Supported]", "-", "")


@dataclass(frozen=True)
class AccountedApp:
    gpu_uuid: str
    pid: int
    gpu_util_pct: int | None
    max_memory_mib: int | None
    time_ms: int | None  # 0 while the process runs (NVML: "reported as 0 if the process is not terminated")


@dataclass(frozen=True)
class PmonRow:
    gpu: int
    pid: int
    kind: str  # C, G, C+G, M
    sm_pct: int | None  # None: '-' (no value)
    command: str


@dataclass(frozen=True)
class ProcessRow:
    gpu: int
    gi_id: int | None  # None: N/A (MIG off)
    ci_id: int | None
    pid: int
    kind: str
    name: str
    used_mib: int | None


_PROC_ROW = re.compile(r"(?a)\A\|\s*(\d+)\s+(\d+|N/A)\s+(\d+|N/A)\s+(\d+)\s+([A-Z+]{1,4})\s+(.*?)\s+"
                       r"(\d+MiB|N/A)\s*\|\Z")


def plain() -> list[str]:
    """Plain `nvidia-smi` (its Processes table: see the module notes)."""
    return [NVIDIA_SMI]


def parse_processes(text: str) -> list[ProcessRow]:
    """The rows of the "Processes:" table of plain `nvidia-smi` ([] when it lists none)."""
    what = "nvidia-smi (Processes table)"
    out: list[ProcessRow] = []
    state = "before"
    for no, line in lines_of(text, what):
        body = line.strip()
        if state == "before":
            state = "head" if body.startswith("| Processes:") else state
        elif state == "head":
            state = "rows" if body.startswith("|=") else state
        elif body.startswith("+-"):
            break
        elif "No running processes found" in body:
            continue
        else:
            m = _PROC_ROW.match(body)
            if m is None:
                raise fail(what, no, line, "not a process row")
            gi, ci, mem = m.group(2), m.group(3), m.group(7)
            out.append(ProcessRow(num(m.group(1), 255, what, no, line),
                                  None if gi == "N/A" else num(gi, 255, what, no, line),
                                  None if ci == "N/A" else num(ci, 255, what, no, line),
                                  num(m.group(4), 2**31, what, no, line), m.group(5), m.group(6)[:256],
                                  None if mem == "N/A" else num(mem[:-3], 1 << 22, what, no, line)))
    return out


def query_accounted_apps() -> list[str]:
    return [NVIDIA_SMI, "--query-accounted-apps=" + ",".join(ACCOUNTED_FIELDS), CSV_FORMAT]


def pmon(samples: int) -> list[str]:
    """`nvidia-smi pmon -c N` (N samples, one a second)."""
    if isinstance(samples, bool) or not isinstance(samples, int) or not 1 <= samples <= MAX_PMON_SAMPLES:
        raise ValueError(f"pmon sample count must be 1..{MAX_PMON_SAMPLES}, got {samples!r}")
    return [NVIDIA_SMI, "pmon", "-c", str(samples)]


def _opt(token: str, top: int, what: str, no: int, line: str) -> int | None:
    token = token.strip().removesuffix("%").removesuffix("MiB").removesuffix("ms").strip()
    return None if token in _NA else num(token, top, what, no, line)


def parse_accounted_apps(text: str) -> list[AccountedApp]:
    what = "nvidia-smi --query-accounted-apps"
    out = []
    for no, line in lines_of(text, what):
        parts = [p.strip() for p in line.split(",")]
        if parts[0] == "gpu_uuid":
            continue  # a header, if one was asked for
        if len(parts) != len(ACCOUNTED_FIELDS):
            raise fail(what, no, line, f"expected {len(ACCOUNTED_FIELDS)} fields")
        if not _UUID.fullmatch(parts[0]):
            raise fail(what, no, line, "not a GPU UUID")
        out.append(AccountedApp(parts[0], num(parts[1], 2**31, what, no, line), _opt(parts[2], 100, what, no, line),
                                _opt(parts[3], 1 << 22, what, no, line), _opt(parts[4], 2**53, what, no, line)))
    return out


def parse_pmon(text: str) -> list[PmonRow]:
    what = "nvidia-smi pmon"
    columns: list[str] | None = None
    out = []
    for no, line in lines_of(text, what):
        if line.startswith("#"):
            names = line[1:].split()
            if columns is None and "pid" in names and "sm" in names:
                columns = names
            continue
        if columns is None:
            raise fail(what, no, line, "a sample line before the header")
        head = line.split(None, len(columns) - 1)
        if len(head) < len(columns) - 1:
            raise fail(what, no, line, f"expected {len(columns)} columns")
        values = dict(zip(columns, head, strict=False))
        if values.get("pid", "-") == "-":
            continue  # an idle GPU's row of dashes
        out.append(PmonRow(gpu=num(values["gpu"], 255, what, no, line), pid=num(values["pid"], 2**31, what, no, line),
                           kind=values.get("type", "-")[:4], sm_pct=_opt(values["sm"], 100, what, no, line),
                           command=values.get("command", "").strip()[:256]))
    return out
