"""The built website as a reader meets it: every page of the table of contents in headless Chromium.

Needs `make book` first (`make test` does it) and Debian's `chromium` and `chromium-driver`
(`.ci/run` installs them). Where the site or the browser is missing the tests say so loudly; under
CI=true that is a failure, elsewhere a skip that names what to run or install. Screenshots land in _build/screenshots/.

Each page is loaded once at 1280 px and once at 400 px (test_the_page_at_1280_px, test_the_page_on_a_phone), and
every check of that width runs on that load as a subtest (the `check_*` functions below say what each asserts).
"""

import functools
import html
import http.server
import json
import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import urljoin, urlparse

import pytest

# `slow`: not in make check (under pytest-xdist each page is a unit of its own, tests/conftest.py; each worker starts
# one server and one Chromium, module fixtures)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")

TOC = (ROOT / "_toc.yml").read_text()
ENTRIES = re.findall(r"^\s*(?:-\s*)?(?:file|root):\s*(\S+)", TOC, flags=re.MULTILINE)
REPO = re.search(r"^repository:\s*\n\s+url:\s*https://github.com/(\S+)", (ROOT / "_config.yml").read_text(),
                 flags=re.MULTILINE).group(1)
# Hosts a page may never load anything from (it may still link to them, like the Colab button).
EXTERNAL_ASSET = re.compile(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=\"(https?:)?//", re.IGNORECASE)


def require_browser():
    missing = [name for name, path in (("chromium", CHROMIUM), ("chromedriver", DRIVER)) if path is None]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package")
    if not missing:
        return
    message = (f"BROWSER TESTS DID NOT RUN: {', '.join(missing)} not found. "
               f"Install Debian's chromium and chromium-driver (see .ci/run).")
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def require_site():
    """The built website, or a loud skip naming the command that builds it (a failure under CI=true).

    `pytest` on a fresh clone, before any build, should not fail for a missing folder.
    """
    if (HTML / "index.html").exists():
        return
    message = "THE WEBSITE IS NOT BUILT: _build/html has no pages. Run `make book` (or `make test`, which builds it)."
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def is_notebook(entry):
    return (ROOT / f"{entry}.ipynb").exists()


def has_widgets(entry):
    if not is_notebook(entry):
        return False
    nb = json.loads((ROOT / f"{entry}.ipynb").read_text())
    return bool(nb.get("metadata", {}).get("widgets", {}).get("application/vnd.jupyter.widget-state+json"))


@pytest.fixture(scope="module")
def site():
    """Serve _build/html on 127.0.0.1 at a free port for the duration of the module."""
    require_site()
    handler = functools.partial(QuietHandler, directory=str(HTML))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def browser():
    require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    SHOTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


def console_errors(browser):
    """The errors and warnings the page logged since the log was last read (reading it empties it)."""
    return [e["message"] for e in browser.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]


def test_no_page_loads_anything_from_another_host():
    require_site()
    pages = sorted(HTML.rglob("*.html"))
    for page in pages:
        match = EXTERNAL_ASSET.search(page.read_text(errors="ignore"))
        assert match is None, f"{page.relative_to(HTML)} loads {match.group(0)!r}... from another host"


def check_the_page(browser, site, entry, typeset):
    """Math typeset, nothing raw left, every image loaded, no other host asked, the widget snapshots shown, the
    launch buttons and the download pointing at the reader notebook, every chapter in the sidebar."""
    has_math = browser.execute_script("return document.querySelectorAll('.math, .math-wrapper').length > 0;")
    # Sphinx loads MathJax only on pages with math (the list of references has none).
    assert typeset == "ok" or (typeset == "no MathJax" and not has_math), f"{entry}: MathJax did not run ({typeset})"
    # Widgets render after load; give the manager a moment when the page has some.
    if has_widgets(entry):
        browser.execute_async_script(
            "const done = arguments[arguments.length - 1]; let tries = 0;"
            "const poll = () => (document.querySelector('.jupyter-widgets .widget-slider') || ++tries > 100)"
            " ? done() : setTimeout(poll, 100); poll();"
        )

    # every math element typeset: nothing raw left in the visible text
    raw = browser.execute_script(
        "return Array.from(document.querySelectorAll('.math, .math-wrapper'))"
        ".filter(e => !e.querySelector('mjx-container')).map(e => e.textContent.slice(0, 60));"
    )
    assert raw == [], f"{entry}: math left untypeset: {raw[:3]}"
    text = browser.execute_script("return document.querySelector('main').innerText;")
    for marker in ("$$", "\\(", "\\[", "{glue:"):
        assert marker not in text, f"{entry}: raw {marker!r} in the visible text"

    # every image loaded
    broken = browser.execute_script(
        "return Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src);"
    )
    assert broken == [], f"{entry}: images that did not load: {broken}"
    # only this server was asked for anything
    foreign = browser.execute_script(
        "return performance.getEntriesByType('resource').map(r => r.name).filter(n => !n.startsWith(arguments[0]));",
        site,
    )
    assert foreign == [], f"{entry}: requests to other hosts: {foreign}"

    # widgets: the snapshot of each panel shows its sliders and its figure
    if has_widgets(entry):
        sliders = browser.execute_script("return document.querySelectorAll('.jupyter-widgets .widget-slider').length;")
        figures = browser.execute_script(
            "return Array.from(document.querySelectorAll('.jupyter-widgets img'))"
            ".filter(i => i.complete && i.naturalWidth > 0).length;"
        )
        assert sliders > 0, f"{entry}: the widget snapshot shows no slider"
        assert figures > 0, f"{entry}: the widget snapshot shows no figure"

    # launch buttons point at this chapter's reader notebook in the repository (scripts/reader_notebooks.py)
    links = browser.execute_script("return Array.from(document.querySelectorAll('a')).map(a => a.href);")
    if is_notebook(entry):
        assert (ROOT / "reader" / f"{entry}.ipynb").exists(), entry
        assert f"https://colab.research.google.com/github/{REPO}/blob/main/reader/{entry}.ipynb" in links, entry
        assert f"https://mybinder.org/v2/gh/{REPO}/main?urlpath=tree/reader/{entry}.ipynb" in links, entry
        # the download serves the reader notebook too (book/_ext/reader_downloads.py)
        assert (HTML / "_sources" / f"{entry}.ipynb").read_text() == (ROOT / "reader" / f"{entry}.ipynb").read_text()

    # the sidebar lists every chapter
    sidebar = browser.execute_script(
        "return Array.from(document.querySelectorAll('.bd-sidebar-primary a')).map(a => a.href);"
    )
    paths = {urlparse(href).path for href in sidebar}
    for other in ENTRIES:
        assert f"/{other}.html" in paths, f"{entry}: the sidebar has no link to {other}"


def panel_pages():
    """The chapters whose stored outputs hold a precomputed panel (mha_lessons/course/panels.py)."""
    return [entry for entry in ENTRIES if is_notebook(entry) and "mha-panel" in (ROOT / f"{entry}.ipynb").read_text()]


# What a reader sees of one panel: every frame's source and alt text, the numbers, each control's shown value.
PANEL_VIEW_JS = """
const p = arguments[0];
return {frames: Array.from(p.querySelectorAll('img.mha-panel-frame')).map(i => (i.hidden ? 'hidden' : i.src)),
        alts: Array.from(p.querySelectorAll('img.mha-panel-frame')).map(i => i.alt),
        text: p.querySelector('pre.mha-panel-text').textContent,
        values: Array.from(p.querySelectorAll('output')).map(o => o.textContent)};
"""

