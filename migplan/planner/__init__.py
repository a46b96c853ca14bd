"""The planner: right-sizing, a pattern integer program, mapping, validation and the plan document.

Pure: no files, clock, NVML, SSH or processes. The integer program is handed to an injected
`Solver` (`planner.milp.Solver`); the PuLP implementation lives in `migplan.adapters.solver`.
May import: model, catalog, profiles, names, errors, solvers, yamldoc
(parsing the plan, and `paused_gc` while planning). Never: adapters, commands, cli, pulp, paramiko, typer, pynvml.
"""

from migplan.model.gpu_plan import GpuPlan
from migplan.planner.demand import Policy, Weights
from migplan.planner.milp import Milp, Solver, SolveResult, SolveStatus
from migplan.planner.plan import PLAN_KIND, PLAN_VERSION, Plan, PlanError, parse_plan, plan_from_dict, plan_to_dict
from migplan.planner.planner import plan, plan_problem
from migplan.planner.problem import Problem, build_problem
from migplan.planner.validate import validate

__all__ = [
    "PLAN_KIND", "PLAN_VERSION", "GpuPlan", "Milp", "Plan", "PlanError", "Policy", "Problem", "SolveResult",
    "SolveStatus", "Solver", "Weights", "build_problem", "parse_plan", "plan", "plan_from_dict", "plan_problem",
    "plan_to_dict", "validate",
]
