"""Generated histories whose sizing answer is known by construction (tests/test_sweep.py, tests/test_sizing_auto.py).

`truth_history`: A100-SXM4-80GB (instances of 9,728, 19,968, 40,192 and 80,384 MiB), a sample every 10 minutes for
10 days: 4 steady workloads at 17,000 MiB (spread 0) and 4 volatile ones at 8,000 MiB with one spike a day at noon,
`SPIKES[day]` high. With --train 7d, --test 1d and 3 splits, max+1spread is the cheapest rule that keeps every
workload in memory at every split (tests/test_sweep.py works out why).
"""

from __future__ import annotations

from pathlib import Path

from migplan.history.samples import Place, Sample

MODEL = "A100-SXM4-80GB"
T0 = 1_790_000_000.0
DAY = 86_400.0
STEP = 600.0
SPIKES = [14000.0] * 7 + [21000.0, 15000.0, 26000.0]


def truth_history(days: int = 10) -> list[Sample]:
    out = []
    n = int(days * DAY / STEP)
    for w in range(8):
        place = Place(host=f"h{w // 4}", gpu=w % 4, gpu_model=MODEL)
        for i in range(n):
            if w < 4:
                mem = 17000.0
            else:
                day, noon = divmod(i * STEP, DAY)
                mem = SPIKES[int(day)] if noon == 12 * 3600 else 8000.0
            out.append(Sample(T0 + i * STEP, f"{'steady' if w < 4 else 'volatile'}-{w}", mem, 5.0, place))
    return out


def write_csv(path: Path, samples: list[Sample]) -> Path:
    rows = ["timestamp,workload,host,memory_used_mib,util_pct,gpu_model"]
    rows += [f"{s.timestamp:.0f},{s.workload},{s.place.host},{s.memory_mib:g},{s.util_pct:g},{s.place.gpu_model}"
             for s in samples]
    path.write_text("\n".join(rows) + "\n")
    return path
