"""Serve MathJax, RequireJS and the Jupyter widgets HTML manager from the built site itself.

A Jupyter Book page loads these three from CDNs by default, so the course would break
offline, behind strict firewalls and in a browser test without network. This step, run
by `make book` after the Sphinx build, fetches pinned releases from the npm registry with
the ordinary npm client (`npm pack`, no dependencies installed), checks each tarball's
sha512 against the pin below, and copies the files the pages load (only the packages some page refers to,
and only MathJax's CommonHTML component with what it loads on demand) into
_build/html/_static/offline/. `_config.yml` points the pages there (mathjax_path,
nb_ipywidgets_js). Tarballs are cached in _build/vendor_cache/.

Usage: python scripts/vendor_assets.py [HTML_DIR]   (default: _build/html)
"""

import base64
import hashlib
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / "_build" / "vendor_cache"

# name, version, npm's sha512 integrity, {path in the package: path under _static/offline}
PACKAGES = [
    ("mathjax", "3.2.2",
     "sha512-Bt+SSVU8eBG27zChVewOicYs7Xsdt40qm4+UpHyX7k0/O9NliPc+x77k1/FEsPsjKPZGJvtRZM1vO+geW0OhGw==",
     {"package/es5/": "mathjax/"}),
    ("requirejs", "2.3.8",
     "sha512-7/cTSLOdYkNBNJcDMWf+luFvMriVm7eYxp4BcFCsAX0wF421Vyce5SXP17c+Jd5otXKGNehIonFlyQXSowL6Mw==",
     {"package/require.js": "require.js"}),
    ("@jupyter-widgets/html-manager", "1.0.15",
     "sha512-5thBIV6ymNgmPVOHvzx+gGy8ZSKmSazhtGw4/c4xJDVzRhG9PTeQsRjF3FUTopvFi//SABeNz1yp47bCrJ3CQA==",
     {"package/dist/": "html-manager/"}),
]
# Of MathJax's es5 folder the pages need only the component they load (_config.yml's mathjax_path), its fonts,
# the TeX extensions it may autoload, and the menu's accessibility parts (speech, explorer) that it loads on demand;
# the other combined builds (SVG output, MathML-only, full, node) are never asked for.
MATHJAX_KEEP = ("tex-mml-chtml.js", "input/", "output/chtml.js", "output/chtml/", "ui/", "a11y/", "sre/")
SKIP_SUFFIXES = (".map", ".LICENSE.txt")
SKIP_NAMES = {"embed.js", "libembed-amd.js"}  # the page uses embed-amd.js only


def tarball(name, version, integrity):
    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"{name.replace('@', '').replace('/', '-')}-{version}.tgz"
    if not path.exists():
        print(f"fetching {name}@{version} from the npm registry", flush=True)
        result = subprocess.run(
            ["npm", "pack", f"{name}@{version}", "--pack-destination", str(CACHE), "--silent"],
            check=True, capture_output=True, text=True,
        )
        packed = CACHE / result.stdout.strip().splitlines()[-1]
        packed.rename(path)
    digest = "sha512-" + base64.b64encode(hashlib.sha512(path.read_bytes()).digest()).decode()
    if digest != integrity:
        path.unlink()
        raise SystemExit(f"{name}@{version}: integrity {digest} does not match the pinned {integrity}")
    return path


def extract(path, mapping, destination):
    with tarfile.open(path) as archive:
        for member in archive.getmembers():
            if not member.isfile():
                continue
            for source, target in mapping.items():
                if member.name == source or (source.endswith("/") and member.name.startswith(source)):
                    relative = member.name[len(source):] if source.endswith("/") else ""
                    if target == "mathjax/" and not relative.startswith(MATHJAX_KEEP):
                        continue
                    out = destination / target / relative if relative else destination / target
                    if out.name in SKIP_NAMES or out.name.endswith(SKIP_SUFFIXES):
                        continue
                    out.parent.mkdir(parents=True, exist_ok=True)
                    with archive.extractfile(member) as src, open(out, "wb") as dst:
                        shutil.copyfileobj(src, dst)


def main(argv):
    html = Path(argv[0]) if argv else ROOT / "_build" / "html"
    if not (html / "index.html").exists():
        raise SystemExit(f"{html} holds no built site; run the book build first")
    if shutil.which("npm") is None:
        raise SystemExit("npm (Node.js) is needed to fetch MathJax, RequireJS and the widget manager; install Node.js")
    destination = html / "_static" / "offline"  # not "vendor": the theme keeps its own files there
    shutil.rmtree(destination, ignore_errors=True)
    pages = [page.read_text(errors="ignore") for page in html.rglob("*.html")]
    shipped = []
    for name, version, integrity, mapping in PACKAGES:
        # ship a package only if some page loads it (no page loads the widget manager when no chapter shows an
        # ipywidgets panel)
        if not any(f"_static/offline/{target.rstrip('/')}" in page for target in mapping.values() for page in pages):
            continue
        extract(tarball(name, version, integrity), mapping, destination)
        shipped.append(f"{name} {version}")
    size = sum(f.stat().st_size for f in destination.rglob("*") if f.is_file())
    print(f"vendored {', '.join(shipped) or 'nothing'} into {destination} ({size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main(sys.argv[1:])
