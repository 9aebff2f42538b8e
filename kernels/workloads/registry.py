"""The registry of workloads: one folder per workload, with the serving shapes recorded in
FlashInfer Trace added as shape sets ``flashinfer-<definition>``
(:func:`kernels.interchange.flashinfer_shapes.with_imported_shape_sets`), and the shape sets registered in
this process (:func:`add_shape_set`).

A workload is a subpackage ``kernels/workloads/<name>/`` found by iterating this package's
subpackages (names starting with ``_`` are skipped). Its ``__init__.py`` defines ``WORKLOAD``
(the :class:`~kernels.workloads.base.Workload`: math, reference, shape sets, default design
spaces, CUDA launch plan, NumPy baseline, FlashInfer definitions); the folder holds its
source templates ``template.c`` (CPU) and ``template.cu`` (CUDA), read by
:func:`template_path`. Discovery runs at import, before a sandbox child's lockdown.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Mapping
from pathlib import Path

from kernels.interchange.flashinfer_shapes import with_imported_shape_sets
from kernels.workloads.base import Workload, shape_label

__all__ = ["FOLDERS", "WORKLOADS", "add_shape_set", "get_workload", "template_path"]

_PACKAGE_DIR = Path(__file__).resolve().parent
_PACKAGE = __name__.rpartition(".")[0]
#: Template file name per backend, in each workload's folder.
TEMPLATE_FILES = {"cpu": "template.c", "cuda": "template.cu"}


def _discover() -> tuple[dict[str, Workload], dict[str, Path]]:
    """``({name: Workload}, {name: folder})`` of every subpackage of :mod:`kernels.workloads`.

    Raises:
        TypeError: a subpackage without a ``WORKLOAD``, or two folders of one name.
    """
    workloads: dict[str, Workload] = {}
    found: dict[str, Path] = {}
    for info in sorted(pkgutil.iter_modules([str(_PACKAGE_DIR)]), key=lambda i: i.name):
        if not info.ispkg or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{_PACKAGE}.{info.name}")
        wl = getattr(module, "WORKLOAD", None)
        if not isinstance(wl, Workload):
            raise TypeError(f"kernels/workloads/{info.name}/__init__.py defines no WORKLOAD (a Workload)")
        if wl.name in found:
            raise TypeError(f"workload '{wl.name}' is defined by two folders: {found[wl.name].name}, {info.name}")
        found[wl.name] = _PACKAGE_DIR / info.name
        workloads[wl.name] = wl
    return workloads, found


_BUILT_IN, _FOLDERS = _discover()
#: Workload name -> the folder holding its module and templates.
FOLDERS: Mapping[str, Path] = _FOLDERS
# Plus the serving shapes recorded in FlashInfer Trace, as shape sets flashinfer-<definition>.
WORKLOADS: Mapping[str, Workload] = with_imported_shape_sets(_BUILT_IN)


def template_path(workload: str, backend: str = "cpu") -> Path | None:
    """The source template of ``workload`` on ``backend`` (``template.c``, ``template.cu``
    in its folder), or None where it has none (unknown workload or backend, no such file)."""
    folder = FOLDERS.get(workload)
    name = TEMPLATE_FILES.get(backend)
    if folder is None or name is None:
        return None
    path = folder / name
    return path if path.is_file() else None


def add_shape_set(workload: str, name: str, shapes, *, validation_shapes=None, attrs=None) -> Workload:
    """Register shape set ``name`` of ``workload`` in this process (an explicit list of shapes,
    e.g. the shapes an inference engine's operators run at: ``engine-llama-layer-small``).

    The evaluator reads shapes in the parent and hands them to the sandboxed child, so a set
    registered here is evaluated like a built-in one. Registering the same set again replaces it.

    Args:
        shapes: the timed shapes (axis -> int); at least one.
        validation_shapes: odd shapes validated only (default: those of the workload's
            ``test-small`` set, else none).
        attrs: attributes in force for the set (e.g. ``{"eps": 1e-5}``); keys must be the
            workload's attributes.

    Returns:
        The updated workload (also what :func:`get_workload` returns from now on).

    Raises:
        KeyError: unknown workload.
        ValueError: no shapes, a shape whose axes are not the workload's, or an unknown
            attribute.
    """
    wl = get_workload(workload)
    shapes = tuple({str(k): int(v) for k, v in dict(s).items()} for s in shapes)
    if not shapes:
        raise ValueError(f"shape set '{name}' of '{workload}' needs at least one shape")
    axes = {a.name for a in wl.args if a.kind == "int"}
    for s in shapes:
        if set(s) != axes:
            raise ValueError(f"shape {shape_label(s)} of '{workload}' must give exactly the axes {', '.join(sorted(axes))}")
    attrs = {str(k): float(v) for k, v in (attrs or {}).items()}
    unknown = set(attrs) - set(wl.attrs)
    if unknown:
        raise ValueError(f"'{workload}' has no attribute {', '.join(sorted(unknown))} (known: {', '.join(wl.attrs) or 'none'})")
    odd = tuple(validation_shapes) if validation_shapes is not None else tuple(wl.validation_shapes.get("test-small", ()))
    new = dataclasses.replace(
        wl, shape_sets={**wl.shape_sets, name: shapes}, validation_shapes={**wl.validation_shapes, name: odd},
        shape_set_attrs={**wl.shape_set_attrs, name: attrs} if attrs else
        {k: v for k, v in wl.shape_set_attrs.items() if k != name})
    WORKLOADS[workload] = new  # type: ignore[index]  (the registry is a dict)
    return new


def get_workload(name: str) -> Workload:
    """The registered workload ``name``.

    Raises:
        KeyError: unknown name; the message lists the known workloads.
    """
    try:
        return WORKLOADS[name]
    except KeyError:
        raise KeyError(f"unknown workload '{name}' (known: {', '.join(sorted(WORKLOADS))})") from None
