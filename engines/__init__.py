"""Inference engines assembled from production kernels (framework-free, like ``kernels``).

An engine is a graph of operators over named tensors (each operator a :mod:`kernels`
workload, or an engine-local glue step) plus a plan (fusions, batch size, buffer reuse, the
kernel of each workload: baseline, template or production). Three engines:

- ``minilm``: all-MiniLM-L6-v2 sentence encoder with its real weights (:mod:`engines.minilm`);
- ``llama-layer``: a Llama-3-8B decoder layer, prefill and decode (:mod:`engines.llama`);
- ``kda-layer``: a Kimi Linear KDA layer (:mod:`engines.kda_layer`).

Command line: ``python -m engines validate|bench|describe --engine NAME``. Django lives only
in :mod:`engines.web` (production engines, benchmark history, the promotion guard, pages).
"""

from engines._binding import BASELINE, PRODUCTION, TEMPLATE, KernelSpec, NoProduction, StaticRegistry
from engines._graph import Graph, Operator, Profile, Program, bind_graph
from engines._plan import Plan, PlanSpec
from engines.registry import ENGINES, make_engine

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
