# Two commands do all set-up on a fresh machine (Python 3.11 or newer; Linux or macOS):
#   make book   -> builds the HTML book into _build/html (open _build/html/index.html)
#   make test   -> runs every test: lint, helper unit tests, strict build, browser checks, nbval
# Faster loops: make test-unit (under a minute), make test-book, make test-notebooks,
# make nbval NB=book/part1/averaging.ipynb (one notebook). `make lab` opens the notebooks.

# The interpreter you have; override with `make test PYTHON=python3.12`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# Written only after every install step succeeded: a failed install is never taken as finished.
STAMP   = $(VENV)/.installed
PIP     = $(BIN)/python -m pip
# Linux: PyTorch's CPU build from its CPU index first (the default Linux wheel brings several GB
# of CUDA packages). Where that index cannot be reached, pip falls back to the CPU wheel a
# configured find-links directory provides. macOS: the default wheel.
TORCH_VERSION = $(shell sed -n 's/^torch==\([0-9.]*\).*/\1/p' requirements.txt)
ifeq ($(shell uname -s),Linux)
TORCH_INSTALL = "torch==$(TORCH_VERSION)+cpu" --extra-index-url https://download.pytorch.org/whl/cpu
else
TORCH_INSTALL = "torch==$(TORCH_VERSION)"
endif
NBVAL   = --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
          --nbval-cell-timeout=900

.PHONY: book test test-unit test-book test-notebooks nbval lint format install chromium \
        execute lab lock clean check-python diagrams

check-python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { \
	  echo "error: '$(PYTHON)' not found. Install Python 3.11 or newer, or pass" \
	       "PYTHON=/path/to/python3.11 (make test PYTHON=python3.12)." >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "error: $(PYTHON) is Python $$($(PYTHON) -c 'import platform;print(platform.python_version())');" \
	       "the pinned NumPy and PyTorch need Python 3.11 or newer. Pass PYTHON=python3.11." >&2; \
	  exit 1; }

$(STAMP): requirements.txt constraints.txt pyproject.toml
	@$(MAKE) --no-print-directory check-python
	rm -f $(STAMP)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet $(TORCH_INSTALL)
	$(PIP) install --quiet -r requirements.txt -c constraints.txt
	touch $(STAMP)

install: $(STAMP)

book: install
	$(BIN)/jupyter-book build . -W -n --keep-going
	@echo "Open _build/html/index.html in a browser."

# The browser tests drive Debian's chromium; install it when it is missing.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; }

lint: install
	$(BIN)/ruff check helpers tests bench diagrams tools conftest.py
	$(BIN)/ruff format --check helpers tests bench diagrams tools conftest.py

format: install
	$(BIN)/ruff format helpers tests bench diagrams tools conftest.py
	$(BIN)/ruff check --fix helpers tests bench diagrams tools conftest.py

# Everything, in one pytest run (CI's command): lint first, then the unit tests, the strict
# build and browser checks, and nbval over every notebook. The GPT chapter (book/part2/gpt.ipynb)
# trains for about four minutes of the total.
test: install chromium lint
	$(BIN)/python -m pytest tests book $(NBVAL)

test-unit: install
	$(BIN)/python -m pytest -m unit tests

test-book: install chromium
	$(BIN)/python -m pytest -m book tests

test-notebooks: install
	$(BIN)/python -m pytest -m notebooks tests book $(NBVAL)

# Re-run one notebook and compare with its committed outputs: make nbval NB=book/part1/x.ipynb
nbval: install
	$(BIN)/python -m pytest $(NBVAL) $(NB)

# Re-execute one notebook in place after editing it: make execute NB=book/part1/averaging.ipynb
execute: install
	IPYTHONDIR=$(CURDIR)/tests/ipython $(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	  --ExecutePreprocessor.record_timing=False --ExecutePreprocessor.timeout=900 $(NB)

# Redraw every diagram (book/figures/*.svg) from its source in diagrams/.
diagrams: install
	$(BIN)/python -m diagrams

# Open the notebooks in JupyterLab (installed by requirements.txt).
lab: install
	$(BIN)/jupyter lab book/

# Refresh constraints.txt (the exact versions of every package) from requirements.txt alone, in
# a throw-away environment; review the diff, run `make test`, and commit it.
lock: check-python
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet --upgrade pip
	.lock-venv/bin/python -m pip install --quiet -r requirements.txt
	$(PYTHON) tools/write_constraints.py .lock-venv > constraints.txt
	rm -rf .lock-venv

clean:
	rm -rf _build .pytest_cache
