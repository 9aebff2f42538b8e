"""The site's answer to a bad request (``handler400``): JSON under ``/api/``, a page elsewhere,
and for a body over ``DATA_UPLOAD_MAX_MEMORY_SIZE`` a message that gives the limit."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.utils.html import escape


def too_big_message() -> str:
    """What a request over the body limit is told, with the limit in bytes and MB (1e6 B)."""
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return (f"the request body is larger than the limit of {limit} bytes ({limit / 1e6:.1f} MB, "
            "DATA_UPLOAD_MAX_MEMORY_SIZE): send less, e.g. a smaller design space or fewer items per request")


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """400: ``{"detail": why}`` for API paths, a short HTML page for the others."""
    if isinstance(exception, RequestDataTooBig):
        why = too_big_message()
    else:
        why = "the request could not be read (malformed or incomplete)"
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": why}, status=400)
    return HttpResponseBadRequest(
        f"<!doctype html><html lang=\"en\"><head><title>Bad Request (400)</title></head><body>"
        f"<h1>Bad Request (400)</h1><p>{escape(why[0].upper() + why[1:])}.</p>"
        f"<p><a href=\"javascript:history.back()\">Back</a></p></body></html>")
