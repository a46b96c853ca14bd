"""Work the planner may hand to another CPU while it goes on: a pure function of data it already has.

The planner re-checks every plan (validate.py). At 7,000 GPUs the check of the GPUs alone takes ~0.1 s of
a 3 s budget (bench/large_inputs.py), and it can begin as soon as the GPUs' targets are known, while
the planner still works out workloads, migrations and the summary on one CPU. A `Background` runs
`fn(*args)` elsewhere when it can (the command layer passes `adapters.forkmap.Forked`: a forked process)
and `result()` gives what `fn(*args)` returns, or raises what it raises; `Here`, the default, runs it in
this process when the result is asked for. Either way the plan is the same, and it is returned only
once every check has passed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)


class Handle(Protocol[R_co]):
    def result(self) -> R_co: ...

    def cancel(self) -> None: ...


class Background(Protocol):
    def start(self, fn: Callable[..., R], *args: Any) -> Handle[R]: ...


class _Later:
    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        self.fn, self.args = fn, args

    def result(self) -> Any:
        return self.fn(*self.args)

    def cancel(self) -> None:
        pass


class Here:
    """No other process: `fn(*args)` runs when its result is asked for."""

    def start(self, fn: Callable[..., R], *args: Any) -> Handle[R]:
        return _Later(fn, args)
