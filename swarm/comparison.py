"""Candidates side by side: parameter and metric differences with their significance."""

from __future__ import annotations

import difflib
from typing import Any

from kernels.space import format_defines

MAX_COMPARED = 6


def significance(a_ms: list[float], b_ms: list[float]) -> dict[str, Any]:
    """Is B faster or slower than A? Two one-sided tests on raw samples.

    Uses ``kernels.stats.compare`` (one-sided Mann-Whitney U plus a bootstrap interval of the
    speedup) in both directions; falls back to scipy's two-sided Mann-Whitney U if the library
    has no ``compare``.

    Returns:
        ``{"speedup": median(A) / median(B), "verdict": "faster" | "slower" | "no significant
        difference", "p_faster", "p_slower", "ci_low", "ci_high", "method"}``.
    """
    try:
        from kernels.stats import compare  # noqa: PLC0415
    except ImportError:
        compare = None
    if compare is not None:
        faster, slower = compare(b_ms, a_ms), compare(a_ms, b_ms)
        verdict = "faster" if faster.faster else "slower" if slower.faster else "no significant difference"
        return {"speedup": faster.speedup, "verdict": verdict, "p_faster": faster.p_value, "p_slower": slower.p_value,
                "ci_low": faster.ci_low, "ci_high": faster.ci_high, "method": "kernels.stats.compare (one-sided Mann-Whitney U, bootstrap CI)"}
    import numpy as np  # noqa: PLC0415
    from scipy.stats import mannwhitneyu  # noqa: PLC0415

    p = float(mannwhitneyu(a_ms, b_ms, alternative="two-sided").pvalue)
    speedup = float(np.median(a_ms) / np.median(b_ms))
    verdict = "no significant difference" if p >= 0.05 else ("faster" if speedup > 1 else "slower")
    return {"speedup": speedup, "verdict": verdict, "p_faster": p, "p_slower": p, "ci_low": None, "ci_high": None,
            "method": "scipy Mann-Whitney U (two-sided)"}


def full_source(candidate) -> str:
    return format_defines(candidate.params) + candidate.source


def source_diff_html(a, b) -> str:
    """Side-by-side HTML diff (difflib) of two candidates' full sources (defines included)."""
    diff = difflib.HtmlDiff(tabsize=4, wrapcolumn=80)
    return diff.make_table(full_source(a).splitlines(), full_source(b).splitlines(),
                           fromdesc=f"#{a.pk}", todesc=f"#{b.pk}", context=True, numlines=3)


def parameter_rows(candidates) -> list[dict[str, Any]]:
    names: list[str] = []
    for c in candidates:
        names += [n for n in c.params if n not in names]
    rows = []
    for n in names:
        values = [c.params.get(n) for c in candidates]
        rows.append({"name": n, "values": values, "differs": len({repr(v) for v in values}) > 1})
    return rows


def metric_rows(candidates) -> list[dict[str, Any]]:
    """Whole-run metrics per candidate with the relative delta against the first."""
    evs = [getattr(c, "evidence", None) for c in candidates]
    names: list[str] = []
    for e in evs:
        if e is not None:
            names += [k for k in e.metrics if "[" not in k and k not in names]
    rows = []
    for n in names:
        values = [e.metrics.get(n) if e is not None else None for e in evs]
        base = values[0]
        deltas = [None if v is None or not isinstance(base, (int, float)) or not base else (v - base) / abs(base) * 100
                  for v in values]
        rows.append({"name": n, "cells": list(zip(values, deltas))})
    return rows


def timing_rows(candidates) -> list[dict[str, Any]]:
    """Per timed shape, each other candidate's significance against the first."""
    evs = [getattr(c, "evidence", None) for c in candidates]
    ref = evs[0].samples_ms if evs[0] is not None else {}
    rows = []
    for label, a in ref.items():
        cells = []
        for c, e in zip(candidates[1:], evs[1:]):
            b = (e.samples_ms if e is not None else {}).get(label)
            if not a or not b:
                cells.append({"candidate": c.pk, "missing": True})
                continue
            try:
                cells.append({"candidate": c.pk, **significance(a, b)})
            except ValueError as exc:
                cells.append({"candidate": c.pk, "error": str(exc)})
        rows.append({"label": label, "cells": cells})
    return rows
