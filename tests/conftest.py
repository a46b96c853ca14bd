"""Fixtures shared by every test, and the `slow` marker for tests that start a real server.

`pytest -m "not slow"` is the inner loop (a few minutes on two cores); CI (scripts/test.sh) runs everything.
A test is slow when it starts a real server or a program slow to start (sshd, sudo, Prometheus, Chromium, zsh,
systemd-analyze, promtool, ansible-core, the migplan CLI as a subprocess) or otherwise takes more than about
a second. Tests using one of SLOW_FIXTURES, directly or through another fixture, are marked here; the
others carry `pytestmark = pytest.mark.slow` or `@pytest.mark.slow` in their file.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Iterator

import pytest
from helpers import own_tmpdir  # noqa: F401 - a fixture: importing it here offers it to every test
from k8s_sim.fixtures import k8s_cluster  # noqa: F401 - the Kubernetes stand-in (tests/k8s_sim), as above

# Fixtures that start a real server: the OpenSSH sshd of tests/fleet (and the real sudo behind it) and the
# real Prometheus of tests/test_prometheus.py; the Kubernetes stand-in's real kubectl (tests/k8s_sim).
SLOW_FIXTURES = frozenset({"ssh_server", "sudo_users", "prom", "prom_basic", "growth", "k8s_cluster"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def sigint_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in the main thread, even when the run inherited SIGINT ignored
    (a background job of a non-interactive shell)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


@pytest.fixture(autouse=True)
def _migplan_logger_as_it_was() -> Iterator[None]:
    """`migplan -v` run in this process (typer's CliRunner) adds its debug handler to the `migplan` logger and
    sets it to DEBUG for good; put the logger back after each test so later tests see no stray debug lines."""
    logger = logging.getLogger("migplan")
    handlers, level = list(logger.handlers), logger.level
    yield
    logger.handlers[:] = handlers
    logger.setLevel(level)
