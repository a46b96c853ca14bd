"""Fixtures shared by every test."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest


@pytest.fixture
def sigint_raises() -> Iterator[None]:
    """SIGINT raises KeyboardInterrupt in the main thread, even when the run inherited SIGINT ignored
    (a background job of a non-interactive shell)."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
