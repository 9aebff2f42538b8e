"""Start the factory's real processes against the test database, for integration tests.

Production mode (REDIS_URL set): ``uvicorn`` serving ``int21_site.asgi`` plus a Celery worker
process on the ``target.cpu-x86_64`` queue. Embedded mode: ``manage.py serve`` alone (its own
in-process worker). Either way the processes see the same database as the test.
"""

from __future__ import annotations

import http.cookiejar
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def database_url(settings_dict: dict) -> str:
    """URL of the test database that pytest-django created."""
    if settings_dict["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{settings_dict['NAME']}"
    user = settings_dict.get("USER") or ""
    password = f":{settings_dict['PASSWORD']}" if settings_dict.get("PASSWORD") else ""
    auth = f"{user}{password}@" if user else ""
    return f"postgres://{auth}{settings_dict['HOST'] or '127.0.0.1'}:{settings_dict['PORT'] or 5432}/{settings_dict['NAME']}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing listening on port {port} after {timeout} s")


def _spawn(args: list[str], env: dict, log: Path) -> subprocess.Popen:
    fh = open(log, "wb")
    return subprocess.Popen(args, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def start_worker(env: dict, log_dir: Path) -> subprocess.Popen:
    """A Celery worker process (prefork, one child) on the cpu target queue."""
    return _spawn(
        [sys.executable, "-m", "celery", "-A", "int21_site", "worker", "-Q", "target.cpu-x86_64",
         "-c", "1", "--without-gossip", "--without-mingle", "-l", "INFO"],
        env, log_dir / "worker.log",
    )


@contextmanager
def factory_stack(db_url: str, log_dir: Path):
    """Yield the base URL of a running factory (server + worker) on the test database."""
    log_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DATABASE_URL": db_url, "EVAL_TIMEOUT_S": "30", "PYTHONUNBUFFERED": "1",
           "SWARM_SWEEP_EVERY_S": "2"}
    port = free_port()
    procs = []
    try:
        if env.get("REDIS_URL"):
            procs.append(start_worker(env, log_dir))
            server = _spawn([sys.executable, "-m", "uvicorn", "int21_site.asgi:application", "--port", str(port),
                             "--lifespan", "off"], env, log_dir / "server.log")
        else:
            server = _spawn([sys.executable, "manage.py", "serve", "--port", str(port)], env, log_dir / "server.log")
        procs.append(server)
        wait_for_port(port, server)
        yield f"http://127.0.0.1:{port}"
    finally:
        for p in reversed(procs):
            _stop(p)


class Browserless:
    """A signed-in HTTP session (cookies + CSRF) against a running factory, with urllib."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))

    def cookie(self, name: str) -> str | None:
        return next((c.value for c in self.jar if c.name == name), None)

    def get(self, path: str) -> str:
        with self.opener.open(self.base + path, timeout=30) as r:
            return r.read().decode()

    def post(self, path: str, data: dict, form_page: str | None = None) -> str:
        """POST a form with the CSRF token of ``form_page`` (default ``path``); return the final URL."""
        page = self.get(form_page or path)
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
        body = urllib.parse.urlencode({**data, "csrfmiddlewaretoken": token.group(1) if token else ""}).encode()
        req = urllib.request.Request(self.base + path, data=body, headers={"Referer": self.base + path, "Origin": self.base})
        with self.opener.open(req, timeout=30) as r:
            return r.geturl()

    def login(self, username: str, password: str) -> None:
        self.post("/login/", {"username": username, "password": password})
        if self.cookie("sessionid") is None:
            raise AssertionError(f"could not sign in as {username}")
