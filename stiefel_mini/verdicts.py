"""Deprecated: the verdicts moved to :mod:`stiefel_mini.evidence`; these names forward to it.

``claim_verdicts`` is :func:`stiefel_mini.evidence.verdicts`, ``verdict_table_html`` is
:func:`stiefel_mini.evidence.summary_html` and ``verdict_box_html`` is
:func:`stiefel_mini.evidence.box_html`; each call warns with a ``DeprecationWarning``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

from stiefel_mini import evidence

__all__ = ["claim_verdicts", "verdict_table_html", "verdict_box_html"]


def _warn(old: str, new: str) -> None:
    warnings.warn(f"stiefel_mini.verdicts.{old} is deprecated; use stiefel_mini.evidence.{new}",
                  DeprecationWarning, stacklevel=3)


def claim_verdicts(root: str | Path | None = None) -> list[dict]:
    """Deprecated alias of :func:`stiefel_mini.evidence.verdicts`."""
    _warn("claim_verdicts", "verdicts")
    return evidence.verdicts(root)


def verdict_table_html(rows: list[dict], prefix: str = "") -> str:
    """Deprecated alias of :func:`stiefel_mini.evidence.summary_html`."""
    _warn("verdict_table_html", "summary_html")
    return evidence.summary_html(rows, prefix)


def verdict_box_html(rows: list[dict], chapter: str) -> str:
    """Deprecated alias of :func:`stiefel_mini.evidence.box_html`."""
    _warn("verdict_box_html", "box_html")
    return evidence.box_html(rows, chapter)
