"""Content hashes identifying candidates and arrays, and the sandbox child's result MAC."""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from typing import Any


def candidate_hash(
    source: str,
    params: Mapping[str, Any],
    backend_fingerprint: Mapping[str, Any],
    launch_plan: Mapping[str, Any] | None = None,
) -> str:
    """sha256 hex of a candidate: source, parameter values, the backend fingerprint and, for
    CUDA candidates with their own plan, the launch plan (JSON dict).

    Canonical JSON (sorted keys) makes it independent of dict order, so the same candidate
    proposed twice is recognised before evaluation; evidence is reused only when the
    fingerprint (compiler, flags, CPU) matches too. Without ``launch_plan`` the hash is the
    same as before plans existed (a template's plan follows from its parameters).
    """
    doc: dict[str, Any] = {"source": source, "params": dict(params), "fingerprint": dict(backend_fingerprint)}
    if launch_plan is not None:
        doc["launch_plan"] = dict(launch_plan)
    blob = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def array_digest(arr: Any) -> str:
    """sha256 hex of an array's contents as C-contiguous float32 bytes (the unchanged-input
    check: the parent digests the inputs it gives, the sandbox child its buffers after the
    calls). About 1.7 GB/s on one Zen 3 core (SHA extensions)."""
    import numpy as np

    data = np.ascontiguousarray(arr, dtype=np.float32)
    return hashlib.sha256(memoryview(data).cast("B")).hexdigest()


def result_mac(key: bytes, body: bytes) -> bytes:
    """HMAC-SHA256 (hex, ASCII bytes) of a sandbox child's result document under its run's
    key: the child signs with it, :func:`kernels.sandbox.spawn.run_child` checks it."""
    return hmac.new(key, body, hashlib.sha256).hexdigest().encode()
