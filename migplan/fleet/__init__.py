"""The fleet as discovered and changed: discovery, apply, repair (the types they share with the planner are
in `migplan.model`).

  snapshot.py  what discovery saw per host (DiscoveredHost/Gpu/Instance) and the snapshot
               document's dict form and strict parser                                      pure
  host_table.py a GPU's own -lgip/-lgipp table: differences from the catalog, the model built
               from it for planning                                                        pure
  steps.py     `to_commands`: a GPU's actions as the exact nvidia-smi commands, batched, in
               order; the one place MIG-changing commands are built                         pure
  discover.py  discovery over an injected `CommandRunner` (one `SmiSession` per host)
  vgpu_discover.py the vGPUs of a vGPU host (nvidia-smi vgpu, SR-IOV VFs, mdev devices), for discover.py
  vgpu_apply.py apply a plan's vGPU part on one KVM host: lock, re-read, refuse stale GPUs, act
               (smi/vgpu_commands.py), read back, roll back
  vgpu_state.py the hypervisor hosts' GPUs as the vGPU planner sees them (model.vgpu), from a snapshot
               or the inventory's `vgpu` setting                                            pure
  apply.py     apply one host's part of a plan: re-read, refuse stale GPUs, checkpoint, change,
               verify, roll back (over an injected runner); what it uses:
  outcomes.py    the results, options and move events of an apply
  gpu_change.py  one GPU's change: its actions run through `to_commands`, verify, roll back
  moves.py       the order of a host's changes: the plan's moves, then the rest of each GPU
  repair.py      the in-flight record of an apply and the repair of one left half-done
  devices.py     the MIG devices (UUIDs) read after an apply

May import: model, catalog, inventory, smi, names, errors, yamldoc, files, text, adapters (discover.py,
vgpu_discover.py and apply.py with the modules it uses: the runner protocol, the nvidia-smi session, the host
pool), history (vgpu_state.py: a running VM's workload name, as `collect`
gives it). Never paramiko, pulp, typer or pynvml: transports are passed in.
"""
