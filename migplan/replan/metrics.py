"""The node_exporter textfile collector's file for one replan run (Prometheus text exposition format 0.0.4).

Names follow Prometheus' conventions (https://prometheus.io/docs/practices/naming/): a `migplan_` prefix,
base units (`_seconds`), `_total` only for counters; every metric has `# HELP` and `# TYPE`. The file is
written atomically by the caller (node_exporter reads `*.prom` in its `--collector.textfile.directory`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

RESULTS = ("nothing_to_do", "applied", "partial", "failed", "locked", "not_applied", "would_apply", "repaired")
# Why a decision applies its plan (replan.decide writes each reason starting with its verb): one code per verb.
REASONS = (("places", "places_left_out"), ("gives", "enlarges_outgrown"), ("frees", "frees_gpus"),
           ("cuts", "cuts_waste"))


def reason_codes(reasons: Iterable[str]) -> frozenset[str]:
    """The codes (REASONS) of a decision's reasons, e.g. "frees 1 GPU(s) (threshold 1)" -> frees_gpus."""
    verbs = dict(REASONS)
    return frozenset(verbs[v] for v in (r.split(" ", 1)[0] for r in reasons) if v in verbs)


@dataclass(frozen=True)
class AtRisk:
    """A workload the plan keeps at risk where it runs (its peak fits the instance, peak + headroom does not)."""

    workload: str
    host: str
    gpu: int
    instance: str | None  # PROFILE@START; None: the whole MIG-disabled GPU
    margin_mib: int  # instance memory - observed peak


@dataclass(frozen=True)
class RunMetrics:
    finished_at: float  # unix seconds
    result: str  # one of RESULTS
    gpus_used: int | None = None
    gpus_lower_bound: int | None = None
    gap: float | None = None
    workloads_unplaced: int | None = None
    workloads_at_risk: int | None = None  # running where they are: peak fits, peak + headroom does not
    idle_instances_kept: int | None = None  # idle instances the plan keeps free (spare capacity)
    workloads_below_instance: int | None = None  # served workloads whose instance has less than their demand
    stranded_slices: int | None = None
    gpus_changed: int = 0
    solve_seconds: float | None = None
    apply_seconds: float | None = None
    reasons: tuple[str, ...] | None = None  # the decision's reasons (Decision.reasons); None: no decision made
    gpu_changed_at: tuple[tuple[str, int, float], ...] | None = None  # (host, GPU, unix time of its last change)
    at_risk: tuple[AtRisk, ...] | None = None  # None: no plan


_GAUGES: tuple[tuple[str, str, str], ...] = (
    ("gpus_used", "migplan_plan_gpus_used", "GPUs the current plan uses."),
    ("gpus_lower_bound", "migplan_plan_gpus_lower_bound", "Lower bound on the GPUs any plan needs."),
    ("gap", "migplan_plan_gap_ratio", "Relative optimality gap of the plan's solve (0: proven optimal)."),
    ("workloads_unplaced", "migplan_workloads_unplaced", "Workloads (replicas) the plan leaves out."),
    ("workloads_at_risk", "migplan_workloads_at_risk",
     "Running workloads kept where they are whose peak fits their instance but peak plus headroom does not."),
    ("idle_instances_kept", "migplan_idle_instances_kept", "Idle MIG instances the plan keeps free."),
    ("workloads_below_instance", "migplan_workloads_above_instance_memory",
     "Workloads whose sized memory demand exceeds their instance's memory."),
    ("stranded_slices", "migplan_stranded_slices", "Compute slices on used GPUs that no instance can use."),
    ("gpus_changed", "migplan_gpus_changed", "GPUs this run changed (0 unless applied)."),
    ("solve_seconds", "migplan_solve_duration_seconds", "Wall time of this run's solve."),
    ("apply_seconds", "migplan_apply_duration_seconds", "Wall time of this run's apply."),
)


def _number(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v)) if not float(v).is_integer() else str(int(v))


def render(m: RunMetrics) -> str:
    if m.result not in RESULTS:
        raise ValueError(f"unknown result {m.result!r}")
    lines = ["# HELP migplan_last_run_timestamp_seconds Unix time the last replan run finished.",
             "# TYPE migplan_last_run_timestamp_seconds gauge",
             f"migplan_last_run_timestamp_seconds {_number(m.finished_at)}",
             "# HELP migplan_last_run_result Result of the last replan run (1 for the result it had).",
             "# TYPE migplan_last_run_result gauge"]
    lines += [f'migplan_last_run_result{{result="{r}"}} {int(r == m.result)}' for r in RESULTS]
    for attr, name, help_ in _GAUGES:
        v = getattr(m, attr)
        if v is None:
            continue
        lines += [f"# HELP {name} {help_}", f"# TYPE {name} gauge", f"{name} {_number(v)}"]
    if m.reasons is not None:
        codes = reason_codes(m.reasons)
        lines += ["# HELP migplan_last_run_reason Reasons the last run's decision gave for applying its plan "
                  "(1 for each it gave).", "# TYPE migplan_last_run_reason gauge"]
        lines += [f'migplan_last_run_reason{{reason="{c}"}} {int(c in codes)}' for _, c in REASONS]
    if m.gpu_changed_at:
        lines += ["# HELP migplan_gpu_last_change_timestamp_seconds Unix time migplan last changed this GPU's "
                  "layout.", "# TYPE migplan_gpu_last_change_timestamp_seconds gauge"]
        lines += [f"migplan_gpu_last_change_timestamp_seconds{_labels(host=h, gpu=str(i))} {_number(t)}"
                  for h, i, t in sorted(m.gpu_changed_at)]
    if m.at_risk:  # `mig_instance`, not `instance`: Prometheus gives every scraped series its target's `instance`
        lines += ["# HELP migplan_workload_at_risk_margin_bytes Memory an at-risk workload's instance has above "
                  "its observed peak (less than the headroom the plan wants).",
                  "# TYPE migplan_workload_at_risk_margin_bytes gauge"]
        lines += [f"migplan_workload_at_risk_margin_bytes"
                  f"{_labels(workload=w.workload, host=w.host, gpu=str(w.gpu), mig_instance=w.instance or 'whole')} "
                  f"{w.margin_mib * 1048576}" for w in sorted(m.at_risk, key=lambda w: (w.host, w.gpu, w.workload))]
    return "\n".join(lines) + "\n"


def _labels(**labels: str) -> str:
    """`{name="value",...}`, each value escaped as the text format wants (backslash, double quote, newline)."""
    esc = {k: v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") for k, v in labels.items()}
    return "{" + ",".join(f'{k}="{v}"' for k, v in esc.items()) + "}"
