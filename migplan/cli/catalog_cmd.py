"""`migplan catalog ...`: the GPU models migplan knows and the layouts they allow."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from migplan.catalog import GpuModel, VgpuModel, builtin_vgpu_catalog
from migplan.catalog.layout import Layout, check_layout, enumerate_layouts, free_placements, picture, used_compute
from migplan.cli.options import CatalogOpt, ConfigOpt, OutputOpt
from migplan.cli.render import emit, grid, handle_errors
from migplan.commands.context import build_context

app = typer.Typer(help="GPU models, their MIG profiles and valid layouts.", no_args_is_help=True)


def model_summary(m: GpuModel) -> dict[str, Any]:
    return {
        "id": m.id,
        "architecture": m.architecture,
        "memory_mib": m.memory_mib,
        "memory_slices": m.memory_slices,
        "compute_slices": m.compute_slices,
        "sm_count": m.sm_total,
        "profiles": [p.name for p in m.profiles],
        "verified": m.verified,
        "aliases": list(m.aliases),
    }


def model_detail(m: GpuModel) -> dict[str, Any]:
    out = model_summary(m)
    out.update({
        "smi_names": list(m.smi_names),
        "pci_device_ids": list(m.pci_device_ids),
        "confidence": m.confidence,
        "source": m.source,
        "profiles": [{
            "name": p.name, "id": p.id, "compute_slices": p.compute_slices, "memory_slices": p.memory_slices,
            "memory_mib": p.memory_mib, "max_count": p.max_count, "sm_count": p.sm_count,
            "starts": list(p.starts), "media_extensions": p.media_extensions,
            "ci_default_id": p.ci_default_id, "confidence": p.confidence,
        } for p in m.profiles],
    })
    return out


@app.command("list")
@handle_errors
def list_models(output: OutputOpt = None, config: ConfigOpt = None, catalog: CatalogOpt = None) -> None:
    """List the GPU models in the catalog."""
    ctx = build_context(config, catalog, output)
    data = [model_summary(m) for m in ctx.catalog]

    def table() -> str:
        rows = [[d["id"], d["architecture"], d["memory_mib"], d["compute_slices"], d["memory_slices"],
                 " ".join(str(p) for p in d["profiles"]), "yes" if d["verified"] else "NO (unverified)"] for d in data]
        return grid(rows, ["MODEL", "ARCH", "MIG MiB", "COMPUTE", "MEMORY", "PROFILES", "VERIFIED"])

    emit(data, ctx.output, table)


@app.command("show")
@handle_errors
def show(model: Annotated[str, typer.Argument(help="Model id or alias, e.g. A100-SXM4-40GB.", metavar="MODEL")],
         output: OutputOpt = None, config: ConfigOpt = None, catalog: CatalogOpt = None) -> None:
    """Show one model's MIG profiles and placements."""
    ctx = build_context(config, catalog, output)
    m = ctx.catalog.get(model)
    data = model_detail(m)

    def table() -> str:
        head = (f"{m.id} ({m.architecture}): {m.compute_slices} compute slices, {m.memory_slices} memory "
                f"slices, {m.memory_mib} MiB under MIG, {m.sm_total} SMs"
                + ("" if m.verified else "\nWARNING: unverified model; values partly inferred (see 'confidence')"))
        rows = [[p["name"], p["id"], p["compute_slices"], p["memory_slices"], p["memory_mib"], p["max_count"],
                 p["sm_count"], "{" + ",".join(map(str, p["starts"])) + "}", p["confidence"]]
                for p in data["profiles"]]
        return head + "\n\n" + grid(rows, ["PROFILE", "ID", "COMPUTE", "MEMORY", "MiB", "MAX", "SM", "STARTS",
                                           "CONFIDENCE"])

    emit(data, ctx.output, table)


@app.command("layouts")
@handle_errors
def layouts(model: Annotated[str, typer.Argument(help="Model id or alias, e.g. A100-SXM4-40GB.", metavar="MODEL")],
            maximal: Annotated[bool, typer.Option("--maximal", help="Only layouts where nothing more fits.")] = False,
            profiles: Annotated[str | None, typer.Option(
                "--profiles", help="Comma-separated profiles to build from [default: all without +me].",
                metavar="PROFILE,...")] = None,
            output: OutputOpt = None, config: ConfigOpt = None, catalog: CatalogOpt = None) -> None:
    """Enumerate the valid layouts of a model (explicit placements)."""
    ctx = build_context(config, catalog, output)
    m = ctx.catalog.get(model)
    chosen = [p.strip() for p in profiles.split(",") if p.strip()] if profiles else None
    if chosen:
        for p in chosen:
            m.profile(p)  # a clear error for an unknown profile
    found = enumerate_layouts(m, profiles=chosen, maximal=maximal)
    data: list[dict[str, Any]] = [
        {"instances": lay.as_list(), "compute_slices": used_compute(m, lay), "picture": picture(m, lay)}
        for lay in found]

    def table() -> str:
        rows = [[i + 1, picture(m, lay), used_compute(m, lay), str(lay)] for i, lay in enumerate(found)]
        kind = "maximal layouts" if maximal else "valid layouts"
        return grid(rows, ["#", "SLOTS", "COMPUTE", "INSTANCES"]) + f"\n\n{len(data)} {kind} of {m.id}"

    emit(data, ctx.output, table)


