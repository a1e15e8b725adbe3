"""Paths of the built book, shared by the browser tests and their fixtures."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "_build" / "html"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]


def book_pages() -> list[str]:
    """Every HTML page of the built book, relative to _build/html, sorted."""
    if not BUILD.is_dir():
        return []
    pages = []
    for p in sorted(BUILD.rglob("*.html")):
        rel = p.relative_to(BUILD).as_posix()
        if rel.startswith(("_static/", "_sources/", "_images/", "reports/")):
            continue
        pages.append(rel)
    return pages
