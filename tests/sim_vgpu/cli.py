"""Entry point of the bin/ wrappers: `python3 cli.py PROGRAM ARGS` (nvidia-smi, tee, cat, sriov-manage, vgpu-sim).

It puts tests/ on sys.path so that the vGPU simulator and the MIG simulator under it import as the packages
`sim_vgpu` and `sim`, as they do under pytest. Nothing here imports migplan.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sim_vgpu.vgpu_sim import main

if __name__ == "__main__":
    sys.exit(main())
