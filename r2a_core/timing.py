"""Stage timing: the one helper that adds a block's wall seconds to a ``{stage: seconds}`` dict.

Used by the graph build (its per-stage timings in the manifest log) and by the run-time retriever and wrapper while
profiling (``r2a bench perf retrieval``), where it sits on the per-step path: a plain class (no generator) and, when
not profiling, a shared no-op context that costs about nothing.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any, ContextManager

NOT_TIMED: ContextManager[None] = nullcontext()


class StageTimer:
    """Adds the seconds spent inside the block to ``times[name]`` (a stage entered twice counts both times)."""

    __slots__ = ("name", "start", "times")

    def __init__(self, times: dict[str, float], name: str) -> None:
        self.times, self.name = times, name
        self.start = 0.0

    def __enter__(self) -> None:
        self.start = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.times[self.name] = self.times.get(self.name, 0.0) + time.perf_counter() - self.start


def stage_timer(times: dict[str, float] | None, name: str) -> ContextManager[Any]:
    """A :class:`StageTimer` into ``times``, or :data:`NOT_TIMED` when ``times`` is None (timing is off)."""
    return NOT_TIMED if times is None else StageTimer(times, name)


__all__ = ["NOT_TIMED", "StageTimer", "stage_timer"]
