"""yamldoc's JSON path (migplan.yamljson): a JSON document read by json.loads gives the same values, errors,
key paths and lines as the YAML reader, and anything doubtful is read by the YAML reader itself."""

from __future__ import annotations

import json
from typing import Any

import pytest

from migplan import yamldoc, yamljson
from migplan.errors import InputError
from migplan.yamljson import JsonNode

SRC = "doc.json"


def _fast(text: str) -> yamldoc.Node | None:
    return yamljson.parse(text, SRC)


def _slow(text: str) -> yamldoc.Node | None:
    return yamldoc.parse(text, SRC)


def _outcome(call: Any) -> Any:
    try:
        return ("ok", call())
    except InputError as err:
        return ("error", err.message, err.source, err.line, err.key, err.hint)


def _probe(node: yamldoc.Node, out: list[Any]) -> None:
    """Every reader of every node of the tree, in document order (values, errors, paths and lines)."""
    out.append((node.path, node.is_map, node.is_list, node.is_scalar, node.is_null, node.text, node.line,
                node.key_line))
    for name in ("value", "str", "int", "number", "bool", "list"):
        out.append((name, _outcome(lambda name=name: _plain(getattr(node, name)()))))
    out.append(("int range", _outcome(lambda: node.int(minimum=0, maximum=5))))
    out.append(("number range", _outcome(lambda: node.number(minimum=-1, maximum=1))))
    out.append(("items", _outcome(lambda: [k for k, _ in node.items()])))
    out.append(("fields", _outcome(lambda: list(node.fields({"a", "b"}, {"a"})))))
    out.append(("fail", _outcome(lambda: node.fail("bad", hint="h"))))
    out.append(("fail_key", _outcome(lambda: node.fail_key("bad key"))))
    children = _outcome(lambda: [c for _, c in node.items()] if node.is_map else node.list() if node.is_list else [])
    if children[0] == "ok":
        for child in children[1]:
            _probe(child, out)


def _plain(v: Any) -> Any:
    if isinstance(v, list) and v and isinstance(v[0], yamldoc.Node):
        return [n.path for n in v]
    return v


def _same(text: str) -> list[Any]:
    fast, slow = _fast(text), _slow(text)
    assert isinstance(fast, JsonNode), "the JSON path should have read this document"
    assert type(slow) is yamldoc.Node
    got: list[Any] = []
    want: list[Any] = []
    _probe(fast, got)
    _probe(slow, want)
    assert got == want
    return got


DOCS = [
    '{"a": 1}',
    '[1, -2, 3.5, -0.0, true, false, null, "x", "007", "1e3", "true", "", "a b"]',
    '{"ints": [0, 7, -12, 123456789012345678, 1234567890123456789012345678901234567890],\n'
    ' "floats": [0.1, 2.5, 1e-05, 1e+20, 1.5e+20, -0.5],\n'
    ' "strings": ["\\n\\t\\b\\f\\r", "\\"q\\"", "\\\\", "é ünï", "%s"],\n'
    ' "nested": {"a": {"b": [[{"c": [null, {"d": "deep"}]}]]}}}',
    json.dumps({"version": 4, "gpus": [{"host": "h", "index": i, "current": None if i else ["3g.20gb@0"],
                                        "busy": []} for i in range(5)]}, indent=2),
    json.dumps({"k": [1, {"a": "x", "b": [True, None]}], "empty": {}, "none": []}),
    '\n\n  {\n  "a":\n\n   [1,\n 2\n ]\n}',
]


@pytest.mark.parametrize("text", DOCS)
def test_json_nodes_read_and_refuse_like_yaml_nodes(text: str) -> None:
    _same(text)


def test_lines_are_found_deep_in_a_document_only_when_asked() -> None:
    rows = [{"name": f"w{i}", "size": i, "tags": ["a", {"deep": [i, "x"]}]} for i in range(300)]
    text = json.dumps({"version": 1, "rows": rows}, indent=2)
    fast, slow = _fast(text), _slow(text)
    assert isinstance(fast, JsonNode) and slow is not None
    deep_fast = fast.fields({"version", "rows"})["rows"].list()[217].fields({"name", "size", "tags"})["tags"]
    deep_slow = slow.fields({"version", "rows"})["rows"].list()[217].fields({"name", "size", "tags"})["tags"]
    leaf_fast = deep_fast.list()[1].fields({"deep"})["deep"].list()[1]
    leaf_slow = deep_slow.list()[1].fields({"deep"})["deep"].list()[1]
    with pytest.raises(InputError) as got:
        leaf_fast.int()
    with pytest.raises(InputError) as want:
        leaf_slow.int()
    assert (got.value.message, got.value.key, got.value.line) == (want.value.message, want.value.key, want.value.line)
    assert got.value.key == "rows[217].tags[1].deep[1]"
    assert text.splitlines()[got.value.line - 1].strip() == '"x"'
    # an unknown key is reported at the key's line, the value's own line below it
    with pytest.raises(InputError) as unknown:
        fast.fields({"version", "rows"})["rows"].list()[3].fields({"name", "size"})
    assert unknown.value.key == "rows[3].tags" and text.splitlines()[unknown.value.line - 1].strip() == '"tags": ['


