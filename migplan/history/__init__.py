"""Workload history: the samples every source yields, and what is computed from them.

  samples.py   `Sample`: one measurement of one workload at one time, the one type that the on-host
               store, CSV import and Prometheus all yield, and that profiles build and backtest read  pure
  prom_series.py  Prometheus (dcgm-exporter, nvidia_gpu_prometheus_exporter): PromQL, time chunks under the
               11,000-point limit, `query_range` JSON parsed as untrusted input, labels mapped to `Sample`s
  csv_series.py  the documented CSV time series (profiles import): lines (bytes) in, `Sample`s out, bad rows
               counted and listed with their line numbers (`CsvStats`)
  rollup.py    samples over a window -> profiles documents (exact nearest-rank percentiles in bounded memory,
               compute as a share of the whole GPU or unknown, places, few-sample notes)
  identity.py  which workload a GPU process is: MIGPLAN_WORKLOAD, user rules, Kubernetes pod (cgroup path),
               container, systemd unit, else the executable (facts from /proc in, a workload name out)
  backtest.py  sizing rules compared: size from a training window with the planner, replay the test window
               (OOM samples and minutes, unused memory, compute slices short, GPUs used)
  series.py    a history held in memory, each workload's samples in time order (28 bytes a sample), cut into
               windows by binary search; rollup.rollup_store rolls a window up from it in bulk
  sweep.py     rule families over a grid at rolling-origin split points: per rule OOMs and GPUs (mean, worst),
               the frontier, the cheapest rule meeting a target, the correlated-burst indicator

Pure: no files, clock, NVML, SQLite, HTTP or processes; the stores and sources that read the outside
world live in `migplan.adapters` and hand `Sample`s in. May import: names, errors, text, catalog,
model, profiles, planner (sizing policy; the backtest plans). Never: adapters, commands, cli, pynvml,
paramiko, pulp, typer.
"""
