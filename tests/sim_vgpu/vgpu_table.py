"""The vGPU simulator's own table of GPU models and vGPU types (independent of migplan's catalog: never share it).

Every row says where it comes from. Sources (full citations in tests/sim_vgpu/README.md):

- [AIE] NVIDIA AI Enterprise, "NVIDIA AI Enterprise and NVIDIA vGPU (C-Series)", section "Virtual GPU Types for
  Supported GPUs" (docs.nvidia.com/ai-enterprise/release-6/latest/appendix/vgpu.html): Table 42 (L4), Tables 73/74
  (A100 HGX 40GB = A100-SXM4-40GB: MIG-backed and time-sliced C types, maxima in equal-size and mixed-size mode),
  Table 105 (T4; "This GPU does not support mixed-size mode"). Frame buffer in MB as NVIDIA prints it (= MiB).
- [CFG510] the type ids and names of NVIDIA's vgpuConfig.xml in the 510.47.03 vGPU driver, as listed by the
  community vGPU wiki page "vGPU Types" (GRID A100X nvidia-457..467 and 704, GRID T4 nvidia-222..321, GRID P4).
  The same ids appear on real hosts: StackHPC's kayobe guide (stackhpc/openstack-admin-guide
  source/gpus_in_openstack.rst) lists nvidia-692..707 "GRID A100D-*" exactly as [CFG510] does.
- [GUEST550] the AIE page's verbatim guest `nvidia-smi` (driver 550.54.16) naming a MIG-backed vGPU
  "GRID A100X-2-10C": the A100X types keep the "GRID " prefix in vGPU 17.
- [HARV-A2] harvester/pcidevices pkg/util/gpuhelper/testdata/sys/class/mdev_bus/0000:08:01.7/mdev_supported_types/
  nvidia-742..756: a real A2 virtual function's mdev types (name, description, available_instances, device_api);
  stored under tests/data/vgpu_sim/mdev_supported_types_a2_vf/.
- [HARV-L40S] harvester/pcidevices .../testdata/sys/bus/pci/devices/0000:26:00.4/nvidia/creatable_vgpu_types:
  a real L40S virtual function (vendor-specific VFIO framework); stored as creatable_vgpu_types_l40s.txt.
- [AKB-525] akb486/vgpu README.md: `mdevctl types`, `nvidia-smi vgpu` and `nvidia-smi vgpu -q` of a host on driver
  525.147.01 exposing RTXA6000 types nvidia-522..554 on its physical function (names, descriptions, maxima).
- [P4-460] DualCoder/vgpu_unlock issue #30: `nvidia-smi vgpu -s` on driver 460.32.04 listing the P4 types in the
  driver's own order.

A value no source gives is marked in the row's `inferred` (it is a placeholder the simulator needs, never evidence).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

C_RES = "4096x2400"  # C-series max_resolution in a real mdev description ([HARV-A2] nvidia-754..756, [AKB-525])


@dataclass(frozen=True)
class VgpuType:
    id: int  # the vGPU type id: nvidia-<id> (mdev), the number in creatable_vgpu_types (VFIO), `vGPU Type` in -q
    name: str  # as the driver prints it: "GRID A100X-4C", "NVIDIA L4-4C"
    fb_mib: int
    max_equal: int  # maximum vGPUs of this type per GPU in equal-size mode (or the only maximum)
    max_mixed: int | None = None  # in mixed-size mode; None: the model has no mixed-size mode
    mig_profile: str | None = None  # MIG-backed: the GPU instance profile it sits on (the MIG simulator's name)
    num_heads: int = 1  # the mdev `description` fields
    frl: int = 60
    max_resolution: str = C_RES
    source: str = ""
    inferred: tuple[str, ...] = ()

    @property
    def short(self) -> str:
        """The name without the "GRID "/"NVIDIA " prefix: A100X-4C."""
        return self.name.split(" ", 1)[1] if " " in self.name else self.name

    @property
    def series(self) -> str:
        """A, B, C or Q: the last letter of the type name before a MIG attribute suffix (ME)."""
        found = re.search(r"-\d+([ABCQ])", self.short)
        return found.group(1) if found else ""

    @property
    def mig_backed(self) -> bool:
        return self.mig_profile is not None

    def description(self) -> str:
        """The mdev type's `description` file, one line ([HARV-A2], [AKB-525] format)."""
        return (f"num_heads={self.num_heads}, frl_config={self.frl}, framebuffer={self.fb_mib}M, "
                f"max_resolution={self.max_resolution}, max_instance={self.max_equal}")


