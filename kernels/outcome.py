"""The one outcome enum every evaluation ends in."""

from __future__ import annotations

import enum


class Outcome(enum.StrEnum):
    """Final classification of one candidate evaluation.

    Only :func:`kernels.evaluator.evaluate` assigns it (one place classifies).

    - ``ok``: compiled, ran, every validation case passed, timed.
    - ``compile_error``: the compiler rejected the source (log kept).
    - ``runtime_error``: the child crashed (signal), exited, or reported nothing usable.
    - ``timeout``: the child ran past its wall-clock limit and its process group was killed.
    - ``wrong_result``: outputs beyond tolerance or not written (NaN), repeated calls
      disagree, or a timed or fresh-contents call's output is wrong.
    - ``invalid``: broke a rule: wrote outside an output or input (guard regions), modified
      an input, wrote an output after returning, bad parameters, or measured faster than the
      hardware's physical limit.
    """

    ok = "ok"
    compile_error = "compile_error"
    runtime_error = "runtime_error"
    timeout = "timeout"
    wrong_result = "wrong_result"
    invalid = "invalid"

    @property
    def is_failure(self) -> bool:
        """True for every outcome except ``ok``."""
        return self is not Outcome.ok
