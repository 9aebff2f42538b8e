"""The one outcome enum every evaluation ends in."""

from __future__ import annotations

import enum


class Outcome(enum.StrEnum):
    """Final classification of one candidate evaluation.

    Only :func:`kernels.evaluation.pipeline.evaluate` assigns it (one place classifies).

    - ``ok``: compiled, ran, every validation case passed, timed.
    - ``compile_error``: the compiler rejected the source (log kept).
    - ``runtime_error``: the child crashed (signal), exited, or reported nothing usable.
    - ``timeout``: the child ran past its wall-clock limit and its process group was killed.
    - ``wrong_result``: outputs beyond tolerance or not written (NaN), repeated calls
      disagree, or a timed or fresh-contents call's output is wrong.
    - ``invalid``: broke a rule: wrote outside an output or input (guard regions), modified
      an input, wrote an output after returning, bad parameters, or measured faster than the
      hardware's physical limit.
    - ``invalid_input``: the workload's inputs, not the candidate, failed: the float64
      reference of a case is not finite or beyond the workload's magnitude bound
      (:mod:`kernels.evaluation.reference_check`), so no kernel can be judged on it; evaluation was
      not possible, and the input generator needs fixing.
    - ``pruned``: validated, but its first timed calls showed it more than the goal's prune
      factor times slower than the incumbent (:mod:`kernels.evaluation.pruning`); its timing stopped
      early and the evidence holds the calls so far.
    - ``cancelled``: stopped on request before its evaluation ended; says nothing about the
      candidate (not judged).
    """

    ok = "ok"
    compile_error = "compile_error"
    runtime_error = "runtime_error"
    timeout = "timeout"
    wrong_result = "wrong_result"
    invalid = "invalid"
    invalid_input = "invalid_input"
    pruned = "pruned"
    cancelled = "cancelled"

    @property
    def is_failure(self) -> bool:
        """True for every outcome except ``ok`` (``invalid_input`` included: not usable)."""
        return self is not Outcome.ok

    @property
    def judged(self) -> bool:
        """False for ``invalid_input`` and ``cancelled``: the candidate could not be judged, so
        the outcome says nothing about it (no credit lost, no failure rule, no stored case)."""
        return self not in (Outcome.invalid_input, Outcome.cancelled)
