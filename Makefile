# specrace: `make demo` runs the simulator on the default scenario; `make test` runs the tests.
# Both work on a fresh machine: they create .venv and install the project first.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

BASE_STAMP := $(VENV)/.base-stamp
WHEELS := .cache/wheels/.extras-stamp

.PHONY: notebooks demo test test-slow wheels conformance conformance-all calibrate-row-ops lint format golden bench figures clean

bench: $(BASE_STAMP)
	$(BIN)/python -m sim bench

# The simulator alone (simpy, numpy, pandas, pyarrow, matplotlib): what `make demo` needs.
$(BASE_STAMP): pyproject.toml setup.py
	@echo "make: creating $(VENV) and installing specrace (simulator only, about 1 minute)"
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e .
	touch $@

# Everything the tests need: the test tools and the GPU half's CPU builds (torch, triton, fla).
$(STAMP): $(BASE_STAMP)
	@echo "make: installing the test extras (pytest, hypothesis, ruff, CPU torch/triton/fla; a few minutes once)"
	$(BIN)/python -m pip install -q -e '.[test]'
	@# tests/sim/explore/test_report.py opens the run report in a real headless Chromium (skipped without it)
	@if ! command -v chromium >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "make: installing chromium for the report's browser tests"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium \
		|| echo "make: chromium not installed: tests/sim/explore/test_report.py's browser tests will skip"; \
	fi
	touch $@

# The three notebooks run top to bottom in a real kernel and stored with their outputs, so
# their figures show where they are read, the same bytes on a rerun (tests/project/test_notebooks.py).
notebooks: $(STAMP)
	$(BIN)/python scripts/run_notebooks.py

demo: $(BASE_STAMP)
	$(BIN)/python -m sim run --scenario qwen35-mtp3 --policy all --seed 0 --out out/demo --force --brief --picture

# The main suite (long property sweeps bounded: `make test-slow` runs them in full), then the
# conformance suite against vLLM's real InputBatch in its own env.
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest -q -m "not slow" -n auto --dist worksteal
	$(MAKE) conformance

test-slow: $(STAMP) $(WHEELS)
	$(BIN)/python -m pytest -q -m slow -n auto --dist worksteal

# Every wheel pyproject.toml's dependencies and extras take, downloaded once into .cache/wheels
# (beside the conformance suite's vLLM wheels): tests/project/test_extras.py installs each extra into a
# fresh venv from there alone, offline. About 560 MB, most of it the CPU torch and triton.
wheels: $(WHEELS)
$(WHEELS): pyproject.toml scripts/extras_requirements.py $(BASE_STAMP)
	mkdir -p .cache/wheels
	$(BIN)/python scripts/extras_requirements.py > .cache/extras-requirements.txt
	$(BIN)/python -m pip download -q --only-binary=:all: -d .cache/wheels \
		-r .cache/extras-requirements.txt
	touch $@

conformance:
	bash tests/conformance/setup.sh
	.cache/vllm-env/bin/python -m pytest -q --confcutdir=tests/conformance tests/conformance

# sim.resolve's release facts against every modelled release 0.23.0-0.34.0 (AST over each
# wheel's sources; downloads each wheel once, ~280 MB) -> data/conformance/releases.json.
conformance-all: $(STAMP)
	CACHE=$(CURDIR)/.cache PYTHON=$(BIN)/python bash tests/conformance/all_releases.sh

# The README's pictures, from scratch (docs/images/; a few minutes on 2 cores).
figures: $(STAMP)
	PY=$(BIN)/python bash scripts/figures.sh

# Time vLLM's real InputBatch row ops -> data/params/vllm-<V>-row-ops.{toml,csv}
calibrate-row-ops:
	bash tests/conformance/setup.sh
	.cache/vllm-env/bin/python tests/conformance/measure_row_ops.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# Regenerate the golden files on purpose (tests compare against them).
golden: $(STAMP)
	$(BIN)/python -m sim schedule --scenario minimal-race --seed 0 --out out/golden --force
	cp out/golden/schedule.json data/golden/minimal-race.schedule.json

clean:
	rm -rf $(VENV) out .pytest_cache .hypothesis
