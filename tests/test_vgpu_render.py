"""`render_vgpu`: the vGPU part of a plan in propose's table (migplan/cli/vgpu_render.py)."""

from __future__ import annotations

from dataclasses import replace

from vgpu_plan_samples import base_plan, sample_plan, sample_vgpu

from migplan.catalog import builtin_catalog, builtin_vgpu_catalog
from migplan.cli.vgpu_render import render_vgpu, slot_picture
from migplan.commands.fleet import VGPU_PICTURE_WIDTH
from migplan.model.vgpu import VgpuSlot

CAT = builtin_catalog()
VCAT = builtin_vgpu_catalog()


def _line(text: str, start: str) -> str:
    return next(ln for ln in text.splitlines() if ln.startswith(start))


def test_a_plan_without_vgpu_renders_nothing() -> None:
    assert render_vgpu(base_plan()) == ""


def test_time_sliced_vgpus_are_shares_of_the_frame_buffer_as_status_draws_them() -> None:
    g = sample_vgpu().gpus[1]  # L4 (24 GiB): L4-12C and L4-4C
    pic = slot_picture(g.observed, g.mode, g.slots, CAT, VCAT)
    assert len(pic) == VGPU_PICTURE_WIDTH + 2
    cells = pic.strip("|").split("|")
    assert [c.strip() for c in cells] == ["L4-12C", "L4-4C", ""]
    assert len(cells[0]) + 1 == round(12288 / 24576 * (VGPU_PICTURE_WIDTH + 1))  # half the GPU


def test_mig_backed_vgpus_are_drawn_on_the_mig_slot_picture() -> None:
    g = sample_vgpu().gpus[0]
    assert slot_picture(g.observed, g.mode, g.slots, CAT, VCAT) == "|2g.10|  |  |3g.20gb    |"


def test_gpu_row_has_host_gpu_board_mode_before_and_after_pictures_and_vms() -> None:
    text = render_vgpu(sample_plan())
    row = _line(text, "esx01:0")
    assert "A100-HGX-40GB" in row and "equal-size -> MIG-backed" in row
    assert "|A100X-10C  |" in row and "|2g.10|  |  |3g.20gb    |" in row
    assert "vm:infer-01 A100X-3-20C@4" in row and "vm:chat A100X-2-10C@0" in row and "change" in row
    assert "none -> mixed-size" in _line(text, "esx01:1")
    kept = _line(text, "esx02:0")
    assert "equal-size " in kept and "->" not in kept and "change" not in kept


def test_actions_are_listed_per_changed_gpu_in_apply_order() -> None:
    text = render_vgpu(sample_plan())
    line = _line(text, "  esx01:0:")
    assert line.index("remove A100X-10C") < line.index("mig-enable") < line.index("gi-create") < line.index("create A")
    assert "  esx02:0:" not in text


def test_vm_table_has_status_need_type_frame_buffer_host_gpu_and_moved() -> None:
    text = render_vgpu(sample_plan())
    assert "VM" in text and "FRAME BUFFER MiB" in text
    old = _line(text, "vm:old ").split()
    assert old == ["vm:old", "placed", "3000", "L4-4C", "4096", "esx01:1", "moved"]
    huge = _line(text, "vm:huge")
    assert "unplaced" in huge and "no vGPU type of its board holds 90000 MiB" in huge


def test_last_line_gives_gpus_used_against_the_lower_bound() -> None:
    last = render_vgpu(sample_plan()).rstrip().splitlines()[-1]
    assert last.startswith("vGPU GPUs used 3 of 3 (lower bound 2); VMs placed 4, kept 2, unplaced 1")


def test_a_running_vgpu_of_no_vm_is_shown_as_running() -> None:
    v = sample_vgpu()
    g = v.gpus[2]
    slots = (VgpuSlot("L4-8C", running=True, device="0000:3b:00.5"),)
    v = replace(v, gpus=(replace(g, observed=replace(g.observed, slots=slots), slots=slots),), vms=())
    text = render_vgpu(replace(sample_plan(), vgpu=v))
    assert "running L4-8C" in _line(text, "esx02:0")


def test_hostile_vm_names_are_printed_escaped() -> None:
    v = sample_vgpu()
    v = replace(v, vms=(replace(v.vms[0], name="vm:\x1b[2Jevil"),))
    text = render_vgpu(replace(sample_plan(), vgpu=v))
    assert "\x1b" not in text
