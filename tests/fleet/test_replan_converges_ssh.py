"""Convergence as a property over the real sshd (issue 20): the drawn fleets of tests/test_replan_converges.py,
each host a simulated host behind the shared sshd, replan connecting over SSH with host keys checked. Fewer
draws than the local-runner test (each SSH run costs more); the count is printed."""

from __future__ import annotations

import random

import pytest
from conftest import Fleet

from migplan.commands.fleet import FleetRequest
from tests.test_replan_converges import _fleet, converge

SEEDS = 4


@pytest.mark.parametrize("seed", range(100, 100 + SEEDS))
def test_stationary_demand_converges_over_ssh(fleet: Fleet, seed: int) -> None:
    rng = random.Random(seed)
    states = _fleet(rng, [fleet.host(i).state for i in range(3)])
    hosts = {name: fleet.host_entry(fleet.host(i)) for i, name in enumerate(states)}
    print(f"seed {seed} over ssh: " + converge(fleet.tmp, rng, states, hosts, FleetRequest(ssh=fleet.options()),
                                               None))
