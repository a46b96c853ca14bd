"""Differential fuzz of apply's plan reader: valid plans (a bench one, one with a busy GPU and a reserved one,
a consolidated one with migrations), mutated (keys deleted, duplicated, reordered; wrong types; huge, negative
and non-finite numbers; deep nesting; unicode and control characters; truncation; duplicated GPUs and
workloads), read by the JSON path (`yamljson.parse`, what `load_plan` does) and by the YAML
reader alone: the same Plan, or an InputError with the same message, file, key and line; never another
exception."""

from __future__ import annotations

import collections
import copy
import dataclasses
import json
import random
import sys
from json.decoder import scanstring
from pathlib import Path
from typing import Any

import pytest
from planner_fixtures import CAT, EXACT, fleet, gpu, profiles, run, wl

from migplan import yamldoc, yamljson
from migplan.catalog.layout import Instance
from migplan.documents import load_plan
from migplan.errors import InputError
from migplan.planner import plan_to_dict
from migplan.planner.plan import parse_plan
from migplan.yamljson import JsonNode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.scale_bounds import write_plan

SEED = 2112
CASES = 400
SRC = "plan.json"
RAW = "@@raw:"  # a string value replaced by the text after it in the document (numbers json would not write)


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    path = tmp_path_factory.mktemp("fuzz") / "bench.json"
    write_plan(16, str(path))
    st = fleet(gpu("h", 0, layout=["3g.20gb@0"], busy=(Instance.parse("3g.20gb@0"),)), gpu("h", 1),
               gpu("h", 2, reserved=True))
    ps = profiles(wl("a", 15000, host="h", gpu_idx=0, inst="3g.20gb@0"), wl("b", 4000), wl("c", 9000))
    moves = run(fleet(*(gpu("h", i) for i in range(4))),  # consolidated: migrations, freed GPUs, the curve
                profiles(*(wl(f"w{i}", 3000, host="h", gpu_idx=i) for i in range(4))),
                dataclasses.replace(EXACT, consolidate=True))
    assert moves.migrations
    return [json.loads(path.read_text()), plan_to_dict(run(st, ps)), plan_to_dict(moves)]


def _outcome(text: str, fast: bool) -> tuple[str, Any]:
    """(how it was read, the Plan or the error's fields); any other exception fails the test."""
    try:
        node = yamljson.parse(text, SRC) if fast else yamldoc.parse(text, SRC)
    except InputError as err:
        return "refused as text", (err.message, err.source, err.line, err.key, err.hint)
    how = "json" if isinstance(node, JsonNode) else "yaml"
    if node is None:
        return f"{how}: empty", None
    try:  # compared by repr: a policy may hold NaN (policy_from_mapping reads 'NaN' weights), never equal to itself
        return f"{how}: plan", repr(parse_plan(node, CAT))
    except InputError as err:
        return f"{how}: refused", (err.message, err.source, err.line, err.key, err.hint)


def _containers(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path]
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else ()
    for k, v in items:
        if isinstance(v, (dict, list)):
            out += _containers(v, (*path, k))
        else:
            out.append((*path, k))
    return out


def _get(doc: Any, path: tuple[Any, ...]) -> Any:
    for k in path:
        doc = doc[k]
    return doc


VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 7, 2**63, 10**30, -(10**20), 0.5, -2.5, 1e-05, "", "x", "007", "true", "null",
    "3g.20gb@0", "1g.5gb@6", "A100-SXM4-40GB", "placed", "unplaced", "reserved", "h", "gpu000000", [], {}, [1],
    ["3g.20gb@0"], {"a": 1}, "é", "ünïcødé ☃", "\x00", "\x07", "a\nb", "\u2028", "\ud800", "\x85", "\ufeff",
    "sha256:" + "0" * 64, "x" * 300,
    RAW + "1e400", RAW + "1e999", RAW + "-1e999", RAW + "1.0e+400", RAW + "NaN", RAW + "Infinity",
    RAW + "-Infinity", RAW + "-0", RAW + "1.50", RAW + "1.5e+05", RAW + "1E5", RAW + "9" * 70,
    RAW + "1" * 64, RAW + '"\\u0000"', RAW + '"\\ud800"', RAW + '"a\\/b"', RAW + '"\\u00e9"', RAW + '"\\t"',
]


def _value(rnd: random.Random) -> Any:
    v = rnd.choice(VALUES)
    if v == "deep":
        return v
    if rnd.random() < 0.05:
        depth = rnd.choice([50, 99, 100, 101, 150])
        v = 1
        for _ in range(depth):
            v = [v]
    return copy.deepcopy(v)


