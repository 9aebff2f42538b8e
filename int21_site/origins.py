"""Websocket origin check: a run socket is opened only by the site's own pages.

Browsers send cookies with a cross-site websocket handshake, so the ``Origin`` header is what
keeps another site (another port of the same host included: an origin is scheme, host and
port, RFC 6454 section 4) from reading a run with the user's session.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host

_DEFAULT_PORT = {"http": 80, "https": 443}
_HTTP_SCHEME = {"ws": "http", "wss": "https"}


def origin_tuple(url: str) -> tuple[str, str, int] | None:
    """``(scheme, host, port)`` of an origin such as ``https://example.com:8443``, the port
    defaulted by scheme (80, 443) and the host lowercased; None for anything else (``null``,
    a path, another scheme, a bad port)."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORT or not parts.hostname or parts.path not in ("", "/") or parts.query:
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORT[scheme]


def allowed_origins(scope: dict) -> set[tuple[str, str, int]]:
    """The socket's own origin (the ``Host`` it was opened on, with the scheme of its page:
    ``ws`` is ``http``, ``wss`` is ``https``) when that host is in ``ALLOWED_HOSTS``, plus
    ``CSRF_TRUSTED_ORIGINS`` (the origins behind a TLS-terminating proxy)."""
    headers = dict(scope.get("headers") or [])
    host = headers.get(b"host", b"").decode("latin1")
    allowed = {o for o in map(origin_tuple, settings.CSRF_TRUSTED_ORIGINS) if o}
    domain, _ = split_domain_port(host)
    scheme = _HTTP_SCHEME.get(scope.get("scheme", "ws"), "http")
    own = origin_tuple(f"{scheme}://{host}") if host else None
    if own and domain and validate_host(domain, settings.ALLOWED_HOSTS):
        allowed.add(own)
    return allowed


class SameOriginValidator:
    """ASGI middleware for websockets: the handshake's ``Origin`` must equal one of
    :func:`allowed_origins` in scheme, host and port; otherwise (no ``Origin`` included) the
    handshake is refused with HTTP 403."""

    def __init__(self, application) -> None:
        self.application = application

    async def __call__(self, scope, receive, send):
        if scope["type"] != "websocket":
            raise ValueError(f"SameOriginValidator guards websockets, not {scope['type']!r}")
        origin = dict(scope.get("headers") or []).get(b"origin")
        parsed = origin_tuple(origin.decode("latin1")) if origin is not None else None
        if parsed is not None and parsed in allowed_origins(scope):
            return await self.application(scope, receive, send)
        return await WebsocketDenier()(scope, receive, send)
