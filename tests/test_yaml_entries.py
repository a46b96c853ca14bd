"""`Node.entries` reads a mapping's values without a Node each: every getter must give what `fields(...)[key]`'s
method gives, value for value and error for error (message, key path, line, hint), for YAML and JSON documents."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from migplan import yamldoc, yamljson
from migplan.errors import InputError

_KEYS = {"a", "b", "c"}
# each value is read under key `a`, beside `b: 1`, in block and flow style
_VALUES = ["7", "-3", "100", "0", "1.5", "0.25", "1", "true", "no", "~", "null", "'7'", "007", "1e400", ".nan",
           "-.inf", "x", "''", "2026-01-02", "[1, 2]", "{x: 1}", "12345678901234567890123", "0x10", "1_000",
           "!!str 5", "!!float 1", "&a 3", "+2"]
_CALLS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "int": (lambda n: n.int(), lambda e: e.int("a")),
    "int 0..99": (lambda n: n.int(minimum=0, maximum=99), lambda e: e.int("a", minimum=0, maximum=99)),
    "number 0..1": (lambda n: n.number(minimum=0.0, maximum=1.0), lambda e: e.number("a", minimum=0.0, maximum=1.0)),
    "number -10..1e9": (lambda n: n.number(minimum=-10.0, maximum=1e9),
                        lambda e: e.number("a", minimum=-10.0, maximum=1e9)),
    "str": (lambda n: n.str(), lambda e: e.str("a")),
    "bool": (lambda n: n.bool(), lambda e: e.bool("a")),
    "present": (lambda n: not n.is_null, lambda e: e.present("a")),
    "node line": (lambda n: (n.line, n.key_line, n.path, n.text), lambda e: (lambda m: (m.line, m.key_line, m.path,
                                                                                       m.text))(e.node("a"))),
}


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        value = call()
        return "ok", (type(value).__name__, value)  # 1 and 1.0 are equal, but an int is not what number() gives
    except InputError as err:
        return "error", (err.message, err.source, err.key, err.line, err.hint)


def _documents(value: str) -> list[str]:
    return [f"top:\n  b: 1\n  a: {value}\n", f"top:\n  a:\n    {value}\n  b: 1\n", f"top: {{b: 1, a: {value}}}\n"]


@pytest.mark.parametrize("value", _VALUES)
@pytest.mark.parametrize("call", sorted(_CALLS))
def test_each_getter_gives_what_the_nodes_method_gives(value: str, call: str) -> None:
    by_node, by_entries = _CALLS[call]
    for text in _documents(value):
        try:
            top = yamldoc.parse(text, "f.yaml")
        except InputError:
            continue  # a value this composer refuses outright (the same for both)
        assert top is not None
        node = top.fields({"top"})["top"]
        want = _outcome(lambda n=node: by_node(n.fields(_KEYS, {"b"})["a"]))
        got = _outcome(lambda n=node: by_entries(n.entries(_KEYS, {"b"})))
        assert got == want, text


@pytest.mark.parametrize("text", [
    "top: [1, 2]\n",  # not a mapping
    "top: 5\n",
    "top:\n  a: 1\n  a: 2\n",  # a duplicate key
    "top:\n  a: 1\n  d: 2\n",  # an unknown key
    "top:\n  a: 1\n",  # a missing required key
    "top:\n  b: 1\n  <<: {a: 2}\n  c: 3\n",  # a merge
    "top:\n  b: 1\n  <<: {a: 2}\n  a: 4\n",
])
def test_entries_refuses_what_fields_refuses(text: str) -> None:
    top = yamldoc.parse(text, "f.yaml")
    assert top is not None
    node = top.fields({"top"})["top"]
    want = _outcome(lambda: sorted((k, n.value()) for k, n in node.fields(_KEYS, {"b"}).items()))
    got = _outcome(lambda: sorted((k, e.value(k)) for e in [node.entries(_KEYS, {"b"})] for k in _KEYS if k in e))
    assert got == want


@pytest.mark.parametrize("value", ["7", "1.5", "true", "null", "\"x\"", "[1]", "1e400", "-1"])
def test_entries_of_a_json_document_read_like_its_nodes(value: str) -> None:
    top = yamljson.parse(f'{{"top": {{"b": 1, "a": {value}}}}}', "f.json")
    assert top is not None
    node = top.fields({"top"})["top"]
    for call in sorted(_CALLS):
        by_node, by_entries = _CALLS[call]
        got = _outcome(lambda get=by_entries: get(node.entries(_KEYS, {"b"})))
        assert got == _outcome(lambda get=by_node: get(node.fields(_KEYS, {"b"})["a"])), call
