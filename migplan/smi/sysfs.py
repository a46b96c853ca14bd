"""The sysfs reads of a KVM vGPU host: argv builders (`ls`, `readlink`, `cat`) and parsers (pure).

Paths, as NVIDIA documents them (tests/sim_vgpu/README.md cites each source):

* `/sys/bus/pci/devices/<PF>/virtfnN -> ../<VF>`: the SR-IOV virtual functions of a GPU (Ampere and later);
* `<VF>/nvidia/current_vgpu_type` (`%d\\n`, 0: none) and `<VF>/nvidia/creatable_vgpu_types` (`ID    : vGPU Name`,
  then `%-5d : %s` per type) under the vendor-specific VFIO framework; `<VF>/nvidia/gpu_instance_id` (empty, or
  the GPU instance of a MIG-backed vGPU);
* `<parent>/mdev_supported_types/nvidia-<id>/{name,available_instances}` and `/sys/bus/mdev/devices/<uuid> ->
  ../../pci/devices/<parent>/<uuid>`, whose `mdev_type -> ../mdev_supported_types/nvidia-<id>` (mdev: the T4, and
  older drivers on every board).

Every path is built here from a validated sysfs root, PCI addresses of the pattern `0000:17:00.4`, mdev UUIDs and
type ids: nothing a host printed reaches a command line unchecked. The root is `/` on a real host; a test points
it at a simulated tree (`migplan.fleet.vgpu_discover`). The parsers bound what they read and raise
`SmiParseError` naming the file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from migplan.smi._base import fail, lines_of, num
from migplan.smi.errors import SmiCommandError, SmiParseError

MAX_TYPE_ID = 1_000_000
MAX_ENTRIES = 4096  # entries of one sysfs directory listing
_ROOT = re.compile(r"(?a)/(?:[A-Za-z0-9_.+-]+/)*(?:[A-Za-z0-9_.+-]+)?")
_BDF = re.compile(r"(?a)[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_SMI_BUS = re.compile(r"(?a)(?:[0-9A-Fa-f]{4})?([0-9A-Fa-f]{4}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])")
_UUID = re.compile(r"(?a)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_ENTRY = re.compile(r"(?a)[A-Za-z0-9_.:+-]{1,128}")
_LINK = re.compile(r"(?a)[A-Za-z0-9_.:/+-]{1,512}")
_CREATABLE_HEAD = re.compile(r"(?a)ID\s+: vGPU Name")
_CREATABLE_ROW = re.compile(r"(?a)(\d{1,7})\s*: (\S.{0,79})")
_VIRTFN = re.compile(r"(?a)virtfn(\d{1,4})")
_MDEV_TYPE = re.compile(r"(?a)nvidia-(\d{1,7})")


# --- paths and builders ---------------------------------------------------------------------------------------

def check_root(root: str) -> str:
    """A sysfs root: an absolute path of plain components (no `..`), without a trailing slash but for `/`."""
    if not isinstance(root, str) or len(root) > 1024 or not _ROOT.fullmatch(root) \
            or any(part in (".", "..") for part in root.split("/")):
        raise SmiCommandError(f"sysfs root must be an absolute path of plain names, got {root!r}")
    return root.rstrip("/") or "/"


def bdf(value: str) -> str:
    """A PCI address as sysfs spells it (`0000:17:00.4`), from sysfs's or nvidia-smi's (`00000000:17:00.0`)."""
    m = _SMI_BUS.fullmatch(value.strip()) if isinstance(value, str) else None
    if m is None:
        raise SmiCommandError(f"{value!r} is not a PCI address")
    return f"{m.group(1)}:{m.group(2)}:{m.group(3)}.{m.group(4)}".lower()


def mdev_uuid(value: str) -> str:
    if not isinstance(value, str) or not _UUID.fullmatch(value):
        raise SmiCommandError(f"{value!r} is not an mdev UUID")
    return value


def _type_id(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_TYPE_ID:
        raise SmiCommandError(f"vGPU type id must be an integer 1..{MAX_TYPE_ID}, got {value!r}")
    return value


def _under(root: str, rel: str) -> str:
    base = check_root(root)
    return f"{'' if base == '/' else base}/sys/{rel}"


def pci_path(root: str, device: str, *parts: str) -> str:
    """`<root>/sys/bus/pci/devices/<device>[/parts...]`; parts are constants or checked names."""
    for p in parts:
        if not _ENTRY.fullmatch(p) or p in (".", ".."):
            raise SmiCommandError(f"{p!r} is not a sysfs name")
    return "/".join([_under(root, f"bus/pci/devices/{bdf(device)}"), *parts])


def mdev_devices_path(root: str, uuid: str | None = None, *parts: str) -> str:
    path = _under(root, "bus/mdev/devices")
    return "/".join([path, *([mdev_uuid(uuid)] if uuid else []), *parts])


def mdev_type_path(root: str, parent: str, type_id: int, attribute: str) -> str:
    if attribute not in ("name", "available_instances"):
        raise SmiCommandError(f"mdev type attribute {attribute!r} is not read")
    return pci_path(root, parent, "mdev_supported_types", f"nvidia-{_type_id(type_id)}", attribute)


def list_dir(path: str) -> list[str]:
    """`ls -1 -- PATH`: the names in a sysfs directory, one a line."""
    return ["ls", "-1", "--", _checked_path(path)]


def read_links(paths: Sequence[str]) -> list[str]:
    """`readlink -- PATH...`: each link's target, one a line, in order."""
    if not paths:
        raise SmiCommandError("readlink needs a path")
    return ["readlink", "--", *(_checked_path(p) for p in paths)]


