"""One change vocabulary (issue 22): only `migplan.fleet.steps` (`to_commands`, a GPU's actions -> its nvidia-smi
commands) and `migplan.smi` (the argv builders) build MIG-changing nvidia-smi commands. Apply, its rollback and the
repair of an interrupted apply all go through `to_commands`; a second place building `-cgi`/`-dgi`/`-mig`/... would
be a second vocabulary that must be kept identical to the first.

The rule is checked on the source with `ast`: outside those modules, no reference to a MIG-changing builder (a call,
an attribute, an import) and no MIG-changing flag written as a string (a hand-built argv)."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

import migplan

PKG = Path(migplan.__file__).resolve().parent
# The builders of commands that change a GPU's MIG state (migplan/smi/commands.py).
MIG_BUILDERS = frozenset({"create_gpu_instances", "create_instances_for", "create_compute_instances",
                          "destroy_compute_instances", "destroy_gpu_instances", "set_mig_mode", "reset_gpu"})
# nvidia-smi's flags that change MIG state (docs/nvidia-smi.md §1, §5, §8, §10); `-r` only next to nvidia-smi.
MIG_FLAGS = frozenset({"-cgi", "-dgi", "-dci", "-cci", "-mig", "--gpu-reset"})
ALLOWED = ("fleet/steps.py", "smi/")


def _is_smi(node: ast.expr) -> bool:
    return (isinstance(node, ast.Constant) and node.value == "nvidia-smi") or \
        (isinstance(node, ast.Name) and node.id == "NVIDIA_SMI") or \
        (isinstance(node, ast.Attribute) and node.attr == "NVIDIA_SMI")


def builders_outside(root: Path, allowed: tuple[str, ...] = ALLOWED) -> list[str]:
    """`file:line what` for each MIG-changing builder referenced, or MIG flag written, outside `allowed` (paths
    relative to the package root `root`; a trailing / is a package)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if any(rel == a or (a.endswith("/") and rel.startswith(a)) for a in allowed):
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=rel)):
            what = None
            if isinstance(node, ast.Attribute) and node.attr in MIG_BUILDERS:
                what = node.attr
            elif isinstance(node, ast.Name) and node.id in MIG_BUILDERS:
                what = node.id
            elif isinstance(node, ast.ImportFrom):
                what = next((a.name for a in node.names if a.name in MIG_BUILDERS), None)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in MIG_FLAGS:
                what = repr(node.value)
            elif isinstance(node, (ast.List, ast.Tuple)) and any(_is_smi(e) for e in node.elts) and any(
                    isinstance(e, ast.Constant) and e.value == "-r" for e in node.elts):
                what = "'-r'"
            if what is not None:
                found.append(f"{rel}:{getattr(node, 'lineno', 0)} {what}")
    return found


def test_only_fleet_steps_and_smi_build_mig_changing_commands() -> None:
    assert builders_outside(PKG) == []


def test_the_scan_sees_the_builders_steps_uses() -> None:
    """Not a scan that finds nothing anywhere: with fleet/steps.py not allowed, its builder calls are found."""
    found = {f.split(" ", 1)[1] for f in builders_outside(PKG, ("smi/",)) if f.startswith("fleet/steps.py:")}
    assert {"destroy_compute_instances", "destroy_gpu_instances", "set_mig_mode", "reset_gpu",
            "create_instances_for"} <= found


PLANTS = {
    "a builder call": ("fleet/apply.py", "from migplan import smi\n\n\ndef _sneaky() -> list[str]:\n"
                                         "    return smi.destroy_gpu_instances(0, [1])\n"),
    "a builder imported": ("commands/sneaky.py", "from migplan.smi import set_mig_mode\n"),
    "a hand-built -dgi": ("fleet/repair.py", "\n\nARGV = ['nvidia-smi', 'mig', '-i', '0', '-dgi', '-gi', '1']\n"),
    "a hand-built reset": ("fleet/sneaky.py",
                           "from migplan.smi import NVIDIA_SMI\n\nARGV = (NVIDIA_SMI, '-r', '-i', '0')\n"),
}


@pytest.mark.slow  # each plant copies the package and scans the copy
@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_a_planted_mig_command_outside_steps_fails_the_rule(tmp_path: Path, plant: str) -> None:
    copy = tmp_path / "migplan"
    shutil.copytree(PKG, copy, ignore=shutil.ignore_patterns("__pycache__"))
    rel, text = PLANTS[plant]
    target = copy / rel
    target.write_text((target.read_text() if target.exists() else "") + text)
    found = builders_outside(copy)
    assert found and all(f.startswith(rel + ":") for f in found), found
