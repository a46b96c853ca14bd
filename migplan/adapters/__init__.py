"""The outside world, one small module per system, each passed into the code that needs it.

  runner.py       CommandRunner protocol, LocalRunner, transport errors, `command_line` quoting
  ssh.py          SSH transport (the only paramiko import): SshFleet, SshRunner, ssh_config
  known_hosts.py  OpenSSH's known_hosts rules for host-key verification
  pool.py         one piece of work per host on a bounded thread pool
  smi_session.py  nvidia-smi over a runner: builders from `migplan.smi`, typed errors
  solver.py       the MILP solver (the only pulp import): CBC as a child process, HiGHS in-process
  kubectl.py      Kubernetes through kubectl (the only place that runs it): validated argv, timeouts,
                  answers parsed as untrusted JSON, errors by reason (forbidden, not found, conflict...)

May import: errors, names, text, files, inventory, smi, history (the samples and series it
stores and reads), planner.milp (the solver's interface).
Never commands or cli.
"""