@dataclass(frozen=True)
class VgpuModel:
    id: str
    smi_name: str  # the physical GPU's name as nvidia-smi prints it
    pci_device_id: str  # "0x20B0"
    memory_total_mib: int
    sriov: bool  # has SR-IOV virtual functions (Ampere and later; Turing has none)
    total_vfs: int  # sriov_totalvfs
    interface: str  # default: "vfio" (vendor-specific VFIO, vGPU 17+), "mdev-sriov" (mdev on each VF), "mdev"
    types: tuple[VgpuType, ...]
    mig_model: str | None = None  # the MIG simulator's model id (tests/sim/geometry.py) for MIG-backed types
    source: str = ""
    inferred: tuple[str, ...] = field(default=())

    @property
    def mixed_size(self) -> bool:
        return any(t.max_mixed is not None for t in self.types)

    @property
    def vgpu_fb_mib(self) -> int:
        """Frame buffer the time-sliced vGPUs of one GPU may hold together: the largest time-sliced type's."""
        return max(t.fb_mib for t in self.types if not t.mig_backed)

    def type(self, ref: int | str) -> VgpuType | None:
        for t in self.types:
            if ref in (t.id, t.name, t.short) or str(ref) == str(t.id):
                return t
        return None


def _gb(short: str) -> int:
    """The frame buffer GB a type name carries: P4-2B4 -> 2, A100X-3-20C -> 20."""
    found = re.search(r"-(\d+)[ABCQ]", short)
    assert found, short
    return int(found.group(1))


def _ts(tid: int, name: str, fb: int, equal: int, mixed: int | None, src: str, *inferred: str) -> VgpuType:
    return VgpuType(tid, name, fb, equal, mixed, source=src, inferred=tuple(inferred))


def _mig(tid: int, name: str, fb: int, count: int, profile: str, src: str, *inferred: str) -> VgpuType:
    return VgpuType(tid, name, fb, count, mig_profile=profile, source=src, inferred=tuple(inferred))


A100 = VgpuModel(
    "A100-SXM4-40GB", "NVIDIA A100-SXM4-40GB", "0x20B0", 40960, sriov=True, total_vfs=16, interface="vfio",
    mig_model="A100-SXM4-40GB", source="[AIE] Tables 73, 74 (NVIDIA A100 HGX 40GB); ids and names [CFG510], [GUEST550]",
    inferred=("total_vfs: 16 is not in a source",),
    types=(
        _ts(457, "GRID A100X-4C", 4096, 10, 8, "[AIE] T74, [CFG510]"),
        _ts(458, "GRID A100X-5C", 5120, 8, 8, "[AIE] T74, [CFG510]"),
        _ts(459, "GRID A100X-8C", 8192, 5, 4, "[AIE] T74, [CFG510]"),
        _ts(460, "GRID A100X-10C", 10240, 4, 4, "[AIE] T74, [CFG510]"),
        _ts(461, "GRID A100X-20C", 20480, 2, 2, "[AIE] T74, [CFG510]"),
        _ts(462, "GRID A100X-40C", 40960, 1, 1, "[AIE] T74, [CFG510]"),
        _mig(463, "GRID A100X-1-5C", 5120, 7, "1g.5gb", "[AIE] T73, [CFG510]"),
        _mig(464, "GRID A100X-2-10C", 10240, 3, "2g.10gb", "[AIE] T73, [CFG510], [GUEST550]"),
        _mig(465, "GRID A100X-3-20C", 20480, 2, "3g.20gb", "[AIE] T73, [CFG510]"),
        _mig(466, "GRID A100X-4-20C", 20480, 1, "4g.20gb", "[AIE] T73, [CFG510]"),
        _mig(467, "GRID A100X-7-40C", 40960, 1, "7g.40gb", "[AIE] T73, [CFG510]"),
        _mig(704, "GRID A100X-1-5CME", 5120, 1, "1g.5gb+me", "[AIE] T73, [CFG510]"),
        # newer than the 510 driver: its id is no source's; the GRID prefix follows its siblings
        _mig(1001, "GRID A100X-1-10C", 10240, 4, "1g.10gb", "[AIE] T73", "id 1001", "GRID prefix"),
    ),
)

