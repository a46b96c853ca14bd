"""A fast reader for the plain YAML that inventories and profiles are made of; None for anything else.

Large fleets are described by machine-written files: block mappings and lists, one entry per line,
values that are plain words and numbers or one-line flow collections of them
(`- {index: 0, model: A100-SXM4-80GB, layout: [3g.40gb@0, 4g.40gb@4]}`). libyaml's events cost more
than reading such lines here (each event is a Python object with two marks, and the composer then
handles each one): `compose` builds the very tree `yamldoc` composes from libyaml's events, from the
lines themselves, in about a third of the time (bench/results/startup-large.md).

It takes only what it fully understands and returns None for everything else, which `yamldoc` then
reads with libyaml or PyYAML as before, with their checks and error messages. What it takes:

* lines indented with spaces (no tab, carriage return or other YAML line break anywhere), blank lines,
  comment lines, and
  trailing comments (` #...`) on lines without quotes;
* block mappings of plain keys, `key: value` or `key:` with a nested block below it (more indented,
  or a list at the same indentation); block lists of `- value` and `- key: value` (a mapping that
  starts on the dash's line);
* values on one line: plain scalars of letters, digits and `_ . / ~ + = @ ( ) -` (with `:` inside,
  not in flow collections) and single spaces between words; quoted strings without escapes or inner
  quotes; flow mappings and lists of those, nested, closed on the same line.

Anything else returns None: document markers, directives, anchors, aliases, tags, merge keys, block
scalars, multi-line plain scalars, complex keys, empty entries, a value that YAML would refuse
(`2026-02-30`). Scalars are made by `yamldoc`'s own functions, so a value reads the same either way;
collections keep `yamldoc`'s default size and height (they only bound alias expansion, and there are no
aliases here). tests/test_yaml_plain.py checks on every shipped YAML file and on generated documents
that whatever this reader accepts, libyaml and PyYAML accept too, as the same tree: the same kinds,
tags, texts, values, styles and lines.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from migplan import yamldoc

_SAFE = r"[A-Za-z0-9_./~+=@()-]"  # characters of a plain word (YAML: none is an indicator inside one)
_FIRST = r"(?:[A-Za-z0-9_./~+()]|-(?=[A-Za-z0-9._]))"  # a plain scalar's first character (YAML: not an indicator)
# A plain scalar in block context: words, single or repeated spaces between them, `:` followed by a word
# character (YAML: `: ` would end it; `x:y` is one scalar)
_BLOCK_PLAIN = re.compile(rf"{_FIRST}(?:{_SAFE}|:(?={_SAFE})| +(?={_SAFE}))*")
# A key: the same without `:` (`a:b: c` is YAML's business), followed by `:` and a space or the end
_KEY = re.compile(rf"({_FIRST}(?:{_SAFE}| +(?={_SAFE}))*):(?: +|$)")
# A plain scalar in a flow collection: no `:` at all (libyaml and PyYAML differ on `{a:b}`), ended by
# `,` `]` `}` or the end of the line
_FLOW_PLAIN = re.compile(rf"{_FIRST}(?:{_SAFE}| +(?={_SAFE}))*")
_SPACES = re.compile(r" *")
_ODD = ("\t", "\r", "\ufeff", "\x85", "\u2028", "\u2029")
_WORD = rf"{_FIRST}(?:{_SAFE}| +(?={_SAFE}))*"
# Flow collections of plain words, by far the most common (`{p50: 5405, p95: 8329}`, `[a, b]`), and
# mappings of words and such lists (`{index: 0, layout: [3g.40gb@0, 4g.40gb@4]}`): each checked whole by
# one expression, then cut at `,` and `: `, which cannot occur inside a word here
_WORDS = rf"\[ *(?:{_WORD}(?: *, *{_WORD})* *)?\]"
_FLAT_VALUE = rf"(?:{_WORD}|{_WORDS})"
_FLAT_MAP = re.compile(rf"\{{ *{_WORD}: +{_FLAT_VALUE}(?: *, *{_WORD}: +{_FLAT_VALUE})* *\}}")
_FLAT_SEQ = re.compile(_WORDS)
_ENTRY = re.compile(rf"({_WORD}): +({_FLAT_VALUE})")

_MAP, _SEQ = yamldoc.MAP, yamldoc.SEQ
_Mapping, _Sequence, _Scalar, STR = yamldoc._Mapping, yamldoc._Sequence, yamldoc._Scalar, yamldoc.STR
MAX_DEPTH = 50  # deeper documents go to yamldoc, which refuses more than yamldoc.MAX_DEPTH levels


# Plain scalars already read: text -> (tag, value). A fleet's files repeat a few hundred texts (`true`,
# `A100-SXM4-80GB`, `3g.40gb@0`, small numbers) hundreds of thousands of times; each was resolved and
# converted again. The values are immutable (str, int, float, bool, None, dates), so nodes may share them.
_SEEN: dict[str, tuple[str, Any]] = {}
_SEEN_MAX = 50_000


def _plain(text: str, mark: Any) -> Any:
    """yamldoc's node for a plain scalar (`yamldoc._plain_scalar`), its resolution remembered."""
    seen = _SEEN.get(text)
    if seen is not None:
        return _Scalar(seen[0], text, mark, None, None, seen[1])
    node = yamldoc._plain_scalar(text, mark)
    if len(text) <= 64 and len(_SEEN) < _SEEN_MAX:
        _SEEN[text] = (node.tag, node.data)
    return node


