"""GPUs without MIG: the models migplan knows to have none, and the model of one it does not know (pure).

Which products have MIG: the MIG User Guide, "Supported GPUs" (docs.nvidia.com/datacenter/tesla/mig-user-guide/
supported-gpus.html): "MIG is supported on GPUs starting with the NVIDIA Ampere generation (that is, GPUs with
compute capability >= 8.0)", then the only products that have it (A30, A100, H100, H20, H200, GH200, B200, GB200,
RTX PRO 6000/5000/4500 Blackwell). The products below are not in that list (T4 and V100 are also below compute
capability 8.0), so each is a GPU whose only layout is the whole GPU (`GpuModel.mig` False).

Numbers: a GPU's memory is best read from the GPU itself (GFD's `nvidia.com/gpu.memory`, NVML's total in MiB),
so this table gives memory only where a source prints it, and SM counts only where a source gives them; where it
gives none the SM count is unknown (0) and a workload's compute is not checked against that GPU.

  T4   memory 15360 MiB: GFD README "Generated Labels" (NVIDIA/k8s-device-plugin @1b826ac
       docs/gpu-feature-discovery/README.md: `nvidia.com/gpu.memory` 15360 for `nvidia.com/gpu.product`
       Tesla-T4) and a public `nvidia-smi --query-gpu` sample (`Tesla T4, [N/A], 0, 15360`: memory.total 15360, MIG mode
       [N/A]; docs/nvidia-smi.md);
       40 SMs: UNVERIFIED (third-party spec pages, sysrqmts.com and fpsbench.com; not an NVIDIA document), so the
       model is marked verified: false.
  others: names only (memory from the node's label; SM count unknown). The nvidia-smi names other than
       "Tesla T4" are UNVERIFIED here; GFD's product (the name with spaces as '-') also matches the id.
"""

from __future__ import annotations

from dataclasses import dataclass

from migplan.catalog.geometry import NO_MIG, GpuModel

_SUPPORTED = "MIG User Guide, 'Supported GPUs': not a MIG product"


@dataclass(frozen=True)
class _Entry:
    id: str
    smi_names: tuple[str, ...]
    memory_mib: int = 0  # 0: not given by a source here (read from the GPU)
    sm_count: int = 0  # 0: not known
    verified: bool = True
    source: str = _SUPPORTED


_T4_SOURCE = (f"{_SUPPORTED}; 15360 MiB: GFD README 'Generated Labels' and a public nvidia-smi sample; 40 SMs: "
              "unverified (third-party spec pages)")
_TABLE = (
    _Entry("T4", ("Tesla T4", "NVIDIA T4"), 15360, 40, verified=False, source=_T4_SOURCE),
    _Entry("L4", ("NVIDIA L4",)),
    _Entry("L40", ("NVIDIA L40",)),
    _Entry("L40S", ("NVIDIA L40S",)),
    _Entry("A2", ("NVIDIA A2",)),
    _Entry("A10", ("NVIDIA A10",)),
    _Entry("A10G", ("NVIDIA A10G",)),
    _Entry("A16", ("NVIDIA A16",)),
    _Entry("A40", ("NVIDIA A40",)),
    _Entry("V100-SXM2-16GB", ("Tesla V100-SXM2-16GB",)),
    _Entry("V100-SXM2-32GB", ("Tesla V100-SXM2-32GB",)),
    _Entry("V100-PCIE-16GB", ("Tesla V100-PCIE-16GB",)),
    _Entry("V100-PCIE-32GB", ("Tesla V100-PCIE-32GB",)),
    _Entry("V100S-PCIE-32GB", ("Tesla V100S-PCIE-32GB",)),
)


def known() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(id, nvidia-smi names) of every GPU without MIG in the table, for matching a product name."""
    return tuple((e.id, e.smi_names) for e in _TABLE)


def table_memory(model_id: str) -> int | None:
    """The table's memory of a known GPU without MIG, None where no source gives it."""
    e = next((e for e in _TABLE if e.id == model_id), None)
    return e.memory_mib if e is not None and e.memory_mib else None


def whole_gpu_model(model_id: str, memory_mib: int, *, name: str | None = None) -> GpuModel:
    """The model of a GPU without MIG: the table's entry `model_id` (its SM count, names and source) with
    `memory_mib` (the GPU's own, else the table's), or, for a product the table lacks, one named `model_id`
    (`name`: the product as read) whose SM count is unknown."""
    e = next((e for e in _TABLE if e.id == model_id), None)
    if e is None:
        return GpuModel(id=model_id, architecture=NO_MIG, memory_slices=1, compute_slices=1, profiles=(),
                        smi_names=(name,) if name and name != model_id else (), verified=False,
                        confidence="label", mig=False, whole_memory_mib=memory_mib,
                        source=f"{name or model_id}: not in migplan's table of GPUs without MIG; memory from "
                               "the GPU, SM count unknown (compute not checked)")
    return GpuModel(id=e.id, architecture=NO_MIG, memory_slices=1, compute_slices=1, profiles=(),
                    smi_names=e.smi_names, verified=e.verified, confidence="table", mig=False,
                    whole_memory_mib=memory_mib, whole_sm_count=e.sm_count,
                    source=e.source + ("" if e.sm_count else "; SM count unknown (compute not checked)"))