_L4_ID = "id (L4 is newer than [CFG510]; no public source gives its type ids)"
L4 = VgpuModel(
    "L4", "NVIDIA L4", "0x27B8", 23034, sriov=True, total_vfs=32, interface="vfio",
    source="[AIE] Table 42 (NVIDIA L4); the NVIDIA prefix as Ada types carry it ([HARV-L40S])",
    inferred=("total_vfs: 32 as the A10's 32 VFs (OpenNebula docs); not given for the L4",
              "memory_total_mib 23034 and pci device id from public nvidia-smi output, not a vGPU source"),
    types=(
        _ts(1201, "NVIDIA L4-4C", 4096, 6, 4, "[AIE] T42", _L4_ID),
        _ts(1202, "NVIDIA L4-6C", 6144, 4, 4, "[AIE] T42", _L4_ID),
        _ts(1203, "NVIDIA L4-8C", 8192, 3, 2, "[AIE] T42", _L4_ID),
        _ts(1204, "NVIDIA L4-12C", 12288, 2, 2, "[AIE] T42", _L4_ID),
        _ts(1205, "NVIDIA L4-24C", 24576, 1, 1, "[AIE] T42", _L4_ID),
    ),
)

T4 = VgpuModel(
    "T4", "Tesla T4", "0x1EB8", 15360, sriov=False, total_vfs=0, interface="mdev",
    source="[AIE] Table 105 (NVIDIA Tesla T4, no mixed-size mode); ids and names [CFG510]",
    types=(
        _ts(319, "GRID T4-4C", 4096, 4, None, "[AIE] T105, [CFG510]"),
        _ts(320, "GRID T4-8C", 8192, 2, None, "[AIE] T105, [CFG510]"),
        _ts(321, "GRID T4-16C", 16384, 1, None, "[AIE] T105, [CFG510]"),
    ),
)


def _graphics(tid: int, name: str, fb: int, heads: int, frl: int, res: str, count: int, src: str,
              *inferred: str) -> VgpuType:
    return VgpuType(tid, name, fb, count, num_heads=heads, frl=frl, max_resolution=res, source=src,
                    inferred=tuple(inferred))


# --- models that replay public samples byte for byte (the rows are the samples' own values) ---------------------

