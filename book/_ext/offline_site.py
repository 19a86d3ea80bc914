"""Sphinx extension: make every page work offline and load without console errors.

Loaded through `sphinx.local_extensions` in _config.yml. On each page it

- drops the Thebe scripts (this course runs in Colab, Binder or locally, not in the page):
  Jupyter Book adds them twice, and the second `const THEBE_JS_URL` is a SyntaxError;
- drops exact duplicates among the remaining scripts;
- takes the theme's Font Awesome script out of every written page (the theme's CSS already draws the icons
  with the Font Awesome webfont);
- inserts, before RequireJS, a small script that
  * tells RequireJS where the widget manager's files are, so that its fonts load from
    _static/offline/html-manager instead of a path relative to the page;
  * gives the widget manager the MathJax 2 call it makes (`MathJax.Hub.Queue`) on top of
    MathJax 3, which the site uses;

and on every page it gives the theme's toggles, search field, colour-mode button and list of references
accessible names that match what they show (A11Y_JS, below), and it sets the theme's colour mode to "auto"
on a first visit, where pydata-sphinx-theme would otherwise log "Got invalid theme mode" as an error.

The files themselves are put in _static/offline by scripts/vendor_assets.py.
"""

import re
from pathlib import Path

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


# Accessibility fixes for what the theme and its extensions put on every page, found by axe-core in
# tests/test_browser.py. Each makes an element's accessible name its visible text (WCAG 2.5.3):
# - sphinx-togglebutton names every solution toggle "Toggle hidden content" while it shows "Show the solution";
# - pydata-sphinx-theme's search field shows "Search Ctrl+K" but is named "Search";
# - its colour-mode button is named "Color mode" but its icons carry the titles "Light", "Dark", "System Settings"
#   (Font Awesome turns them into <svg role="img"> with a <title>; 0.16 puts titles on <span>s): the icons are
#   decoration, hidden from readers;
# - pydata-sphinx-theme 0.16's primary sidebar is a <div>, so its content sits outside any landmark: it becomes
#   a navigation landmark named "Chapters";
# - sphinxcontrib-bibtex's list of references has role="list" without list items, so readers announce an empty
#   list, and gives each entry the role doc-biblioentry, which ARIA 1.2 no longer allows: both roles are dropped;
# - a display equation that scrolls inside its box (book/_static/course.css) must be reachable with the keyboard
#   (axe: scrollable-region-focusable): only those get a tab stop, MathJax keeps formulas out of the tab order; so
#   must a panel's figure, which scrolls in its box on a phone;
# - so must a code block that scrolls sideways inside a fold (a code toggle, a dropdown, a folded listing): the
#   theme gives a scrolling block a tab stop on load and on resize, when a folded one has no width and does not
#   scroll, so the blocks inside a fold get theirs when it opens.
# Toggles and icons are created by scripts on load, so the fixes run on load and whenever the page changes.
A11Y_JS = """
(function () {
  function fix() {
    document.querySelectorAll('[aria-label="Toggle hidden content"], .search-button-field[aria-label]')
      .forEach(function (e) { e.removeAttribute("aria-label"); });
    document.querySelectorAll(".theme-switch-button i, .theme-switch-button svg, .theme-switch-button span")
      .forEach(function (e) {
      e.setAttribute("aria-hidden", "true"); e.removeAttribute("title"); e.removeAttribute("role");
      e.removeAttribute("aria-labelledby");
    });
    document.querySelectorAll('.citation-list[role="list"], .citation[role="doc-biblioentry"]')
      .forEach(function (e) { e.removeAttribute("role"); });
    document.querySelectorAll(".theme-switch-button svg title").forEach(function (e) { e.remove(); });
    // a display equation wider than its column scrolls inside its box (course.css): a keyboard user can reach it
    // and so is a panel's figure, which keeps its width on a phone and scrolls in its box (mha_lessons' panels)
    document.querySelectorAll('mjx-container[display="true"], .mha-panel-frame-box').forEach(function (e) {
      if (e.scrollWidth > e.clientWidth + 1) { e.setAttribute("tabindex", "0"); } else { e.removeAttribute("tabindex"); }
    });
    document.querySelectorAll(".bd-sidebar-primary:not([role])").forEach(function (e) {
      e.setAttribute("role", "navigation"); e.setAttribute("aria-label", "Chapters");
    });
  }
  document.addEventListener("DOMContentLoaded", function () {
    fix();
    new MutationObserver(function (changes) {
      if (changes.some(function (c) { return c.addedNodes.length || c.attributeName === "aria-label"; })) { fix(); }
    }).observe(document.body, {childList: true, subtree: true, attributes: true, attributeFilter: ["aria-label"]});
  });
  window.addEventListener("load", function () {
    fix();
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) { MathJax.startup.promise.then(fix); }
  });
  window.addEventListener("resize", fix);
  // "toggle" does not bubble: listen while it goes down to the details element that opened
  document.addEventListener("toggle", function (event) {
    if (!event.target.open) { return; }
    event.target.querySelectorAll("pre, .cell_output > .output").forEach(function (e) {
      e.tabIndex = e.scrollWidth > e.clientWidth || e.scrollHeight > e.clientHeight ? 0 : -1;
    });
  }, true);
})();
"""


# pydata-sphinx-theme loads Font Awesome twice: as a webfont through its CSS, which draws every icon the pages
# show (<i class="fa-solid fa-sun">), and as a 1.5 MB script that replaces those icons with inline SVG. The
# script (written into every page by the theme's template, not through Sphinx's list of scripts) is taken out
# of the pages once they are written: the icons look the same and a first visit loads 1.5 MB less.
FONTAWESOME_TAG = re.compile(r'<script src="[^"]*_static/scripts/fontawesome\.js(\?[^"]*)?"></script>\s*')


def drop_fontawesome_script(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    for page in Path(app.outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        lean = FONTAWESOME_TAG.sub("", text)
        if lean != text:
            page.write_text(lean, encoding="utf-8")


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
    app.add_js_file(None, body=A11Y_JS, priority=100)
    app.connect("html-page-context", clean_scripts, priority=900)
    app.connect("build-finished", drop_fontawesome_script)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
