"""The architecture rules, checked: every module imports on its own, and the core stays pure."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import migplan

PKG = Path(migplan.__file__).resolve().parent
MODULES = sorted(m.name for m in pkgutil.walk_packages([str(PKG)], prefix="migplan."))
# The pure core: no NVML, SSH, processes, solver library or CLI framework (README, "Architecture").
CORE = ("migplan.layout", "migplan.catalog.model", "migplan.catalog.catalog", "migplan.state", "migplan.names",
        "migplan.smi", "migplan.planner")
FORBIDDEN = {"pynvml", "paramiko", "subprocess", "typer", "socket"}


@pytest.mark.parametrize("name", MODULES)
def test_module_imports_alone(name: str) -> None:
    importlib.import_module(name)


@pytest.mark.parametrize("name", [m for m in MODULES if m.startswith(CORE)])
def test_core_module_is_pure(name: str) -> None:
    path = PKG.parent / (name.replace(".", "/") + ".py")
    if not path.exists():
        path = PKG.parent / name.replace(".", "/") / "__init__.py"
    tree = ast.parse(path.read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    allowed_pulp = name == "migplan.adapters.solver"
    bad = imported & (FORBIDDEN | (set() if allowed_pulp else {"pulp"}))
    assert not bad, f"{name} imports {bad}"
