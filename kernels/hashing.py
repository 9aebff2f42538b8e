"""Content hashes identifying candidates."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def candidate_hash(source: str, params: Mapping[str, Any], backend_fingerprint: Mapping[str, Any]) -> str:
    """sha256 hex of a candidate: source, parameter values and the backend fingerprint.

    Canonical JSON (sorted keys) makes it independent of dict order, so the same candidate
    proposed twice is recognised before evaluation; evidence is reused only when the
    fingerprint (compiler, flags, CPU) matches too.
    """
    blob = json.dumps(
        {"source": source, "params": dict(params), "fingerprint": dict(backend_fingerprint)},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode()).hexdigest()