A2 = VgpuModel(
    "A2", "NVIDIA A2", "0x25B6", 15356, sriov=True, total_vfs=16, interface="mdev-sriov",
    source="[HARV-A2]: every row is the captured mdev type (name, description)",
    inferred=("total_vfs 16, pci device id and memory are not in the capture",),
    types=(
        _graphics(742, "NVIDIA A2-1B", 1024, 4, 45, "5120x2880", 16, "[HARV-A2]"),
        _graphics(743, "NVIDIA A2-2B", 2048, 4, 45, "5120x2880", 8, "[HARV-A2]"),
        _graphics(744, "NVIDIA A2-1Q", 1024, 4, 60, "5120x2880", 16, "[HARV-A2]"),
        _graphics(745, "NVIDIA A2-2Q", 2048, 4, 60, "7680x4320", 8, "[HARV-A2]"),
        _graphics(746, "NVIDIA A2-4Q", 4096, 4, 60, "7680x4320", 4, "[HARV-A2]"),
        _graphics(747, "NVIDIA A2-8Q", 8192, 4, 60, "7680x4320", 2, "[HARV-A2]"),
        _graphics(748, "NVIDIA A2-16Q", 16384, 4, 60, "7680x4320", 1, "[HARV-A2]"),
        _graphics(749, "NVIDIA A2-1A", 1024, 1, 60, "1280x1024", 16, "[HARV-A2]"),
        _graphics(750, "NVIDIA A2-2A", 2048, 1, 60, "1280x1024", 8, "[HARV-A2]"),
        _graphics(751, "NVIDIA A2-4A", 4096, 1, 60, "1280x1024", 4, "[HARV-A2]"),
        _graphics(752, "NVIDIA A2-8A", 8192, 1, 60, "1280x1024", 2, "[HARV-A2]"),
        _graphics(753, "NVIDIA A2-16A", 16384, 1, 60, "1280x1024", 1, "[HARV-A2]"),
        _graphics(754, "NVIDIA A2-4C", 4096, 1, 60, C_RES, 4, "[HARV-A2]"),
        _graphics(755, "NVIDIA A2-8C", 8192, 1, 60, C_RES, 2, "[HARV-A2]"),
        _graphics(756, "NVIDIA A2-16C", 16384, 1, 60, C_RES, 1, "[HARV-A2]"),
    ),
)


