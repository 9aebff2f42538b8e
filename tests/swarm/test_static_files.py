"""Static files: plotly.js from the installed package, compressed once collectstatic has run."""

from django.core.management import call_command
from django.test import Client


def test_plotly_is_served_from_the_package_without_collectstatic():
    r = Client().get("/static/plotly/plotly.min.js", HTTP_ACCEPT_ENCODING="gzip")
    assert r.status_code == 200 and b"plotly" in b"".join(r.streaming_content)[:2000].lower()


def test_after_collectstatic_the_compressed_copies_are_served(tmp_path, settings):
    settings.STATIC_ROOT = str(tmp_path)
    call_command("collectstatic", "--noinput", "-v", "0")
    settings.WHITENOISE_USE_FINDERS = False  # as scripts/demo and the production commands serve
    plain = Client().get("/static/plotly/plotly.min.js")
    gz = Client().get("/static/plotly/plotly.min.js", HTTP_ACCEPT_ENCODING="gzip")
    assert plain.status_code == gz.status_code == 200
    assert gz["Content-Encoding"] == "gzip" and "Accept-Encoding" in gz["Vary"]
    assert int(gz["Content-Length"]) < int(plain["Content-Length"]) / 2  # 1.5 MB of 4.8 MB
