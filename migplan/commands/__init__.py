"""What each command does, as plain functions: settings in, results out, progress through a callback.

The typer modules in `migplan.cli` only parse options, call one function here and render what it
returns; a cron-driven `replan` (or any other caller) uses the same functions without typer.

  context.py   Context: the config file, the catalog and the output format, resolved once
  propose.py   policy and solver settings merged (flag > config > default), state chosen
               (snapshot or inventory), the plan made and written
  fleet.py     host selection, discovery, status and catalog learning over SSH
  apply.py     a plan applied to every host in parallel; hooks, env files, the last-applied record
  collect.py   `collect`: samples from NVML on this host (cron) or from every host over SSH
  collect_prometheus.py  samples from a Prometheus that scrapes dcgm-exporter, pass by pass
  history.py   profiles from history (CSV, on-host store, Prometheus) and backtests of a sizing rule
  sizing.py    `sizing: auto`: the rule `backtest --sweep` recommends, calibrated at most once per cool-down and
               kept in the state directory, for propose and replan
  profiles_dir.py  the profiles directory writer (one document per host), below collect and history
  pods.py      `--pods FILE|-`: the pods' demand (migplan/pods.py) merged into the profiles propose and replan plan
  replan.py    one unattended run: lock, read, plan, decide, apply when worth it, record
  schedule.py  the cron entry and systemd units, written or removed idempotently
  export.py    a plan as the mig-parted configs NVIDIA's tools apply
  vsphere.py   `export vsphere`: a plan's VMs per ESXi host and GPU (migplan/vsphere.py)
  vgpu_plan.py hypervisor hosts in propose and replan: their GPUs out of the MIG plan, the VMs planned as vGPUs
  vms.py       VM workloads listed as not planned where no hypervisor host is
  report.py    the plan as one self-contained HTML page
  results.py   per-host outcomes (ok, partial, failed) and the exit code they add up to

May import everything in migplan except `migplan.cli`; never typer.
"""

from collections.abc import Callable

DEFAULT_PARALLEL = 8  # hosts contacted at the same time (light to import: the CLI reads it for --help)

Report = Callable[[str], None]
"""Progress and notes for people (one line each); the CLI prints them on stderr."""


def quiet(_message: str) -> None:
    """A `Report` that drops everything."""
