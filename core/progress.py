"""Progress and cancellation: the one shape long work reports in.

One callable, ``progress(fraction, message)`` with ``fraction`` in [0, 1]; it may raise :class:`core.errors.Cancelled`
to stop the work (the UI's Stop does so through :func:`cancellable`). Loops that count items adapt it with
:func:`item_progress`; :func:`scaled` maps it onto a sub-range of a longer job.
"""
from __future__ import annotations

from typing import Callable

from core.errors import Cancelled

Progress = Callable[[float, str], None]


def report(progress: Progress | None, fraction: float, message: str) -> None:
    """Call ``progress`` (if any) with ``fraction`` clipped to [0, 1]; it may raise :class:`Cancelled`."""
    if progress is not None:
        progress(min(max(float(fraction), 0.0), 1.0), message)


def scaled(progress: Progress | None, lo: float, hi: float) -> Progress | None:
    """``progress`` seen through the sub-range [lo, hi] (a step of a longer job)."""
    if progress is None:
        return None
    return lambda fraction, message: report(progress, lo + (hi - lo) * fraction, message)


def item_progress(progress: Progress | None, what: str, lo: float = 0.0, hi: float = 1.0):
    """An adapter for loops that count items: ``(done, total, name=None) -> progress(fraction, message)``."""
    if progress is None:
        return None

    def step(done: int, total: int, name: str | None = None) -> None:
        label = f"{what} {done}/{total}" + (f": {name}" if name else "")
        report(progress, lo + (hi - lo) * done / max(total, 1), label)
    return step


def cancellable(progress: Progress | None, stopped: Callable[[], bool]) -> Progress:
    """A progress callable that raises :class:`Cancelled` once ``stopped()`` is true, else forwards to ``progress``."""
    def checked(fraction: float, message: str) -> None:
        if stopped():
            raise Cancelled("Stopped.", fix="Press the button again to restart.")
        report(progress, fraction, message)
    return checked


__all__ = ["Progress", "report", "scaled", "item_progress", "cancellable"]
