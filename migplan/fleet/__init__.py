"""The fleet as observed, and the pure difference between two states.

  state.py     GpuState / FleetState: what each GPU is (observed or declared), fleet and per-GPU
               fingerprints, `changes` (what differs from the state a plan assumed)       pure
  diff.py      current -> target layout as typed `Action`s (`Op`, instance, GPU, reset)  pure
  snapshot.py  what discovery saw per host (DiscoveredHost/Gpu/Instance) and the snapshot
               document's dict form and strict parser                                      pure
  discover.py  discovery over an injected `CommandRunner` (one `SmiSession` per host)

May import: catalog, layout, inventory, smi, names, errors, yamldoc; discover.py also
`migplan.adapters` (the runner protocol, the nvidia-smi session, the host pool). Never paramiko,
pulp, typer or pynvml: transports are passed in.
"""
