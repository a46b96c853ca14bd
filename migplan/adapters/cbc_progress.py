"""CBC's progress while it searches: the incumbent (best integer solution so far) and the bound, read from the
log the child process writes (`migplan.adapters.solver._OwnedCbc`), for a live line on stderr.

The parser is pure (`parse_line`, `fold`); `Watch` follows the log file while the solver adapter waits for
the child. The lines read are CBC 2.10's messages (CbcMessage.cpp, `us_english`; CbcSolver.cpp for the root
LP), as PuLP's bundled `cbc` prints them:

  Continuous objective value is -9227.92 - 0.00 seconds
  Cbc0013I At root node, 4 cuts changed objective from -9227.921 to -9227.8331 in 3 passes
  Cbc0012I Integer solution of -9190 found by feasibility pump after 0 iterations and 0 nodes (0.03 seconds)
  Cbc0016I Integer solution of -9192 found by strong branching after 2090 iterations and 501 nodes (0.84 seconds)
  Cbc0010I After 1000 nodes, 341 on tree, -9204 best solution, best possible -9227.8331 (4.53 seconds)
  Cbc0005I Partial search - best objective -9204 (best possible -9227.8331), took 787657 iterations and ...
  Cbc0001I Search completed - best objective -2721, took 5130 iterations and 572 nodes (0.20 seconds)

"best solution" is 1e+50 while CBC has none. CBC's numbers leave out the model's objective constant (the MPS
file has none): `Watch` adds it back, so the figures are the plan's own objective.

CBC's stdout is a file, which its C library buffers in 4 KiB blocks: a search printing one status line a
second shows nothing for a minute. `line_buffered` starts it under coreutils' `stdbuf -oL` when that exists
(the process is the same: stdbuf execs cbc, so its process group and pid are CBC's); elsewhere the figures
arrive as the buffer fills, still true, only late.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, replace

_NUM = r"(-?(?:inf|nan|[0-9.]+(?:e[-+]?[0-9]+)?))"
NO_SOLUTION = 1e50  # CBC's "best solution" before it has one (COIN_DBL_MAX would print 1.79769e+308)


@dataclass(frozen=True)
class SolveProgress:
    """Where a search stands: the best plan's objective so far (None: none yet), the proven bound (None: not
    known yet), nodes searched and CBC's own clock (None until it says)."""

    incumbent: float | None = None
    bound: float | None = None
    nodes: int | None = None
    seconds: float | None = None

    @property
    def gap(self) -> float | None:
        """(incumbent - bound) / max(|incumbent|, 1e-9), as `SolveResult.gap`; None without both."""
        if self.incumbent is None or self.bound is None:
            return None
        return max(0.0, self.incumbent - self.bound) / max(abs(self.incumbent), 1e-9)


_STATUS = re.compile(rf"^Cbc0010I After (\d+) nodes, \d+ on tree, {_NUM} best solution, best possible {_NUM} "
                     rf"\({_NUM} seconds\)")
_STATUS3 = re.compile(rf"^Cbc00(?:37|40)I (\d+) nodes.*?, \d+ on tree, best {_NUM} - possible {_NUM} .*"
                      rf"\({_NUM} seconds\)")
_FOUND = re.compile(rf"^Cbc00(?:04|12|16|24|33)I Integer solution of {_NUM} found .*?and (\d+) nodes "
                    rf"\({_NUM} seconds\)")
_ROOT = re.compile(rf"^Cbc0013I At root node, \d+ cuts changed objective from {_NUM} to {_NUM}")
_ROOT_PASS = re.compile(rf"^Cbc0046I Root node pass \d+, .* objective {_NUM} \({_NUM} seconds\)")
_CONTINUOUS = re.compile(rf"^Continuous objective value is {_NUM} - {_NUM} seconds")
_PARTIAL = re.compile(rf"^Cbc0005I Partial search - best objective {_NUM} \(best possible {_NUM}\), .*?"
                      rf"and (\d+) nodes \({_NUM} seconds\)")
_DONE = re.compile(rf"^Cbc0001I Search completed - best objective {_NUM}, .*?and (\d+) nodes \({_NUM} seconds\)")


def _incumbent(text: str) -> float | None:
    x = float(text)
    return None if not math.isfinite(x) or abs(x) >= NO_SOLUTION else x


def _bound(text: str) -> float | None:
    x = float(text)
    return x if math.isfinite(x) and abs(x) < NO_SOLUTION else None