# Move one control by script and time until the new frames are decoded and ready to paint.
REDRAW_TIME_JS = """
const [control, done] = [arguments[0], arguments[arguments.length - 1]];
const panel = control.closest('.mha-panel');
const t0 = performance.now();
if (control.type === 'checkbox') { control.click(); }
else { control.value = String(Number(control.value) > 0 ? Number(control.value) - 1 : 1);
       control.dispatchEvent(new Event('input', {bubbles: true})); }
const shown = Array.from(panel.querySelectorAll('img.mha-panel-frame')).filter(i => !i.hidden);
Promise.all(shown.map(i => i.decode())).then(() => done(performance.now() - t0), e => done('decode failed: ' + e));
"""


def test_there_are_panels_on_the_three_chapters_with_sliders():
    pages = panel_pages()
    for chapter in ("02_why_sqrt_dk", "03_multi_head_attention", "04_cost"):
        assert any(page.endswith(chapter) for page in pages), f"{chapter} shows no precomputed panel"


def check_every_control_redraws_with_the_keyboard(browser, site, entry):
    """Each slider moved with the arrow keys (each check box with the space bar) changes what it drives."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.get_log("browser")
    panels = browser.find_elements(By.CSS_SELECTOR, ".mha-panel")
    assert panels, f"{entry}: no panel on the page"
    moved = 0
    for panel in panels:
        for control in panel.find_elements(By.CSS_SELECTOR, "[data-control]"):
            cid = control.get_attribute("id")
            label = panel.find_elements(By.CSS_SELECTOR, f'label[for="{cid}"]')
            assert label and label[0].is_displayed() and label[0].text.strip(), f"{entry}: {cid} has no visible label"
            browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", control)
            before = browser.execute_script(PANEL_VIEW_JS, panel)
            if control.get_attribute("type") == "checkbox":
                control.send_keys(Keys.SPACE)
            else:
                output = panel.find_element(By.CSS_SELECTOR, f'output[for="{cid}"]')
                assert output.is_displayed() and output.text.strip(), f"{entry}: {cid} shows no value"
                at_end = control.get_attribute("value") == control.get_attribute("max")
                control.send_keys(Keys.ARROW_LEFT if at_end else Keys.ARROW_RIGHT)
            after = browser.execute_script(PANEL_VIEW_JS, panel)
            assert after["text"] != before["text"], f"{entry}: moving {cid} did not change the numbers"
            if before["frames"]:
                assert after["frames"] != before["frames"], f"{entry}: moving {cid} did not change the figure"
                assert after["alts"] != before["alts"], f"{entry}: moving {cid} did not change the figure's alt text"
            if control.get_attribute("type") != "checkbox":
                assert after["values"] != before["values"], f"{entry}: moving {cid} did not change its shown value"
            elapsed = browser.execute_async_script(REDRAW_TIME_JS, control)
            assert isinstance(elapsed, (int, float)) and elapsed < 100, f"{entry}: {cid} redrew in {elapsed} ms"
            moved += 1
    assert moved >= 2, f"{entry}: only {moved} controls found"
    foreign = browser.execute_script(
        "return performance.getEntriesByType('resource').map(r => r.name)"
        ".filter(n => !n.startsWith(arguments[0]) && !n.startsWith('data:'));", site)
    assert foreign == [], f"{entry}: requests to other hosts: {foreign}"
    errors = console_errors(browser)
    assert errors == [], f"{entry}: console errors after moving the controls: {errors}"


# axe-core, the accessibility engine, used by this test only: fetched with `npm pack` into _build/vendor_cache by
# scripts/vendor_assets.py's tarball(), checked against this sha512, and injected into each page (no request).
AXE = ("axe-core", "4.14.1",
       "sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ==")


@pytest.fixture(scope="module")
def axe_source():
    import importlib.util
    import tarfile

    if shutil.which("npm") is None:
        message = "AXE DID NOT RUN: npm (Node.js) is needed to fetch axe-core."
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    spec = importlib.util.spec_from_file_location("vendor_assets", ROOT / "scripts" / "vendor_assets.py")
    vendor_assets = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vendor_assets)
    with tarfile.open(vendor_assets.tarball(*AXE)) as archive:
        return archive.extractfile("package/axe.min.js").read().decode()


AXE_JS = ("const done = arguments[arguments.length - 1];"
          "axe.run(arguments[0] || document, {resultTypes: ['violations']}).then(r => done(r.violations"
          ".map(v => v.impact + ' ' + v.id + ' (' + v.help + '): ' + v.nodes.slice(0, 3)"
          ".map(n => n.html.slice(0, 160)).join(' | '))), e => done(['axe failed: ' + e]));")


def axe_violations(browser, element=None):
    """axe-core's violations of any impact in ``element`` (the whole page without one; several elements as
    ``{"include": [...]}``), one line each; axe must be loaded in the page (``axe_source``)."""
    return browser.execute_async_script(AXE_JS, element)


def switch_theme(browser, theme):
    """Show the page in the light or the dark theme, once every colour has faded in."""
    browser.execute_script("document.documentElement.dataset.theme = arguments[0];", theme)
    settle(browser)


@pytest.mark.parametrize("entry", ENTRIES)
def test_every_figure_has_a_text_alternative_that_is_not_a_file_name(entry):
    """myst-nb takes a figure's alt text from its cell's metadata (mystnb.image.alt) and otherwise writes the
    image's file name, which axe accepts but tells a reader nothing; the panels (mha_lessons/course/panels.py) write
    their own."""
    require_site()
    page = (HTML / f"{entry}.html").read_text()
    alts = [html.unescape(alt) for alt in re.findall(r'<img\b[^>]*?\balt="([^"]*)"', page)]
    assert len(alts) == len(re.findall(r"<img\b", page)), f"{entry}: an image without alt attribute"
    bad = [alt for alt in alts if len(alt.split()) < 2 or re.search(r"\.(png|svg|jpe?g|gif)$", alt.strip())]
    assert bad == [], (f"{entry}: figures whose alt text says nothing about them: {bad}; give the cell "
                       f"metadata {{'mystnb': {{'image': {{'alt': 'what the figure shows'}}}}}}")


# ---------------------------------------------------------------- Check yourself (mha_lessons/course/quiz.py)

def quiz_pages():
    """The pages of the built site that hold a Check yourself block (a chapter that adds one is tested with no
    change here); before the build, the chapters whose notebooks store one."""
    if (HTML / "index.html").exists():
        return [e for e in ENTRIES if (HTML / f"{e}.html").exists() and 'class="mha-quiz"' in (HTML / f"{e}.html").read_text()]
    return [e for e in ENTRIES if is_notebook(e) and 'class=\\"mha-quiz\\"' in (ROOT / f"{e}.ipynb").read_text()]


def test_the_pilot_chapters_have_a_check_yourself_block():
    require_site()
    pages = quiz_pages()
    for chapter in ("01_scaled_dot_product_attention", "02_why_sqrt_dk", "03_multi_head_attention", "05_gradients"):
        assert any(page.endswith(chapter) for page in pages), f"{chapter} shows no Check yourself block"


def plain(markup):
    """The text a reader sees of the feedback's HTML, spaces collapsed."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", markup)).split())


