"""`migplan export gpu-operator PLAN` and `migplan export mig-parted PLAN --host H` (docs/export.md).

Exit codes: 0 written, 2 bad input (the plan, --existing, a name Kubernetes would refuse).
The work is `migplan.commands.export`; this module parses options and renders.
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from typing import Annotated

import typer

from migplan import mig_parted as mp
from migplan.cli.options import CatalogOpt, ConfigOpt, choices
from migplan.cli.render import grid, handle_errors, info
from migplan.commands import export as run
from migplan.commands.context import build_context
from migplan.files import write_atomic
from migplan.text import printable

app = typer.Typer(help="Export a plan to NVIDIA's MIG tools: the GPU Operator's MIG manager, or mig-parted.",
                  no_args_is_help=True)


class GpuOperatorOutput(str, Enum):
    yaml = "yaml"
    sh = "sh"
    json = "json"
    table = "table"


class MigPartedOutput(str, Enum):
    yaml = "yaml"
    json = "json"


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
