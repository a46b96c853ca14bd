"""Parsers for nvidia-smi's line formats: `-L` (§11), `mig -lgipp` (§4), CSV queries (§2, §13) and the
`Successfully created/destroyed ...` lines of `-cgi`/`-cci`/`-dci`/`-dgi` (§5, §8, §10) (pure).

§n = a section of docs/nvidia-smi.md ("Facts we rely on").
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from migplan.smi._base import MAX_GPU, MAX_ID, fail, lines_of, message, num, profile_name
from migplan.smi.commands import APP_FIELDS, DRIVER_FIELDS, GPU_FIELDS
from migplan.smi.rows import (
    ComputeApp,
    CreatedComputeInstance,
    CreatedGpuInstance,
    Destroyed,
    GpuListing,
    GpuQueryRow,
    MigDevice,
    PlacementRow,
)

_GPU_LINE = re.compile(r"(?a)GPU (\d{1,3}): (.{1,96}) \(UUID: (GPU-[0-9A-Za-z-]{1,64})\)")
_MIG_LINE = re.compile(r"(?a)\s+MIG (\S{1,40})\s+Device\s+(\d{1,3}): \(UUID: (MIG-[0-9A-Za-z/-]{1,100})\)")
_OLD_MIG_UUID = re.compile(r"(?a)MIG-GPU-[0-9A-Za-z-]+/(\d{1,3})/(\d{1,3})")  # R450/R460 form (§11)
_PLACEMENTS = re.compile(r"(?a)GPU\s*(\d{1,3}) Profile ID\s*(\d{1,3}) Placements?\s?: "
                         r"\{(\d{1,2}(?:,\d{1,2}){0,31})\}:(\d{1,2})")
_PRINTABLE = re.compile(r"(?a)[ -~]{1,200}")
_BUS_ID = re.compile(r"(?a)[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
_GPU_UUID = re.compile(r"(?a)GPU-[0-9A-Za-z-]{1,64}")
_DEVICE_ID = re.compile(r"(?a)0x[0-9A-Fa-f]{4,8}")
_MIB = re.compile(r"(?a)(\d{1,9})(?: MiB)?")
_NO_DEVICES = "No devices were found"  # nvidia-smi -L without GPUs (unverified text)


def parse_list_gpus(text: str) -> list[GpuListing]:
    """`nvidia-smi -L` -> GPUs with their MIG devices (new `MIG-<uuid>` and old `MIG-GPU-../gi/ci`)."""
    what = "nvidia-smi -L"
    gpus: list[GpuListing] = []
    for no, line in lines_of(text, what):
        if line.strip() == _NO_DEVICES:
            continue
        gpu = _GPU_LINE.fullmatch(line)
        if gpu:
            index = num(gpu.group(1), MAX_GPU, what, no, line)
            gpus.append(GpuListing(index, gpu.group(2).strip(), gpu.group(3)))
            continue
        mig = _MIG_LINE.fullmatch(line)
        if mig is None or not gpus:
            raise fail(what, no, line, "neither a GPU nor a MIG device line")
        old = _OLD_MIG_UUID.fullmatch(mig.group(3))
        parent = gpus[-1]
        dev = MigDevice(parent.index, profile_name(mig.group(1), what, no, line),
                        num(mig.group(2), MAX_ID, what, no, line), mig.group(3),
                        int(old.group(1)) if old else None, int(old.group(2)) if old else None)
        gpus[-1] = GpuListing(parent.index, parent.name, parent.uuid, (*parent.mig_devices, dev))
    return gpus


def parse_gi_placements(text: str) -> list[PlacementRow]:
    """`nvidia-smi mig -lgipp` -> one row per GPU and profile (`Placements:` or singular `Placement :`)."""
    what = "nvidia-smi mig -lgipp"
    lines = lines_of(text, what)
    message(lines, what)
    out = []
    for no, line in lines:
        m = _PLACEMENTS.fullmatch(line.strip())
        if m is None:
            raise fail(what, no, line, "not a placement line")
        starts = tuple(int(s) for s in m.group(3).split(","))
        out.append(PlacementRow(num(m.group(1), MAX_GPU, what, no, line), num(m.group(2), MAX_ID, what, no, line),
                                starts, int(m.group(4))))
    return out


def _value(raw: str) -> str | None:
    """A CSV value, None for nvidia-smi's bracketed non-values (`[N/A]`, `[Not Supported]`, ...)."""
    v = raw.strip()
    return None if v.startswith("[") and v.endswith("]") else v


