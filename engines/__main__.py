"""``python -m engines``: see :mod:`engines.cli`."""

import os
import sys

from engines.cli import MAX_THREADS, main  # loads no NumPy, nor an OpenMP runtime

# Thread counts must be set before NumPy's BLAS or an OpenMP runtime is loaded; only a count
# --threads accepts (else the parser reports it, and the runtimes never see it).
if "--threads" in sys.argv[:-1]:
    _n = sys.argv[sys.argv.index("--threads") + 1]
    if _n.isascii() and _n.isdigit() and len(_n) <= len(str(MAX_THREADS)) and 1 <= int(_n) <= MAX_THREADS:
        for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[_var] = _n
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

sys.exit(main())
