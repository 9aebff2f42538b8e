"""The validation set that grows: inputs that once exposed a wrong candidate, per workload.

docs/design.md: "an input that once exposed a wrong candidate is kept for the workload and run
against every later candidate and every production kernel". An input is fully determined by
its shape and seed (workloads generate inputs deterministically), so a stored case is one
JSON line::

    {"shape": {"rows": 7, "hidden": 259}, "seed": 123, "reason": "...", "added": "2026-...Z",
     "candidate": "<hash or label>"}

in ``<data dir>/validation/<workload>.jsonl`` (data dir: ``KERNELS_DATA_DIR``, default
``~/.local/share/int21-kernels``). Appends hold an exclusive ``flock`` on the file while
they check for a duplicate and write the line with one ``write(2)`` on an ``O_APPEND``
descriptor, so concurrent workers neither lose nor duplicate a case, and a reader never sees
half a line (a torn last line, e.g. after a power loss, is skipped, and the next append
starts a new line). The evaluator re-runs
the latest :func:`kernels.config.validation_store_limit` cases (default 16) of the workload on
every evaluation.
"""

from __future__ import annotations

import datetime
import fcntl
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kernels import config

__all__ = ["StoredCase", "ValidationStore"]


@dataclass(frozen=True)
class StoredCase:
    """One stored input: ``shape`` (axis -> size), ``seed``, and why it was kept."""

    shape: dict[str, int]
    seed: int
    reason: str = ""
    added: str = ""
    candidate: str = ""

    @property
    def key(self) -> tuple:
        """Identity for deduplication: (sorted shape items, seed)."""
        return (tuple(sorted(self.shape.items())), self.seed)


def _valid_name(workload: str) -> str:
    if not workload or not all(c.isalnum() or c in "_-." for c in workload) or workload.startswith("."):
        raise ValueError(f"workload name {workload!r} cannot name a file: use letters, digits, '_', '-', '.'")
    return workload


class ValidationStore:
    """Per-workload JSON-lines files of failure-exposing inputs under ``root``.

    Args:
        root: directory of the store; default ``config.data_dir() / "validation"``.
    """

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else config.data_dir() / "validation"

    def path(self, workload: str) -> Path:
        """The JSON-lines file of ``workload``.

        Raises:
            ValueError: ``workload`` cannot be a file name.
        """
        return self.root / f"{_valid_name(workload)}.jsonl"

    def _read(self, path: Path) -> list[StoredCase]:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        out: list[StoredCase] = []
        seen: set[tuple] = set()
        for line in text.splitlines():
            try:
                d = json.loads(line)
                case = StoredCase(
                    shape={str(k): int(v) for k, v in d["shape"].items()},
                    seed=int(d["seed"]),
                    reason=str(d.get("reason", "")),
                    added=str(d.get("added", "")),
                    candidate=str(d.get("candidate", "")),
                )
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # a torn or foreign line: skip it, keep the rest
            if case.key not in seen:
                seen.add(case.key)
                out.append(case)
        return out

    def add(self, workload: str, shape: Mapping[str, int], seed: int, *, reason: str = "", candidate: str = "") -> bool:
        """Store one case unless the same (shape, seed) is already stored.

        Args:
            workload: workload name.
            shape: axis name -> size.
            seed: the input seed.
            reason: why the case failed (kept for people; truncated to 500 characters).
            candidate: what failed on it (a candidate hash or label).

        Returns:
            True if the case was added, False if it was already there.

        Raises:
            ValueError: bad workload name, shape or seed.
            OSError: the store cannot be written.
        """
        case = StoredCase({str(k): int(v) for k, v in shape.items()}, int(seed))
        if not case.shape or any(v < 0 for v in case.shape.values()):
            raise ValueError(f"bad shape {dict(shape)!r}")
        path = self.path(workload)
        path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({
            "shape": case.shape,
            "seed": case.seed,
            "reason": reason[:500],
            "added": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            "candidate": candidate,
        }) + "\n"  # shape keeps the workload's axis order
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if any(c.key == case.key for c in self._read(path)):
                return False
            data = line.encode()
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                data = b"\n" + data  # end a torn last line first, so this case stays readable
            if os.write(fd, data) != len(data):
                raise OSError(f"short write to {path}")
            os.fsync(fd)
            return True
        finally:
            os.close(fd)  # releases the lock

    def add_many(self, workload: str, cases: list[Mapping[str, Any]], *, candidate: str = "") -> int:
        """:meth:`add` for each ``{"shape", "seed", "reason"}``; returns how many were new."""
        return sum(
            self.add(workload, c["shape"], c["seed"], reason=str(c.get("reason", "")), candidate=candidate)
            for c in cases
        )

    def cases(self, workload: str, limit: int | None = None) -> list[StoredCase]:
        """Stored cases of ``workload``, oldest first, deduplicated; the latest ``limit`` when
        given (``limit=0`` gives none).

        Raises:
            ValueError: bad workload name.
        """
        stored = self._read(self.path(workload))
        if limit is not None:
            stored = stored[-limit:] if limit > 0 else []
        return stored