def _csv(line: str, fields: Sequence[str], free: str | None, what: str, no: int) -> dict[str, str | None]:
    """Split a CSV line into `fields`; the free-text field (a name) may itself contain commas."""
    parts = line.split(",")
    extra = len(parts) - len(fields)
    if extra < 0 or (extra and free not in fields):
        raise fail(what, no, line, f"expected {len(fields)} values, got {len(parts)}")
    at = fields.index(free) if free in fields else 0
    if extra:
        parts = [*parts[:at], ",".join(parts[at:at + extra + 1]), *parts[at + extra + 1:]]
    return {f: _value(p) for f, p in zip(fields, parts, strict=True)}


def _checked(value: str | None, pattern: re.Pattern[str], what: str, no: int, line: str) -> str | None:
    if value is not None and not pattern.fullmatch(value):
        raise fail(what, no, line, f"unexpected value {value[:40]!r}")
    return value


def _mib(value: str | None, what: str, no: int, line: str) -> int | None:
    if value is None:
        return None
    m = _MIB.fullmatch(value)
    if m is None:
        raise fail(what, no, line, f"{value[:40]!r} is not an amount of MiB")
    return num(m.group(1), 100_000_000, what, no, line)


def _mode(value: str | None, what: str, no: int, line: str) -> bool | None:
    if value is None:
        return None
    if value not in ("Enabled", "Disabled"):
        raise fail(what, no, line, f"MIG mode {value[:20]!r} is neither Enabled nor Disabled")
    return value == "Enabled"


def _required(value: str | None, pattern: re.Pattern[str], what: str, no: int, line: str) -> str:
    if value is None or not pattern.fullmatch(value):
        raise fail(what, no, line, f"unexpected value {(value or '')[:40]!r}")
    return value


def parse_csv(text: str, fields: Sequence[str], free: str | None = None) -> list[dict[str, str | None]]:
    """Any `--query-*=<fields> --format=csv[,noheader][,nounits]` output as dicts of raw values (None for
    `[N/A]`-style values); a header line is skipped. `free` names a field that may contain commas."""
    what = "nvidia-smi --query"
    out = []
    for no, line in lines_of(text, what):
        if line.split(",")[0].split(" [")[0].strip() == fields[0]:
            continue  # the header line (`memory.total [MiB]` carries its unit)
        out.append(_csv(line, fields, free, what, no))
    return out


def parse_query_gpus(text: str) -> list[GpuQueryRow]:
    """Output of `commands.query_gpus()` (csv,noheader,nounits; a header line is skipped)."""
    what = "nvidia-smi --query-gpu"
    out = []
    for no, line in lines_of(text, what):
        if line.startswith("index,"):
            continue
        v = _csv(line, GPU_FIELDS, "name", what, no)
        out.append(GpuQueryRow(
            index=num(v["index"] or "", MAX_GPU, what, no, line),
            uuid=_required(v["uuid"], _GPU_UUID, what, no, line),
            name=_required(v["name"], _PRINTABLE, what, no, line),
            pci_bus_id=_required(v["pci.bus_id"], _BUS_ID, what, no, line),
            memory_total_mib=_mib(v["memory.total"], what, no, line),
            mig_current=_mode(v["mig.mode.current"], what, no, line),
            mig_pending=_mode(v["mig.mode.pending"], what, no, line),
            pci_device_id=_checked(v["pci.device_id"], _DEVICE_ID, what, no, line)))
    return out


_DRIVER = re.compile(r"(?a)[0-9]{2,4}(?:\.[0-9]{1,4}){1,3}")


