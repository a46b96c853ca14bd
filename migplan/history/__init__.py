"""Workload history: the samples every source yields, and what is computed from them.

  samples.py   `Sample`: one measurement of one workload at one time, the one type that the on-host
               store, CSV import and Prometheus all yield, and that profiles build and backtest read  pure

Pure: no files, clock, NVML, SQLite, HTTP or processes; the stores and sources that read the outside
world live in `migplan.adapters` and hand `Sample`s in. May import: names, errors, text, catalog,
profiles, planner (sizing policy). Never: adapters, commands, cli, pynvml, paramiko, pulp, typer.
"""
