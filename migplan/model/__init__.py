"""The model: the types observed and desired state share, so that the difference between them is a pure function.

  state.py     GpuState / FleetState: what each GPU is (observed or declared), fleet and per-GPU
               fingerprints, `changes` (what differs from the state a plan assumed)
  diff.py      current -> target layout as typed `Action`s (`Op`, instance, GPU, reset)
  gpu_plan.py  a plan's entries: `GpuPlan`, `WorkloadPlan`, and its migration (`Endpoint`, `Migration`)

Pure: no files, clock, processes or network. It sits below both the planner (which writes these types)
and the fleet code (which applies them), so neither imports the other.
May import: catalog, inventory, names, errors.
"""
