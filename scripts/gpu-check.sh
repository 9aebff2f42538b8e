#!/usr/bin/env bash
# GPU check of the CUDA backend, in one go (about 5-8 minutes) on an NVIDIA Hopper machine:
#
#   1. install the project with the machine's own Python, numpy and cupy
#      (pip install -e ".[test]" when a package index answers; offline, an editable install
#      without dependencies, else PYTHONPATH; the [gpu] extra is never requested, so the
#      machine's cupy wheel stays);
#   2. print the GPU, nvcc and cupy;
#   3. run the GPU tests: pytest -m gpu tests/kernels/test_backend_cuda.py;
#   4. run benchmarks/cuda_check.py: copy bandwidth and cupy.matmul ceilings, CuPy references,
#      template points through the full evaluation protocol;
#   5. leave cuda_check.json, cuda_check.md, pytest-gpu.log and gpu-check.log in $OUT
#      (default benchmarks/results).
#
# Usage: scripts/gpu-check.sh [--quick]      (PYTHON=... to choose the interpreter)
# Exit status: pytest's if it failed, else the benchmark's (1: a template point was not ok).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/benchmarks/results}
mkdir -p "$OUT"
LOG=$OUT/gpu-check.log
exec > >(tee -a "$LOG") 2>&1
QUICK=""
[ "${1:-}" = "--quick" ] && QUICK="--quick"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
# evaluation data (validation store, compile cache) stays out of the user's home
export KERNELS_CACHE_DIR=${KERNELS_CACHE_DIR:-$(mktemp -d /tmp/int21-cache.XXXX)}
export KERNELS_DATA_DIR=${KERNELS_DATA_DIR:-$(mktemp -d /tmp/int21-data.XXXX)}
chmod 755 "$KERNELS_CACHE_DIR" "$KERNELS_DATA_DIR"

echo "== gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>/dev/null || echo "nvidia-smi: not available"
command -v nvcc >/dev/null && nvcc --version | tail -2 || echo "nvcc: not on PATH (static evidence will be empty)"
"$PY" - <<'EOF' || { echo "FATAL: $PY cannot import numpy and cupy"; exit 2; }
import sys, numpy, cupy
print(f"python {sys.version.split()[0]}, numpy {numpy.__version__}, cupy {cupy.__version__}, "
      f"devices {cupy.cuda.runtime.getDeviceCount()}")
EOF

echo "== install"
if timeout 90 "$PY" -m pip install -q --disable-pip-version-check --retries 0 --timeout 5 -e ".[test]" >/tmp/int21-pip.log 2>&1; then
    echo "installed with pip install -e .[test]"
elif timeout 90 "$PY" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation --no-index -e . >>/tmp/int21-pip.log 2>&1; then
    echo "offline: installed editable without dependencies (kernels/ needs only numpy + cupy)"
else
    echo "pip could not install; using PYTHONPATH=$ROOT (tail of pip's log below)"
    tail -5 /tmp/int21-pip.log
fi
export PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}
"$PY" -c "import kernels, kernels.backends.cuda as c; print('kernels from', kernels.__file__); print(c.CudaBackend().fingerprint())"

echo "== pytest -m gpu"
# pytest-django may be missing on the GPU image: tests/kernels does not need it.
"$PY" -m pytest tests/kernels/test_backend_cuda.py -m gpu -q -rs -p no:cacheprovider \
    -W ignore::pytest.PytestConfigWarning 2>&1 | tee "$OUT/pytest-gpu.log"
PYTEST_RC=${PIPESTATUS[0]}
echo "pytest exit status: $PYTEST_RC"

echo "== benchmark"
"$PY" -m benchmarks.cuda_check --out "$OUT" --budget-s "${GPU_CHECK_BUDGET_S:-240}" $QUICK
BENCH_RC=$?
echo "benchmark exit status: $BENCH_RC"
echo "== results in $OUT: $(ls "$OUT" | tr '\n' ' ')"
if [ "$PYTEST_RC" -ne 0 ]; then exit "$PYTEST_RC"; fi
exit "$BENCH_RC"