def parse_line(line: str, last: SolveProgress) -> SolveProgress:
    """`last` updated by one line of CBC's log (unchanged when the line says nothing about the search)."""
    if not line.startswith(("Cbc00", "Continuous")):
        return last  # most lines (Clp, Cgl, the heuristics' Cbc0038I passes): one prefix test each
    m = _STATUS.match(line)
    if m:
        inc = _incumbent(m.group(2))
        return SolveProgress(inc if inc is not None else last.incumbent, _bound(m.group(3)), int(m.group(1)),
                             float(m.group(4)))
    m = _FOUND.match(line)
    if m:
        return replace(last, incumbent=_incumbent(m.group(1)), nodes=int(m.group(2)), seconds=float(m.group(3)))
    m = _STATUS3.match(line)
    if m:
        inc = _incumbent(m.group(2))
        return SolveProgress(inc if inc is not None else last.incumbent, _bound(m.group(3)), int(m.group(1)),
                             float(m.group(4)))
    m = _ROOT.match(line)
    if m:
        return replace(last, bound=_bound(m.group(2)))
    m = _ROOT_PASS.match(line)
    if m:
        return replace(last, bound=_bound(m.group(1)), seconds=float(m.group(2)))
    m = _CONTINUOUS.match(line)
    if m:
        return replace(last, bound=_bound(m.group(1)), seconds=float(m.group(2)))
    m = _PARTIAL.match(line)
    if m:
        return SolveProgress(_incumbent(m.group(1)), _bound(m.group(2)), int(m.group(3)), float(m.group(4)))
    m = _DONE.match(line)
    if m:  # the search closed: the incumbent is proven, it is its own bound
        best = _incumbent(m.group(1))
        return SolveProgress(best, best, int(m.group(2)), float(m.group(3)))
    return last


def fold(text: str, last: SolveProgress | None = None) -> SolveProgress:
    """`last` (or nothing known) updated by every complete line of `text`, in order."""
    state = last or SolveProgress()
    for line in text.splitlines():
        state = parse_line(line.rstrip(), state)
    return state


def line_buffered(args: list[str]) -> list[str]:
    """CBC's command line run with its stdout line-buffered (see the module docstring); as it is without
    coreutils' stdbuf."""
    stdbuf = _stdbuf()
    return [stdbuf, "-oL", *args] if stdbuf else args


def _stdbuf() -> str | None:
    return shutil.which("stdbuf")


POLL_S = 0.5  # how often the log is read while CBC runs


class Watch:
    """Follows one CBC log while the adapter waits for the child, and calls `report` with the figures (the
    model's objective `offset` added) whenever they change, at most every `every` seconds, and once more
    when the child has ended. A log that cannot be read shows nothing; it never stops the solve."""

    def __init__(self, report: Callable[[SolveProgress], None], *, offset: float = 0.0,
                 every: float = POLL_S) -> None:
        self.report, self.offset, self.every = report, offset, every
        self.state = SolveProgress()
        self._sent: SolveProgress | None = None
        self._pos = 0
        self._rest = b""
        self._path: str | None = None

    def wait(self, proc: subprocess.Popen[bytes], log_path: str) -> int:
        """`proc.wait()`, reading `log_path` (this child's log, from its start) every `every` seconds meanwhile."""
        self._path, self._pos, self._rest, self.state = log_path, 0, b"", SolveProgress()
        while True:
            try:
                code = proc.wait(timeout=self.every)
            except subprocess.TimeoutExpired:
                self._read()
                continue
            self._read()
            return code

    def _read(self) -> None:
        try:
            with open(self._path or "", "rb") as fh:
                fh.seek(self._pos)
                chunk = fh.read()
        except OSError:
            return
        self._pos += len(chunk)
        data = self._rest + chunk
        cut = data.rfind(b"\n") + 1  # a line CBC is still writing is kept for the next read
        self._rest = data[cut:]
        self.state = fold(data[:cut].decode("utf-8", "replace"), self.state)
        if self.state != self._sent and (self.state.incumbent is not None or self.state.bound is not None):
            self._sent = self.state
            self.report(self.shifted(self.state))

    def shifted(self, p: SolveProgress) -> SolveProgress:
        """`p` with the objective constant CBC leaves out added back."""
        return replace(p, incumbent=None if p.incumbent is None else p.incumbent + self.offset,
                       bound=None if p.bound is None else p.bound + self.offset)


__all__ = ["NO_SOLUTION", "POLL_S", "SolveProgress", "Watch", "fold", "line_buffered", "parse_line"]

