"""bench/interleave.py: each checkout runs its own console script on the same fleet, rounds alternate the order,
and the table compares every checkout with the first one named."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import interleave
from bench.large_inputs import write_instance

ROOT = Path(__file__).resolve().parents[1]


def test_console_script_is_read_from_the_checkouts_pyproject() -> None:
    assert interleave.entry_point(ROOT) == "migplan.cli.app:main"


def test_a_checkout_spec_without_a_name_or_a_checkout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="NAME=CHECKOUT"):
        interleave.parse_checkout(str(ROOT))
    with pytest.raises(SystemExit, match="not a migplan checkout"):
        interleave.parse_checkout(f"x={tmp_path}")


@pytest.mark.slow  # four real `migplan propose` processes
def test_two_rounds_run_each_checkout_twice_and_compare_with_the_first(tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    write_instance(16, str(tmp_path))
    assert interleave.main(["--rounds", "2", "--fleet", str(tmp_path), "--no-compile",
                            f"before={ROOT}", f"after={ROOT}"]) == 0
    out = capsys.readouterr().out
    rounds = [line for line in out.splitlines() if line.startswith("round ")]
    assert [r.split(":")[0] for r in rounds] == ["round 1", "round 2"]
    assert all(" before " in r and " after " in r for r in rounds)  # each round ran both checkouts
    rows = [line for line in out.splitlines() if line.startswith("| before |") or line.startswith("| after |")]
    assert len(rows) == 2
    assert rows[0].endswith("| +0.0% | +0.0% |")  # the baseline against itself


def test_a_failing_run_stops_with_the_checkouts_name_and_its_error(tmp_path: Path) -> None:
    (tmp_path / "inventory.yaml").write_text("version: 1\nhosts: [\n")  # not YAML: migplan exits 2
    (tmp_path / "profiles").mkdir()
    with pytest.raises(SystemExit, match=r"broken \(.*\): the child failed \(2\)"):
        interleave.main(["--rounds", "1", "--fleet", str(tmp_path), "--no-compile", f"broken={ROOT}"])
