"""The architecture rules, checked on the source (README, "Architecture").

* every module imports on its own;
* the import graph has no cycle, between modules or between packages, counting every import: at the top,
  inside functions (lazy), under `if TYPE_CHECKING`, relative or absolute;
* each package's `__init__` says what it holds, and its "May import:" line names exactly the migplan
  packages and modules its modules import (checked against the graph both ways: nothing undeclared, nothing
  declared that is not imported);
* the pure core touches no file, process, socket, clock or terminal: no such import, no call to
  `open`/`print`/`input`/`eval`/`exec`, no `.now()`/`.today()`;
* layers only import downwards: the core never reaches adapters, commands, documents or the CLI, not even
  through another module; adapters never import commands or the CLI; nothing but the CLI imports typer or
  `migplan.cli`;
* each outside library has exactly one home (paramiko, pulp, pynvml, subprocess, ansible).

The graph is built from the source text (`import_graph`), so the rules are shown to fail on a tree with a
planted cycle or an undeclared import (the `planted` tests), not only to pass on this one.
"""

from __future__ import annotations

import ast
import functools
import importlib
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

import migplan

PKG = Path(migplan.__file__).resolve().parent

CORE = ("migplan.names", "migplan.text", "migplan.errors", "migplan.catalog.geometry", "migplan.catalog.catalog",
        "migplan.catalog.layout", "migplan.catalog.vgpu", "migplan.model", "migplan.fleet.snapshot",
        "migplan.fleet.host_table", "migplan.pods", "migplan.fleet.steps", "migplan.smi", "migplan.planner",
        "migplan.history", "migplan.mig_parted", "migplan.slurm", "migplan.inventory.k8s_nodes",
        "migplan.host_patterns", "migplan.report_html", "migplan.k8s")
# What touches the outside world: the core may import none of these.
IMPURE_MODULES = {"os", "sys", "subprocess", "socket", "tempfile", "shutil", "pathlib", "time", "threading",
                  "concurrent", "signal", "fcntl", "io", "logging", "urllib", "http", "select", "ctypes",
                  "multiprocessing", "asyncio", "paramiko", "pulp", "pynvml", "typer", "tabulate", "importlib"}
IMPURE_CALLS = {"open", "print", "input", "eval", "exec", "__import__", "breakpoint"}
CLOCK_METHODS = {"now", "today", "utcnow"}
# The layers above the core: the core reaches none of them, directly or through other modules.
OUTER = ("migplan.adapters", "migplan.commands", "migplan.cli", "migplan.documents")
# Modules the core may not import directly (they read files or the configuration), though the catalog
# package it uses reads its own cache through `migplan.files`.
OUTER_DIRECT = (*OUTER, "migplan.files", "migplan.config")
# One home per outside system.
HOME = {"paramiko": ("migplan.adapters.ssh",), "pulp": ("migplan.adapters.solver",),
        "pynvml": ("migplan.adapters.nvml",), "typer": ("migplan.cli",), "subprocess": ("migplan.adapters",),
        "ansible": ("migplan.inventory.ansible",)}


# -- the import graph, from the source text -------------------------------------------------------------

def module_names(root: Path) -> dict[str, bool]:
    """Every module of the package at `root` (a directory named after it), and whether it is a package."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        if "__pycache__" in parts:
            continue
        if parts[-1] == "__init__":
            out[".".join(parts[:-1])] = True
        else:
            out[".".join(parts)] = False
    return out


def _source(root: Path, name: str, is_package: bool) -> Path:
    rel = Path(*name.split(".")[1:])
    return root / rel / "__init__.py" if is_package else (root / rel).with_suffix(".py")


@functools.cache
def _parse(text: str) -> ast.Module:
    """Parsed once per text: the planted copies below share all but one file with the tree."""
    return ast.parse(text)


def _deepest(name: str, modules: Mapping[str, bool]) -> str:
    """`migplan.a.b.Name` -> the deepest module that exists (`migplan.a.b`)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name


