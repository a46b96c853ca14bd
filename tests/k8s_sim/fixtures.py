"""The `k8s_cluster` fixture: a factory of stand-in clusters (k8s_sim.start_cluster less tmp_path), each
stopped after the test. Tests using it run the real kubectl, so it skips them when kubectl is missing (not
root, scripts/test.sh could not install Debian's kubernetes-client) or is not the 1.20 client the stand-in
answers (newer clients send protobuf bodies), and tests/conftest.py marks them slow. The kubectl chosen
($MIGPLAN_TEST_KUBECTL, else PATH's) is also put first on PATH for the test, so that migplan's own adapter,
which runs `kubectl` from PATH, runs the same one."""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from . import Cluster, kubectl_path, start_cluster


@functools.cache
def _client_version(exe: str) -> str:
    done = subprocess.run([exe, "version", "--client"], capture_output=True, text=True, timeout=30, check=False)
    return done.stdout


def require_kubectl() -> str:
    exe = kubectl_path()
    if exe is None:
        pytest.skip("kubectl not found: install Debian's kubernetes-client (scripts/test.sh does, as root)")
    if 'GitVersion:"v1.20.' not in _client_version(exe):
        pytest.skip(f"{exe} is not kubectl 1.20 (Debian's kubernetes-client), the client the stand-in answers: "
                    "run scripts/test.sh as root, or set MIGPLAN_TEST_KUBECTL")
    return exe


@pytest.fixture
def k8s_cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Cluster]]:
    exe = require_kubectl()
    bin_dir = tmp_path / "kubectl-bin"
    bin_dir.mkdir()
    (bin_dir / "kubectl").symlink_to(exe)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    started: list[Cluster] = []

    def factory(*args: Any, **kwargs: Any) -> Cluster:
        cluster = start_cluster(*args, tmp_path=tmp_path / f"k8s-{len(started)}", **kwargs)
        started.append(cluster)
        return cluster

    yield factory
    for cluster in started:
        cluster.stop()
