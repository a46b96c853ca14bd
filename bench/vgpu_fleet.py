"""vGPU planning on generated fleets (issue 26): GPUs migplan's plan uses, against its lower bound and against the
one-type-per-GPU practice, and the time a plan takes.

    python -m bench.vgpu_fleet                 # sizes 40, 200, 1000 GPUs, 3 seeds each; writes bench/results/vgpu.md
    python -m bench.vgpu_fleet --sizes 40 --seeds 1

Fleet (seeded): equal thirds of L4 hosts, T4 hosts and A100 HGX 40GB hosts (8 GPUs each; the A100 hosts MIG-backed
only, as the common practice for MIG-backed vGPU), every GPU empty (a new fleet). VMs: 3 per 2 GPUs, each of a
board chosen with the GPUs' shares; its frame-buffer peak drawn log-uniformly between 1.5 GiB and 70% of the board's
largest vGPU type's frame buffer (inference VMs: many small, a few large). Compute is not measured (a one-slice floor).

Compared, every one sized by migplan's own sizing (peak + 10%, at least +512 MiB) so only the packing differs:

* migplan          `planner.vgpu_solve.plan_vgpus` with CBC (60 s limit, relative gap 1e-4), equal-size and
                   MIG-backed modes (`--mixed` adds mixed-size on L4 and A100 hosts);
* lower bound      `VgpuPlan.gpu_lower_bound`: per board, the frame buffer of every VM's smallest type over the GPU's
                   (and compute slices for MIG-backed);
* host-uniform     the common practice of setting every GPU of a host set (a board) to one type: the smallest type
                   holding the largest VM of that board, then ceil(VMs / that type's maximum per GPU) GPUs;
* per-GPU type     each GPU set to one type (equal-size mode, no planner): each VM's smallest type, then
                   sum over types of ceil(VMs of the type / its maximum per GPU).
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import time
from collections import Counter
from pathlib import Path

from migplan.adapters.solver import PulpSolver
from migplan.catalog import builtin_catalog, builtin_vgpu_catalog
from migplan.catalog.vgpu import VgpuModel
from migplan.model.vgpu import VgpuGpuState
from migplan.planner.demand import Policy, demand_of
from migplan.planner.vgpu_solve import plan_vgpus
from migplan.profiles import ComputeStats, MemoryStats, Observation, Workload

CAT = builtin_catalog()
VCAT = builtin_vgpu_catalog()
BOARDS = (("L4", "L4-4C"), ("T4", "T4-4C"), ("A100X", "A100X-1-5C"))  # board, the type its VMs ran as (its kind)
GPUS_PER_HOST = 8


def fleet(n_gpus: int, seed: int, mixed: bool) -> tuple[list[VgpuGpuState], list[Workload]]:
    rng = random.Random(seed)
    gpus: list[VgpuGpuState] = []
    vms: list[Workload] = []
    per_board = n_gpus // len(BOARDS)
    for bname, like in BOARDS:
        b = VCAT.get(bname)
        modes: tuple[str, ...] = ("mig_backed",) if b.vgpu_type(like).mig_backed else ("time_sliced",)
        if mixed and "time_sliced_mixed" in b.modes and not b.vgpu_type(like).mig_backed:
            modes = ("time_sliced", "time_sliced_mixed")
        for i in range(per_board):
            gpus.append(VgpuGpuState(host=f"{bname.lower()}-{i // GPUS_PER_HOST:03d}", index=i % GPUS_PER_HOST,
                                     model=b.gpu, board=b.id, host_mode=b.host_vgpu_mode, allowed=modes))
        top = max(t.frame_buffer_mib for t in b.types if t.mig_backed == b.vgpu_type(like).mig_backed)
        for k in range(3 * per_board // 2):
            peak = int(math.exp(rng.uniform(math.log(1536), math.log(0.7 * top))))
            vms.append(Workload(name=f"vm:{bname.lower()}-{k:05d}", kind="vm",
                                memory=MemoryStats(peak * 7 // 10, peak * 9 // 10, peak, peak),
                                compute=ComputeStats(0.0, 0.0, 0.0, known=False),
                                observed=Observation(vgpu_type=like)))
    return gpus, vms


def _smallest(b: VgpuModel, like: str, need: int) -> tuple[str, int]:
    kind = b.vgpu_type(like).mig_backed
    fits = sorted((t for t in b.types if t.mig_backed == kind and t.frame_buffer_mib >= need
                   and (not kind or "+" not in t.mig_profile)), key=lambda t: (t.frame_buffer_mib, t.max_count))
    return fits[0].name, fits[0].max_count


def baselines(vms: list[Workload]) -> tuple[int, int]:
    policy, fallback = Policy(), next(iter(CAT))
    per_board: dict[str, list[int]] = {}
    for w in vms:
        bname = next(b for b, like in BOARDS if w.observed.vgpu_type == like)
        per_board.setdefault(bname, []).append(demand_of(w, policy, None, fallback).memory_mib)
    uniform = per_type = 0
    for bname, needs in per_board.items():
        b, like = VCAT.get(bname), dict(BOARDS)[bname]
        _, most = _smallest(b, like, max(needs))
        uniform += math.ceil(len(needs) / most)
        counts = Counter(_smallest(b, like, n) for n in needs)
        per_type += sum(math.ceil(c / most) for (_, most), c in counts.items())
    return uniform, per_type


def run(sizes: list[int], seeds: int, mixed: bool) -> list[str]:
    rows = ["| GPUs | VMs | seed | migplan GPUs | lower bound | host-uniform | per-GPU type | left out | status "
            "| plan s |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|"]
    summary: dict[int, list[tuple[int, int, int, int, float]]] = {}
    for n in sizes:
        for seed in range(seeds):
            gpus, vms = fleet(n, seed, mixed)
            t0 = time.perf_counter()
            p = plan_vgpus(gpus, vms, Policy(), PulpSolver(time_limit=60, gap=1e-4), VCAT, CAT)
            took = time.perf_counter() - t0
            uniform, per_type = baselines(vms)
            left = sum(1 for v in p.vms if v.status != "placed")
            rows.append(f"| {len(gpus)} | {len(vms)} | {seed} | {p.gpus_used} | {p.gpu_lower_bound} | {uniform} | "
                        f"{per_type} | {left} | {p.status} | {took:.2f} |")
            summary.setdefault(n, []).append((p.gpus_used, p.gpu_lower_bound, uniform, per_type, took))
            print(rows[-1], flush=True)
    rows += ["", "| GPUs | migplan / lower bound | host-uniform / migplan | per-GPU type / migplan | median plan s |",
             "|---:|---:|---:|---:|---:|"]
    for n, rs in summary.items():
        rows.append(f"| {n // len(BOARDS) * len(BOARDS)} | {statistics.mean(r[0] / r[1] for r in rs):.3f} | "
                    f"{statistics.mean(r[2] / r[0] for r in rs):.2f} | {statistics.mean(r[3] / r[0] for r in rs):.2f} |"
                    f" {statistics.median(r[4] for r in rs):.2f} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="48,240,1200,4800")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--mixed", action="store_true", help="allow mixed-size mode on L4 hosts")
    ap.add_argument("--out", default="bench/results/vgpu.md")
    args = ap.parse_args()
    rows = run([int(x) for x in args.sizes.split(",")], args.seeds, args.mixed)
    head = ["# vGPU planning on generated fleets (bench/vgpu_fleet.py)", "",
            f"Mode: {'equal-size and mixed-size' if args.mixed else 'equal-size'} on L4 and T4 hosts, MIG-backed on "
            "A100 HGX 40GB hosts. Every figure is measured by the script; see its docstring for the fleet and the "
            "baselines.", ""]
    Path(args.out).write_text("\n".join(head + rows) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
