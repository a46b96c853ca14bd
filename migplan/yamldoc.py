"""Strict reading of YAML documents with file, key path and line in every error.

PyYAML's `safe_load` forgets where a value came from and silently keeps the last of two
duplicate keys. We compose the node tree instead and read it through `Node`, so that each
error can say `inventory/x.yaml:12: hosts.gpu01.gpus[1].index: ...` (README "Bad input").
"""

from __future__ import annotations

import builtins
import os
from collections.abc import Iterator
from typing import Any, NoReturn

import yaml

from migplan.errors import InputError

_KINDS = {
    "str": (str,),
    "int": (int,),
    "number": (int, float),
    "bool": (bool,),
    "list": (list,),
    "map": (dict,),
}


class _Loader(yaml.SafeLoader):
    """SafeLoader used only to resolve scalars of a composed tree."""


_LOADER = _Loader("")


def _scalar(node: yaml.ScalarNode) -> Any:
    try:
        return _LOADER.construct_object(node, deep=True)
    finally:
        _LOADER.constructed_objects.clear()


class Node:
    """A value from a YAML file that knows its source, key path and line."""

    def __init__(self, node: yaml.Node, source: str, path: str = "") -> None:
        self._node = node
        self.source = source
        self.path = path

    # -- location and errors -------------------------------------------------------
    @property
    def line(self) -> int:
        return self._node.start_mark.line + 1

    def fail(self, message: str, *, hint: str | None = None) -> NoReturn:
        raise InputError(message, source=self.source, key=self.path or None, line=self.line, hint=hint)

    def _child_path(self, key: str | int) -> str:
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        return f"{self.path}.{key}" if self.path else str(key)

    # -- kinds ---------------------------------------------------------------------
    @property
    def is_map(self) -> bool:
        return isinstance(self._node, yaml.MappingNode)

    @property
    def is_list(self) -> bool:
        return isinstance(self._node, yaml.SequenceNode)

    @property
    def is_null(self) -> bool:
        return isinstance(self._node, yaml.ScalarNode) and self._node.tag == "tag:yaml.org,2002:null"

    def value(self, kind: str | None = None) -> Any:
        """Plain Python value; with `kind`, check its type first."""
        if isinstance(self._node, yaml.ScalarNode):
            val = _scalar(self._node)
        else:
            val = _to_plain(self)
        if kind is not None:
            ok = isinstance(val, _KINDS[kind]) and not (kind in ("int", "number") and isinstance(val, bool))
            if not ok:
                self.fail(f"expected {_describe(kind)}, got {_describe_value(val)}")
        return val

    def str(self) -> str:
        v = self.value()
        if isinstance(v, bool) or v is None or isinstance(v, (list, dict)):
            self.fail(f"expected a string, got {_describe_value(v)}")
        return str(v)

    def int(self, *, minimum: int | None = None) -> int:
        v: int = self.value("int")
        if minimum is not None and v < minimum:
            self.fail(f"must be at least {minimum}, got {v}")
        return v

    def number(self, *, minimum: float | None = None, maximum: float | None = None) -> float:
        v = float(self.value("number"))
        if minimum is not None and v < minimum:
            self.fail(f"must be at least {minimum:g}, got {v:g}")
        if maximum is not None and v > maximum:
            self.fail(f"must be at most {maximum:g}, got {v:g}")
        return v

    def bool(self) -> bool:
        v: bool = self.value("bool")
        return v

    # -- containers ----------------------------------------------------------------
    def items(self) -> Iterator[tuple[builtins.str, Node]]:
        """Key/value pairs of a mapping, refusing duplicate keys."""
        if not self.is_map:
            self.fail(f"expected a mapping, got {_describe_value(self.value())}")
        seen: dict[str, int] = {}
        for k, v in self._node.value:
            key = str(_scalar(k)) if isinstance(k, yaml.ScalarNode) else "?"
            if key in seen:
                raise InputError(
                    f"duplicate key {key!r} (first at line {seen[key]})",
                    source=self.source, key=self._child_path(key), line=k.start_mark.line + 1,
                    hint="each name may appear once; remove or rename one of them",
                )
            seen[key] = k.start_mark.line + 1
            yield key, Node(v, self.source, self._child_path(key))

    def list(self) -> list[Node]:
        if not self.is_list:
            self.fail(f"expected a list, got {_describe_value(self.value())}")
        return [Node(v, self.source, self._child_path(i)) for i, v in enumerate(self._node.value)]

    def fields(self, allowed: set[builtins.str] | frozenset[builtins.str],
               required: set[builtins.str] | frozenset[builtins.str] = frozenset()) -> dict[builtins.str, Node]:
        """A mapping's entries, checked against the allowed and required key sets."""
        out = dict(self.items())
        for key in out:
            if key not in allowed:
                known = ", ".join(sorted(allowed))
                raise InputError(
                    f"unknown key {key!r}", source=self.source, key=self._child_path(key),
                    line=out[key].line, hint=f"allowed keys here: {known}",
                )
        for key in sorted(required):
            if key not in out:
                self.fail(f"missing required key {key!r}")
        return out


def _to_plain(node: Node) -> Any:
    if node.is_map:
        return {k: _to_plain(v) for k, v in node.items()}
    if node.is_list:
        return [_to_plain(v) for v in node.list()]
    return node.value()


def _describe(kind: str) -> str:
    return {"str": "a string", "int": "an integer", "number": "a number", "bool": "true or false",
            "list": "a list", "map": "a mapping"}[kind]


def _describe_value(v: Any) -> str:
    if v is None:
        return "nothing (null)"
    if isinstance(v, bool):
        return f"a boolean ({str(v).lower()})"
    if isinstance(v, int):
        return f"an integer ({v})"
    if isinstance(v, float):
        return f"a number ({v:g})"
    if isinstance(v, str):
        return f"a string ({v!r})" if len(v) < 40 else "a string"
    if isinstance(v, list):
        return "a list"
    if isinstance(v, dict):
        return "a mapping"
    return type(v).__name__


def parse(text: str, source: str) -> Node | None:
    """Compose YAML text into a `Node` (None for an empty document)."""
    try:
        composed = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        line = mark.line + 1 if mark is not None else None
        ctx = err.context_mark
        began = ""
        if ctx is not None and err.context:
            # An unclosed bracket or quote is reported at the end of the stream; the line where
            # the construct began is the one to fix.
            began = f" ({err.context} at line {ctx.line + 1})"
            line = ctx.line + 1
        raise InputError(
            f"not valid YAML: {err.problem}{began}", source=source, line=line,
            hint="check indentation and quoting around this line",
        ) from None
    except yaml.YAMLError as err:
        raise InputError(f"not valid YAML: {err}", source=source) from None
    return None if composed is None else Node(composed, source)


def load(path: str | os.PathLike[str]) -> Node:
    """Read and compose a YAML file; an empty file is an error."""
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise InputError("file not found", source=source, hint="check the path or the option naming it") from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a YAML file", source=source) from None
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read: {err}", source=source) from None
    node = parse(text, source)
    if node is None:
        raise InputError("file is empty", source=source, hint="see README for the expected format")
    return node


def check_version(fields: dict[str, Node], node: Node, supported: int, what: str) -> None:
    """Documents carry `version: N`; refuse a missing or unknown one."""
    if "version" not in fields:
        node.fail(f"missing 'version' (this {what} format is version {supported})",
                  hint=f"add 'version: {supported}' at the top of the file")
    ver = fields["version"].int()
    if ver != supported:
        fields["version"].fail(f"unsupported {what} version {ver}; this migplan reads version {supported}",
                               hint="upgrade migplan or convert the file")
