import pytest

from kernels.backends import BACKENDS, get_backend
from kernels.backends.cpu import CompileError, CpuBackend

SRC = "float twice(float v) { return 2.0f * v; }\n"


def test_the_registry_builds_the_cpu_backend_lazily():
    assert BACKENDS["cpu"] == "kernels.backends.cpu:CpuBackend"
    assert isinstance(get_backend("cpu"), CpuBackend)
    with pytest.raises(KeyError, match="known: cpu"):
        get_backend("tpu")


def test_fingerprint_describes_compiler_flags_and_cpu():
    fp = CpuBackend().fingerprint()
    assert fp["compiler_version"] and fp["cpu_model"] and fp["nproc"] >= 1
    assert {"-O3", "-march=native", "-fopenmp", "-shared", "-fPIC"} <= set(fp["flags"])


def test_compile_caches_by_content(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELS_CACHE_DIR", str(tmp_path))
    be = CpuBackend()
    first = be.compile(SRC, "#define K 1\n")
    again = be.compile(SRC, "#define K 1\n")
    other = be.compile(SRC, "#define K 2\n")
    assert not first.cached and again.cached
    assert first.path == again.path and first.path.parent == tmp_path and first.path.is_file()
    assert other.key != first.key
    assert not [p for p in tmp_path.iterdir() if p.suffix != ".so"]  # no leftover temp files


def test_compile_errors_carry_the_compiler_log(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELS_CACHE_DIR", str(tmp_path))
    with pytest.raises(CompileError) as info:
        CpuBackend().compile("int f( { return }", "")
    assert "error" in info.value.log
    assert list(tmp_path.glob("*.so")) == []


def test_a_missing_compiler_is_a_compile_error(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELS_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CC", "/nonexistent/cc")
    with pytest.raises(CompileError, match="cannot run compiler"):
        CpuBackend().compile(SRC, "")


def test_a_source_that_makes_a_huge_library_is_a_compile_error(tmp_path, monkeypatch):
    """Two lines make gcc write a 128 MiB library (and the linker hold it in memory): past the
    compiler's file-size limit it is killed, and nothing reaches the cache."""
    monkeypatch.setenv("KERNELS_CACHE_DIR", str(tmp_path))
    with pytest.raises(CompileError, match="wrote a file past the 64 MiB limit"):
        CpuBackend().compile("static char big[1L << 27] = {1};\nchar *f(void) { return big; }\n", "")
    assert list(tmp_path.glob("*.so")) == []


def test_the_cache_is_pruned_least_recently_used_first(tmp_path, monkeypatch):
    import os
    import time

    from kernels.backends.cpu import prune_cache

    monkeypatch.setenv("KERNELS_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("KERNELS_CACHE_MAX_BYTES", str(3 * 2**20))
    now = time.time()
    for i, name in enumerate(("old", "mid", "new")):
        (tmp_path / f"{name}.so").write_bytes(b"x" * 2**20)
        os.utime(tmp_path / f"{name}.so", (now - 100 + i, now - 100 + i))
    (tmp_path / "other.json").write_bytes(b"y" * 2**20)  # not a library: never pruned
    assert prune_cache(tmp_path, 2 * 2**20) == 2**20
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mid.so", "new.so", "other.json"]
    # A hit touches its library; a large new one triggers pruning right away.
    be = CpuBackend()
    big = be.compile("static char big[3L << 20] = {1};\nchar *f(void) { return big; }\n", "")
    assert big.path.exists() and not (tmp_path / "mid.so").exists() and not (tmp_path / "new.so").exists()
    assert sum(p.stat().st_size for p in tmp_path.glob("*.so")) <= 3 * 2**20 + big.path.stat().st_size
