"""`nvidia-smi vgpu -q` on a vGPU host: each active vGPU's VM, type and frame-buffer use (pure: text in, rows out).

What `migplan collect --local --vgpu` samples (issue 26, "Demand"). The layout is the driver's (verbatim samples in
tests/data/vgpu/ and tests/data/vgpu_sim/, drivers 510 and 525):

    GPU 00000000:82:00.0
        Active vGPUs                          : 2
        vGPU ID                               : 3251634329
            VM UUID                           : 10a12241-1e83-4b70-bc59-a33d7c6d063c
            VM Name                           : y-k8s-n-1
            vGPU Name                         : GRID P40-6Q
            vGPU Type                         : 50
            MDEV UUID                         : 334855e2-079b-11ee-9fc9-83e0dccb6713
            GPU Instance ID                   : N/A
            ...
            FB Memory Usage
                Total                         : 6144 MiB
                Used                          : 0 MiB
            Utilization
                Gpu                           : 0 %

A `GPU` line at column 0 opens a physical GPU (its PCI bus id), `vGPU ID` at indent 4 one active vGPU, its fields
at indent 8, and a section title without a colon (`FB Memory Usage`, `Utilization`) the fields indented under it.
The colon's column differs between drivers (38 in older excerpts, 42 in 525), so a line is split at its first
colon, never at a column. Fields this parser does not use are skipped (newer drivers add some), but every line
must be a `GPU` line, a section title or `key : value`; `Active vGPUs` must match the vGPU blocks that follow;
a vGPU ID, a field within its scope, a GPU's bus id: each at most once. `N/A` and an empty value are None. The
host is untrusted: numbers are bounded, names printable, UUIDs in their one form, and anything else is an
SmiParseError naming the line, never an exception of another kind.

The type is read from `vGPU Name` as NVIDIA names it (`GRID P40-6Q`, `NVIDIA L4-8C` -> `P40-6Q`, `L4-8C`) and must
be a name of NVIDIA's grammar (`catalog.vgpu.parse_type_name`); whether the vGPU catalog knows it is the caller's
question. `Utilization : Gpu` is the vGPU's share of the physical GPU's engine (NVML's per-vGPU utilisation).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from migplan.catalog.vgpu import parse_type_name, smi_type_name
from migplan.errors import CatalogError
from migplan.smi._base import fail, lines_of
from migplan.smi.commands import NVIDIA_SMI
from migplan.smi.errors import SmiParseError

WHAT = "nvidia-smi vgpu -q"
MAX_VGPU_ID = 2**32 - 1
MAX_VGPUS = 4096  # per GPU: far above any board's maximum (A16: 16 per GPU)
MAX_NAME = 1000  # a VM name as the hypervisor gives it (QEMU's -name guest=...,debug-threads=on)
MAX_FB_MIB = 1 << 20
NOT_A_VGPU_HOST = "No supported devices in vGPU mode"  # what nvidia-smi vgpu prints on a host without one

_BUS_ID = re.compile(r"(?a)[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]")
_UUID = re.compile(r"(?a)[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_INT = re.compile(r"(?a)[0-9]{1,10}")
_MIB = re.compile(r"(?a)([0-9]{1,9}) MiB")
_PCT = re.compile(r"(?a)([0-9]{1,3}) %")
_KEY = re.compile(r"(?a)[A-Za-z][A-Za-z0-9 ()/._-]{0,80}")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def query_vgpus() -> list[str]:
    """`nvidia-smi vgpu -q`: every physical GPU in vGPU mode and its active vGPUs."""
    return [NVIDIA_SMI, "vgpu", "-q"]


@dataclass(frozen=True)
class ActiveVgpu:
    """One active vGPU (a VM holds it) as `nvidia-smi vgpu -q` prints it; None where it prints `N/A` or nothing."""

    vgpu_id: int
    type_name: str  # NVIDIA's name, without the `GRID `/`NVIDIA ` prefix: `A100X-3-20C`
    vm_name: str | None = None
    vm_uuid: str | None = None
    type_id: int | None = None  # `vGPU Type`: the host's type ID (mdev type nvidia-<id>)
    mdev_uuid: str | None = None
    gpu_instance_id: int | None = None  # a MIG-backed vGPU's GPU instance
    fb_total_mib: int | None = None
    fb_used_mib: int | None = None
    util_pct: int | None = None  # `Utilization : Gpu`


@dataclass(frozen=True)
class VgpuGpu:
    """One physical GPU of `nvidia-smi vgpu -q`: its PCI bus id and its active vGPUs."""

    pci_bus_id: str
    vgpus: tuple[ActiveVgpu, ...] = ()


@dataclass
class _Block:
    line_no: int
    line: str
    vgpu_id: int
    fields: dict[str, tuple[int, str, str]] = field(default_factory=dict)  # "section/key" -> (line no, line, value)


@dataclass
class _Gpu:
    bus: str
    active: tuple[int, str, int] | None = None  # (line no, line, count)
    blocks: list[_Block] = field(default_factory=list)


def _value(block: _Block, key: str) -> tuple[int, str, str] | None:
    got = block.fields.get(key)
    if got is None or got[2] in ("", "N/A"):
        return None
    return got


def _number(block: _Block, key: str, pattern: re.Pattern[str], top: int, what: str) -> int | None:
    got = _value(block, key)
    if got is None:
        return None
    no, line, value = got
    m = pattern.fullmatch(value)
    if m is None:
        raise fail(WHAT, no, line, f"{value[:40]!r} is not {what}")
    n = int(m.group(1) if m.groups() else m.group(0))
    if n > top:
        raise fail(WHAT, no, line, f"{n} is out of range 0..{top}")
    return n


def _uuid(block: _Block, key: str) -> str | None:
    got = _value(block, key)
    if got is None:
        return None
    no, line, value = got
    if not _UUID.fullmatch(value):
        raise fail(WHAT, no, line, f"{value[:40]!r} is not a UUID")
    return value.lower()


def _vgpu(block: _Block) -> ActiveVgpu:
    name = _value(block, "vGPU Name")
    if name is None:
        raise fail(WHAT, block.line_no, block.line, "the vGPU has no 'vGPU Name'")
    type_name = smi_type_name(name[2])
    try:
        parse_type_name(type_name)
    except CatalogError:
        raise fail(WHAT, name[0], name[1], f"{type_name[:60]!r} is not a vGPU type name") from None
    vm = _value(block, "VM Name")
    vm_name = vm[2].strip() if vm is not None else None
    if vm is not None and (len(vm[2]) > MAX_NAME or _CONTROL.search(vm[2])):
        raise fail(WHAT, vm[0], vm[1], f"a VM name of at most {MAX_NAME} printable characters was expected")
    total = _number(block, "FB Memory Usage/Total", _MIB, MAX_FB_MIB, "a size in MiB")
    used = _number(block, "FB Memory Usage/Used", _MIB, MAX_FB_MIB, "a size in MiB")
    if total is not None and used is not None and used > total:
        got = block.fields["FB Memory Usage/Used"]
        raise fail(WHAT, got[0], got[1], f"{used} MiB used of a {total} MiB frame buffer")
    return ActiveVgpu(
        vgpu_id=block.vgpu_id, type_name=type_name, vm_name=vm_name or None, vm_uuid=_uuid(block, "VM UUID"),
        type_id=_number(block, "vGPU Type", _INT, MAX_VGPU_ID, "a vGPU type ID"),
        mdev_uuid=_uuid(block, "MDEV UUID"),
        gpu_instance_id=_number(block, "GPU Instance ID", _INT, 255, "a GPU instance ID"),
        fb_total_mib=total, fb_used_mib=used,
        util_pct=_number(block, "Utilization/Gpu", _PCT, 100, "a percentage"))


class _Parser:
    """The state of one pass over the lines: the GPUs so far, the vGPU block and section being read."""

    def __init__(self) -> None:
        self.gpus: list[_Gpu] = []
        self.block: _Block | None = None
        self.section = ""
        self.section_indent = 0
        self.ids: set[int] = set()

    def gpu_line(self, no: int, line: str, body: str) -> None:
        if not body.startswith("GPU "):
            if body.startswith(NOT_A_VGPU_HOST):
                raise fail(WHAT, no, line, "no GPU of this host is in vGPU mode")
            raise fail(WHAT, no, line, "expected 'GPU <PCI bus id>'")
        bus = body[4:].strip()
        if not _BUS_ID.fullmatch(bus):
            raise fail(WHAT, no, line, f"{bus[:40]!r} is not a PCI bus id")
        if any(g.bus.lower() == bus.lower() for g in self.gpus):
            raise fail(WHAT, no, line, f"GPU {bus} is listed twice")
        self.gpus.append(_Gpu(bus))
        self.block, self.section = None, ""

    def gpu_field(self, no: int, line: str, key: str, value: str) -> None:
        """A line at indent 4: `Active vGPUs`, `vGPU ID` (a new block), or a GPU field not used here."""
        gpu = self.gpus[-1]
        self.block, self.section = None, ""
        if key == "Active vGPUs":
            if gpu.active is not None:
                raise fail(WHAT, no, line, "'Active vGPUs' twice for one GPU")
            if not _INT.fullmatch(value) or int(value) > MAX_VGPUS:
                raise fail(WHAT, no, line, f"{value[:40]!r} is not a count of vGPUs")
            gpu.active = (no, line, int(value))
        elif key == "vGPU ID":
            if not _INT.fullmatch(value) or int(value) > MAX_VGPU_ID:
                raise fail(WHAT, no, line, f"{value[:40]!r} is not a vGPU ID")
            if int(value) in self.ids:
                raise fail(WHAT, no, line, f"vGPU ID {value} is listed twice")
            self.ids.add(int(value))
            self.block = _Block(no, line, int(value))
            gpu.blocks.append(self.block)

    def vgpu_field(self, no: int, line: str, indent: int, key: str, colon: str, value: str) -> None:
        block = self.block
        if block is None:
            return  # a field of the GPU this parser does not use
        if not colon:  # a section title: its fields are indented under it
            self.section, self.section_indent = key, indent
            return
        if self.section and indent <= self.section_indent:
            self.section = ""
        name = f"{self.section}/{key}" if self.section else key
        if name in block.fields:
            raise fail(WHAT, no, line, f"{name!r} twice for vGPU {block.vgpu_id}")
        block.fields[name] = (no, line, value)

    def line(self, no: int, line: str) -> None:
        if "\t" in line or _CONTROL.search(line):
            raise fail(WHAT, no, line, "a control character or tab")
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        if indent == 0:
            self.gpu_line(no, line, body)
            return
        if not self.gpus:
            raise fail(WHAT, no, line, "a line before the first 'GPU <PCI bus id>'")
        key, colon, value = body.partition(":")
        key, value = key.strip(), value.strip()
        if not _KEY.fullmatch(key):
            raise fail(WHAT, no, line, "expected 'key : value' or a section title")
        if indent <= 4:
            if not colon:
                raise fail(WHAT, no, line, "expected 'key : value'")
            self.gpu_field(no, line, key, value)
        else:
            self.vgpu_field(no, line, indent, key, colon, value)


def parse_vgpu_query(text: str) -> list[VgpuGpu]:
    """The GPUs and active vGPUs of `nvidia-smi vgpu -q` output (module notes); SmiParseError for anything else."""
    parser = _Parser()
    for no, line in lines_of(text, WHAT):
        parser.line(no, line)
    out = []
    for gpu in parser.gpus:
        if gpu.active is None:
            raise SmiParseError(f"cannot read {WHAT} output: GPU {gpu.bus} has no 'Active vGPUs' line")
        no, line, count = gpu.active
        if count != len(gpu.blocks):
            raise fail(WHAT, no, line, f"{count} active vGPUs announced, {len(gpu.blocks)} listed")
        out.append(VgpuGpu(gpu.bus, tuple(_vgpu(b) for b in gpu.blocks)))
    return out