DOUBTFUL = {
    "duplicate key": '{"a": 1, "a": 2}',
    "empty key": '{"": 1}',
    "space before a colon": '{"a" : 1}',
    "key on its own line": '{"a"\n: 1}',
    "long key": '{"' + "k" * 1100 + '": 1}',
    "NaN": '{"a": NaN}',
    "Infinity": '[-Infinity]',
    "minus zero": '{"a": -0}',
    "long integer": '[' + "9" * 70 + ']',
    "1.0e+400": '[1.0e+400]',
    "1e999 as a float": '[-1.5e+999]',
    "float not as Python writes it": '[1.50]',
    "signed exponent": '[1.5e+05]',
    "exponent without its sign": '[1.5e5]',
    "capital E": '[2E+3]',
    "1e400": '[1e400]',
    "unicode escape": '["\\u00e9"]',
    "NUL escape": '["\\u0000"]',
    "lone surrogate": '["\\ud800"]',
    "slash escape": '["a\\/b"]',
    "tab": '{"a":\t1}',
    "carriage return": '{"a": 1,\r\n "b": 2}',
    "line separator": '["a\u2028b"]',
    "byte-order mark inside": '["\ufeff"]',
    "too deep": "[" * 101 + "]" * 101,
    "truncated": '{"a": [1, 2',
    "trailing text": '{"a": 1} x',
}


@pytest.mark.parametrize("name", sorted(DOUBTFUL))
def test_doubtful_json_is_read_by_the_yaml_reader(name: str) -> None:
    text = DOUBTFUL[name]
    fast, slow = _outcome(lambda: _fast(text)), _outcome(lambda: _slow(text))
    if fast[0] == "ok":
        assert type(fast[1]) is yamldoc.Node, "read by json.loads although doubtful"
        got: list[Any] = []
        want: list[Any] = []
        _probe(fast[1], got)
        _probe(slow[1], want)
        assert got == want
    else:
        assert fast == slow


def test_deep_but_allowed_json_is_read_by_json() -> None:
    text = "[" * yamldoc.MAX_DEPTH + "1" + "]" * yamldoc.MAX_DEPTH
    assert isinstance(_fast(text), JsonNode)
    assert _fast(text).value() == _slow(text).value()  # type: ignore[union-attr]


def test_an_exponent_without_a_dot_is_a_number_both_ways() -> None:
    """`1e-05` is how Python and JSON write 0.00001; YAML 1.1 reads it as a string, YAML 1.2 (and yamldoc) as
    a number, so a plan holding such a value is not refused. Quoted, it stays a string."""
    text = '{"t": 1e-05, "u": 2.5e-07, "v": 1e+20, "q": "1e-05"}'
    node = _fast(text)
    assert isinstance(node, JsonNode)
    want = {"t": 1e-05, "u": 2.5e-07, "v": 1e20, "q": "1e-05"}
    assert node.value() == want == _slow(text).value()  # type: ignore[union-attr]
    for reader in (_fast, _slow):
        f = reader(text).fields({"t", "u", "v", "q"})  # type: ignore[union-attr]
        assert (f["t"].number(), f["t"].str()) == (1e-05, "1e-05")
        with pytest.raises(InputError, match="expected a number, got a string"):
            f["q"].number()
    yaml_node = _slow("a: 1e3\nb: 1E-2\nc: .5e1\nname: 1e3\n")
    assert yaml_node is not None
    f = yaml_node.fields({"a", "b", "c", "name"})
    assert (f["a"].number(), f["b"].number(), f["c"].number(), f["name"].str()) == (1000.0, 0.01, 5.0, "1e3")


def test_value_is_a_copy() -> None:
    node = _fast('{"a": [1, {"b": 2}]}')
    assert isinstance(node, JsonNode)
    node.value()["a"][1]["b"] = 3
    assert node.value() == {"a": [1, {"b": 2}]}


def test_yaml_text_is_not_read_as_json() -> None:
    assert type(_fast("a: 1\n")) is yamldoc.Node
    assert type(_fast("- {a: 1}\n")) is yamldoc.Node
    assert _fast("") is None


def test_yamldoc_alone_reads_json_as_yaml() -> None:
    assert type(_slow('{"a": 1}')) is yamldoc.Node
