"""migplan.yamlemit writes the same bytes as PyYAML (CSafeDumper, the options profiles files are written with)."""

from __future__ import annotations

import random

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from migplan import yamlemit
from migplan.catalog import builtin_catalog
from migplan.history.rollup import rollup
from migplan.history.samples import Place, Sample

AWKWARD = [
    "", " ", "  ", "a", "-", "--", "---", "--- a", "...", "...a", "-a", "- a", "?", "?a", "? a", ":", ":a", ": a",
    "a:", "a:b", "a: b", "a :b", "a#b", "a #b", "#a", "a#", ",a", "a,b", "[a]", "a[0]", "{a}", "a{b}", "&a", "*a",
    "!a", "|a", ">a", "'a", "a'b", "a''b", "'", "\"a", "a\"b", "%a", "@a", "`a", "a`", "yes", "no", "Yes", "NO", "on",
    "off", "y", "n", "true", "False", "null", "Null", "~", "NULL", "1", "01", "0x1F", "0o17", "1e3", "1.0e+3", "1.5",
    ".5", ".inf", "-.inf", ".nan", "1_000", "1:20", "190:20:30", "2026-11-01", "2026-11-01T00:00:00Z", "=", "<<",
    "a b", "a  b", " a", "a ", "wl-0001", "host-00", "A100-SXM4-80GB", "3g.20gb", "k8s:ns/name", "exe:python3:a.py",
    "x" * 130, "a b " * 40, "tab\there", "new\nline", "bell\x07", "del\x7f", "caf\u00e9", "\u65e5\u672c", "\u2028",
    "\ufeffbom", "emoji \U0001f600", "nbsp\u00a0x", "a\\b", "C:\\path", "a/b", "-1", "+1", "-1.5", "0", "00",
    "0b101", "1e", "e3", "1.", "+.5", "o", "O", "Off", "TRUE",
]
FLOATS = [0.0, -0.0, 0.37, 1.0, 0.0001, 1e-05, 1e16, 1.5e300, 123456789.125, -2.5, float("inf"), float("nan")]
INTS = [0, 1, -1, 10569, 2**63, -(2**70)]


def check(doc: object) -> None:
    assert yamlemit.dump(doc) == yamlemit.pyyaml_dump(doc)


def profiles_doc(strings: list[str]) -> dict[str, object]:
    """A profiles document in the shape `profiles import` writes, its strings taken from `strings`."""
    wls = []
    for i, s in enumerate(strings):
        wls.append({"name": s, "observed": {
            "host": s, "gpu_model": "A100-SXM4-80GB", "window": {"start": "2026-11-01T00:00:00Z", "end": s},
            "samples": i, "compute_samples": i, "first_seen": s, "last_seen": "2026-11-01T00:01:00Z",
            "places": [{"host": s, "gpu": i % 8, "gpu_model": s, "samples": i, "first_seen": s}],
            "notes": [s, f"GPU model {s!r} is not in the catalog: compute of its {i} samples is unknown"]},
            "memory_mib": {"p50": i, "p95": i, "p99": i, "max": i},
            "compute": {"p50": FLOATS[i % 10], "p95": 0.5, "p99": None, "max": True}})
    return {"version": 1, "kind": "migplan/profiles", "workloads": wls}


@pytest.mark.parametrize("s", AWKWARD)
def test_each_awkward_string_as_value_and_in_a_list_matches_pyyaml(s: str) -> None:
    check({"k": s})
    check({"a-long-key-name-to-move-the-column": s, "k": [s, {"x": s}]})
    check(profiles_doc([s]))


@pytest.mark.parametrize("s", AWKWARD)
def test_each_awkward_string_as_key_matches_pyyaml(s: str) -> None:
    check({s: 1, "k": {s: [s]}})


@pytest.mark.parametrize("v", [*FLOATS, *INTS, None, True, False])
def test_numbers_bools_and_null_match_pyyaml(v: object) -> None:
    check({"k": v, "l": [v, {"m": v}]})


def test_a_generated_profiles_document_of_every_awkward_string_matches_pyyaml() -> None:
    check(profiles_doc(AWKWARD))


def test_strings_with_spaces_near_the_width_match_pyyaml() -> None:
    rnd = random.Random(7)
    for n in range(90, 140):
        for indent_keys in range(4):
            s = " ".join("w" * rnd.randint(1, 9) for _ in range(40))[:n].strip()
            doc: dict[str, object] = {"v": s}
            for _ in range(indent_keys):
                doc = {"key": doc, "l": [doc.copy()]}
            check(doc)


def test_the_documents_a_rollup_writes_are_written_here_not_by_pyyaml() -> None:
    """The fast path is taken for real profiles documents (else the speed-up is gone, silently)."""
    samples = [Sample(1_790_000_000 + 60 * t, f"wl-{w}", 1000.0 + w + t, 10.0 * (w % 5) if w % 3 else None,
                      Place(host=f"h{w % 3}", gpu=w % 8, gpu_model="A100-SXM4-40GB" if w % 4 else "Mystery GPU 9"))
               for t in range(5) for w in range(40)]
    docs = rollup(samples, builtin_catalog()).documents()
    assert len(docs) == 3
    for doc in docs.values():
        text = yamlemit.emit(doc)
        assert text is not None
        assert text == yamlemit.pyyaml_dump(doc)


def test_what_it_leaves_to_pyyaml() -> None:
    shared = {"a": 1}
    for doc in ({"k": {}}, {"k": []}, {"k": [[1]]}, {"k": "caf\u00e9"}, {"k": "tab\t"}, {1: "int key"},
                {"k": shared, "j": shared}, {"k": float("nan")}, {"k": b"bytes"}, [1, 2], {"k": "x " * 70}):
        assert yamlemit.emit(doc) is None
        check(doc)


def test_what_it_writes_itself() -> None:
    for doc in ({"k": "yes"}, {"k": ""}, {"k": "a: b"}, {"k": "it's"}, {"k": ["- a", {"x": None}]}, {"k": 1e16}):
        assert yamlemit.emit(doc) is not None
        check(doc)


_TEXT = st.text(alphabet=st.sampled_from(list(" -:#'\"?.,[]{}!&*|>%@`~=<+_/\\0123456789eE.yesnoYNtrufal\u00e9\t")),
                max_size=12)
_SCALAR = st.one_of(_TEXT, st.integers(), st.floats(allow_nan=False), st.booleans(), st.none())
_DOC = st.recursive(_SCALAR, lambda inner: st.one_of(st.lists(inner, min_size=1, max_size=4),
                                                     st.dictionaries(_TEXT, inner, min_size=1, max_size=4)),
                    max_leaves=20)


@pytest.mark.slow
@settings(max_examples=400, deadline=None)
@given(st.dictionaries(_TEXT, _DOC, min_size=1, max_size=5))
def test_random_documents_match_pyyaml(doc: dict[str, object]) -> None:
    check(doc)


def test_the_reference_is_libyaml_where_built() -> None:
    """The bytes compared are those of the Dumper profiles files are written with."""
    assert yamlemit.pyyaml_dump({"k": "v"}) == yaml.dump({"k": "v"}, Dumper=getattr(yaml, "CSafeDumper",
                                                                                  yaml.SafeDumper),
                                                          sort_keys=False, width=120)
