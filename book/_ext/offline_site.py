"""Sphinx extension: make every page work offline and load without console errors.

Loaded through `sphinx.local_extensions` in _config.yml. On each page it

- drops the Thebe scripts (this course runs in Colab, Binder or locally, not in the page):
  Jupyter Book adds them twice, and the second `const THEBE_JS_URL` is a SyntaxError;
- drops exact duplicates among the remaining scripts;
- inserts, before RequireJS, a small script that
  * tells RequireJS where the widget manager's files are, so that its fonts load from
    _static/offline/html-manager instead of a path relative to the page;
  * gives the widget manager the MathJax 2 call it makes (`MathJax.Hub.Queue`) on top of
    MathJax 3, which the site uses;

and on every page it sets the theme's colour mode to "auto" on a first visit, where
pydata-sphinx-theme would otherwise log "Got invalid theme mode" as an error.

The files themselves are put in _static/offline by scripts/vendor_assets.py.
"""

from sphinx.builders.html._assets import _JavaScript

PAGE_SETUP_JS = """
(function () {
  var root = document.documentElement;
  window.require = {paths: {"@jupyter-widgets/html-manager/dist":
                            (root.dataset.content_root || "") + "_static/offline/html-manager"}};
  function hub() {
    return {Queue: function (command) {
      var element = command && command[2];
      if (element && window.MathJax && MathJax.typesetPromise) { MathJax.typesetPromise([element]).catch(function () {}); }
    }};
  }
  function patch() { if (window.MathJax && !window.MathJax.Hub) { window.MathJax.Hub = hub(); } }
  patch();
  document.addEventListener("DOMContentLoaded", patch);
  window.addEventListener("load", patch);
})();
"""


# pydata-sphinx-theme reads the colour mode from localStorage into <html data-mode>, which is
# empty on a first visit; its script then logs an error before falling back to "auto".
THEME_MODE_JS = 'if (!document.documentElement.dataset.mode) { document.documentElement.dataset.mode = "auto"; }'


def _body(script):
    return (getattr(script, "attributes", None) or {}).get("body", "") or ""


def _is_thebe(script):
    return "THEBE_JS_URL" in _body(script) or (script.filename or "").endswith("sphinx-thebe.js")


def clean_scripts(app, pagename, templatename, context, doctree):
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, kept = set(), []
    for script in scripts:
        key = (script.filename, _body(script))
        if _is_thebe(script) or key in seen:
            continue
        seen.add(key)
        if (script.filename or "").endswith("offline/require.js"):
            kept.append(_JavaScript("", body=PAGE_SETUP_JS))
        kept.append(script)
    context["script_files"] = kept


def setup(app):
    app.add_js_file(None, body=THEME_MODE_JS, priority=100)
    app.connect("html-page-context", clean_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
