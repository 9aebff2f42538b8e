"""INT21 kernel library: workloads, design spaces, backends and the sandboxed evaluator.

Framework-free: depends on numpy and the standard library (scipy, imported lazily, for
:func:`compare`; cupy for the CUDA backend), never on Django.

Backends (:mod:`kernels.backends`) implement :class:`kernels.backends.Backend` and describe
what they do with :class:`kernels.backends.Capabilities` (``capabilities("replay").batchable``),
which callers ask instead of comparing backend names; :func:`evaluate` is the one evaluation
pipeline for all of them.
"""

from kernels.backends import replay as _replay  # noqa: F401  (provides the replay:<dataset> domains)
from kernels.evaluation.pipeline import BenchSettings, Evidence, evaluate
from kernels.hashing import candidate_hash
from kernels.outcome import Outcome
from kernels.sandbox.policy import SandboxPolicy
from kernels.space import DesignSpace, Parameter, SpaceError, point_key
from kernels.stats import Comparison, compare, summarize
from kernels.templates import default_space, load_template
from kernels.validation_store import ValidationStore
from kernels.workloads import WORKLOADS, Workload, get_workload

__all__ = [
    "WORKLOADS",
    "BenchSettings",
    "Comparison",
    "DesignSpace",
    "Evidence",
    "Outcome",
    "Parameter",
    "SandboxPolicy",
    "SpaceError",
    "ValidationStore",
    "Workload",
    "candidate_hash",
    "compare",
    "default_space",
    "evaluate",
    "get_workload",
    "load_template",
    "point_key",
    "summarize",
]
