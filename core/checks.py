"""Checks of plain inputs shared by the services and the CLI: numbers in their range, thread counts.

Each returns the value in its proper type or raises one :class:`core.errors.BadInputError` naming the input, what is
wrong and the fix (the app shows it with ``gr.Error``, the CLI exits 2).
"""
from __future__ import annotations

import math

from core.errors import BadInputError

MAX_THREADS = 1024


def check_threads(n: int, *, zero_is_default: bool = False) -> int:
    """``n`` as a torch thread count (with ``zero_is_default``, 0 means torch's default), or
    :class:`BadInputError` for a count torch cannot take (negative, zero, absurdly large)."""
    low = 0 if zero_is_default else 1
    if not low <= n <= MAX_THREADS:
        raise BadInputError(f"--threads {n} is not a thread count.",
                            fix=f"give a number from {low} to {MAX_THREADS} (about the machine's cores).")
    return n


def check_number(value, what: str, lo: float | None = None, hi: float | None = None, *, whole: bool = False):
    """``value`` as a float (an int with ``whole``) in [lo, hi], or one :class:`BadInputError` naming ``what`` and the
    range: for NaN, infinity, a fraction where a whole number belongs, a word, a blank or a value out of range."""
    bounds = f" from {lo:g} to {hi:g}" if lo is not None and hi is not None else \
        f" of at least {lo:g}" if lo is not None else f" of at most {hi:g}" if hi is not None else ""
    kind = "a whole number" if whole else "a number"
    try:
        number = float(value)
        if isinstance(value, bool) or not math.isfinite(number) or (whole and not number.is_integer()):
            raise ValueError(value)
    except (TypeError, ValueError, OverflowError):
        raise BadInputError(f"{what} = {value!r} is not {kind}.", fix=f"give {kind}{bounds}.") from None
    if (lo is not None and number < lo) or (hi is not None and number > hi):
        raise BadInputError(f"{what} = {value!r} is out of range.", fix=f"give {kind}{bounds}.")
    return int(number) if whole else number


__all__ = ["check_number", "check_threads", "MAX_THREADS"]
