"""Engine plans: the engine-level choices as a point of a design space.

A plan fixes, for one engine, which fusions are on (``FUSE_*``, 0/1), the batch size
(``BATCH_SIZE``), whether operator buffers are kept across calls (``BUFFER_REUSE``, 0/1),
the BLAS threads of the baselines (``BLAS_THREADS``: 0 default, 1 single) and, per
workload, which kernel runs its operators (``KERNEL_<WORKLOAD>``: 0 the NumPy/BLAS baseline, 1 the repository's C template, 2 the production kernel, falling back to the
baseline when there is none). Because it is a :class:`kernels.DesignSpace` point, the
swarm's agents can search plans exactly as they search kernel parameters
(:mod:`engines.goals`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from numbers import Integral
from typing import Any

from engines._binding import CHOICE_NAMES, PRODUCTION
from kernels.space import DesignSpace, Parameter


def kernel_param(workload: str) -> str:
    """Design-space parameter choosing ``workload``'s kernel, e.g. ``KERNEL_GEMM_BIAS``."""
    return "KERNEL_" + workload.upper()


@dataclass(frozen=True)
class PlanSpec:
    """What an engine lets a plan choose.

    Attributes:
        fusions: ``{FLAG: description}``, each 0/1.
        batch_sizes: allowed ``BATCH_SIZE`` values.
        workloads: workloads whose kernel a plan chooses.
        defaults: default values (fusions on, production kernels, buffer reuse on, ...).
    """

    fusions: Mapping[str, str]
    batch_sizes: tuple[int, ...]
    workloads: tuple[str, ...]
    defaults: Mapping[str, int]

    def space(self) -> DesignSpace:
        params = [Parameter(f, (0, 1)) for f in self.fusions]
        params.append(Parameter("BATCH_SIZE", tuple(self.batch_sizes)))
        params.append(Parameter("BUFFER_REUSE", (0, 1)))
        params.append(Parameter("BLAS_THREADS", (0, 1)))
        params += [Parameter(kernel_param(w), (0, 1, 2)) for w in self.workloads]
        return DesignSpace(parameters=tuple(params), restrictions=())


def _integer(v: Any) -> int | None:
    """``v`` as an int when it is an integer or a float with an integral value, else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, Integral):
        return int(v)
    if isinstance(v, float) and v.is_integer():  # False for inf and nan
        return int(v)
    return None


@dataclass(frozen=True)
class Plan:
    """A complete engine plan (every parameter of the engine's space set).

    Build with :meth:`Plan.parse`; ``params`` is the JSON form (what the swarm stores).
    """

    params: Mapping[str, int]

    @classmethod
    def parse(cls, spec: PlanSpec, params: Mapping[str, Any] | None = None) -> Plan:
        """Defaults updated with ``params``, checked against the engine's space.

        Every value must be an integer (a float with an integral value, such as ``1.0``,
        counts as that integer; bools, strings and other floats do not).

        Raises:
            ValueError: an unknown parameter, a value that is not an integer, or one outside
                its choices (the message lists what is allowed).
        """
        space = spec.space()
        merged = {p.name: spec.defaults.get(p.name, p.values[-1] if p.name.startswith("KERNEL_") else p.values[0])
                  for p in space.parameters}
        for k, v in (params or {}).items():
            if k not in merged:
                raise ValueError(f"unknown plan parameter {k!r} (known: {', '.join(merged)})")
            allowed = next(p.values for p in space.parameters if p.name == k)
            iv = _integer(v)
            if iv is None:
                raise ValueError(f"plan parameter {k}={v!r} is not an integer: it must be one of {list(allowed)}")
            if iv not in allowed:
                raise ValueError(f"plan parameter {k}={v!r} must be one of {list(allowed)}")
            merged[k] = iv
        return cls(dict(merged))

    def on(self, flag: str) -> bool:
        return bool(self.params.get(flag, 0))

    @property
    def batch_size(self) -> int:
        return int(self.params.get("BATCH_SIZE", 1))

    @property
    def blas_threads(self) -> int:
        """Threads of the BLAS behind the baselines' matmuls during a run: 0 = the BLAS default
        (every CPU), 1 = one thread (small GEMMs avoid thread hand-offs, which cost most on a
        shared machine)."""
        return int(self.params.get("BLAS_THREADS", 0))

    @property
    def buffer_reuse(self) -> bool:
        return bool(self.params.get("BUFFER_REUSE", 1))

    def choices(self) -> dict[str, int]:
        """workload -> kernel choice."""
        return {k[len("KERNEL_"):].lower(): int(v) for k, v in self.params.items() if k.startswith("KERNEL_")}

    def choice(self, workload: str) -> int:
        return int(self.params.get(kernel_param(workload), PRODUCTION))

    def key(self) -> tuple:
        return tuple(sorted(self.params.items()))

    def label(self) -> str:
        """Short human form, e.g. ``FUSE_QKV=1 BATCH_SIZE=32 gemm=template``."""
        flags = " ".join(f"{k}={v}" for k, v in self.params.items() if not k.startswith("KERNEL_"))
        kern = " ".join(f"{w}={CHOICE_NAMES[c]}" for w, c in self.choices().items())
        return f"{flags} {kern}".strip()

    def to_dict(self) -> dict[str, int]:
        return dict(self.params)
