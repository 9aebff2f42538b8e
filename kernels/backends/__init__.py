"""Backends drive a target: compile a candidate and describe the environment.

Registry entries are ``"module:Class"`` strings imported on first use, so importing
:mod:`kernels` never pulls in optional dependencies (cupy).
"""

from __future__ import annotations

import importlib
from typing import Any

BACKENDS: dict[str, str] = {
    "cpu": "kernels.backends.cpu:CpuBackend",
    "replay": "kernels.backends.replay:ReplayBackend",
    "cuda": "kernels.backends.cuda:CudaBackend",
}


def get_backend(name: str) -> Any:
    """An instance of the backend registered as ``name``.

    Raises:
        KeyError: unknown backend (lists the known ones).
        ImportError: the backend's module or one of its dependencies is missing.
    """
    try:
        spec = BACKENDS[name]
    except KeyError:
        raise KeyError(f"unknown backend '{name}' (known: {', '.join(sorted(BACKENDS))})") from None
    module_name, _, cls_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"backend '{name}' needs {exc.name or module_name}: {exc}") from exc
    return getattr(module, cls_name)()