@app.command("check")
@handle_errors
def check(model: Annotated[str, typer.Argument(help="Model id or alias.", metavar="MODEL")],
          instances: Annotated[list[str], typer.Argument(help="Instances as PROFILE@START, e.g. 3g.20gb@4.",
                                                         metavar="PROFILE@START")],
          output: OutputOpt = None, config: ConfigOpt = None, catalog: CatalogOpt = None) -> None:
    """Check a layout against NVIDIA's rules and show what could still be added, and where."""
    ctx = build_context(config, catalog, output)
    m = ctx.catalog.get(model)
    lay = Layout.parse(instances)
    conflicts = check_layout(m, lay)
    free = [] if conflicts else free_placements(m, lay)
    data = {
        "model": m.id, "instances": lay.as_list(), "valid": not conflicts,
        "conflicts": [{"rule": c.rule, "message": c.message, "instances": [str(i) for i in c.instances]}
                      for c in conflicts],
        "free": [str(i) for i in free],
    }

    def table() -> str:
        if conflicts:
            return "invalid layout:\n" + "\n".join(f"  [{c.rule}] {c.message}" for c in conflicts)
        by_profile: dict[str, list[str]] = {}
        for i in free:
            by_profile.setdefault(i.profile, []).append(str(i.start))
        rows = [[p, "{" + ",".join(s) + "}"] for p, s in by_profile.items()]
        return (f"{picture(m, lay)}  valid, {used_compute(m, lay)}/{m.compute_slices} compute slices used\n\n"
                + (grid(rows, ["CAN ADD", "AT START"]) if rows else "nothing more fits"))

    emit(data, ctx.output, table)
    if conflicts:
        raise typer.Exit(1)


def vgpu_detail(m: VgpuModel) -> dict[str, Any]:
    return {
        "id": m.id, "board": m.board, "product": m.product, "gpu": m.gpu, "architecture": m.architecture,
        "host_vgpu_mode": m.host_vgpu_mode, "gpus_per_board": m.gpus_per_board,
        "pci_device_ids": list(m.pci_device_ids),
        "frame_buffer_mib": m.frame_buffer_mib, "modes": list(m.modes), "source": m.source, "note": m.note,
        "types": [{
            "name": t.name, "id": t.type_id, "series": t.series, "frame_buffer_mib": t.frame_buffer_mib,
            "max": t.max_count, "max_mixed": t.max_mixed or None, "mig_profile": t.mig_profile or None,
            "confidence": t.confidence, "source": t.source or None, "note": t.note or None,
        } for t in m.types],
    }


@app.command("vgpu")
@handle_errors
def vgpu(model: Annotated[str | None, typer.Argument(
            help="A vGPU board (A100-PCIE-40GB, or its type prefix A100), or a catalog model (A100-SXM4-40GB: "
                 "each of its boards).", metavar="[MODEL]")] = None,
         output: OutputOpt = None, config: ConfigOpt = None, catalog: CatalogOpt = None) -> None:
    """List the vGPU boards migplan knows, or one board's vGPU types: frame buffer, most per GPU in each mode, and
    the MIG profile of each MIG-backed type (docs/vgpu.md)."""
    ctx = build_context(config, catalog, output)
    vcat = builtin_vgpu_catalog()
    if model is None:
        data: list[dict[str, Any]] = [vgpu_detail(m) for m in vcat]

        def table() -> str:
            rows = [[d["id"], d["board"], d["gpu"], d["architecture"], d["host_vgpu_mode"], d["frame_buffer_mib"],
                     len(d["types"]), " ".join(d["modes"])] for d in data]
            return grid(rows, ["BOARD", "PREFIX", "GPU", "ARCH", "HOST MODE", "FB MiB", "TYPES", "MODES"])

        emit(data, ctx.output, table)
        return
    boards = vcat.find(model)
    if not boards:
        vcat.get(model)  # the error, with the boards there are
    data = [vgpu_detail(m) for m in boards]

    def detail() -> str:
        parts = []
        for m, d in zip(boards, data, strict=True):
            head = (f"{m.id} ({m.product}, type prefix {m.board}): GPU {m.gpu}, {m.architecture}, {m.host_vgpu_mode}, "
                    f"{m.frame_buffer_mib} MiB" + (f" per GPU, {m.gpus_per_board} GPUs per board"
                                                    if m.gpus_per_board > 1 else "")
                    + f"\nmodes: {', '.join(m.modes)}\nsource: {m.source}" + (f"\nnote: {m.note}" if m.note else ""))
            rows = [[t["name"], "" if t["id"] is None else t["id"], t["series"], t["frame_buffer_mib"], t["max"],
                     t["max_mixed"] or "", t["mig_profile"] or "", t["confidence"]] for t in d["types"]]
            notes = [f"  {t['name']}: {t['note']}" for t in d["types"] if t["note"]]
            parts.append(head + "\n\n" + grid(rows, ["TYPE", "ID", "SERIES", "FB MiB", "MAX", "MAX MIXED",
                                                       "MIG PROFILE", "CONFIDENCE"])
                         + ("\n\nnotes:\n" + "\n".join(notes) if notes else ""))
        return "\n\n".join(parts)

    emit(data, ctx.output, detail)
