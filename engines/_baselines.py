"""Baseline implementations of every workload an engine uses: NumPy float32 + BLAS on CPU.

Each is the ``numpy_into`` of the workload (:class:`kernels.workloads.base.Workload`, defined
in ``kernels/workloads/<workload>/``), with the calling convention of
:class:`engines._binding.BoundKernel`: ``fn(inputs, outputs, shape, attrs)`` reads the
workload's named inputs (float32, C-contiguous, read-only), writes every named output in place
(preallocated float32), and returns nothing. ``numpy.matmul`` uses the BLAS that NumPy ships
with (OpenBLAS), on its default threads. These are what an engine runs for an operator that
has no production kernel (and what a CuPy/cuBLAS baseline would be on a GPU target).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from kernels.workloads import WORKLOADS

Arrays = Mapping[str, np.ndarray]
BaselineFn = Callable[[Arrays, dict, Mapping[str, int], Mapping[str, float]], None]

#: Workload name -> its NumPy baseline, for every workload that has one.
BASELINES: dict[str, BaselineFn] = {name: wl.numpy_into for name, wl in WORKLOADS.items() if wl.numpy_into is not None}
