"""migplan.yamlplain, the fast reader for plain YAML: whatever it accepts, libyaml and PyYAML read as the same
tree (kinds, tags, texts, converted values, styles, flow or block, lines); everything else it leaves to them.

The oracle is PyYAML itself (its libyaml build and its pure-Python parser, through yamldoc's composer):
the fast reader shares only yamldoc's scalar conversion with them, which test_hostile_yaml.py checks
against PyYAML's own constructor.
"""

from __future__ import annotations

import glob
import math
import os
import random
from typing import Any

import pytest

from migplan import yamldoc, yamlplain
from migplan.errors import InputError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def full(text: str, libyaml: bool) -> Any:
    """The tree yamldoc composes without the fast reader (libyaml's parser or PyYAML's pure-Python one)."""
    saved = yamldoc.USE_PLAIN, yamldoc.USE_LIBYAML
    yamldoc.USE_PLAIN, yamldoc.USE_LIBYAML = False, libyaml
    try:
        return yamldoc.compose(text, "doc.yaml")
    finally:
        yamldoc.USE_PLAIN, yamldoc.USE_LIBYAML = saved


def parsers() -> list[bool]:
    return [True, False] if yamldoc._CParser is not None else [False]


def same_data(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def differences(a: Any, b: Any, path: str = "$") -> list[str]:
    """Where two composed trees differ (empty: the same tree). A plain scalar's style is None from PyYAML's
    parser and "" from libyaml's: both mean plain; so are a block collection's flow style False and None."""
    if type(a) is not type(b):
        return [f"{path}: {type(a).__name__} vs {type(b).__name__}"]
    out = []
    if a.tag != b.tag:
        out.append(f"{path}: tag {a.tag} vs {b.tag}")
    if a.start_mark.line != b.start_mark.line:
        out.append(f"{path}: line {a.start_mark.line + 1} vs {b.start_mark.line + 1}")
    if isinstance(a, yamldoc._Scalar):
        if a.value != b.value or (a.style or None) != (b.style or None) or not same_data(a.data, b.data):
            out.append(f"{path}: {a.value!r} {a.style!r} {a.data!r} vs {b.value!r} {b.style!r} {b.data!r}")
        return out
    if bool(a.flow_style) != bool(b.flow_style):  # a block list at its key's indentation: None from PyYAML
        out.append(f"{path}: flow {a.flow_style} vs {b.flow_style}")
    if len(a.value) != len(b.value):
        return [*out, f"{path}: {len(a.value)} vs {len(b.value)} entries"]
    for k, (x, y) in enumerate(zip(a.value, b.value, strict=True)):
        if isinstance(x, tuple):
            out += differences(x[0], y[0], f"{path}.<key {k}>") + differences(x[1], y[1], f"{path}.{x[0].value}")
        else:
            out += differences(x, y, f"{path}[{k}]")
    return out


def check(text: str) -> bool:
    """The fast reader's tree, when it gives one, is each parser's; True when it gave one."""
    try:
        mine = yamlplain.compose(text)
    except Exception as err:  # the fast reader never raises: it gives a tree or None
        raise AssertionError(f"yamlplain raised {err!r} on {text!r}") from err
    if mine is None:
        return False
    for libyaml in parsers():
        try:
            theirs = full(text, libyaml)
        except InputError as err:
            raise AssertionError(f"yamlplain accepted {text!r}, which yamldoc refuses: {err}") from err
        assert theirs is not None
        diff = differences(mine, theirs)
        assert not diff, (text, "libyaml" if libyaml else "pure", diff[:5])
    return True


SHIPPED = sorted(glob.glob(os.path.join(ROOT, "profiles", "**", "*.yaml"), recursive=True)
                 + glob.glob(os.path.join(ROOT, "inventory", "*.yaml"))
                 + glob.glob(os.path.join(ROOT, "migplan", "catalog", "data", "*.yaml"))
                 + glob.glob(os.path.join(ROOT, "tests", "data", "**", "*.yaml"), recursive=True))


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: os.path.relpath(p, ROOT))
def test_shipped_files_read_the_same_with_the_fast_reader(path: str) -> None:
    with open(path, encoding="utf-8") as fh:
        check(fh.read())


