"""The `k8s_cluster` fixture: a factory of stand-in clusters (k8s_sim.start_cluster less tmp_path), each
stopped after the test. Tests using it run the real kubectl, so it skips them when kubectl is missing (not
root, scripts/test.sh could not install Debian's kubernetes-client), and tests/conftest.py marks them slow."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from . import Cluster, kubectl_path, start_cluster


def require_kubectl() -> str:
    exe = kubectl_path()
    if exe is None:
        pytest.skip("kubectl not found: install Debian's kubernetes-client (scripts/test.sh does, as root)")
    return exe


@pytest.fixture
def k8s_cluster(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    require_kubectl()
    started: list[Cluster] = []

    def factory(*args: Any, **kwargs: Any) -> Cluster:
        cluster = start_cluster(*args, tmp_path=tmp_path / f"k8s-{len(started)}", **kwargs)
        started.append(cluster)
        return cluster

    yield factory
    for cluster in started:
        cluster.stop()