def near(x, value, q):
    from mha_lessons.course.quiz import SLACK

    return abs(x - value) <= max(q["abs"], q["rel"] * abs(value)) * (1 + SLACK) + SLACK * abs(value)


def typed_answers(q):
    """For a numeric question: (inside the tolerance, (a listed mistake, its feedback) or None, matching nothing)."""
    key, width = q["key"], max(q["abs"], q["rel"] * abs(q["key"]))
    inside = f"{key:,}" if width == 0 else repr(key + 0.8 * width)                # thousands separators, an edge
    mistake = (repr(q["mistakes"][0]["value"]), q["mistakes"][0]["html"]) if q["mistakes"] else None
    candidates = [key + 1, key * 1.37 + 1.1, key * 0.61 - 2.3, key * 9.1 + 7]
    other = next(x for x in candidates if not near(x, key, q) and not any(near(x, m["value"], q) for m in q["mistakes"]))
    return inside, mistake, repr(other)


FEEDBACK_JS = """
const box = arguments[0]; const f = box.querySelector('.mha-quiz-feedback');
return {text: f.innerText.replace(/\\s+/g, ' ').trim(), verdict: f.getAttribute('data-verdict'),
        role: f.getAttribute('role'), live: f.getAttribute('aria-live'),
        links: Array.from(f.querySelectorAll('a')).map(a => [a.getAttribute('href'),
               !!document.getElementById(a.getAttribute('href').slice(1))])};
"""


def answer(browser, box, value):
    """Answer one question with the mouse and the Check button: an option's index, or text to type."""
    from selenium.webdriver.common.by import By

    browser.execute_script("arguments[0].scrollIntoView({block: 'center', behavior: 'instant'});", box)
    if isinstance(value, int):
        browser.execute_script("arguments[0].click();", box.find_elements(By.CSS_SELECTOR, "input[type=radio]")[value])
    else:
        field = box.find_element(By.CSS_SELECTOR, "input[type=text]")
        field.clear()
        field.send_keys(value)
    browser.execute_script("arguments[0].click();", box.find_element(By.CSS_SELECTOR, ".mha-quiz-check"))
    return browser.execute_script(FEEDBACK_JS, box)


def check_feedback(entry, shown, verdict, markup):
    assert shown["verdict"] == verdict, f"{entry}: {shown}"
    assert plain(markup) == shown["text"], f"{entry}: shown {shown['text']!r}, expected {plain(markup)!r}"
    assert shown["role"] == "status" and shown["live"] == "polite"
    assert all(found for _, found in shown["links"]), f"{entry}: a link to a section that is not on the page: {shown}"


STORED_ANSWERS_JS = "return Object.keys(localStorage).filter(k => k.startsWith('mha-lessons-quiz:')).length;"


def answer_every_question(browser, entry):
    """Every question of every block, by mouse: a wrong option (a listed wrong number) shows its own feedback,
    linking to a section of the page; the right one the confirmation; a number inside the tolerance is right, one
    outside that matches no listed mistake gets the general feedback; the score counts them. The page was loaded
    with no answer stored (first_visit). Returns the blocks, answered."""
    from selenium.webdriver.common.by import By

    browser.get_log("browser")
    assert browser.execute_script(STORED_ANSWERS_JS) == 0, f"{entry}: answers stored before the block was answered"
    blocks = browser.find_elements(By.CSS_SELECTOR, ".mha-quiz")
    assert blocks, f"{entry}: no Check yourself block"
    for block in blocks:
        data = browser.execute_script("return JSON.parse(arguments[0].querySelector('script.mha-quiz-data')"
                                      ".textContent);", block)
        assert not block.find_elements(By.CSS_SELECTOR, ".mha-quiz-run"), "the note for Jupyter shows on the site"
        boxes = block.find_elements(By.CSS_SELECTOR, "fieldset.mha-quiz-question")
        assert len(boxes) == len(data["questions"]) >= 3
        for box, q in zip(boxes, data["questions"]):
            if q["kind"] == "choice":
                wrong = next(i for i, o in enumerate(q["options"]) if not o["right"])
                check_feedback(entry, answer(browser, box, wrong), "wrong", q["options"][wrong]["html"])
                assert "Not quite" in plain(q["options"][wrong]["html"]) and q["options"][wrong]["html"].count("href")
                right = next(i for i, o in enumerate(q["options"]) if o["right"])
                check_feedback(entry, answer(browser, box, right), "right", q["options"][right]["html"])
            else:
                inside, mistake, other = typed_answers(q)
                check_feedback(entry, answer(browser, box, other), "wrong", q["other"])
                if mistake:
                    check_feedback(entry, answer(browser, box, mistake[0]), "wrong", mistake[1])
                check_feedback(entry, answer(browser, box, inside), "right", q["right"])
                assert answer(browser, box, "twelve")["verdict"] == "empty"
                check_feedback(entry, answer(browser, box, inside), "right", q["right"])
            browser.execute_script("arguments[0].click();", box.find_element(By.CSS_SELECTOR, ".mha-quiz-reveal"))
            check_feedback(entry, browser.execute_script(FEEDBACK_JS, box), "answer", q["answer"])
        score = block.find_element(By.CSS_SELECTOR, ".mha-quiz-score").text
        assert score == f"{len(boxes)} of {len(boxes)} answered right.", score
    return blocks


def check_the_answered_blocks_take_the_themes_colours(browser, entry, blocks, theme):
    """The block takes the page's colours: dark text in the light theme, light text in the dark one."""
    for block in blocks:
        light = browser.execute_script(
            "const c = getComputedStyle(arguments[0]).color.match(/\\d+/g).map(Number);"
            "return (0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2]) / 255 > 0.5;", block)
        assert light == (theme == "dark"), f"{entry}: in the {theme} theme the block's text is {'light' if light else 'dark'}"
        if theme == "dark":
            browser.execute_script("arguments[0].scrollIntoView({block: 'start', behavior: 'instant'});", block)
            block.screenshot(str(SHOTS / f"quiz_{entry.replace('/', '_')}_1280_dark.png"))


def check_the_answers_come_back_after_a_reload(browser, entry):
    """A reload: the answers come back from the browser's storage, "Forget" clears them, and after another reload
    nothing is stored; no console error or warning since the questions were answered."""
    from selenium.webdriver.common.by import By

    browser.refresh()
    wait_for_math(browser)
    block = browser.find_elements(By.CSS_SELECTOR, ".mha-quiz")[0]
    boxes = block.find_elements(By.CSS_SELECTOR, "fieldset.mha-quiz-question")
    verdicts = [browser.execute_script(FEEDBACK_JS, box)["verdict"] for box in boxes]
    assert verdicts == ["right"] * len(boxes), f"{entry}: after a reload: {verdicts}"
    assert block.find_element(By.CSS_SELECTOR, ".mha-quiz-score").text.startswith(f"{len(boxes)} of {len(boxes)}")
    browser.execute_script("arguments[0].scrollIntoView({block: 'start', behavior: 'instant'});", block)
    block.screenshot(str(SHOTS / f"quiz_{entry.replace('/', '_')}_1280.png"))
    browser.execute_script("arguments[0].click();", block.find_element(By.CSS_SELECTOR, ".mha-quiz-reset"))
    assert [browser.execute_script(FEEDBACK_JS, box)["text"] for box in boxes] == [""] * len(boxes)
    assert block.find_element(By.CSS_SELECTOR, ".mha-quiz-score").text.startswith(f"0 of {len(boxes)}")
    browser.refresh()
    wait_for_math(browser)
    assert browser.execute_script(STORED_ANSWERS_JS) == 0, f"{entry}: answers still stored after Forget"
    errors = console_errors(browser)
    assert errors == [], f"{entry}: console errors: {errors}"