def test_the_example_fleet_and_generated_fleets_take_the_fast_path(tmp_path: Any) -> None:
    """The files large fleets are made of are in the subset (else the reader would be dead weight): the
    example inventory and profiles, and a fleet of bench/large_inputs.py."""
    from bench.large_inputs import write_instance

    inventory, profiles, _ = write_instance(64, str(tmp_path))
    files = [os.path.join(ROOT, "inventory", "example.yaml"), inventory,
             *glob.glob(os.path.join(ROOT, "profiles", "example", "*.yaml")),
             *glob.glob(os.path.join(profiles, "*.yaml"))]
    for path in files:
        with open(path, encoding="utf-8") as fh:
            assert check(fh.read()), path


@pytest.mark.parametrize("text", [
    "a: 1\nb:\n  c: [x, 'y', \"z\"]\n  d: {e: 1.5, f: ~, g: 2026-01-01}\n",
    "a:\n- 1\n- {b: [2, 3], c: 'q r'}\nd: yes\n",
    "- name: w1\n  memory_mib: {p50: 5405, max: 9027}\n"
    "- name: w2\n  observed: {window: {start: '2026-11-16T00:00:00Z'}}\n",
    "x: a b   # note\ny: \"# not a comment\"  # a comment\nz: 'it is'\n",
    "k: 0x1F\nl: 0755\nm: 1:30\nn: .inf\no: -.5\np: +5\nq: 1_000\nr: on\ns: null\nt: ''\n",
    "empty:\nnext: 1\nlist: []\nmap: {}\n",
    "a:\n  b:\n    c:\n      - d: 1\n        e: [f]\n      - g\n",
    "url: http://x.example/a:b\nwhen: 2026-11-30T12:00:00Z\ncmd: sudo -n\n",
])
def test_documents_in_the_subset_are_read_alike(text: str) -> None:
    assert check(text)


@pytest.mark.parametrize("text", [
    "a: &x 1\nb: *x\n",  # anchors and aliases
    "a: !!str 1\n",  # tags
    "<<: {a: 1}\n",  # merge keys
    "a: |\n  text\n",  # block scalars
    "a: b\n  c\n",  # a multi-line plain scalar
    "a: b#c\n",  # `#` inside a scalar
    "a: \"x\\\"y\"\n",  # escapes
    "a: 'it''s'\n",
    "a:\tb\n",  # a tab
    "---\na: 1\n",  # a document marker
    "%YAML 1.1\n---\na: 1\n",
    "a: {b:c}\n",  # `:` in a flow scalar (libyaml and PyYAML differ)
    "a: [b, ]\n",  # a trailing comma
    "a: [b,,c]\n",
    "a: {b: [c,\n  d]}\n",  # a flow collection over two lines
    "? a\n: b\n",  # a complex key
    "- - a\n",  # a list in a list on one line
    "-\n  a: 1\n",  # an empty entry
    "a: 2026-02-30\n",  # a value yamldoc refuses
    "a: é\n",  # outside the word characters
    "a: 1\r\nb: 2\r\n",
    "a: b # x\x85c: d\n",  # YAML's other line breaks end a comment (NEL, LS, PS): here, c is a key
    "# x\u2028a: 1\nb: 2\n",
    "a: 1 # \u2029b: 2\n",
    "just a scalar\n",
    "# only a comment\n",
    "",
])
def test_documents_outside_the_subset_are_left_to_pyyaml(text: str) -> None:
    assert yamlplain.compose(text) is None


def test_a_refused_value_still_gets_yamldocs_error() -> None:
    with pytest.raises(InputError, match="'2026-02-30' is not a valid date") as err:
        yamldoc.parse("a: 1\nb: 2026-02-30\n", "doc.yaml")
    assert err.value.line == 2


# --- generated documents ---------------------------------------------------------------------------

KEYS = ["a", "k2", "name", "0755", "on", "1e3", "x y", "a-b", "-a", "a.b", "~", "null", "<<", "a:b", "é", "@x",
        "'q'", '"q"', "1", "true", "", "a b", "[x]", "{x}", "-", "? x", "a#b"]
