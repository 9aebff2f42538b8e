"""``python -m engines``: validate and benchmark the inference engines.

    python -m engines validate --engine minilm|llama-layer|kda-layer [--config NAME] [--json]
    python -m engines bench    --engine NAME [--config NAME] [--threads N] [--rounds R] [--json]
    python -m engines describe --engine NAME [--plan JSON]

``--production FILE`` takes production kernels from a JSON export of ``/api/production/``
(a list of objects with ``workload``, ``target``, ``source``, ``params``); without it every
operator runs its baseline (or the kernel the plan asks for). Exit status: 0 when the
validation passes, 1 when it does not, 2 on a usage error.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engines.registry import CONFIGS, ENGINES


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m engines", description="Inference engines from production kernels.")
    sub = p.add_subparsers(dest="command", required=True)
    for name, help_ in (("validate", "end-to-end validation against the reference model"),
                        ("bench", "benchmarks against what people run today"),
                        ("describe", "the operator graph with the kernel bound to each operator")):
        s = sub.add_parser(name, help=help_)
        s.add_argument("--engine", required=True, choices=list(ENGINES))
        s.add_argument("--config", help="layer size: " + "; ".join(f"{e}: {', '.join(c)}" for e, c in CONFIGS.items() if c))
        s.add_argument("--plan", default="{}", help='plan parameters as JSON, e.g. \'{"FUSE_QKV": 0}\'')
        s.add_argument("--production", type=Path, help="JSON export of /api/production/ (production kernels)")
        s.add_argument("--target", help="target whose production kernels --production takes (default cpu-x86_64)")
        s.add_argument("--json", action="store_true", help="print one JSON object")
        if name == "bench":
            s.add_argument("--threads", type=_positive, help="threads for the engine and its peer (default: all CPUs)")
            s.add_argument("--rounds", type=_positive, default=3)
            s.add_argument("--prompt", type=_positive, default=128, help="layers: prompt length (prefill)")
            s.add_argument("--decode-steps", type=_positive, default=8)
        if name == "validate":
            s.add_argument("--prompt", type=_positive, default=24)
            s.add_argument("--decode-steps", type=_positive, default=4)
    return p


def _positive(text: str) -> int:
    """An integer of at least 1 (argparse ``type``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def _load_production(path: Path, target: str):
    """The production kernels of ``target`` in ``path``, a JSON export of ``/api/production/``
    (its ``results`` list, or a plain list of objects).

    Raises:
        ValueError: the file cannot be read, is not JSON, or an entry lacks a string
            ``workload`` or ``source`` or has ``params`` that are not an object.
    """
    from engines._binding import StaticRegistry  # noqa: PLC0415

    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"--production: cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"--production: {path} is not JSON: {exc}") from None
    entries = data.get("results", data) if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise ValueError(f"--production: {path} holds no list of production kernels")
    for i, e in enumerate(entries):
        problem = ("is not an object" if not isinstance(e, dict)
                   else "has no string 'workload'" if not isinstance(e.get("workload"), str)
                   else "has no string 'source'" if not isinstance(e.get("source"), str)
                   else "has 'params' that are not an object" if not isinstance(e.get("params") or {}, dict)
                   else None)
        if problem:
            raise ValueError(f"--production: entry {i} of {path} {problem}")
    return StaticRegistry(entries, target=target)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        plan = json.loads(args.plan)
        if not isinstance(plan, dict):
            raise ValueError("--plan must be a JSON object")
    except ValueError as exc:
        print(f"error: --plan: {exc}", file=sys.stderr)
        return 2
    registry = None
    if args.target and not args.production:
        print("error: --target selects production kernels: pass --production FILE with it", file=sys.stderr)
        return 2
    if args.production:
        try:
            registry = _load_production(args.production, args.target or "cpu-x86_64")
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.config and args.config not in CONFIGS[args.engine]:
        print(f"error: engine {args.engine} has no config {args.config!r} (known: {', '.join(CONFIGS[args.engine]) or 'none'})",
              file=sys.stderr)
        return 2
    try:
        if args.command == "validate":
            from engines._validate import validate  # noqa: PLC0415

            result = validate(args.engine, config=args.config, plan=plan, registry=registry, prompt=args.prompt,
                              decode_steps=args.decode_steps)
        elif args.command == "bench":
            from engines._bench import bench  # noqa: PLC0415

            config = args.config or {"llama-layer": "llama3-8b", "kda-layer": "kimi-linear"}.get(args.engine)
            result = bench(args.engine, config=config, threads=args.threads, rounds=args.rounds, registry=registry,
                           plans={"requested": plan} if plan else None, prompt=args.prompt, decode_steps=args.decode_steps)
        else:
            from engines.registry import make_engine  # noqa: PLC0415

            eng = make_engine(args.engine, config=args.config, registry=registry)
            p = eng.plan(plan)
            result = {"engine": args.engine, "plan": p.to_dict(), "graph": eng.describe(p)}
            for rows in result["graph"].values():
                for r in rows:
                    r.get("kernel", {}).pop("source", None)
    except (ValueError, ImportError) as exc:  # bad input; an engine whose extra is not installed
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, default=_default))
    else:
        _print_human(args.command, result)
    return 0 if result.get("status", "ok") == "ok" else 1


def _default(o):
    import numpy as np  # noqa: PLC0415

    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, tuple):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _print_human(command: str, r: dict) -> None:
    if command == "validate":
        figs = {k: r[k] for k in ("cosine_min", "max_abs_error", "max_rel_error") if k in r}
        print(f"{r['engine']}: {r['status']}  " + "  ".join(f"{k}={v:.6g}" for k, v in figs.items()))
        print("kernels: " + ", ".join(f"{w}={k}" for w, k in r.get("kernels", {}).items()))
    elif command == "bench":
        print(json.dumps({k: r[k] for k in r if k not in ("samples", "samples_sentences_per_s")}, indent=2, default=_default))
    else:
        for mode, rows in r["graph"].items():
            print(f"[{mode}]")
            for row in rows:
                k = row["kernel"]
                point = " ".join(f"{p}={v}" for p, v in (k.get("params") or {}).items())
                print(f"  {row['name']:<28} {row['workload'] or 'glue':<20} {k['kind']:<10} {point + '  ' if point else ''}{k.get('note', '')}")
