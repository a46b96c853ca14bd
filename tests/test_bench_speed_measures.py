"""bench/speed_measures.py's `--together`: several measures switched off in one child, as one row."""

from __future__ import annotations

import pytest

from bench.speed_measures import MEASURES, together

BY_NAME = {m.name: m for m in MEASURES}


def test_together_switches_every_named_measure_off_in_one_child() -> None:
    parts = [BY_NAME["yamlplain"], BY_NAME["jsontext"], BY_NAME["gc-freeze"]]
    one = together(parts)
    assert one.name == "yamlplain+jsontext+gc-freeze" and one.run == "propose"
    assert one.off.split("\n") == [line for m in parts for line in m.off.split("\n")]
    compile(one.off, "<off>", "exec")  # the child runs it as one block


def test_together_refuses_measures_of_different_runs() -> None:
    with pytest.raises(SystemExit, match="different runs"):
        together([BY_NAME["yamlplain"], BY_NAME["yamljson"]])