def _imported(tree: ast.Module, module: str, is_package: bool) -> list[tuple[str, list[str]]]:
    """Every import statement of the module, wherever it is (top, lazy, under TYPE_CHECKING), as (absolute
    dotted base, names imported from it): `import a.b` is ("a.b", []), `from ..x import y` is ("pkg.x", ["y"])."""
    here = module if is_package else module.rpartition(".")[0]
    out: list[tuple[str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = here
                for _ in range(node.level - 1):
                    anchor = anchor.rpartition(".")[0]
                base = f"{anchor}.{base}" if base else anchor
            out.append((base, [a.name for a in node.names]))
    return out


def imported_names(tree: ast.Module, module: str, is_package: bool) -> set[str]:
    """Every absolute dotted name the module imports: `from a.b import c` gives both `a.b` and `a.b.c`."""
    return {n for base, names in _imported(tree, module, is_package) for n in (base, *(f"{base}.{x}" for x in names))}


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports. `from a.b import c` is an edge to the module
    `a.b.c` when there is one (a submodule; importing it runs the package `a.b` as every submodule import
    does, which is not counted), else to `a.b` (a name it defines); `import a.b.c.Name` to the deepest module."""
    modules = module_names(root)
    top = root.name
    graph: dict[str, set[str]] = {}
    for name, is_package in modules.items():
        targets: set[str] = set()
        for base, names in _imported(_parse(_source(root, name, is_package).read_text()), name, is_package):
            if base != top and not base.startswith(top + "."):
                continue
            subs = [f"{base}.{x}" for x in names if f"{base}.{x}" in modules]
            targets |= set(subs)
            if len(subs) < len(names) or not names:
                targets.add(_deepest(base, modules))
        graph[name] = {t for t in targets if t and t != name}
    return graph


def group(module: str) -> str:
    """The unit the package-level rules speak of: `migplan.fleet.apply` -> `migplan.fleet` (a subpackage of
    the top package), `migplan.yamldoc` -> itself (a top-level module)."""
    parts = module.split(".")
    return ".".join(parts[:2])


def group_graph(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    top = next(iter(graph)).split(".")[0] if graph else ""
    out: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module == top:
            continue  # the top `__init__` (the version) is above everything
        out.setdefault(group(module), set()).update(group(t) for t in targets if t != top)
    for g, targets in out.items():
        targets.discard(g)
    return out


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node, each as one cycle through it
    (`a -> b -> a`), sorted; Tarjan's algorithm, iterative."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(component)
    return sorted(_a_cycle(graph, c) for c in components)


def _a_cycle(graph: Mapping[str, Iterable[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's smallest node (breadth first), for the message."""
    first = min(component)
    paths = {first: [first]}
    queue = [first]
    while queue:
        node = queue.pop(0)
        for child in sorted(graph.get(node, ())):
            if child == first:
                return [*paths[node], first]
            if child in component and child not in paths:
                paths[child] = [*paths[node], child]
                queue.append(child)
    raise AssertionError(f"no cycle through {first}")  # a component of more than one node has one


def _why(graph: Mapping[str, set[str]], cycle: list[str]) -> list[str]:
    """For a package-level cycle, one module-level import behind each of its edges."""
    out = []
    for a, b in zip(cycle, cycle[1:], strict=False):
        edge = next(((m, t) for m in sorted(graph) if group(m) == a for t in sorted(graph[m]) if group(t) == b),
                    None)
        out.append(f"{edge[0]} imports {edge[1]}" if edge else f"{a} -> {b}")
    return out


def may_import(doc: str) -> set[str] | None:
    """The names of a package docstring's "May import:" line (up to "Never" or a blank line; parenthesised
    remarks dropped), each as a group (`planner.milp` -> `migplan.planner`); None for "everything".
    An item that is not a dotted name fails (the test also fails a name that is no module: a typo must not
    hide an undeclared import)."""
    match = re.search(r"May import:?(.*?)(?:\bNever\b|\n\s*\n|\Z)", doc, re.S | re.I)
    assert match, "no 'May import:' line"
    text = re.sub(r"\([^)]*\)", "", match.group(1)).replace("`", "")
    items = [i.strip().rstrip(".;").strip() for i in re.split(r"[,;]", text)]
    items = [i for i in items if i]
    if any(i.lower().startswith("everything") for i in items):
        return None
    out = set()
    for item in items:
        assert re.fullmatch(r"(migplan\.)?[a-z_]+(\.[a-z_]+)*", item), f"'May import:' item {item!r} is no module name"
        out.add(group("migplan." + item.removeprefix("migplan.")))
    return out


# -- this tree ------------------------------------------------------------------------------------------

@functools.cache
def graph() -> dict[str, set[str]]:
    return import_graph(PKG)


MODULES = sorted(module_names(PKG))
PACKAGES = sorted(m for m, is_package in module_names(PKG).items() if is_package and m != "migplan")


@functools.cache
def _tree(name: str) -> ast.Module:
    return _parse(_source(PKG, name, module_names(PKG)[name]).read_text())


@functools.cache
def _imports(name: str) -> frozenset[str]:
    """Every dotted name `name` imports, migplan's and outside libraries' (lazy and relative ones included)."""
    return frozenset(imported_names(_tree(name), name, module_names(PKG)[name]))


def _reaches(name: str) -> set[str]:
    """The migplan modules `name` imports directly or through others."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for target in graph()[todo.pop()]:
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def _top(names: Iterable[str]) -> set[str]:
    return {n.split(".")[0] for n in names}


def _is(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("name", MODULES)
def test_module_imports_alone(name: str) -> None:
    importlib.import_module(name)


def test_no_two_modules_import_each_other_even_through_others() -> None:
    found = cycles(graph())
    assert not found, "import cycles between modules: " + "; ".join(" -> ".join(c) for c in found)


def test_no_two_packages_import_each_other_even_through_others() -> None:
    packages = group_graph(graph())
    found = cycles(packages)
    assert not found, "import cycles between packages: " + "; ".join(
        " -> ".join(c) + " (" + ", ".join(_why(graph(), c)) + ")" for c in found)


@pytest.mark.parametrize("package", PACKAGES)
def test_package_docstring_says_what_it_holds_and_may_import(package: str) -> None:
    doc = ast.get_docstring(_tree(package)) or ""
    assert len(doc.splitlines()) >= 3, f"{package}/__init__.py needs a docstring saying what the package holds"
    assert "may import" in doc.lower(), f"{package}/__init__.py must say what it may import"


@pytest.mark.parametrize("package", PACKAGES)
def test_may_import_line_names_exactly_what_the_package_imports(package: str) -> None:
    declared = may_import(ast.get_docstring(_tree(package)) or "")
    actual = group_graph(graph()).get(package, set())
    if declared is None:
        return  # "everything": the layer rules below bound it
    unknown = sorted(declared - set(group_graph(graph())))
    assert not unknown, f"{package}'s 'May import:' line names {unknown}: no such package or module"
    undeclared, unused = sorted(actual - declared), sorted(declared - actual)
    assert not undeclared, f"{package} imports {undeclared}, which its 'May import:' line does not name"
    assert not unused, f"{package}'s 'May import:' line names {unused}, which it does not import"


def test_core_list_matches_real_modules() -> None:
    """A renamed module must not silently drop out of the purity checks."""
    for prefix in CORE:
        assert any(_is(m, (prefix,)) for m in MODULES), f"{prefix} is in CORE but no such module exists"


@pytest.mark.parametrize("name", [m for m in MODULES if _is(m, CORE)])
def test_core_module_touches_nothing_outside(name: str) -> None:
    bad_imports = _top(_imports(name)) & IMPURE_MODULES
    assert not bad_imports, f"{name} imports {sorted(bad_imports)}"
    calls = []
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.Call):
            fn = node.func
            if isinstance(fn, ast.Name) and fn.id in IMPURE_CALLS:
                calls.append(f"{fn.id}() at line {node.lineno}")
            if isinstance(fn, ast.Attribute) and fn.attr in CLOCK_METHODS:
                calls.append(f".{fn.attr}() at line {node.lineno}")
    assert not calls, f"{name} calls {calls}"


@pytest.mark.parametrize("name", [m for m in MODULES if _is(m, CORE)])
def test_core_module_imports_no_outer_layer(name: str) -> None:
    bad = sorted(i for i in graph()[name] if _is(i, OUTER_DIRECT))
    assert not bad, f"{name} imports {bad}"


@pytest.mark.parametrize("name", [m for m in MODULES if _is(m, CORE)])
def test_core_module_reaches_no_outer_layer_through_others(name: str) -> None:
    bad = sorted(i for i in _reaches(name) if _is(i, OUTER))
    assert not bad, f"{name} reaches {bad}"


@pytest.mark.parametrize("name", [m for m in MODULES if _is(m, ("migplan.adapters",))])
def test_adapters_import_no_commands_or_cli(name: str) -> None:
    bad = sorted(i for i in graph()[name] if _is(i, ("migplan.commands", "migplan.cli")))
    assert not bad, f"{name} imports {bad}"


@pytest.mark.parametrize("name", [m for m in MODULES if not _is(m, ("migplan.cli",))])
def test_only_the_cli_imports_the_cli_and_typer(name: str) -> None:
    bad = sorted(i for i in _imports(name) if _is(i, ("migplan.cli", "typer")))
    assert not bad, f"{name} imports {bad}"


@pytest.mark.parametrize("library", sorted(HOME))
def test_each_outside_library_has_one_home(library: str) -> None:
    users = [m for m in MODULES if library in _top(_imports(m))]
    strays = [m for m in users if not _is(m, HOME[library])]
    assert not strays, f"{library} is imported outside {HOME[library]}: {strays}"


# -- the rules fail where they should: a copy of the tree with something planted ----------------------

@pytest.fixture
def tree_copy(tmp_path: Path) -> Path:
    copy = tmp_path / "migplan"
    shutil.copytree(PKG, copy, ignore=shutil.ignore_patterns("__pycache__", "data"))
    return copy


def _plant(path: Path, text: str) -> None:
    path.write_text(path.read_text() + "\n\n" + text + "\n")


def test_the_copy_is_as_clean_as_the_tree(tree_copy: Path) -> None:
    """The planted tests below start from a tree the rules accept."""
    assert import_graph(tree_copy) == graph()
    assert not cycles(import_graph(tree_copy))
    assert not cycles(group_graph(import_graph(tree_copy)))


def test_a_planted_lazy_import_making_a_package_cycle_is_caught(tree_copy: Path) -> None:
    # The catalog, at the bottom, lazily importing the planner that sits above it.
    _plant(tree_copy / "catalog" / "geometry.py", "def _late():\n    from migplan.planner import plan\n    return plan")
    found = cycles(group_graph(import_graph(tree_copy)))
    assert any({"migplan.catalog", "migplan.planner"} <= set(c) for c in found), found


def test_a_planted_indirect_module_cycle_is_caught(tree_copy: Path) -> None:
    # catalog.layout imports catalog.geometry; geometry importing layout, even only under TYPE_CHECKING,
    # closes a cycle of two modules inside one package (which the package rule cannot see).
    _plant(tree_copy / "catalog" / "geometry.py",
           "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from migplan.catalog.layout import Layout")
    found = cycles(import_graph(tree_copy))
    assert ["migplan.catalog.geometry", "migplan.catalog.layout", "migplan.catalog.geometry"] in found, found


def test_a_planted_relative_import_is_in_the_graph(tree_copy: Path) -> None:
    _plant(tree_copy / "model" / "diff.py", "def _late():\n    from ..fleet import steps\n    return steps")
    assert "migplan.fleet.steps" in import_graph(tree_copy)["migplan.model.diff"]


def test_a_planted_undeclared_import_breaks_the_may_import_line(tree_copy: Path) -> None:
    _plant(tree_copy / "smi" / "rows.py", "def _late():\n    from migplan.model import state\n    return state")
    declared = may_import(ast.get_docstring(ast.parse((tree_copy / "smi" / "__init__.py").read_text())) or "")
    actual = group_graph(import_graph(tree_copy))["migplan.smi"]
    assert declared is not None
    assert actual - declared == {"migplan.model"}


def test_may_import_parses_names_and_refuses_words() -> None:
    assert may_import("Holds x.\n\nMay import: catalog, `migplan.planner.milp` (the solver's interface), errors.\n"
                      "Never adapters.") == {"migplan.catalog", "migplan.planner", "migplan.errors"}
    assert may_import("May import: everything in migplan except cli.") is None
    with pytest.raises(AssertionError, match="is no module name"):
        may_import("May import: catalog and the planner.")


def test_cycles_finds_each_component_once_with_a_real_cycle() -> None:
    planted = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": {"d"}, "f": {"a"}}
    assert cycles(planted) == [["a", "b", "c", "a"], ["d", "e", "d"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
