"""No one-letter attribute on a type that outlives a function (project standards): a field of a class (a dataclass
field, any class-level annotation) or an attribute set on `self` must say what it holds. Names that are the
domain's own convention are allowed below, each with its reason."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "migplan"

# (module path under migplan/, class, attribute) -> why a one-letter name is right there
ALLOWED: dict[tuple[str, str, str], str] = {
    ("planner/formulation.py", "Formulation", "x"): "the MILP's variable family x[g,p] (GPUs of group g laid out as "
                                                    "pattern p), named as in the model the module notes write out",
    ("planner/formulation.py", "Formulation", "u"): "the MILP's variable family u[c] (items of class c left out), "
                                                    "named as in the model the module notes write out",
}


def _self_targets(target: ast.expr) -> list[ast.Attribute]:
    """`self.a`, and each `self.a` of a tuple target such as `self.a, self.b = ...`."""
    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and target.value.id == "self":
        return [target]
    if isinstance(target, (ast.Tuple, ast.List)):
        return [a for t in target.elts for a in _self_targets(t)]
    return []


def short_attributes(tree: ast.Module) -> list[tuple[str, str, int]]:
    """(class, attribute, line) of every attribute named by one character in the module's classes."""
    found: list[tuple[str, str, int]] = []
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        for stmt in cls.body:  # class-level annotations: dataclass and NamedTuple fields, declared attributes
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and len(stmt.target.id) == 1:
                found.append((cls.name, stmt.target.id, stmt.lineno))
        for node in ast.walk(cls):  # `self.x = ...` in its methods (a nested class's are its own, counted twice)
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
                targets = [node.target]
            for target in targets:
                found += [(cls.name, a.attr, a.lineno) for a in _self_targets(target) if len(a.attr) == 1]
    return sorted(set(found), key=lambda f: (f[2], f[0], f[1]))


def scan(root: Path = PACKAGE) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        for cls, attr, line in short_attributes(ast.parse(path.read_text(), str(path))):
            if (rel, cls, attr) not in ALLOWED:
                out.append(f"migplan/{rel}:{line}: {cls}.{attr}")
    return out


def test_no_one_letter_attributes() -> None:
    found = scan()
    assert not found, "one-letter attributes (name what they hold, or allow a domain convention with its reason): " \
        + "; ".join(found)


def test_every_allowed_name_is_still_there() -> None:
    """An allow-list entry whose attribute was renamed or removed is stale: it would allow a new one silently."""
    present = {(p.relative_to(PACKAGE).as_posix(), cls, attr) for p in PACKAGE.rglob("*.py")
               for cls, attr, _ in short_attributes(ast.parse(p.read_text()))}
    assert not set(ALLOWED) - present


@pytest.mark.parametrize("source, expected", [
    ("from dataclasses import dataclass\n@dataclass\nclass A:\n    x: int\n    name: str\n", [("A", "x", 4)]),
    ("class A:\n    def __init__(self):\n        self.f, self.values = 1, 2\n        self.m = 3\n", [
        ("A", "f", 3), ("A", "m", 4)]),
    ("class A:\n    def go(self):\n        self.n += 1\n        self.ok: bool = True\n", [("A", "n", 3)]),
    ("class A:\n    def go(self, other):\n        other.x = 1\n        y = self\n        x = 2\n", []),
    ("def f():\n    x: int = 1\n    return x\n", []),
])
def test_the_scan_finds_fields_and_self_attributes_only(source: str, expected: list[tuple[str, str, int]]) -> None:
    assert short_attributes(ast.parse(source)) == expected
