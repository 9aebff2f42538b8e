"""What the sandbox child's runners share (CPU: :mod:`kernels.sandbox.child`, CUDA:
:mod:`kernels.sandbox.cuda_child`): the request's workload and the files saved for the parent."""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from kernels.hashing import array_digest
from kernels.workloads import get_workload

#: sha256 (:func:`kernels.hashing.array_digest`) of every array this process saved, by file
#: name, reported with the result: the parent judges a file only if it still holds these bytes
#: (the candidate can rewrite files in this directory).
SAVED: dict[str, str] = {}


def save_new(name: str, array: np.ndarray) -> None:
    """``np.save`` to a file this call creates, and its digest into :data:`SAVED`: a name the
    candidate took first (a planted FIFO would block the open, a link would redirect it)
    raises ``FileExistsError`` naming it.

    Raises:
        FileExistsError: ``name`` exists already.
    """
    SAVED[name] = array_digest(array)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise FileExistsError(f"{name} exists already: something other than the evaluator created it") from None
    with os.fdopen(fd, "wb") as f:
        np.save(f, array)


def request_workload(req: dict):
    """The request's workload as the parent has it: its shape set's, with the parent's
    attributes (e.g. eps), whatever shape sets this process imported (every backend's child)."""
    workload = get_workload(req["workload"])
    if hasattr(workload, "for_shape_set"):
        workload = workload.for_shape_set(req.get("shape_set"))
    if isinstance(req.get("attrs"), dict):
        workload = dataclasses.replace(workload, attrs={k: float(v) for k, v in req["attrs"].items()})
    return workload
