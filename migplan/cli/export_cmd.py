"""`migplan export gpu-operator PLAN`, `migplan export mig-parted PLAN --host H` (docs/export.md),
`migplan export slurm PLAN` (docs/slurm.md) and `migplan export vsphere PLAN` (docs/vsphere.md).

Exit codes: 0 written, 2 bad input (the plan, --existing, a name Kubernetes would refuse, a plan without vGPU
for vsphere).
The work is `migplan.commands.export`; this module parses options and renders.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from typing import Annotated

import typer

from migplan import documents, slurm, vsphere
from migplan import mig_parted as mp
from migplan.cli.options import CatalogOpt, ConfigOpt, choices
from migplan.cli.render import grid, handle_errors, info
from migplan.commands import export as run
from migplan.commands import vsphere as run_vsphere
from migplan.commands.context import build_context
from migplan.files import write_atomic
from migplan.text import printable

app = typer.Typer(help="Export a plan to NVIDIA's MIG tools (the GPU Operator's MIG manager, mig-parted), to Slurm "
                  "or, for VMs on vGPU, to vSphere.",
                  no_args_is_help=True)


class GpuOperatorOutput(str, Enum):
    yaml = "yaml"
    sh = "sh"
    json = "json"
    table = "table"


class MigPartedOutput(str, Enum):
    yaml = "yaml"
    json = "json"


class SlurmOutput(str, Enum):
    both = "both"
    slurm_conf = "slurm.conf"
    gres_conf = "gres.conf"
    json = "json"


class VsphereOutput(str, Enum):
    json = "json"
    yaml = "yaml"
    csv = "csv"


class GresConfMode(str, Enum):
    autodetect = "autodetect"
    files = "files"


class TypeStyle(str, Enum):
    nvidia = "nvidia"
    rounded = "rounded"


PlanArg = Annotated[str, typer.Argument(help="Plan document written by 'migplan propose --out'.", metavar="PLAN")]
OutFileOpt = Annotated[str | None, typer.Option("--out", help="Write here instead of stdout.",
                                                show_default=False, metavar="FILE")]


def _write(text: str, out: str | None, forbid: list[str]) -> None:
    if out:
        write_atomic(out, text, forbid=forbid)
        info(f"written to {out}")
    else:
        sys.stdout.write(text)


def _table(export: run.Export) -> str:
    rows = [[node, config, printable(mp.describe(export.configs[config]), 200)]
            for node, config in export.nodes]
    out = grid(rows, ["NODE", run.MIG_CONFIG_LABEL, "CONFIG"])
    checks = grid([[c.config, c.model, c.result.risk, printable(c.result.message, 300)] for c in export.checks],
                  ["CONFIG", "MODEL", "RISK", "CHECK"])
    return f"{out}\n\nConfigMap {export.namespace}/{export.name}: {len(export.configs)} config(s), " \
           f"{len(export.kept)} kept from --existing\n\n{checks}\n"


@app.command("gpu-operator")
@handle_errors
def gpu_operator(
    plan: PlanArg,
    existing: Annotated[str | None, typer.Option(
        "--existing", help="The ConfigMap the MIG manager uses now (YAML or JSON); its configs are kept.",
        show_default=False, metavar="FILE")] = None,
    name: Annotated[str | None, typer.Option(
        "--name", help=f"ConfigMap name [default: the --existing one's, else {run.DEFAULT_CONFIGMAP}].",
        show_default=False, metavar="NAME")] = None,
    namespace: Annotated[str | None, typer.Option("--namespace", "-n", help="Namespace of the GPU Operator "
                                                  f"[default: the --existing one's, else {run.DEFAULT_NAMESPACE}].",
                                                  show_default=False, metavar="NAMESPACE")] = None,
    output: Annotated[GpuOperatorOutput, typer.Option("-o", "--output", help="yaml (the manifest), sh (a kubectl "
                                                      "script), json or table.",
                                                      metavar=choices(GpuOperatorOutput))] = GpuOperatorOutput.yaml,
    out: OutFileOpt = None,
    config: ConfigOpt = None,
    catalog: CatalogOpt = None,
) -> None:
    """A ConfigMap of mig-parted configs (one per distinct node layout) and each node's nvidia.com/mig.config label."""
    ctx = build_context(config, catalog, None)
    export = run.export_gpu_operator(ctx, plan, existing=existing, name=name, namespace=namespace)
    info(f"note: {run.COUNTS_NOTE}")
    for w in export.warnings():
        info(printable(w, 400))
    fmt = output.value
    text = (run.manifest(export) if fmt == "yaml" else run.script(export) if fmt == "sh"
            else json.dumps(export.to_dict(), indent=2) + "\n" if fmt == "json" else _table(export))
    _write(text, out, [plan, *([existing] if existing else [])])


