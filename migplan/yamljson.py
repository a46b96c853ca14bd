"""JSON documents read by `json.loads`, with the values, errors and lines `yamldoc`'s YAML reader gives.

Why: plans are JSON, and a 200,000-GPU plan is 250 MB; composing it as YAML (libyaml and the composer, one
node object per value) took minutes, `json.loads` takes seconds (bench/README.md, "Speed measures"). JSON is
YAML, so the same text must read the same either way: `read(text, source)` returns a `JsonNode` tree only when
it is sure the YAML reader would compose exactly these values, and None for anything doubtful, which `parse`
and `load` then read as YAML through `yamldoc` (so refusals keep their message and line). Doubtful, read as YAML:

* text `json.loads` refuses (its message and line would differ), or with NaN/Infinity (YAML reads a string);
* duplicate keys (YAML refuses them where the mapping is read) and empty keys (refused at compose);
* nesting deeper than `yamldoc.MAX_DEPTH`; an integer longer than `yamldoc.MAX_NUMBER_CHARS` characters
  (refused at compose), and the integer `-0` (its text differs from its value's);
* floats whose text is not Python's `repr` of their value ("1.50", "1.5e+05"; "1.5e+20" is one), or not
  finite (`Node.number` quotes the text);
* raw tabs, carriage returns, NEL, U+2028/9 or byte-order marks (YAML lines and whitespace differ),
  `\\u` and `\\/` escapes (libyaml and PyYAML decode some of them differently), whitespace between a key
  and its colon, and keys of 250 characters or more (YAML's simple keys end at 1024 characters);

What YAML makes of the rest is what the nodes give: every JSON number is a number (`1e-05` too, which
`yamldoc` reads as YAML 1.2 does, not as YAML 1.1's string); `"007"` is a string and `7` an integer; `true`,
`false` and `null` are booleans and null, refused by `str()` with the hint to quote them.

Positions are computed only when asked (an error): the key path is walked again in the text with json's
own scanner (`_locate`), and the line counted up to the value (or its key). The fast path's checks above
keep lines the same as YAML's (line breaks are only `\\n`). tests/test_plan_reader_fuzz.py and
tests/test_yaml_json_path.py compare both readers on plans and their mutations.
"""

from __future__ import annotations

import builtins
import json
import os
import re
from collections.abc import Iterator
from json.decoder import WHITESPACE, scanstring  # type: ignore[attr-defined]  # not in typeshed
from typing import Any, NoReturn

from migplan import yamldoc
from migplan.errors import InputError

_DOUBTFUL_ASCII = ("\t", "\r", "\\u", "\\/", '"":')
_DOUBTFUL_CHARS = (*_DOUBTFUL_ASCII, "\x85", "\u2028", "\u2029", "\ufeff")
_LONG_KEY = 250
_KEY_SPACE = re.compile(r'"\s+:')  # whitespace between a key and its colon


class _Doubtful(Exception):
    """The text is JSON that the YAML reader might read otherwise: read it as YAML."""


def _int(text: str) -> int:
    # json's integer texts are their values' repr, except -0; YAML refuses the long ones at compose
    if len(text) > yamldoc.MAX_NUMBER_CHARS or text == "-0":
        raise _Doubtful
    return int(text)


def _float(text: str) -> float:
    """A JSON float as YAML reads it; doubtful when its text is not what Python would write for its value."""
    value = float(text)  # YAML reads every JSON number text as a number (yamldoc._EXPONENT_FLOAT: `1e-05` too)
    if float.__repr__(value) != text:  # "1.50", "1.5e+05", 1e999: YAML's text differs from the value's
        raise _Doubtful
    return value


def _constant(text: str) -> NoReturn:
    raise _Doubtful  # NaN, Infinity: YAML reads them as strings


_DECODER = json.JSONDecoder(parse_float=_float, parse_int=_int, parse_constant=_constant)


