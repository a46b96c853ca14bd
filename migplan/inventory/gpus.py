"""The GPUs a host declares: its `gpus` setting (a list of GPUs, or `{model, count}` for that many
of one model) and the GPU index lists (`reserved_gpus`, `excluded_gpus`).

A GPU's index is 0..`names.MAX_GPU_INDEX` (a host has at most `names.MAX_GPUS_PER_HOST` GPUs); its
model is one the catalog knows; its layout, when given, is valid on that model.
"""

from __future__ import annotations

import functools

from migplan import names
from migplan.catalog import Catalog
from migplan.catalog.geometry import GpuModel
from migplan.catalog.layout import Conflict, Instance, Layout, check_layout
from migplan.errors import CatalogError, InputError
from migplan.inventory.model import DeclaredGpu
from migplan.yamldoc import Node

_GPU_RANGE = f"0..{names.MAX_GPU_INDEX}"


def _gpu_index(node: Node) -> int:
    i = node.int(minimum=0)
    if i > names.MAX_GPU_INDEX:
        node.fail(f"GPU index {i} is out of range {_GPU_RANGE}",
                  hint=f"a host has at most {names.MAX_GPUS_PER_HOST} GPUs, numbered from 0 as nvidia-smi lists them")
    return i



def gpu_indices(node: Node) -> tuple[int, ...]:
    out: list[int] = []
    for n in node.list():
        i = _gpu_index(n)
        if i in out:
            n.fail(f"GPU index {i} listed twice")
        out.append(i)
    return tuple(out)



@functools.lru_cache(maxsize=4096)
def _layout_conflicts(model: GpuModel, layout: Layout) -> tuple[Conflict, ...]:
    """`check_layout`, once per model and layout: a large inventory repeats a few layouts thousands of times
    (a third of reading 7,000 GPUs went to checking them again; bench/large_inputs.py)."""
    return tuple(check_layout(model, layout))


# Layouts already read, by their entries' texts: a large inventory writes a few layouts thousands of times,
# and each entry was parsed again (Layouts and Instances are immutable, so GPUs may share them).
_LAYOUTS: dict[tuple[str, ...], Layout] = {}



_GPU_KEYS = {"index", "model", "uuid", "mig", "layout"}
_GPU_REQUIRED = {"index", "model"}


def _gpu(node: Node, catalog: Catalog) -> DeclaredGpu:
    f = node.entries(_GPU_KEYS, _GPU_REQUIRED)
    try:
        model = catalog.get(f.str("model"))
    except CatalogError as err:
        f.node("model").fail(err.message, hint=err.hint)
    uuid = None
    if "uuid" in f:
        uuid = f.str("uuid")
        if not names.GPU_UUID.fullmatch(uuid):
            f.node("uuid").fail(f"{uuid!r} is not a GPU UUID (GPU-xxxxxxxx-...)")
    mig = f.bool("mig") if "mig" in f else None
    layout = None
    if "layout" in f:
        if mig is False:
            f.node("layout").fail("a GPU with 'mig: false' has no layout", hint="remove 'layout' or set 'mig: true'")
        written = f.value("layout")
        if isinstance(written, list) and all(type(t) is str for t in written):
            texts = tuple(written)
        else:  # not a list, or entries that are no strings: as the Nodes read them (or refuse them)
            texts = tuple(n.str() for n in f.node("layout").list())
        layout = _LAYOUTS.get(texts)
        if layout is None:
            insts = []
            for n, text in zip(f.node("layout").list(), texts, strict=True):
                try:
                    insts.append(Instance.parse(text))
                except InputError as err:
                    n.fail(err.message)
            layout = Layout.of(insts)
            if len(_LAYOUTS) < 10_000:
                _LAYOUTS[texts] = layout
        conflicts = _layout_conflicts(model, layout)
        if conflicts:
            f.node("layout").fail("invalid layout: " + "; ".join(c.message for c in conflicts),
                                  hint=f"list valid layouts with 'migplan catalog layouts {model.id}'")
        mig = True
    index = f.value("index")
    if not (type(index) is int and 0 <= index <= names.MAX_GPU_INDEX):  # else as the Node reads it (or refuses it)
        index = _gpu_index(f.node("index"))
    return DeclaredGpu(index=index, model=model.id, uuid=uuid, mig_enabled=mig, layout=layout)



def declared_gpus(node: Node, catalog: Catalog) -> list[DeclaredGpu]:
    if node.is_map:  # shorthand: {model: X, count: N}
        f = node.fields({"model", "count", "mig"}, {"model", "count"})
        try:
            model = catalog.get(f["model"].str()).id
        except CatalogError as err:
            f["model"].fail(err.message, hint=err.hint)
        count = f["count"].int(minimum=1)
        if count > names.MAX_GPUS_PER_HOST:
            f["count"].fail(f"{count} GPUs is more than the {names.MAX_GPUS_PER_HOST} a host can have",
                            hint="count is the number of GPUs in one host")
        mig = f["mig"].bool() if "mig" in f else None  # the same MIG mode for every one of them
        return [DeclaredGpu(index=i, model=model, mig_enabled=mig)
                for i in range(count)]
    gpus: list[DeclaredGpu] = []
    seen: dict[int, int] = {}
    for n in node.list():
        g = _gpu(n, catalog)
        if g.index in seen:
            n.fail(f"GPU index {g.index} listed twice (first at line {seen[g.index]})")
        seen[g.index] = n.line
        gpus.append(g)
    return sorted(gpus, key=lambda g: g.index)
