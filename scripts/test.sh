#!/usr/bin/env bash
# The README's test command: installs what the tests need, then runs lint, type checks and tests.
#   bash scripts/test.sh            (extra arguments go to pytest)
set -euo pipefail
cd "$(dirname "$0")/.."

updated=0
# need PACKAGES WHAT COMMAND...: install the Debian PACKAGES (as root) unless every COMMAND exists;
# not root, only warn: the tests that need them say why they skip.
need() {
  local packages=$1 what=$2 cmd found=1
  shift 2
  for cmd in "$@"; do
    if ! command -v "$cmd" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$cmd" ] && [ ! -x "/usr/bin/$cmd" ]; then
      found=0
    fi
  done
  [ "$found" = 1 ] && return 0
  if [ "$(id -u)" != 0 ]; then
    echo "warning: $* not found and not root: the $what will be skipped" >&2
    return 0
  fi
  echo "installing ${packages#--no-install-recommends } for the $what" >&2
  if [ "$updated" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null
    updated=1
  fi
  # shellcheck disable=SC2086 - a list of packages
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q $packages >/dev/null
}

need "openssh-server openssh-client" "SSH tests (a real OpenSSH sshd on 127.0.0.1)" sshd
need sudo "become tests (tests/fleet/test_sudo.py: the real sudo for two local test users)" sudo
need "--no-install-recommends prometheus" "Prometheus tests (tests/test_prometheus.py: promtool backfills, a real prometheus)" promtool prometheus
need chromium "HTML report's browser tests (a real headless Chromium)" chromium
need zsh "completion tests (the zsh completion script in a real zsh)" zsh
need systemd "schedule tests (tests/test_replan_schedule.py: systemd-analyze verify of the written units)" systemd-analyze
# Debian's Slurm 22.05 and munge: the tests start their own munged, slurmctld and slurmd on 127.0.0.1 (own key, socket,
# ports and folders), never the packaged services.
need "--no-install-recommends slurm-wlm munge" "Slurm tests (tests/test_slurm_real.py: munged, slurmctld and slurmd on 127.0.0.1)" slurmctld slurmd munged
# kubectl: Debian's kubernetes-client (1.20), the client the API stand-in of tests/k8s_sim answers (newer ones send
# protobuf). Where another kubectl owns /usr/bin/kubectl (Google Cloud CLI images ship a 1.32 dispatcher), Debian's
# package is unpacked under .cache/ and the tests are pointed at it ($MIGPLAN_TEST_KUBECTL), the system left as it is.
if ! command -v kubectl >/dev/null 2>&1; then
  need kubernetes-client "Kubernetes tests (tests/k8s_sim: the real kubectl against a local API stand-in)" kubectl
elif [ -z "${MIGPLAN_TEST_KUBECTL:-}" ] && ! kubectl version --client 2>/dev/null | grep -q 'GitVersion:"v1\.20\.'; then
  own=.cache/kubectl/root/usr/bin/kubectl
  if [ ! -x "$own" ] && [ "$(id -u)" = 0 ]; then
    echo "unpacking Debian's kubernetes-client under .cache/kubectl for the Kubernetes tests" >&2
    [ "$updated" = 1 ] || { DEBIAN_FRONTEND=noninteractive apt-get update -q >/dev/null; updated=1; }
    rm -rf .cache/kubectl && mkdir -p .cache/kubectl
    (cd .cache/kubectl && apt-get download -q kubernetes-client >/dev/null 2>&1 \
      && dpkg-deb -x kubernetes-client_*.deb root)
  fi
  if [ -x "$own" ]; then
    MIGPLAN_TEST_KUBECTL=$PWD/$own
    export MIGPLAN_TEST_KUBECTL
  else
    echo "warning: kubectl here is not Debian's 1.20 and it could not be unpacked: the Kubernetes tests will be skipped" >&2
  fi
fi

# The Ansible tests read INI inventories with the real ansible-core (the optional migplan[ansible] extra).
python3 -m pip install -q --disable-pip-version-check -e '.[test,ansible]'

echo "== ruff" >&2
python3 -m ruff check migplan tests bench
echo "== mypy" >&2
python3 -m mypy
echo "== pytest" >&2
python3 -m pytest -q "$@"
