"""A small YAML emitter for plain data, byte-identical to `yaml.dump(doc, Dumper=CSafeDumper, sort_keys=False,
width=120)` for the documents it accepts, and that call itself for every other document.

Why: a 200,000-workload `profiles import` writes 50 profiles files of ~100 MB of YAML in all; PyYAML's
representer (a node per value, the resolver's regular expressions per scalar) and libyaml's emitter took
most of the import's CPU time (bench/scale_bounds.py). Profiles documents are block mappings and lists of
short strings and numbers, which this writes directly.

What it writes itself (anything else, anywhere in the document, sends the whole document to PyYAML, so the
output never depends on which path wrote it):

* a non-empty mapping at the root; mappings with `str` keys that are written plain and short (< 120
  characters); non-empty lists (indentless under a key, as libyaml writes them); no list directly in a
  list; no container twice in the document (PyYAML would write an anchor and an alias);
* `None`, `bool`, `int`, `float` (PyYAML's text for them; a float whose text would not read back as a
  float needs a tag and is left to PyYAML);
* `str` of printable ASCII (0x20..0x7e) only: plain where libyaml writes it plain (no indicator where
  libyaml sees one, no leading or trailing space, and PyYAML's resolver reads it back as a string, so
  `yes`, `null`, `1e3`, `2026-11-01` and `''` are quoted), else single-quoted (`'` doubled). A string
  with a space that could reach column `WIDTH` is left to PyYAML, which may fold it there.

tests/test_yamlemit.py compares both on generated documents and awkward strings.
"""

from __future__ import annotations

import math
from typing import Any

import yaml

WIDTH = 120
_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
_RESOLVER: Any = yaml.resolver.Resolver()
_STR_TAG = "tag:yaml.org,2002:str"
_FLOAT_TAG = "tag:yaml.org,2002:float"
# libyaml's indicators (yaml_emitter_analyze_scalar): these first characters make a plain scalar impossible
_FIRST_ALWAYS = frozenset("#,[]{}&*!|>'\"%@`")
_FIRST_IF_SPACE_AFTER = frozenset("?:-")


class _Fallback(Exception):
    """The document holds something this emitter does not write: PyYAML writes it all."""


def pyyaml_dump(doc: Any) -> str:
    """The reference: what profiles files were written with before this emitter."""
    return str(yaml.dump(doc, Dumper=_DUMPER, sort_keys=False, width=WIDTH))


def _plain_ok(s: str) -> bool:
    """Whether libyaml writes the printable-ASCII, non-empty `s` plain in block context and it reads back as a
    string."""
    first = s[0]
    if first in _FIRST_ALWAYS or first == " " or s[-1] == " ":
        return False
    if first in _FIRST_IF_SPACE_AFTER and (len(s) == 1 or s[1] == " "):
        return False
    if s.startswith(("---", "...")) or ": " in s or s.endswith(":") or " #" in s:
        return False
    return bool(_RESOLVER.resolve(yaml.ScalarNode, s, (True, False)) == _STR_TAG)


def _render_str(s: str) -> str:
    if not s.isascii() or not s.isprintable():  # isprintable: no control characters (ASCII: 0x20..0x7e)
        raise _Fallback
    if s and _plain_ok(s):
        return s
    return "'" + s.replace("'", "''") + "'"


def _render_float(v: float) -> str:
    if math.isnan(v) or math.isinf(v):
        raise _Fallback  # .nan/.inf: rare, PyYAML writes them
    text = repr(v).lower()  # SafeRepresenter.represent_float
    if "." not in text and "e" in text:
        text = text.replace("e", ".0e", 1)
    if _RESOLVER.resolve(yaml.ScalarNode, text, (True, False)) != _FLOAT_TAG:
        raise _Fallback  # PyYAML would add an explicit tag
    return text


class _Emitter:
    __slots__ = ("floats", "out", "seen", "shapes", "strs")

    def __init__(self) -> None:
        self.out: list[str] = []
        self.seen: set[int] = set()  # ids of the containers written (the document is alive meanwhile)
        self.strs: dict[str, str] = {}  # string -> its text
        self.floats: dict[float, str] = {}
        self.shapes: dict[tuple[str, tuple[Any, ...]], list[tuple[str, str, int]]] = {}

    def scalar(self, v: Any, column: int) -> str:
        t = type(v)
        if t is str:
            text = self.strs.get(v)
            if text is None:
                text = self.strs[v] = _render_str(v)
            if column + len(text) >= WIDTH and " " in v:
                raise _Fallback  # libyaml may fold it at a space past the width
            return text
        if t is int:
            return str(v)
        if t is bool:
            return "true" if v else "false"
        if v is None:
            return "null"
        if t is float:
            text = self.floats.get(v)
            if text is None or (v == 0.0 and text != _render_float(v)):  # 0.0 and -0.0 are one key
                text = self.floats[v] = _render_float(v)
            return text
        raise _Fallback

    def container(self, v: Any) -> None:
        if not v:
            raise _Fallback  # `{}` / `[]` flow style: left to PyYAML
        key = id(v)
        if key in self.seen:
            raise _Fallback  # an alias
        self.seen.add(key)

    def shape(self, first: str, keys: tuple[Any, ...], indent: int) -> list[tuple[str, str, int]]:
        """Per key of a mapping written at `indent` after `first`: the line's text before a scalar value, the
        line before a block value, and the column of the value."""
        pad = " " * indent
        prefix, out = first, []
        for k in keys:
            if type(k) is not str or _render_str(k) != k or len(k) >= WIDTH:
                raise _Fallback  # a quoted or long key
            out.append((f"{prefix}{k}: ", f"{prefix}{k}:\n", indent + len(k) + 2))
            prefix = pad
        return out

    def mapping(self, d: dict[Any, Any], indent: int, first: str) -> None:
        self.container(d)
        out, strs = self.out, self.strs
        keys = tuple(d)
        shape = self.shapes.get((first, keys))  # documents repeat a few mapping shapes many times
        if shape is None:
            shape = self.shapes[first, keys] = self.shape(first, keys, indent)
        for (head, block, column), v in zip(shape, d.values(), strict=True):  # one shape entry per key
            t = type(v)
            if t is str:  # the commonest values inline (a method call each was a fifth of the time)
                text = strs.get(v)
                if text is None:
                    text = strs[v] = _render_str(v)
                if column + len(text) >= WIDTH and " " in v:
                    raise _Fallback  # libyaml may fold it at a space past the width
                out.append(head + text + "\n")
            elif t is int:
                out.append(head + int.__repr__(v) + "\n")
            elif t is dict:
                out.append(block)
                self.mapping(v, indent + 2, " " * (indent + 2))
            elif t is list:
                out.append(block)
                self.sequence(v, indent)
            else:
                out.append(head + self.scalar(v, column) + "\n")

    def sequence(self, items: list[Any], indent: int) -> None:
        self.container(items)
        dash = " " * indent + "- "
        for item in items:
            t = type(item)
            if t is dict:
                self.mapping(item, indent + 2, dash)
            elif t is list:
                raise _Fallback
            else:
                self.out.append(f"{dash}{self.scalar(item, indent + 2)}\n")


def emit(doc: Any) -> str | None:
    """`doc` as block YAML written here, or None when it holds something left to PyYAML."""
    if type(doc) is not dict:
        return None
    em = _Emitter()
    try:
        em.mapping(doc, 0, "")
    except _Fallback:
        return None
    return "".join(em.out)


def dump(doc: Any) -> str:
    """`doc` as block YAML: the text `pyyaml_dump(doc)` gives."""
    text = emit(doc)
    return pyyaml_dump(doc) if text is None else text
