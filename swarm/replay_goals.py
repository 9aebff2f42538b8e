"""Goals on ``replay:<dataset>`` targets, built from Kernel Tuner cache files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kernels.backends import replay
from kernels.tuning_cache import TuningCacheError, load_cache
from swarm.models import Goal


def import_cache(path: str | Path, *, name: str | None = None, user=None) -> tuple[Goal, dict[str, Any]]:
    """Create a goal on ``replay:<dataset>`` from a Kernel Tuner cache file.

    The design space is recovered from the file's ``tune_params``; configurations the file
    does not record evaluate as ``invalid`` (Kernel Tuner's restrictions excluded them). The
    objective is the recorded time (``latency_ms``), plus energy (``energy_j``) when the file
    records NVML energy: then the frontier is time against energy.

    Returns:
        The goal and a summary: dataset, device, kernel, entries, valid/failed counts,
        Cartesian size and the recorded optimum (ms).

    Raises:
        FileNotFoundError: no such file.
        kernels.tuning_cache.TuningCacheError: not a readable cache file, or one without a
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
    objectives = [{"metric": "latency_ms", "direction": "minimize"}]
    if "nvml_energy" in cache.objectives_available:
        objectives.append({"metric": "energy_j", "direction": "minimize"})
    goal = Goal.objects.create(
        name=f"replay: {cache.kernel_name or 'kernel'} on {cache.device_name} ({dataset})",
        workload=cache.kernel_name or dataset,
        target=f"{replay.PREFIX}{dataset}",
        shape_set="recorded",
        objectives=objectives,
        constraints=[],
        # Only recorded configurations are admissible, as in Kernel Tuner's search space
        # built from a cache; failed recordings stay in (they cost an evaluation).
        space={**cache.space().to_dict(), "domain": f"{replay.PREFIX}{dataset}"},
        source="",
        dataset_path=str(path),
        created_by=user,
    )
    return goal, {
        "goal": goal.pk,
        "target": goal.target,
        "dataset": dataset,
        "device": cache.device_name,
        "kernel": cache.kernel_name,
        "entries": cache.size,
        "valid": cache.valid_count,
        "failed": cache.failed_count,
        "space_size": cache.cartesian_size(),
        "objectives": [o["metric"] for o in objectives],
        "optimum_ms": optimum,
        "optimum_params": optimum_params,
    }


def ensure_dataset(goal: Goal) -> None:
    """Make the goal's data set known in this process (workers start without registrations)."""
    if goal.dataset_path:
        dataset = goal.target[len(replay.PREFIX):]
        try:
            replay.dataset_path(dataset)
        except KeyError:
            replay.register_dataset(goal.dataset_path, dataset)
