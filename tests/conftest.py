"""Fixtures shared by every test, and the `slow` marker for tests that start a real server.

`pytest -m "not slow"` is the inner loop (a few minutes on two cores); CI (scripts/test.sh) runs everything.
A test is slow when it starts a real server or a program slow to start (sshd, sudo, Prometheus, Chromium, zsh,
systemd-analyze, promtool, ansible-core, the migplan CLI as a subprocess) or otherwise takes more than about
a second. Tests using one of SLOW_FIXTURES, directly or through another fixture, are marked here; the
others carry `pytestmark = pytest.mark.slow` or `@pytest.mark.slow` in their file.
"""

from __future__ import annotations

import fnmatch
import signal
from collections.abc import Iterator

import pytest
from helpers import own_tmpdir  # noqa: F401 - a fixture: importing it here offers it to every test

# Fixtures that start a real server: the OpenSSH sshd of tests/fleet (and the real sudo behind it) and the
# real Prometheus of tests/test_prometheus.py.
SLOW_FIXTURES = frozenset({"ssh_server", "sudo_users", "prom", "prom_basic", "growth"})


# Slow tests (measured) in files another engineer is rewriting (issue 22), by file and fnmatch pattern on the
# test's name: named here so as not to edit those files now; the mark belongs in the file, and moves there.
SLOW_ELSEWHERE: dict[str, tuple[str, ...]] = {
    "test_apply_faults.py": (
        "test_every_fault_leaves_the_gpu_as_planned_or_as_before[[]*hang=*[]]",
    ),
    "test_apply_files.py": (
        "test_env_file_names_are_plain_distinct_and_what_the_prune_recognises",
        "test_a_rolled_back_gpu_gets_no_env_file_and_its_old_ones_go",
        "test_a_workload_no_longer_on_the_host_loses_its_file_and_the_others_are_not_rewritten",
        "test_apply_last_reconciles_the_env_files_too",
    ),
    "test_apply_interrupt.py": (
        "test_each_signal_at_each_step_stops_cleanly_and_the_next_apply_repairs",
        "test_an_apply_of_another_plan_puts_a_half_done_gpu_back_first",
        "test_replan_repairs_before_it_plans",
        "test_a_host_unreachable_after_the_kill_is_repaired_when_it_returns",
        "test_killing_only_the_shell_that_started_apply_lets_it_finish",
    ),
    "test_apply_last.py": (
        "test_after_a_reboot_apply_last_restores_the_layout_exactly",
        "test_the_fleet_map_is_also_written_locally",
        "test_a_tampered_last_layout_is_refused_naming_the_key",
        "test_cli_apply_last",
        "test_apply_last_on_a_host_whose_own_table_gives_less_than_the_catalog",
        "test_last_applied_holds_what_is_on_the_host_after_a_partial_apply",
    ),
    "test_apply_layouts.py": (
        "test_every_maximal_layout_applies_to_an_empty_gpu_and_reads_back_exactly",
    ),
    "test_apply_local.py": (
        "test_apply_makes_every_gpu_as_planned_and_keeps_what_it_keeps",
        "test_dry_run_records_exactly_what_apply_then_runs",
        "test_stale_gpu_is_refused_and_the_other_goes_ahead",
        "test_a_failing_create_rolls_back_to_the_checkpoint",
        "test_one_apply_per_host_and_the_lock_goes_with_its_holder",
        "test_connection_local_discovers_and_applies_on_this_machine",
        "test_hooks_run_around_the_apply_with_what_changes",
        "test_a_failing_pre_apply_hook_skips_the_host",
    ),
    "test_apply_moves.py": (
        "test_a_planned_move_runs_its_on_move_hook_end_to_end",
    ),
    "test_apply_random.py": (
        "test_random_mixed_fleet_plan_apply_discover_compare",
        "test_the_random_cases_cover_every_model_and_repartition_partitioned_gpus",
    ),
    "test_apply_roundtrips.py": (
        "test_an_eight_gpu_host_costs_at_most_four_round_trips_per_changed_gpu",
        "test_the_files_are_one_round_trip_whatever_changes",
        "test_the_journal_lists_every_command_the_host_ran",
        "test_reapplying_reads_once_changes_nothing_and_rewrites_no_file",
        "test_a_dry_run_records_exactly_the_mutating_commands_a_real_run_journals",
    ),
    "test_architecture.py": (
        "test_each_outside_library_has_one_home",
    ),
    "test_mig_commands_one_place.py": (
        "test_a_planted_mig_command_outside_steps_fails_the_rule",
    ),
    "test_render_grid.py": (
        "test_plain_grid_is_tabulates_simple_format_or_declines",
        "test_plain_grid_lays_out_plain_cells_as_tabulate_does",
    ),
}


def _slow_elsewhere(item: pytest.Item) -> bool:
    patterns = SLOW_ELSEWHERE.get(item.path.name, ())
    return any(fnmatch.fnmatchcase(item.name, p) or getattr(item, "originalname", None) == p for p in patterns)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if SLOW_FIXTURES.intersection(getattr(item, "fixturenames", ())) or _slow_elsewhere(item):
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
