"""Applying a plan through NVIDIA's GPU Operator: the pure decisions (docs/kubernetes.md, "Applying through
the GPU Operator"). The cluster is read and written by `migplan.adapters.kubectl`; the run itself is
`migplan.commands.gpu_operator`.

  objects.py   nodes and pods from kubectl's JSON, read as untrusted data (NodeView, PodView)
  rollout.py   per node: unchanged, refused (changed since the plan), skipped (busy, the MIG manager at
               work) or to change, with the drain it needs; the capacity the device plugin must
               advertise afterwards; what a `nvidia.com/mig.config.state` value means
  holds.py     what `replan --via gpu-operator` keeps as it is (the MIG manager at work or failed, cordoned, not
               Ready, busy without consent), and planned changes that are none to the MIG manager (instances
               moved where the labels cannot tell) or that the node's MIG strategy does not advertise

Pure: no files, processes or clock. May import: errors, text, catalog, model, inventory.
"""
