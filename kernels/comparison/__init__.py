"""Paired comparison of two kernels as a measurement: each side in its own sandbox child taking
turns (:mod:`.sandbox_side`, :mod:`.paired`), the verdict over rounds (:mod:`.verdict`) and the
target's noise floor with its store (:mod:`.noise_floor`)."""
