"""The engines page in real Chromium against the real processes: register an engine from the
form (a bad plan is refused with the reason and nothing typed is lost), then benchmark it with
the button; the worker of its target runs the benchmark and the page shows the result."""

import os
import re

import pytest

from tests.integration.test_browser import Watched, browser  # noqa: F401  (the browser fixture)
from tests.integration.test_browser_layout import MEASURE

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def test_register_and_benchmark_an_engine_from_the_page(stack, demo_user, browser):  # noqa: F811
    from swarm.engine_registry.models import ProductionEngine

    w = Watched(browser, stack)
    page = w.page
    page.set_viewport_size({"width": 1024, "height": 768})
    w.login(*demo_user)
    page.click("nav a:text-is('Engines')")
    page.click("#register-engine summary")
    page.select_option("#register-form select[name=engine]", "kda-layer")
    page.fill("#register-form input[name=config]", "small")
    page.fill("#register-form textarea[name=plan]", '{"FUSE_QKV": 3}')
    page.fill("#register-form input[name=name]", "kda from the page")
    page.click("#register-form button[type=submit]")
    # refused with the reason; the form comes back open with everything typed
    error = page.inner_text("#register-form .field-error")
    assert "plan parameter FUSE_QKV=3 must be one of [0, 1]" in error, error
    assert page.input_value("#register-form textarea[name=plan]") == '{"FUSE_QKV": 3}'
    assert page.input_value("#register-form input[name=name]") == "kda from the page"
    assert page.input_value("#register-form input[name=config]") == "small"
    assert page.input_value("#register-form select[name=engine]") == "kda-layer"
    assert not ProductionEngine.objects.exists()
    w.shot("engines_register_refused")

    page.fill("#register-form textarea[name=plan]", '{"FUSE_QKV": 0}')
    page.click("#register-form button[type=submit]")
    page.wait_for_selector(".msg-success")
    assert "Registered production engine kda from the page" in page.inner_text(".msg-success")
    pe = ProductionEngine.objects.get(name="kda from the page")
    assert pe.engine == "kda-layer" and pe.config == "small" and pe.plan["FUSE_QKV"] == 0
    row = f"#engine-{pe.pk}"
    assert "never measured" in page.inner_text(row)

    page.fill(f"{row} input[name=reps]", "1")
    page.click(f"{row} .bench-form button")
    page.wait_for_selector(".msg-success")
    assert re.search(r"Benchmark #\d+ of kda from the page queued", page.inner_text(".msg-success"))
    assert page.locator(f"{row} .bench-form button").is_disabled()
    w.shot("engines_benchmark_queued")
    # the page reloads itself until the worker has stored the result
    page.wait_for_selector(f"{row} .bench-status .status-ok", timeout=300_000)
    result = page.inner_text(f"{row} .bench-result")
    assert re.search(r"decode \d+\.\d{3}", result) and re.search(r"prefill \d+\.\d{3}", result), result
    b = pe.benchmarks.get()
    assert b.status == "ok" and b.metrics["decode_ms"] > 0 and b.trigger == "manual"
    m = page.evaluate(MEASURE)
    assert m["page"][0] <= m["page"][1] and m["panels"] == [], m
    w.shot("engines_benchmark_done")
    # the engine's own page shows it in its history
    page.click(f"{row} a:text-is('kda from the page')")
    page.wait_for_selector("#history-chart .main-svg")
    assert "requested from the engines page by engineer" in page.inner_text("main")
    w.shot("engine_detail_benchmarked")
    w.check_clean()
