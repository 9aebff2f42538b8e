"""Workloads: exact math, references, inputs, tolerances, shape sets."""

from kernels.workloads.base import Arg, Workload, shape_label
from kernels.workloads.registry import WORKLOADS, add_shape_set, get_workload

__all__ = ["WORKLOADS", "Arg", "Workload", "add_shape_set", "get_workload", "shape_label"]
