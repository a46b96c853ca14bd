"""Progress on stderr while a long command works (`migplan propose`): its phases, with the time each takes,
and the solver's incumbent and bound while it searches.

Who sees what (`choose_mode`), as a cron-run command should behave:

* stderr a terminal: one live line, redrawn in place (`\\r`), once the run has taken DELAY_S (a quick plan
  shows none), cleared at the end and before anything else is printed; the planner's own lines (model
  size, solver outcome) and notes are printed above it;
* stderr not a terminal (cron, a pipe, a log file): no progress, only notes ("plan written to ...") and
  warnings, unless `--progress` asks for it: then plain lines, one per phase and a solver figure every
  PLAIN_EVERY_S, each with the time since the start, and no control characters;
* `--quiet`: only warnings and errors (a line starting "warning" or "error"), terminal or not; `--no-progress`:
  notes and warnings, no progress, even on a terminal.
"""

from __future__ import annotations

import enum
import shutil
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from migplan.adapters.cbc_progress import SolveProgress

DELAY_S = 1.0  # a terminal's live line appears only once the run has taken this long
TICK_S = 0.25  # the live line's clock is redrawn this often
PLAIN_EVERY_S = 5.0  # --progress on a non-terminal: a solver figure line at most this often


class Mode(enum.Enum):
    QUIET = "quiet"  # warnings and errors only
    NOTES = "notes"  # notes and warnings, no progress
    LIVE = "live"  # a terminal: the live line
    PLAIN = "plain"  # asked for on a non-terminal: plain lines


def alarming(message: str) -> bool:
    """A warning or an error: printed whatever the options say."""
    return message.startswith(("warning", "error"))


