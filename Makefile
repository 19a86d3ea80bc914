# The course's commands. Each creates .venv and installs requirements.txt first if needed.
#   make book     build the website into _build/html (warnings are errors)
#   make test     the strict book build; unit tests, doctests, nbval on every notebook and the Colab
#                 wheel test; then `make portability`
#   make portability  nbval and doctests again under settings that round like other CPUs and BLAS
#   make execute  re-run every notebook in place after changing the code, storing the new outputs
#   make bench    run the benchmarks under benchmarks/, writing tables to mha_lessons/results/
#   make lab      JupyterLab (installed in .venv) on the reader notebooks, reader/book/, with live sliders

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NOTEBOOKS := $(wildcard book/*.ipynb)

.PHONY: venv book test portability execute bench clean lab

$(STAMP): requirements.txt pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	touch $(STAMP)

venv: $(STAMP)

book: $(STAMP)
	$(BIN)/jupyter-book build . --warningiserror --nitpick --keep-going
	$(BIN)/python scripts/vendor_assets.py
	@echo "The website: $(CURDIR)/_build/html/index.html"

test: book
	$(BIN)/python -m pytest --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
		tests mha_lessons $(NOTEBOOKS)
	$(BIN)/python scripts/portability.py

portability: $(STAMP)
	$(BIN)/python scripts/portability.py

execute: $(STAMP)
	$(BIN)/python scripts/execute_notebooks.py

clean:
	rm -rf _build .pytest_cache

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_mha.py
	$(BIN)/python benchmarks/bench_widgets.py
	$(BIN)/python benchmarks/bench_blockwise.py

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=reader/book
