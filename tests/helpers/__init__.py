"""Helpers shared by the tests: import them as `from helpers import ...` (tests/ is on sys.path because pytest
prepends the directory of tests/conftest.py, the same way `planner_fixtures` and `prom_support` are found).

`own_tmpdir` is a fixture: a module that wants it for every test says
`pytestmark = pytest.mark.usefixtures("own_tmpdir")`; tests/conftest.py registers it.

Modules: `helpers.samples` (input documents: a `connection: local` inventory, flat workload profiles, the
simulator catalog of a low-memory A100), `helpers.local_runners` (a LocalRunner counting its processes, a
pass-through become prefix), `helpers.slurm_cluster` (a real Slurm on 127.0.0.1: munged, slurmctld, one
slurmd). The simulator's driver is tests/sim_runner.py (`import sim_runner`): every test that runs migplan against
the nvidia-smi simulator gets its runner there.
"""

from __future__ import annotations

import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

# the environment variables migplan reads its defaults from: a test of the CLI runs without the developer's
MIGPLAN_ENV = ("MIGPLAN_OUTPUT", "MIGPLAN_CONFIG", "MIGPLAN_INVENTORY", "MIGPLAN_PROFILES", "MIGPLAN_CATALOG")


def free_port(address: str = "127.0.0.1") -> int:
    """A TCP port free on `address` just now (the kernel picks it; another process may take it before use,
    so a caller that starts a server on it retries)."""
    with socket.socket() as s:
        s.bind((address, 0))
        return int(s.getsockname()[1])


@pytest.fixture
def own_tmpdir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Every temporary file of the test (tempfile's and, through TMPDIR, a child process's) goes under a fresh
    folder, so a test can see what a solve left behind."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setenv("TMPDIR", str(tmp))
    return tmp


def isolate_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The CLI as a new user has it: no config file (XDG_CONFIG_HOME under tmp_path), no MIGPLAN_* variables."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    for var in MIGPLAN_ENV:
        monkeypatch.delenv(var, raising=False)


def migplan_cli(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Callable[..., Any]:
    """`migplan ARGS...` in this process through typer's CliRunner, isolated as `isolate_cli`; returns its Result."""
    from typer.testing import CliRunner

    from migplan.cli.app import app

    isolate_cli(monkeypatch, tmp_path)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))
