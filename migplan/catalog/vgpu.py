"""NVIDIA vGPU types per GPU board and the rules for sharing one GPU between them (pure data, no I/O).

A vGPU type (`VgpuType`) is what a VM is given: `A100-3-20C`, `L4-8C`. Its name is NVIDIA's grammar
(github.com/NVIDIA/vgpu-device-manager `pkg/types/vgpu_type.go`, docs/sources.md §6 `VDM`):

* time-sliced:  `<board>-<GB><series>`, e.g. `L40S-12C`;
* MIG-backed:   `<board>-<g>-<GB><series>[ME|NOME|MEALL|GFX]`, e.g. `A100-3-20C`, `A30-1-6CME`,
  where `<g>` is the GPU instance's compute slices and the suffix its MIG attribute (`ME`: `+me`).

`<series>` is C (compute), Q (virtual workstation), B (virtual PC) or A (virtual applications). The board
prefix is not the product name: NVIDIA gives each board its own (`A100` is the A100 PCIe 40GB, `A100X` the
A100 HGX 40GB, `H100XM` the H100 SXM5 80GB, `H100L` the H100 NVL), so one catalog GPU model can have
several vGPU boards (`VgpuModel`), told apart by PCI device ID.

Modes (docs/vgpu.md, "Modes"): how the vGPUs of one physical GPU may be combined.

* `time_sliced` (equal-size, NVML's homogeneous mode): every vGPU on the GPU is of one type, at most
  `max` of it (NVIDIA AI Enterprise 6.2 tables, "Maximum vGPUs per GPU in Equal-Size Mode").
* `time_sliced_mixed` (mixed-size, NVML's heterogeneous mode): time-sliced types of different sizes on one
  GPU, each at most `max_mixed` (the tables' "Maximum vGPUs per GPU in Mixed-Size Mode"), their frame
  buffers together within the GPU's, each at a placement the driver allows. The placements (NVML
  `nvmlVgpuPlacementList_t`: a placement size in slots and the placement IDs a type may start at) are in no
  source migplan read for these boards, so they are not here: `fits` checks counts and frame buffer only,
  and a host's own placements (`nvidia-smi vgpu -s -v`) have the last word.
* `mig_backed`: each vGPU on its own MIG GPU instance (`mig_profile`, a profile of the board's catalog
  model); which types share a GPU is which GPU instances form a valid MIG layout (`layout.check_layout`),
  and `max` is the profile's own maximum count. A GPU is either in MIG mode (MIG-backed vGPUs only) or not
  (time-sliced only).
* `time_sliced_mig`: several time-sliced vGPUs on one GPU instance (nvidia-smi's "vGPU MIG timeslice mode",
  `nvidia-smi vgpu -smts`; `Max Instances Per GI` in `nvidia-smi vgpu -s -v`). No source read here gives
  its limits for the boards shipped, so no shipped board offers it; a type gives its limit as `max_per_gi`.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from migplan.errors import CatalogError

SERIES = ("C", "Q", "B", "A")
TIME_SLICED = "time_sliced"
TIME_SLICED_MIXED = "time_sliced_mixed"
MIG_BACKED = "mig_backed"
TIME_SLICED_MIG = "time_sliced_mig"
MODES = (TIME_SLICED, TIME_SLICED_MIXED, MIG_BACKED, TIME_SLICED_MIG)
PLANNED_MODES = (TIME_SLICED, TIME_SLICED_MIXED, MIG_BACKED)  # the modes migplan plans (no board offers the fourth)
VGPU_ARCHITECTURES = ("turing", "ampere", "ada", "hopper", "blackwell")
HOST_VGPU_MODES = ("sr-iov", "non-sr-iov")  # `Host VGPU Mode` in `nvidia-smi -q`: SR-IOV VFs or mdev devices
CONFIDENCES = ("table", "config", "inferred", "user")
# MIG attribute suffix of a MIG-backed type name -> the MIG profile variant (go-nvlib grammar)
ATTRIBUTES = {"": "", "ME": "+me", "NOME": "-me", "MEALL": "+me.all", "GFX": "+gfx"}

# NVIDIA/vgpu-device-manager pkg/types/vgpu_type.go (timeSlicedRegex, migBackedRegex), anchored on the board
_TIME_SLICED = re.compile(r"(?a)(?P<board>[A-Z0-9]+(?:-[a-zA-Z]+)*)-(?P<gb>0|[1-9][0-9]*)(?P<series>[ABCQ])")
_MIG_BACKED = re.compile(r"(?a)(?P<board>[A-Z0-9]+)-(?P<g>[1-9])-(?P<gb>0|[1-9][0-9]*)(?P<series>[ABCQ])"
                         r"(?P<attr>ME|NOME|MEALL|GFX)?")
_SMI_PREFIXES = ("NVIDIA ", "GRID ")


@dataclass(frozen=True)
class TypeName:
    """A vGPU type name taken apart: `A100-3-20C` -> board A100, compute slices 3, gb 20, series C, attribute ''."""

    board: str
    gb: int
    series: str
    compute_slices: int = 0  # the `<g>` of a MIG-backed name; 0: a time-sliced type
    attribute: str = ""  # "", "ME", "NOME", "MEALL", "GFX"

    @property
    def mig_backed(self) -> bool:
        return self.compute_slices > 0

    @property
    def mig_profile(self) -> str:
        """The MIG profile a MIG-backed name stands for (`A30-1-6CME` -> `1g.6gb+me`); '' when time-sliced."""
        return (f"{self.compute_slices}g.{self.gb}gb{ATTRIBUTES[self.attribute]}" if self.compute_slices
                else "")


def parse_type_name(name: str) -> TypeName:
    """`A100-3-20C`, `L40S-12C`, `A30-1-6CME` -> TypeName; CatalogError for a name outside NVIDIA's grammar."""
    m = _MIG_BACKED.fullmatch(name)
    if m is not None:
        return TypeName(m["board"], int(m["gb"]), m["series"], int(m["g"]), m["attr"] or "")
    m = _TIME_SLICED.fullmatch(name)
    if m is not None:
        return TypeName(m["board"], int(m["gb"]), m["series"])
    raise CatalogError(f"{name!r} is not a vGPU type name",
                       hint="NVIDIA's names: <board>-<GB><series> (L40S-12C) or <board>-<g>-<GB><series>[ME] "
                            "(A100-3-20C), series C, Q, B or A")


