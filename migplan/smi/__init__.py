"""nvidia-smi: argv builders, output parsers, typed errors and catalog learning (pure, no I/O).

`vgpu.py` (`nvidia-smi vgpu` and its `-q`, `-s`, `-c`) and `sysfs.py` (a vGPU host's sysfs reads with `ls`,
`readlink`, `cat`) are imported as modules, not re-exported here (docs/vgpu.md, "Discovery").

Facts: docs/nvidia-smi.md, "Facts we rely on" (a bare §n in these modules is a section there), and
docs/mig-geometry.md. Running the commands is `migplan.adapters.smi_session`'s job, not this package's.

May import: catalog, errors, names, text, yamldoc (parsing text only). Never adapters, fleet,
planner, commands or cli.
"""

from migplan.catalog.writer import render_catalog_yaml
from migplan.smi.commands import (
    APP_FIELDS,
    GPU_FIELDS,
    NVIDIA_SMI,
    create_compute_instances,
    create_gpu_instances,
    create_instances_for,
    destroy_compute_instances,
    destroy_gpu_instances,
    list_compute_instances,
    list_gi_placements,
    list_gi_profiles,
    list_gpu_instances,
    list_gpus,
    query_compute_apps,
    query_driver_versions,
    query_gpus,
    reset_gpu,
    set_mig_mode,
)
from migplan.smi.errors import (
    InsufficientPermissionsError,
    InsufficientResourcesError,
    InUseError,
    InvalidArgumentError,
    MigDisabledError,
    NotFoundError,
    NotSupportedError,
    SmiCommandError,
    SmiError,
    SmiParseError,
    classify_failure,
)
from migplan.smi.learn import learn_model
from migplan.smi.lines import (
    parse_actions,
    parse_compute_apps,
    parse_csv,
    parse_driver_versions,
    parse_gi_placements,
    parse_list_gpus,
    parse_query_gpus,
)
from migplan.smi.rows import (
    ComputeApp,
    ComputeInstanceRow,
    CreatedComputeInstance,
    CreatedGpuInstance,
    Destroyed,
    GpuInstanceRow,
    GpuListing,
    GpuQueryRow,
    MigDevice,
    PlacementRow,
    ProfileRow,
)
from migplan.smi.tables import layouts_of, parse_compute_instances, parse_gi_profiles, parse_gpu_instances

__all__ = [
    "NVIDIA_SMI",
    "APP_FIELDS", "GPU_FIELDS", "ComputeApp", "ComputeInstanceRow", "CreatedComputeInstance", "CreatedGpuInstance",
    "Destroyed", "GpuQueryRow", "GpuInstanceRow", "GpuListing", "InUseError", "InsufficientPermissionsError",
    "InsufficientResourcesError", "InvalidArgumentError", "MigDevice", "MigDisabledError", "NotFoundError",
    "NotSupportedError", "PlacementRow", "ProfileRow", "SmiCommandError", "SmiError", "SmiParseError",
    "classify_failure", "create_compute_instances", "create_gpu_instances", "create_instances_for",
    "destroy_compute_instances", "destroy_gpu_instances", "layouts_of", "learn_model", "list_compute_instances",
    "list_gi_placements", "list_gi_profiles", "list_gpu_instances", "list_gpus", "parse_actions",
    "parse_compute_apps", "parse_csv",
    "parse_compute_instances", "parse_gi_placements", "parse_gi_profiles", "parse_gpu_instances", "parse_list_gpus",
    "parse_query_gpus", "query_compute_apps",
    "query_driver_versions", "parse_driver_versions", "query_gpus", "render_catalog_yaml", "reset_gpu", "set_mig_mode",
]
