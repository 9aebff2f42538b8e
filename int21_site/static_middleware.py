"""Static files served by ServeStatic, a missing one answered 404 in every mode."""

from django.http import Http404
from servestatic.middleware import ServeStaticMiddleware
from servestatic.responders import MissingFileError


class StaticFilesMiddleware(ServeStaticMiddleware):
    """ServeStatic's middleware (asynchronous: under ASGI a file streams rather than being read
    whole), except that with ``DEBUG`` on a static URL that names no file is a 404, as it is
    with ``DEBUG`` off, not ServeStatic's ``MissingFileError`` (a 500 with a traceback)."""

    async def __call__(self, request):
        try:
            return await super().__call__(request)
        except MissingFileError as exc:
            raise Http404(str(exc)) from None
