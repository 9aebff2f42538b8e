"""Roofline of a candidate: its measured point per shape under the target's ceilings.

Arithmetic intensity = ``Workload.flops(shape) / Workload.bytes(shape)`` (FLOP per byte of
compulsory DRAM traffic); achieved GFLOP/s = ``flops / latency`` per timed shape. The model is
Williams, Waterman & Patterson, "Roofline: an insightful visual performance model for
multicore architectures", CACM 52(4), 2009, doi:10.1145/1498765.1498785.

Ceilings, in order of preference:

1. ``settings.ROOFLINE_PEAKS[target]`` = ``{"gbps", "gflops", "source"}`` (configured);
2. the limits recorded in the evidence's fingerprint by the worker that measured it:
   CPU targets: ``kernels.hostperf`` measured that host's copy bandwidth (STREAM "Copy"
   convention) and float32 FMA throughput; CUDA targets: the device's datasheet figures
   (``kernels.backends.cuda.roofline_for``);
3. this host's ``kernels.hostperf.host_limits()`` (CPU) or the architecture's datasheet
   figures (CUDA), when the evidence has none.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

import kernels
from kernels.workloads import shape_label


def ceilings(goal, evidence) -> dict[str, Any]:
    """``{"gbps", "gflops", "source"}`` of the goal's target (values None when unknown)."""
    configured = getattr(settings, "ROOFLINE_PEAKS", {}).get(goal.target)
    if configured:
        return {"gbps": configured.get("gbps"), "gflops": configured.get("gflops"),
                "source": configured.get("source", f"settings.ROOFLINE_PEAKS[{goal.target!r}]")}
    limits = ((evidence.fingerprint or {}).get("limits") or {}) if evidence else {}
    if goal.capabilities.host_limits:
        if limits.get("copy_gbps") and limits.get("fma_gflops"):
            return {"gbps": limits["copy_gbps"], "gflops": limits["fma_gflops"],
                    "source": f"measured on the evaluating host by kernels.hostperf ({limits.get('source', '')}): "
                              "STREAM-style copy bandwidth and float32 FMA-loop throughput, all threads"}
        try:
            from kernels.hostperf import host_limits  # noqa: PLC0415

            hl = host_limits()
        except Exception as exc:  # noqa: BLE001 - the plot says why it has no ceilings
            return {"gbps": None, "gflops": None, "source": f"unavailable: {exc}"}
        return {"gbps": hl.copy_gbps, "gflops": hl.fma_gflops,
                "source": f"measured on this web host by kernels.hostperf at {hl.measured_at} (the evidence has no limits)"}
    if goal.capabilities.datasheet_limits:
        if limits.get("peak_gbps") and limits.get("peak_gflops"):
            return {"gbps": limits["peak_gbps"], "gflops": limits["peak_gflops"],
                    "source": limits.get("source", "the evaluating worker's device limits")}
        try:
            from kernels.backends.cuda import roofline_for  # noqa: PLC0415

            arch = "sm_" + goal.target.split("-sm", 1)[1]
            rl = roofline_for((evidence.fingerprint or {}).get("device_name") if evidence else None, arch)
        except Exception as exc:  # noqa: BLE001
            return {"gbps": None, "gflops": None, "source": f"unavailable: {exc}"}
        return {"gbps": rl.peak_gbps, "gflops": rl.peak_gflops, "source": f"{rl.device}: {rl.source}"}
    return {"gbps": None, "gflops": None, "source": f"no roofline for {goal.target} (recorded data)"}


def points(goal, evidence) -> list[dict[str, Any]]:
    """Per timed shape: ``{"label", "intensity", "gflops", "gbps", "latency_ms"}``."""
    if evidence is None:
        return []
    try:
        wl = kernels.get_workload(goal.workload)
        shapes = wl.shapes(goal.shape_set)
    except KeyError:
        return []
    out = []
    for shape in shapes:
        label = shape_label(shape)
        latency = evidence.metrics.get(f"latency_ms[{label}]")
        if latency is None and len(shapes) == 1:
            latency = evidence.metrics.get("latency_ms")
        flops, nbytes = float(wl.flops(shape)), float(wl.bytes(shape))
        if not latency or latency <= 0 or nbytes <= 0:
            continue
        seconds = latency * 1e-3
        out.append({"label": label, "intensity": flops / nbytes, "gflops": flops / seconds / 1e9,
                    "gbps": nbytes / seconds / 1e9, "latency_ms": latency})
    return out
