"""Workloads: exact math, references, inputs, tolerances, shape sets."""

from kernels.workloads.base import WORKLOADS, Arg, Workload, add_shape_set, get_workload, shape_label

__all__ = ["WORKLOADS", "Arg", "Workload", "add_shape_set", "get_workload", "shape_label"]
