"""The report page's vGPU section (migplan/report_html/vgpu.py): each VM's slice of its GPU's frame buffer
(time-sliced) or its GPU instance (MIG-backed), drawn as the MIG GPUs are; a plan without vGPU is unchanged."""

from __future__ import annotations

import re
from dataclasses import replace

from vgpu_plan_samples import base_plan, sample_plan, sample_vgpu

from migplan.catalog import builtin_catalog
from migplan.report_html import render
from migplan.report_html.vgpu import WIDTH, section

CAT = builtin_catalog()


def _rects(page: str, side: str) -> list[dict[str, str]]:
    out = []
    for m in re.finditer(r"<rect ([^>]*data-side=\"" + side + r"\"[^>]*)/>", page):
        out.append(dict(re.findall(r'([\w-]+)="([^"]*)"', m.group(1))))
    return out


def test_a_plan_without_vgpu_gets_the_same_page_as_before() -> None:
    page = render(base_plan(), CAT)
    assert section(base_plan(), CAT) == ""
    assert 's-vgpu' not in page and "vgpu" not in page


def test_the_vgpu_section_is_on_the_page_before_the_mig_gpus() -> None:
    page = render(sample_plan(), CAT)
    assert page.index('id="s-vgpu"') < page.index('id="s-gpus"')
    assert "GPUs used 3 (lower bound 2)" in page


def test_time_sliced_vgpus_are_as_wide_as_their_share_of_the_frame_buffer() -> None:
    html = section(sample_plan(), CAT)
    gpu = html[html.index('id="v1"'):html.index('id="v2"')]  # the L4 turned mixed-size: 12 and 4 of 24 GiB
    target = _rects(gpu, "target")
    assert [(r["data-type"], r["data-vm"], r["class"]) for r in target] == [
        ("L4-12C", "vm:train", "inst created"), ("L4-4C", "vm:old", "inst created")]
    assert abs(float(target[0]["width"]) + 1 - WIDTH / 2) < 0.2
    assert abs(float(target[1]["width"]) + 1 - WIDTH / 6) < 0.2
    assert float(target[1]["x"]) == float(target[0]["width"]) + 1


def test_mig_backed_vgpus_sit_on_their_gpu_instance_slots() -> None:
    html = section(sample_plan(), CAT)
    gpu = html[html.index('id="v0"'):html.index('id="v1"')]
    target = {r["data-placement"]: r for r in _rects(gpu, "target")}
    cell = WIDTH / 8  # the A100 40GB's 8 memory slices
    assert float(target["3g.20gb@4"]["x"]) == 4 * cell and float(target["3g.20gb@4"]["width"]) == 4 * cell - 1
    assert float(target["2g.10gb@0"]["x"]) == 0 and target["2g.10gb@0"]["data-type"] == "A100X-2-10C"
    current = _rects(gpu, "current")
    assert [(r["data-type"], r["class"]) for r in current] == [("A100X-10C", "inst destroyed")]
    assert "time-sliced, equal size → MIG-backed" in gpu and "<li>mig-enable</li>" in gpu


def test_kept_vgpus_are_drawn_kept_on_both_sides_and_say_no_change() -> None:
    html = section(sample_plan(), CAT)
    gpu = html[html.index('id="v2"'):]
    assert {r["class"] for r in _rects(gpu, "current") + _rects(gpu, "target")} == {"inst kept"}
    assert "no change" in gpu


def test_vm_table_lists_every_vm_with_its_status_and_reason() -> None:
    html = section(sample_plan(), CAT)
    table = html[html.index('<table class="vgpu-vms">'):]
    assert table.count("<tr>") == 1 + len(sample_vgpu().vms)
    assert "<td>vm:huge</td><td>unplaced</td><td>90000</td>" in table


def test_hostile_vm_and_host_names_are_escaped() -> None:
    v = sample_vgpu()
    g = v.gpus[1]
    evil = 'vm:<script>alert(1)</script>"'
    v = replace(v, gpus=(replace(g, slots=(replace(g.slots[0], vm=evil),)),),
                vms=(replace(v.vms[0], name=evil),))
    page = render(replace(sample_plan(), vgpu=v), CAT)
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;&quot;" in page
