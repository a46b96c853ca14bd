"""render.grid's own layout of large plain tables is tabulate's "simple" format byte for byte (tabulate is the
oracle: the project's tables were all made by it), and anything it does not handle goes to tabulate."""

from __future__ import annotations

import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tabulate import tabulate

from migplan.cli import render

_ASCII = st.text(alphabet=string.ascii_letters + string.digits + " .:-_@/%()[]{}<>|=+*#,;'\"!?~^$&`\\", max_size=14)
_CELL = st.one_of(_ASCII, st.integers(-10**12, 10**12), st.none(), st.text(max_size=6), st.floats(allow_nan=False),
                  st.booleans())


def _oracle(rows: list[list[object]], headers: list[str]) -> str:
    return tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)


@pytest.mark.slow  # 300 examples, each tabulated by the oracle: a few seconds
@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6).flatmap(lambda n: st.tuples(
    st.lists(st.text(alphabet=string.ascii_uppercase + " %", min_size=1, max_size=10), min_size=n, max_size=n),
    st.lists(st.lists(_CELL, min_size=n, max_size=n), max_size=12))))
def test_plain_grid_is_tabulates_simple_format_or_declines(table: tuple[list[str], list[list[object]]]) -> None:
    headers, rows = table
    got = render._plain_grid(rows, headers)
    if got is not None:
        assert got == _oracle(rows, headers)


_PLAIN = st.one_of(st.text(alphabet=string.ascii_letters + string.digits + ".:-_@/%()'\"!?~^$&`\\|<>", max_size=14),
                   st.from_regex(r"[a-z]{1,5}( {1,3}[a-z0-9]{1,5}){0,3}", fullmatch=True),
                   st.integers(-10**12, 10**12), st.none())


@pytest.mark.slow  # 300 examples, each tabulated by the oracle: a few seconds
@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6).flatmap(lambda n: st.tuples(
    st.lists(st.from_regex(r"[A-Z]{1,6}( [A-Za-z0-9%]{1,4})?", fullmatch=True), min_size=n, max_size=n),
    st.lists(st.lists(_PLAIN, min_size=n, max_size=n), max_size=12))))
def test_plain_grid_lays_out_plain_cells_as_tabulate_does(table: tuple[list[str], list[list[object]]]) -> None:
    headers, rows = table
    got = render._plain_grid(rows, headers)
    assert got is not None  # every cell here is one it handles
    assert got == _oracle(rows, headers)


def test_a_large_plain_table_takes_the_plain_layout_and_equals_tabulate() -> None:
    rows: list[list[object]] = [[f"wl-{i:05d}", f"host-{i % 50:02d}", 1 + i % 3, i * 17, None,
                                 "rests on few samples" if i % 7 else ""] for i in range(render._PLAIN_GRID_MIN_ROWS)]
    headers = ["WORKLOAD", "FILE", "PLACES", "MEM max", "X", "NOTES"]
    assert render._plain_grid(rows, headers) is not None
    assert render.grid(rows, headers) == _oracle(rows, headers)


def test_cells_it_does_not_handle_go_to_tabulate() -> None:
    headers = ["A", "B"]
    for odd in ([["x", 1.5]], [["x", True]], [[" padded ", 1]], [["é", 1]], [["a\tb", 1]], [["a\nb", 1]], [["x"]],
                [["x", 1, 2]]):
        assert render._plain_grid(odd, headers) is None
        big = odd * render._PLAIN_GRID_MIN_ROWS
        assert render.grid(big, headers) == _oracle(big, headers)
