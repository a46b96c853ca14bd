"""Re-planning from cron: the decision whether a new plan is worth applying, and what it reports.

  policy.py    ReplanPolicy: thresholds, cool-down, maintenance windows (with their parser)     pure
  decide.py    Standing (now / planned), the hysteresis decision and its one-line explanation   pure
  metrics.py   the node_exporter textfile (Prometheus text format, # HELP / # TYPE)            pure
  schedule.py  the cron entry and systemd units `migplan schedule install` writes             pure

Pure: no files, clock, NVML, SSH or processes (the time is passed in). May import: planner (the plan
and its problem), model.state, errors. Never: adapters, commands, cli.
"""
