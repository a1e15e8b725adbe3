"""Small Sphinx fixes for this book's HTML pages.

- Some extensions (sphinx-thebe, sphinx-togglebutton) register inline scripts after the HTML builder
  is initialised, and with this Sphinx/Jupyter Book combination those scripts reach every page twice;
  a repeated ``const`` declaration is then a JavaScript error. This extension removes exact duplicate
  script entries from each page's ``script_files`` just before the page is rendered.
- The ipywidgets HTML manager typesets widget labels through the MathJax 2 API
  (``MathJax.Hub.Queue``), while Sphinx loads MathJax 3, so rendering any widget with a description
  would throw. A few lines of inline JavaScript give MathJax 3 a ``Hub.Queue`` that typesets the
  element with ``MathJax.typesetPromise``.
- The book serves MathJax and the ipywidgets HTML manager itself (no CDN). At the start of every
  build this extension copies them from ``node_modules`` (installed by ``npm ci`` from the committed
  lock file) into ``_build/offline_static/offline/``, which ``html_static_path`` publishes as
  ``_static/offline/``; ``_config.yml`` points ``mathjax_path`` and ``nb_ipywidgets_js`` there. A
  missing ``node_modules`` stops the build with the command to run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sphinx.errors import ExtensionError

# where each asset comes from (relative to the repository root) -> where it goes under _static/offline
OFFLINE_ASSETS = {
    "mathjax": "node_modules/mathjax/es5",
    "jupyter-widgets": "node_modules/@jupyter-widgets/html-manager/dist",
}


def copy_offline_assets(app, config):
    root = Path(app.srcdir)
    missing = [src for src in OFFLINE_ASSETS.values() if not (root / src).is_dir()]
    if missing:
        raise ExtensionError(
            f"offline book assets not found: {missing}. Run `npm ci` in {root} "
            "(or `bash scripts/setup.sh`), then build again with `bash scripts/build_book.sh`"
        )
    dest = root / "_build" / "offline_static" / "offline"
    shutil.rmtree(dest, ignore_errors=True)
    for name, src in OFFLINE_ASSETS.items():
        # MathJax finds its components and fonts relative to its own URL; the HTML manager's
        # embed.js (no RequireJS needed) finds its font files the same way. Source maps are skipped.
        shutil.copytree(root / src, dest / name, ignore=shutil.ignore_patterns("*.map"))


def _key(script) -> tuple:
    attrs = getattr(script, "attributes", {}) or {}
    # the same inline script can arrive with filename None (registry) and "" (builder)
    filename = getattr(script, "filename", str(script)) or ""
    return (filename, tuple(sorted((k, str(v)) for k, v in attrs.items())))


def dedupe_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for s in scripts:
        k = _key(s)
        if k in seen:
            continue
        seen.add(k)
        unique.append(s)
    context["script_files"] = unique


MATHJAX2_SHIM = """
(function () {
  function shim() {
    var mj = window.MathJax;
    if (!mj || !mj.version || mj.Hub) return;
    mj.Hub = {
      Queue: function (cmd) {
        var el = Array.isArray(cmd) ? cmd[2] : undefined;
        if (!mj.startup || !mj.startup.promise) return;
        mj.startup.promise = mj.startup.promise
          .then(function () { return mj.typesetPromise(el ? [el] : undefined); })
          .catch(function (err) { console.warn("MathJax typeset of a widget failed", err); });
      }
    };
  }
  shim();
  document.addEventListener("DOMContentLoaded", shim);
})();
"""


def setup(app):
    app.connect("config-inited", copy_offline_assets)
    app.add_js_file(None, body=MATHJAX2_SHIM, priority=510)
    app.connect("html-page-context", dedupe_scripts, priority=999)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
