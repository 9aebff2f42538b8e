"""A page whose font never loads still gets its full-page screenshot, without the test hanging."""

import struct

import pytest

from tests.integration.screenshots import full_page_png
from tests.integration.test_browser import browser  # noqa: F401  (the browser fixture)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(120)]

PAGE = "<p style='font-family:Slow'>tile 128x64</p><div style='height:2500px;background:#ddd'></div>"


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])  # IHDR width, height


def test_a_font_that_never_loads_falls_back_to_the_devtools_screenshot(browser, tmp_path):  # noqa: F811
    page = browser.new_page(viewport={"width": 1024, "height": 768})
    try:
        page.route("**/never.woff2", lambda route: None)  # the request is never answered
        page.set_content(PAGE)
        page.evaluate("""() => { const f = new FontFace('Slow', 'url(https://fonts.invalid/never.woff2)');
                                 document.fonts.add(f); f.load().catch(() => {}); }""")
        assert page.evaluate("document.fonts.status") == "loading"

        assert full_page_png(page, tmp_path / "shot.png", timeout_ms=2_000) == "devtools"
    finally:
        page.close()
    width, height = _png_size((tmp_path / "shot.png").read_bytes())
    assert width == 1024 and height >= 2500  # the whole page, not the viewport


def test_a_page_without_a_pending_font_takes_playwrights_screenshot(browser, tmp_path):  # noqa: F811
    page = browser.new_page(viewport={"width": 1024, "height": 768})
    try:
        page.set_content(PAGE)
        assert full_page_png(page, tmp_path / "shot.png") == "playwright"
    finally:
        page.close()
    width, height = _png_size((tmp_path / "shot.png").read_bytes())
    assert width == 1024 and height >= 2500
