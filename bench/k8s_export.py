"""Scale of the Kubernetes inventory and the GPU Operator export: python -m bench.k8s_export [--nodes 1000].

1. `kubectl get nodes -o json` of N mixed-strategy nodes, 8 A100-40GB GPUs each (2 whole, 6 MIG with
   the counts of six random maximal layouts): parse into an inventory (the node counts split over GPUs).
2. A plan of N/8 hosts x 8 GPUs with random maximal layouts (or MIG off): build the export (configs,
   labels, the creation-order check of every distinct count set) and render the manifest.
3. One creation-order check per distinct count set of an A100-40GB and an H100 (all of them).
Wall times, best of --repeat. Nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import cast

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from migplan import mig_parted, yamldoc
from migplan.catalog import builtin_catalog
from migplan.catalog.layout import Layout, enumerate_layouts
from migplan.commands import export as ex
from migplan.inventory import parse_inventory
from migplan.model.gpu_plan import GpuPlan
from migplan.model.state import GpuState
from migplan.planner.plan import Plan


def _best(fn, repeat: int) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _nodes(n: int, lays: list[Layout]) -> str:
    items = []
    for h in range(n):
        c: Counter[str] = Counter()
        for _ in range(6):
            c.update(random.choice(lays).profile_counts())
        labels = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB", "nvidia.com/gpu.count": "8",
                  "nvidia.com/mig.strategy": "mixed", **{f"nvidia.com/mig-{p}.count": str(k) for p, k in c.items()}}
        items.append({"kind": "Node", "metadata": {"name": f"node-{h:05d}", "labels": labels},
                      "status": {"capacity": {"nvidia.com/gpu": "2"}}})
    return json.dumps({"kind": "List", "items": items})


@dataclass(frozen=True)
class _Plan:
    """What the export reads of a plan (a real Plan also carries the solve, summary and workloads)."""

    gpus: tuple[GpuPlan, ...]
    models: tuple[()] = ()
    fingerprint: str = "sha256:" + "0" * 64


def _plan(hosts: int, model_id: str, lays: list[Layout]) -> Plan:
    gpus = []
    for h in range(hosts):
        for i in range(8):
            lay = random.choice([*lays, None])
            gpus.append(GpuPlan(GpuState(f"node-{h:05d}", i, model_id, mig_enabled=lay is not None, layout=lay),
                                lay, ()))
    return cast(Plan, _Plan(tuple(gpus)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    random.seed(7)
    cat = builtin_catalog()
    a100 = cat.get("A100-SXM4-40GB")
    lays = enumerate_layouts(a100, maximal=True)
    doc = _nodes(args.nodes, lays)
    t_parse = _best(lambda: parse_inventory(yamldoc.parse(doc, "nodes.json"), cat), args.repeat)  # type: ignore[arg-type]
    plan = _plan(args.nodes // 8, a100.id, lays)
    t_export = _best(lambda: ex.manifest(ex.build_gpu_operator(plan, cat)), args.repeat)
    export = ex.build_gpu_operator(plan, cat)
    rows = [f"| parse `kubectl get nodes -o json`, {args.nodes} nodes x 8 GPUs | {t_parse:.2f} s |",
            f"| export gpu-operator, {len(plan.gpus)} GPUs ({len(export.ours)} configs, {len(export.checks)} "
            f"count sets checked) | {t_export:.2f} s |"]
    for model_id in ("A100-SXM4-40GB", "H100-SXM5-80GB"):
        model = cat.get(model_id)
        sets = {tuple(sorted(lay.profile_counts().items()))
                for lay in enumerate_layouts(model, profiles=[p.name for p in model.profiles])}
        sets.discard(())
        t = _best(lambda m=model, s=sets: [mig_parted.creation_risk(m, dict(c)) for c in s], 1)  # type: ignore[misc]
        rows.append(f"| creation-order check, every count set of {model_id} ({len(sets)}) | {t:.2f} s "
                    f"({t / len(sets) * 1000:.0f} ms each) |")
    print("| what | wall time |\n|---|---|\n" + "\n".join(rows))


if __name__ == "__main__":
    main()
