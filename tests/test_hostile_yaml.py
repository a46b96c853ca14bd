"""Hostile YAML at the reader (migplan.yamldoc): every bad input is an InputError with file and line.

Classes: value conversion (dates, tags, huge numbers), merge keys, alias bombs and nesting, keys
and strings read as written, non-finite numbers, files that are not regular files or are too big,
and the two parsers (libyaml's, PyYAML's pure-Python one) agreeing on every document.
"""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from timebox import within

from migplan import yamldoc
from migplan.errors import InputError

SRC = "doc.yaml"




def refused(text: str, *, line: int | None = 1, match: str = "") -> InputError:
    """Parse and read every value of `text`; assert an InputError at `line` naming the source."""
    with pytest.raises(InputError) as err:
        node = yamldoc.parse(text, SRC)
        assert node is not None
        node.value()
    e = err.value
    assert e.source == SRC
    if line is not None:
        assert e.line == line, str(e)
        assert str(e).startswith(f"{SRC}:{line}: ")
    assert match in str(e), str(e)
    assert "Traceback" not in str(e)
    return e


def read(text: str) -> object:
    node = yamldoc.parse(text, SRC)
    assert node is not None
    return node.value()


@pytest.fixture(params=["libyaml", "pure"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Run a test with each parser: libyaml's (when installed: what migplan uses) and PyYAML's pure-Python one."""
    if request.param == "libyaml" and yamldoc._CParser is None:
        pytest.skip("PyYAML without libyaml: the pure-Python parser is tested alone")
    monkeypatch.setattr(yamldoc, "USE_LIBYAML", request.param != "pure" and yamldoc._CParser is not None)
    return request.param != "pure"


# --- 1. value conversion ------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "line", "match"), [
    ("built: 2026-02-30\n", 1, "built: '2026-02-30' is not a valid date"),
    ("a: 1\nwhen: 2026-13-01 10:00:00\n", 2, "when: '2026-13-01 10:00:00' is not a valid date"),
    ("x: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162\n", 1, "Ansible Vault"),
    ("x: !!python/name:os.system\n", 1, "the tag !!python/name:os.system is not supported"),
    ("x: !!python/object/apply:os.system [echo hi]\n", 1, "not supported"),
    ("x: !!int abc\n", 1, "'abc' is not an integer (tagged !!int)"),
    ("x: !!float abc\n", 1, "'abc' is not a number"),
    ("x: !!bool maybe\n", 1, "not true or false"),
    ("x: !!null abc\n", 1, "not null"),
    ("x: !!timestamp x\n", 1, "not a date or time"),
    ("x: !!timestamp 2026-02-30\n", 1, "not a valid date"),
    ("x: !!binary 'zz'\n", 1, "the tag !!binary is not supported"),
    ("x: !!set {a, b}\n", 1, "the tag !!set is not supported on a mapping"),
    ("x: !!omap [a: 1]\n", 1, "the tag !!omap is not supported on a list"),
    ("x: !!int [1]\n", 1, "the tag !!int is not supported on a list"),
    ("x: !custom value\n", 1, "the tag !custom is not supported"),
    ("a:\n  b:\n    - !<tag:example.com,2000:x> 1\n", 3, "a.b[0]: the tag tag:example.com,2000:x"),
    ("x: " + "9" * 5000 + "\n", 1, "a number of 5000 characters is too long (at most 64)"),
    ("x: 0x" + "f" * 5000 + "\n", 1, "too long"),
    ("x: " + ":".join(["59"] * 3000) + "\n", 1, "too long"),  # YAML 1.1 base 60
    ("x: 1" + "0" * 400 + ".5\n", 1, "too long"),
])
def test_values_that_do_not_convert_are_refused(parser: bool, text: str, line: int, match: str) -> None:
    refused(text, line=line, match=match)


@pytest.mark.parametrize(("text", "value"), [
    ("x: !!str 0755\n", {"x": "0755"}),
    ("x: !!int '12'\n", {"x": 12}),
    ("x: !!float 1\n", {"x": 1.0}),
    ("x: !!bool yes\n", {"x": True}),
    ("x: !unsafe '{{ not templated }}'\n", {"x": "{{ not templated }}"}),
    ("x: ! 12\n", {"x": "12"}),  # the non-specific tag: a string
    ("x: =\n", {"x": "="}),  # YAML 1.1 'value' type: plain text here, not a crash
    ("x: <<\n", {"x": "<<"}),
    ("x: " + "9" * 64 + "\n", {"x": int("9" * 64)}),
])
def test_plain_and_tagged_values_that_convert(parser: bool, text: str, value: object) -> None:
    assert read(text) == value


def test_non_finite_numbers_are_refused_where_a_number_is_read(parser: bool) -> None:
    for text in ("p: .nan\n", "p: .inf\n", "p: -.Inf\n", "p: 1.0e+309\n"):
        node = yamldoc.parse(text, SRC)
        assert node is not None
        (_, p), = node.items()
        assert isinstance(p.value(), float) and not math.isfinite(p.value())  # a YAML value...
        with pytest.raises(InputError, match=r"doc.yaml:1: p: must be a finite number") as err:
            p.number()  # ...but never a number migplan uses
        assert err.value.line == 1


# --- merge keys ---------------------------------------------------------------------------------

def test_merge_keys_work_like_yaml_1_1(parser: bool) -> None:
    text = """\
common: &common {user: ops, port: 22, tags: [a]}
extra: &extra {port: 2200, zone: b}
host1:
  <<: *common
  port: 2222
host2:
  <<: [*common, *extra]
host3:
  <<: {inline: true}
  user: root
"""
    doc = read(text)
    assert isinstance(doc, dict)
    assert doc["host1"] == {"user": "ops", "port": 2222, "tags": ["a"]}  # explicit key wins
    assert doc["host2"] == {"user": "ops", "port": 22, "tags": ["a"], "zone": "b"}  # the first merged wins
    assert doc["host3"] == {"inline": True, "user": "root"}
    node = yamldoc.parse(text, SRC)
    assert node is not None
    host1 = dict(node.items())["host1"]
    assert [k for k, _ in host1.items()] == ["user", "tags", "port"]
    assert dict(host1.items())["user"].line == 1  # where the merged value is written


def test_merge_keys_still_refuse_duplicate_explicit_keys(parser: bool) -> None:
    text = "base: &b {a: 1}\nh:\n  <<: *b\n  x: 1\n  x: 2\n"
    with pytest.raises(InputError, match=r"doc.yaml:5: h.x: duplicate key 'x' \(first at line 4\)"):
        read(text)


@pytest.mark.parametrize(("text", "line", "match"), [
    ("h:\n  <<: 5\n", 2, "'<<' merges a mapping or a list of mappings"),
    ("h:\n  <<: [1, 2]\n", 2, "'<<' merges a mapping"),
    ("b: &b {a: 1}\nh:\n  <<: *b\n  <<: *b\n", 4, "duplicate key '<<'"),
    ("h:\n  <<: *nothing\n", 2, "alias *nothing names no anchor"),
])
def test_bad_merge_keys(parser: bool, text: str, line: int, match: str) -> None:
    refused(text, line=line, match=match)


# --- 2. alias bombs and nesting -----------------------------------------------------------------

BILLION_LAUGHS = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


def test_billion_laughs_is_refused_quickly(parser: bool) -> None:
    assert len(BILLION_LAUGHS) < 500
    with within(5):
        e = refused(BILLION_LAUGHS, line=None, match=f"aliases expand to more than {yamldoc.MAX_ALIAS_NODES} values")
    assert e.line is not None and 5 <= e.line <= 9


def test_merge_key_bomb_is_refused_quickly(parser: bool) -> None:
    lines = ["l0: &l0 {k0: 0, k1: 1, k2: 2, k3: 3, k4: 4, k5: 5, k6: 6, k7: 7}"]
    for i in range(1, 12):
        lines.append(f"l{i}: &l{i} {{a: [*l{i - 1}, *l{i - 1}, *l{i - 1}, *l{i - 1}], <<: *l{i - 1}}}")
    with within(5):
        refused("\n".join(lines) + "\n", line=None, match="aliases expand to more than")


def test_modest_aliases_are_fine(parser: bool) -> None:
    text = "base: &b {user: ops, gpus: [0, 1, 2, 3]}\n" + "".join(f"h{i}: *b\n" for i in range(2000))
    doc = read(text)
    assert isinstance(doc, dict) and doc["h1999"] == {"user": "ops", "gpus": [0, 1, 2, 3]}


@pytest.mark.parametrize("text", ["a: &a [*a]\n", "a: &a {b: *a}\n", "- &x [1, [2, *x]]\n"])
def test_recursive_alias_is_refused(parser: bool, text: str) -> None:
    with within(5):
        refused(text, line=1, match="recursive alias")


@pytest.mark.slow
@pytest.mark.parametrize("text", [
    "x: " + "[" * 5000 + "]" * 5000 + "\n",
    "x: " + "{a: " * 5000 + "1" + "}" * 5000 + "\n",
    "".join(" " * i + f"k{i}:\n" for i in range(3000)) + " " * 3000 + "v\n",
    "[" * 200_000,
])
def test_deep_nesting_is_refused_not_a_recursion_error(parser: bool, text: str) -> None:
    with within(10):
        refused(text, line=None, match=f"nested more than {yamldoc.MAX_DEPTH} levels deep")


def test_aliases_count_towards_nesting(parser: bool) -> None:
    deep = "[" * 60 + "]" * 60
    text = f"a: &a {deep}\nb: " + "[" * 50 + "*a" + "]" * 50 + "\n"
    refused(text, line=2, match="alias *a nests lists and mappings more than")


def test_nesting_within_the_limit_reads() -> None:
    depth = yamldoc.MAX_DEPTH - 1
    assert read("x: " + "[" * depth + "]" * depth + "\n") is not None


# --- 3. keys and strings as written ---------------------------------------------------------------

def test_keys_are_text_as_written(parser: bool) -> None:
    text = "0755: a\non: b\n007: c\n0x1F: d\n1e3: e\nnull: f\n~: g\n2026-01-01: h\n'quoted': i\n1.50: j\n"
    node = yamldoc.parse(text, SRC)
    assert node is not None
    assert [k for k, _ in node.items()] == ["0755", "on", "007", "0x1F", "1e3", "null", "~", "2026-01-01",
                                             "quoted", "1.50"]


def test_keys_that_resolve_alike_are_not_duplicates(parser: bool) -> None:
    # YAML 1.1 would read 0755 and 493 as one key, on and yes as one; as text they differ
    node = yamldoc.parse("0755: a\n493: b\non: c\nyes: d\n", SRC)
    assert node is not None and len(dict(node.items())) == 4


@pytest.mark.parametrize(("text", "line", "match"), [
    ("? [a, b]\n: 1\n", 1, "a key must be a name, not a list or mapping"),
    ("? {a: 1}\n: 1\n", 1, "a key must be a name"),
    ("x:\n  ? \n  : 1\n", 2, "a key is empty"),
    ("'': 1\n", 1, "a key is empty"),
])
def test_keys_that_are_not_names_are_refused(parser: bool, text: str, line: int, match: str) -> None:
    refused(text, line=line, match=match)


@pytest.mark.parametrize(("text", "expected"), [
    ("007", "007"), ("0x1F", "0x1F"), ("0755", "0755"), ("1e3", "1e3"), ("1_000", "1_000"), ("12:30", "12:30"),
    ("2026-01-01", "2026-01-01"), ("'007'", "007"), ('"on"', "on"), ("gpu01", "gpu01"), ("1.50", "1.50"),
])
def test_strings_are_read_as_written(parser: bool, text: str, expected: str) -> None:
    node = yamldoc.parse(f"name: {text}\n", SRC)
    assert node is not None
    assert dict(node.items())["name"].str() == expected


@pytest.mark.parametrize("text", ["on", "off", "yes", "no", "true", "False", "~", "null", ""])
def test_booleans_and_null_where_a_string_is_expected_are_refused(parser: bool, text: str) -> None:
    node = yamldoc.parse(f"name: {text}\n", SRC)
    assert node is not None
    with pytest.raises(InputError, match=r"doc.yaml:1: name: expected a string") as err:
        dict(node.items())["name"].str()
    if text not in ("", "~", "null"):
        assert err.value.hint is not None and "quote" in err.value.hint


def test_documents_and_anchors(parser: bool) -> None:
    refused("a: 1\n---\nb: 2\n", line=2, match="second document")
    refused("a: &x 1\nb: &x 2\n", line=2, match="anchor &x is defined twice (first at line 1)")
    assert yamldoc.parse("# only a comment\n", SRC) is None


# --- syntax errors: same message and line with either parser ------------------------------------

SYNTAX_ERRORS = [
    "a: [1, 2\n", "a: b: c\n", "a:\n  - 1\n - 2\n", "a: 'x\n", "a: {b\n", "\t a: 1\n", "key: @x\n",
    'a: "\\q"\n', "a: |\n  x\n b\n", "a:\n\tb: 1\n", "!*a! x\n", "a: >#\n", "%YAML 2.0\n---\na: 1\n",
    "\ufeff\ufeffa: [\n", "a: 1\n\x00\n", "- a\nb: 1\n", "a: *\n",
]


@pytest.mark.parametrize("text", SYNTAX_ERRORS)
def test_syntax_errors_are_the_same_with_libyaml_and_without(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    messages = []
    for use in (True, False):
        monkeypatch.setattr(yamldoc, "USE_LIBYAML", use)
        with pytest.raises(InputError) as err:
            read(text)
        assert err.value.source == SRC and err.value.line is not None
        messages.append(str(err.value))
    assert messages[0] == messages[1]


_PIECES = st.sampled_from([
    "a", "k2", "0755", "on", "1e3", ".nan", "2026-02-30", "2026-01-01", ": ", ":", " ", "  ", "\n", "\n  ",
    "- ", "? ", "[", "]", "{", "}", ", ", "#c", " #c", "&x ", "*x", "<<: ", "!t ", "!!int ", "!!str ", "!vault ",
    "|", "|-", ">+", "'", '"', "\\", "---\n", "...\n", "%YAML 1.1\n", "\t", "\r\n", "\x85", "\u2028", "\ufeff",
    "é", "=", "~",
])


@settings(max_examples=300, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(st.lists(_PIECES, max_size=30).map("".join))
def test_libyaml_and_pure_python_read_every_document_alike(text: str) -> None:
    """Differential: the libyaml build and the pure-Python parser accept the same documents, read the same
    values, and refuse the others with the same message and line."""
    outcomes = []
    for use in (True, False):
        if use and yamldoc._CParser is None:
            continue
        yamldoc.USE_LIBYAML = use
        try:
            node = yamldoc.parse(text, SRC)
            outcomes.append(("ok", None if node is None else repr(node.value())))
        except InputError as err:
            outcomes.append(("error", str(err)))
        finally:
            yamldoc.USE_LIBYAML = yamldoc._CParser is not None
    assert len(set(outcomes)) == 1, outcomes


# --- 5. files -------------------------------------------------------------------------------------

def test_dev_zero_and_urandom_are_refused_at_once() -> None:
    for dev in ("/dev/zero", "/dev/urandom", "/dev/null"):
        if not os.path.exists(dev):
            continue
        with within(5), pytest.raises(InputError, match=r"is a device, not a regular file") as err:
            yamldoc.load(dev)
        assert err.value.source == dev


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "inventory.yaml"
    os.mkfifo(fifo)
    with within(5), pytest.raises(InputError, match=r"inventory.yaml: is a FIFO \(named pipe\), not a regular file"):
        yamldoc.load(fifo)


def test_directory_missing_and_empty(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        yamldoc.load(tmp_path)
    with pytest.raises(InputError, match="file not found"):
        yamldoc.load(tmp_path / "nope.yaml")
    with pytest.raises(InputError, match="embedded|cannot read|not found"):
        yamldoc.load(str(tmp_path / "bad\0name.yaml"))
    (tmp_path / "empty.yaml").write_text("")
    with pytest.raises(InputError, match="file is empty"):
        yamldoc.load(tmp_path / "empty.yaml")


def test_size_cap_names_the_cap_and_the_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "big.yaml"
    f.write_text("a: " + "x" * (2 * 1024 * 1024) + "\n")
    monkeypatch.setenv(yamldoc.MAX_FILE_ENV, "1")
    with pytest.raises(InputError, match=r"larger than the 1 MiB migplan reads") as err:
        yamldoc.load(f)
    assert err.value.hint is not None and "MIGPLAN_MAX_FILE_MB" in err.value.hint
    monkeypatch.setenv(yamldoc.MAX_FILE_ENV, "3")
    assert yamldoc.load(f).is_map
    for bad in ("0", "-5", "abc", "nan", "inf"):
        monkeypatch.setenv(yamldoc.MAX_FILE_ENV, bad)
        with pytest.raises(InputError, match="MIGPLAN_MAX_FILE_MB"):
            yamldoc.load(f)
    monkeypatch.delenv(yamldoc.MAX_FILE_ENV)
    assert yamldoc.max_file_bytes() == yamldoc.MAX_FILE_MB * 1024 * 1024 == 64 * 1024 * 1024


def test_bytes_that_are_not_text(tmp_path: Path) -> None:
    f = tmp_path / "bin.yaml"
    f.write_bytes(b"a: 1\nb: \xff\xfe\n")
    with pytest.raises(InputError, match=r"bin.yaml:2: not UTF-8 text \(byte 0xff\)"):
        yamldoc.load(f)
    f.write_bytes(b"a: 1\nb: \x07bell\n")
    with pytest.raises(InputError, match=r"bin.yaml:2: unacceptable character #x0007"):
        yamldoc.load(f)


@pytest.mark.slow
def test_a_large_file_reads_in_reasonable_time(tmp_path: Path) -> None:
    """About 1 MB of profiles-like YAML; with libyaml this takes well under a second."""
    f = tmp_path / "large.yaml"
    f.write_text("workloads:\n" + "".join(
        f"  - {{name: w{i}, memory_mib: {{p50: 1, p95: 2, p99: 3, max: 4}}, "
        f"compute: {{p50: 0.1, p95: 0.2, max: 0.3}}}}\n"
        for i in range(10_000)))
    with within(60):
        node = yamldoc.load(f)
    assert len(dict(node.items())["workloads"].list()) == 10_000


def test_gc_is_restored_after_reading() -> None:
    import gc

    assert gc.isenabled()
    with pytest.raises(InputError):
        yamldoc.parse("a: [", SRC)
    assert gc.isenabled()
    with yamldoc.paused_gc():
        assert not gc.isenabled()
    assert gc.isenabled()


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.integers(-(10**20), 10**20).map(str),
                 st.floats(-1e12, 1e12).map(lambda f: f"{f:.6f}"),  # longer: refused (MAX_NUMBER_CHARS)
                 st.from_regex(r"[-+]?[0-9_]{1,12}(\.[0-9_]{0,8})?([eE][-+]?[0-9]{1,3})?", fullmatch=True)))
def test_numbers_read_as_pyyaml_reads_them(text: str) -> None:
    """The composer converts common integers and floats itself (no resolver, no constructor): every number must
    come out as PyYAML's safe_load gives it, type and value (an oracle that is not migplan's code)."""
    import yaml

    want = yaml.safe_load(f"k: {text}\n")["k"]
    # ...except a float with an exponent that YAML 1.1 reads as a string (`1e-05`, `2E3`: no dot, or no sign):
    # yamldoc reads those as YAML 1.2's core schema does (its float rule, spec 1.2.2 section 10.3.2), a number
    if isinstance(want, str) and re.fullmatch(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)", text):
        want = float(text)
    got = yamldoc.parse(f"k: {text}\n", "t.yaml").fields({"k"})["k"].value()  # type: ignore[union-attr]
    assert type(got) is type(want)
    assert got == want or (isinstance(want, float) and math.isnan(want) and math.isnan(got))