@app.command("mig-parted")
@handle_errors
def mig_parted(
    plan: PlanArg,
    host: Annotated[str, typer.Option("--host", help="The plan's host to export.", metavar="HOST")],
    config_name: Annotated[str | None, typer.Option("--config-name", "-c", help="Name of the config in the "
                                                    "file [default: migplan-<content hash>].",
                                                    show_default=False, metavar="NAME")] = None,
    output: Annotated[MigPartedOutput, typer.Option("-o", "--output", help="Output format.",
                                                    metavar=choices(MigPartedOutput))] = MigPartedOutput.yaml,
    out: OutFileOpt = None,
    config: ConfigOpt = None,
    catalog: CatalogOpt = None,
) -> None:
    """The config file 'nvidia-mig-parted apply -f FILE -c NAME' takes, for one host of the plan."""
    ctx = build_context(config, catalog, None)
    export = run.export_mig_parted(ctx, plan, host, config_name)
    info(f"note: {run.COUNTS_NOTE}")
    for c in export.checks:
        if c.result.risk != "none":
            info(f"{'note' if c.result.risk == 'order' else 'warning'}: {printable(c.result.message, 400)}")
    text = export.text() if output.value == "yaml" else json.dumps(export.to_dict(), indent=2) + "\n"
    _write(text, out, [plan])
    info(f"apply on {host}: nvidia-mig-parted apply -f {out or 'FILE'} -c {export.config}")


@app.command("slurm")
@handle_errors
def slurm_export(
    plan: PlanArg,
    host: Annotated[str | None, typer.Option("--host", help="Export this host of the plan only [default: every "
                                             "host].", show_default=False, metavar="HOST")] = None,
    gres_conf: Annotated[GresConfMode, typer.Option(
        "--gres-conf", help="gres.conf as AutoDetect=nvml (slurmd finds the MIG devices) or as explicit device "
        "files (needs --snapshot).", metavar=choices(GresConfMode))] = GresConfMode.autodetect,
    snapshot: Annotated[str | None, typer.Option(
        "--snapshot", help="A 'migplan discover' snapshot taken after the apply: the GPU and compute instance ids "
        "that --gres-conf files needs.", show_default=False, metavar="FILE")] = None,
    type_style: Annotated[TypeStyle, typer.Option(
        "--type-style", help="MIG types as NVIDIA names them (3g.40gb: Slurm 23.02.6 and later) or rounded "
        "(3g.39gb: Slurm 22.05 to 23.02.5).", metavar=choices(TypeStyle))] = TypeStyle.nvidia,
    gpu_type: Annotated[list[str] | None, typer.Option(
        "--gpu-type", help="A whole GPU's type per model, repeatable [default: the model id in lower case].",
        show_default=False, metavar="MODEL=TYPE")] = None,
    short_names: Annotated[bool, typer.Option(
        "--short-names", help="Slurm node names are the host names up to the first dot.")] = False,
    slurm_conf: Annotated[str | None, typer.Option(
        "--slurm-conf", help="A slurm.conf to rewrite with each node's Gres= (-o slurm.conf prints the whole "
        "file).", show_default=False, metavar="FILE")] = None,
    output: Annotated[SlurmOutput, typer.Option("-o", "--output", help="Both files' text, one of them, or json.",
                                                metavar=choices(SlurmOutput))] = SlurmOutput.both,
    out: OutFileOpt = None,
    config: ConfigOpt = None,
    catalog: CatalogOpt = None,
) -> None:
    """Each node's Gres= for slurm.conf and its gres.conf (docs/slurm.md)."""
    ctx = build_context(config, catalog, None)
    export, rewritten = run.export_slurm(ctx, plan, host=host, mode=gres_conf.value, style=type_style.value,
                                         short=short_names, gpu_types=gpu_type or (), snapshot=snapshot,
                                         slurm_conf=slurm_conf)
    for note in export.notes:
        info(f"note: {printable(note, 400)}")
    nodes = rewritten if rewritten is not None else slurm.slurm_conf_lines(export)
    fmt = output.value
    text = (nodes if fmt == "slurm.conf" else slurm.gres_conf(export) if fmt == "gres.conf"
            else json.dumps(export.to_dict(), indent=2) + "\n" if fmt == "json"
            else f"{nodes}\n{slurm.gres_conf(export)}")
    _write(text, out, [f for f in (plan, snapshot, slurm_conf) if f])


@app.command("vsphere")
@handle_errors
def vsphere_export(
    plan: PlanArg,
    host: Annotated[str | None, typer.Option("--host", help="Export this ESXi host of the plan only [default: every "
                                             "vGPU host].", show_default=False, metavar="HOST")] = None,
    profile_prefix: Annotated[str, typer.Option(
        "--profile-prefix", help="How vSphere names the vGPU profiles: grid_a100-3-20c or, on newer vGPU managers, "
        "nvidia_a100-3-20c (check what your hosts offer).",
        metavar="|".join(vsphere.PROFILE_PREFIXES))] = vsphere.DEFAULT_PREFIX,
    output: Annotated[VsphereOutput, typer.Option("-o", "--output", help="json or yaml (per host and GPU: the GPU's "
                                                  "setting and each VM's profile), or csv (VMName,VGPUProfile,Host,GPU "
                                                  "for PowerShell's Import-Csv).",
                                                  metavar=choices(VsphereOutput))] = VsphereOutput.json,
    out: OutFileOpt = None,
    config: ConfigOpt = None,
    catalog: CatalogOpt = None,
) -> None:
    """Each VM's vGPU profile per ESXi host and GPU, and each GPU's setting (docs/vsphere.md); calls no vSphere."""
    ctx = build_context(config, catalog, None)
    export = run_vsphere.export_vsphere(ctx, plan, prefix=profile_prefix, host=host)
    for note in export.notes:
        info(f"note: {printable(note, 400)}")
    fmt = output.value
    text = (vsphere.csv_text(export) if fmt == "csv" else documents.dump(export.to_dict(), "yaml") if fmt == "yaml"
            else json.dumps(export.to_dict(), indent=2) + "\n")
    _write(text, out, [plan])
