"""Argument types and checks of ``manage.py factory run``: what can be refused is refused
before a goal is created or a run started."""

from __future__ import annotations

import argparse
import math
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from kernels.argtypes import bounded_int
from kernels.backends import capabilities, get_backend
from swarm.agents import make_agent
from swarm.models import Goal, target_backend


def int_in(lo: int, hi: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number in ``[lo, hi]``, else a usage error saying the range."""
    return bounded_int(lo, hi, noun="a whole number", out_of_range="must be {lo} to {hi}, not {value}")


def seconds(text: str) -> float:
    """An argparse ``type``: a finite number of seconds, at least 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds, at least 0, not {text}")
    return value


def agent_mix(text: str | None) -> list[dict[str, Any]] | None:
    """The agent mix of ``--agents`` (None: the default mix), checked as ``start_run`` checks it.

    Raises:
        CommandError: a value that names no agent, an unknown kind, or a kind named twice.
    """
    if text is None:
        return None
    kinds = [k for k in (k.strip() for k in text.split(",")) if k]
    if not kinds:
        raise CommandError(f"--agents {text!r} names no agent: give comma-separated agent kinds, e.g. "
                           "forest,evolutionary (or leave --agents out for the default mix)")
    for n, kind in enumerate(kinds):
        if kind in kinds[:n]:
            raise CommandError(f"--agents names {kind!r} twice (each agent kind once)")
        try:
            make_agent(kind, 0)
        except KeyError as exc:
            raise CommandError(str(exc).strip("'\"")) from None
        except (TypeError, ValueError) as exc:
            raise CommandError(f"agent {kind!r} cannot start with its default settings: {exc}") from None
    return [{"name": k, "kind": k, "settings": {}} for k in kinds]


def check_runnable(target: str, goal: Goal | None = None) -> None:
    """Refuse a target this machine cannot evaluate (this process evaluates every candidate):
    another machine's host target, a CUDA target without CuPy, a usable GPU or one of that
    architecture, a replay goal whose recorded file is gone or unreadable.

    Raises:
        CommandError: names the target (or goal) and what is missing.
    """
    try:
        backend = target_backend(target)
        caps = capabilities(backend)
        be = get_backend(backend)
    except (KeyError, ValueError, ImportError) as exc:
        raise CommandError(str(exc).strip("'\"")) from exc
    cannot = f"this machine cannot run target {target!r}"
    if caps.host_target and not be.supports(target):
        raise CommandError(f"{cannot} (it is cpu-{platform.machine()})")
    if caps.language == "cuda":
        _check_cuda(target, cannot)
    if caps.recorded and goal is not None:
        _check_recorded(goal)


def _check_cuda(target: str, cannot: str) -> None:
    """CuPy imports, a CUDA device answers, and it is of the target's architecture."""
    from kernels.backends import cuda

    try:
        want = cuda.target_arch(target).rstrip("a")
    except ValueError as exc:
        raise CommandError(str(exc)) from None
    try:
        cp = cuda.import_cupy()
    except ImportError as exc:
        raise CommandError(f"{cannot}: CuPy is not importable ({exc})") from None
    try:
        info = cuda.device_info(cp)
    except Exception as exc:  # noqa: BLE001 - cupy's CUDA errors: no driver, no device, a busy one
        raise CommandError(f"{cannot}: no usable CUDA device ({type(exc).__name__}: {exc})") from None
    have = cuda.arch_of_device(info)
    if have != want:
        raise CommandError(f"{cannot}: the GPU is {info.get('gpu') or 'unknown'} ({have}), not {want}; "
                           f"run --target cuda-{have.replace('_', '')} on this machine")


def _check_recorded(goal: Goal) -> None:
    """The recorded data of a replay goal is there and readable."""
    where = goal.dataset_path
    if where and not Path(where).is_file():
        raise CommandError(f"goal {goal.pk}'s recorded data {where} is missing (no such file: deleted or moved); "
                           "put it back, or import the file again with `manage.py factory import-cache FILE`")
    try:
        goal.recorded_file()
    except (OSError, KeyError, ValueError) as exc:  # TuningCacheError is a ValueError
        text = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
        raise CommandError(f"goal {goal.pk}'s recorded data cannot be read: {text}") from None
