"""Re-validate and re-benchmark a production engine with a candidate kernel in a child process.

The promotion guard (:mod:`engines.web.guard`) calls :func:`check_engine_isolated` for every
production engine that uses the workload of a kernel about to be promoted. The candidate has
passed the sandboxed evaluation but is not production yet, so (see the trust decision in
:mod:`engines._binding`) it is only loaded in this child, with a wall-clock timeout, never
in the web or worker process.

The child builds the engine twice: the *incumbent* with the current production kernels and
the *challenger* with the candidate in place of the production kernel of its workload;
validates the challenger end to end (and the incumbent, for reference); and times both on
the engine's scenarios interleaved call by call. It prints one JSON object.

Request (stdin JSON): ``{"engine", "config", "plan", "target", "production": [entries of
/api/production/], "candidate": {"workload", "source", "params", "candidate", "hash"},
"reps", "scenarios"?}``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from typing import Any


def check_engine(req: dict[str, Any]) -> dict[str, Any]:
    """Run in the child: see the module docstring. Returns the JSON-able result."""
    from engines._binding import KernelSpec, StaticRegistry  # noqa: PLC0415
    from engines._timing import SCENARIOS, time_plans  # noqa: PLC0415
    from engines._validate import validate  # noqa: PLC0415
    from engines.registry import make_engine  # noqa: PLC0415

    cand = req["candidate"]
    spec = KernelSpec(workload=cand["workload"], source=cand["source"], params=cand.get("params") or {},
                      origin="candidate", candidate=cand.get("candidate"), content_hash=cand.get("hash", ""))
    target = req.get("target", "cpu-x86_64")
    incumbent_reg = StaticRegistry(req.get("production") or [], target=target)
    challenger_reg = StaticRegistry(req.get("production") or [], target=target, overrides={cand["workload"]: spec})
    inc = make_engine(req["engine"], config=req.get("config") or None, registry=incumbent_reg, target=target)
    cha = make_engine(req["engine"], config=req.get("config") or None, registry=challenger_reg, target=target)
    plan = inc.plan(req.get("plan") or {})
    out: dict[str, Any] = {"engine": req["engine"], "config": req.get("config"), "plan": plan.to_dict()}
    out["challenger_validation"] = validate(req["engine"], engine=cha, plan=plan.to_dict())
    out["incumbent_validation"] = validate(req["engine"], engine=inc, plan=plan.to_dict())
    if out["challenger_validation"]["status"] != "ok":
        out["timing"] = None
        return out
    scenarios = tuple(req.get("scenarios") or SCENARIOS[req["engine"]][:2])
    reps = int(req.get("reps", 15))
    samples = {}
    for s in scenarios:  # interleave engine instances call by call, scenario by scenario
        from engines._timing import make_scenario  # noqa: PLC0415
        import time  # noqa: PLC0415

        fi, fc = make_scenario(inc, plan, s), make_scenario(cha, plan, s)
        for f in (fi, fc, fi, fc):
            f()
        si, sc = [], []
        for _ in range(reps):
            for f, acc in ((fi, si), (fc, sc)):
                t0 = time.perf_counter()
                f()
                acc.append(1e3 * (time.perf_counter() - t0))
        samples[s] = {"incumbent": si, "challenger": sc}
    out["timing"] = samples
    return out


def check_engine_isolated(req: dict[str, Any], *, timeout_s: float = 600.0) -> dict[str, Any]:
    """:func:`check_engine` in a child process (``python -m engines._isolated``).

    Returns:
        The child's result, or ``{"error": ...}`` when it crashed, timed out or printed no
        JSON (a crashing candidate counts as a failed validation for the guard).
    """
    env = {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}
    try:
        proc = subprocess.run([sys.executable, "-m", "engines._isolated"], input=json.dumps(req), capture_output=True,
                              text=True, timeout=timeout_s, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"the engine check did not finish within {timeout_s:g} s"}
    if proc.returncode != 0:
        return {"error": f"the engine check exited with code {proc.returncode}: {proc.stderr[-3000:]}"}
    try:
        return json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"the engine check printed no result: {proc.stderr[-3000:]}"}


def main() -> None:
    req = json.loads(sys.stdin.read())
    try:
        result = check_engine(req)
    except Exception as exc:  # noqa: BLE001 - reported to the parent as an error
        result = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
    sys.stdout.write("\n" + json.dumps(result, default=lambda o: o.item() if hasattr(o, "item") else str(o)) + "\n")


if __name__ == "__main__":
    main()