def _l40s(tid: int, short: str) -> VgpuType:
    gb = _gb(short)
    count = min(32, 48 // gb)  # the 48 GB RTXA6000 of [AKB-525] has exactly these maxima
    series = short[-1]
    heads, frl = (1, 60) if series == "A" else (4, 45 if series == "B" else 60)
    return _graphics(tid, f"NVIDIA {short}", gb * 1024, heads, frl, "5120x2880", count, "[HARV-L40S]",
                     "framebuffer from the name", "max_instance by analogy with the RTXA6000 of [AKB-525]",
                     "num_heads, frl_config, max_resolution")


L40S = VgpuModel(
    "L40S", "NVIDIA L40S", "0x26B9", 46068, sriov=True, total_vfs=32, interface="vfio",
    source="[HARV-L40S]: ids, names and their order are the capture's",
    inferred=("everything but the ids and names",),
    types=tuple(_l40s(tid, short) for tid, short in (
        (1145, "L40S-1B"), (1146, "L40S-2B"), (1147, "L40S-1Q"), (1148, "L40S-2Q"), (1149, "L40S-3Q"),
        (1150, "L40S-4Q"), (1151, "L40S-6Q"), (1152, "L40S-8Q"), (1153, "L40S-12Q"), (1154, "L40S-16Q"),
        (1155, "L40S-24Q"), (1156, "L40S-48Q"), (1157, "L40S-1A"), (1158, "L40S-2A"), (1159, "L40S-3A"),
        (1160, "L40S-4A"), (1161, "L40S-6A"), (1162, "L40S-8A"), (1163, "L40S-12A"), (1164, "L40S-16A"),
        (1165, "L40S-24A"), (1166, "L40S-48A"), (2164, "L40S-3B"))),
)


def _akb(tid: int, short: str, heads: int, frl: int, res: str, count: int) -> VgpuType:
    gb = _gb(short)
    return _graphics(tid, f"NVIDIA {short}", gb * 1024, heads, frl, res, count, "[AKB-525]")


_Q, _A, _C = "7680x4320", "1280x1024", C_RES
RTXA6000_525 = VgpuModel(
    "RTXA6000-525", "NVIDIA GeForce RTX 4088", "0x2684", 8188, sriov=False, total_vfs=0, interface="mdev",
    source="[AKB-525]: a host on driver 525.147.01 whose physical function offers the RTXA6000 types",
    inferred=("pci device id",),
    types=(
        _akb(522, "RTXA6000-1B", 4, 45, "5120x2880", 32), _akb(523, "RTXA6000-2B", 4, 45, "5120x2880", 24),
        _akb(524, "RTXA6000-1Q", 4, 60, "5120x2880", 32), _akb(525, "RTXA6000-2Q", 4, 60, _Q, 24),
        _akb(526, "RTXA6000-3Q", 4, 60, _Q, 16), _akb(527, "RTXA6000-4Q", 4, 60, _Q, 12),
        _akb(528, "RTXA6000-6Q", 4, 60, _Q, 8), _akb(529, "RTXA6000-8Q", 4, 60, _Q, 6),
        _akb(530, "RTXA6000-12Q", 4, 60, _Q, 4), _akb(531, "RTXA6000-16Q", 4, 60, _Q, 3),
        _akb(532, "RTXA6000-24Q", 4, 60, _Q, 2), _akb(533, "RTXA6000-48Q", 4, 60, _Q, 1),
        _akb(534, "RTXA6000-1A", 1, 60, _A, 32), _akb(535, "RTXA6000-2A", 1, 60, _A, 24),
        _akb(536, "RTXA6000-3A", 1, 60, _A, 16), _akb(537, "RTXA6000-4A", 1, 60, _A, 12),
        _akb(538, "RTXA6000-6A", 1, 60, _A, 8), _akb(539, "RTXA6000-8A", 1, 60, _A, 6),
        _akb(540, "RTXA6000-12A", 1, 60, _A, 4), _akb(541, "RTXA6000-16A", 1, 60, _A, 3),
        _akb(542, "RTXA6000-24A", 1, 60, _A, 2), _akb(543, "RTXA6000-48A", 1, 60, _A, 1),
        _akb(548, "RTXA6000-4C", 1, 60, _C, 12), _akb(549, "RTXA6000-6C", 1, 60, _C, 8),
        _akb(550, "RTXA6000-8C", 1, 60, _C, 6), _akb(551, "RTXA6000-12C", 1, 60, _C, 4),
        _akb(552, "RTXA6000-16C", 1, 60, _C, 3), _akb(553, "RTXA6000-24C", 1, 60, _C, 2),
        _akb(554, "RTXA6000-48C", 1, 60, _C, 1),
    ),
)

_P4_INF = ("max_instance: 8 GB over the type's GB, not in the sample", "num_heads, frl_config, max_resolution")


P4 = VgpuModel(
    "P4", "Tesla P4", "0x1BB3", 8192, sriov=False, total_vfs=0, interface="mdev",
    source="[P4-460] for the names and their order, [CFG510] for the ids",
    inferred=("everything but the names, their order and the ids",),
    types=tuple(_graphics(tid, f"GRID {short}", _gb(short) * 1024, 1, 60, C_RES, 8 // _gb(short),
                          "[P4-460], [CFG510]", *_P4_INF)
                for tid, short in ((71, "P4-1B"), (63, "P4-1Q"), (64, "P4-2Q"), (65, "P4-4Q"), (66, "P4-8Q"),
                                   (67, "P4-1A"), (68, "P4-2A"), (69, "P4-4A"), (70, "P4-8A"), (157, "P4-2B"),
                                   (214, "P4-2B4"), (243, "P4-1B4"), (289, "P4-8C"), (288, "P4-4C"))),
)

MODELS: dict[str, VgpuModel] = {m.id: m for m in (A100, L4, T4, A2, L40S, RTXA6000_525, P4)}


def model(model_id: str) -> VgpuModel:
    try:
        return MODELS[model_id]
    except KeyError:
        raise ValueError(f"the vGPU simulator plays no model {model_id!r} (it plays {', '.join(MODELS)})") from None
