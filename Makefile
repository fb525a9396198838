# Two commands do all set-up on a fresh machine (Python 3.11 or newer; Linux or macOS):
#   make book   -> installs what reading needs (requirements.txt) and builds the HTML book into
#                  _build/html (open _build/html/index.html)
#   make test   -> adds the test toolchain (requirements-test.txt) and runs every test: lint,
#                  helper unit tests, strict build, browser checks, nbval, on every core
# Faster loops: make test-unit (under 2 minutes on 2 cores), make test-book, make test-notebooks,
# make nbval NB=book/part1/averaging.ipynb (one notebook), make test-rounding (the notebooks under
# other CPUs' rounding, before a change to a notebook lands). `make lab` opens the notebooks.

# The interpreter you have; override with `make test PYTHON=python3.12`.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
# Written only after every install step succeeded: a failed install is never taken as finished.
# STAMP: what reading needs; TEST_STAMP: that plus the test toolchain.
STAMP   = $(VENV)/.installed
TEST_STAMP = $(VENV)/.installed-test
PIP     = $(BIN)/python -m pip
# Linux: PyTorch's CPU build from its CPU index first (the default Linux wheel brings several GB
# of CUDA packages). Where that index cannot be reached, pip falls back to the CPU wheel a
# configured find-links directory provides. macOS: the default wheel. Only torch itself comes
# from that index (--no-deps): its dependencies come, pinned, with the requirements next, so
# pip does not ask the PyTorch index for each of them (an unreachable index costs retries: one
# retry, not pip's five, which on an offline machine wait 8 s for nothing).
TORCH_VERSION = $(shell sed -n 's/^torch==\([0-9.]*\).*/\1/p' requirements.txt)
ifeq ($(shell uname -s),Linux)
TORCH_INSTALL = "torch==$(TORCH_VERSION)+cpu" --extra-index-url https://download.pytorch.org/whl/cpu
else
TORCH_INSTALL = "torch==$(TORCH_VERSION)"
endif
NBVAL   = --nbval --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg \
          --nbval-cell-timeout=900
# `make test` runs test files and notebooks on JOBS workers (pytest-xdist), a whole file per
# worker, in the order conftest.py sets: the GPT and modern chapters (their long trainings)
# first, then the tests of the built book (built once), then the rest. One torch thread per
# worker: the workers share the cores instead of oversubscribing them, and outputs stay
# reproducible.
JOBS   ?= $(shell nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)
PARALLEL = -n $(JOBS) --dist loadfile --no-loadscope-reorder --durations=25
# JupyterLab refuses to start as root (containers, cloud machines) unless told to.
LAB_ROOT = $(if $(filter 0,$(shell id -u)),--allow-root)

.PHONY: book test test-unit test-book test-notebooks test-rounding nbval lint format install install-test \
        chromium execute lab lock clean check-python diagrams model

check-python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { \
	  echo "error: '$(PYTHON)' not found. Install Python 3.11 or newer, or pass" \
	       "PYTHON=/path/to/python3.11 (make test PYTHON=python3.12)." >&2; exit 1; }
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || { \
	  echo "error: $(PYTHON) is Python $$($(PYTHON) -c 'import platform;print(platform.python_version())');" \
	       "the pinned NumPy and PyTorch need Python 3.11 or newer. Pass PYTHON=python3.11." >&2; \
	  exit 1; }

# $(call venv_install,REQUIREMENTS): create .venv if needed, PyTorch first, then REQUIREMENTS.
# PyTorch goes through pip, which honours the machine's pip configuration (find-links of a
# local wheel when the PyTorch index is out of reach). The requirements go through uv, pinned:
# it fetches, installs and byte-compiles them in parallel, about 17 s on a fresh 2-core machine
# against pip's 48 s. uv reads none of pip's settings, so where pip is pointed at another index
# or at none (PIP_INDEX_URL, PIP_NO_INDEX or pip.conf, all listed by `pip config list`; see
# README), or where uv cannot run, pip installs the same pinned set. Both byte-compile up
# front, as pip does by default: where PYTHONDONTWRITEBYTECODE is set, nothing would cache the
# compiled modules, and every process (each torchrun worker) would compile torch's Python code
# again as it starts, which doubled the distributed tests' time.
UV_VERSION = 0.13.9
define venv_install
	@$(MAKE) --no-print-directory check-python
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet --retries 1 --no-deps $(TORCH_INSTALL)
	if ! $(PIP) config list | grep -qE '\.(index-url|no-index)=' \
	    && $(PIP) install --quiet "uv==$(UV_VERSION)"; then \
	  $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -r $(1) \
	    -c constraints.txt || $(PIP) install --quiet -r $(1) -c constraints.txt; \
	else $(PIP) install --quiet -r $(1) -c constraints.txt; fi
