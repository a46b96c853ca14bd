"""The planner: right-sizing, a pattern integer program, mapping, validation and the plan document.

Pure: no files, clock, NVML, SSH or processes. The only solver library import is in `solver.py`.
"""

from migplan.planner.demand import Policy, Weights
from migplan.planner.diff import Action, diff
from migplan.planner.milp import Milp, Solver, SolveResult, SolveStatus
from migplan.planner.plan import PLAN_VERSION, Plan, PlanError, plan_from_dict, plan_to_dict
from migplan.planner.planner import plan, plan_problem
from migplan.planner.problem import Problem, build_problem
from migplan.planner.validate import validate

__all__ = [
    "PLAN_VERSION", "Action", "Milp", "Plan", "PlanError", "Policy", "Problem", "SolveResult", "SolveStatus",
    "Solver", "Weights", "build_problem", "diff", "plan", "plan_from_dict", "plan_problem", "plan_to_dict",
    "validate",
]