def read_file(path: str) -> list[str]:
    """`cat -- PATH`: one sysfs attribute."""
    return ["cat", "--", _checked_path(path)]


def _checked_path(path: str) -> str:
    if not isinstance(path, str) or not path.startswith("/") or len(path) > 4096 \
            or not all(_ENTRY.fullmatch(p) for p in path.strip("/").split("/")) \
            or any(p in (".", "..") for p in path.split("/")):
        raise SmiCommandError(f"{path!r} is not a sysfs path migplan builds")
    return path


# --- parsers --------------------------------------------------------------------------------------------------

def parse_listing(text: str, what: str) -> list[str]:
    """`ls -1` of a sysfs directory -> its names (each a plain sysfs name)."""
    out = []
    for no, line in lines_of(text, what):
        name = line.strip()
        if not _ENTRY.fullmatch(name):
            raise fail(what, no, line, "not a sysfs name")
        out.append(name)
        if len(out) > MAX_ENTRIES:
            raise SmiParseError(f"{what}: more than {MAX_ENTRIES} entries")
    return out


def virtfns(names: Sequence[str]) -> list[tuple[int, str]]:
    """(N, 'virtfnN') for the virtual-function links of a physical function's directory, by N."""
    return sorted((int(m.group(1)), n) for n in names if (m := _VIRTFN.fullmatch(n)))


def mdev_type_ids(names: Sequence[str]) -> list[int]:
    """The type ids of `mdev_supported_types/` (`nvidia-319` -> 319), ascending."""
    return sorted(int(m.group(1)) for n in names if (m := _MDEV_TYPE.fullmatch(n)) and int(m.group(1)) <= MAX_TYPE_ID)


def parse_links(text: str, count: int, what: str) -> list[str]:
    """`readlink` of `count` links -> each target as printed (`../0000:17:00.4`); `component` takes it apart."""
    lines = lines_of(text, what)
    if len(lines) != count:
        raise SmiParseError(f"{what}: expected {count} link target(s), got {len(lines)}")
    out = []
    for no, line in lines:
        target = line.strip()
        if not _LINK.fullmatch(target):
            raise fail(what, no, line, "not a sysfs link target")
        out.append(target)
    return out


