"""Chapter 3's reader notebook in a real JupyterLab and Notebook 7, as a learner meets it: run it, move both sliders
with the keyboard.

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
    yield request.param, f"http://127.0.0.1:{port}/{page}/{NOTEBOOK.name}?token={token}"
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

    front_end, url = lab

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
