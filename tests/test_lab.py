"""Chapter 3's reader notebook in a real JupyterLab and Notebook 7, as a learner meets it: run it, move both sliders
with the keyboard, answer its Check yourself questions.

The test starts JupyterLab (`make lab`'s front end, from .venv), then Notebook 7, on a free local port, on a copy of
reader/book/03_multi_head_attention.ipynb in a temporary folder (JupyterLab saves what it runs), and drives
it with the headless Chromium of tests/test_browser.py. It checks that the panel cell gives the live
ipywidgets panel, that the arrow keys move its sliders (not the notebook's cursor), that h only takes
divisors of d_model, that the figure and the numbers change, that no widget error shows, that after a
kernel restart the panel says it is stale, and that the saved notebook, opened again, says how to make it live
instead of "Error displaying widget: model not found". Screenshots: _build/screenshots/lab-<front end>-*.png.
"""

import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from test_browser import SHOTS, require_browser

# `slow`: not in make check
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "reader" / "book" / "03_multi_head_attention.ipynb"
JUPYTER = Path(sys.executable).parent / "jupyter"


def require_lab():
    found = subprocess.run([str(JUPYTER), "lab", "--version"], capture_output=True, text=True)
    if found.returncode == 0:
        return
    message = "JUPYTERLAB TEST DID NOT RUN: jupyterlab is not installed in .venv (requirements.txt pins it)."
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


FRONT_ENDS = {  # the server's command, its option that exposes the app as window.jupyterapp, the page
    "jupyterlab": ("lab", "--LabApp.expose_app_in_browser=True", "lab/tree"),
    "notebook7": ("notebook", "--JupyterNotebookApp.expose_app_in_browser=True", "notebooks"),
}


@pytest.fixture(scope="module", params=sorted(FRONT_ENDS))
def lab(request, tmp_path_factory):
    require_browser()
    require_lab()
    command, expose, page = FRONT_ENDS[request.param]
    folder = tmp_path_factory.mktemp(request.param)
    shutil.copy(NOTEBOOK, folder / NOTEBOOK.name)
    settings = folder / ".settings" / "@jupyterlab" / "apputils-extension"
    settings.mkdir(parents=True)
    (settings / "notification.jupyterlab-settings").write_text('{"fetchNews": "false", "checkForUpdates": false}')
    port, token = free_port(), "mha-lessons-test"
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               JUPYTER_CONFIG_DIR=str(folder / ".jupyter"), JUPYTERLAB_SETTINGS_DIR=str(folder / ".settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(folder / ".workspaces"))
    server = subprocess.Popen(
        [str(JUPYTER), command, "--no-browser", f"--port={port}", "--ip=127.0.0.1", f"--IdentityProvider.token={token}",
         f"--ServerApp.root_dir={folder}", expose, "--allow-root"],
        cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=open(folder / "server.log", "w"))
    deadline = time.time() + 90
    while time.time() < deadline and server.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.5)
    else:
        server.terminate()
        pytest.fail(f"{request.param} did not start: " + (folder / "server.log").read_text()[-2000:])
    yield request.param, f"http://127.0.0.1:{port}/{page}/{NOTEBOOK.name}?token={token}", folder
    server.terminate()
    try:
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


@pytest.fixture(scope="module")
def browser():
    require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    from test_browser import CHROMIUM, DRIVER

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--window-size=1280,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=DRIVER), options=options)
    driver.set_script_timeout(300)
    SHOTS.mkdir(parents=True, exist_ok=True)
    yield driver
    driver.quit()


def wait_for(browser, script, timeout, what):
    """Poll ``script`` (JavaScript returning a value, or a Python callable) until it gives something true."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = script() if callable(script) else browser.execute_script(script)
        if value:
            return value
        time.sleep(0.5)
    browser.save_screenshot(str(SHOTS / "lab-failure.png"))
    pytest.fail(f"timed out after {timeout} s waiting for {what() if callable(what) else what}")


PANEL_TEXT = """
const panel = document.querySelector('.mha-live-panel');
if (!panel) { return null; }
const text = Array.from(panel.querySelectorAll('.jp-OutputArea-output pre')).map(e => e.textContent).join('\\n');
const img = panel.querySelector('img');
return {text: text, img: img ? img.src.length + ':' + img.src.slice(-200) : null};
"""

SLIDER_VALUES = """
return Array.from(document.querySelectorAll('.mha-live-panel .widget-slider .widget-readout'))
  .map(e => e.textContent.trim());