VALUES = ["x", "# c\x85k: v", "y\u2028z",
          "5405", "0.206", "-5", "+5", ".5", "1e3", "0x1F", "0o17", "1_000", "1:30", "2026-01-01", "2026-02-30",
          "2026-11-16T00:00:00Z", "yes", "no", "on", "~", "null", "", ".inf", ".nan", "a b", "a  b", "a:b", "a: b",
          "http://x", "a#b", "a #b", "'q'", "'it''s'", '"q"', '"a\\"b"', '"a # b"', "'a # b'", "-", "- x", "--x", "---",
          "&a x", "*a", "!t x", "!!str 5", "|", ">", "?", "@x", "%x", "`x`", "{a: 1}", "[1, 2]", "{a: [1, 2]}",
          "{a:1}", "[a, ]", "[a,,b]", "{}", "[]", "{ a: 1 }", "[ a , b ]", "é", "=", "<<", "a=b", "(x)", "a,b", "a]",
          "a}", "{a: {b: [c, 'd']}}", "[{a: 1}]", "[a: 1]", "{a: 'x', b: \"y\"}", "-1.5e3", "0.", "00", "+.inf"]


# Pieces in the subset: documents made of these alone are mostly taken, so nesting and indentation get tested
CLEAN_KEYS = ["a", "k2", "name", "0755", "on", "1e3", "x y", "a-b", "-a", "a.b", "~", "1", "true", "gpus", "b"]
CLEAN_VALUES = ["x", "5405", "0.206", "-5", "1:30", "2026-01-01", "2026-11-16T00:00:00Z", "yes", "~", "", ".inf",
                "a b", "a:b", "http://x", "'q'", '"q"', '"a # b"', "{a: 1}", "[1, 2]", "{a: [1, 2]}", "{}", "[]",
                "{ a: 1 }", "[ a , b ]", "(x)", "{a: {b: [c, 'd']}}", "{a: 'x', b: \"y\"}", "4g.40gb@0", "sudo -n"]


def _value(rng: random.Random, depth: int, clean: bool) -> list[tuple[int, str]] | str:
    """A scalar text, or the lines (relative indent, text) of a nested block."""
    r = rng.random()
    if depth < 4 and r < 0.3:
        return _block(rng, depth + 1, clean)
    return rng.choice(CLEAN_VALUES if clean else VALUES)


def _block(rng: random.Random, depth: int, clean: bool) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    if rng.random() < 0.35:  # a list
        for _ in range(rng.randint(1, 3)):
            v = _value(rng, depth, clean)
            if isinstance(v, str):
                out.append((0, f"- {v}".rstrip() if v else "-"))
            elif rng.random() < 0.5 and not v[0][1].startswith("-"):  # `- key: value` on the dash's line
                out.append((0, "- " + v[0][1]))
                out += [(ind + 2, t) for ind, t in v[1:]]
            else:
                out.append((0, "-"))
                out += [(ind + rng.choice([2, 2, 4, 1]), t) for ind, t in v]
    else:
        for _ in range(rng.randint(1, 3)):
            k = rng.choice(CLEAN_KEYS if clean else KEYS)
            v = _value(rng, depth, clean)
            if isinstance(v, str):
                out.append((0, f"{k}: {v}".rstrip()))
            else:
                out.append((0, f"{k}:"))
                shift = 0 if v[0][1].startswith("-") and rng.random() < 0.5 else rng.choice([2, 2, 4, 1])
                out += [(ind + shift, t) for ind, t in v]
    return out


def _text(rng: random.Random) -> str:
    clean = rng.random() < 0.5
    lines = _block(rng, 0, clean)
    text = []
    for ind, t in lines:
        r = rng.random()
        if r < (0.02 if clean else 0.05):
            ind += rng.choice([-1, 1])  # a misplaced line
        elif r < 0.1:
            t += rng.choice(["  # c", " #", "   ", "#c"])
        elif r < 0.13:
            text.append(rng.choice(["", "# comment", "  ", "   # indented comment"]))
        text.append(" " * max(ind, 0) + t)
    return "\n".join(text) + rng.choice(["\n", "", "\n\n"])


def test_generated_documents_read_alike() -> None:
    """5,000 documents from a grammar of plain, tricky and invalid pieces, with misplaced lines and comments:
    every one the fast reader takes is the tree both parsers compose (and it takes a fair share of them,
    nested ones among them, so the comparison is not empty)."""
    rng = random.Random(20261201)
    taken = nested = 0
    for _ in range(5000):
        text = _text(rng)
        if check(text):
            taken += 1
            nested += "\n " in text
    assert taken >= 1000 and nested >= 300, (taken, nested)
