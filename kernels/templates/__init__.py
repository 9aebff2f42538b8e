"""Source templates of candidate kernels, their default design spaces and CUDA launch plans.

Each lives in its workload's folder (``kernels/workloads/<workload>/``: ``template.c``,
``template.cu``, and the ``spaces`` and ``launch_plan`` of its
:class:`~kernels.workloads.base.Workload`); these functions look them up by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kernels.space import DesignSpace
from kernels.workloads.registry import FOLDERS, TEMPLATE_FILES, WORKLOADS, template_path

__all__ = ["default_launch_plan", "default_space", "load_template"]


def load_template(workload: str, backend: str = "cpu") -> str:
    """Source text of the template for ``workload`` on ``backend`` (``"cpu"``: the folder's
    ``template.c``; ``"cuda"``: its ``template.cu``).

    Raises:
        KeyError: no template for that pair (the message lists what exists).
    """
    path = template_path(workload, backend)
    if path is None:
        known = sorted(f"{w}/{name}" for w, folder in FOLDERS.items() for name in TEMPLATE_FILES.values()
                       if (folder / name).is_file())
        raise KeyError(f"no {backend} template for workload '{workload}' (known: {', '.join(known)})")
    return path.read_text()


def default_space(workload: str, backend: str = "cpu") -> DesignSpace:
    """The default design space of ``workload``'s template on ``backend`` (``"cpu"`` or
    ``"cuda"``).

    Raises:
        KeyError: unknown workload or backend, or no template space there.
    """
    if backend not in TEMPLATE_FILES:
        raise KeyError(f"no default spaces for backend '{backend}' (known: {', '.join(TEMPLATE_FILES)})")
    wl = WORKLOADS.get(workload)
    if wl is None or backend not in wl.spaces:
        known = sorted(w for w, x in WORKLOADS.items() if backend in x.spaces)
        what = "CUDA design space" if backend == "cuda" else "default space"
        raise KeyError(f"no {what} for '{workload}' (known: {', '.join(known)})")
    return wl.spaces[backend]


def default_launch_plan(workload: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The launch plan (JSON dict for :meth:`kernels.evaluation.launch_plan.LaunchPlan.from_dict`) of
    ``workload``'s CUDA template at ``params`` (some plans depend on them, e.g. gemm's
    ``SPLIT_K > 1`` adds a reduction launch and a scratch buffer).

    Raises:
        KeyError: no CUDA template for ``workload``.
    """
    wl = WORKLOADS.get(workload)
    if wl is None or wl.launch_plan is None:
        known = sorted(w for w, x in WORKLOADS.items() if x.launch_plan is not None)
        raise KeyError(f"no CUDA launch plan for '{workload}' (known: {', '.join(known)})")
    return wl.launch_plan(dict(params or {}))
