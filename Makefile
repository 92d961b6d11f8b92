# metatune — every target creates .venv when it is missing.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: setup demo test test-all train-zoo bench clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found (metatune needs Python 3.11)"; exit 2; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)  ## create .venv and install metatune with pinned dependencies

demo: $(STAMP)  ## the main job on the shipped default: measure the quick suite on this CPU
	$(BIN)/metatune device
	$(BIN)/metatune measure "dense:m=64,n=64,k=64" --random 16
	$(BIN)/metatune measure C6 --random 32

test: $(STAMP)  ## fast test suite (what CI runs)
	$(BIN)/python -m pytest -q

test-all: $(STAMP)  ## including tests marked slow
	$(BIN)/python -m pytest -q -m ""

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
