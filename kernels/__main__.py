"""``python -m kernels``: see :mod:`kernels.cli`."""

import sys

from kernels.cli import main

sys.exit(main())
