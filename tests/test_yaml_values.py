"""The composer builds plain values with their lines and texts beside them (`yamldoc._Map`, `_Seq`): what each
keeps, read back through `Node` (tests/test_hostile_yaml.py has the refusals and bounds)."""

from __future__ import annotations

import pytest

from migplan import yamldoc
from migplan.errors import InputError


def _doc(text: str) -> yamldoc.Node:
    node = yamldoc.parse(text, "f.yaml")
    assert node is not None
    return node


def test_numbers_dates_and_booleans_keep_their_text_as_written() -> None:
    f = _doc("a: 007\nb: 1.50\nc: +5\nd: 2026-01-02\ne: 0x1F\nf: 1e-05\ng: 42\nh: ~\n").fields(set("abcdefgh"))
    assert [f[k].value() for k in "abcg"] == [7, 1.5, 5, 42]
    assert [f[k].str() for k in "abcdeg"] == ["007", "1.50", "+5", "2026-01-02", "0x1F", "42"]
    assert f["f"].value() == 1e-05 and f["f"].text == "1e-05"
    assert f["h"].is_null and f["h"].text == "~"


def test_a_scalar_below_its_key_has_its_own_line() -> None:
    f = _doc("a:\n  7\nb: 8\nc: |\n  text\n").fields({"a", "b", "c"})
    assert (f["a"].key_line, f["a"].line) == (1, 2)
    assert (f["b"].key_line, f["b"].line) == (3, 3)
    assert f["c"].value() == "text\n" and f["c"].key_line == 4


def test_list_items_have_their_own_lines_and_texts() -> None:
    items = _doc("l:\n  - 1.0\n  -\n    x\n  - [a, 010]\n").fields({"l"})["l"].list()
    assert [n.line for n in items] == [2, 4, 5]
    assert items[0].str() == "1.0" and items[1].str() == "x"
    assert items[2].list()[1].str() == "010" and items[2].list()[1].value() == 8  # YAML 1.1 octal


def test_an_alias_has_its_anchors_value_line_and_text() -> None:
    f = _doc("a: &n 007\nb:\n  - *n\nc: *n\n").fields({"a", "b", "c"})
    assert (f["c"].line, f["c"].key_line, f["c"].str()) == (1, 4, "007")
    assert f["b"].list()[0].line == 1


def test_merged_entries_come_first_with_their_own_lines() -> None:
    m = _doc("base: &b {x: 1, y: 2}\nm:\n  z: 0\n  <<: *b\n  y: 3\n").fields({"base", "m"})["m"]
    entries = list(m.items())
    assert [(k, n.value(), n.key_line) for k, n in entries] == [("x", 1, 1), ("z", 0, 3), ("y", 3, 5)]


def test_a_duplicate_key_after_a_merge_is_refused_where_it_is_reached() -> None:
    m = _doc("base: &b {x: 1}\nm:\n  q: 1\n  <<: *b\n  q: 2\n").fields({"base", "m"})["m"]
    seen = []
    with pytest.raises(InputError, match=r"duplicate key 'q' \(first at line 3\)") as err:
        for key, _ in m.items():
            seen.append(key)
    assert seen == ["x", "q"] and err.value.line == 5 and err.value.key == "m.q"


def test_an_anchored_mapping_with_a_merge_is_the_merged_mapping_through_its_alias() -> None:
    f = _doc("a: &a {x: 1}\nb: &b {<<: *a, y: 2}\nc: *b\n").fields({"a", "b", "c"})
    assert f["c"].value() == {"x": 1, "y": 2}


def test_nested_aliases_are_bounded_by_their_expanded_size() -> None:
    # ten levels of two aliases each: 2**10 expansions of the innermost list, refused by the alias budget
    lines = ["l0: &l0 [" + ", ".join(["x"] * 200) + "]"]
    lines += [f"l{i}: &l{i} [*l{i - 1}, *l{i - 1}]" for i in range(1, 11)]
    with pytest.raises(InputError, match="aliases expand to more than"):
        yamldoc.parse("\n".join(lines) + "\n", "f.yaml")
    yamldoc.parse("\n".join(lines[:5]) + "\n", "f.yaml")  # 2**4 x 201 nodes: within it


def test_replaced_reads_text_as_a_plain_scalar_at_the_same_place() -> None:
    f = _doc("x: 1\nport: '2222'\n").fields({"x", "port"})
    port = f["port"].replaced("2222")
    assert port.value() == 2222 and (port.line, port.key_line, port.path) == (2, 2, "port")
    assert f["port"].replaced("yes").value() is True and f["port"].replaced("007").str() == "007"
