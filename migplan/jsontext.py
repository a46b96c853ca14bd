"""Indented JSON text, the same as `json.dumps(value, indent=2)`, several times faster on large documents.

Why: with `indent`, CPython's json (3.11, 3.12) leaves its C encoder and runs the pure-Python,
generator-based `_make_iterencode` (json/encoder.py `JSONEncoder.iterencode`: `if (_one_shot and
c_make_encoder is not None and self.indent is None)`); a 7,000-GPU plan took 0.17 s to print that way.
This writer keeps json's C string escaper (`encode_basestring_ascii`, what `ensure_ascii=True` uses) and
json's number texts (`int.__repr__`, `float.__repr__`, NaN/Infinity) and builds the text with one list.

It handles what JSON documents here are made of (dict with str keys, list, tuple, str, int, float, bool,
None, and their subclasses such as str enums, as json does); anything else, a non-str key included, is
handed to `json.dumps` itself, so the result never differs from it (tests/test_jsontext.py compares
them on random documents).
"""

from __future__ import annotations

import json
from json.encoder import encode_basestring_ascii
from typing import Any


class _Unusual(Exception):
    """A value this writer leaves to json.dumps."""


def _float(x: float) -> str:
    if x != x:
        return "NaN"
    if x == float("inf"):
        return "Infinity"
    if x == -float("inf"):
        return "-Infinity"
    return float.__repr__(x)


def dumps(value: Any, indent: int = 2) -> str:
    """`json.dumps(value, indent=indent)`, byte for byte."""
    try:
        return _dumps(value, indent)
    except (_Unusual, RecursionError):
        return json.dumps(value, indent=indent)


def _leaf(o: Any) -> str | None:
    """The text of a scalar, None for a container (the commonest types first, checked exactly)."""
    t = type(o)
    if t is str:
        return str(encode_basestring_ascii(o))
    if t is int:
        return int.__repr__(o)
    if o is None:
        return "null"
    if o is True:
        return "true"
    if o is False:
        return "false"
    if t is float:
        return _float(o)
    if isinstance(o, (dict, list, tuple)):
        return None
    if isinstance(o, str):  # subclasses (str enums): json writes their str value
        return str(encode_basestring_ascii(o))
    if isinstance(o, int):
        return int.__repr__(o)
    if isinstance(o, float):
        return _float(o)
    raise _Unusual  # a default= hook or a TypeError: json.dumps decides


class _Writer:
    def __init__(self, indent: int) -> None:
        self.out: list[str] = []
        self.indent = indent
        self.pads = ["\n"]
        self.keys: dict[str, str] = {}  # a key's text with ": " (documents repeat a few keys many times)

    def pad(self, level: int) -> str:
        pads = self.pads
        while len(pads) <= level:
            pads.append("\n" + " " * (self.indent * len(pads)))
        return pads[level]

    def container(self, o: Any, level: int) -> None:
        if not o:
            self.out.append("{}" if isinstance(o, dict) else "[]")
        elif isinstance(o, dict):
            self.mapping(o, level)
        else:
            self.sequence(o, level)

    def mapping(self, o: dict[Any, Any], level: int) -> None:
        put, esc, keys = self.out.append, encode_basestring_ascii, self.keys
        inner = self.pad(level + 1)
        sep = "{" + inner
        for k, v in o.items():
            key = keys.get(k)
            if key is None:
                if type(k) is not str:
                    raise _Unusual  # json turns numbers, bools and None into key texts: left to it
                key = keys[k] = esc(k) + ": "
            t = type(v)
            if t is str:
                put(sep + key + esc(v))
            elif t is int:
                put(sep + key + int.__repr__(v))
            else:
                text = _leaf(v)
                if text is None:
                    put(sep + key)
                    self.container(v, level + 1)
                else:
                    put(sep + key + text)
            sep = "," + inner
        put(self.pad(level) + "}")

    def sequence(self, o: list[Any] | tuple[Any, ...], level: int) -> None:
        put = self.out.append
        inner = self.pad(level + 1)
        sep = "[" + inner
        for v in o:
            text = _leaf(v)
            if text is None:
                put(sep)
                self.container(v, level + 1)
            else:
                put(sep + text)
            sep = "," + inner
        put(self.pad(level) + "]")


def _dumps(value: Any, indent: int) -> str:
    top = _leaf(value)
    if top is not None:
        return top
    w = _Writer(indent)
    w.container(value, 0)
    return "".join(w.out)
