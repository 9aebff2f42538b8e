"""The engineer's main flow in real Chromium: sign in, create a goal, run it, watch the chart
fill live, promote the best candidate, find it in production. Nothing loads from outside."""

import os
import shutil
from urllib.parse import urlparse

import pytest

from tests.integration.conftest import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]

# Playwright's sync API runs an event loop in this thread; the ORM is used only before it starts.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=shutil.which("chromium") or shutil.which("chromium-browser"),
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        yield b
        b.close()


def test_sign_in_create_goal_run_watch_promote(stack, demo_user, browser):
    shots = ARTIFACTS / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    app_host = urlparse(stack).netloc
    outside = []
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.on("request", lambda r: urlparse(r.url).netloc not in (app_host, "") and not r.url.startswith("data:")
            and outside.append(r.url))
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))

    page.goto(stack + "/")
    page.fill("input[name=username]", demo_user[0])
    page.fill("input[name=password]", demo_user[1])
    page.click("button[type=submit]")
    page.wait_for_url(stack + "/")
    page.screenshot(path=shots / "goals.png", full_page=True)

    page.click("text=New goal")
    page.fill("input[name=name]", "RMSNorm small, browser")
    page.select_option("select[name=shape_set]", "test-small")
    # a restriction that is not allowed is rejected in place, nothing saved
    page.fill("textarea[name=restrictions]", "open('/etc/passwd')")
    page.click("button:has-text('Create goal')")
    assert "not allowed" in page.inner_text(".has-error")
    page.fill("textarea[name=restrictions]", "UNROLL * VEC <= 32")
    page.screenshot(path=shots / "goal_form.png", full_page=True)
    page.click("button:has-text('Create goal')")
    page.wait_for_selector("text=Start a run")
    page.screenshot(path=shots / "goal_detail.png", full_page=True)

    page.fill("input[name=budget]", "6")
    page.fill("input[name=batch_size]", "3")
    page.click("button:has-text('Start run')")
    page.wait_for_selector("#frontier-chart .main-svg")
    page.wait_for_function("document.querySelector('#ws-state').textContent === 'connected'", timeout=15_000)
    # points arrive over the websocket, without reloading
    page.wait_for_function("Number(document.querySelector('#n-points').textContent) >= 1", timeout=120_000)
    page.wait_for_function("document.querySelector('#run-state').textContent === 'finished'", timeout=150_000)
    n_points = page.evaluate("document.getElementById('frontier-chart').data[0].x.length + "
                             "document.getElementById('frontier-chart').data[1].x.length")
    assert n_points >= 1
    assert page.evaluate("document.getElementById('frontier-chart').data[2].x.length") >= 1  # frontier
    page.screenshot(path=shots / "run.png", full_page=True)

    page.click("#best-table tbody tr:first-child a")
    page.wait_for_selector("text=Promote to production")
    candidate_url = page.url
    page.screenshot(path=shots / "candidate.png", full_page=True)
    page.click("#promote-form button")
    page.wait_for_selector("#production-table")
    assert urlparse(candidate_url).path.rstrip("/").rsplit("/", 1)[1] in page.inner_text("#production-table")
    assert "test-small" in page.inner_text("#production-table")
    page.screenshot(path=shots / "production.png", full_page=True)

    api = page.goto(stack + "/api/production/rmsnorm/cpu-x86_64/test-small/").json()
    assert api["evidence"]["status"] == "ok"

    assert outside == [], f"pages requested outside the app: {outside}"
    assert errors == [], errors