def check_yourself_with_the_keyboard_alone(browser, entry):
    """The first question answered with keys only, on a page with no answer shown: Tab into the block, the arrow
    keys choose an option (or the digits are typed), Tab to Check and Space (or Enter in the field) shows the
    feedback; every control shows a focus ring."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    block = browser.find_element(By.CSS_SELECTOR, ".mha-quiz")
    data = browser.execute_script("return JSON.parse(arguments[0].querySelector('script.mha-quiz-data')"
                                  ".textContent);", block)
    box = block.find_element(By.CSS_SELECTOR, "fieldset.mha-quiz-question")
    q = data["questions"][0]
    # start from the block's intro, which holds no control, and Tab forward
    browser.execute_script("const p = arguments[0].querySelector('.mha-quiz-intro'); p.tabIndex = -1;"
                           "p.scrollIntoView({block: 'center', behavior: 'instant'}); p.focus();", block)
    active = "return document.activeElement;"
    keys = ActionChains(browser)
    keys.send_keys(Keys.TAB).perform()
    first = browser.execute_script(active)
    assert browser.execute_script("return arguments[0].contains(arguments[1]);", box, first), "Tab did not reach it"
    ring = browser.execute_script("const s = getComputedStyle(document.activeElement);"
                                  "return [s.outlineStyle, parseFloat(s.outlineWidth)];")
    assert ring[0] != "none" and ring[1] >= 2, f"{entry}: no visible focus ring: {ring}"
    if q["kind"] == "choice":
        right = next(i for i, o in enumerate(q["options"]) if o["right"])
        for _ in range(right):                      # Tab lands on the first option; Down moves to the next and checks it
            ActionChains(browser).send_keys(Keys.ARROW_DOWN).perform()
        if right == 0:
            ActionChains(browser).send_keys(Keys.SPACE).perform()
        ActionChains(browser).send_keys(Keys.TAB).perform()
        assert browser.execute_script("return document.activeElement.className;") == "mha-quiz-check"
        ActionChains(browser).send_keys(Keys.SPACE).perform()
    else:
        ActionChains(browser).send_keys(typed_answers(q)[0]).send_keys(Keys.ENTER).perform()
    shown = browser.execute_script(FEEDBACK_JS, box)
    # a choice keeps its confirmation with the right option (the pilots opened with numbers; chapter 5 with a shape)
    check_feedback(entry, shown, "right", q["options"][right]["html"] if q["kind"] == "choice" else q["right"])
    ActionChains(browser).send_keys(Keys.TAB).perform()
    ring = browser.execute_script("const s = getComputedStyle(document.activeElement);"
                                  "return [document.activeElement.tagName, s.outlineStyle, parseFloat(s.outlineWidth)];")
    assert ring[0] == "BUTTON" and ring[1] != "none" and ring[2] >= 2, f"{entry}: {ring}"


def check_yourself_fits_a_phone(browser, entry):
    """On a 400 px phone (the page loaded there) the block fits the screen (that the page does not scroll
    sideways is check_no_sideways_scroll_on_a_phone's, on the same load)."""
    from selenium.webdriver.common.by import By

    block = browser.find_element(By.CSS_SELECTOR, ".mha-quiz")
    fits = browser.execute_script(
        "const b = arguments[0]; const r = b.getBoundingClientRect();"
        "const out = Array.from(b.querySelectorAll('*')).filter(e => e.getBoundingClientRect().right > r.right + 1)"
        ".map(e => e.tagName + ': ' + (e.textContent || '').slice(0, 40));"
        "return {right: r.right, scroll: b.scrollWidth, client: b.clientWidth, out: out.slice(0, 5)};", block)
    browser.execute_script("arguments[0].scrollIntoView({block: 'start', behavior: 'instant'});", block)
    block.screenshot(str(SHOTS / f"quiz_{entry.replace('/', '_')}_400.png"))
    assert fits["right"] <= PHONE_WIDTH and fits["scroll"] <= fits["client"] + 1 and not fits["out"], f"{entry}: {fits}"


# ---------------------------------------------------------------- one fold style (issue 35)

# What folds on a page, by kind: myst-nb's code toggles (hide-input, hide-cell), sphinx-design's dropdowns (the
# deep dives) and the folded listings of M.notebook.show_source. book/_static/course.css gives them one look.
FOLDS = {"code toggle": "div.cell details.hide", "dropdown": "details.sd-dropdown",
         "folded listing": "div.cell_output div.text_html > details"}

FOLD_STYLE_JS = """
const pick = (e, names, pseudo) => { const s = getComputedStyle(e, pseudo || null);
  return Object.fromEntries(names.map(n => [n, s.getPropertyValue(n)])); };
const out = {};
for (const [kind, selector] of Object.entries(arguments[0])) {
  const fold = Array.from(document.querySelectorAll(selector)).find(e => e.getBoundingClientRect().height > 0);
  if (!fold) { continue; }
  const summary = fold.querySelector(':scope > summary');
  const svg = summary.querySelector('.sd-summary-state-marker svg');   // the dropdown's own chevron
  const chevron = svg ? Object.assign(pick(svg, ['opacity']), {size: Math.round(svg.getBoundingClientRect().width)
                                                                + 'x' + Math.round(svg.getBoundingClientRect().height)})
                      : Object.assign(pick(summary, ['opacity'], '::before'),
                                      {size: Math.round(parseFloat(getComputedStyle(summary, '::before').width)) + 'x'
                                             + Math.round(parseFloat(getComputedStyle(summary, '::before').height))});
  const turning = svg ? svg.parentElement : null;
  out[kind] = {
    card: pick(fold, ['box-shadow', 'border-top-width', 'border-top-left-radius']),
    header: pick(summary, ['background-color', 'border-left-width', 'border-left-style', 'border-left-color',
                           'border-top-width', 'color', 'font-size', 'font-weight', 'line-height', 'padding-top',
                           'padding-bottom', 'padding-left', 'border-top-left-radius', 'cursor']),
    chevron: chevron,
    turned: turning ? getComputedStyle(turning).transform : getComputedStyle(summary, '::before').transform,
    marker: getComputedStyle(summary).display === 'list-item' && getComputedStyle(summary).listStyleType !== 'none'};
}
return out;
"""


def settle(browser):
    """Wait until every CSS transition and animation of the page has run (a theme switch fades colours in for
    150-300 ms: axe measuring contrast in the middle of it sees colours that the page never rests on), 5 s at most."""
    # Polled, not awaited through each animation's `finished`: after a screenshot Chromium could leave those
    # promises pending for seconds after the animations had ended.
    browser.execute_async_script("const done = arguments[arguments.length - 1]; const t0 = performance.now();"
                                 "const moving = () => document.getAnimations().some(a => a.playState !== 'finished'"
                                 " && a.playState !== 'idle' && (!a.effect || a.effect.getTiming().iterations !== Infinity));"
                                 "const poll = () => (!moving() || performance.now() - t0 > 5000) ? done()"
                                 " : setTimeout(poll, 25); poll();")


def quarter_turn(transform):
    """True if a computed CSS transform is a rotation by 90 degrees: matrix(cos, sin, -sin, cos, 0, 0)."""
    numbers = [float(x) for x in re.findall(r"[-+\d.e]+", transform.removeprefix("matrix"))]
    return len(numbers) == 6 and abs(numbers[0]) < 1e-6 and abs(numbers[1] - 1) < 1e-6 and abs(numbers[2] + 1) < 1e-6


def fold_pages():
    """The pages that show at least two kinds of fold (so that the kinds can be compared on one page)."""
    if not (HTML / "index.html").exists():
        return [e for e in ENTRIES if is_notebook(e)]
    kinds = {"code toggle": 'class="admonition hide', "dropdown": "sd-dropdown", "folded listing": "<details>"}
    return [e for e in ENTRIES if (HTML / f"{e}.html").exists()
            and sum(mark in (HTML / f"{e}.html").read_text() for mark in kinds.values()) >= 2]


def test_some_page_shows_all_three_kinds_of_fold():
    require_site()
    pages = [e for e in fold_pages() if "<details>" in (HTML / f"{e}.html").read_text()]
    assert any(e.endswith("05_gradients") for e in pages), pages


def check_one_fold_style(browser, entry, width, theme):
    """Code toggles, dropdowns and folded listings share one style (in the theme shown): the card's shadow and
    corners, the header's shading, bar, font and padding, a chevron of one size, no list marker."""
    styles = browser.execute_script(FOLD_STYLE_JS, FOLDS)
    assert len(styles) >= 2, f"{entry}: folds found: {list(styles)}"
    first, reference = next(iter(styles.items()))
    for kind, style in styles.items():
        assert not style["marker"], f"{entry}: the {kind} shows a list marker"
        for part in ("card", "header", "chevron"):
            assert style[part] == reference[part], (
                f"{entry}, {width} px, {theme}: the {kind}'s {part} differs from the {first}'s: "
                f"{ {k: (v, reference[part][k]) for k, v in style[part].items() if v != reference[part][k]} }")


def open_the_first_fold_of_each_kind(browser, entry):
    """The first fold of each kind opens with Enter, shows the focus ring, and its chevron turns a quarter. Returns
    {kind: (selector, fold, summary)} of those opened."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    opened = {}
    for kind, selector in FOLDS.items():
        folds = [f for f in browser.find_elements("css selector", selector) if f.size["height"] > 0]
        if not folds:
            continue
        fold = folds[0]
        summary = fold.find_element("css selector", ":scope > summary")
        browser.execute_script("arguments[0].scrollIntoView({block: 'center', behavior: 'instant'});"
                               "arguments[0].focus();", summary)
        assert browser.execute_script("return document.activeElement === arguments[0];", summary), kind
        ActionChains(browser).send_keys(Keys.ENTER).perform()
        assert fold.get_attribute("open") is not None, f"{entry}: Enter did not open the {kind}"
        ring = browser.execute_script("const s = getComputedStyle(document.activeElement);"
                                      "return [s.outlineStyle, parseFloat(s.outlineWidth)];")
        assert ring[0] != "none" and ring[1] >= 2, f"{entry}: the {kind} shows no focus ring: {ring}"
        opened[kind] = (selector, fold, summary)
    settle(browser)   # the chevrons' quarter turn
    for kind, (selector, fold, summary) in opened.items():
        turned = browser.execute_script(FOLD_STYLE_JS, {kind: selector})[kind]["turned"]
        assert quarter_turn(turned), f"{entry}: the {kind}'s chevron does not turn a quarter when open: {turned}"
    return opened


def close_the_folds(browser, entry, opened):
    """Each fold opened closes with Space (a screenshot of it closed)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    for kind, (selector, fold, summary) in opened.items():
        browser.execute_script("arguments[0].scrollIntoView({block: 'center', behavior: 'instant'});"
                               "arguments[0].focus();", summary)
        ActionChains(browser).send_keys(Keys.SPACE).perform()
        assert fold.get_attribute("open") is None, f"{entry}: Space did not close the {kind}"
        fold.screenshot(str(SHOTS / f"fold_{entry.replace('/', '_')}_{kind.replace(' ', '_')}.png"))


# ---------------------------------------------------------------- the page as it prints, at both widths

def wait_for_math(browser):
    return browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "if (!window.MathJax || !MathJax.startup) { done('no MathJax'); return; }"
        "MathJax.startup.promise.then(() => done('ok'), e => done('error: ' + e));"
    )


