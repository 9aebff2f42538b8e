"""Every benchmark starts as README gives it, and the database-backed ones run to their report
with small settings and leave no database behind."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py")
                 if not p.stem.startswith("_") and '__name__ == "__main__"' in p.read_text())


@pytest.fixture
def scratch():
    """The benchmark's temporary folder (TMPDIR): short, for Chromium's socket paths."""
    path = Path(tempfile.mkdtemp(prefix="bench-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _run(args: list[str], scratch: Path, timeout: int) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "REDIS_URL")}
    env["TMPDIR"] = str(scratch)
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("module", MODULES)
def test_a_benchmark_tells_its_options_without_django_set_up(module, scratch):
    r = _run([f"benchmarks.{module}", "--help"], scratch, 120)
    assert r.returncode == 0 and "usage:" in r.stdout, r.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("module", ["run_summary", "candidate_table"])
def test_a_database_benchmark_reports_and_removes_its_database(module, tmp_path, scratch):
    r = _run([f"benchmarks.{module}", "--candidates", "300", "--reps", "1", "--out", str(tmp_path / "out")], scratch, 300)
    assert r.returncode in (0, 1), r.stderr[-2000:]  # 1: a timing verdict of FAIL on a busy host
    report = json.loads((tmp_path / "out" / f"{module}.json").read_text())
    assert report["candidates"] == 300
    assert not list(scratch.glob("int21-bench-*"))


@pytest.mark.slow
@pytest.mark.browser
@pytest.mark.timeout(400)
def test_the_run_page_benchmark_finishes_and_removes_its_database(tmp_path, scratch):
    r = _run(["benchmarks.run_page", "--candidates", "1500", "--batches", "2", "--loads", "1",
              "--out", str(tmp_path / "run_page.json")], scratch, 360)
    assert r.returncode in (0, 1) and (tmp_path / "run_page.json").exists(), r.stdout[-2000:] + r.stderr[-3000:]
    results = json.loads((tmp_path / "run_page.json").read_text())
    assert results["history-chart_ms"]["points"] >= 1500 and results["scatter-chart_ms"]["points"] >= 1500
    assert not list(scratch.glob("int21-bench-*"))
