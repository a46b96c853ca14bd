"""One nvidia-smi client: runs argv from `migplan.smi` builders over a `CommandRunner`, raises typed errors.

Shared by discovery, `catalog learn` and apply, so every caller classifies nvidia-smi's failures the
same way: a missing binary (exit 127, "command not found") is `NoNvidiaSmiError`; any other failure is
the typed `SmiError` that `smi.classify_failure` picks from NVIDIA's text; a "nothing found" listing
(`No GPU instances found: Not Found`) is an empty list, not an error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from migplan import smi
from migplan.adapters.runner import DEFAULT_TIMEOUT, CommandRunner, Completed, HostError

_Row = TypeVar("_Row", smi.GpuInstanceRow, smi.ComputeInstanceRow)


class NoNvidiaSmiError(HostError):
    code = "no-nvidia-smi"


class SmiSession:
    """nvidia-smi on one host. Every command goes through `run`, so callers can record or journal it."""

    def __init__(self, runner: CommandRunner, *, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.runner = runner
        self.timeout = timeout

    @property
    def host(self) -> str:
        return self.runner.host

    def run(self, argv: Sequence[str]) -> Completed:
        """Run one command; only a missing nvidia-smi raises here (the caller judges the exit code)."""
        done = self.runner.run(list(argv), timeout=self.timeout)
        if done.exit_code == 127 and "not found" in (done.stderr + done.stdout):
            raise NoNvidiaSmiError(self.host, "nvidia-smi is not installed or not on the PATH",
                                   hint="install the NVIDIA driver utilities on the host, or fix the login PATH")
        return done

    def check(self, argv: Sequence[str]) -> Completed:
        """Run a command that must succeed; its typed nvidia-smi error otherwise."""
        done = self.run(argv)
        if not done.ok:
            raise smi.classify_failure(argv, done.exit_code, done.stdout, done.stderr)
        return done

    def output(self, argv: Sequence[str]) -> str:
        """stdout of a command that must succeed."""
        return self.check(argv).stdout

    def listing(self, argv: Sequence[str], parse: Callable[[str], list[_Row]]) -> list[_Row]:
        """A -lgi/-lci listing: "No ... found: Not Found" (a non-zero exit) is an empty list."""
        done = self.run(argv)
        if done.ok:
            return parse(done.stdout)
        text = done.stdout if done.stdout.strip() else done.stderr
        rows = parse(text)  # raises the typed error for anything but the "nothing found" message
        if rows:
            raise smi.classify_failure(argv, done.exit_code, done.stdout, done.stderr)
        return rows

    # -- the reads every caller needs ----------------------------------------------------------
    def gpus(self) -> list[smi.GpuQueryRow]:
        return smi.parse_query_gpus(self.output(smi.query_gpus()))

    def gpu_listing(self) -> list[smi.GpuListing]:
        return smi.parse_list_gpus(self.output(smi.list_gpus()))

    def compute_apps(self) -> list[smi.ComputeApp]:
        return smi.parse_compute_apps(self.output(smi.query_compute_apps()))

    def gpu_instances(self, gpu: int) -> list[smi.GpuInstanceRow]:
        return [r for r in self.listing(smi.list_gpu_instances(gpu), smi.parse_gpu_instances) if r.gpu == gpu]

    def compute_instances(self, gpu: int) -> list[smi.ComputeInstanceRow]:
        return [r for r in self.listing(smi.list_compute_instances(gpu), smi.parse_compute_instances)
                if r.gpu == gpu]

    def driver_versions(self) -> dict[int, str]:
        return smi.parse_driver_versions(self.output(smi.query_driver_versions()))

    def gi_profiles_text(self, gpu: int) -> str:
        return self.output(smi.list_gi_profiles(gpu))

    def gi_placements_text(self, gpu: int) -> str:
        return self.output(smi.list_gi_placements(gpu))