def phone(browser, on):
    """Emulate a 400 x 800 phone screen (mobile, 2x pixels), or go back to the 1280 px desktop window."""
    if on:
        browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                {"width": 400, "height": 800, "deviceScaleFactor": 2, "mobile": True})
    else:
        browser.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})
        browser.set_window_size(1280, 1000)


def test_on_a_phone_both_drawers_open_and_the_menu_reaches_a_chapter(site, browser):
    """The theme's two toggles (the chapter list, the page's contents) open their drawers at 400 px."""
    from selenium.webdriver.common.by import By

    chapter = next(e for e in ENTRIES if is_notebook(e))
    target = next(e for e in ENTRIES if is_notebook(e) and e != chapter)
    phone(browser, True)
    try:
        browser.get(urljoin(site, f"{chapter}.html"))
        visible = ("const r = arguments[0].getBoundingClientRect();"
                   "return r.width > 100 && r.right > 50 && r.left < window.innerWidth - 50 &&"
                   " getComputedStyle(arguments[0]).visibility !== 'hidden';")
        # pydata-sphinx-theme 0.16 moves each sidebar into a <dialog> when its button is pressed on a phone
        def open_drawer(button, dialog):
            shown = [b for b in browser.find_elements(By.CSS_SELECTOR, button) if b.is_displayed()]
            assert shown, f"no visible {button} at 400 px"
            drawer = browser.find_element(By.CSS_SELECTOR, dialog)
            assert not browser.execute_script(visible, drawer), f"{dialog} shows before it is opened"
            shown[0].click()
            browser.execute_script("return new Promise(r => setTimeout(r, 600));")
            assert browser.execute_script(visible, drawer), f"pressing {button} did not open {dialog}"
            return drawer

        primary = open_drawer("button.primary-toggle", "#pst-primary-sidebar-modal")
        browser.save_screenshot(str(SHOTS / "phone_primary_drawer.png"))
        link = primary.find_element(By.CSS_SELECTOR, f'a[href$="{Path(target).name}.html"]')
        link.click()
        browser.execute_script("return new Promise(r => setTimeout(r, 600));")
        assert browser.current_url.split("#")[0].endswith(f"{target}.html"), browser.current_url
        secondary = open_drawer("button.secondary-toggle", "#pst-secondary-sidebar-modal")
        assert secondary.find_elements(By.CSS_SELECTOR, "a"), "the page's contents drawer lists no section"
        browser.save_screenshot(str(SHOTS / "phone_secondary_drawer.png"))
    finally:
        phone(browser, False)


# Display equations that are wider than the text column at 1280 px, as (page, equation number): none. The test
# fails on an overflowing equation not listed here, and on a listed one that now fits.
KNOWN_WIDE_EQUATIONS = set()

EQUATIONS_JS = """
return Array.from(document.querySelectorAll('main mjx-container[display="true"]')).map(c => {
  const box = c.closest('div.math') || c.parentElement;
  const number = box.querySelector('.eqno');
  return {number: number ? number.textContent.replace(/[^0-9.()]/g, '') : '(unnumbered)',
          text: (c.getAttribute('aria-label') || '').slice(0, 50),
          width: Math.round(c.scrollWidth), column: Math.round(c.clientWidth)};
});
"""


