"""Strict reading of YAML documents with file, key path and line in every error.

PyYAML's `safe_load` forgets where a value came from and silently keeps the last of two
duplicate keys. We compose the document ourselves, from the parser's events straight into dicts,
lists and converted scalars with their lines kept beside them (`_Map`, `_Seq`: one object per
collection, none per scalar), and read it through `Node`, so that each error can say
`inventory/x.yaml:12: hosts.gpu01.gpus[1].index: ...` (README "Bad input"). Readers of large documents (the
profiles, an inventory's GPUs) read a mapping through `Node.entries`: the same checks, with a `Node` made only
for a value that needs one (a collection read further, or a value whose check fails).

How a document is read (every refusal is an `InputError` with file and line, never a traceback):

* Files: only regular files are read (a FIFO, `/dev/zero` or a socket is refused before any read,
  which never blocks: the file is opened with O_NONBLOCK and checked with fstat on the opened
  descriptor), at most `MAX_FILE_MB` MiB (64; the environment variable MIGPLAN_MAX_FILE_MB
  raises or lowers it), UTF-8, without control characters.
* Parsing: libyaml's C parser (`yaml.cyaml.CParser`, the parser of `CSafeLoader`) when PyYAML was built
  with it, else PyYAML's pure-Python parser.
  Both only produce events; the same iterative composer below builds the values from them, so tags,
  anchors, merge keys, limits and values are handled identically. Where the two parsers differ
  (libyaml accepts tabs after tokens, `#` right after `|` or `>`, and a byte-order mark anywhere)
  the text goes to PyYAML alone; when the libyaml path refuses a document of at most
  `REPARSE_LIMIT_BYTES`, PyYAML reads it again. So a document is accepted, read and refused (same
  message, same line) alike by both; differential fuzz tests check it. Speed: a 7 MB profiles
  file of 20,000 workloads loads in about 4.5 s instead of 27 s (libyaml, and the garbage collector
  paused while the tree is built and read, see `paused_gc`).
* JSON plans are read first by `json.loads` (`migplan.yamljson`, which builds on this module; `documents.load_plan`
  calls it), with the values, messages, key paths and lines of this reader, and fall back to it for anything
  doubtful (its docstring has the list).
* One document per file. Nesting is at most `MAX_DEPTH` levels (counted through aliases), and
  aliases may expand to at most `MAX_ALIAS_NODES` nodes in all (a "billion laughs" document is
  refused before anything is built); an alias inside the collection it names is refused.
* Tags: values are plain YAML: strings, numbers, booleans, null, lists and mappings. Explicit
  `!!str`, `!!int`, `!!float`, `!!bool`, `!!null`, `!!timestamp`, `!!map` and `!!seq` are
  accepted when the value is one (`!!int abc` is refused); a scalar with the non-specific tag `!`
  or Ansible's `!unsafe` is a string.
  Any other tag (`!vault`, `!!python/...`, `!!binary`, `!!set`, `!!omap`, custom ones) is refused:
  migplan neither decrypts vault values nor builds objects.
* Numbers are read as YAML 1.1 reads them, except a float with an exponent but no dot or no sign after
  the `e` (`1e-05`, `2E3`): YAML 1.1 reads a string, YAML 1.2 (and JSON, and Python's own `repr` of
  0.00001) a number, and so does migplan, so a plan holding such a value is never refused.
* Values are converted once, at parse time: an impossible date (`2026-02-30`) or a number longer
  than `MAX_NUMBER_CHARS` characters is refused; `.nan` and `.inf` are values, refused by `number()`.
* Merge keys (`<<: *common`, `<<: [*a, *b]`) work as YAML 1.1 defines them: the merged mapping's
  entries come first, explicit keys win over merged ones, an earlier mapping in a merge list wins
  over a later one; duplicate explicit keys are still errors.
* Keys are text as written: `0755:`, `on:`, `007:` and `1e3:` are the keys "0755", "on", "007"
  and "1e3" (YAML 1.1 would turn them into 493, True, 7 and 1000.0). A list or mapping used as a
  key, and an empty key, are refused.
* Strings (`Node.str()`): a plain scalar that YAML would read as a number or a date is read as
  written, so `name: 007`, `name: 0x1F` and `user: 1e3` give "007", "0x1F" and "1e3". A plain
  `yes`/`no`/`on`/`off`/`true`/`false` or null where a string is expected is refused with a hint
  to quote it (that is nearly always a mistake, and quoting says what was meant).
"""

from __future__ import annotations

import builtins
import contextlib
import gc
import importlib
import math
import os
import re
import stat
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import yaml
import yaml.events as ev
from yaml.constructor import SafeConstructor
from yaml.parser import Parser
from yaml.reader import Reader
from yaml.resolver import Resolver
from yaml.scanner import Scanner

from migplan.errors import InputError


def _libyaml_parser() -> Any:
    """libyaml's parser (events only), when PyYAML was built with it."""
    try:
        cyaml = importlib.import_module("yaml.cyaml")
    except ImportError:  # pragma: no cover - depends on the PyYAML build
        return None
    return getattr(cyaml, "CParser", None)


_CParser = _libyaml_parser()

MAX_FILE_MB = 64  # default cap on a file's size; MIGPLAN_MAX_FILE_MB overrides it
MAX_FILE_ENV = "MIGPLAN_MAX_FILE_MB"
MAX_DEPTH = 100  # nested lists and mappings, counted through aliases
MAX_ALIAS_NODES = 200_000  # nodes reached through aliases (and merge keys), in all
MAX_NUMBER_CHARS = 64  # characters of one integer or float (2**64 has 20 digits)
REPARSE_LIMIT_BYTES = 1024 * 1024  # libyaml errors in documents up to this are re-read by PyYAML (~3 s)
USE_LIBYAML = _CParser is not None  # tests set this False to check the pure-Python parser

_KINDS = {
    "str": (str,),
    "int": (int,),
    "number": (int, float),
    "bool": (bool,),
    "list": (list,),
    "map": (dict,),
}

