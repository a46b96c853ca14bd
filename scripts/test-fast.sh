#!/usr/bin/env bash
# The inner loop: every test not marked slow (no real sshd, sudo, Prometheus, Chromium, zsh...; see
# tests/conftest.py), in a few minutes on two cores. CI runs scripts/test.sh, which runs everything.
#   bash scripts/test-fast.sh            (extra arguments go to pytest)
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 -m pytest -m "not slow" -q "$@"
