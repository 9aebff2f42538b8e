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
