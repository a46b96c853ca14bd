"""Every maximal layout of A30, A100-40GB, A100-80GB and H100 applied to an empty GPU and read back
exactly, through the simulator (which checks NVIDIA's rules itself), run in-process for speed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim.fleet import host_state, write_state
from sim_runner import InProcess

from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout, enumerate_layouts
from migplan.fleet.apply import ApplyOptions, GpuOutcome, apply_host
from migplan.fleet.discover import discover_host
from migplan.inventory import Host
from migplan.model.diff import diff
from migplan.model.gpu_plan import GpuPlan
from migplan.model.state import GpuState

# every maximal layout of four models, each applied and read back: seconds per model
pytestmark = pytest.mark.slow

CAT = builtin_catalog()


@pytest.mark.parametrize("model_id", ["A30", "A100-SXM4-40GB", "A100-SXM4-80GB", "H100-SXM5-80GB"])
def test_every_maximal_layout_applies_to_an_empty_gpu_and_reads_back_exactly(model_id: str, tmp_path: Path) -> None:
    model = CAT.get(model_id)
    layouts = enumerate_layouts(model, maximal=True)
    assert layouts
    host = Host(name="h", address="h")
    for n, target in enumerate(layouts):
        state = write_state(tmp_path / f"{n}.json", host_state(model_id, 1, hostname="h"))
        rec = discover_host(InProcess(state), host, CAT)
        observed = GpuState(host="h", index=0, model=model.id, uuid=rec.gpus[0].uuid, mig_enabled=True,
                            layout=Layout())
        gp = GpuPlan(observed, target, tuple(diff(Layout(), target, gpu=("h", 0), architecture=model.architecture)))
        res = apply_host(InProcess(state), host, [gp], CAT, ApplyOptions())
        assert res.gpus[0].outcome is GpuOutcome.APPLIED, (str(target), res.gpus[0])
        assert discover_host(InProcess(state), host, CAT).gpus[0].layout == target
        assert len(res.gpus[0].commands) == 1  # one -cgi with every placement, -C for the compute instances
