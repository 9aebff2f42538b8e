"""Recorded values as the interchange readers compare them (Kernel Tuner caches, T4 results)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["finite_number", "value_kind"]


def finite_number(v: Any) -> float | None:
    """``v`` as a float if it is a finite number (not a bool, nor an int beyond any float), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    try:
        return float(v) if math.isfinite(v) else None
    except OverflowError:
        return None


def value_kind(v: Any) -> tuple[str, Any]:
    """``v`` as a dictionary key that keeps apart what JSON keeps apart: ``True`` from ``1``
    and ``"1"`` from ``1`` (Python's ``True == 1``), while ``16`` and ``16.0`` stay one number."""
    if isinstance(v, bool):
        return "bool", v
    if isinstance(v, (int, float)):
        return "number", v
    return type(v).__name__, v
