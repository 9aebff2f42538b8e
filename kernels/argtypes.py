"""Argparse ``type`` functions shared by the command lines (``python -m engines``,
``manage.py serve``, ``manage.py factory``): a bad value is a usage error that says why."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def bounded_int(lo: int, hi: int, *, noun: str = "an integer",
                out_of_range: str = "must be {lo}-{hi}, not {value}") -> Callable[[str], int]:
    """An argparse ``type``: a whole number in ``[lo, hi]``.

    Args:
        lo, hi: the bounds, inclusive.
        noun: what the value is, for "'x' is not <noun>".
        out_of_range: the message for a number outside the bounds (``{lo}``, ``{hi}`` and
            ``{value}``, the text given, cut to 30 characters).

    Raises (from the returned function):
        argparse.ArgumentTypeError: not a whole number, or outside ``[lo, hi]``.
    """
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text[:40]!r} is not {noun}") from None
        if not lo <= value <= hi:
            shown = text.strip() if len(text) <= 30 else text[:27] + "..."
            raise argparse.ArgumentTypeError(out_of_range.format(lo=lo, hi=hi, value=shown))
        return value
    return parse