PHONE_WIDTH = 400

# How wide a page is on the phone, and what pushes it. The screen is the layout viewport,
# document.documentElement.clientWidth (400 px): under Chromium's mobile emulation window.innerWidth is the
# visual viewport, which widens to the page's content when the page is wider than the screen (the browser zooms
# out to fit it), so a page compared with window.innerWidth is compared with itself. That is how this check once
# passed chapters 1, 6 and 8 at 429-461 px. What pushes a page: an element whose right edge passes the screen and
# that no box scrolls or clips (a listing that scrolls in its own box is fine).
PAGE_WIDTH_JS = """
const screen = document.documentElement.clientWidth;
const clipped = e => { for (let p = e.parentElement; p; p = p.parentElement) {
  if (getComputedStyle(p).overflowX !== 'visible') { return true; } } return false; };
const wide = Array.from(document.querySelectorAll('main *')).filter(e => {
  const r = e.getBoundingClientRect();
  return r.right > screen + 1 && r.width > 0 && !clipped(e) && !e.closest('.bd-sidebar-secondary'); })
  .slice(0, 5).map(e => e.tagName + '.' + e.className + ' ending at ' + Math.round(e.getBoundingClientRect().right)
                   + ' px: ' + (e.textContent || '').slice(0, 60));
return {screen: screen, inner: window.innerWidth, page: document.documentElement.scrollWidth, wide: wide};
"""


def page_width_on_a_phone(browser):
    widths = browser.execute_script(PAGE_WIDTH_JS)
    assert widths["screen"] == PHONE_WIDTH, f"the phone's layout viewport is {widths['screen']} px"
    return widths


def check_no_sideways_scroll_on_a_phone(browser, entry):
    """At 400 px (the page loaded there) no page is wider than the screen: long inline code wraps, wide equations
    and listings scroll in their own box."""
    widths = page_width_on_a_phone(browser)
    assert widths["page"] <= widths["screen"], (
        f"{entry}: at {widths['screen']} px the page is {widths['page']} px wide; too wide: {widths['wide']}")


def check_equations_fit_the_column(browser, entry):
    """At 1280 px no display equation is wider than the text column."""
    wide = {(entry, e["number"]): e for e in browser.execute_script(EQUATIONS_JS) if e["width"] > e["column"] + 1}
    new = [f"{n} {e['width']} px in a {e['column']} px column: {e['text']}" for (_, n), e in wide.items()
           if (entry, n) not in KNOWN_WIDE_EQUATIONS]
    fixed = sorted(n for (page, n) in KNOWN_WIDE_EQUATIONS if page == entry and (page, n) not in wide)
    assert not new, f"{entry}: display equations wider than the text column at 1280 px: {new}"
    assert not fixed, f"{entry}: equations {fixed} now fit; remove them from KNOWN_WIDE_EQUATIONS"


def test_the_phone_check_sees_a_page_that_a_long_word_pushes_sideways(site, browser):
    """The check above, fed a page that is too wide: a long inline code name that cannot wrap, as the pages of
    chapters 1, 6 and 8 once had. It must see the page at more than 400 px, and name the word; window.innerWidth,
    which the check once used, grows with the page and would have hidden it."""
    chapter = next(e for e in ENTRIES if is_notebook(e))
    phone(browser, True)
    try:
        browser.get(urljoin(site, f"{chapter}.html"))
        browser.execute_script(
            "const p = document.createElement('p');"
            "p.innerHTML = 'see <code class=\"docutils literal\"><span class=\"pre\" style=\"white-space: nowrap\">"
            "M.position.sinusoidal_positions_of_a_very_long_name(n,</span></code>';"
            "document.querySelector('main article section p').after(p);")
        widths = page_width_on_a_phone(browser)
    finally:
        phone(browser, False)
    assert widths["page"] > PHONE_WIDTH and widths["inner"] == widths["page"], widths
    assert any("sinusoidal_positions_of_a_very_long_name" in w for w in widths["wide"]), widths["wide"]


# ---------------------------------------------------------------- code and tables that fit their column

# What does not fit its column, per page, at 1280 px and on a 400 px phone (issue 35, item 5):
#   code     visible ordinary code cells (inputs not folded) whose longest line is wider than the cell;
#   listing  listings of the package's source (show_source), folded or not, that scroll without saying how wide
#            they are (a listing may scroll if it carries a note, class "mha-listing-width", saying its widest line);
#   table    tables wider than their column.
# The chapters' code lines are at most 80 characters, so none is too wide at 1280 px; on a phone code cells and
# listings wrap (book/_static/course.css), and a listing wider than the column at 1280 px says so
# (M.notebook.listing_width_note). A page with a count here is an exception, named with its reason; the test
# fails on a page over its count, and on a page under it (lower the count). The details (section, first line,
# characters of the widest line, pixels) go to _build/screenshots/widths/<page>.json, with folded code cells and
# printed outputs, which are reported but not counted.
KNOWN_WIDE = {}  # page: {kind: (count at 1280 px, count at 400 px)}; every page fits now

WIDTHS_JS = """
const art = document.querySelector('main article') || document.querySelector('main');
const over = e => e.scrollWidth > e.clientWidth + 1;
const where = e => { const s = e.closest('section[id]'); return s ? s.id : ''; };
const longest = e => (e.innerText || '').split('\\n').reduce((a, b) => Math.max(a, b.length), 0);
const item = (kind, e, box) => ({kind: kind, section: where(e), width: Math.round(e.scrollWidth),
  column: Math.round((box || e).clientWidth), chars: longest(e),
  first: (e.innerText || '').split('\\n').find(l => l.trim()) || ''});
const found = [];
const folded = e => !!e.closest('details:not([open])');
art.querySelectorAll('div.cell_input pre').forEach(p => {
  if (!folded(p) && over(p)) { found.push(item('code', p)); } });
art.querySelectorAll('table').forEach(t => {
  const box = t.closest('.table-wrapper') || t.parentElement;
  if (!folded(t) && t.getBoundingClientRect().width > box.clientWidth + 1) {
    const i = item('table', t, box); i.width = Math.round(t.getBoundingClientRect().width); found.push(i); } });
art.querySelectorAll('div.cell_output div.output:not(.text_html) pre').forEach(p => {
  if (!folded(p) && over(p)) { found.push(item('output (reported)', p)); } });
art.querySelectorAll('details:not([open])').forEach(d => { d.open = true; d.dataset.opened = '1'; });
art.querySelectorAll('details[data-opened] div.cell_input pre').forEach(p => {
  if (over(p)) { found.push(item('folded code (reported)', p)); } });
art.querySelectorAll('div.cell_output div.text_html div.highlight pre').forEach(p => {  // folded or not
  const noted = p.closest('div.text_html').querySelector('.mha-listing-width');
  if (over(p) && !noted) { found.push(item('listing', p)); } });
art.querySelectorAll('details[data-opened]').forEach(d => { d.open = false; delete d.dataset.opened; });
return found;
"""