_Y = "tag:yaml.org,2002:"
STR, INT, FLOAT, BOOL, NULL, TIMESTAMP = (_Y + t for t in ("str", "int", "float", "bool", "null", "timestamp"))
MAP, SEQ, MERGE = _Y + "map", _Y + "seq", _Y + "merge"
_SCALAR_TAGS = {STR, INT, FLOAT, BOOL, NULL, TIMESTAMP}
_STRING_TAGS = {"!unsafe"}  # Ansible: a string never templated
_IMPLICIT = Resolver.yaml_implicit_resolvers
_NON_PRINTABLE = Reader.NON_PRINTABLE
_QUOTE_HINT = "quote the value if it is text, e.g. '...'"


class _Map(dict):  # type: ignore[type-arg]  # keys are str, values anything composed
    """A composed mapping: its entries (keys as written) in order, and where they came from.

    `line`: the mapping's first line; `klines`: each key's line, in the entries' order; `vlines`: a scalar
    value's line where it is not its key's (None when there is none); `texts`: a value's text as written where
    the value is not a string or a plain decimal integer (None when there is none); `dups`: the first duplicate
    key (the number of entries before it, the key, its line), which `Node.items` refuses where it is reached;
    `size` and `height`: nodes and levels, counted through aliases, measured when an alias first names it
    (`_measure`; 0 until then)."""

    __slots__ = ("dups", "height", "klines", "line", "size", "texts", "vlines")
    line: int
    klines: list[int]
    vlines: dict[str, int] | None
    texts: dict[Any, str] | None
    dups: tuple[int, str, int] | None
    size: int
    height: int


class _Seq(list):  # type: ignore[type-arg]  # items are anything composed
    """A composed list: its items, each item's line (`lines`), texts as `_Map` keeps them (by index), and the
    size and height."""

    __slots__ = ("height", "line", "lines", "size", "texts")
    line: int
    lines: list[int]
    texts: dict[Any, str] | None
    size: int
    height: int


def _new_map(line: int) -> _Map:
    m = _Map()
    m.line, m.klines, m.vlines, m.texts, m.dups, m.size, m.height = line, [], None, None, None, 0, 0
    return m


def _new_seq(line: int) -> _Seq:
    s = _Seq()
    s.line, s.lines, s.texts, s.size, s.height = line, [], None, 0, 0
    return s


def _event_line(event: Any) -> int:
    """An event's first line, from 1 (the parsers give every event its marks)."""
    return int(event.start_mark.line) + 1


def _keep_text(coll: _Map | _Seq, at: Any, text: str) -> None:
    if coll.texts is None:
        coll.texts = {}
    coll.texts[at] = text


def _append(s: _Seq, value: Any, line: int, text: str | None) -> None:
    s.append(value)
    s.lines.append(line)
    if text is not None:
        _keep_text(s, len(s) - 1, text)


def _keep_entry(m: _Map, key: str, value: Any, kline: int, vline: int | None, text: str | None) -> None:
    """A mapping's new entry; `vline`: a scalar value's line when it is not the key's."""
    m[key] = value
    m.klines.append(kline)
    if vline is not None:
        if m.vlines is None:
            m.vlines = {}
        m.vlines[key] = vline
    if text is not None:
        _keep_text(m, key, text)


_COLLECTIONS = frozenset((_Map, _Seq))


def _is_collection(value: Any) -> bool:
    return type(value) in _COLLECTIONS


def _tag_name(tag: str) -> str:
    return "!!" + tag[len(_Y):] if tag.startswith(_Y) else tag


def _fail_at(source: str, line: int | None, message: str, hint: str | None = None, key: str | None = None) -> NoReturn:
    raise InputError(message, source=source, line=line, hint=hint, key=key or None)


