"""The CSS and JavaScript a "Check yourself" block carries in its one HTML output (no file, no CDN)."""

from .quiz_questions import SLACK

# Scoped to the block; the theme's colours where the website gives them (light and dark), else the front end's.
QUIZ_CSS = """
.mha-quiz{border:1px solid var(--pst-color-border,var(--jp-border-color1,#999));border-radius:6px;
padding:.2em 1em .6em;margin:1em 0;max-width:100%;box-sizing:border-box;overflow-wrap:anywhere}
.mha-quiz fieldset{border:0;border-top:1px solid var(--pst-color-border,var(--jp-border-color2,#ccc));
margin:.8em 0 0;padding:.8em 0 .2em;min-width:0}
/* a legend that floats leaves the fieldset's top border whole (as Bootstrap, the website's theme, does) */
.mha-quiz legend{font-size:1em;line-height:1.5;font-weight:normal;float:left;width:100%;padding:0;
margin-bottom:.3em;white-space:normal}
.mha-quiz legend+*{clear:left}
.mha-quiz-option{display:flex;gap:.5em;align-items:baseline;margin:.25em 0}
.mha-quiz-option input{flex:none;margin:0}
.mha-quiz input[type=text]{font:inherit;width:12em;max-width:100%;color:inherit;background:transparent;
border:1px solid currentColor;border-radius:3px;padding:.15em .4em}
.mha-quiz button{font:inherit;font-size:.95em;color:inherit;background:transparent;border:1px solid currentColor;
border-radius:4px;padding:.15em .8em;margin:.3em .4em 0 0;cursor:pointer}
.mha-quiz :focus-visible{outline:3px solid #e1812c;outline-offset:2px}
.mha-quiz-tolerance{font-size:.9em;margin:.3em 0}
.mha-quiz-feedback:not(:empty){margin-top:.5em;padding:.2em 0 .2em .7em;border-left:4px solid #888}
.mha-quiz-feedback[data-verdict=right]{border-left-color:#2e7d32}
.mha-quiz-feedback[data-verdict=wrong]{border-left-color:#c62828}
.mha-quiz-feedback a{color:inherit;text-decoration:underline}
.mha-quiz-footer{border-top:1px solid var(--pst-color-border,var(--jp-border-color2,#ccc));padding-top:.4em;
display:flex;flex-wrap:wrap;gap:.2em 1em;align-items:baseline}
.mha-quiz-footer p,.mha-quiz-intro{margin:.4em 0}
"""