def component(target: str, from_end: int = 1) -> str:
    """A link target's component counted from its end (1: the last): `../../pci/devices/P/U`, 2 -> `P`."""
    parts = target.rstrip("/").split("/")
    return parts[-from_end] if len(parts) >= from_end else ""


def link_bdf(name: str, what: str) -> str:
    """A link target's last component that must be a PCI address."""
    if not _BDF.fullmatch(name):
        raise SmiParseError(f"{what}: {name[:40]!r} is not a PCI address")
    return name


def link_type_id(name: str, what: str) -> int:
    """An mdev device's `mdev_type` target (`nvidia-319`) -> 319."""
    m = _MDEV_TYPE.fullmatch(name)
    if m is None:
        raise SmiParseError(f"{what}: {name[:40]!r} is not an NVIDIA mdev type")
    return num(m.group(1), MAX_TYPE_ID, what, 1, name)


def parse_current_vgpu_type(text: str, what: str = "current_vgpu_type") -> int:
    """`current_vgpu_type` (`%d\\n`) -> the VF's vGPU type id, 0 for none."""
    lines = lines_of(text, what)
    if len(lines) != 1:
        raise SmiParseError(f"cannot read {what}: expected one number, got {len(lines)} line(s)")
    no, line = lines[0]
    return num(line.strip(), MAX_TYPE_ID, what, no, line)


def parse_gpu_instance_id(text: str, what: str = "gpu_instance_id") -> int | None:
    """`gpu_instance_id`: empty (no GPU instance) or the GPU instance id."""
    lines = lines_of(text, what)
    if not lines:
        return None
    if len(lines) != 1:
        raise SmiParseError(f"cannot read {what}: expected one number, got {len(lines)} lines")
    no, line = lines[0]
    return num(line.strip(), 255, what, no, line)


def parse_creatable_vgpu_types(text: str, what: str = "creatable_vgpu_types") -> list[tuple[int, str]]:
    """`creatable_vgpu_types` -> (type id, name as printed) in order; the header alone: none creatable."""
    lines = lines_of(text, what)
    if not lines or not _CREATABLE_HEAD.fullmatch(lines[0][1].strip()):
        raise SmiParseError(f"cannot read {what}: no 'ID    : vGPU Name' header")
    out = []
    for no, line in lines[1:]:
        m = _CREATABLE_ROW.fullmatch(line.strip())
        if m is None:
            raise fail(what, no, line, "not an 'ID : vGPU Name' line")
        out.append((num(m.group(1), MAX_TYPE_ID, what, no, line), " ".join(m.group(2).split())))
        if len(out) > MAX_ENTRIES:
            raise SmiParseError(f"{what}: more than {MAX_ENTRIES} types")
    if len({i for i, _ in out}) != len(out):
        raise SmiParseError(f"cannot read {what}: a type id is listed twice")
    return out


def parse_one_line(text: str, what: str, limit: int = 80) -> str:
    """An attribute holding one line of text (an mdev type's `name`)."""
    lines = lines_of(text, what)
    if len(lines) != 1 or len(lines[0][1].strip()) > limit or not lines[0][1].strip().isprintable():
        raise SmiParseError(f"cannot read {what}: expected one line of at most {limit} printable characters")
    return " ".join(lines[0][1].split())


def parse_count(text: str, what: str, top: int = 1024) -> int:
    """An attribute holding one number (`available_instances`, `sriov_numvfs`)."""
    lines = lines_of(text, what)
    if len(lines) != 1:
        raise SmiParseError(f"cannot read {what}: expected one number")
    no, line = lines[0]
    return num(line.strip(), top, what, no, line)


__all__ = [
    "bdf", "check_root", "component", "link_bdf", "link_type_id", "list_dir", "mdev_devices_path", "mdev_type_ids",
    "mdev_type_path", "mdev_uuid", "parse_count", "parse_creatable_vgpu_types", "parse_current_vgpu_type",
    "parse_gpu_instance_id", "parse_links", "parse_listing", "parse_one_line", "pci_path", "read_file",
    "read_links", "virtfns",
]
