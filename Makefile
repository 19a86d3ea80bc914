# The course's commands. Each creates .venv and installs what it needs first: `make book` only
# requirements-book.txt (no torch), the others requirements.txt (everything).
#   make book     build the website into _build/html (warnings are errors)
#   make check    unit tests and doctests: the edit loop (no website, no notebooks, no browser)
#   make test     the strict book build; unit tests, doctests, nbval on every notebook, the browser,
#                 JupyterLab and Colab wheel tests; then `make portability`
#   make portability  notebooks, doctests and unit tests again under settings that round like other CPUs and BLAS
#   make execute  re-run every notebook in place after changing the code, storing the new outputs
#   make bench    run the benchmarks under benchmarks/, writing tables to mha_lessons/results/
#   make lab      JupyterLab (installed in .venv) on the reader notebooks, reader/book/, with live sliders
#   make pdf      the book as one PDF, _build/latex/mha_lessons.pdf (XeLaTeX from Debian's TeX Live; not in make test)

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
BOOK_STAMP := $(VENV)/.installed-book
NOTEBOOKS := $(wildcard book/*.ipynb)
# PyTorch's CPU wheels: `make TORCH_INDEX=https://download.pytorch.org/whl/cpu venv` (PyPI's Linux wheel is CUDA's).
TORCH_INDEX ?=
PIP_INDEX := $(if $(TORCH_INDEX),--extra-index-url $(TORCH_INDEX),)

.PHONY: venv book check test portability execute bench clean lab pdf

# pytest on every core (pytest-xdist), each worker with one BLAS and OpenMP thread: two workers with two threads
# each would fight over two cores. Each file (a notebook's cells, a test file) runs on one worker, in order
# (tests/conftest.py). Markers: `slow` (not in make check), `machine_independent` (not in make portability).
PYTEST := OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 $(BIN)/python -m pytest \
	-n auto --dist loadscope --no-loadscope-reorder
NBVAL := --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

$(STAMP): requirements.txt requirements-book.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(PIP_INDEX) -r requirements.txt
	touch $(STAMP) $(BOOK_STAMP)

# The website needs only Jupyter Book and the theme (the full environment includes them).
$(BOOK_STAMP): requirements-book.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-book.txt
	touch $(BOOK_STAMP)

venv: $(STAMP)

book: $(BOOK_STAMP)
	$(BIN)/jupyter-book build . --warningiserror --nitpick --keep-going
	$(BIN)/python scripts/vendor_assets.py
	@echo "The website: $(CURDIR)/_build/html/index.html"

check: $(STAMP)
	$(PYTEST) -m "not slow" tests mha_lessons

test: $(STAMP) book
	$(PYTEST) $(NBVAL) tests mha_lessons $(NOTEBOOKS)
	$(BIN)/python scripts/portability.py

portability: $(STAMP)
	$(BIN)/python scripts/portability.py

execute: $(STAMP)
	$(BIN)/python scripts/execute_notebooks.py

clean:
	rm -rf _build .pytest_cache

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_mha.py
	$(BIN)/python benchmarks/bench_gpu_ceilings.py --if-gpu
	$(BIN)/python benchmarks/bench_widgets.py
	$(BIN)/python benchmarks/bench_blockwise.py

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=reader/book

# The PDF: Jupyter Book's LaTeX builder, then latexmk with XeLaTeX (Sphinx's Makefile in _build/latex), offline.
# It installs no system package; the check below names the Debian ones when a tool or font is missing.
PDF_DEBS := texlive-xetex texlive-latex-recommended texlive-latex-extra texlive-fonts-recommended lmodern \
	fonts-freefont-otf fonts-dejavu-core latexmk
pdf: $(BOOK_STAMP)
	@missing=""; \
	for tool in xelatex latexmk fc-list; do command -v $$tool >/dev/null 2>&1 || missing="$$missing [$$tool]"; done; \
	for font in FreeSerif FreeMono "DejaVu Sans"; do \
		fc-list 2>/dev/null | grep -q "$$font" || missing="$$missing [font $$font]"; done; \
	if [ -n "$$missing" ]; then \
		echo "make pdf needs XeLaTeX, latexmk and fonts that are missing:$$missing. On Debian or Ubuntu:"; \
		echo "  sudo apt-get install -y --no-install-recommends $(PDF_DEBS)"; \
		exit 1; \
	fi
	LATEXOPTS="-interaction=nonstopmode -halt-on-error" $(BIN)/jupyter-book build . --builder pdflatex
	@test -s _build/latex/mha_lessons.pdf
	@echo "The PDF: $(CURDIR)/_build/latex/mha_lessons.pdf"
