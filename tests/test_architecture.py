"""The architecture rules, checked on the source (README, "Architecture").

* every module imports on its own;
* the pure core touches no file, process, socket, clock or terminal: no such import, no call to
  `open`/`print`/`input`/`eval`/`exec`, no `.now()`/`.today()`;
* layers only import downwards: the core never imports adapters, commands, documents or the CLI;
  adapters never import commands or the CLI; nothing but the CLI imports typer or `migplan.cli`;
* each outside library has exactly one home (paramiko, pulp, pynvml, subprocess);
* each package's `__init__` says what it holds and what it may import.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import migplan

PKG = Path(migplan.__file__).resolve().parent
MODULES = sorted(m.name for m in pkgutil.walk_packages([str(PKG)], prefix="migplan."))
PACKAGES = sorted(m.name for m in pkgutil.walk_packages([str(PKG)], prefix="migplan.") if m.ispkg)

CORE = ("migplan.catalog.layout", "migplan.names", "migplan.text", "migplan.errors", "migplan.catalog.geometry",
        "migplan.catalog.catalog",
        "migplan.model.state", "migplan.model.diff", "migplan.fleet.snapshot", "migplan.fleet.host_table",
        "migplan.fleet.steps", "migplan.smi", "migplan.planner", "migplan.history",
        "migplan.mig_parted", "migplan.k8s_nodes", "migplan.host_patterns", "migplan.report_html")
# What touches the outside world: the core may import none of these.
IMPURE_MODULES = {"os", "sys", "subprocess", "socket", "tempfile", "shutil", "pathlib", "time", "threading",
                  "concurrent", "signal", "fcntl", "io", "logging", "urllib", "http", "select", "ctypes",
                  "multiprocessing", "asyncio", "paramiko", "pulp", "pynvml", "typer", "tabulate", "importlib"}
IMPURE_CALLS = {"open", "print", "input", "eval", "exec", "__import__", "breakpoint"}
CLOCK_METHODS = {"now", "today", "utcnow"}
# One home per outside system.
HOME = {"paramiko": ("migplan.adapters.ssh",), "pulp": ("migplan.adapters.solver",),
        "pynvml": ("migplan.adapters.nvml",), "typer": ("migplan.cli",), "subprocess": ("migplan.adapters",),
        "ansible": ("migplan.ansible_inventory",)}


def _path(name: str) -> Path:
    path = PKG.parent / (name.replace(".", "/") + ".py")
    return path if path.exists() else PKG.parent / name.replace(".", "/") / "__init__.py"


def _tree(name: str) -> ast.Module:
    return ast.parse(_path(name).read_text())


def _imports(name: str) -> set[str]:
    out = set()
    for node in ast.walk(_tree(name)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names}
    return out


def _top(names: set[str]) -> set[str]:
    return {n.split(".")[0] for n in names}


def _is(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize("name", MODULES)
def test_module_imports_alone(name: str) -> None:
    importlib.import_module(name)


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
    outer = ("migplan.adapters", "migplan.commands", "migplan.cli", "migplan.documents", "migplan.files",
             "migplan.config")
    bad = sorted(i for i in _imports(name) if _is(i, outer))
    assert not bad, f"{name} imports {bad}"


@pytest.mark.parametrize("name", [m for m in MODULES if _is(m, ("migplan.adapters",))])
def test_adapters_import_no_commands_or_cli(name: str) -> None:
    bad = sorted(i for i in _imports(name) if _is(i, ("migplan.commands", "migplan.cli")))
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


@pytest.mark.parametrize("package", PACKAGES)
def test_package_docstring_says_what_it_holds_and_may_import(package: str) -> None:
    doc = ast.get_docstring(_tree(package)) or ""
    assert len(doc.splitlines()) >= 3, f"{package}/__init__.py needs a docstring saying what the package holds"
    assert "may import" in doc.lower(), f"{package}/__init__.py must say what it may import"
