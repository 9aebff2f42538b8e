"""Goals on ``replay:<dataset>`` targets, built from Kernel Tuner cache files."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from kernels.backends import replay
from kernels.interchange.tuning_cache import TuningCache, TuningCacheError, load_cache
from swarm.models import Goal

#: Longest data set name: ``replay:<name>`` must fit the goal's ``target`` column (and at most 100).
MAX_NAME = min(100, Goal._meta.get_field("target").max_length - len(replay.PREFIX))
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


def import_cache(path: str | Path, *, name: str | None = None, user=None) -> tuple[Goal, dict[str, Any]]:
    """Create a goal on ``replay:<dataset>`` from a Kernel Tuner cache file.

    The design space is recovered from the file's ``tune_params``; configurations the file
    does not record evaluate as ``invalid`` (Kernel Tuner's restrictions excluded them). The
    objective is the recorded time (``latency_ms``), plus energy (``energy_j``) when the file
    records NVML energy: then the frontier is time against energy. A file is searched on its
    header's objective where its entries record it, in that objective's direction (Kernel
    Tuner's hyperparameter tuner records a ``score``, maximised, and no time; see
    :attr:`~kernels.interchange.tuning_cache.TuningCache.searched`).

    Importing a file that already has a goal on the same data set, recorded space and
    objectives reuses that goal (the file is read again, so the summary is current); the
    summary then says ``reused: true``. The same file under another data set name, or changed
    so that its space or objective differs, gets its own goal, with a warning naming the other.

    A parameter whose recorded values are not all numbers (strings such as ``"best1bin"``,
    booleans, null) is searched by its values' positions 0 .. n - 1 in the file's order
    (:attr:`~kernels.interchange.tuning_cache.TuningCache.labels`); the summary's ``labels``
    gives them and a warning says so.

    Returns:
        The goal and a summary: dataset, device, kernel, entries, valid/failed counts,
        Cartesian size, ``objective`` (``metric``, ``direction``, the recorded ``field``), the
        recorded ``optimum`` in that metric (``optimum_ms`` when it is the time, else null) and
        its parameters (as a point of the goal's space), ``labels`` (parameter -> recorded
        values, for the parameters searched by position), ``reused`` and ``warnings`` (the cache's
        :attr:`~kernels.interchange.tuning_cache.TuningCache.warnings`: repairs such as a dropped
        half-written entry with its key and line, missing fields of older layouts, legacy
        failure markers).

    Raises:
        FileNotFoundError: no such file.
        kernels.interchange.tuning_cache.TuningCacheError: not a readable cache file, or one without a
            valid recorded time.
        ValueError: a data set name that is not a simple identifier (see :func:`check_name`), or
            one that a goal, a replay folder or this process uses for another file.
    """
    path = Path(path).expanduser().resolve()
    cache = load_cache(path)
    try:
        optimum_params, optimum = cache.optimum()
    except KeyError as exc:  # nothing to replay: no goal, no registered data set
        raise TuningCacheError(f"{path}: {exc.args[0] if exc.args else exc}") from None
    dataset = check_name(name, path, default=cache.name)
    target = f"{replay.PREFIX}{dataset}"
    # As stored (JSON), so that it compares equal to a stored goal's space; before anything is
    # registered: a space that cannot be built (SpaceError, a ValueError) leaves nothing behind.
    space = json.loads(json.dumps({**cache.space().to_dict(), "domain": target}))
    replay.register_dataset(path, dataset)
    warnings = list(cache.warnings) + [
        f"parameter '{name}' has values that are not numbers: the goal's space numbers them in the file's order "
        f"({', '.join(f'{i} = {json.dumps(v)}' for i, v in enumerate(values))})"
        for name, values in cache.labels.items()]
    optimum_params = cache.space_point(optimum_params)
    objectives = [{"metric": cache.metric, "direction": "maximize" if cache.maximize else "minimize"}]
    if cache.searched == "time" and "nvml_energy" in cache.objectives_available:
        objectives.append({"metric": "energy_j", "direction": "minimize"})
    same_file = Goal.objects.filter(dataset_path=str(path)).order_by("pk")
    for other in same_file:
        if other.target == target and other.space == space and other.objectives == objectives:
            return other, _summary(other, cache, dataset, optimum, optimum_params, reused=True, warnings=warnings)
    for other in same_file:
        why = ("its recorded space or objective differs: the file changed since" if other.target == target
               else "a second goal on the same data")
        warnings.append(f"this file is also goal {other.pk} ({other.target}); {why}")
    goal = Goal.objects.create(
        name=f"replay: {cache.kernel_name or 'kernel'} on {cache.device_name} ({dataset})",
        workload=cache.kernel_name or dataset,
        target=target,
        shape_set="recorded",
        objectives=objectives,
        constraints=[],
        # Only recorded configurations are admissible, as in Kernel Tuner's search space
        # built from a cache; failed recordings stay in (they cost an evaluation).
        space=space,
        source="",
        dataset_path=str(path),
        created_by=user,
    )
    return goal, _summary(goal, cache, dataset, optimum, optimum_params, reused=False, warnings=warnings)


def check_name(name: str | None, path: Path, *, default: str) -> str:
    """The data set name to import ``path`` (resolved) as: ``name``, or ``default`` (the file
    name, made usable by :func:`_usable`) when ``name`` is None.

    A name is letters, digits, ``_``, ``.`` and ``-`` (not first), without ``..``, at most
    :data:`MAX_NAME` characters: it is part of the target ``replay:<name>`` and of URLs. Every
    process finds a data set by name (:meth:`swarm.models.Goal.ensure_dataset`), so a name is
    refused when a goal in the database, a file of the replay folders, or this process's
    registry already has it for another file.

    Raises:
        ValueError: the name is unusable or taken; the message says why (and by what).
    """
    if name is None:
        name = _usable(default)
    if not (_NAME.fullmatch(name) and ".." not in name and len(name) <= MAX_NAME):
        raise ValueError(f"data set name {name!r} is not usable: a data set name is letters, digits, '_', '.' and "
                         f"'-' (not first), without '..', at most {MAX_NAME} characters")
    other = (Goal.objects.filter(target=f"{replay.PREFIX}{name}").exclude(dataset_path=str(path))
             .order_by("pk").first())
    if other is not None:
        raise ValueError(f"data set name '{name}' is already goal {other.pk}'s, for "
                         f"{other.dataset_path or 'a file of the replay folders'}: pass another --name")
    try:
        known = replay.dataset_path(name)
    except KeyError:
        return name
    if known != path:
        raise ValueError(f"data set name '{name}' is already {known}'s (a replay folder's file or one "
                         "imported in this process): pass another --name")
    return name


def _usable(file_name: str) -> str:
    """A file name made a data set name: other characters become ``-``, ``..`` becomes ``.``,
    and a name longer than :data:`MAX_NAME` keeps its start and gets 8 hex digits of its
    SHA-256 (so two long names that share a start stay apart)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "-", file_name)
    while ".." in name:
        name = name.replace("..", ".")
    name = name.lstrip(".-") or "dataset"
    if len(name) > MAX_NAME:
        name = name[: MAX_NAME - 9] + "-" + hashlib.sha256(file_name.encode()).hexdigest()[:8]
    return name


def _summary(goal: Goal, cache: TuningCache, dataset: str, optimum: float, optimum_params: dict[str, Any], *,
             reused: bool, warnings: list[str]) -> dict[str, Any]:
    """The ``factory import-cache --json`` object of ``goal`` (see :func:`import_cache`)."""
    return {
        "goal": goal.pk,
        "reused": reused,
        "target": goal.target,
        "dataset": dataset,
        "device": cache.device_name,
        "kernel": cache.kernel_name,
        "entries": cache.size,
        "valid": cache.valid_count,
        "failed": cache.failed_count,
        "failures": cache.failures(),
        "space_size": cache.cartesian_size(),
        "objectives": [o["metric"] for o in goal.objectives],
        "objective": {"metric": cache.metric, "direction": "maximize" if cache.maximize else "minimize",
                      "field": cache.searched},
        "optimum": optimum,
        "optimum_ms": optimum if cache.searched == "time" else None,
        "optimum_params": optimum_params,
        "labels": {name: list(values) for name, values in cache.labels.items()},
        "warnings": warnings,
    }