def check_code_listings_and_tables_fit(browser, entry, width):
    """What does not fit its column at this width (the page loaded at it) against KNOWN_WIDE; the details go to
    _build/screenshots/widths/<page>_<width>.json."""
    import collections

    found = browser.execute_script(WIDTHS_JS)
    counts = collections.Counter(f["kind"] for f in found)
    folder = SHOTS / "widths"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{entry.replace('/', '_')}_{width}.json").write_text(json.dumps(found, indent=1, ensure_ascii=False))
    column = 0 if width == 1280 else 1
    print(f"{entry}: too wide for the column at {width} px: { {k: counts[k] for k in ('code', 'listing', 'table')} }; "
          f"reported only: { {k: counts[k] for k in ('folded code (reported)', 'output (reported)')} }")
    for kind in ("code", "listing", "table"):
        now, most = counts[kind], KNOWN_WIDE.get(entry, {}).get(kind, (0, 0))[column]
        wide = [f"{f['section']}: {f['chars']} characters, {f['width']} px in {f['column']} px: {f['first'][:50]!r}"
                for f in found if f["kind"] == kind]
        assert now <= most, f"{entry}: {now} {kind}(s) too wide at {width} px (at most {most}): {wide[:6]}"
        assert now == most, f"{entry}: only {now} {kind}(s) too wide at {width} px now: lower KNOWN_WIDE to {now}"


# The smallest text of a figure, as shown on the page, in CSS pixels: 9 points.
LEGIBLE_PX = 12.0
# Figures whose smallest text shows below LEGIBLE_PX at 1280 px, as (page, cell id), each with its reason.
# mha_lessons.plotting.fit_to_column redraws every other figure for the column when a notebook displays it.
KNOWN_SMALL_FIGURES = set()


def figure_metadata(entry):
    """{file name the site gives the image (sha256 of its bytes, as myst-nb names it): (cell id, the output's
    image metadata)}."""
    import base64
    import hashlib

    found = {}
    nb = json.loads((ROOT / f"{entry}.ipynb").read_text())
    for cell in nb["cells"]:
        for output in cell.get("outputs", []):
            png = output.get("data", {}).get("image/png")
            if png:
                data = base64.b64decode("".join(png) if isinstance(png, list) else png)
                found[hashlib.sha256(data).hexdigest() + ".png"] = (
                    cell.get("id"), output.get("metadata", {}).get("image/png", {}))
    return found


def check_every_figure_is_sharp_and_legible(browser, entry):
    """Each figure of a chapter is stored at twice its display size and, at the width the page shows it at
    1280 px (every fold opened), its smallest text (recorded by mha_lessons.plotting.use_course_style) is at least
    9 points."""
    meta = figure_metadata(entry)
    browser.execute_script("document.querySelectorAll('details').forEach(d => d.open = true);")
    shown = browser.execute_script(
        "return Array.from(document.querySelectorAll('main .cell_output img')).map(i =>"
        " ({file: i.src.split('/').pop(), natural: i.naturalWidth, width: i.getBoundingClientRect().width}));")
    small, blurry = [], []
    for image in shown:
        if image["file"] not in meta:
            continue  # not a matplotlib output of this notebook (a panel's frame, a logo)
        cell, info = meta[image["file"]]
        if "width" not in info or image["natural"] < 1.9 * info["width"]:
            blurry.append(cell)
            continue
        course = info.get("mha_lessons", {})
        if not course.get("smallest_font_pt"):
            continue
        scale = min(1.0, image["width"] / info["width"])
        px = course["smallest_font_pt"] * course["dpi"] / 72 * scale
        if px < LEGIBLE_PX and (entry, cell) not in KNOWN_SMALL_FIGURES:
            small.append(f"cell {cell}: {px:.1f} px ({course['smallest_font_pt']} pt drawn, "
                         f"{info['width']} px wide shown at {image['width']:.0f})")
    assert not blurry, f"{entry}: figures stored at 1x (run M.plotting.use_course_style() first): {blurry}"
    assert not small, f"{entry}: figure text below {LEGIBLE_PX} px as shown: {small}"


CODE_SHARE = 0.25
# Chapters over CODE_SHARE (none: secondary checks, imports and tables are collapsed with hide-input).
KNOWN_CODE_HEAVY = set()


def check_the_lesson_not_the_machinery(browser, entry):
    """Visible code inputs take at most CODE_SHARE of the page's height; no glue call or nbval marker shows."""
    share = browser.execute_script(
        "const main = document.querySelector('main article') || document.querySelector('main');"
        "const inputs = Array.from(main.querySelectorAll('.cell_input')).filter(e => !e.closest('details:not([open])'));"
        "return inputs.reduce((s, e) => s + e.getBoundingClientRect().height, 0) / main.getBoundingClientRect().height;")
    text = browser.execute_script("return document.querySelector('main').innerText;")
    code = browser.execute_script(
        "return Array.from(document.querySelectorAll('main .cell_input')).map(e => e.innerText).join('\\n');")
    for machinery in ("glue(", "NBVAL"):
        assert machinery not in text, f"{entry}: {machinery!r} is visible on the page"
    assert "tests/" not in code, f"{entry}: a code cell shows a comment about the test suite"
    print(f"{entry}: visible code inputs are {share:.0%} of the page's height")
    if entry not in KNOWN_CODE_HEAVY:
        assert share <= CODE_SHARE, f"{entry}: code inputs are {share:.0%} of the page's height (at most {CODE_SHARE:.0%})"


FIRST_LOAD_BYTES = 2_000_000
# Pages over FIRST_LOAD_BYTES on this branch (none once the theme's Font Awesome script was dropped).
KNOWN_HEAVY_PAGES = set()
TEXT_TYPES = (".html", ".js", ".css", ".svg", ".json", ".txt", ".map")


def wire_bytes(site, url, size):
    """What a static host that compresses text (GitHub Pages, Netlify, nginx with gzip on) sends for ``url``:
    the file gzipped if it is text, as it is otherwise (images and woff2 fonts are compressed already)."""
    import gzip

    path = urlparse(url).path
    if not url.startswith(site):
        return size
    file = HTML / path.lstrip("/")
    if path.endswith("/") or not file.is_file():
        return size
    data = file.read_bytes()
    return len(gzip.compress(data, 6)) if file.suffix in TEXT_TYPES else len(data)


def first_visit(browser, site, entry):
    """Load ``entry`` at 1280 px as a first visit: an empty cache, no answer stored by an earlier run of this
    browser, the console log emptied. Returns what MathJax said and what the page loaded, as (url, bytes)."""
    browser.execute_cdp_cmd("Storage.clearDataForOrigin", {"origin": site.rstrip("/"), "storageTypes": "local_storage"})
    browser.execute_cdp_cmd("Network.enable", {})
    browser.execute_cdp_cmd("Network.clearBrowserCache", {})
    browser.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": True})
    browser.get_log("browser")  # drop what earlier pages logged
    try:
        browser.get(urljoin(site, f"{entry}.html"))
        typeset = wait_for_math(browser)
        browser.execute_script("return new Promise(r => setTimeout(r, 300));")
        loaded = browser.execute_script(
            "return performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource'))"
            ".map(r => [r.name, r.encodedBodySize || r.decodedBodySize || 0]);")
    finally:
        browser.execute_cdp_cmd("Network.setCacheDisabled", {"cacheDisabled": False})
    return typeset, loaded


