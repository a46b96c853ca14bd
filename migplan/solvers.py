"""The names of the MILP back ends migplan can plan with (pure; nothing else here).

A module of its own so that `migplan.config` (which offers them as the choices of the `solver` setting)
need not import the planner package, whose `__init__` imports the whole planner (~50 ms of every
command's start-up; bench/startup.py). `migplan.planner.milp.SOLVERS` is this same tuple, and
`migplan.adapters.solver` implements each of them.
"""

SOLVERS = ("cbc", "highs")
