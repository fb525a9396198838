# Two commands do all set-up on a fresh machine (Python 3.11, Debian/Ubuntu for the browser):
#   make book   -> builds the HTML book into _build/html (open _build/html/index.html)
#   make test   -> runs every test: helper unit tests, strict build, browser check, nbval
PYTHON ?= python3.11
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: book test install chromium execute clean

$(BIN)/activate: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --upgrade --quiet pip
	$(BIN)/pip install --quiet -r requirements.txt
	touch $(BIN)/activate

install: $(BIN)/activate

book: install
	$(BIN)/jupyter-book build . -W -n --keep-going
	@echo "Open _build/html/index.html in a browser."

# The browser test drives Debian's chromium; install it when it is missing.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; }

test: install chromium
	$(BIN)/python -m pytest

# Re-execute one notebook in place after editing it: make execute NB=book/averaging.ipynb
execute: install
	$(BIN)/jupyter nbconvert --to notebook --execute --inplace \
	  --ExecutePreprocessor.record_timing=False --ExecutePreprocessor.timeout=900 $(NB)

clean:
	rm -rf _build .pytest_cache