def nominal_gb(mib: int) -> int:
    """The GB a type name gives a frame buffer: the nearest GiB (96246 MiB is H100L-94C's 94)."""
    return (mib + 512) // 1024


def smi_type_name(raw: str) -> str:
    """A type as nvidia-smi and sysfs print it (`GRID A100-3-20C`, `NVIDIA L4-8C`) -> its name (`A100-3-20C`)."""
    name = " ".join(raw.split())
    for prefix in _SMI_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix):]
    return name


@dataclass(frozen=True)
class VgpuType:
    """One vGPU type of a board: its frame buffer and how many one GPU holds."""

    name: str
    series: str
    frame_buffer_mib: int  # the tables' "Frame Buffer (MB)": MiB, the size the VM is given (name GB x 1024)
    max_count: int  # equal-size mode (time-sliced) or MIG-backed: most per GPU
    max_mixed: int = 0  # mixed-size mode: most per GPU (0: the board has no mixed-size mode)
    mig_profile: str = ""  # MIG-backed: the GPU instance profile of the board's catalog model
    max_per_gi: int = 0  # time_sliced_mig: most per GPU instance (0: not offered)
    type_id: int | None = None  # the vGPU type ID (sysfs mdev type nvidia-<id>, `vGPU Type` in `vgpu -q`)
    confidence: str = "user"
    source: str = ""
    note: str = ""

    @property
    def mig_backed(self) -> bool:
        return bool(self.mig_profile)

    @functools.cached_property
    def parsed(self) -> TypeName:
        return parse_type_name(self.name)


