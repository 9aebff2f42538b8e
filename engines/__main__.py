"""``python -m engines``: see :mod:`engines.cli`."""

import os
import sys

# Thread counts must be set before NumPy's BLAS or an OpenMP runtime is loaded.
if "--threads" in sys.argv[:-1]:
    _n = sys.argv[sys.argv.index("--threads") + 1]
    if _n.isdigit():
        for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[_var] = _n
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from engines.cli import main  # noqa: E402

sys.exit(main())
