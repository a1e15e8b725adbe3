"""Fixtures for the browser tests: serve the built book on 127.0.0.1 and drive Debian's Chromium.

The built book is ``_build/html`` (``bash scripts/build_book.sh``). When it is missing, or when Chromium
or Playwright is not installed, every browser test is skipped with the reason.
"""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import threading
from urllib.parse import urlparse

import pytest

from bookpaths import BUILD, CHROMIUM, CHROMIUM_ARGS  # noqa: E402


def _skip_reason() -> str | None:
    if not (BUILD / "index.html").is_file():
        return f"built book not found at {BUILD}: run `bash scripts/build_book.sh` first"
    if not (os.path.isfile(CHROMIUM) or shutil.which(CHROMIUM)):
        return f"Chromium not found at {CHROMIUM}: run `bash scripts/setup.sh` (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright (python package) is not installed: pip install -e '.[test]'"
    return None


def pytest_collection_modifyitems(config, items):
    reason = _skip_reason()
    for item in items:
        if "browser" in item.keywords and reason:
            item.add_marker(pytest.mark.skip(reason=reason))


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - signature from the base class
        pass


@pytest.fixture(scope="session")
def book_url():
    """Base URL (ending in '/') of _build/html served by a local http.server on a free port."""
    handler = functools.partial(_QuietHandler, directory=str(BUILD))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def browser():
    """Headless Debian Chromium driven by Playwright (never `playwright install`)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


class Visit:
    """One page opened in a fresh browser context, with everything it did recorded."""

    def __init__(self, browser, url: str, width: int = 1280):
        self.context = browser.new_context(viewport={"width": width, "height": 900})
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.outside: list[str] = []
        self.failed: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        self.page.on(
            "console",
            lambda msg: self.errors.append(f"console.{msg.type}: {msg.text} @ {msg.location}")
            if msg.type == "error"
            else None,
        )
        self.page.on("requestfailed", lambda req: self.failed.append(f"{req.url} ({req.failure})"))
        self.page.on(
            "response",
            lambda resp: self.failed.append(f"{resp.url} (HTTP {resp.status})") if resp.status >= 400 else None,
        )
        self.page.route("**/*", self._route)
        self.page.goto(url, wait_until="load", timeout=60_000)
        self.page.wait_for_load_state("networkidle", timeout=60_000)
        # Let MathJax finish typesetting (its startup promise resolves after the first typeset).
        self.page.evaluate(
            "() => (window.MathJax && MathJax.startup && MathJax.startup.promise)"
            " ? MathJax.startup.promise.then(() => true) : null"
        )

    def _route(self, route):
        parsed = urlparse(route.request.url)
        if parsed.hostname == "127.0.0.1" and parsed.path == "/favicon.ico":
            route.fulfill(status=204, body=b"")  # the browser's own request; the book has no favicon
            return
        if parsed.scheme in ("http", "https", "ws", "wss") and parsed.hostname != "127.0.0.1":
            self.outside.append(route.request.url)
            route.abort()
        else:
            route.continue_()

    def close(self):
        self.context.close()


@pytest.fixture
def visit(browser, book_url):
    opened: list[Visit] = []

    def _open(page: str, width: int = 1280) -> Visit:
        v = Visit(browser, book_url + page, width)
        opened.append(v)
        return v

    yield _open
    for v in opened:
        v.close()