def parse_driver_versions(text: str) -> dict[int, str]:
    """Output of `commands.query_driver_versions()`: GPU index -> driver version (e.g. `535.129.03`)."""
    what = "nvidia-smi --query-gpu=index,driver_version"
    out = {}
    for no, line in lines_of(text, what):
        if line.startswith("index,"):
            continue
        v = _csv(line, DRIVER_FIELDS, None, what, no)
        out[num(v["index"] or "", MAX_GPU, what, no, line)] = _required(v["driver_version"], _DRIVER, what, no, line)
    return out


def parse_compute_apps(text: str, fields: Sequence[str] = APP_FIELDS) -> list[ComputeApp]:
    """`--query-compute-apps=<fields>` CSV (header optional); no processes -> []. Names are plain data."""
    what = "nvidia-smi --query-compute-apps"
    names = {"name": "process_name", "used_gpu_memory": "used_memory"}
    keys = [names.get(f, f) for f in fields]
    out = []
    for no, line in lines_of(text, what):
        if line.split(",")[0].split(" [")[0].strip() in fields:
            continue  # the header line
        v = _csv(line, keys, "process_name", what, no)
        name = v.get("process_name")
        out.append(ComputeApp(
            pid=num(v.get("pid") or "", 2**31, what, no, line),
            gpu_uuid=_checked(v.get("gpu_uuid"), _GPU_UUID, what, no, line),
            used_memory_mib=_mib(v.get("used_memory"), what, no, line),
            process_name=_checked(name.strip() if name else None, _PRINTABLE, what, no, line)))
    return out


_CREATED_GI = re.compile(r"(?a)Successfully created GPU instance ID\s+(?P<gi>\d+) on GPU\s+(?P<gpu>\d+) using profile"
                         r" MIG (?P<name>\S+) \(ID\s+(?P<pid>\d+)\)")
_CREATED_CI = re.compile(r"(?a)Successfully created compute instance (?:ID\s+(?P<ci>\d+) )?on GPU\s+(?P<gpu>\d+) GPU"
                         r" instance ID\s+(?P<gi>\d+) using profile MIG (?P<name>\S+) \(ID\s+(?P<pid>\d+)\)")
_DESTROYED_CI = re.compile(r"(?a)Successfully destroyed compute instance ID\s+(?P<ci>\d+) from GPU\s+(?P<gpu>\d+) GPU"
                           r" instance ID\s+(?P<gi>\d+)")
_DESTROYED_GI = re.compile(r"(?a)Successfully destroyed GPU instance ID\s+(?P<gi>\d+) from GPU\s+(?P<gpu>\d+)")
_FAILURE_PREFIXES = ("Unable to ", "Failed to ", "Warning: ", "No GPU instances found", "No compute instances found")

ReportedChange = CreatedGpuInstance | CreatedComputeInstance | Destroyed


def _action(m: re.Match[str], what: str, no: int, line: str) -> ReportedChange:
    def n(key: str) -> int:
        return num(m.group(key), MAX_ID, what, no, line)

    groups = m.groupdict()
    if "name" not in groups:
        return Destroyed(n("gpu"), n("gi"), n("ci") if "ci" in groups else None)
    name = profile_name(m.group("name"), what, no, line)
    if "ci" not in groups:
        return CreatedGpuInstance(n("gpu"), n("gi"), name, n("pid"))
    return CreatedComputeInstance(n("gpu"), n("gi"), None if m.group("ci") is None else n("ci"), name, n("pid"))


def parse_actions(text: str) -> list[ReportedChange]:
    """The `Successfully ...` lines of -cgi/-cci/-dci/-dgi output, in order. Failure lines are skipped
    (classify them with `classify_failure`); any other line is a parse error."""
    what = "nvidia-smi mig"
    out: list[ReportedChange] = []
    for no, line in lines_of(text, what):
        body = line.strip()
        for pattern in (_CREATED_GI, _CREATED_CI, _DESTROYED_CI, _DESTROYED_GI):
            m = pattern.fullmatch(body)
            if m:
                out.append(_action(m, what, no, line))
                break
        else:
            if not body.startswith(_FAILURE_PREFIXES):
                raise fail(what, no, line, "not a create/destroy result line")
    return out
