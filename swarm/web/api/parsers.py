"""Request parsers of the API: DRF's JSON parser, with over-nested bodies answered 400."""

from __future__ import annotations

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser as _DrfJSONParser


class JSONParser(_DrfJSONParser):
    """DRF's :class:`rest_framework.parsers.JSONParser`; a body nested deeper than Python's
    recursion limit (e.g. 100,000 ``[``) is a :class:`ParseError` (400), not a server error.

    Raises:
        ParseError: malformed or over-nested JSON.
    """

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply") from None
