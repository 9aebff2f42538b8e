"""Goals on ``replay:<dataset>`` targets, built from Kernel Tuner cache files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kernels.backends import replay
from kernels.interchange.tuning_cache import TuningCache, TuningCacheError, load_cache
from swarm.models import Goal


def import_cache(path: str | Path, *, name: str | None = None, user=None) -> tuple[Goal, dict[str, Any]]:
    """Create a goal on ``replay:<dataset>`` from a Kernel Tuner cache file.

    The design space is recovered from the file's ``tune_params``; configurations the file
    does not record evaluate as ``invalid`` (Kernel Tuner's restrictions excluded them). The
    objective is the recorded time (``latency_ms``), plus energy (``energy_j``) when the file
    records NVML energy: then the frontier is time against energy.

    Importing a file that already has a goal on the same data set and recorded space reuses
    that goal (the file is read again, so the summary is current); the summary then says
    ``reused: true``. The same file under another data set name, or changed so that its
    space differs, gets its own goal, with a warning naming the other one.

    Returns:
        The goal and a summary: dataset, device, kernel, entries, valid/failed counts,
        Cartesian size, the recorded optimum (ms), ``reused`` and ``warnings`` (the cache's
        :attr:`~kernels.interchange.tuning_cache.TuningCache.warnings`: repairs such as a dropped
        half-written entry with its key and line, missing fields of older layouts, legacy
        failure markers).

    Raises:
        FileNotFoundError: no such file.
        kernels.interchange.tuning_cache.TuningCacheError: not a readable cache file, or one without a
            valid recorded time.
        ValueError: a data set of that name is registered for another file.
    """
    path = Path(path).expanduser().resolve()
    cache = load_cache(path)
    try:
        optimum_params, optimum = cache.optimum("time")
    except KeyError as exc:  # nothing to replay: no goal, no registered data set
        raise TuningCacheError(f"{path}: {exc.args[0] if exc.args else exc}") from None
    dataset = replay.register_dataset(path, name)
    target = f"{replay.PREFIX}{dataset}"
    warnings = list(cache.warnings)
    objectives = [{"metric": "latency_ms", "direction": "minimize"}]
    if "nvml_energy" in cache.objectives_available:
        objectives.append({"metric": "energy_j", "direction": "minimize"})
    # As stored (JSON), so that it compares equal to a stored goal's space.
    space = json.loads(json.dumps({**cache.space().to_dict(), "domain": target}))
    same_file = Goal.objects.filter(dataset_path=str(path)).order_by("pk")
    for other in same_file:
        if other.target == target and other.space == space:
            return other, _summary(other, cache, dataset, optimum, optimum_params, reused=True, warnings=warnings)
    for other in same_file:
        why = ("its recorded space differs: the file changed since" if other.target == target
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
        "optimum_ms": optimum,
        "optimum_params": optimum_params,
        "warnings": warnings,
    }
