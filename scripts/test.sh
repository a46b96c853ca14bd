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

# The Prometheus tests (tests/test_prometheus.py) backfill data with promtool and start a real prometheus.
if ! command -v promtool >/dev/null 2>&1 || ! command -v prometheus >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing prometheus for the Prometheus tests" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >/dev/null
  else
    echo "warning: prometheus/promtool not found and not root: the real-Prometheus tests will be skipped" >&2
  fi
fi

python3 -m pip install -q --disable-pip-version-check -e '.[test]'
# The Ansible tests read INI inventories with the real ansible-core (the optional migplan[ansible] extra).
python3 -m pip install -q --disable-pip-version-check -e '.[ansible]'

# The HTML report tests render pages in a real headless Chromium (Debian's chromium package).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    echo "installing chromium for the HTML report tests" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null
  else
    echo "warning: chromium not found and not root: the browser tests of the HTML report will be skipped" >&2
  fi
fi

# The completion tests run the zsh completion script in a real zsh.
if ! command -v zsh >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  echo "installing zsh for the completion tests" >&2
  DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q zsh >/dev/null
fi
echo "== ruff" >&2
python3 -m ruff check migplan tests bench
echo "== mypy" >&2
python3 -m mypy
echo "== pytest" >&2
python3 -m pytest -q "$@"
