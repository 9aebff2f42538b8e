"""Candidates side by side: source, parameter and metric differences, and each one's stored
medians (separate-process measurements: shown, never judged)."""

from __future__ import annotations

import difflib
import statistics
from typing import Any

from kernels.space import format_defines, shown_params

MAX_COMPARED = 6


def full_source(candidate) -> str:
    return format_defines(candidate.params) + candidate.source


def source_diff_html(a, b) -> str:
    """Side-by-side HTML diff (difflib) of two candidates' full sources (defines included)."""
    diff = difflib.HtmlDiff(tabsize=4, wrapcolumn=80)
    return diff.make_table(full_source(a).splitlines(), full_source(b).splitlines(),
                           fromdesc=f"#{a.pk}", todesc=f"#{b.pk}", context=True, numlines=3)


def parameter_rows(candidates) -> list[dict[str, Any]]:
    """Per parameter, each candidate's value as its run's space labels it (``None`` where it has
    none), and whether they differ: ``[{"name", "values", "differs"}]``."""
    shown = [shown_params(c.run.label_space(), c.params) for c in candidates]
    names: list[str] = []
    for p in shown:
        names += [n for n in p if n not in names]
    rows = []
    for n in names:
        values = [p.get(n) for p in shown]
        raw = [c.params.get(n) for c in candidates]  # differs by value, not by how a label reads
        rows.append({"name": n, "values": values, "differs": len({repr(v) for v in raw}) > 1})
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


def stored_median_rows(candidates) -> list[dict[str, Any]]:
    """Per timed shape, each candidate's stored median (ms) from its own evaluation.

    Each evaluation ran in its own process at its own time, and the difference between
    processes dominates such samples: no verdict is drawn from them (two measurements of one
    kernel "differ significantly"). Which kernel is faster is a paired measurement
    (:mod:`swarm.production.paired_runs`).

    Returns:
        ``[{"label": shape label, "medians": [ms or None per candidate]}]`` over the shapes
        any candidate has samples of, in first-seen order.
    """
    samples = [(getattr(c, "evidence", None).samples_ms or {}) if getattr(c, "evidence", None) else {} for c in candidates]
    labels: list[str] = []
    for s in samples:
        labels += [k for k in s if k not in labels]
    rows = []
    for label in labels:
        medians = []
        for s in samples:
            xs = [x for x in s.get(label) or [] if isinstance(x, (int, float))]
            medians.append(statistics.median(xs) if xs else None)
        rows.append({"label": label, "medians": medians})
    return rows
