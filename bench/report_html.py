"""The HTML report at fleet scale: render time and page size for 1,000 and 4,000 GPUs, and how long a real
headless Chromium takes to load the page and run its script (`--dump-dom`), when chromium is installed.

    python -m bench.report_html            # prints the results table (markdown)
    python -m bench.report_html --write    # also writes bench/results/report-html.md

The plans are synthetic (seeded): A100-40GB and H100-80GB GPUs, 8 per host, each with a random maximal
layout, a workload on 80% of the instances, a third of the GPUs changing layout. The page's content does
not depend on how the plan was found, so no solver runs here.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from migplan.catalog import builtin_catalog
from migplan.catalog.layout import enumerate_layouts
from migplan.model.diff import diff
from migplan.model.gpu_plan import GpuPlan, WorkloadPlan
from migplan.model.state import GpuState
from migplan.planner import Plan
from migplan.planner.plan import SolveInfo, Summary, instance_memory_mib
from migplan.report_html import render

CAT = builtin_catalog()


def synthetic_plan(n_gpus: int, seed: int = 1) -> Plan:
    rng = random.Random(seed)
    layouts = {m: enumerate_layouts(CAT.get(m), maximal=True) for m in ("A100-SXM4-40GB", "H100-SXM5-80GB")}
    gpus, workloads = [], []
    for n in range(n_gpus):
        h, i = divmod(n, 8)
        model_id = "A100-SXM4-40GB" if h % 3 else "H100-SXM5-80GB"
        model, host = CAT.get(model_id), f"gpu-{h:04d}"
        current = rng.choice(layouts[model_id])
        target = current if rng.random() < 0.66 else rng.choice(layouts[model_id])
        gpus.append(GpuPlan(GpuState(host, i, model_id, mig_enabled=True, layout=current), target,
                            tuple(diff(current, target, gpu=(host, i), architecture=model.architecture))))
        for inst in target.instances:
            if rng.random() < 0.8:
                mib = instance_memory_mib(model, str(inst))
                peak = rng.randint(mib // 5, mib - 300)
                workloads.append(WorkloadPlan(f"svc-{h}-{i}-{inst.start}", "svc", "placed", host, i, str(inst),
                                              peak + 256, peak, mib, mib - peak,
                                              model.profile(inst.profile).memory_slices, inst in current.instances))
    s = Summary(n_gpus, n_gpus, n_gpus, None, sum(1 for g in gpus if g.actions), 0, 0, 0, len(workloads), 0, 0, 0,
                0, 0.0, 0, 300, "+10%, at least 512 MiB", None)
    return Plan("sha256:" + "0" * 64, "inventory", {}, SolveInfo("cbc", "optimal", 0, 0, 0, 0, None), s,
                tuple(gpus), tuple(workloads))


def chromium_load_s(page: Path) -> float | None:
    exe = shutil.which("chromium")
    if exe is None:
        return None
    with tempfile.TemporaryDirectory() as profile:
        t = time.perf_counter()
        subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}",
                        "--host-resolver-rules=MAP * ~NOTFOUND", "--dump-dom", page.as_uri()],
                       capture_output=True, timeout=300, check=True, env={**os.environ, "HOME": profile})
        return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for n in (1000, 4000):
            plan = synthetic_plan(n)
            t = time.perf_counter()
            text = render(plan, CAT)
            render_s = time.perf_counter() - t
            page = Path(d) / f"plan-{n}.html"
            page.write_text(text)
            load = chromium_load_s(page)
            rects = text.count('<rect class="inst')
            rows.append(f"| {n} | {len(plan.workloads)} | {rects} | {len(text.encode()) / 1e6:.1f} MB | "
                        f"{render_s:.2f} s | {f'{load:.1f} s' if load is not None else 'n/a'} |")
    out = "\n".join([
        "## HTML report at scale (`python -m bench.report_html`)", "",
        "Synthetic seeded plans, 8 GPUs per host; render = `migplan.report_html.render` in Python; load = a "
        "headless Chromium opening the file and running its script (`--dump-dom`, process start included).", "",
        "| GPUs | workloads | instance shapes | page | render | Chromium load |",
        "|---|---|---|---|---|---|", *rows, ""])
    print(out)
    if args.write:
        Path(__file__).resolve().parent.joinpath("results", "report-html.md").write_text(out)


if __name__ == "__main__":
    main()
