"""migplan.jsontext.dumps writes exactly what json.dumps(value, indent=2) writes (json itself is the oracle)."""

from __future__ import annotations

import enum
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from migplan import jsontext

ROOT = Path(__file__).resolve().parent.parent


class Colour(str, enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


SCALARS: list[Any] = [None, True, False, 0, -1, 2**70, 1.5, -0.0, 1e300, 1e-7, math.inf, -math.inf, "", "plain",
                      'quote " and \\ backslash', "tab\t newline\n", "ünïcödé ✓ 🎉", "\x00\x1f", Colour.RED, Level.HIGH]


def random_value(r: random.Random, depth: int = 0) -> Any:
    roll = r.random()
    if depth > 4 or roll < 0.5:
        return r.choice(SCALARS) if r.random() < 0.7 else r.choice([r.randint(-10**6, 10**6), r.uniform(-1e6, 1e6),
                                                                    "".join(r.choice("ab\"\\é\n ") for _ in range(5))])
    if roll < 0.75:
        return [random_value(r, depth + 1) for _ in range(r.randint(0, 4))]
    if roll < 0.8:
        return tuple(random_value(r, depth + 1) for _ in range(r.randint(0, 3)))
    return {r.choice(["a", "b", "name", "é", 'q"', "x" * r.randint(1, 3)]): random_value(r, depth + 1)
            for _ in range(r.randint(0, 4))}


@pytest.mark.parametrize("seed", range(300))
def test_same_text_as_json_dumps(seed: int) -> None:
    value = random_value(random.Random(seed))
    assert jsontext.dumps(value) == json.dumps(value, indent=2)


@pytest.mark.parametrize("value", SCALARS + [[], {}, [[]], {"a": {}}, ([1, 2],)])
def test_scalars_and_empty_containers(value: Any) -> None:
    assert jsontext.dumps(value) == json.dumps(value, indent=2)
    assert jsontext.dumps(value, indent=4) == json.dumps(value, indent=4)


def test_nan_is_written_as_json_writes_it() -> None:
    assert jsontext.dumps([math.nan]) == json.dumps([math.nan], indent=2) == "[\n  NaN\n]"


def test_what_it_does_not_handle_goes_to_json() -> None:
    assert jsontext.dumps({1: "a", None: 2, 2.5: [True]}) == json.dumps({1: "a", None: 2, 2.5: [True]}, indent=2)
    with pytest.raises(TypeError, match="not JSON serializable"):
        jsontext.dumps({"a": object()})
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="Circular reference"):
        jsontext.dumps(loop)


def test_a_real_plan_document_is_written_the_same(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    from migplan.commands.context import build_context
    from migplan.commands.propose import ProposeRequest, propose
    from migplan.planner import plan_to_dict

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.chdir(ROOT)
    ctx = build_context(None, None, "json")
    doc = plan_to_dict(propose(ctx, ProposeRequest(inventory="inventory/example.yaml", profiles="profiles/example")))
    assert len(doc["workloads"]) > 30
    assert jsontext.dumps(doc) == json.dumps(doc, indent=2)