def _shape_ok(root: Any, text: str) -> bool:
    """Depth within MAX_DEPTH, keys short, and every key counted once (`"key":` texts = keys kept: a duplicate
    key, dropped by json.loads, or a key followed by whitespace makes them differ)."""
    level = [root]
    depth = keys = longest = 0
    while level:
        depth += 1
        if depth > yamldoc.MAX_DEPTH:
            return False
        nxt: list[Any] = []
        for x in level:
            if type(x) is dict:
                keys += len(x)
                if x:
                    longest = max(longest, max(map(len, x)))
                nxt += [v for v in x.values() if type(v) is dict or type(v) is list]
            else:
                nxt += [v for v in x if type(v) is dict or type(v) is list]
        level = nxt
    return longest < _LONG_KEY and keys == text.count('":')


USE_JSON = True  # tests set this False to compare with the YAML reader alone
_JSON_START = re.compile(r"[ \n]*[\[{]")


def parse(text: str, source: str) -> yamldoc.Node | None:
    """`yamldoc.parse(text, source)`, a JSON mapping or list read by `json.loads` when that reads it as YAML
    would (`read`)."""
    text = yamldoc.checked_text(text, source)
    if USE_JSON and _JSON_START.match(text):
        with yamldoc.paused_gc():
            node = read(text, source)
        if node is not None:
            return node
    return yamldoc.parse_checked(text, source)


def load(path: str | os.PathLike[str]) -> yamldoc.Node:
    """`yamldoc.load(path)` through `parse`: a file's document, JSON read by json.loads where it can be."""
    source = os.fspath(path)
    return yamldoc.present(parse(yamldoc.read_text(source), source), source)


def read(text: str, source: str) -> JsonNode | None:
    """The document as a `JsonNode` tree, or None when it should be read as YAML (see the module docstring).
    `text` has passed `yamldoc.checked_text`'s character checks and starts with `{` or `[` after whitespace."""
    doubtful = _DOUBTFUL_ASCII if text.isascii() else _DOUBTFUL_CHARS  # the others cannot be in ASCII text
    if any(c in text for c in doubtful) or _KEY_SPACE.search(text):
        return None
    try:
        value = _DECODER.decode(text)
    except (_Doubtful, ValueError, RecursionError):
        return None
    if not _shape_ok(value, text):
        return None
    return JsonNode(value, _Document(text, source), None, None)


class _Document:
    __slots__ = ("source", "text")

    def __init__(self, text: str, source: str) -> None:
        self.text = text
        self.source = source


def _locate(text: str, steps: list[str | int]) -> tuple[int, int | None]:
    """(offset of the value at `steps` from the root, offset of its key or None) in JSON text that decoded."""
    ws, scan = WHITESPACE.match, _SKIP.scan_once  # type: ignore[attr-defined]  # json's C scanner
    pos = ws(text, 0).end()
    key_pos = None
    for step in steps:
        key_pos = None
        pos += 1  # `{` or `[`
        if isinstance(step, str):
            while True:
                pos = ws(text, pos).end()
                at = pos
                key, pos = scanstring(text, pos + 1)
                pos = ws(text, ws(text, pos).end() + 1).end()  # past `:`
                if key == step:
                    key_pos = at
                    break
                pos = ws(text, scan(text, pos)[1]).end() + 1  # past the value and `,`
        else:
            for _ in range(step):
                pos = ws(text, scan(text, ws(text, pos).end())[1]).end() + 1
            pos = ws(text, pos).end()
    return pos, key_pos


_SKIP = json.JSONDecoder()


