"""One nvidia-smi client: runs argv from `migplan.smi` builders over a `CommandRunner`, raises typed errors.

Shared by discovery, `catalog learn` and apply, so every caller classifies nvidia-smi's failures the
same way: a missing binary (exit 127, "command not found") is `NoNvidiaSmiError`; any other failure is
the typed `SmiError` that `smi.classify_failure` picks from NVIDIA's text; a "nothing found" listing
(`No GPU instances found: Not Found`) is an empty list, not an error.

`BatchedReads` wraps a runner so that the per-GPU listings (`mig -i N -lgi/-lci/-lgip/-lgipp`) cost one read
per host, not one per GPU: without `-i` they list every MIG-enabled GPU (docs/nvidia-smi.md §3, §4, §6, §9)
and every row carries its GPU index, which the parsers filter on; and `prefetch` runs the reads a step needs
(discovery and the pre-flight help; the read-back, memory and MIG device UUIDs) in one round trip. apply uses
it (round trips per changed GPU, bench/results/apply.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from migplan import smi
from migplan.adapters.runner import (
    DEFAULT_TIMEOUT,
    MAX_TRANSFER_BYTES,
    CommandRunner,
    Completed,
    FilesDone,
    FileToPut,
    HostError,
    Prune,
    run_many,
)

_Row = TypeVar("_Row", smi.GpuInstanceRow, smi.ComputeInstanceRow)
_HOST_WIDE = ("-lgi", "-lci", "-lgip", "-lgipp")


class BatchedReads:
    """A runner whose reads are answered from reads made together: `nvidia-smi mig -i N <listing>` from one
    host-wide read of that listing (the text of every MIG GPU: callers keep GPU N's rows), and any command
    `prefetch` ran (in one round trip where the runner can: `runner.run_many`). Any other command forgets what
    was read, so a read after a change goes to the host again. Files and the lock pass through."""

    def __init__(self, inner: CommandRunner) -> None:
        self.inner = inner
        self._read: dict[tuple[str, ...], Completed] = {}

    @property
    def host(self) -> str:
        return self.inner.host

    @staticmethod
    def key(argv: Sequence[str]) -> tuple[str, ...]:
        """The command that answers `argv`: `nvidia-smi mig <listing>` for `nvidia-smi mig -i N <listing>`."""
        a = tuple(argv)
        if len(a) == 5 and a[0] == smi.NVIDIA_SMI and a[1:3] == ("mig", "-i") and a[3].isascii() \
                and a[3].isdigit() and a[4] in _HOST_WIDE:
            return (smi.NVIDIA_SMI, "mig", a[4])
        return a

    def prefetch(self, argvs: Sequence[Sequence[str]], *, timeout: float = DEFAULT_TIMEOUT) -> bool:
        """Run these READ-ONLY commands together now and answer them from that until the next other command.
        False (and nothing kept) when the batch failed as a whole (a dropped connection, a refusing become
        prefix, a timeout): each read then goes to the host on its own when asked, and fails there as it would
        have without the batch."""
        keys = list(dict.fromkeys(self.key(a) for a in argvs))
        self._read.clear()
        try:
            done = run_many(self.inner, keys, timeout=timeout)
        except HostError:
            return False
        self._read = dict(zip(keys, done, strict=True))
        return True

    def cached(self, argv: Sequence[str]) -> Completed | None:
        """What answers `argv` now without a round trip (None: it would go to the host)."""
        return self._read.get(self.key(argv))

    def has(self, argvs: Sequence[Sequence[str]]) -> bool:
        return all(self.key(a) in self._read for a in argvs)

    def run(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT, stdin: bytes | None = None) -> Completed:
        k = self.key(argv)
        if stdin is None and k in self._read:
            return self._read[k]
        if stdin is None and len(k) == 3 and k[:2] == (smi.NVIDIA_SMI, "mig") and k[2] in _HOST_WIDE:
            # a listing (a per-GPU one is read for every GPU at once): kept for the other GPUs' questions
            self._read[k] = self.inner.run(list(k), timeout=timeout)
            return self._read[k]
        self._read.clear()
        return self.inner.run(argv, timeout=timeout, stdin=stdin)

    def put_file(self, remote_path: str, data: bytes, *, mode: int = 0o644, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.inner.put_file(remote_path, data, mode=mode, timeout=timeout)

    def get_file(self, remote_path: str, *, max_bytes: int = MAX_TRANSFER_BYTES,
                 timeout: float = DEFAULT_TIMEOUT) -> bytes:
        return self.inner.get_file(remote_path, max_bytes=max_bytes, timeout=timeout)

    def put_files(self, directory: str, files: Sequence[FileToPut], *, prune: Prune | None = None,
                  timeout: float = DEFAULT_TIMEOUT) -> FilesDone:
        return self.inner.put_files(directory, files, prune=prune, timeout=timeout)


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