def _mutate_doc(doc: Any, rnd: random.Random) -> str:
    """One to three mutations of the decoded document; the description."""
    done = []
    for _ in range(rnd.choice([1, 1, 1, 2, 3])):
        paths = _containers(doc)
        path = rnd.choice(paths[1:] or paths)
        parent, key = _get(doc, path[:-1]), path[-1]
        op = rnd.choice(["set", "set", "set", "delete", "add key", "dup entry", "reorder", "swap"])
        if op == "set":
            parent[key] = _value(rnd)
        elif op == "delete":
            del parent[key]
        elif op == "add key" and isinstance(parent, dict):
            parent[rnd.choice(["extra", "host", "", "k" * 260, "é"])] = _value(rnd)
        elif op == "dup entry" and isinstance(parent, list):
            parent.insert(rnd.randrange(len(parent) + 1), copy.deepcopy(parent[key]))
        elif op == "reorder" and isinstance(parent, dict):
            items = list(parent.items())
            rnd.shuffle(items)
            parent.clear()
            parent.update(items)
        elif op == "swap" and isinstance(parent, list) and len(parent) > 1:
            j = rnd.randrange(len(parent))
            parent[key], parent[j] = parent[j], parent[key]
        done.append(op)
    return "+".join(done)


def _text(doc: Any, rnd: random.Random) -> str:
    text = json.dumps(doc, indent=2) if rnd.random() < 0.7 else json.dumps(doc)
    while RAW in text:  # a placeholder string becomes its raw text
        start = text.index('"' + RAW)
        raw, end = scanstring(text, start + 1)
        text = text[:start] + raw[len(RAW):] + text[end:]
    return text


def _mutate_text(text: str, rnd: random.Random) -> str:
    op = rnd.choice(["truncate", "dup line", "tab", "crlf", "delete char", "space before colon", "bom",
                     "dup key line"])
    lines = text.split("\n")
    if op == "truncate":
        return text[:rnd.randrange(len(text))]
    if op in ("dup line", "dup key line"):
        candidates = [i for i, line in enumerate(lines) if op == "dup line" or '": ' in line and line.endswith(",")]
        i = rnd.choice(candidates or [0])
        lines.insert(i, lines[i])
        return "\n".join(lines)
    if op == "tab":
        i = rnd.randrange(len(text))
        return text[:i] + "\t" + text[i:]
    if op == "crlf":
        return text.replace("\n", "\r\n")
    if op == "delete char":
        i = rnd.randrange(len(text))
        return text[:i] + text[i + 1:]
    if op == "space before colon":
        return text.replace('":', '" :', 1)
    return "\ufeff" + text


@pytest.mark.slow
def test_json_path_and_yaml_reader_agree_on_mutated_plans(bases: list[dict[str, Any]]) -> None:
    rnd = random.Random(SEED)
    counts: collections.Counter[str] = collections.Counter()
    for case in range(CASES):
        doc = copy.deepcopy(rnd.choice(bases))
        what = "unchanged"
        if case >= 4:
            what = _mutate_doc(doc, rnd)
        text = _text(doc, rnd)
        if case >= 4 and rnd.random() < 0.2:
            text = _mutate_text(text, rnd)
            what += "+text"
        fast_how, fast = _outcome(text, fast=True)
        slow_how, slow = _outcome(text, fast=False)
        assert fast == slow, f"case {case} ({what}): {fast_how} {fast!r} != {slow_how} {slow!r}"
        assert slow_how.startswith(("yaml", "refused")), slow_how
        counts[fast_how] += 1
    print(f"\nplan reader fuzz, {CASES} cases (seed {SEED}):", dict(sorted(counts.items())))
    assert sum(counts.values()) == CASES
    # the comparison is only worth something when both readers were used on both kinds of outcome
    assert counts["json: plan"] >= 4 and counts["json: refused"] >= 50
    assert counts["yaml: refused"] + counts["refused as text"] + counts["yaml: plan"] >= 20


def test_load_plan_reads_a_plan_file_through_the_json_path(bases: list[dict[str, Any]], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(bases[1], indent=2) + "\n")
    used: list[type] = []
    real = parse_plan

    def spy(node: Any, catalog: Any) -> Any:
        used.append(type(node))
        return real(node, catalog)

    monkeypatch.setattr("migplan.documents.parse_plan", spy)
    fast = load_plan(path, CAT)
    monkeypatch.setattr(yamljson, "USE_JSON", False)
    slow = load_plan(path, CAT)
    assert used == [JsonNode, yamldoc.Node] and fast == slow


def test_entries_made_without_init_equal_those_made_with_it() -> None:
    from migplan.model.diff import Action, Op
    from migplan.model.gpu_plan import WorkloadPlan
    from migplan.planner.plan import _made, _made_action

    values = {"name": "w", "workload": "w", "status": "placed", "host": "h", "gpu": 0, "instance": "1g.5gb@6",
              "memory_mib": 1, "peak_mib": 1, "instance_mib": 4864, "margin_mib": 4863, "slices": 1, "kept": False,
              "moved": False, "reason": None}
    made = _made(WorkloadPlan, values)
    assert made == WorkloadPlan(**values) and repr(made) == repr(WorkloadPlan(**values))
    assert hash(made) == hash(WorkloadPlan(**values))
    template = Action(Op.CREATE_GI, ("", 0), Instance.parse("1g.5gb@6"))
    assert _made_action(template.__dict__, ("h", 3)) == Action(Op.CREATE_GI, ("h", 3), Instance.parse("1g.5gb@6"))
    with pytest.raises(ValueError):  # Action has a __post_init__: made by its __init__, which checks
        _made(Action, {"op": Op.CREATE_GI, "gpu": ("h", 0), "instance": None, "reset": False})