def _line(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _copy(v: Any) -> Any:
    t = type(v)
    if t is dict:
        return {k: _copy(x) for k, x in v.items()}
    if t is list:
        return [_copy(x) for x in v]
    return v


def _text(v: Any) -> str | None:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    t = type(v)
    if t is str:
        return v  # type: ignore[no-any-return]  # type(v) is str
    if t is int:
        return int.__repr__(v)
    if t is float:
        return float.__repr__(v)
    return None


class JsonNode(yamldoc.Node):
    """A `yamldoc.Node` over a value `json.loads` made: the same interface, messages and lines (computed from
    the text when an error needs them)."""

    def __init__(self, value: Any, doc: _Document, parent: JsonNode | None, key: str | int | None) -> None:
        # no super().__init__: its attributes are properties here, computed on demand
        self._v = value
        self._doc = doc
        self._parent = parent
        self._key = key

    # -- location ------------------------------------------------------------------------
    @property
    def source(self) -> builtins.str:  # type: ignore[override]  # computed from the document, never set
        return self._doc.source

    @property
    def path(self) -> builtins.str:  # type: ignore[override]  # computed from the parent's path, never set
        if self._parent is None:
            return ""
        return self._parent._child_path(self._key)  # type: ignore[arg-type]  # a child has a key

    def _steps(self) -> list[builtins.str | builtins.int]:
        steps: list[builtins.str | builtins.int] = []
        node: JsonNode | None = self
        while node is not None and node._parent is not None:
            steps.append(node._key)  # type: ignore[arg-type]  # a child has a key
            node = node._parent
        return steps[::-1]

    @property
    def line(self) -> builtins.int:
        return _line(self._doc.text, _locate(self._doc.text, self._steps())[0])

    @property
    def key_line(self) -> builtins.int:
        value_at, key_at = _locate(self._doc.text, self._steps())
        return _line(self._doc.text, key_at if key_at is not None else value_at)

    # -- kinds ----------------------------------------------------------------------------
    @property
    def is_map(self) -> builtins.bool:
        return type(self._v) is dict

    @property
    def is_list(self) -> builtins.bool:
        return type(self._v) is list

    @property
    def is_scalar(self) -> builtins.bool:
        return type(self._v) is not dict and type(self._v) is not list

    @property
    def is_null(self) -> builtins.bool:
        return self._v is None

    @property
    def text(self) -> builtins.str | None:
        return _text(self._v)

    def plain(self) -> Any:
        return self._v

    def value(self, kind: builtins.str | None = None) -> Any:
        val = self._v
        if type(val) is dict or type(val) is list:
            val = _copy(val)
        if kind is not None:
            ok = isinstance(val, yamldoc._KINDS[kind]) and not (kind in ("int", "number") and isinstance(val, bool))
            if not ok:
                self.fail(f"expected {yamldoc._describe(kind)}, got {yamldoc._describe_value(val)}",
                          hint=yamldoc._QUOTE_HINT if kind == "str" and isinstance(val, bool) else None)
        return val

    def str(self) -> builtins.str:
        v = self._v
        if type(v) is str:
            return v
        if type(v) is dict or type(v) is list:
            self.fail(f"expected a string, got {yamldoc._describe_value(v)}")
        if isinstance(v, bool) or v is None:
            self.fail(f"expected a string, got {yamldoc._describe_value(v)}",
                      hint=f"quote it if it is text: '{_text(v)}'")
        return _text(v) or ""  # a number: as written

    def int(self, *, minimum: builtins.int | None = None, maximum: builtins.int | None = None) -> builtins.int:
        v = self._v
        if type(v) is not int:
            return super().int(minimum=minimum, maximum=maximum)  # the error value() gives
        if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
            return super().int(minimum=minimum, maximum=maximum)
        return v

    # -- containers -----------------------------------------------------------------------
    def items(self) -> Iterator[tuple[builtins.str, yamldoc.Node]]:
        v = self._v
        if type(v) is not dict:
            self.fail(f"expected a mapping, got {yamldoc._describe_value(self.value())}")
        for k, x in v.items():
            yield k, JsonNode(x, self._doc, self, k)

    def _entries(self) -> dict[builtins.str, yamldoc.Node]:
        v = self._v
        if type(v) is not dict:
            return dict(self.items())  # the error `items` gives
        doc = self._doc
        return {k: JsonNode(x, doc, self, k) for k, x in v.items()}

    def list(self) -> list[yamldoc.Node]:
        v = self._v
        if type(v) is not list:
            self.fail(f"expected a list, got {yamldoc._describe_value(self.value())}")
        doc = self._doc
        return [JsonNode(x, doc, self, i) for i, x in enumerate(v)]

    def fail(self, message: builtins.str, *, hint: builtins.str | None = None) -> NoReturn:
        raise InputError(message, source=self.source, key=self.path or None, line=self.line, hint=hint)
