"""Inference engines assembled from production kernels (framework-free, like ``kernels``).

An engine is a graph of operators over named tensors (each operator a :mod:`kernels`
workload, or an engine-local glue step) plus a plan (fusions, batch size, buffer reuse, the
kernel of each workload: baseline, template or production). Three engines:

- ``minilm``: all-MiniLM-L6-v2 sentence encoder with its real weights (:mod:`engines.minilm`);
- ``llama-layer``: a Llama-3-8B decoder layer, prefill and decode (:mod:`engines.llama`);
- ``kda-layer``: a Kimi Linear KDA layer (:mod:`engines.kda_layer`).

Command line: ``python -m engines validate|bench|describe --engine NAME``. Django lives only
in :mod:`swarm.engine_registry` (production engines, benchmark history, the promotion guard, pages).
"""

# Public names are imported on first use: ``python -m engines`` must be able to set thread
# counts before NumPy (and its BLAS) is loaded, and importing the package loads no model.
_EXPORTS = {
    "BASELINE": "engines._binding", "PRODUCTION": "engines._binding", "TEMPLATE": "engines._binding",
    "KernelSpec": "engines._binding", "NoProduction": "engines._binding", "StaticRegistry": "engines._binding",
    "Graph": "engines._graph", "Operator": "engines._graph", "Profile": "engines._graph", "Program": "engines._graph",
    "bind_graph": "engines._graph", "Plan": "engines._plan", "PlanSpec": "engines._plan",
    "ENGINES": "engines.registry", "make_engine": "engines.registry",
}


def __getattr__(name: str):
    if name in _EXPORTS:
        import importlib  # noqa: PLC0415

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'engines' has no attribute {name!r}")


__all__ = [
    "BASELINE",
    "ENGINES",
    "PRODUCTION",
    "TEMPLATE",
    "Graph",
    "KernelSpec",
    "NoProduction",
    "Operator",
    "Plan",
    "PlanSpec",
    "Profile",
    "Program",
    "StaticRegistry",
    "bind_graph",
    "make_engine",
]
