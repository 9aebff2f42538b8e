"""Workloads whose references are costly update them for the values swapped before a timed
call instead of computing them again (``Workload.salted_reference``): the update must equal
the whole reference of the swapped inputs."""

import numpy as np
import pytest

from kernels import WORKLOADS
from kernels.evaluation.checks import salted_inputs

HOOKED = sorted(name for name, wl in WORKLOADS.items() if wl.salted_reference is not None)


def test_the_costly_references_have_the_update():
    assert {"gemm", "softmax", "kda"} <= set(HOOKED)


@pytest.mark.parametrize("name", HOOKED)
@pytest.mark.parametrize("seed", range(4))
def test_the_update_equals_the_whole_reference_of_the_swapped_inputs(name, seed):
    wl = WORKLOADS[name]
    rng = np.random.default_rng(seed)
    for shape in wl.shapes("test-small"):
        inputs = wl.generate(dict(shape), seed)
        before = wl.reference(inputs, wl.attrs)
        swaps = {}
        for input_name, arr in inputs.items():  # as the timing loop does: two values of one row
            if arr.size >= 2 and rng.random() < 0.7:
                width = arr.shape[-1] if arr.ndim else 1
                i = int(rng.integers(arr.size))
                swaps[input_name] = [i, i - i % width + int(rng.integers(width))]
        salted = salted_inputs(inputs, swaps)
        updated = wl.salted_reference(salted, before, swaps, wl.attrs)
        whole = wl.reference(salted, wl.attrs)
        assert set(updated) == set(whole)
        for out in whole:
            assert np.allclose(updated[out], whole[out], rtol=1e-12, atol=1e-12), (name, dict(shape), swaps)
        assert all(np.array_equal(before[k], wl.reference(inputs, wl.attrs)[k]) for k in before)  # not modified
