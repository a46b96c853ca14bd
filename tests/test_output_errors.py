"""Every OSError on output names its path and the operation (issue 21): under a file-size limit (`ulimit -f`,
SIGXFSZ ignored so write(2) fails with EFBIG instead of killing the process) propose --out, report, export and
apply --journal say `error: cannot write PATH: File too large` (or `cannot append to`), exit 1 (a system failure,
migplan.errors.EXIT_FAILURE), never a bare `File too large`, an internal error or a traceback."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers import MIGPLAN_ENV

sys.path.insert(0, str(Path(__file__).resolve().parent))

ROOT = Path(__file__).resolve().parent.parent
INV = str(ROOT / "inventory" / "example.yaml")
PROF = str(ROOT / "profiles" / "example")


def _limited(argv: list[str], limit: int, tmp: Path, *, stdout: Path | None = None,
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The console script (migplan.cli.app:main) run with RLIMIT_FSIZE = `limit` bytes."""

    def limit_size() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    base = dict(env if env is not None else {"PATH": os.environ["PATH"]})
    base.update(HOME=str(tmp / "home"), XDG_CONFIG_HOME=str(tmp / "xdg"), PYTHONDONTWRITEBYTECODE="1",
                XDG_CACHE_HOME=str(tmp / "cache"))
    for var in MIGPLAN_ENV:
        base.pop(var, None)
    out = open(stdout, "w") if stdout is not None else subprocess.PIPE  # noqa: SIM115 - closed below
    try:
        return subprocess.run([sys.executable, "-c", "from migplan.cli.app import main; main()", *argv],
                              preexec_fn=limit_size, stdout=out, stderr=subprocess.PIPE, text=True, env=base,
                              cwd=tmp, timeout=300)
    finally:
        if stdout is not None:
            out.close()  # type: ignore[union-attr]


def _errors(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("error:")]


def _named(proc: subprocess.CompletedProcess[str], want: str) -> None:
    assert proc.returncode == 1, proc.stderr
    assert _errors(proc.stderr) == [want], proc.stderr
    assert "Traceback" not in proc.stderr and "internal" not in proc.stderr and "Exception ignored" not in proc.stderr


@pytest.fixture(scope="module")
def plan_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("plan")
    out = tmp / "plan.json"
    proc = subprocess.run([sys.executable, "-m", "migplan.cli.app", "propose", "-i", INV, "-p", PROF, "--out",
                           str(out), "--solver", "highs"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "XDG_CONFIG_HOME": str(tmp / "xdg")})
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.slow
def test_propose_out_over_the_file_size_limit_names_the_file(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    proc = _limited(["propose", "-i", INV, "-p", PROF, "--solver", "highs", "--out", str(out)], 5000, tmp_path)
    _named(proc, f"error: cannot write {out}: File too large")
    assert not out.exists() and os.listdir(tmp_path) == [n for n in os.listdir(tmp_path) if not n.startswith(".")]


def test_propose_with_cbc_names_the_solver_model_it_could_not_write(tmp_path: Path) -> None:
    proc = _limited(["propose", "-i", INV, "-p", PROF, "--solver", "cbc", "--out", str(tmp_path / "p.json")],
                    5000, tmp_path)
    assert proc.returncode == 1 and len(_errors(proc.stderr)) == 1, proc.stderr
    line = _errors(proc.stderr)[0]
    assert line.startswith("error: cannot write the solver's model /") and line.endswith("/model.mps: File too "
                                                                                          "large"), proc.stderr


@pytest.mark.slow
def test_report_out_over_the_file_size_limit_names_the_file(tmp_path: Path, plan_file: Path) -> None:
    out = tmp_path / "plan.html"
    _named(_limited(["report", str(plan_file), "--out", str(out)], 3000, tmp_path),
           f"error: cannot write {out}: File too large")
    assert not out.exists()


@pytest.mark.parametrize("what", ["gpu-operator", "mig-parted"])
def test_export_out_over_the_file_size_limit_names_the_file(tmp_path: Path, plan_file: Path, what: str) -> None:
    out = tmp_path / "export.yaml"
    extra = ["--host", json.loads(plan_file.read_text())["gpus"][0]["host"]] if what == "mig-parted" else []
    _named(_limited(["export", what, str(plan_file), *extra, "--out", str(out)], 300, tmp_path),
           f"error: cannot write {out}: File too large")
    assert not out.exists()


@pytest.mark.parametrize("argv", [["report"], ["export", "gpu-operator"]])
def test_stdout_redirected_to_a_file_over_the_limit_says_standard_output(tmp_path: Path, plan_file: Path,
                                                                        argv: list[str]) -> None:
    proc = _limited([*argv, str(plan_file)], 300, tmp_path, stdout=tmp_path / "out.txt")
    _named(proc, "error: cannot write standard output: File too large")


@pytest.mark.slow
def test_apply_journal_over_the_file_size_limit_names_the_journal(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from test_apply_last import _setup

    state, inv, plan = _setup(tmp_path, "A100-SXM4-40GB", monkeypatch)
    before = state.read_text()
    journal = tmp_path / "journal.jsonl"
    journal.write_bytes(b"x" * 4000 + b"\n")  # at the limit already: the first append fails, nothing else does
    env: dict[str, Any] = dict(os.environ)  # the simulator's nvidia-smi on PATH (set by _setup)
    proc = _limited(["apply", str(plan), "-i", str(inv), "--yes", "--journal", str(journal)], 4001, tmp_path,
                    env=env)
    assert proc.returncode == 3, proc.stderr  # a host failed (docs/apply.md: exit 3), named as an io-error
    assert f"h1: FAILED (io-error) cannot append to {journal}: File too large" in proc.stderr, proc.stderr
    assert "internal-error" not in proc.stdout + proc.stderr and "unexpected OSError" not in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert state.read_text() == before  # the journal fails before the first GPU changes: nothing was applied
