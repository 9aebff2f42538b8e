""""``manage.py serve``: the whole factory in one process (embedded mode).

Uvicorn serves HTTP and websockets on the main thread; a Celery worker consumes every
target queue on a thread, over kombu's ``memory://`` transport. Work left by a previous
process (queued candidates, claims of dead workers, runs stuck between generations) is
recovered at start and every minute, so no queued work is lost.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading

from celery import current_app
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from kernels.argtypes import bounded_int
from swarm.runs import events, sweeper
from swarm.runs.dispatch import EMBEDDED_QUEUE

log = logging.getLogger("swarm")

EMBEDDED_QUEUES = [EMBEDDED_QUEUE, "control"]


class Command(BaseCommand):
    help = "Serve the web app with an in-process worker (embedded mode: no REDIS_URL)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=_port, default=8000, help="TCP port, 1-65535 (default 8000)")

    def handle(self, *args, **opts) -> None:
        if not settings.EMBEDDED:
            raise CommandError(
                "REDIS_URL is set (production mode): run `uvicorn int21_site.asgi:application` and one "
                "`celery -A int21_site worker -Q target.<target> -c 1` per target instead"
            )
        sock = listening_socket(opts["host"], opts["port"])  # bound before anything starts: a bad address starts nothing
        import uvicorn

        start_embedded_worker()
        sweeper.start()  # recovers queued work left by a previous process, then every minute
        self.stdout.write(f"Kernel Factory on {url_of(sock)}  (embedded mode)", ending="\n")
        self.stdout.flush()
        config = uvicorn.Config("int21_site.asgi:application", host=opts["host"], port=opts["port"],
                                log_level="warning", lifespan="off")
        server = uvicorn.Server(config)

        async def serve() -> None:
            # The loop that will serve websockets, known before the first one connects, so that
            # every run's events are stored from the start (a page reads the ones it missed).
            events.bind_server_loop(asyncio.get_running_loop())
            await server.serve(sockets=[sock])

        try:
            with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:
                runner.run(serve())
        except KeyboardInterrupt:  # Ctrl-C: uvicorn has shut down; a clean exit, as uvicorn.run's
            pass
        finally:
            sock.close()


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (IPv4 or IPv6, as ``host`` resolves), for
    uvicorn to listen on.

    Raises:
        CommandError: the host does not resolve (exit status 2, a usage error), or the
            address cannot be bound (in use, not an address of this machine; exit status 1).
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except (OSError, UnicodeError) as exc:
        raise CommandError(f"cannot listen on host {host!r}: {exc}", returncode=2) from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a restart reuses the port at once
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    """``http://host:port/`` of a bound socket (an IPv6 host in brackets, RFC 3986)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}/" if sock.family == socket.AF_INET6 else f"http://{host}:{port}/"


#: A TCP port number, 1-65535 (argparse ``type``).
_port = bounded_int(1, 65535, noun="a port number", out_of_range="a port is {lo}-{hi}, not {value}")


def start_embedded_worker() -> threading.Thread:
    """Start a solo-pool Celery worker of the current Celery app (the project's, once Django is
    set up) on a daemon thread, consuming the embedded queues."""
    app = current_app._get_current_object()
    worker = app.WorkController(
        app=app,
        pool_cls="solo",
        concurrency=1,
        queues=EMBEDDED_QUEUES,
        without_heartbeat=True,
        without_mingle=True,
        without_gossip=True,
        loglevel="WARNING",
    )
    thread = threading.Thread(target=worker.start, name="embedded-celery-worker", daemon=True)
    thread.start()
    return thread
