"""`migplan export vsphere PLAN`: a plan's vGPU part per ESXi host and VM, for the operator's own vSphere tooling
(migplan.vsphere; docs/vsphere.md). Nothing here talks to vSphere."""

from __future__ import annotations

from pathlib import Path

from migplan import documents, vsphere
from migplan.catalog import builtin_vgpu_catalog
from migplan.commands.context import Context
from migplan.errors import InputError

NO_VGPU_HINT = ("plan VM workloads (kind: vm) on vGPU hosts with 'migplan propose --out PLAN' (docs/vgpu.md); "
                "a plan without them has nothing for vSphere")


def export_vsphere(ctx: Context, plan_path: str, *, prefix: str = vsphere.DEFAULT_PREFIX,
                   host: str | None = None) -> vsphere.VsphereExport:
    """The vSphere export of a plan file (read as strictly as apply reads it). A plan without a `vgpu` section is
    refused (InputError: exit 2)."""
    plan = documents.load_plan(Path(plan_path), ctx.catalog)
    if plan.vgpu is None:
        raise InputError(f"{plan_path}: the plan has no 'vgpu' section (no VM on vGPU was planned)", hint=NO_VGPU_HINT)
    return vsphere.build(plan.vgpu, builtin_vgpu_catalog(), prefix=prefix, plan_fingerprint=plan.fingerprint,
                         host=host)
