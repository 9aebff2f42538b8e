"""``python -m engines.serve_main --port 8100``: the embeddings server without Django (no
production kernels from the database: every operator runs the kernel its plan names, or the
baseline). ``python manage.py engine serve`` is the same server with the production registry."""

from __future__ import annotations

import argparse
import json
import os


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m engines.serve_main")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8100)
    p.add_argument("--plan", default="{}", help="plan parameters as JSON")
    p.add_argument("--max-batch", type=int, default=64, help="inputs per engine pass")
    p.add_argument("--max-batch-tokens", type=int, default=1024, help="tokens per engine pass")
    p.add_argument("--request-timeout-s", type=float, default=120.0, help="each request's deadline (s)")
    args = p.parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    from engines.minilm import MiniLM  # noqa: PLC0415
    from engines.serve import Limits, make_app, serve  # noqa: PLC0415

    try:
        limits = Limits(max_batch=args.max_batch, max_batch_tokens=args.max_batch_tokens,
                        request_timeout_s=args.request_timeout_s)
    except ValueError as exc:
        p.error(str(exc))
    app = make_app(MiniLM(), json.loads(args.plan), limits)
    print(f"serving all-MiniLM-L6-v2 on http://{args.host}:{args.port}/v1/embeddings", flush=True)
    serve(app, args.host, args.port)


if __name__ == "__main__":
    main()
