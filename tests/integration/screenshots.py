"""Full-page screenshots that cannot hang a test on Chromium's font wait.

Playwright's ``page.screenshot`` first waits for ``document.fonts.ready``; a font load that
never settles (or a utility world that never reports it) holds the call until its timeout,
although the page itself has rendered. The screenshot is evidence for a person, not what a test
asserts, so after a short wait it is taken through the DevTools protocol, which does not wait
for fonts (``Page.captureScreenshot``, https://chromedevtools.github.io/devtools-protocol/tot/Page/).
"""

from __future__ import annotations

import base64
from pathlib import Path

from playwright.sync_api import Page
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

FONT_WAIT_MS = 20_000


def full_page_png(page: Page, path: Path, timeout_ms: int = FONT_WAIT_MS) -> str:
    """Write a PNG of the whole page to ``path`` (at the page's device scale through
    Playwright, at scale 1 through the DevTools protocol).

    Returns ``"playwright"`` when Playwright's own screenshot finished within ``timeout_ms``
    (ms), ``"devtools"`` when it timed out and the DevTools protocol took it instead.
    Raises Playwright's errors other than its timeout, and the protocol's errors."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        page.screenshot(path=path, full_page=True, timeout=timeout_ms)
        return "playwright"
    except PlaywrightTimeoutError:
        pass
    cdp = page.context.new_cdp_session(page)
    try:
        size = cdp.send("Page.getLayoutMetrics")["cssContentSize"]
        shot = cdp.send("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
        })
    finally:
        cdp.detach()
    path.write_bytes(base64.b64decode(shot["data"]))
    return "devtools"
