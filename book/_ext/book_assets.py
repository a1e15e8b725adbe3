"""Small Sphinx fixes for this book's HTML pages.

- Some extensions (sphinx-thebe, sphinx-togglebutton) register inline scripts after the HTML builder
  is initialised, and with this Sphinx/Jupyter Book combination those scripts reach every page twice;
  a repeated ``const`` declaration is then a JavaScript error. This extension removes exact duplicate
  script entries from each page's ``script_files`` just before the page is rendered.
- The ipywidgets HTML manager typesets widget labels through the MathJax 2 API
  (``MathJax.Hub.Queue``), while Sphinx loads MathJax 3, so rendering any widget with a description
  would throw. A few lines of inline JavaScript give MathJax 3 a ``Hub.Queue`` that typesets the
  element with ``MathJax.typesetPromise``.
"""

from __future__ import annotations


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
    app.add_js_file(None, body=MATHJAX2_SHIM, priority=510)
    app.connect("html-page-context", dedupe_scripts, priority=999)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
