"""Static files: plotly.js from the installed package, compressed once collectstatic has run,
under content-hashed names cached for good when served collected; the run page's ES modules
import each other under those names."""

import asyncio
import os
import posixpath
import re
import subprocess
import sys

from django.contrib.staticfiles.storage import staticfiles_storage
from django.core.management import call_command
from django.test import AsyncClient, Client


def test_plotly_is_served_from_the_package_without_collectstatic():
    r = Client().get("/static/plotly/plotly.min.js", HTTP_ACCEPT_ENCODING="gzip")
    assert r.status_code == 200 and b"plotly" in b"".join(r)[:2000].lower()


def test_a_static_file_streams_under_asgi():
    async def fetch():
        r = await AsyncClient().get("/static/plotly/plotly.min.js")
        # Django's ASGI handler reads a synchronous iterator whole before sending it, with a warning
        assert r.is_async, "served through a synchronous iterator"
        return r, b"".join([chunk async for chunk in r.streaming_content])

    r, body = asyncio.run(fetch())
    assert r.status_code == 200 and len(body) > 1_000_000 and b"plotly" in body[:2000].lower()


def test_a_missing_static_file_is_a_404_with_debug_on_or_off(settings):
    for debug in (False, True):
        settings.DEBUG = debug
        assert Client().get("/static/js/no-such-module.js").status_code == 404, debug


def test_after_collectstatic_the_compressed_copies_are_served(tmp_path, settings):
    settings.STATIC_ROOT = str(tmp_path)
    call_command("collectstatic", "--noinput", "-v", "0")
    settings.SERVESTATIC_USE_FINDERS = False  # as scripts/demo and the production commands serve
    plain = Client().get("/static/plotly/plotly.min.js")
    gz = Client().get("/static/plotly/plotly.min.js", HTTP_ACCEPT_ENCODING="gzip")
    assert plain.status_code == gz.status_code == 200
    assert gz["Content-Encoding"] == "gzip" and "Accept-Encoding" in gz["Vary"]
    assert int(gz["Content-Length"]) < int(plain["Content-Length"]) / 2  # 1.5 MB of 4.8 MB


def _collected(tmp_path, settings):
    """Static files collected and served as scripts/demo and production do (SERVESTATIC_USE_FINDERS=0)."""
    settings.STATIC_ROOT = str(tmp_path)
    settings.SERVESTATIC_USE_FINDERS = False
    settings.STORAGES = {**settings.STORAGES,
                         "staticfiles": {"BACKEND": "int21_site.static_storage.ManifestStorage"}}
    call_command("collectstatic", "--noinput", "-v", "0")


def test_collected_files_have_hashed_names_cached_for_good(tmp_path, settings, db):
    _collected(tmp_path, settings)
    page = Client().get("/login/").content.decode()
    css = re.search(r'href="(/static/css/factory\.[0-9a-f]{12}\.css)"', page)
    assert css, "the page links the stylesheet under its content-hashed name"
    r = Client().get(css.group(1))
    assert r.status_code == 200
    assert r["Cache-Control"] == "max-age=315360000, public, immutable"
    plotly_js = Client().get("/static/" + staticfiles_storage.stored_name("plotly/plotly.min.js"),
                             HTTP_ACCEPT_ENCODING="gzip")
    assert plotly_js.status_code == 200 and "immutable" in plotly_js["Cache-Control"]
    assert plotly_js["Content-Encoding"] == "gzip"
    plain = Client().get("/static/css/factory.css")  # an unversioned name may change: short cache only
    assert plain.status_code == 200 and "immutable" not in plain["Cache-Control"]


def test_the_settings_pick_hashed_names_when_serving_collected_files():
    code = ("import django; django.setup(); from django.conf import settings; "
            "print(settings.STORAGES['staticfiles']['BACKEND'])")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "int21_site.settings"}
    env = {k: v for k, v in env.items() if not k.endswith("_USE_FINDERS")}

    def backend(**flags) -> str:
        return subprocess.run([sys.executable, "-c", code], env={**env, **flags},
                              capture_output=True, text=True, check=True).stdout.strip()

    assert backend(SERVESTATIC_USE_FINDERS="0") == "int21_site.static_storage.ManifestStorage"
    assert backend(SERVESTATIC_USE_FINDERS="1") == backend() == "servestatic.storage.CompressedStaticFilesStorage"
    # the setting's earlier name still counts where the new one is not set
    assert backend(WHITENOISE_USE_FINDERS="0") == "int21_site.static_storage.ManifestStorage"
    assert backend(WHITENOISE_USE_FINDERS="maybe", SERVESTATIC_USE_FINDERS="1") == \
        "servestatic.storage.CompressedStaticFilesStorage"  # not read at all once the new name is set


IMPORT = re.compile(r"""^(?:import|export)\s[^;]*?\sfrom\s+"([^"]+)";?$""", re.M)


def test_the_collected_run_page_loads_its_whole_module_graph(tmp_path, settings, owner, small_goal):
    from swarm.models import Run

    _collected(tmp_path, settings)
    run = Run.objects.create(goal=small_goal, budget=1, seed=1, space=small_goal.space)
    client = Client()
    client.force_login(owner)
    page = client.get(f"/runs/{run.pk}/").content.decode()
    entry = re.search(r'<script type="module" src="(/static/js/run/main\.[0-9a-f]{12}\.js)"', page)
    assert entry, "the run page loads its entry module under its content-hashed name"
    seen, todo = set(), [entry.group(1)]
    while todo:
        url = todo.pop()
        if url in seen:
            continue
        seen.add(url)
        r = client.get(url)
        assert r.status_code == 200, url
        assert "immutable" in r["Cache-Control"], url
        text = b"".join(r).decode()
        for spec in IMPORT.findall(text):
            assert spec.startswith("."), (url, spec)
            target = posixpath.normpath(posixpath.join(posixpath.dirname(url), spec))
            assert re.search(r"\.[0-9a-f]{12}\.js$", target), f"{url} imports {spec} under its plain name"
            todo.append(target)
    modules = {re.sub(r"\.[0-9a-f]{12}\.js$", ".js", u) for u in seen}
    on_disk = {"/static/" + p.relative_to(settings.BASE_DIR / "static").as_posix()
               for p in (settings.BASE_DIR / "static" / "js" / "run").rglob("*.js")}
    assert modules == on_disk, "every module of static/js/run/ is reached from main.js, and nothing else"