class _Mark:
    """The start of a node: `yamldoc` and its callers only ever read `.line` (0-based)."""

    __slots__ = ("line",)

    def __init__(self, line: int) -> None:
        self.line = line

    def __repr__(self) -> str:
        return f"<line {self.line + 1}>"


class _Refused(Exception):
    """Not in this reader's subset: yamldoc reads the text."""


def compose(text: str) -> yaml.Node | None:
    """The node tree of `text` as `yamldoc.compose` makes it, or None when `text` is outside the subset
    (or empty): the caller then reads it with libyaml or PyYAML."""
    # tabs, carriage returns, byte-order marks and YAML's other line breaks (NEL, LS, PS: PyYAML ends a
    # line, and a comment, at each of them) are yamldoc's
    if any(c in text for c in _ODD):
        return None
    try:
        lines = _lines(text)
        if not lines:
            return None
        node, end = _Reader(lines).block(0, 0)
    except (_Refused, yamldoc._Problem, RecursionError):
        return None
    return node if end == len(lines) else None


def _lines(text: str) -> list[list[Any]]:
    """[indent, content, mark] of each line with content, comments removed."""
    out: list[list[Any]] = []
    for number, line in enumerate(text.split("\n")):
        content = line.lstrip(" ")
        if not content or content[0] == "#":
            continue
        if "#" in content:
            cut = _comment(content)
            if cut < 0:
                raise _Refused  # `a#b` is a scalar
            content = content[:cut]
        content = content.rstrip(" ")
        indent = len(line) - len(line.lstrip(" "))
        if indent == 0 and (content[:3] in ("---", "...") or content[0] == "%"):
            raise _Refused  # document markers and directives
        out.append([indent, content, _Mark(number)])
    return out


def _comment(content: str) -> int:
    """Where the comment starts: the first ` #` outside quotes (YAML: `#` after a space); -1 if none. A quote
    inside a word (`a"b`) is taken as opening a text here, but a line with one is refused after all."""
    i = 0
    while True:
        cut = content.find(" #", i)
        if cut < 0:
            return -1
        d, q = content.find('"', i, cut), content.find("'", i, cut)
        if d < 0 and q < 0:
            return cut
        start = d if q < 0 or 0 <= d < q else q
        close = content.find(content[start], start + 1)
        if close < 0:
            return -1
        i = close + 1


class _Reader:
    def __init__(self, lines: list[list[Any]]) -> None:
        self.lines = lines
        self.n = len(lines)

    def block(self, i: int, depth: int) -> tuple[Any, int]:
        """The block collection that starts at line `i` (at that line's indentation)."""
        if depth > MAX_DEPTH:
            raise _Refused
        content = self.lines[i][1]
        if content == "-" or content[:2] == "- ":
            return self.sequence(i, depth)
        return self.mapping(i, depth)

    def mapping(self, i: int, depth: int) -> tuple[Any, int]:
        lines, n = self.lines, self.n
        indent, _, mark = lines[i]
        pairs: list[tuple[Any, Any]] = []
        node = _Mapping(_MAP, pairs, mark, None, False)
        while i < n:
            line = lines[i]
            if line[0] != indent:
                break
            content, mark = line[1], line[2]
            m = _KEY.match(content)
            if m is None:
                raise _Refused
            key = _plain(m.group(1), mark)
            if key.tag == yamldoc.MERGE:
                raise _Refused
            rest = content[m.end():]
            i += 1
            if rest:
                value = _value(rest, mark, depth)
                if i < n and lines[i][0] > indent:
                    raise _Refused  # a multi-line scalar, or an error
            elif i < n and (lines[i][0] > indent or (
                    lines[i][0] == indent and (lines[i][1] == "-" or lines[i][1][:2] == "- "))):
                value, i = self.block(i, depth + 1)  # a nested block (a list may sit at the key's indentation)
            else:
                value = _plain("", mark)  # `key:` alone: null
            pairs.append((key, value))
        if i < n and lines[i][0] > indent:
            raise _Refused
        return node, i

    def sequence(self, i: int, depth: int) -> tuple[Any, int]:
        lines, n = self.lines, self.n
        indent, _, mark = lines[i]
        items: list[Any] = []
        node = _Sequence(_SEQ, items, mark, None, False)
        while i < n:
            line = lines[i]
            content = line[1]
            if line[0] != indent or content[:2] != "- ":
                if line[0] == indent and content == "-":
                    raise _Refused  # an empty entry
                break
            rest = content[2:]
            stripped = rest.lstrip(" ")
            if stripped[:2] == "- " or stripped == "-":
                raise _Refused  # a list in a list on one line
            if _KEY.match(stripped) is not None:
                # `- key: value`: a mapping whose keys sit where this one does
                line[0], line[1] = indent + 2 + len(rest) - len(stripped), stripped
                value, i = self.mapping(i, depth + 1)
                line[0], line[1] = indent, content
            else:
                value = _value(stripped, line[2], depth)
                i += 1
                if i < n and lines[i][0] > indent:
                    raise _Refused
            items.append(value)
        if i < n and lines[i][0] > indent:
            raise _Refused
        return node, i


