"""Source templates of candidate kernels and their default design spaces."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernels.space import DesignSpace, Parameter

_DIR = Path(__file__).resolve().parent
_SUFFIX = {"cpu": ".c", "cuda": ".cu"}

_DEFAULT_SPACES = {
    "rmsnorm": DesignSpace(
        parameters=(
            Parameter("ROWS_PER_CHUNK", (1, 2, 4, 8, 16, 32)),
            Parameter("UNROLL", (1, 2, 4, 8)),
            Parameter("VEC", (1, 4, 8, 16)),
            Parameter("ACC_DOUBLE", (0, 1)),
        ),
        restrictions=("UNROLL * VEC <= 64",),
    ),
}


def load_template(workload: str, backend: str = "cpu") -> str:
    """Source text of the template for ``workload`` on ``backend``.

    Raises:
        KeyError: no template for that pair (the message lists what exists).
    """
    path = _DIR / f"{workload}{_SUFFIX.get(backend, '.' + backend)}"
    if not path.is_file():
        known = sorted(p.name for p in _DIR.iterdir() if p.suffix in set(_SUFFIX.values()))
        raise KeyError(f"no {backend} template for workload '{workload}' (known: {', '.join(known)})")
    return path.read_text()


def default_space(workload: str, backend: str = "cpu") -> DesignSpace:
    """The default design space of ``workload``'s template on ``backend`` (``"cpu"`` or
    ``"cuda"``; the CUDA spaces live in :mod:`kernels.templates.cuda`).

    Raises:
        KeyError: unknown workload or backend.
    """
    if backend == "cuda":
        from kernels.templates.cuda import cuda_space  # noqa: PLC0415

        return cuda_space(workload)
    if backend != "cpu":
        raise KeyError(f"no default spaces for backend '{backend}' (known: cpu, cuda)")
    try:
        return _DEFAULT_SPACES[workload]
    except KeyError:
        raise KeyError(f"no default space for '{workload}' (known: {', '.join(sorted(_DEFAULT_SPACES))})") from None


def default_launch_plan(workload: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The CUDA launch plan (JSON dict) of ``workload``'s ``.cu`` template at ``params``; see
    :func:`kernels.templates.cuda.default_launch_plan`.

    Raises:
        KeyError: no CUDA template for ``workload``.
    """
    from kernels.templates.cuda import default_launch_plan as plan  # noqa: PLC0415

    return plan(workload, params)