def check_a_first_visit_loads_under_two_megabytes(site, entry, loaded):
    """Everything a first visit loads (the page, styles, scripts, fonts, images), with an empty cache, as
    a host that compresses text sends it; the uncompressed total is printed beside it."""
    raw = sum(size for _, size in loaded)
    sent = sorted(((wire_bytes(site, url, size), url.split("/")[-1].split("?")[0]) for url, size in loaded),
                  reverse=True)
    total = sum(size for size, _ in sent)
    print(f"{entry}: {total / 1e6:.2f} MB compressed, {raw / 1e6:.2f} MB as served by a plain server; "
          f"largest: {sent[:4]}")
    if entry in KNOWN_HEAVY_PAGES:
        return
    assert total <= FIRST_LOAD_BYTES, f"{entry}: a first visit loads {total / 1e6:.2f} MB; the largest: {sent[:4]}"


# ---------------------------------------------------------------- every page, once at 1280 px and once on a phone
#
# Each page is loaded once at each width, and every check runs on that load, in an order that leaves each one the
# page as it needs it: what reads the page first, then what switches the theme (and back), then what opens folds,
# moves sliders and answers questions. (Loading a chapter costs its MathJax and layout again, 0.5-1.7 CPU-s; with
# a load per check, 19 a page, the browser test took about a minute a page.) Each check is a subtest, so a failure
# names the check and the others still run.

@pytest.mark.parametrize("entry", ENTRIES)
def test_the_page_at_1280_px(site, browser, axe_source, subtests, entry):
    """The page on a desktop: a first visit's weight; math, images, requests, launch links, sidebar; no console
    error or warning; the lesson before the machinery; equations, code, listings and tables within the column; axe
    in the light and the dark theme, and the folds' one style in both; the folds by keyboard; figures sharp and
    legible; panels redrawn by keyboard; Check yourself by mouse, after a reload and by keyboard alone."""
    typeset, loaded = first_visit(browser, site, entry)
    with subtests.test(msg="a first visit loads under two megabytes"):
        check_a_first_visit_loads_under_two_megabytes(site, entry, loaded)
    with subtests.test(msg="math, images, requests, widgets, launch links and sidebar"):
        check_the_page(browser, site, entry, typeset)
    with subtests.test(msg="no console error or warning on load"):
        errors = console_errors(browser)
        assert errors == [], f"{entry}: console errors: {errors}"
    if is_notebook(entry):
        with subtests.test(msg="the page shows the lesson, not the machinery"):
            check_the_lesson_not_the_machinery(browser, entry)
    with subtests.test(msg="display equations fit the column"):
        check_equations_fit_the_column(browser, entry)
    with subtests.test(msg="code cells, listings and tables fit the column"):
        check_code_listings_and_tables_fit(browser, entry, 1280)

    browser.execute_script(axe_source)
    for theme in ("light", "dark"):
        switch_theme(browser, theme)
        with subtests.test(msg=f"axe finds no violation of any impact, {theme} theme"):
            violations = axe_violations(browser)
            assert violations == [], f"{entry}, 1280 px, {theme} theme: " + "\n".join(violations)
        if entry in FOLD_PAGES:
            with subtests.test(msg=f"every kind of fold looks alike, {theme} theme"):
                check_one_fold_style(browser, entry, 1280, theme)
    switch_theme(browser, "light")
    height = browser.execute_script("return document.documentElement.scrollHeight;")
    browser.set_window_size(1280, min(height, 16000))
    browser.save_screenshot(str(SHOTS / f"{entry.replace('/', '_')}.png"))
    browser.set_window_size(1280, 1000)

    if entry in PANEL_PAGES:
        with subtests.test(msg="every control of a panel redraws with the keyboard"):
            check_every_control_redraws_with_the_keyboard(browser, site, entry)

    # what a reader opens: the questions answered, the first fold of each kind opened; axe then looks at all of
    # them in one run per theme (a run costs about as much for one element as for several)
    blocks, opened = [], {}
    if entry in QUIZ_PAGES:
        with subtests.test(msg="Check yourself answers every question with its feedback"):
            blocks = answer_every_question(browser, entry)
    if entry in FOLD_PAGES:
        with subtests.test(msg="every kind of fold opens with the keyboard"):
            opened = open_the_first_fold_of_each_kind(browser, entry)
    if blocks or opened:
        for theme in ("light", "dark"):
            switch_theme(browser, theme)
            if blocks:
                with subtests.test(msg=f"the answered Check yourself takes the {theme} theme's colours"):
                    check_the_answered_blocks_take_the_themes_colours(browser, entry, blocks, theme)
            with subtests.test(msg=f"axe finds nothing in the open folds and the answered blocks, {theme} theme"):
                violations = axe_violations(browser, {"include": [*blocks, *(f for _, f, _ in opened.values())]})
                assert violations == [], (f"{entry}, {theme} theme, the answered blocks ({len(blocks)}) and the open "
                                          f"{', '.join(opened) or 'folds (none)'}: " + "\n".join(violations))
        switch_theme(browser, "light")
    if opened:
        with subtests.test(msg="every fold opened closes with the keyboard"):
            close_the_folds(browser, entry, opened)
    if is_notebook(entry):
        with subtests.test(msg="every figure is sharp and its text legible"):
            check_every_figure_is_sharp_and_legible(browser, entry)   # opens every fold
    if entry in QUIZ_PAGES:
        with subtests.test(msg="Check yourself: the answers come back after a reload, and Forget clears them"):
            check_the_answers_come_back_after_a_reload(browser, entry)   # ends on a reload
        with subtests.test(msg="Check yourself with the keyboard alone"):
            check_yourself_with_the_keyboard_alone(browser, entry)


@pytest.mark.parametrize("entry", ENTRIES)
def test_the_page_on_a_phone(site, browser, axe_source, subtests, entry):
    """The page on a 400 px phone: nothing scrolls sideways; code and listings wrap, tables fit; Check yourself
    fits the screen; axe finds nothing; the folds share one style in the light and the dark theme."""
    phone(browser, True)
    try:
        browser.get(urljoin(site, f"{entry}.html"))
        wait_for_math(browser)
        with subtests.test(msg="no page scrolls sideways"):
            check_no_sideways_scroll_on_a_phone(browser, entry)
        with subtests.test(msg="code cells, listings and tables fit the column"):
            check_code_listings_and_tables_fit(browser, entry, PHONE_WIDTH)
        if entry in QUIZ_PAGES:
            with subtests.test(msg="Check yourself fits the screen"):
                check_yourself_fits_a_phone(browser, entry)
        browser.execute_script(axe_source)
        switch_theme(browser, "light")
        with subtests.test(msg="axe finds no violation of any impact"):    # light: tables as cards, panels scroll
            violations = axe_violations(browser)
            assert violations == [], f"{entry}, {PHONE_WIDTH} px, light theme: " + "\n".join(violations)
        if entry in FOLD_PAGES:
            for theme in ("light", "dark"):
                switch_theme(browser, theme)
                with subtests.test(msg=f"every kind of fold looks alike, {theme} theme"):
                    check_one_fold_style(browser, entry, PHONE_WIDTH, theme)
            switch_theme(browser, "light")
        height = browser.execute_script("return document.documentElement.scrollHeight;")
        browser.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                                {"width": 400, "height": min(height, 16000), "deviceScaleFactor": 1, "mobile": True})
        browser.save_screenshot(str(SHOTS / f"phone_{entry.replace('/', '_')}.png"))
    finally:
        phone(browser, False)


PANEL_PAGES, QUIZ_PAGES, FOLD_PAGES = set(panel_pages()), set(quiz_pages()), set(fold_pages())