class _Problem(Exception):
    """A value that is not what its tag says; the caller adds file, line and key."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


# --- scalars ----------------------------------------------------------------------------------

_CONSTRUCTOR = SafeConstructor()


_RESOLVERS: dict[str, tuple[tuple[str, re.Pattern[str]], ...]] = {
    str(k): tuple((str(t), r) for t, r in v) for k, v in _IMPLICIT.items() if k is not None}
_DECIMAL = re.compile(r"[-+]?[1-9][0-9]*|0")  # the common integers, converted without the constructor
# The common floats (`0.135`, `-2.5`): YAML 1.1 reads them as !!float and the constructor's result is float(value).
_SIMPLE_FLOAT = re.compile(r"[-+]?[0-9]+\.[0-9]+")
_NUMBER_START = frozenset("0123456789-+")
_DIGITS = frozenset("0123456789")
_UNSIGNED_DECIMAL = re.compile(r"[1-9][0-9]*|0")  # written as Python writes its value: no text kept
# Floats with an exponent that YAML 1.1 reads as strings (no dot, or no sign after the `e`): `1e-05` and
# `1e+20` are how JSON writers (Python's repr, migplan's own plans) write 0.00001 and 10**20, and YAML 1.2's
# core schema reads them as floats. Read as numbers, so that a plan with such a value is not refused.
_EXPONENT_FLOAT = re.compile(r"[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+")


def _resolve_plain(value: str) -> str:
    """The tag YAML 1.1 (PyYAML's resolver) gives a plain scalar."""
    tag = _RESOLVED.get(value)
    if tag is None:
        tag = STR
        if value == "":
            tag = NULL
        else:
            for t, regexp in _RESOLVERS.get(value[0], ()):
                if regexp.match(value):
                    tag = t
                    break
            if tag == STR and _EXPONENT_FLOAT.fullmatch(value):
                tag = FLOAT
        if len(value) <= 64 and len(_RESOLVED) < _RESOLVED_MAX:  # short texts only: a bounded cache
            _RESOLVED[value] = tag
    return tag


# Tags of plain scalars already resolved: a large inventory repeats `3g.20gb@0` and its like thousands of
# times, and each went through the resolver's regular expressions (a tenth of reading 7,000 GPUs).
_RESOLVED: dict[str, str] = {}
_RESOLVED_MAX = 20_000


def _matches(tag: str, value: str) -> bool:
    key = value[0] if value else ""
    return any(t == tag and r.match(value) for t, r in _IMPLICIT.get(key, ()))


def _convert(tag: str, value: str, explicit: bool) -> Any:
    """A scalar's Python value; `_Problem` when it is not what its tag says."""
    if tag == STR or tag in _STRING_TAGS:
        return value
    if tag == NULL:
        if explicit and value not in ("", "~", "null", "Null", "NULL"):
            raise _Problem(f"{_short(value)} is not null (tagged !!null)")
        return None
    node = yaml.ScalarNode(tag, value)  # what PyYAML's constructors read
    if tag == BOOL:
        if explicit and not _matches(BOOL, value):
            raise _Problem(f"{_short(value)} is not true or false (tagged !!bool)")
        return _CONSTRUCTOR.construct_yaml_bool(node)
    if tag in (INT, FLOAT):
        if len(value) > MAX_NUMBER_CHARS:
            raise _Problem(f"a number of {len(value)} characters is too long (at most {MAX_NUMBER_CHARS})",
                           _QUOTE_HINT)
        try:
            return (_CONSTRUCTOR.construct_yaml_int if tag == INT else _CONSTRUCTOR.construct_yaml_float)(node)
        except (ValueError, TypeError, IndexError, ArithmeticError):
            what = "an integer" if tag == INT else "a number"
            raise _Problem(f"{_short(value)} is not {what} (tagged {_tag_name(tag)})") from None
    if tag == TIMESTAMP:
        if explicit and not _matches(TIMESTAMP, value):
            raise _Problem(f"{_short(value)} is not a date or time (tagged !!timestamp)")
        try:
            return _CONSTRUCTOR.construct_yaml_timestamp(node)
        except (ValueError, TypeError, AttributeError, ArithmeticError) as err:
            raise _Problem(f"{_short(value)} is not a valid date or time ({err})", _QUOTE_HINT) from None
    if tag == "!vault":
        raise _Problem("an Ansible Vault value (!vault) cannot be read: migplan does not decrypt",
                       "keep encrypted variables in group_vars/ or host_vars/ files, which migplan does not read")
    raise _Problem(f"the tag {_tag_name(tag)} is not supported; migplan reads plain values",
                   "remove the tag (strings, numbers, true/false, lists and mappings need none)")


def _short(value: str) -> str:
    return repr(value) if len(value) <= 40 else repr(value[:37] + "...")


# A composed scalar: (value, its text as written or None, is the merge key `<<`). The text is kept only where
# the value's own text may differ from it (`007`, `1.50`, `yes`, `~`, a date): a string is its own text, and a
# plain decimal integer without a sign is written as Python writes it (`_written`).
_ScalarValue = tuple[Any, "str | None", bool]


def _scalar(event: ev.ScalarEvent) -> _ScalarValue:
    """A scalar event's value, resolved and converted as YAML 1.1 reads it; `_Problem` when it does not convert."""
    tag, value = event.tag, event.value
    if tag == "!":  # the non-specific tag: a string, never resolved (YAML spec; libyaml agrees, PyYAML not)
        return value, None, False
    if tag is None:
        if not event.implicit[0]:
            return value, None, False  # quoted: a string
        return _plain_scalar(value)
    if tag == MERGE:  # `!!merge <<`: a merge key as a key, else the text
        return value, None, True
    data = _convert(tag, value, True)
    return data, None if type(data) is str else value, False


def _plain_scalar(value: str) -> _ScalarValue:
    """A plain scalar (no tag, no quotes), resolved and converted as YAML 1.1 reads it."""
    if value and value[0] not in _RESOLVERS:
        return value, None, False  # most strings
    if value[:1] in _NUMBER_START and len(value) < 19:  # most numbers: what the resolver and constructor give
        if _DECIMAL.fullmatch(value):
            return int(value), value if value[0] == "+" else None, False
        if _SIMPLE_FLOAT.fullmatch(value):
            return float(value), value, False
    tag = _resolve_plain(value)
    if tag == MERGE:  # `<<` is a merge key as a key, else the text "<<"
        return value, None, True
    if tag not in _SCALAR_TAGS or tag == STR:  # `=` and the like: text
        return value, None, False
    return _convert(tag, value, False), value, False


def _written(value: Any) -> str:
    """The text of a scalar whose text was not kept: a string, or a decimal integer as Python writes it."""
    return value if type(value) is str else builtins.str(value)


# --- composition --------------------------------------------------------------------------------

class _Frame:
    """A collection being composed: the collection, a mapping's pending key (its text, line and whether it is
    `<<`) and the merge keys' values seen."""

    __slots__ = ("coll", "is_map", "key", "kline", "kmerge", "merges")

    def __init__(self, coll: Any, is_map: bool) -> None:  # coll: a `_Map` when is_map, else a `_Seq`
        self.coll = coll
        self.is_map = is_map
        self.key: str | None = None
        self.kline = 0
        self.kmerge = False
        self.merges: list[tuple[Any, int, int]] | None = None  # (value, its line, the key's line)


_Root = tuple[Any, int, "str | None"]  # a document's value, its line, its text as written (see `_scalar`)


def _path(stack: list[_Frame]) -> str:
    """The key path of the next value to be added (as `Node` writes it: `a.b[0].c`)."""
    out = ""
    for frame in stack:
        if frame.is_map:
            if frame.key is None:
                break
            out = f"{out}.{frame.key}" if out else frame.key
        else:
            out = f"{out}[{len(frame.coll)}]"
    return out if len(out) <= 120 else out[:117] + "..."


def _measure(value: Any) -> tuple[int, int]:
    """Nodes (each key counts one) and levels of a composed value, counted through aliases; kept on each
    collection measured (it is closed: an alias names only closed collections), so that every collection is
    walked once however many aliases name it. The bounds on aliases are checked with it (`_Composer._alias`);
    the recursion is at most `MAX_DEPTH` deep, the depth the composer allows."""
    if type(value) is _Map:
        children: Any = value.values()
        size, height = 1 + len(value), 1 if value else 0
    elif type(value) is _Seq:
        children, size, height = value, 1, 0
    else:
        return 1, 1
    if value.size:
        return value.size, value.height
    for child in children:
        s, h = _measure(child)
        size += s
        height = max(height, h)
    value.size, value.height = size, height + 1
    return value.size, value.height


class _Composer:
    """Builds the document's values from parser events iteratively (no recursion, so no depth limit of
    Python's): dicts and lists with the lines beside them (`_Map`, `_Seq`), scalars resolved and converted;
    depth and alias expansion bounded."""

    def __init__(self, next_event: Callable[[], Any], source: str) -> None:
        self.next_event = next_event
        self.source = source
        self.anchors: dict[str, Any] = {}  # a collection, or a scalar's (value, text as written, line, text, merge)
        self.open: set[int] = set()  # ids of anchored collections still being composed
        self.alias_nodes = 0
        self.stack: list[_Frame] = []
        self.root: _Root | None = None

    def fail(self, line: int | None, message: str, hint: str | None = None) -> NoReturn:
        _fail_at(self.source, line, message, hint, _path(self.stack))

    def compose(self) -> _Root | None:
        """The document's (value, line, text as written or None), or None for an empty stream."""
        nxt = self.next_event
        nxt()  # StreamStart
        event = nxt()
        if isinstance(event, ev.StreamEndEvent):
            return None
        self._document()
        event = nxt()
        if not isinstance(event, ev.StreamEndEvent):
            self.fail(event.start_mark.line + 1,
                      "found a second document (after '---'); a migplan file holds one document",
                      "remove the extra '---' line or split the file")
        return self.root

    def _document(self) -> None:
        stack = self.stack
        next_event, place = self.next_event, self._place
        scalar_event, resolvers = ev.ScalarEvent, _RESOLVERS
        digits, decimal = _DIGITS, _UNSIGNED_DECIMAL.fullmatch
        while True:
            event = next_event()
            kind = type(event)
            if kind is scalar_event:
                value = event.value
                line = event.start_mark.line + 1
                if event.tag is None and (not event.implicit[0] or (value and value[0] not in resolvers)):
                    data, text, merge = value, None, False  # most keys and strings: `_scalar`'s first cases
                elif event.tag is None and value[:1] in digits and len(value) < 19 and decimal(value):
                    data, text, merge = int(value), None, False  # most numbers: `_plain_scalar`'s first case
                else:
                    try:
                        data, text, merge = _scalar(event)
                    except _Problem as problem:
                        self.fail(line, problem.message, problem.hint)
                if event.anchor is not None:
                    self._anchor(event.anchor, (data, value, line, text, merge), line)
                    continue
                if stack and not merge:
                    # the common cases, inline: a list item, a value on its key's line, or a key that is not empty
                    top = stack[-1]
                    coll = top.coll
                    if not top.is_map:
                        _append(coll, data, line, text)
                        continue
                    key = top.key
                    if key is None:
                        if value != "":
                            top.key, top.kline = value, line
                            continue
                    elif line == top.kline and not top.kmerge and key not in coll:
                        coll[key] = data
                        coll.klines.append(line)
                        if text is not None:
                            _keep_text(coll, key, text)
                        top.key = None
                        continue
                place(data, value, line, text, merge)
            elif self._structure(event, kind):
                return

    def _structure(self, event: Any, kind: type) -> bool:
        """A start, end or alias event handled; True at the document's end."""
        if kind is ev.MappingEndEvent or kind is ev.SequenceEndEvent:
            coll = self._end()
            self._place(coll, None, coll.line, None, False)
        elif kind is ev.MappingStartEvent or kind is ev.SequenceStartEvent:
            self._start(event)
        elif kind is ev.AliasEvent:
            self._alias(event)
        return kind is ev.DocumentEndEvent  # DocumentStart: structure only

    def _place(self, data: Any, raw: str | None, line: int, text: str | None, merge: bool) -> None:
        """Add a finished value (`raw`: a scalar's text as written, None for a collection) where the stack is."""
        stack = self.stack
        if not stack:
            self.root = (data, line, text)
            return
        top = stack[-1]
        coll = top.coll
        if not top.is_map:
            _append(coll, data, line, text)
        elif top.key is None:
            if raw is None:
                self.fail(line, "a key must be a name, not a list or mapping", "write the key as plain text")
            if not merge and raw == "":
                self.fail(line, "a key is empty", "give the key a name")
            top.key, top.kline, top.kmerge = raw, line, merge
            return
        else:
            key, kline = top.key, top.kline
            top.key = None
            if top.kmerge:
                top.kmerge = False
                if top.merges is None:
                    top.merges = []
                top.merges.append((data, line, kline))
            elif key in coll:
                if coll.dups is None:
                    coll.dups = (len(coll), key, kline)
            else:
                _keep_entry(coll, key, data, kline, line if raw is not None and line != kline else None, text)

    def _start(self, event: ev.CollectionStartEvent) -> None:
        line = _event_line(event)
        if len(self.stack) >= MAX_DEPTH:
            self.fail(line, f"lists and mappings are nested more than {MAX_DEPTH} levels deep",
                      "migplan files need only a few levels; check for runaway brackets")
        coll: _Map | _Seq
        is_map = isinstance(event, ev.MappingStartEvent)
        if is_map:
            self._collection_tag(event, MAP)
            coll = _new_map(line)
        else:
            self._collection_tag(event, SEQ)
            coll = _new_seq(line)
        if event.anchor is not None:
            self._anchor(event.anchor, coll, line)
            self.open.add(id(coll))
        self.stack.append(_Frame(coll, is_map))

    def _end(self) -> _Map | _Seq:
        frame = self.stack[-1]
        coll: _Map | _Seq = frame.coll
        if frame.merges is not None:
            self._merge(frame)
        if self.open:
            self.open.discard(id(coll))
        self.stack.pop()
        return coll

    def _collection_tag(self, event: ev.CollectionStartEvent, default: str) -> None:
        tag = event.tag
        if tag is None or tag == "!" or tag == default:
            return
        what = "mapping" if default == MAP else "list"
        hint = ("a tag for a single value cannot stand on a list or mapping" if tag in _SCALAR_TAGS
                else "remove the tag; migplan reads plain lists and mappings")
        self.fail(_event_line(event), f"the tag {_tag_name(tag)} is not supported on a {what}", hint)

    def _anchor(self, anchor: str, value: Any, line: int) -> None:
        if anchor in self.anchors:
            first = self.anchors[anchor]
            first_line = first.line if _is_collection(first) else first[2]
            self.fail(line, f"anchor &{anchor} is defined twice (first at line {first_line})",
                      "give each anchor its own name")
        self.anchors[anchor] = value
        if not _is_collection(value):  # a scalar: placed now (a collection is placed when it ends)
            data, raw, _, text, merge = value
            self._place(data, raw, line, text, merge)

    def _alias(self, event: ev.AliasEvent) -> None:
        name = event.anchor
        line = _event_line(event)
        target = self.anchors.get(name) if name is not None else None
        if target is None:
            self.fail(line, f"alias *{name} names no anchor defined above it",
                      f"define '&{name}' on a value before this line")
        if not _is_collection(target):
            data, raw, at, text, merge = target
            if len(self.stack) + 1 > MAX_DEPTH:
                self.fail(line, f"alias *{name} nests lists and mappings more than {MAX_DEPTH} levels deep")
            self.alias_nodes += 1
            if self.alias_nodes > MAX_ALIAS_NODES:
                self.fail(line, f"aliases expand to more than {MAX_ALIAS_NODES} values (at *{name})",
                          "this looks like an alias bomb; write the repeated values out or use fewer aliases")
            self._place(data, raw, at, text, merge)  # an alias has its anchor's line, as PyYAML's nodes do
            return
        if id(target) in self.open:
            self.fail(line, f"alias *{name} is inside the collection &{name} it names (a recursive alias)",
                      "an alias may only repeat a value defined and closed before it")
        size, height = _measure(target)
        if len(self.stack) + height > MAX_DEPTH:
            self.fail(line, f"alias *{name} nests lists and mappings more than {MAX_DEPTH} levels deep")
        self.alias_nodes += size
        if self.alias_nodes > MAX_ALIAS_NODES:
            self.fail(line, f"aliases expand to more than {MAX_ALIAS_NODES} values (at *{name})",
                      "this looks like an alias bomb; write the repeated values out or use fewer aliases")
        self._place(target, None, target.line, None, False)

    def _merge(self, frame: _Frame) -> None:
        """YAML 1.1 merge keys: merged entries first (an earlier merged mapping wins), explicit keys win. The
        mapping is rebuilt in place (an anchor may name it already)."""
        merges = frame.merges
        assert merges is not None
        if len(merges) > 1:
            self.fail(merges[1][2], f"duplicate key '<<' (first at line {merges[0][2]})",
                      "merge several mappings with one key: '<<: [*a, *b]'")
        value, line, _ = merges[0]
        sources = ([(src, src.line if _is_collection(src) else at) for src, at in zip(value, value.lines, strict=True)]
                   if type(value) is _Seq else [(value, line)])
        for src, at in sources:
            if type(src) is not _Map:
                self.fail(at, "'<<' merges a mapping or a list of mappings, such as '<<: *common'",
                          "point '<<' at an anchored mapping (&common)")
        coll = frame.coll
        assert type(coll) is _Map
        explicit = list(zip(coll.items(), coll.klines, strict=True))
        vlines, texts = coll.vlines or {}, coll.texts or {}
        coll.clear()
        coll.klines, coll.vlines, coll.texts = [], None, None
        taken = {key for (key, _), _ in explicit}
        entries: list[tuple[str, Any, int, int | None, str | None]] = []
        for src, _ in sources:
            src_vlines, src_texts = src.vlines or {}, src.texts or {}
            for (key, v), kline in zip(src.items(), src.klines, strict=True):
                if key not in taken:
                    taken.add(key)
                    entries.append((key, v, kline, src_vlines.get(key), src_texts.get(key)))
        merged = len(entries)
        entries += [(key, v, kline, vlines.get(key), texts.get(key)) for (key, v), kline in explicit]
        for key, v, kline, vline, text in entries:
            _keep_entry(coll, key, v, kline, vline, text)
        if coll.dups is not None:
            at, key, kline = coll.dups
            coll.dups = (at + merged, key, kline)


class _PyParser(Reader, Scanner, Parser):
    """PyYAML's pure-Python parser alone (events, no composer or constructor)."""

    def __init__(self, stream: str) -> None:
        Reader.__init__(self, stream)
        Scanner.__init__(self)
        Parser.__init__(self)


def _syntax_error(err: yaml.YAMLError, source: str) -> InputError:
    if not isinstance(err, yaml.MarkedYAMLError):
        return InputError(f"not valid YAML: {err}", source=source)
    mark = err.problem_mark
    line = mark.line + 1 if mark is not None else None
    ctx = err.context_mark
    began = ""
    if ctx is not None and err.context:
        # An unclosed bracket or quote is reported at the end of the stream; the line where
        # the construct began is the one to fix.
        began = f" ({err.context} at line {ctx.line + 1})"
        line = ctx.line + 1
    return InputError(f"not valid YAML: {err.problem}{began}", source=source, line=line,
                      hint="check indentation and quoting around this line")


@contextlib.contextmanager
def paused_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while a document is composed and read.

    Reading a large file makes millions of small objects that stay alive; the collector would scan
    them again and again (half the time of reading a 7 MB profiles file). The tree has no cycles
    (recursive aliases are refused), and cyclic garbage made meanwhile is collected afterwards.
    """
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _compose_with(parser: Any, source: str) -> _Root | None:
    try:
        with paused_gc():
            return _Composer(parser.get_event, source).compose()
    finally:
        dispose = getattr(parser, "dispose", None)
        if dispose is not None:
            dispose()


# Where libyaml and PyYAML disagree (found by differential fuzzing, tests/test_hostile_yaml.py):
# libyaml accepts tabs after tokens and `#` right after a block scalar's `|` or `>`, and skips a
# byte-order mark anywhere. Texts with any of them are rare (tabs never indent YAML) and are read
# by PyYAML alone, so both builds are equally strict and read the same values.
_LIBYAML_LENIENT = re.compile(r"\t|\ufeff|[|>][-+0-9]{0,2}#")


def _libyaml_lenient(text: str) -> bool:
    """`_LIBYAML_LENIENT.search(text)`, with plain substring tests first (a regex scan of every large file)."""
    if "\t" in text or "\ufeff" in text:
        return True
    return ("|" in text or ">" in text) and _LIBYAML_LENIENT.search(text) is not None


_PRINTABLE_ASCII = bytes([0x09, 0x0A, 0x0D, *range(0x20, 0x7F)])  # what _NON_PRINTABLE allows below 0x80


def _printable_ascii(text: str, chunk: int = 1 << 20) -> bool:
    """True: ASCII without a character `_NON_PRINTABLE` matches. Most files are ASCII, and deleting the allowed
    bytes is four times faster than the regex's scan (1 s of reading a 250 MB plan); a MiB at a time, so the
    check never holds a second copy of the text."""
    if not text.isascii():
        return False
    return not any(text[i:i + chunk].encode("ascii").translate(None, _PRINTABLE_ASCII)
                   for i in range(0, len(text), chunk))


def checked_text(text: str, source: str) -> str:
    """`text` without a leading byte-order mark, refused if it has control characters."""
    bad = None if _printable_ascii(text) else _NON_PRINTABLE.search(text)
    if bad is not None:
        line = text.count("\n", 0, bad.start()) + 1
        raise InputError(f"unacceptable character #x{ord(bad.group()):04x}: control characters are not allowed",
                         source=source, line=line, hint="save the file as plain UTF-8 text")
    if text.startswith("\ufeff"):  # a byte-order mark; both parsers skip it at the start
        text = text[1:]
    return text


def _compose_checked(text: str, source: str) -> _Root | None:
    if USE_LIBYAML and _CParser is not None and not _libyaml_lenient(text):
        try:
            return _compose_with(_CParser(text), source)
        except (yaml.YAMLError, InputError) as err:
            if len(text) > REPARSE_LIMIT_BYTES:
                if isinstance(err, InputError):
                    raise
                raise _syntax_error(err, source) from None
            # libyaml words its errors differently and finds some of them at other events: let
            # PyYAML read it again so that the message does not depend on how PyYAML was built.
    try:
        return _compose_with(_PyParser(text), source)
    except yaml.YAMLError as err:
        raise _syntax_error(err, source) from None
    except RecursionError:  # pragma: no cover - the composer is iterative; belt and braces
        raise InputError("document nested too deeply", source=source) from None


# --- reading values -----------------------------------------------------------------------------

class Node:
    """A value from a YAML file that knows its source, key path and line."""

    def __init__(self, value: Any, source: str, path: str = "", line: int = 1, key_line: int | None = None,
                 text: str | None = None) -> None:
        self._v = value  # as composed: a `_Map`, a `_Seq` or a scalar's value
        self.source = source
        self.path = path
        self._line = line
        self._key_line = key_line
        self._text = text  # a scalar's text as written, where it may differ from its value's (see `_scalar`)

    # -- location and errors -------------------------------------------------------
    @property
    def line(self) -> int:
        return self._line

    @property
    def key_line(self) -> int:
        """The line of the key this value belongs to (its own line when it has none). Differs from
        `line` for a block value (the key's line is above it) and for an alias (which points at
        the anchored value's line)."""
        return self._key_line if self._key_line is not None else self.line

    def fail(self, message: str, *, hint: str | None = None) -> NoReturn:
        raise InputError(message, source=self.source, key=self.path or None, line=self.line, hint=hint)

    def fail_key(self, message: str, *, hint: str | None = None) -> NoReturn:
        """Like `fail`, at the key's line: for errors about the key itself (its name)."""
        raise InputError(message, source=self.source, key=self.path or None, line=self.key_line, hint=hint)

    def _child_path(self, key: str | int) -> str:
        if isinstance(key, int):
            return f"{self.path}[{key}]"
        return f"{self.path}.{key}" if self.path else str(key)

    def replaced(self, text: builtins.str) -> Node:
        """The plain scalar `text` at this value's place (same source, key path and lines): a value a reader
        rewrites (Ansible's `--list` gives INI variables as strings) read as if it had been written so."""
        try:
            value, written, _ = _plain_scalar(text)
        except _Problem as problem:
            self.fail(problem.message, hint=problem.hint)
        return Node(value, self.source, self.path, self.line, key_line=self.key_line, text=written)

    # -- kinds ---------------------------------------------------------------------
    @property
    def is_map(self) -> bool:
        return type(self._v) is _Map

    @property
    def is_list(self) -> bool:
        return type(self._v) is _Seq

    @property
    def is_scalar(self) -> bool:
        return not _is_collection(self._v)

    @property
    def is_null(self) -> bool:
        return self._v is None

    @property
    def text(self) -> builtins.str | None:
        """A scalar's text as written in the file (None for a list or mapping)."""
        if _is_collection(self._v):
            return None
        return self._text if self._text is not None else _written(self._v)

    def value(self, kind: builtins.str | None = None) -> Any:
        """Plain Python value; with `kind`, check its type first."""
        val = self._v
        if type(val) is _Map or type(val) is _Seq:
            val = _to_plain(self)
        if kind is not None:
            ok = isinstance(val, _KINDS[kind]) and not (kind in ("int", "number") and isinstance(val, bool))
            if not ok:
                self.fail(f"expected {_describe(kind)}, got {_describe_value(val)}",
                          hint=_QUOTE_HINT if kind == "str" and isinstance(val, bool) else None)
        return val

    def str(self) -> builtins.str:
        """A string. Plain numbers and dates are read as written (`007` stays "007"); booleans and
        null are refused with a hint to quote them."""
        v = self._v
        if type(v) is builtins.str:
            return v
        if _is_collection(v):
            self.fail(f"expected a string, got {_describe_value(self.value())}")
        text = self.text
        if isinstance(v, bool) or v is None:
            self.fail(f"expected a string, got {_describe_value(v)}",
                      hint=f"quote it if it is text: '{text}'" if v is not None or text else None)
        return builtins.str(text)  # a number or date: as written

    def int(self, *, minimum: builtins.int | None = None, maximum: builtins.int | None = None) -> builtins.int:
        v: builtins.int = self.value("int")
        if minimum is not None and v < minimum:
            self.fail(f"must be at least {minimum}, got {v}")
        if maximum is not None and v > maximum:
            self.fail(f"must be at most {maximum}, got {v}")
        return v

    def number(self, *, minimum: float | None = None, maximum: float | None = None) -> float:
        raw = self.value("number")
        try:
            v = float(raw)
        except OverflowError:
            self.fail(f"{raw} is too large for a number")
        if not math.isfinite(v):
            self.fail(f"must be a finite number, got {self.text}",
                      hint="'.nan' and '.inf' are not measurements; give a number")
        if minimum is not None and v < minimum:
            self.fail(f"must be at least {minimum:g}, got {v:g}")
        if maximum is not None and v > maximum:
            self.fail(f"must be at most {maximum:g}, got {v:g}")
        return v

    def bool(self) -> builtins.bool:
        v: builtins.bool = self.value("bool")
        return v

    # -- containers ----------------------------------------------------------------
    def items(self) -> Iterator[tuple[builtins.str, Node]]:
        """Key/value pairs of a mapping (keys as written), refusing duplicate keys."""
        m = self._v
        if type(m) is not _Map:
            self.fail(f"expected a mapping, got {_describe_value(self.value())}")
        stop = m.dups[0] if m.dups is not None else -1
        for i, (key, kline) in enumerate(zip(m, m.klines, strict=True)):
            if i == stop:
                self._duplicate(m)
            yield key, self._child(m, key, kline)
        if stop == len(m):
            self._duplicate(m)

    def _child(self, m: _Map, key: builtins.str, kline: builtins.int) -> Node:
        v = m[key]
        if type(v) in _COLLECTIONS:
            line = v.line
        else:
            line = (m.vlines.get(key) if m.vlines is not None else None) or kline
        text = m.texts.get(key) if m.texts is not None else None
        return Node(v, self.source, self._child_path(key), line, key_line=kline, text=text)

    def _duplicate(self, m: _Map) -> NoReturn:
        assert m.dups is not None
        _, key, line = m.dups
        first = m.klines[list(m).index(key)]
        raise InputError(f"duplicate key {key!r} (first at line {first})", source=self.source,
                         key=self._child_path(key), line=line,
                         hint="each name may appear once; remove or rename one of them")

    def _entries(self) -> dict[builtins.str, Node]:
        """`dict(self.items())`, built in one loop (every mapping of a file is read through `fields`)."""
        m = self._v
        if type(m) is not _Map or m.dups is not None:
            return dict(self.items())  # the error `items` gives
        if m.vlines is not None or m.texts is not None:
            return {key: self._child(m, key, kline) for key, kline in zip(m, m.klines, strict=True)}
        # most mappings: every scalar on its key's line, every text its value's (`_child` without its lookups; a
        # loop, not a comprehension, whose names would be closure cells: 6% of reading the profiles)
        source, prefix, node, collections = self.source, f"{self.path}." if self.path else "", Node, _COLLECTIONS
        out: dict[builtins.str, Node] = {}
        for (key, v), kline in zip(m.items(), m.klines, strict=True):
            out[key] = node(v, source, prefix + key, v.line if type(v) in collections else kline, kline)
        return out

    def plain(self) -> Any:
        """The document's own value under this node when it was read as JSON (`migplan.yamljson`), else None:
        for readers that check a common shape directly on it and leave everything else, errors included, to
        `fields` and the other readers. Never modify it."""
        return None

    def list(self) -> list[Node]:
        s = self._v
        if type(s) is not _Seq:
            self.fail(f"expected a list, got {_describe_value(self.value())}")
        source, path, texts = self.source, self.path, s.texts
        if texts is None:
            return [Node(v, source, f"{path}[{i}]", line) for i, (v, line) in enumerate(zip(s, s.lines, strict=True))]
        return [Node(v, source, f"{path}[{i}]", line, text=texts.get(i))
                for i, (v, line) in enumerate(zip(s, s.lines, strict=True))]

    def fields(self, allowed: set[builtins.str] | frozenset[builtins.str],
               required: set[builtins.str] | frozenset[builtins.str] = frozenset()) -> dict[builtins.str, Node]:
        """A mapping's entries, checked against the allowed and required key sets."""
        out = self._entries()
        keys = out.keys()
        if keys <= allowed and required <= keys:  # the common case, checked in two set operations
            return out
        for key in out:
            if key not in allowed:
                known = ", ".join(sorted(allowed))
                raise InputError(
                    f"unknown key {key!r}", source=self.source, key=self._child_path(key),
                    line=out[key].key_line, hint=f"allowed keys here: {known}",
                )
        for key in sorted(required):
            if key not in out:
                self.fail(f"missing required key {key!r}")
        return out

    def entries(self, allowed: set[builtins.str] | frozenset[builtins.str],
                required: set[builtins.str] | frozenset[builtins.str] = frozenset()) -> Entries:
        """`fields(allowed, required)` (the same checks, the same errors) as an `Entries` view, which reads the
        values without making a Node for each."""
        m = self._v
        if type(m) is _Map and m.dups is None and m.keys() <= allowed and required <= m.keys():
            return Entries(self, m)  # the common case
        return Entries(self, m, self.fields(allowed, required))  # raises what `fields` raises, or another reader's


class Entries:
    """A mapping's entries (`Node.entries`) read as plain values. Each getter returns at once a value that passes its
    check and otherwise hands the value's `Node` the same call, whose check is the one that decides (and raises, with
    file, key path and line): the same values and errors as `fields(...)[key].int()` and the like, without a Node per
    value (they were a third of reading the profiles of 7,000 GPUs, bench/README.md)."""

    __slots__ = ("_node", "_map", "_nodes")

    def __init__(self, node: Node, m: Any, nodes: dict[builtins.str, Node] | None = None) -> None:
        self._node = node
        self._map = m  # the mapping's own value: a `_Map`, or another reader's plain dict (then `nodes` too)
        self._nodes = nodes

    def __contains__(self, key: builtins.str) -> builtins.bool:
        return key in self._map

    def node(self, key: builtins.str) -> Node:
        """The value under `key` as a Node (for a collection read further, or an error about it)."""
        if self._nodes is not None:
            return self._nodes[key]
        m = self._map
        return self._node._child(m, key, m.klines[list(m).index(key)])

    def present(self, key: builtins.str) -> builtins.bool:
        """`key` is there and not null."""
        return self._map.get(key) is not None

    def value(self, key: builtins.str) -> Any:
        """The value under `key` as composed: a scalar, or a collection (read that through `node`)."""
        return self._map[key]

    def str(self, key: builtins.str) -> builtins.str:
        v = self._map[key]
        return v if type(v) is builtins.str else self.node(key).str()

    def int(self, key: builtins.str, *, minimum: builtins.int | None = None,
            maximum: builtins.int | None = None) -> builtins.int:
        v = self._map[key]
        if type(v) is builtins.int and (minimum is None or v >= minimum) and (maximum is None or v <= maximum):
            return v
        return self.node(key).int(minimum=minimum, maximum=maximum)

    def number(self, key: builtins.str, *, minimum: float, maximum: float) -> float:
        v = self._map[key]
        if type(v) is float and minimum <= v <= maximum:  # bounded: neither nan nor an infinity passes
            return v
        return self.node(key).number(minimum=minimum, maximum=maximum)

    def bool(self, key: builtins.str) -> builtins.bool:
        v = self._map[key]
        return v if type(v) is builtins.bool else self.node(key).bool()


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
    return parse_checked(checked_text(text, source), source)


def parse_checked(text: str, source: str) -> Node | None:
    """`parse` of a text `checked_text` returned (`migplan.yamljson` reads JSON plans first, then this)."""
    composed = _compose_checked(text, source)
    if composed is None:
        return None
    value, line, written = composed
    return Node(value, source, "", line, text=written)


# --- files --------------------------------------------------------------------------------------

def max_file_bytes() -> int:
    """The cap on a file's size: MIGPLAN_MAX_FILE_MB MiB, else `MAX_FILE_MB`."""
    raw = os.environ.get(MAX_FILE_ENV, "").strip()
    if not raw:
        return MAX_FILE_MB * 1024 * 1024
    try:
        mb = float(raw)
    except ValueError:
        mb = math.nan
    if not math.isfinite(mb) or mb <= 0:
        raise InputError(f"{MAX_FILE_ENV}={raw!r} must be a positive number of MiB",
                         hint=f"the default is {MAX_FILE_MB}")
    return int(mb * 1024 * 1024)


def _too_big(source: str, size: int, cap: int) -> InputError:
    return InputError(f"file is larger than the {cap / 1024 / 1024:g} MiB migplan reads ({size} bytes)", source=source,
                      hint=f"raise the limit with {MAX_FILE_ENV}=<MiB> if the file is right")


def read_text(path: str | os.PathLike[str]) -> str:
    """A regular file's text (UTF-8), refusing devices, FIFOs, sockets and files over the cap."""
    source = os.fspath(path)
    cap = max_file_bytes()
    nonblock = getattr(os, "O_NONBLOCK", 0)  # opening a FIFO must not wait for a writer
    flags = os.O_RDONLY | nonblock | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOCTTY", 0)
    try:
        fd = os.open(source, flags)
    except FileNotFoundError:
        raise InputError("file not found", source=source, hint="check the path or the option naming it") from None
    except IsADirectoryError:
        raise InputError("is a directory, expected a YAML file", source=source) from None
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", source=source) from None
    except ValueError:  # a NUL character in the path
        raise InputError("cannot read: the path has a NUL character", source=repr(source)) from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InputError("is a directory, expected a YAML file", source=source)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else "a device" if
                    stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a socket" if
                    stat.S_ISSOCK(st.st_mode) else "not a regular file")
            raise InputError(f"is {kind}, not a regular file; migplan reads YAML files", source=source,
                             hint="save the document to a file and pass that file")
        if st.st_size > cap:
            raise _too_big(source, st.st_size, cap)
        if nonblock:
            os.set_blocking(fd, True)
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:
                raise _too_big(source, total, cap)
    except OSError as err:
        raise InputError(f"cannot read: {err.strerror or err}", source=source) from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise InputError(f"not UTF-8 text (byte 0x{data[err.start]:02x})", source=source, line=line,
                         hint="save the file as UTF-8") from None


def load(path: str | os.PathLike[str]) -> Node:
    """Read and compose a YAML file; an empty file is an error."""
    source = os.fspath(path)
    return present(parse(read_text(source), source), source)


def present(node: Node | None, source: str) -> Node:
    """The document of a file, refused when the file holds none."""
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

