"""``python -m engines``: validate and benchmark the inference engines.

    python -m engines validate --engine minilm|llama-layer|kda-layer [--config NAME] [--json]
    python -m engines bench    --engine NAME [--config NAME] [--threads N] [--rounds R] [--json]
    python -m engines describe --engine NAME [--plan JSON]

``--production FILE`` takes production kernels from a JSON export of ``/api/production/``
(a list of objects with ``workload``, ``target``, ``source``, ``params``); without it every
operator runs its baseline (or the kernel the plan asks for). ``--target`` (with
``--production``) picks the entries of that target; the kernels run in this process, on this
host's CPU, so the only target accepted is ``cpu-<platform.machine()>`` (the default).

Exit status: 0 when the validation passes, 1 when it does not, 2 on a usage error: bad
options or ``--plan``, a malformed production file, a production kernel that does not
compile, an engine whose extra is not installed, a run that does not fit in memory. Each
prints one ``error: ...`` line on stderr.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

from engines.registry import CONFIGS, ENGINES
from kernels.argtypes import bounded_int

#: Upper bounds of the count options: refused by the parser, before an OpenMP runtime sees a
#: thread count (libgomp aborts the PyTorch peer on one past its limit) or NumPy is asked for
#: the buffers of an absurd prompt. A run within them that still does not fit in memory is a
#: usage error too (:func:`main`).
MAX_THREADS, MAX_ROUNDS, MAX_PROMPT, MAX_DECODE_STEPS = 1024, 1000, 32768, 4096


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
        s.add_argument("--target", help="target whose production kernels --production takes: this host's CPU, "
                                        f"{_host_target()} (the default)")
        s.add_argument("--json", action="store_true", help="print one JSON object")
        if name == "bench":
            s.add_argument("--threads", type=_count(MAX_THREADS),
                           help=f"threads for the engine and its peer, 1-{MAX_THREADS} (default: all CPUs)")
            s.add_argument("--rounds", type=_count(MAX_ROUNDS), default=3, help=f"1-{MAX_ROUNDS}")
            s.add_argument("--prompt", type=_count(MAX_PROMPT), default=128,
                           help=f"layers: prompt length (prefill), 1-{MAX_PROMPT} tokens")
            s.add_argument("--decode-steps", type=_count(MAX_DECODE_STEPS), default=8, help=f"1-{MAX_DECODE_STEPS}")
        if name == "validate":
            s.add_argument("--prompt", type=_count(MAX_PROMPT), default=24, help=f"1-{MAX_PROMPT} tokens")
            s.add_argument("--decode-steps", type=_count(MAX_DECODE_STEPS), default=4, help=f"1-{MAX_DECODE_STEPS}")
    return p


def _count(high: int):
    """An argparse ``type``: an integer from 1 to ``high``, else "must be 1-<high>, not <n>"."""
    return bounded_int(1, high)


def _host_target() -> str:
    """The target this process runs kernels on: this host's CPU, ``cpu-<platform.machine()>``."""
    return f"cpu-{platform.machine()}"


def _check_target(target: str) -> None:
    """``--target``: one the CPU backend serves on this host (:meth:`CpuBackend.supports`).

    Raises:
        ValueError: any other target (the message names the one this host serves).
    """
    from kernels.backends import get_backend  # noqa: PLC0415

    if not get_backend("cpu").supports(target):
        raise ValueError(f"--target {target!r}: the engines run their kernels in this process, on this host's CPU; "
                         f"the only target they can run is {_host_target()}")


def _load_production(path: Path, target: str):
    """The production kernels of ``target`` in ``path``, a JSON export of ``/api/production/``
    (the response as saved, its ``kernels`` or ``results`` list, or a plain list of objects).

    Raises:
        ValueError: the file cannot be read, is not JSON, or an entry is malformed
            (:func:`engines._binding.entry_problem`: no string ``workload`` or ``source``,
            ``params`` or ``evidence`` not objects, ``validated_shapes`` not a list of
            objects of integers, ...) or names a ``library`` file that does not exist; the
            message names the file and the entry's index.
    """
    from engines._binding import StaticRegistry, entry_problem  # noqa: PLC0415

    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise ValueError(f"--production: cannot read {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"--production: {path} is not JSON: {exc}") from None
    except RecursionError:
        raise ValueError(f"--production: {path} is nested too deeply to be an export of production kernels") from None
    # GET /api/production/ answers {"kernels": [...]}; a paginated listing {"results": [...]}
    entries = (data.get("kernels", data.get("results", data))) if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise ValueError(f"--production: {path} holds no list of production kernels")
    for i, e in enumerate(entries):
        problem = entry_problem(e)
        if not problem and e.get("library") and not Path(e["library"]).is_file():
            problem = f"has a 'library' that names no file ({e['library']})"
        if problem:
            raise ValueError(f"--production: entry {i} of {path} {problem}")
    return StaticRegistry(entries, target=target)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        plan = json.loads(args.plan)
        if not isinstance(plan, dict):
            raise ValueError("must be a JSON object")
    except RecursionError:
        print("error: --plan: nested too deeply", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"error: --plan: {exc}", file=sys.stderr)
        return 2
    registry = None
    if args.target and not args.production:
        print("error: --target selects production kernels: pass --production FILE with it", file=sys.stderr)
        return 2
    target = args.target or _host_target()
    if args.production:
        try:
            if args.target:
                _check_target(args.target)
            registry = _load_production(args.production, target)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.config and args.config not in CONFIGS[args.engine]:
        print(f"error: engine {args.engine} has no config {args.config!r} (known: {', '.join(CONFIGS[args.engine]) or 'none'})",
              file=sys.stderr)
        return 2
    from kernels.sandbox.toolchain import CompileError  # noqa: PLC0415

    try:
        if args.command == "validate":
            from engines._validate import validate  # noqa: PLC0415
            from engines.registry import make_engine  # noqa: PLC0415

            eng = make_engine(args.engine, config=args.config, registry=registry, target=target)
            result = validate(args.engine, engine=eng, plan=plan, prompt=args.prompt, decode_steps=args.decode_steps)
        elif args.command == "bench":
            from engines._bench import bench  # noqa: PLC0415

            config = args.config or {"llama-layer": "llama3-8b", "kda-layer": "kimi-linear"}.get(args.engine)
            result = bench(args.engine, config=config, threads=args.threads, rounds=args.rounds, registry=registry,
                           plans={"requested": plan} if plan else None, prompt=args.prompt, decode_steps=args.decode_steps)
        else:
            from engines.registry import make_engine  # noqa: PLC0415

            eng = make_engine(args.engine, config=args.config, registry=registry, target=target)
            p = eng.plan(plan)
            result = {"engine": args.engine, "plan": p.to_dict(), "graph": eng.describe(p)}
            for rows in result["graph"].values():
                for r in rows:
                    r.get("kernel", {}).pop("source", None)
    except (ValueError, ImportError, CompileError) as exc:  # bad input; an engine whose extra is not installed
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except MemoryError:
        print("error: the run does not fit in memory: try a smaller --prompt, --decode-steps or --config",
              file=sys.stderr)
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
