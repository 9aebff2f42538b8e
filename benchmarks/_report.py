"""Where a benchmark's results go: ``<out>/<name>.json`` (the payload), ``<out>/<name>.md``
(a heading, the host and date, the command, the table and the verdict), and stdout (the table and verdict, or
with ``--json`` the payload as one JSON object)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def host_line() -> str:
    """CPU model (``lscpu``) and UTC date, for the report's heading."""
    import platform
    import subprocess

    model = platform.processor() or platform.machine()
    try:
        for line in subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout.splitlines():
            if line.startswith("Model name"):
                model = line.split(":", 1)[1].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return f"{model}, {os.cpu_count()} CPUs, {time.strftime('%Y-%m-%d', time.gmtime())}"


def emit(out: Path, name: str, heading: str, argv: list[str] | None, note: str, payload: dict[str, Any],
         table: str, verdict: str, *, as_json: bool) -> None:
    """Write and print one benchmark's results.

    Args:
        out: results folder (created if missing).
        name: module name of the benchmark, e.g. ``"kernels_limits"``.
        heading: the markdown file's title.
        argv: the command's arguments (default ``sys.argv[1:]``).
        note: what follows the command in the markdown, e.g. ``"40 s on 2 CPUs."``.
        payload: JSON-serialisable results (``default=str`` for the rest).
        table: markdown table; verdict: the target's outcome in one line.
        as_json: print the payload instead of the table.
    """
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(payload, indent=1, default=str))
    command = " ".join([f"python -m benchmarks.{name}", *(sys.argv[1:] if argv is None else argv)])
    (out / f"{name}.md").write_text(
        f"# {heading}\n\nHost: {host_line()}.\n\n`{command}`: {note}\n\n{table}\n\n{verdict}\n")
    if as_json:
        print(json.dumps(payload, indent=1, default=str))
    else:
        print(table)
        print(verdict)
        print(f"took {payload['seconds']:.1f} s")