@dataclass(frozen=True)
class VgpuModel:
    """The vGPU types of one GPU board and the modes it supports."""

    id: str  # migplan's name of the board, e.g. A100-PCIE-40GB
    board: str  # NVIDIA's type-name prefix, e.g. A100
    product: str  # the board as NVIDIA's tables name it
    gpu: str  # the catalog model of the physical GPU (a MIG model id, or a GPU without MIG: whole_gpus)
    architecture: str
    host_vgpu_mode: str
    frame_buffer_mib: int  # the whole GPU's vGPU frame buffer: the largest time-sliced type's
    modes: tuple[str, ...]
    types: tuple[VgpuType, ...]
    gpus_per_board: int = 1
    pci_device_ids: tuple[str, ...] = ()
    source: str = ""
    note: str = ""

    @functools.cached_property
    def _by_name(self) -> dict[str, VgpuType]:
        return {t.name: t for t in self.types}

    @property
    def capacity_mib(self) -> int:
        """What the vGPUs of one GPU may add up to: the board's frame buffer in whole GiB, as type names count it.
        The tables' sizes are nominal (the name's GB x 1024), except that the whole-GPU type can be a few MiB
        short: H100L-94C is 96246 MiB, while two H100L-47C are 2 x 48128 = 96256 MiB, 94 GiB."""
        return nominal_gb(self.frame_buffer_mib) * 1024

    def vgpu_type(self, name: str) -> VgpuType:
        """A type by name, as NVIDIA writes it or as nvidia-smi prints it (`GRID A100-3-20C`)."""
        hit = self._by_name.get(smi_type_name(name))
        if hit is None:
            raise CatalogError(f"vGPU board {self.id} has no type {name!r}",
                               hint=f"types of {self.id}: {', '.join(t.name for t in self.types)}")
        return hit

    def types_in(self, mode: str) -> tuple[VgpuType, ...]:
        """The types a GPU in `mode` can hold (none for a mode the board lacks)."""
        if mode not in self.modes:
            return ()
        if mode == MIG_BACKED:
            return tuple(t for t in self.types if t.mig_backed)
        if mode == TIME_SLICED_MIG:
            return tuple(t for t in self.types if t.mig_backed and t.max_per_gi)
        return tuple(t for t in self.types if not t.mig_backed)

    def fits(self, counts: Mapping[str, int], mode: str) -> list[str]:
        """Why these time-sliced vGPUs (type -> count) cannot share one GPU in `mode`, or [] when they can as
        far as counts and frame buffer go (mixed-size placements are the host's: module notes). MIG-backed
        sets are MIG layouts: `layout.check_layout` on the types' profiles."""
        if mode not in (TIME_SLICED, TIME_SLICED_MIXED):
            raise CatalogError(f"'fits' checks the time-sliced modes, not {mode!r}",
                               hint="MIG-backed vGPUs share a GPU as their MIG profiles form a layout")
        if mode not in self.modes:
            return [f"{self.id} has no {mode} mode (its modes: {', '.join(self.modes)})"]
        problems: list[str] = []
        used = {name: n for name, n in counts.items() if n}
        chosen = []
        for name, n in used.items():
            t = self.vgpu_type(name)
            if t.mig_backed:
                problems.append(f"{t.name} is MIG-backed, not time-sliced")
                continue
            chosen.append((t, n))
            limit = t.max_count if mode == TIME_SLICED else t.max_mixed
            if n > limit:
                problems.append(f"{n} x {t.name}: at most {limit} per GPU in {mode} mode")
        if mode == TIME_SLICED and len(chosen) > 1:
            problems.append("equal-size mode holds one type per GPU: "
                            + ", ".join(t.name for t, _ in chosen))
        total = sum(t.frame_buffer_mib * n for t, n in chosen)
        if total > self.capacity_mib:
            problems.append(f"{total} MiB of frame buffer is more than the GPU's {self.capacity_mib} MiB")
        return problems


@dataclass(frozen=True)
class VgpuCatalog:
    """The vGPU boards migplan knows, looked up by id, board prefix, catalog model or PCI device ID."""

    models: tuple[VgpuModel, ...]
    sources: tuple[tuple[str, str], ...] = ()  # key -> what it is (docs/sources.md §6)

    def __iter__(self) -> Iterator[VgpuModel]:
        return iter(self.models)

    def __len__(self) -> int:
        return len(self.models)

    def find(self, name: str) -> list[VgpuModel]:
        """The boards `name` names: a board id or prefix (case-insensitive), else every board of that
        catalog model (A100-SXM4-40GB: its PCIe and its HGX board)."""
        key = name.strip().lower()
        exact = [m for m in self.models if key in (m.id.lower(), m.board.lower())]
        return exact or [m for m in self.models if m.gpu.lower() == key]

    def get(self, name: str) -> VgpuModel:
        found = self.find(name)
        if len(found) != 1:
            known = ", ".join(m.id for m in self.models)
            what = "no vGPU board" if not found else f"{len(found)} vGPU boards ({', '.join(m.id for m in found)})"
            raise CatalogError(f"{what} for {name!r}", hint=f"name one board: {known}")
        return found[0]

    def for_pci_device(self, pci_device_id: str) -> list[VgpuModel]:
        """The boards with this PCI device ID (`0x20f1`); A16 and A2 share theirs (0x25b6)."""
        pid = pci_device_id.strip().lower()
        return [m for m in self.models if pid in m.pci_device_ids]
