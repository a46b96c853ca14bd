"""`nvidia-smi vgpu` on a vGPU host: argv builders and parsers of its summary, `-q`, `-s` and `-c` (pure).

Formats, from the verbatim samples of tests/data/vgpu and tests/data/vgpu_sim (README of each names the source):

* summary (`nvidia-smi vgpu`): an optional time line, then a box: `| NVIDIA-SMI <ver>  Driver Version: <ver> |`,
  a GPU row `|   0  Tesla T4                   | 00000000:C1:00.0             |   0%       |` (the name cut to 25
  characters with `...`), and per active vGPU a row `|      3251634198  GRID T4-4C     | a84d...  instance-000000d5
  |      0%    |` (type name cut to 14, VM id to 7, VM name to 19). Only GPUs in vGPU mode are listed; where none
  is, nvidia-smi prints `No supported devices in vGPU mode` (`NO_VGPU`).
* `-q`: `GPU <bus id>`, `    Active vGPUs : N`, then per vGPU `    vGPU ID : N` and its fields at 8 spaces
  (`VM UUID`, `VM Name`, `vGPU Name`, `vGPU Type`, `MDEV UUID`, `GPU Instance ID`, ...) and sections (`FB Memory
  Usage`, `Utilization`) whose fields are at 12 spaces. The colon is at column 38 or 42 (driver 4xx, 525): the
  label is what precedes the first colon, so either reads. A vGPU's field appears at most once and `Used` is at
  most `Total`. One parser for discovery and `collect --local --vgpu` (which drops the type's `GRID `/`NVIDIA `
  prefix with `catalog.vgpu.smi_type_name`).
* `-s` / `-c`: `GPU <bus id>`, then each type's name at 4 spaces (driver 460); with `-v`, a block per type:
  `    vGPU Type ID : 0x5ee`, then `Name`, `GPU Instance Profile ID`, `Max Instances`, `FB Memory` at 8 spaces
  (driver 580's excerpt). Both read.

Remote output is untrusted: each value is matched against a bounded pattern, a VM name is kept as printable text
(at most 256 characters) and never used as anything but data; anything else is an `SmiParseError` naming the
command and the line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from migplan.smi._base import MAX_GPU, fail, lines_of, num
from migplan.smi.commands import NVIDIA_SMI
from migplan.smi.errors import SmiParseError
from migplan.text import printable

NO_VGPU = "No supported devices in vGPU mode"  # where no GPU is in vGPU mode (tests/sim_vgpu/README.md [NO-VGPU])
MAX_VGPU_ID = 2**32 - 1  # NVML's vGPU instance ids are unsigned ints (0xC1D00000 + n in every sample)
MAX_TYPE_ID = 1_000_000
MAX_VGPUS_PER_GPU = 64  # the most any type allows is 48 (RTX PRO 6000 DC-1-2Q, -s -v sample); a bound, not a fact
MAX_MIB = 1 << 24

_BUS = r"(?:[0-9A-Fa-f]{4}){1,2}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"  # 00000000:17:00.0 (or 0000:17:00.0)
_GPU_HEAD = re.compile(rf"(?a)GPU ({_BUS})")
_VERSION = re.compile(r"(?a)\| NVIDIA-SMI (\S{1,24})\s+Driver Version: ([0-9.]{2,24})\s*\|")
_SUMMARY_GPU = re.compile(rf"(?a)\|\s{{0,3}}(\d{{1,3}})  (.{{1,25}}?)\s*\| ({_BUS})\s*\|\s*(\d{{1,3}}%|N/A)\s*\|")
_SUMMARY_VGPU = re.compile(r"(?a)\|\s{6}(\d{1,10})  (.{1,14}?)\s*\| (.{0,7}?)\s*  (.{0,19}?)\s*\|\s*(\d{1,3}%|N/A)"
                           r"\s*\|")
_SUMMARY_FIXED = ("| GPU  Name", "|      vGPU ID     Name", "|====", "|----")
_TIME_LINE = re.compile(r"(?a)[A-Z][a-z]{2} [A-Z][a-z]{2} {1,2}\d{1,2} \d{2}:\d{2}:\d{2} \d{4}")
_FIELD = re.compile(r"(?a)( *)([A-Za-z][A-Za-z0-9 ()/_.-]{0,60}?)\s*:(?: (.*))?")
_SECTION = re.compile(r"(?a)( *)([A-Za-z][A-Za-z0-9 ()/_.-]{0,60})")
_TYPE_NAME = re.compile(r"(?a)[A-Za-z0-9][A-Za-z0-9 .]{0,60}-[0-9][A-Za-z0-9-]{0,20}")
_UUID = re.compile(r"(?a)[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}")
_MIB = re.compile(r"(?a)(\d{1,9}) MiB")
_PCT = re.compile(r"(?a)(\d{1,3}) ?%")
_TYPE_ID = re.compile(r"(?a)0x[0-9A-Fa-f]{1,8}|\d{1,9}")
_NA = ("", "N/A")


# --- builders -------------------------------------------------------------------------------------------------

def vgpu_summary() -> list[str]:
    """`nvidia-smi vgpu`: the GPUs in vGPU mode and their active vGPUs (or `NO_VGPU`)."""
    return [NVIDIA_SMI, "vgpu"]


def vgpu_query() -> list[str]:
    """`nvidia-smi vgpu -q`: every active vGPU with its type, VM and frame-buffer use."""
    return [NVIDIA_SMI, "vgpu", "-q"]


def vgpu_supported() -> list[str]:
    """`nvidia-smi vgpu -s -v`: the vGPU types each GPU supports, each with its type ID (which names the type a VF
    holds when the GPU is full and its VFs' `creatable_vgpu_types` list nothing)."""
    return [NVIDIA_SMI, "vgpu", "-s", "-v"]


def vgpu_creatable() -> list[str]:
    """`nvidia-smi vgpu -c`: the vGPU types each GPU can create now."""
    return [NVIDIA_SMI, "vgpu", "-c"]


# --- rows -----------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SummaryVgpu:
    vgpu_id: int
    type_name: str  # as printed: cut to 14 characters ("NVIDIA RTXA...")
    vm: str  # the VM name as printed (cut to 19)


@dataclass(frozen=True)
class SummaryGpu:
    index: int
    name: str
    pci_bus_id: str
    vgpus: tuple[SummaryVgpu, ...] = ()


@dataclass(frozen=True)
class VgpuSummary:
    driver_version: str | None
    gpus: tuple[SummaryGpu, ...]


@dataclass(frozen=True)
class ActiveVgpu:
    """One active vGPU of `nvidia-smi vgpu -q`."""

    vgpu_id: int
    type_name: str  # as printed, with its prefix: "GRID A100X-2-10C", "NVIDIA L4-8C"
    type_id: int | None
    vm_name: str | None
    vm_uuid: str | None
    mdev_uuid: str | None  # None: N/A (a VF of the vendor-specific VFIO framework) or empty
    gpu_instance_id: int | None  # a MIG-backed vGPU's GPU instance
    fb_total_mib: int | None
    fb_used_mib: int | None
    gpu_util_pct: int | None


@dataclass(frozen=True)
class GpuActive:
    pci_bus_id: str
    vgpus: tuple[ActiveVgpu, ...]


@dataclass(frozen=True)
class TypeRow:
    """A type of `-s`/`-c`; the id, frame buffer, maximum and GPU instance profile only with `-v`."""

    name: str
    type_id: int | None = None
    fb_mib: int | None = None
    max_instances: int | None = None
    gi_profile_id: int | None = None


@dataclass(frozen=True)
class GpuTypes:
    pci_bus_id: str
    types: tuple[TypeRow, ...]


# --- parsers --------------------------------------------------------------------------------------------------

def _vgpu_id(token: str, what: str, no: int, line: str) -> int:
    """A vGPU ID: up to 10 digits (NVML's unsigned ints; 3251634198 in the samples)."""
    if not re.fullmatch(r"(?a)\d{1,10}", token) or int(token) > MAX_VGPU_ID:
        raise fail(what, no, line, f"{token[:20]!r} is not a vGPU ID")
    return int(token)


def is_no_vgpu(text: str) -> bool:
    """True when the output is nvidia-smi's message that no GPU is in vGPU mode."""
    return text.strip() == NO_VGPU


def parse_vgpu_summary(text: str) -> VgpuSummary:
    """Plain `nvidia-smi vgpu` -> the driver version and the GPUs in vGPU mode with their active vGPUs."""
    what = "nvidia-smi vgpu"
    lines = lines_of(text, what)
    if not lines:
        raise SmiParseError(f"{what} printed nothing")
    driver = None
    gpus: list[SummaryGpu] = []
    for pos, (no, line) in enumerate(lines):
        body = line.rstrip()
        if pos == 0 and not body.startswith(("+", "|")):
            if not _TIME_LINE.fullmatch(body.strip()):
                raise fail(what, no, line, "neither the time line nor the table")
            continue
        if body.startswith("+-") and body.endswith("+") and set(body) <= {"+", "-"}:
            continue
        if body.startswith(_SUMMARY_FIXED):
            continue
        if m := _VERSION.fullmatch(body):
            driver = m.group(2)
            continue
        if m := _SUMMARY_GPU.fullmatch(body):
            index = num(m.group(1), MAX_GPU, what, no, line)
            if any(g.index == index for g in gpus):
                raise fail(what, no, line, f"GPU {index} listed twice")
            gpus.append(SummaryGpu(index, m.group(2).strip(), m.group(3)))
            continue
        if (m := _SUMMARY_VGPU.fullmatch(body)) and gpus:
            g = gpus[-1]
            if len(g.vgpus) >= MAX_VGPUS_PER_GPU:
                raise fail(what, no, line, f"more than {MAX_VGPUS_PER_GPU} vGPUs on GPU {g.index}")
            v = SummaryVgpu(_vgpu_id(m.group(1), what, no, line), m.group(2).strip(),
                            printable(m.group(4), 19))
            gpus[-1] = SummaryGpu(g.index, g.name, g.pci_bus_id, (*g.vgpus, v))
            continue
        raise fail(what, no, line, "not a line of the vGPU summary")
    if driver is None:
        raise SmiParseError(f"cannot read {what} output: no 'NVIDIA-SMI ... Driver Version' line")
    return VgpuSummary(driver, tuple(gpus))


def _fields(text: str, what: str) -> list[tuple[int, int, str, str | None]]:
    """(line number, indent, label, value) per line; value None for a section title (no colon)."""
    out = []
    for no, line in lines_of(text, what):
        if m := _GPU_HEAD.fullmatch(line):
            out.append((no, 0, "GPU", m.group(1)))
        elif m := _FIELD.fullmatch(line):
            value = m.group(3)
            out.append((no, len(m.group(1)), m.group(2), "" if value is None else value.strip()))
        elif m := _SECTION.fullmatch(line):
            out.append((no, len(m.group(1)), m.group(2), None))
        else:
            raise fail(what, no, line, "neither a field nor a section title")
    return out


def _opt_int(value: str, top: int, what: str, no: int, line: str) -> int | None:
    return None if value in _NA else num(value, top, what, no, line)


def _uuid(value: str, no: int, line: str, what: str) -> str | None:
    if value in _NA:
        return None
    if not _UUID.fullmatch(value):
        raise fail(what, no, line, f"{value[:40]!r} is not a UUID")
    return value.lower()


def _mib(value: str, no: int, line: str, what: str) -> int | None:
    if value in _NA:
        return None
    m = _MIB.fullmatch(value)
    if m is None:
        raise fail(what, no, line, f"{value[:40]!r} is not an amount of MiB")
    return num(m.group(1), MAX_MIB, what, no, line)


def _type_name(value: str, no: int, line: str, what: str) -> str:
    name = " ".join(value.split())
    if not _TYPE_NAME.fullmatch(name):
        raise fail(what, no, line, f"{value[:60]!r} is not a vGPU type name")
    return name


def _not_a_gpu_line(line: str) -> str:
    """Why a line at column 0 of `-q` is not `GPU <PCI bus id>`."""
    if line.strip() == NO_VGPU:
        return "no GPU of this host is in vGPU mode"
    if line.startswith("GPU "):
        return f"{line[4:].strip()[:40]!r} is not a PCI bus id"
    return "expected 'GPU <PCI bus id>'"


def parse_vgpu_query(text: str) -> list[GpuActive]:
    """`nvidia-smi vgpu -q` -> per GPU (by PCI bus id) its active vGPUs."""
    what = "nvidia-smi vgpu -q"
    lines = dict(lines_of(text, what))
    first = min(lines, default=None)
    if first is not None and not lines[first].startswith(" ") and not _GPU_HEAD.fullmatch(lines[first]):
        raise fail(what, first, lines[first], _not_a_gpu_line(lines[first]))
    blocks: list[tuple[int, str, list[tuple[int, int, str, str | None]]]] = []
    for no, indent, label, value in _fields(text, what):
        if indent == 0:
            if label != "GPU" or value is None:
                raise fail(what, no, lines[no], _not_a_gpu_line(lines[no]))
            if any(b == value for _, b, _ in blocks):
                raise fail(what, no, lines[no], f"GPU {value} listed twice")
            blocks.append((no, value, []))
        elif not blocks:
            raise fail(what, no, lines[no], "a field before the first 'GPU' line")
        else:
            blocks[-1][2].append((no, indent, label, value))
    return [GpuActive(bus, _gpu_vgpus(bus, rows, lines, what)) for _, bus, rows in blocks]


def _gpu_vgpus(bus: str, rows: list[tuple[int, int, str, str | None]], lines: dict[int, str],
               what: str) -> tuple[ActiveVgpu, ...]:
    """One GPU's `Active vGPUs : N` and its N vGPU blocks."""
    declared: int | None = None
    declared_at: tuple[int, str] | None = None
    found: list[tuple[dict[str, str], dict[str, tuple[int, str]]]] = []
    section = ""
    for no, indent, label, value in rows:
        line = lines[no]
        if indent == 4 and label == "Active vGPUs" and value is not None and declared is None and not found:
            declared, declared_at = num(value, MAX_VGPUS_PER_GPU, what, no, line), (no, line)
        elif indent == 4 and label == "vGPU ID" and value is not None:
            if len(found) >= MAX_VGPUS_PER_GPU:
                raise fail(what, no, line, f"more than {MAX_VGPUS_PER_GPU} vGPUs on GPU {bus}")
            found.append(({"vGPU ID": value}, {"vGPU ID": (no, line)}))
            section = ""
        elif found and indent == 8:
            section = label if value is None else ""
            if value is not None:
                _put(found[-1], label, value, no, line, what)
        elif found and indent >= 12 and value is not None:
            _put(found[-1], f"{section}/{label}", value, no, line, what)
        else:
            raise fail(what, no, line, "not a line of 'nvidia-smi vgpu -q'")
    out = tuple(_active(f, where, what) for f, where in found)
    if declared_at is None:
        raise SmiParseError(f"cannot read {what} output: GPU {bus} has no 'Active vGPUs' line")
    if len(out) != declared:
        raise fail(what, *declared_at, f"GPU {bus} says {declared} active vGPUs but lists {len(out)}")
    seen: set[int] = set()
    for r, (_, where) in zip(out, found, strict=True):
        if r.vgpu_id in seen:
            raise fail(what, *where["vGPU ID"], f"GPU {bus} lists a vGPU ID twice ({r.vgpu_id})")
        seen.add(r.vgpu_id)
    return out


def _put(block: tuple[dict[str, str], dict[str, tuple[int, str]]], key: str, value: str, no: int, line: str,
         what: str) -> None:
    """A vGPU's field (`section/label` within a section): at most once."""
    if key in block[0]:
        raise fail(what, no, line, f"{key!r} twice for vGPU {block[0]['vGPU ID'][:12]}")
    block[0][key], block[1][key] = value, (no, line)


def _active(f: dict[str, str], where: dict[str, tuple[int, str]], what: str) -> ActiveVgpu:
    def at(key: str) -> tuple[str, int, str]:
        no, line = where.get(key, where["vGPU ID"])
        return f.get(key, ""), no, line

    vid, no, line = at("vGPU ID")
    if "vGPU Name" not in f:
        raise fail(what, no, line, f"vGPU {vid[:12]} has no 'vGPU Name'")
    tid, tn, tl = at("vGPU Type")
    gi, gn, gl = at("GPU Instance ID")
    total, used = at("FB Memory Usage/Total"), at("FB Memory Usage/Used")
    total_mib, used_mib = _mib(*total, what=what), _mib(*used, what=what)
    if total_mib is not None and used_mib is not None and used_mib > total_mib:
        raise fail(what, used[1], used[2], f"{used_mib} MiB used of a {total_mib} MiB frame buffer")
    return ActiveVgpu(
        vgpu_id=_vgpu_id(vid, what, no, line),
        type_name=_type_name(*at("vGPU Name"), what=what),
        type_id=_opt_int(tid, MAX_TYPE_ID, what, tn, tl),
        vm_name=printable(f.get("VM Name", ""), 256) or None,
        vm_uuid=_uuid(*at("VM UUID"), what=what),
        mdev_uuid=_uuid(*at("MDEV UUID"), what=what),
        gpu_instance_id=_opt_int(gi, 255, what, gn, gl),
        fb_total_mib=total_mib,
        fb_used_mib=used_mib,
        gpu_util_pct=_pct(*at("Utilization/Gpu"), what=what))


def _pct(value: str, no: int, line: str, what: str) -> int | None:
    if value in _NA:
        return None
    m = _PCT.fullmatch(value)
    if m is None:
        raise fail(what, no, line, f"{value[:20]!r} is not a percentage")
    return num(m.group(1), 100, what, no, line)


def parse_vgpu_types(text: str, what: str = "nvidia-smi vgpu -s") -> list[GpuTypes]:
    """`nvidia-smi vgpu -s` or `-c`, plain or `-v` -> per GPU (by PCI bus id) its types in the printed order."""
    out: list[GpuTypes] = []
    bus: str | None = None
    types: list[TypeRow] = []
    block: dict[str, tuple[str, int, str]] | None = None

    def close_block() -> None:
        nonlocal block
        if block is not None:
            types.append(_verbose_type(block, what))
        block = None

    def close_gpu() -> None:
        close_block()
        if bus is not None:
            out.append(GpuTypes(bus, tuple(types)))

    for no, line in lines_of(text, what):
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0:
            m = _GPU_HEAD.fullmatch(stripped)
            if m is None:
                raise fail(what, no, line, "expected 'GPU <PCI bus id>'")
            close_gpu()
            bus, types = m.group(1), []
            if any(g.pci_bus_id == bus for g in out):
                raise fail(what, no, line, f"GPU {bus} listed twice")
            continue
        if bus is None:
            raise fail(what, no, line, "a line before the first 'GPU' line")
        if len(types) >= 4 * MAX_VGPUS_PER_GPU:
            raise fail(what, no, line, "too many vGPU types")
        field = _FIELD.fullmatch(line)
        if indent == 4 and field is not None and field.group(2) == "vGPU Type ID":
            close_block()
            block = {"vGPU Type ID": ((field.group(3) or "").strip(), no, line)}
        elif indent == 8 and block is not None and field is not None:
            block[field.group(2)] = ((field.group(3) or "").strip(), no, line)
        elif indent == 4 and block is None:
            types.append(TypeRow(_type_name(stripped, no, line, what)))
        else:
            raise fail(what, no, line, "not a line of a vGPU type list")
    close_gpu()
    return out


def _verbose_type(block: dict[str, tuple[str, int, str]], what: str) -> TypeRow:
    tid, no, line = block["vGPU Type ID"]
    if not _TYPE_ID.fullmatch(tid):
        raise fail(what, no, line, f"{tid[:20]!r} is not a vGPU type id")
    type_id = int(tid, 16) if tid.startswith("0x") else int(tid)
    if type_id > MAX_TYPE_ID:
        raise fail(what, no, line, f"vGPU type id {type_id} is out of range")
    if "Name" not in block:
        raise fail(what, no, line, f"vGPU type {tid} has no 'Name'")
    name, nn, nl = block["Name"]

    def opt(key: str, top: int) -> int | None:
        if key not in block:
            return None
        value, kn, kl = block[key]
        return _opt_int(value, top, what, kn, kl)

    fb = block.get("FB Memory")
    return TypeRow(_type_name(name, nn, nl, what), type_id, _mib(*fb, what=what) if fb else None,
                   opt("Max Instances", 4 * MAX_VGPUS_PER_GPU), opt("GPU Instance Profile ID", 255))


__all__ = [
    "NO_VGPU", "ActiveVgpu", "GpuActive", "GpuTypes", "SummaryGpu", "SummaryVgpu", "TypeRow", "VgpuSummary",
    "is_no_vgpu", "parse_vgpu_query", "parse_vgpu_summary", "parse_vgpu_types", "vgpu_creatable", "vgpu_query",
    "vgpu_summary", "vgpu_supported",
]