# The only JavaScript: compare an answer with the stored key and wrong values, show the stored feedback,
# remember the answers where the browser allows it. No math runs in the page.
QUIZ_JS = """
(function () {
  var me = document.currentScript;
  var root = (me && me.closest && me.closest(".mha-quiz")) || document.getElementById("QUIZ_ID");
  if (!root || root.getAttribute("data-ready")) { return; }
  root.setAttribute("data-ready", "true");
  var note = root.querySelector(".mha-quiz-run");
  if (note) { note.remove(); }
  var data = JSON.parse(root.querySelector("script.mha-quiz-data").textContent);
  var store = null;
  try { store = window.localStorage; store.getItem("mha-lessons-quiz"); } catch (e) { store = null; }
  function load(id) { try { return JSON.parse(store.getItem("mha-lessons-quiz:" + id)); } catch (e) { return null; } }
  function save(id, v) { try { store.setItem("mha-lessons-quiz:" + id, JSON.stringify(v)); } catch (e) { } }
  function forget(id) { try { store.removeItem("mha-lessons-quiz:" + id); } catch (e) { } }
  function number(text) {
    var t = String(text).replace(/[\\s,_\\u2009\\u202f]/g, "").replace(/\\u2212/g, "-");
    return /^[-+]?(\\d+\\.?\\d*|\\.\\d+)(e[-+]?\\d+)?$/i.test(t) ? Number(t) : NaN;
  }
  function near(x, v, q) {
    return Math.abs(x - v) <= Math.max(q.abs, q.rel * Math.abs(v)) * (1 + SLACK) + SLACK * Math.abs(v);
  }
  var boxes = Array.prototype.slice.call(root.querySelectorAll("fieldset.mha-quiz-question"));
  var right = {};
  function judge(q, box) {
    if (q.kind === "number") {
      var raw = box.querySelector("input[type=text]").value;
      if (!raw.trim()) { return {verdict: "empty", html: "Type a number first."}; }
      var x = number(raw);
      if (isNaN(x)) { return {verdict: "empty", html: "That is not a number: type digits, such as 1050624 or 0.25."}; }
      if (near(x, q.key, q)) { return {verdict: "right", html: q.right, answer: raw}; }
      for (var i = 0; i < q.mistakes.length; i++) {
        if (near(x, q.mistakes[i].value, q)) { return {verdict: "wrong", html: q.mistakes[i].html, answer: raw}; }
      }
      return {verdict: "wrong", html: q.other, answer: raw};
    }
    var chosen = box.querySelector("input[type=radio]:checked");
    if (!chosen) { return {verdict: "empty", html: "Choose an option first."}; }
    var option = q.options[Number(chosen.value)];
    return {verdict: option.right ? "right" : "wrong", html: option.html, answer: chosen.value};
  }
  function show(box, result) {
    var out = box.querySelector(".mha-quiz-feedback");
    out.setAttribute("data-verdict", result.verdict);
    out.innerHTML = result.html;
  }
  function count() {
    var n = boxes.filter(function (b, i) { return right[data.questions[i].id]; }).length;
    root.querySelector(".mha-quiz-score").textContent = n + " of " + boxes.length + " answered right.";
  }
  boxes.forEach(function (box, i) {
    var q = data.questions[i];
    var input = box.querySelector("input[type=text]");
    function check() {
      var result = judge(q, box);
      show(box, result);
      if (result.answer !== undefined) {
        right[q.id] = result.verdict === "right";
        save(q.id, {a: result.answer});
        count();
      }
    }
    box.querySelector(".mha-quiz-check").addEventListener("click", check);
    box.querySelector(".mha-quiz-reveal").addEventListener("click", function () {
      show(box, {verdict: "answer", html: q.answer});
    });
    if (input) {
      input.addEventListener("keydown", function (e) { if (e.key === "Enter") { e.preventDefault(); check(); } });
    }
    var stored = load(q.id);
    if (stored && stored.a !== undefined) {
      if (input) { input.value = stored.a; }
      var radio = box.querySelector("input[type=radio][value='" + Number(stored.a) + "']");
      if (radio) { radio.checked = true; }
      var result = judge(q, box);
      if (result.answer !== undefined) { show(box, result); right[q.id] = result.verdict === "right"; }
    }
  });
  root.querySelector(".mha-quiz-reset").addEventListener("click", function () {
    boxes.forEach(function (box, i) {
      forget(data.questions[i].id);
      right[data.questions[i].id] = false;
      box.querySelectorAll("input[type=radio]").forEach(function (r) { r.checked = false; });
      var input = box.querySelector("input[type=text]");
      if (input) { input.value = ""; }
      show(box, {verdict: "", html: ""});
    });
    count();
  });
  function slug(text) {
    var s = text.toLowerCase().normalize("NFKD").replace(/[^\\x00-\\x7f]/g, "");
    return s.replace(/[^a-z0-9]+/g, "-").replace(/^[-0-9]+|-+$/g, "");
  }
  // A link to a section: the website has the anchor; in Jupyter, find the heading by its words.
  root.addEventListener("click", function (e) {
    var link = e.target.closest && e.target.closest("a[data-words]");
    if (!link || document.getElementById(link.getAttribute("href").slice(1))) { return; }
    e.preventDefault();
    var words = link.getAttribute("data-words");
    var scope = root.closest(".jp-Notebook, .notebook_app, body") || document;
    var found = Array.prototype.slice.call(scope.querySelectorAll("h1, h2, h3, h4")).filter(function (h) {
      return words && slug(h.textContent).indexOf(words) === 0;
    })[0];
    if (found) { found.scrollIntoView({block: "start"}); }
  });
  count();
})();
""".replace("SLACK", repr(SLACK))