def _isatty(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # a closed or odd stream: not a terminal
        return False


def choose_mode(quiet: bool, progress: bool | None, stream: IO[str]) -> Mode:
    """The policy above; `progress`: --progress (True), --no-progress (False) or neither (None)."""
    if quiet:
        return Mode.QUIET
    if progress is False:
        return Mode.NOTES
    if _isatty(stream):
        return Mode.LIVE
    return Mode.PLAIN if progress else Mode.NOTES


def _figure(x: float) -> str:
    return f"{x:.6g}"


def figures(p: SolveProgress) -> str:
    """The search's figures in words: "incumbent 812, bound 773, gap 4.80%, 501 nodes"."""
    parts = ["no incumbent yet" if p.incumbent is None else f"incumbent {_figure(p.incumbent)}"]
    if p.bound is not None:
        parts.append(f"bound {_figure(p.bound)}")
    if p.gap is not None:
        parts.append(f"gap {p.gap:.2%}")
    if p.nodes:
        parts.append(f"{p.nodes} nodes")
    return ", ".join(parts)


class Reporter:
    """Notes, warnings and progress of one command run, on `stream` (default: sys.stderr when made) in `mode`.

    `phase(name)` starts a phase (the same name again is no change), `detail(message)` is one of the
    planner's own lines (progress: shown when progress is), `solving(figures)` the solver's figures,
    `note(message)` a note or warning. `close()` (or leaving the `with` block) ends it: the live line is
    cleared, and with plain lines a last one says how long the whole run took. `clock` and `ticker` (the
    thread that redraws the live line's clock) are for tests."""

    def __init__(self, mode: Mode, stream: IO[str] | None = None, *, clock: Callable[[], float] = time.monotonic,
                 delay: float = DELAY_S, ticker: bool = True, width: int | None = None) -> None:
        self.mode, self.stream, self.clock, self.delay = mode, stream or sys.stderr, clock, delay
        self.width = width
        self.start = clock()
        self._phase: str | None = None
        self._phase_start = self.start
        self._figures: SolveProgress | None = None
        self._figures_shown = -PLAIN_EVERY_S
        self._drawn = False  # the live line is on the screen
        self._closed = False
        self._broken = False  # stderr cannot be written: nothing more is tried
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if mode is Mode.LIVE and ticker:
            self._thread = threading.Thread(target=self._tick_loop, name="migplan-progress", daemon=True)
            self._thread.start()

    # -- what the command says ---------------------------------------------------------------------------

    def note(self, message: str) -> None:
        if self.mode is not Mode.QUIET or alarming(message):
            self._line(message)

    def detail(self, message: str) -> None:
        if alarming(message) or self.mode in (Mode.LIVE, Mode.PLAIN):
            self._line(message)

    def phase(self, name: str) -> None:
        with self._lock:
            if name == self._phase or self._closed:
                return
            now = self.clock()
            self._phase, self._phase_start, self._figures = name, now, None
            if self.mode is Mode.PLAIN:
                self._line(f"{self._stamp(now)} {name}")
            else:
                self._draw(now)

    def solving(self, figures_now: SolveProgress) -> None:
        with self._lock:
            if self._closed:
                return
            self._figures = figures_now
            now = self.clock()
            if self.mode is Mode.PLAIN and now - self._figures_shown >= PLAIN_EVERY_S:
                self._figures_shown = now
                self._line(f"{self._stamp(now)} {self._phase or 'solving'}: {figures(figures_now)}")
            else:
                self._draw(now)

    def tick(self) -> None:
        """Redraw the live line's clock (the ticker thread calls this every TICK_S)."""
        with self._lock:
            if not self._closed:
                self._draw(self.clock())

    def close(self, ok: bool = True) -> None:
        """The end: the live line cleared; plain lines end with the run's time when it succeeded."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._stop.set()
            self._clear()
            if ok and self.mode is Mode.PLAIN:
                self._line(f"{self._stamp(self.clock())} done")
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

    def __enter__(self) -> Reporter:
        return self

    def __exit__(self, kind: object, *_: object) -> None:
        self.close(ok=kind is None)

    # -- the stream ---------------------------------------------------------------------------------------

    def _stamp(self, now: float) -> str:
        return f"[{now - self.start:7.2f}s]"

    def _text(self, now: float) -> str:
        phase = self._phase or "working"
        text = f"{phase} {now - self._phase_start:.1f}s"
        if self._figures is not None:
            text += f": {figures(self._figures)}"
        text += f" (total {now - self.start:.1f}s)"
        width = self.width or shutil.get_terminal_size((80, 24)).columns
        return text[:max(10, width - 1)]  # a wrapped line could not be redrawn in place

    def _write(self, text: str) -> None:
        if self._broken:
            return
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # stderr gone (a closed pipe): progress is not worth an error
            self._broken = True

    def _draw(self, now: float) -> None:
        with self._lock:
            if self.mode is not Mode.LIVE or self._closed or now - self.start < self.delay:
                return
            self._write("\r" + self._text(now) + "\x1b[K")
            self._drawn = True

    def _clear(self) -> None:
        if self._drawn:
            self._write("\r\x1b[K")
            self._drawn = False

    def _line(self, message: str) -> None:
        """One whole line; on a terminal above the live line, which is drawn again below it."""
        with self._lock:
            drawn = self._drawn
            self._clear()
            if not self._broken:
                try:
                    typer.echo(message, file=self.stream)
                except (OSError, ValueError):
                    self._broken = True
            if drawn:
                self._draw(self.clock())

    def _tick_loop(self) -> None:
        while not self._stop.wait(TICK_S):
            self.tick()


def reporter(quiet: bool, progress: bool | None, stream: IO[str] | None = None) -> Reporter:
    """The Reporter the options ask for; --quiet with --progress is refused (exit 2): they contradict."""
    if quiet and progress:
        raise typer.BadParameter("--quiet and --progress contradict each other; give one", param_hint="--progress")
    out = stream or sys.stderr
    return Reporter(choose_mode(quiet, progress, out), out)


__all__ = ["DELAY_S", "PLAIN_EVERY_S", "TICK_S", "Mode", "Reporter", "alarming", "choose_mode", "figures",
           "reporter"]
