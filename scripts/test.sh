#!/usr/bin/env bash
# The README's test command: installs what the tests need, then runs lint, type checks and tests.
#   bash scripts/test.sh            (extra arguments go to pytest)
set -euo pipefail
cd "$(dirname "$0")/.."

# The SSH tests start a real OpenSSH sshd on 127.0.0.1.
if ! command -v sshd >/dev/null 2>&1 && [ ! -x /usr/sbin/sshd ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing openssh-server for the SSH tests" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server openssh-client >/dev/null
  else
    echo "warning: sshd not found and not root: the SSH tests will be skipped" >&2
  fi
fi

# The become tests (tests/fleet/test_sudo.py) run the real sudo for two local test users.
if ! command -v sudo >/dev/null 2>&1 && [ ! -x /usr/bin/sudo ]; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing sudo for the become tests" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q sudo >/dev/null
  else
    echo "warning: sudo not found and not root: the real-sudo tests will be skipped" >&2
  fi
fi

python3 -m pip install -q --disable-pip-version-check -e '.[test]'
echo "== ruff" >&2
python3 -m ruff check migplan tests bench
echo "== mypy" >&2
python3 -m mypy
echo "== pytest" >&2
python3 -m pytest -q "$@"
