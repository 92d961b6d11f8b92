# metatune — every target creates .venv when it is missing.
PYTHON ?= python3.11
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
INSTALL_LOG := $(VENV)/install.log

.PHONY: setup demo test test-all train-zoo bench clean

$(STAMP): pyproject.toml
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found (metatune needs Python 3.11 or 3.12: make PYTHON=python3.12 ...)"; exit 2; }
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "installing metatune and its pinned dependencies into $(VENV) (log: $(INSTALL_LOG))"
	@{ $(BIN)/pip install --upgrade pip && $(BIN)/pip install -e '.[test]'; } >$(INSTALL_LOG) 2>&1 \
		|| { tail -n 40 $(INSTALL_LOG); echo "error: pip install failed; full log: $(INSTALL_LOG)"; exit 1; }
	@touch $(STAMP)

setup: $(STAMP)  ## create .venv and install metatune with pinned dependencies

demo: $(STAMP)  ## the main job: tune ResNet-18's C6 with the shipped zoo checkpoint (metatune strategy)
	$(BIN)/metatune device
	$(BIN)/metatune zoo resolve
	mkdir -p runs
	$(BIN)/metatune tune --workload C6 --trials 32 --strategy metatune --json runs/demo-C6.json  # its database: runs/tune/, per device

train-zoo: $(STAMP)  ## train native checkpoints: dataset (if missing or unfinished) → train → evaluate → publish a new version, per train/configs/*.yaml (DEVICES="ID ..." for some); adapted ones come from `metatune zoo adapt`
	$(BIN)/python -m metatune.learn.train_zoo $(DEVICES)

bench: $(STAMP)  ## head-to-head on ResNet-18's layers (hours; resumable): metatune, xgb, xgb-transfer (where this device has a dataset), random; PyTorch and peak references
	$(BIN)/metatune bench --suite resnet18 --budgets 16,32,64,128,256 --out runs/bench-resnet18  # xgb-transfer where this device has a dataset

test: $(STAMP)  ## fast test suite (what CI runs); pytest's exit 5 (no test collected) fails it
	@$(BIN)/python -m pytest -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "error: pytest collected no tests (exit 5): the test suite is missing or deselected" >&2; exit 1; fi; \
	exit $$rc

test-all: $(STAMP)  ## including tests marked slow
	$(BIN)/python -m pytest -q -m ""

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