"""


def test_chapter_3_runs_and_its_live_sliders_follow_the_keyboard(lab, browser):
    from selenium.webdriver.common.keys import Keys

    front_end, url, _ = lab

    def shot(name):
        browser.save_screenshot(str(SHOTS / f"lab-{front_end}-{name}.png"))

    browser.get(url)
    wait_for(browser, "return !!(window.jupyterapp && window.jupyterapp.shell.currentWidget"
                      " && window.jupyterapp.shell.currentWidget.sessionContext"
                      " && window.jupyterapp.shell.currentWidget.sessionContext.session"
                      " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel)", 120, "the notebook")
    time.sleep(2)
    shot("opened")
    # the Markdown as the front end renders it: numbers, equation numbers and citations, no MyST
    wait_for(browser, "return document.querySelectorAll('.jp-RenderedMarkdown mjx-container').length > 20", 60,
             "MathJax in the Markdown cells")
    prose = browser.execute_script("return Array.from(document.querySelectorAll('.jp-RenderedMarkdown'))"
                                   ".map(e => e.innerText).join('\\n');")
    for myst in ("{glue", "{eq}", "{cite", "{doc}", ":::", "```{"):
        assert myst not in prose, f"MyST shows in the rendered notebook: {myst}"
    assert re.search(r"Vaswani et al\.,? \(?2017", prose), "no author-year citation"
    browser.execute_script("document.querySelector('.jp-RenderedMarkdown mjx-container[display=\"true\"]')"
                           ".scrollIntoView({block: 'center'});")
    time.sleep(1)
    shot("equation")
    browser.execute_script("window.jupyterapp.commands.execute('notebook:run-all-cells');")
    wait_for(browser, "return !!(document.querySelector('.mha-live-panel .widget-slider .noUi-handle')"
                      " && document.querySelector('.mha-live-panel img'))", 300, "the live panel")
    wait_for(browser, "const k = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;"
                      "return k.status === 'idle' && !document.body.textContent.includes('[*]');", 300,
             "the last cell")
    scroll = "document.querySelector('.mha-live-panel').scrollIntoView({block: 'start'});"
    browser.execute_script(scroll)
    time.sleep(1)
    shot("panel")

    before = browser.execute_script(PANEL_TEXT)
    assert "d_model = 64, h = 4  ->  d_k = d_model / h = 16" in before["text"]
    assert browser.execute_script(SLIDER_VALUES) == ["4", "64"]
    assert browser.execute_script(  # the focused handle itself must say so: Lumino matches ':focus' first
        "const h = document.querySelectorAll('.mha-live-panel .noUi-handle');"
        "return h.length === 2 && Array.from(h).every(e => e.hasAttribute('data-lm-suppress-shortcuts'));")
    active = "return window.jupyterapp.shell.currentWidget.content.activeCellIndex"

    handles = browser.find_elements("css selector", ".mha-live-panel .widget-slider .noUi-handle")
    assert len(handles) == 2
    # d_model one step right: 64 -> 96, whose divisors include 3, 6 and 12; h stays at 4
    handles[1].click()  # the click makes the panel's cell the active one; the keys must not move from it
    active_cell = browser.execute_script(active)
    handles[1].send_keys(Keys.ARROW_RIGHT)
    wait_for(browser, lambda: browser.execute_script(SLIDER_VALUES) == ["4", "96"], 30,
             "d_model to move to 96 with the arrow key")
    # h one step right: 4 -> 6 (the next divisor of 96; 5 is not offered)
    handles[0].click()
    handles[0].send_keys(Keys.ARROW_RIGHT)
    wait_for(browser, lambda: browser.execute_script(SLIDER_VALUES) == ["6", "96"], 30,
             "h to move to 6 with the arrow key")
    after = wait_for(browser, lambda: (lambda p: p if p and "h = 6" in p["text"] else None)(
        browser.execute_script(PANEL_TEXT)), 60, "the redraw")
    browser.execute_script(scroll)
    time.sleep(1)
    shot("moved")
    assert "d_model = 96, h = 6  ->  d_k = d_model / h = 16" in after["text"]
    assert after["img"] != before["img"], "the figure did not change"
    assert "not divisible" not in after["text"]
    assert browser.execute_script(active) == active_cell, "the arrow keys moved the notebook's cursor"
    page = browser.execute_script("return document.body.innerText")
    assert "Error displaying widget" not in page and "model not found" not in page
    assert "Traceback" not in page

    # a kernel restart: the panel can no longer redraw, and says so
    assert not browser.execute_script("const s = document.querySelector('.mha-live-panel .mha-stale');"
                                      "return s && s.offsetParent !== null;")
    browser.execute_script("window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.restart();")
    wait_for(browser, "const s = document.querySelector('.mha-live-panel .mha-stale');"
                      "return s && s.offsetParent !== null;", 60, "the stale-panel note after a restart")
    shot("restarted")
    assert re.search(r"lost its kernel", browser.execute_script("return document.body.innerText"))

    # saved and opened again: the panel's widget is gone with its kernel; the page says what to do
    browser.execute_script("return window.jupyterapp.commands.execute('docmanager:save');")
    wait_for(browser, "return !window.jupyterapp.shell.currentWidget.context.model.dirty", 30, "the save")
    browser.refresh()
    wait_for(browser, "return !!(window.jupyterapp && window.jupyterapp.shell.currentWidget"
                      " && window.jupyterapp.shell.currentWidget.sessionContext"
                      " && window.jupyterapp.shell.currentWidget.sessionContext.session)", 120, "the reopened notebook")
    to_panel = ("const nb = window.jupyterapp.shell.currentWidget.content;"
                "const i = nb.widgets.findIndex(c => c.model.sharedModel.getSource().includes('M.panels.'));"
                "nb.scrollToItem(i, 'start');"
                "const area = nb.widgets[i].node.querySelector('.jp-OutputArea');"
                "return area ? area.innerText : '';")
    seen = [""]

    def instruction():
        seen[0] = browser.execute_script(to_panel)
        return seen[0] if "earlier session" in seen[0] else None

    reopened = wait_for(browser, instruction, 90, lambda: f"the reopened panel's instruction (shown: {seen[0]!r})")
    assert "model not found" not in reopened
    time.sleep(1)
    shot("reopened")


def test_chapter_3s_check_yourself_works_once_its_cell_has_run(lab, browser):
    """The Check yourself block (mha_lessons/course/quiz.py) in a notebook opened for the first time: JupyterLab and
    Notebook 7 do not run the script of a stored output in a notebook they do not trust, so the block shows its
    questions and says to run the cell. Once the cells have run, the same block answers: a number typed and Enter,
    an option chosen with the arrow keys and Check, each with its feedback, while the notebook's own keys (digits
    turn a cell into a heading, arrows move between cells) stay off. A fresh copy of the notebook: the test above
    saved its own, which Jupyter then trusts."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    front_end, url, folder = lab
    fresh = "quiz-" + NOTEBOOK.name
    shutil.copy(NOTEBOOK, folder / fresh)
    browser.get(url.replace(f"/{NOTEBOOK.name}?", f"/{fresh}?"))
    app = "window.jupyterapp.shell.currentWidget"
    wait_for(browser, f"return !!(window.jupyterapp && {app} && {app}.sessionContext && {app}.sessionContext.session"
                      f" && {app}.sessionContext.session.kernel)", 120, "the notebook")
    quiz = ("const nb = window.jupyterapp.shell.currentWidget.content;"
            "const i = nb.widgets.findIndex(c => c.model.sharedModel.getSource().includes('M.quiz'));"
            "nb.scrollToItem(i, 'start'); return i;")
    index = wait_for(browser, lambda: (lambda i: i + 1 if i is not None and i >= 0 else None)(
        browser.execute_script(quiz)), 60, "the Check yourself cell") - 1
    here = f"{app}.node.querySelector('.mha-quiz')"   # this notebook's block (the test above left its own open)
    stored = wait_for(browser, f"const q = {here}; return q && {{ready: q.hasAttribute("
                               "'data-ready'), note: (q.querySelector('.mha-quiz-run') || {}).textContent || '',"
                               "questions: q.querySelectorAll('fieldset').length};", 60, "the stored block")
    assert not stored["ready"] and "Run this cell" in stored["note"] and stored["questions"] == 5, stored
    browser.execute_script(f"{here}.scrollIntoView({{block: 'start'}});")
    time.sleep(1)
    browser.save_screenshot(str(SHOTS / f"lab-{front_end}-quiz-stored.png"))

    browser.execute_script("window.jupyterapp.commands.execute('notebook:run-all-cells');")
    wait_for(browser, f"const q = {here}; return q && q.hasAttribute('data-ready');", 300,
             "the block's script after the run")
    wait_for(browser, f"return {app}.sessionContext.session.kernel.status === 'idle'"
                      f" && !document.body.textContent.includes('[*]');", 300, "the last cell")
    browser.execute_script(quiz)
    time.sleep(1)
    cells = f"return {app}.content.widgets.length;"
    count, active = browser.execute_script(cells), browser.execute_script(f"return {app}.content.activeCellIndex;")
    feedback = (f"return Array.from({here}.querySelectorAll('fieldset')).map(f => "
                "[f.querySelector('.mha-quiz-feedback').getAttribute('data-verdict'),"
                " f.querySelector('.mha-quiz-feedback').innerText]);")

    # question 1, a number: typed into the field, Enter checks it
    field = browser.execute_script(f"return {here}.querySelector('fieldset input[type=text]');")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", field)
    field.click()
    ActionChains(browser).send_keys("2,362,368").send_keys(Keys.ENTER).perform()
    first = wait_for(browser, lambda: (lambda f: f if f[0][0] else None)(browser.execute_script(feedback)), 30,
                     "the first question's feedback")
    assert first[0][0] == "right" and first[0][1].startswith("Right."), first[0]
    field.clear()   # which also takes the focus away: a reader clicks in the field again
    field.click()
    ActionChains(browser).send_keys("2,359,296").send_keys(Keys.ENTER).perform()   # the biases left out
    wait_for(browser, lambda: browser.execute_script(feedback)[0][0] == "wrong", 30, "the mistake's feedback")
    assert "biases" in browser.execute_script(feedback)[0][1]

    # question 4, a choice: the first option clicked, Down to the next, Tab to Check, Space
    box = browser.execute_script(f"return {here}.querySelectorAll('fieldset')[3];")
    radios = box.find_elements("css selector", "input[type=radio]")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'});", box)
    radios[0].click()
    ActionChains(browser).send_keys(Keys.ARROW_DOWN).perform()
    assert radios[1].is_selected(), "the arrow key did not move to the next option"
    ActionChains(browser).send_keys(Keys.TAB).send_keys(Keys.SPACE).perform()
    fourth = wait_for(browser, lambda: (lambda f: f if f[3][0] else None)(browser.execute_script(feedback)), 30,
                      "the fourth question's feedback")
    assert fourth[3][0] in ("right", "wrong") and fourth[3][1], fourth[3]
    browser.save_screenshot(str(SHOTS / f"lab-{front_end}-quiz-answered.png"))

    # the answer's link to its section: the page's script finds the heading in the notebook and scrolls to it
    box.find_element("css selector", ".mha-quiz-reveal").click()
    link = wait_for(browser, lambda: browser.execute_script("return arguments[0].querySelector("
                                                            "'.mha-quiz-feedback a');", box), 30, "the answer's link")
    where = browser.current_url
    link.click()
    time.sleep(1)
    heading = browser.execute_script(
        f"const h = Array.from({app}.node.querySelectorAll('h1, h2, h3, h4')).find(h => h.textContent"
        ".startsWith(arguments[0])); return h && [h.getBoundingClientRect().top, window.innerHeight];",
        link.text.strip("“”"))
    assert heading and 0 <= heading[0] < heading[1], f"the link did not bring {link.text} into view: {heading}"
    assert browser.current_url == where
    assert browser.execute_script(cells) == count, "a key press added or removed a cell"
    assert browser.execute_script(f"return {app}.content.activeCellIndex;") in (active, index), "the keys moved the cursor"
    assert browser.execute_script(f"return {app}.content.widgets[{index}].model.type;") == "code"
    page = browser.execute_script("return document.body.innerText")
    assert "Traceback" not in page
