"""Compilers on untrusted source run limited, in their own process group, with a bounded log."""

from __future__ import annotations

import os
import signal
import sys
import time

import pytest

from kernels.sandbox.toolchain import FILE_BYTES, LOG_KEEP, ToolTimeout, run_tool

ENV = {"PATH": "/usr/bin:/bin"}


def test_a_tool_runs_with_its_output_and_return_code(tmp_path):
    rc, log = run_tool(["sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3"], cwd=str(tmp_path), env=ENV,
                       timeout_s=30)
    assert rc == 3 and "to-stdout" in log and "to-stderr" in log


def test_the_limits_reach_the_tool(tmp_path):
    rc, log = run_tool(["sh", "-c", "ulimit -f; ulimit -d; ulimit -t"], cwd=str(tmp_path), env=ENV, timeout_s=30,
                       memory_bytes=2**32)
    fsize, data, cpu = log.split()
    assert rc == 0 and int(fsize) * 512 == FILE_BYTES and int(data) * 1024 == 2**32 and int(cpu) == 40


def test_a_tool_that_prints_without_end_is_stopped_and_its_log_cut(tmp_path):
    start = time.monotonic()
    rc, log = run_tool(["yes", "spam"], cwd=str(tmp_path), env=ENV, timeout_s=60)
    assert rc == -signal.SIGXFSZ  # the log file reached the file-size limit
    assert len(log) < 2 * LOG_KEEP + 200 and "bytes of output cut" in log and log.startswith("spam\n")
    assert time.monotonic() - start < 30


def test_on_timeout_what_the_driver_started_is_killed_too(tmp_path):
    pidfile = tmp_path / "grandchild"
    with pytest.raises(ToolTimeout):
        run_tool(["sh", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], cwd=str(tmp_path), env=ENV, timeout_s=1)
    pid = int(pidfile.read_text())
    for _ in range(100):  # reparented to init, which reaps it
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"the tool's own child {pid} is still running")


def test_a_compiler_that_grows_without_end_is_stopped(tmp_path):
    """``#include "/dev/zero"``: cc1 reads an endless line into memory until the data limit."""
    (tmp_path / "bomb.c").write_text('#include "/dev/zero"\n')
    start = time.monotonic()
    rc, log = run_tool(["cc", "-c", "bomb.c"], cwd=str(tmp_path), env={**ENV, "TMPDIR": str(tmp_path)}, timeout_s=60,
                       memory_bytes=256 * 2**20)
    assert rc != 0 and "memory" in log.lower()
    assert time.monotonic() - start < 30


def test_a_compiler_reads_only_its_directory_and_the_system(tmp_path):
    """Every evaluation's files belong to the same sandbox user: without Landlock, ``#include``
    or ``.incbin`` would put another evaluation's source into this one's library or log."""
    elsewhere = tmp_path / "other-evaluation"
    elsewhere.mkdir()
    (elsewhere / "candidate.c").write_text("/* SECRET-OF-ANOTHER-TENANT */\n")
    build = tmp_path / "build"
    build.mkdir()
    (build / "steal.c").write_text(f'#include "{elsewhere}/candidate.c"\n#include <math.h>\nint f(void) {{ return 1; }}\n')
    env = {**ENV, "TMPDIR": str(build)}
    rc, log = run_tool(["cc", "-c", "steal.c"], cwd=str(build), env=env, timeout_s=60)
    assert rc != 0 and "Permission denied" in log and "SECRET" not in log  # system headers still read
    (build / "ok.c").write_text("#include <math.h>\ndouble f(double x) { return sqrt(x); }\n")
    rc, log = run_tool(["cc", "-c", "ok.c", "-o", "ok.o"], cwd=str(build), env=env, timeout_s=60)
    assert rc == 0, log
    rc, log = run_tool(["sh", "-c", f"echo x > {elsewhere}/planted"], cwd=str(build), env=env, timeout_s=30)
    assert rc != 0 and not (elsewhere / "planted").exists()


def test_a_tool_that_is_not_there_is_an_os_error(tmp_path):
    for cmd in ("/nonexistent/cc", "no-such-compiler-here"):
        with pytest.raises(FileNotFoundError, match="no such executable"):
            run_tool([cmd], cwd=str(tmp_path), env=ENV, timeout_s=30)


@pytest.mark.skipif(sys.platform != "linux", reason="Linux resource limits")
def test_the_bootstrap_is_the_only_python_in_the_way(tmp_path):
    rc, log = run_tool(["sh", "-c", "cat /proc/$$/comm; echo $PPID"], cwd=str(tmp_path), env=ENV, timeout_s=30)
    assert rc == 0 and log.split()[0] == "sh"  # the bootstrap exec'd the tool: no python parent left


@pytest.mark.parametrize("rc, log, says", [
    (-signal.SIGXFSZ, "", "wrote a file past the 64 MiB limit"),
    (4, "cc: internal compiler error: File size limit exceeded signal terminated program as", "past the 64 MiB"),
    (-signal.SIGKILL, "", "killed by SIGKILL"),
    (1, "error: expected ';'", "exited with code 1"),
])
def test_a_failure_says_why(rc, log, says):
    from kernels.sandbox.toolchain import failure

    assert says in failure("compiler", rc, log)
