"""The noise floor of a target: the smallest time ratio this host can resolve, and where it is kept.

The floor is measured by A/A comparisons (:func:`kernels.comparison.paired.measure_noise_floor`): one
kernel compared with itself, paired and interleaved, in fresh pairs of sandbox children
(rounds). Every round's ratio would be exactly 1 on a noiseless host; the floor is how far
the A/A comparison's interval (:func:`kernels.comparison.verdict.judge_rounds`) reaches from 1,
``f = exp(max(|ln ci_low|, |ln ci_high|)) - 1``, and never below :data:`MIN_FLOOR`: the
smallest ratio this host resolves with that many rounds.
A paired comparison calls one kernel faster only when its whole interval lies outside
``[1/(1+f), 1+f]`` (:func:`kernels.comparison.verdict.judge_rounds`).

The floor depends on the host (CPU, compiler, load, frequency policy) and on the kind of
kernel (a 5 us call is noisier than a 10 ms one), so it is kept per target fingerprint
(:func:`fingerprint_key`: the backend's fingerprint, which names the CPU model, core count
and compiler), per (workload, shape set) and per measurement protocol (:func:`floor_key`). :class:`FileFloorStore` keeps floors as JSON in
``KERNELS_CACHE_DIR/noise-floor.json``; the web application keeps them in its database
through the same two methods (:class:`FloorStore`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from kernels import config
from kernels.comparison.verdict import judge_rounds

__all__ = ["MIN_FLOOR", "FileFloorStore", "FloorStore", "fingerprint_key", "floor_from_ratios", "floor_key"]

#: No floor below 0.5%: differences that small are not a kernel's to claim on a shared host.
MIN_FLOOR = 0.005


def floor_from_ratios(aa_ratios: Sequence[float]) -> float:
    """The noise floor ``f`` (a fraction) from A/A round ratios: how far their interval
    (:func:`kernels.comparison.verdict.judge_rounds`, floor 0) reaches from 1, at least :data:`MIN_FLOOR`.

    Raises:
        ValueError: fewer than 2 ratios, or one that is not positive and finite.
    """
    aa = judge_rounds(aa_ratios, 0.0)
    return max(MIN_FLOOR, math.expm1(max(abs(math.log(aa.ci[0])), abs(math.log(aa.ci[1])))))


def fingerprint_key(fingerprint: dict) -> str:
    """A stable 16-hex-digit digest of a backend fingerprint (sorted JSON, sha256)."""
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True, default=str).encode()).hexdigest()[:16]


def floor_key(target: str, fingerprint: dict, workload: str, shape_set: str, protocol: str = "") -> str:
    """``"<target>@<fingerprint digest>/<workload>/<shape set>[#<protocol>]"``: what one floor
    is kept under. ``protocol`` names the measurement settings (calls per round, round length,
    flush): a floor measured with few, short rounds is far looser than one measured with the
    defaults, and must not stand in for it."""
    return f"{target}@{fingerprint_key(fingerprint)}/{workload}/{shape_set}" + (f"#{protocol}" if protocol else "")


class FloorStore(Protocol):
    """Where floors are kept: ``get`` returns the entry stored under a :func:`floor_key` (or
    None), ``put`` stores one. An entry is a JSON object with at least ``floor`` (a fraction),
    ``aa_ratios``, ``rounds``, ``measured_at`` (Unix seconds) and ``fingerprint``."""

    def get(self, key: str) -> dict | None: ...

    def put(self, key: str, entry: dict) -> None: ...


class FileFloorStore:
    """Floors as one JSON object in a file (default ``KERNELS_CACHE_DIR/noise-floor.json``),
    rewritten atomically; a missing or unreadable file holds no floor."""

    _lock = threading.Lock()

    def __init__(self, path: str | os.PathLike | None = None) -> None:
        self.path = Path(path) if path is not None else config.cache_dir() / "noise-floor.json"

    def _read(self) -> dict:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, key: str) -> dict | None:
        entry = self._read().get(key)
        if not isinstance(entry, dict):
            return None
        floor = entry.get("floor")
        if isinstance(floor, bool) or not isinstance(floor, (int, float)) or not math.isfinite(floor) or floor < 0:
            return None
        return entry

    def put(self, key: str, entry: dict) -> None:
        """Store ``entry`` under ``key``.

        Raises:
            OSError: the file cannot be written.
        """
        self.path.parent.mkdir(parents=True, exist_ok=True)
        # One writer at a time, threads and processes alike: the file is read, updated, replaced.
        with self._lock, open(self.path.with_name(self.path.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            data = self._read()
            data[key] = {**entry, "measured_at": entry.get("measured_at", time.time())}
            fd, tmp = tempfile.mkstemp(prefix=".noise-floor-", dir=self.path.parent)
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump(data, f, indent=1, sort_keys=True)
                os.replace(tmp, self.path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