def _value(text: str, mark: Any, depth: int) -> Any:
    """A value written on one line after `key: ` or `- `."""
    first = text[0]
    if first == "{" or first == "[":
        flat = _flat(text, mark)
        if flat is not None:
            return flat
        node, end = _flow(text, 0, mark, depth + 1)
        if end != len(text):
            raise _Refused
        return node
    if first == '"' or first == "'":
        return _quoted(text, 0, mark, len(text))
    if _BLOCK_PLAIN.fullmatch(text) is None:
        raise _Refused
    return _plain(text, mark)


def _flat(text: str, mark: Any) -> Any:
    """A flow collection of plain words (a mapping's values may be lists of words) that is all of `text`,
    else None."""
    if text[0] == "{":
        if _FLAT_MAP.fullmatch(text) is None:
            return None
        pairs = []
        for m in _ENTRY.finditer(text):
            k, v = m.groups()
            key = _plain(k, mark)
            if key.tag == yamldoc.MERGE:
                raise _Refused
            pairs.append((key, _words(v, mark) if v[0] == "[" else _plain(v, mark)))
        return _Mapping(_MAP, pairs, mark, None, True)
    if _FLAT_SEQ.fullmatch(text) is None:
        return None
    return _words(text, mark)


def _words(text: str, mark: Any) -> Any:
    """`[a, b]` (checked by `_WORDS`)."""
    inner = text[1:-1].strip(" ")
    return _Sequence(_SEQ, [_plain(v.strip(" "), mark) for v in inner.split(",")] if inner else [], mark, None,
                     True)


def _quoted(text: str, start: int, mark: Any, end: int | None) -> Any:
    """A quoted string at `start` without escapes (`end`: it must end there); its node, or (node, end)."""
    q = text[start]
    close = text.find(q, start + 1)
    if close < 0:
        raise _Refused
    inner = text[start + 1:close]
    if "\\" in inner or (q == "'" and text[close + 1:close + 2] == "'"):
        raise _Refused  # escapes and `''` are yamldoc's
    node = _Scalar(STR, inner, mark, None, q, inner)
    if end is not None:
        if close + 1 != end:
            raise _Refused
        return node
    return node, close + 1


def _flow(text: str, i: int, mark: Any, depth: int) -> tuple[Any, int]:
    """The flow collection opening at `text[i]`, and the index after it."""
    if depth > MAX_DEPTH:
        raise _Refused
    is_map = text[i] == "{"
    close = "}" if is_map else "]"
    entries: list[Any] = []
    node = (_Mapping(_MAP, entries, mark, None, True) if is_map
            else _Sequence(_SEQ, entries, mark, None, True))
    i = _SPACES.match(text, i + 1).end()  # type: ignore[union-attr]  # ' *' matches everywhere
    if text[i:i + 1] == close:
        return node, i + 1
    n = len(text)
    while True:
        if is_map:
            m = _FLOW_PLAIN.match(text, i)
            if m is None or text[m.end():m.end() + 2] != ": ":
                raise _Refused
            key = _plain(m.group(), mark)
            if key.tag == yamldoc.MERGE:
                raise _Refused
            i = _SPACES.match(text, m.end() + 2).end()  # type: ignore[union-attr]  # ' *' matches everywhere
            value, i = _flow_value(text, i, mark, depth)
            entries.append((key, value))
        else:
            value, i = _flow_value(text, i, mark, depth)
            entries.append(value)
        i = _SPACES.match(text, i).end()  # type: ignore[union-attr]  # ' *' matches everywhere
        if i >= n:
            raise _Refused  # not closed on this line
        c = text[i]
        if c == close:
            return node, i + 1
        if c != ",":
            raise _Refused
        i = _SPACES.match(text, i + 1).end()  # type: ignore[union-attr]  # ' *' matches everywhere
        if text[i:i + 1] in (close, ",", ""):
            raise _Refused  # a trailing comma or an empty entry


def _flow_value(text: str, i: int, mark: Any, depth: int) -> tuple[Any, int]:
    c = text[i:i + 1]
    if c == "{" or c == "[":
        return _flow(text, i, mark, depth + 1)
    if c == '"' or c == "'":
        return _quoted(text, i, mark, None)  # type: ignore[no-any-return]  # with no `end`, _quoted gives (node, end)
    m = _FLOW_PLAIN.match(text, i)
    if m is None:
        raise _Refused
    return _plain(m.group(), mark), m.end()
