"""The precomputed panels' frames (mha_lessons/course/panels.py) as image files, loaded when a state is shown.

A panel cell's stored output carries every frame of its grid as PNG data inside the HTML, which
keeps it self-contained in Jupyter and Colab. On the website that would make a page's first load
heavy, so after the build this writes each frame once to ``_static/panel-frames/<hash>.png`` and
rewrites the page to point at the files: the page then holds only the panel's state table, the
browser fetches the frames of the default state as ordinary images and any other frame when a
control selects it. The panel's script is unchanged (it sets ``img.src`` to whatever the table holds).
"""

import base64
import hashlib
import html
import json
import os
import re
from pathlib import Path

PAYLOAD = re.compile(r'(<script type="application/json" class="mha-panel-data">)(.*?)(</script>)', re.DOTALL)
FRAME_SRC = re.compile(r'(<img class="mha-panel-frame"[^>]*?\bsrc=")(data:image/png;base64,[^"]+)(")')
FOLDER = "panel-frames"


def externalize(text, page, static):
    """``text`` (a page's HTML) with every panel frame moved to a file under ``static``/panel-frames.

    Returns the new HTML; ``page`` is the page's path, from which the files' relative URLs are made.
    """
    folder = Path(static) / FOLDER
    relative = os.path.relpath(folder, Path(page).parent).replace(os.sep, "/")

    def url(uri):
        data = base64.b64decode(uri.split(",", 1)[1])
        name = hashlib.sha256(data).hexdigest()[:20] + ".png"
        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / name).exists():
            (folder / name).write_bytes(data)
        return f"{relative}/{name}"

    def payload(match):
        data = json.loads(match.group(2))
        data["frames"] = [url(uri) if uri.startswith("data:") else uri for uri in data["frames"]]
        body = json.dumps(data, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
        return match.group(1) + body + match.group(3)

    text = PAYLOAD.sub(payload, text)
    return FRAME_SRC.sub(lambda m: m.group(1) + html.escape(url(m.group(2))) + m.group(3), text)


def move_frames(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    for page in sorted(out.rglob("*.html")):
        text = page.read_text(encoding="utf-8")
        if "mha-panel-data" in text:
            page.write_text(externalize(text, page, out / "_static"), encoding="utf-8")


def setup(app):
    app.connect("build-finished", move_frames)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