endef

# Reading: build the book, run the notebooks (`make book`, `make lab`).
$(STAMP): requirements.txt constraints.txt pyproject.toml
	rm -f $(STAMP) $(TEST_STAMP)
	$(call venv_install,requirements.txt)
	touch $(STAMP)

# Testing: the same plus the test toolchain, in one pip run on a fresh machine.
$(TEST_STAMP): requirements-test.txt requirements.txt constraints.txt pyproject.toml
	rm -f $(STAMP) $(TEST_STAMP)
	$(call venv_install,requirements-test.txt)
	touch $(STAMP) $(TEST_STAMP)

install: $(STAMP)

install-test: $(TEST_STAMP)

book: install
	$(BIN)/jupyter-book build . -W -n --keep-going
	@echo "Open _build/html/index.html in a browser."

# The browser tests drive Debian's chromium; install it when it is missing.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  command -v apt-get >/dev/null 2>&1 || { echo "error: no chromium on PATH and no apt-get" \
	    "to install it: install Chromium and put it on PATH as chromium (see README)." >&2; \
	    exit 1; }; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; }

lint: install-test
	$(BIN)/ruff check helpers tests bench diagrams tools conftest.py
	$(BIN)/ruff format --check helpers tests bench diagrams tools conftest.py
	$(BIN)/actionlint .github/workflows/*.yml

format: install-test
	$(BIN)/ruff format helpers tests bench diagrams tools conftest.py
	$(BIN)/ruff check --fix helpers tests bench diagrams tools conftest.py

# Everything, in one pytest run (CI's command): lint first, then the unit tests, the strict
# build and browser checks, and nbval over every notebook, in parallel (see PARALLEL above).
# HF_HUB_OFFLINE=1: the GPT-2 chapter's download cell prints its committed "Skipped" line on
# every machine, with or without a network, so the outputs nbval compares never depend on it.
TEST_ENV = OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1
test: install-test chromium lint
	$(TEST_ENV) $(BIN)/python -m pytest $(PARALLEL) tests book $(NBVAL)

test-unit: install-test
	$(TEST_ENV) $(BIN)/python -m pytest $(PARALLEL) -m unit tests

test-book: install-test chromium
	$(BIN)/python -m pytest -m book tests

test-notebooks: install-test
	$(TEST_ENV) $(BIN)/python -m pytest $(PARALLEL) -m notebooks tests book $(NBVAL)

# Re-run every notebook under other float rounding paths of this CPU and compare with the
# committed outputs: what a machine of another CPU family (Intel, AMD, ARM) sees. PyTorch's
# vectorised kernels (ATEN_CPU_CAPABILITY), MKL's conditional-numerical-reproducibility mode
# (MKL_CBWR) and the instructions oneDNN may use (ONEDNN_MAX_CPU_ISA: in eager mode oneDNN
# computes exact GELU and, with AVX-512, the bfloat16 matrix products) all change the last bits
# of a result; on an x86-64 CPU each of the first two paths below changes the digits of a
# trained model (on an ARM CPU, which has no MKL, they have no effect). On an AMD CPU under
# Linux a third path puts MKL on the code path it takes on an Intel CPU with the same
# instructions (tools/mkl_as_on_intel.c, built with $(CC), preloaded); it changes those digits
# too. The run stops first if MKL did not take that path. On an Intel CPU with AVX-512 the third
# path keeps MKL to its AVX2 kernels (MKL_ENABLE_INSTRUCTIONS=AVX2), which also changes them: a
# toy model's final loss is 0.4096 by default, 0.4193 there, 0.4559 under the first path and
# 0.4178 under the second. The distributed chapter is left out of those: its torch.compile cells
# make TorchInductor generate C++ for the ISA that ATEN_CPU_CAPABILITY names, which under those
# overrides does not compile (default) or gives nan (avx2) on a CPU that has more. It and its
# tests run last, on oneDNN's AVX2 path only: there its GELU and bfloat16 matrix products run on
# other kernels. These paths are slower than the default one (MKL_CBWR=COMPATIBLE took the GPT
# chapter's training from 420 s to over 900 s on a 2-core Intel Xeon), so a cell may run for up
# to 40 minutes here.
ROUNDING_NBVAL = $(NBVAL) --nbval-cell-timeout=2400
MKL_AS_ON_INTEL = $(abspath $(VENV)/lib/mkl_as_on_intel.so)
ON_AMD := $(shell grep -qsm1 AuthenticAMD /proc/cpuinfo && echo yes)
ON_INTEL_AVX512 := $(shell grep -qsm1 GenuineIntel /proc/cpuinfo \
                     && grep -qsm1 -w avx512f /proc/cpuinfo && echo yes)
ROUNDING_PATHS ?= ATEN_CPU_CAPABILITY=avx2,MKL_CBWR=COMPATIBLE,ONEDNN_MAX_CPU_ISA=AVX2 \
                  ATEN_CPU_CAPABILITY=default \
                  $(if $(ON_AMD),LD_PRELOAD=$(MKL_AS_ON_INTEL)) \
                  $(if $(ON_INTEL_AVX512),MKL_ENABLE_INSTRUCTIONS=AVX2)
$(MKL_AS_ON_INTEL): tools/mkl_as_on_intel.c | install-test
	$(CC) -shared -fPIC -O2 -o $@ $<

test-rounding: install-test $(if $(ON_AMD),$(MKL_AS_ON_INTEL))
ifeq ($(ON_AMD),yes)
	@MKL_VERBOSE=1 LD_PRELOAD=$(MKL_AS_ON_INTEL) $(BIN)/python -c \
	  'import torch; torch.ones(8, 8) @ torch.ones(8, 8)' | grep -q 'Advanced Vector Extensions' \
	  || { echo "error: MKL ignored $(MKL_AS_ON_INTEL): no Intel path to test" >&2; exit 1; }
endif
	@set -e; for path in $(ROUNDING_PATHS); do \
	  echo "== notebooks under $$path"; \
	  env $$(echo $$path | tr , ' ') $(TEST_ENV) $(BIN)/python -m pytest $(PARALLEL) \
	    -p no:cacheprovider --ignore=book/part3/distributed.ipynb book $(ROUNDING_NBVAL); \
	done
	@echo "== the distributed chapter and its tests under ONEDNN_MAX_CPU_ISA=AVX2"
	@ONEDNN_MAX_CPU_ISA=AVX2 $(TEST_ENV) $(BIN)/python -m pytest $(PARALLEL) -p no:cacheprovider \
	  book/part3/distributed.ipynb tests/test_distributed.py $(ROUNDING_NBVAL)

# Re-run one notebook and compare with its committed outputs: make nbval NB=book/part1/x.ipynb
nbval: install-test
	$(TEST_ENV) $(BIN)/python -m pytest $(NBVAL) $(NB)

# Re-execute one notebook in place after editing it: make execute NB=book/part1/averaging.ipynb
execute: install
	$(TEST_ENV) IPYTHONDIR=$(CURDIR)/tests/ipython $(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	  --ExecutePreprocessor.record_timing=False --ExecutePreprocessor.timeout=900 $(NB)

# Retrain chapter 8's model and replace the checkpoint the book ships,
# book/explorer/gpt_shakespeare.js (reading the chapter writes its copy to the cache folder).
# Then run tools/export_previous_token_head.py and re-execute the chapters that read the model
# (README, "Running the notebooks yourself", lists them).
model: install
	GPT_EXPORT=$(CURDIR)/book/explorer/gpt_shakespeare.js IPYTHONDIR=$(CURDIR)/tests/ipython \
	  $(BIN)/jupyter nbconvert --to notebook --execute --output-dir $(CURDIR)/_build/model \
	  --ExecutePreprocessor.timeout=1800 book/part2/gpt.ipynb

# Redraw every diagram (book/figures/*.svg) from its source in diagrams/.
diagrams: install
	$(BIN)/python -m diagrams

# Open the notebooks in JupyterLab (installed by requirements.txt, with jupyterlab-myst, which
# renders the MyST figures, exercises and citations).
lab: install
	$(BIN)/jupyter lab $(LAB_ROOT) book/

# Refresh constraints.txt (the exact versions of every package) from requirements-test.txt
# (which includes requirements.txt), in a throw-away environment, PyTorch first as `make install`
# installs it (on Linux the CPU build, so no CUDA package is pinned); review the diff, run
# `make test`, and commit it.
lock: check-python
	rm -rf .lock-venv
	$(PYTHON) -m venv .lock-venv
	.lock-venv/bin/python -m pip install --quiet --upgrade pip
	.lock-venv/bin/python -m pip install --quiet --retries 1 --no-deps $(TORCH_INSTALL)
	.lock-venv/bin/python -m pip install --quiet -r requirements-test.txt
	$(PYTHON) tools/write_constraints.py .lock-venv > constraints.txt
	rm -rf .lock-venv

clean:
	rm -rf _build .pytest_cache
