"""Streamed downloads that stay streamed under ASGI as under WSGI.

Under ASGI (the production server) Django consumes a synchronous iterator whole before it
sends a byte (and warns so): an export of a long run would be built in memory. There the
chunks are handed over as an asynchronous iterator instead, pulled a batch at a time in
Django's thread for synchronous code, where the database connection of the request lives.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, StreamingHttpResponse

#: Chunks (CSV lines, JSON items) joined into one piece sent per thread hop.
BATCH = 256


def streamed(request: HttpRequest, chunks: Iterator[str], content_type: str, filename: str) -> StreamingHttpResponse:
    """A download of ``chunks`` named ``filename``: asynchronous for an ASGI ``request``,
    the iterator itself otherwise."""
    body = _pulled(chunks) if isinstance(request, ASGIRequest) else chunks
    response = StreamingHttpResponse(body, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response


async def _pulled(chunks: Iterator[str]) -> AsyncIterator[str]:
    take = sync_to_async(lambda: "".join(itertools.islice(chunks, BATCH)), thread_sensitive=True)
    try:
        while piece := await take():
            yield piece
    finally:  # a client gone mid-download: its cursor is closed now, in its own thread
        if hasattr(chunks, "close"):
            await sync_to_async(chunks.close, thread_sensitive=True)()
