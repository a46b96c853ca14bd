"""One error hierarchy for migplan. The CLI maps each to a message on stderr and an exit code.

Exit codes (README, "Exit codes"): 0 success, 1 failure, 2 usage or input error; `propose` 6: the solver found no
plan in time and the plan written is the greedy fallback (planner/greedy.py).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_FALLBACK = 6  # propose: a plan, but the greedy fallback, not a solver's (cron can tell it apart)


class MigplanError(Exception):
    """Base of every error migplan reports to a user (never shown as a traceback)."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\n  hint: {self.hint}"


class InputError(MigplanError):
    """Bad user input: a file, a key or a value. Names where it is and what to do."""

    exit_code = EXIT_USAGE

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        key: str | None = None,
        line: int | None = None,
        hint: str | None = None,
    ) -> None:
        where = source or ""
        if source and line is not None:
            where = f"{source}:{line}"
        prefix = ": ".join(p for p in (where, key) if p)
        super().__init__(f"{prefix}: {message}" if prefix else message, hint=hint)
        self.source = source
        self.key = key
        self.line = line


class CatalogError(InputError):
    """A GPU model or profile unknown to the catalog, or a malformed catalog file."""


class LayoutError(MigplanError):
    """A layout that breaks NVIDIA's placement rules (carries the conflicts)."""

    exit_code = EXIT_USAGE
