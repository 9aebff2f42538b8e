"""Shared fixtures for the kernels library tests (no Django needed)."""

from __future__ import annotations

import pytest

from kernels import BenchSettings


@pytest.fixture(scope="session", autouse=True)
def _private_compile_cache(tmp_path_factory):
    """Compile into a per-session cache so tests never read or pollute the user's cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("KERNELS_CACHE_DIR", str(tmp_path_factory.mktemp("kernel-cache")))
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def _private_data_dir(tmp_path_factory, monkeypatch):
    """A fresh validation store per test, so stored failure cases never leak between tests
    (or into the user's ``~/.local/share``)."""
    monkeypatch.setenv("KERNELS_DATA_DIR", str(tmp_path_factory.mktemp("kernel-data")))


@pytest.fixture
def quick_bench() -> BenchSettings:
    """Tiny timing protocol so the suite stays fast; enough reps to exercise the loop."""
    return BenchSettings(warmup_ms=1.0, rep_ms=2.0, min_reps=3, max_reps=5, flush_bytes=1 << 20)
