"""The database-backed benchmarks' Django: configured on a database of their own, migrated, with
the user ``bench`` / ``bench``, and removed when they end (by an error or SIGTERM too)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path


@contextlib.contextmanager
def bench_django(database_url: str = "", keep: str = "", env: Mapping[str, str] | None = None,
                 engines: bool = True) -> Iterator[Path]:
    """Set up Django for a benchmark; yields its folder (``INT21_VAR_DIR``).

    Args:
        database_url: the database (default: a SQLite file in the folder).
        keep: a folder to use and keep (its SQLite file is reused between invocations);
            default: a temporary folder, removed at the end.
        env: further environment for the settings (e.g. ``SERVESTATIC_USE_FINDERS``).
        engines: whether the demo set-up registers the engines (slower; not every benchmark
            needs them).
    """
    tmp = Path(keep) if keep else Path(tempfile.mkdtemp(prefix="int21-bench-"))
    tmp.mkdir(parents=True, exist_ok=True)
    os.environ.update({"INT21_VAR_DIR": str(tmp), "DATABASE_URL": database_url or f"sqlite:///{tmp / 'bench.sqlite3'}",
                       **(env or {})})
    os.environ.pop("REDIS_URL", None)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "int21_site.settings")
    previous = signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))  # so that the finally runs
    try:
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connections

        call_command("migrate", verbosity=0)
        with open(os.devnull, "w") as quiet:
            call_command("setup_demo", "--username", "bench", "--password", "bench",
                         *(() if engines else ("--no-engines",)), stdout=quiet)
        try:
            yield tmp
        finally:
            connections.close_all()
    finally:
        signal.signal(signal.SIGTERM, previous)
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)
