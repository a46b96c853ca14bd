"""The vSphere export, propose's vGPU table and the report's vGPU section on a plan the real vGPU planner made
(planner.vgpu_solve with CBC), not only on hand-built ones: every VM the plan places is in each of them once per
vGPU, with its type, on its GPU."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import replace

import pytest
from vgpu_plan_samples import base_plan

from migplan import vsphere
from migplan.adapters.solver import PulpSolver
from migplan.catalog import builtin_catalog, builtin_vgpu_catalog
from migplan.cli.vgpu_render import render_vgpu
from migplan.model.vgpu import VgpuGpuState, VgpuPlan
from migplan.planner.demand import Policy
from migplan.planner.plan import PLAN_VERSION_VGPU
from migplan.planner.vgpu_solve import plan_vgpus
from migplan.profiles import ComputeStats, MemoryStats, Observation, Workload
from migplan.report_html.vgpu import section

CAT = builtin_catalog()
VCAT = builtin_vgpu_catalog()


def _vm(name: str, mib: int, typ: str | None = None) -> Workload:
    return Workload(name=name, kind="vm", memory=MemoryStats(p50=mib, p95=mib, p99=mib, max=mib),
                    compute=ComputeStats(0.0, 0.0, 0.0, known=False), observed=Observation(vgpu_type=typ))


def _gpu(host: str, index: int, board: str, modes: tuple[str, ...]) -> VgpuGpuState:
    b = VCAT.get(board)
    return VgpuGpuState(host=host, index=index, model=b.gpu, board=b.id, host_mode=b.host_vgpu_mode,
                        allowed=tuple(m for m in modes if m in b.modes), pci_bus_id=f"00000000:{0x3b + index:02X}:00.0")


@pytest.fixture(scope="module")
def planned() -> VgpuPlan:
    gpus = [_gpu("esx-l4", i, "L4", ("time_sliced", "time_sliced_mixed")) for i in range(2)] + \
        [_gpu("esx-a100", 0, "A100X", ("mig_backed",))]
    vms = [_vm("vm:l4-a", 6000, "L4-8C"), _vm("vm:l4-b", 10000, "L4-12C"), _vm("vm:l4-c", 3000, "L4-4C"),
           _vm("vm:a100-a", 15000, "A100X-3-20C"), _vm("vm:a100-b", 4000, "A100X-1-5C")]
    return plan_vgpus(gpus, vms, Policy(), PulpSolver(time_limit=30), VCAT, CAT)


def test_csv_has_every_placed_vm_once_with_its_plans_type_and_gpu(planned: VgpuPlan) -> None:
    rows = list(csv.DictReader(io.StringIO(vsphere.csv_text(vsphere.build(planned, VCAT)))))
    got = sorted((r["VMName"], r["VGPUProfile"], r["Host"], r["GPU"]) for r in rows)
    bus = {g.key: g.observed.pci_bus_id for g in planned.gpus}
    want = sorted((vsphere.vm_name(v.name), vsphere.profile_name(v.vgpu_type or ""), v.host or "",
                   bus[(v.host or "", v.gpu or 0)] or "") for v in planned.vms if v.status in ("placed", "kept"))
    assert got == want and len(want) == 5


def test_no_gpu_of_the_export_holds_more_frame_buffer_than_it_has(planned: VgpuPlan) -> None:
    for g in vsphere.build(planned, VCAT).to_dict()["hosts"]:
        for d in g["gpus"]:
            assert d["frame_buffer_used_mib"] <= d["frame_buffer_mib"]
            assert (d["gpu_mode"] is None) == (d["mode"] is None)


def test_table_has_a_row_per_gpu_and_every_placed_vm_with_its_type(planned: VgpuPlan) -> None:
    text = render_vgpu(replace(base_plan(), vgpu=planned, version=PLAN_VERSION_VGPU))
    for g in planned.gpus:
        assert re.search(rf"^{g.observed.host}:{g.observed.index} ", text, re.M)
    for v in planned.vms:
        assert f"{v.name} {v.vgpu_type}" in text


def test_report_draws_one_rectangle_per_target_vgpu(planned: VgpuPlan) -> None:
    html = section(replace(base_plan(), vgpu=planned, version=PLAN_VERSION_VGPU), CAT)
    assert html.count('data-side="target" data-type=') == sum(len(g.slots) for g in planned.gpus) == 5
