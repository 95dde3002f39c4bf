# evokit: every entry point sets itself up first (scripts/setup.sh is idempotent and fast when
# nothing changed), so each of these works on a fresh clone.
SHELL := /bin/bash
export HARBOR_TELEMETRY := 0
PY := .venv/bin/python
PYTEST_ARGS ?=
## Test workers (pytest-xdist): a rollout waits on sandbox start-up more than on the CPU, so 2 workers
## on 2 cores finish the suite 1.7x sooner; a module's tests, and the Docker tests, share a worker
## (tests/conftest.py). TEST_WORKERS=0 runs in this process.
TEST_WORKERS ?= 2
XDIST := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

.PHONY: setup setup-browser engine reproduce reproduce-full verdicts nb check test test-slow test-notebooks check-browser \
	bench lint clean-cache

EXTRAS := dev,llm,scale,notebooks,train
setup:
	@scripts/setup.sh $(EXTRAS)

## setup + Debian's chromium and chromium-driver + selenium, for the live browser check.
setup-browser:
	@scripts/setup.sh $(EXTRAS),browser

## Container engines (scripts/engine.sh): docker.io + Docker Compose V2 for Harbor's docker backend
## and evokit's Docker backend; `make engine ENGINES=docker,podman` adds podman. The default suite
## runs them for real, so check and test need it (the tests start and stop dockerd themselves).
ENGINES ?= docker
engine: setup
	@scripts/engine.sh $(ENGINES)

## The main job (smoke reproduction): every notebook at smoke sizes with papermill →
## runs/notebooks/*.ipynb (executed copies), results/<notebook>/ (rows), figures/ (PNG + PDF).
## SEED=100 runs seed block 100 instead, everything under results/block100/ (figures/ untouched);
## UNITS=10 runs the notebooks that take `units` with 10 of them (the registered size), under results/units10/.
reproduce: setup
	$(PY) scripts/run_notebooks.py $(if $(SEED),--seed $(SEED),) $(if $(UNITS),--units $(UNITS),)

## The claims' verdicts of blocks 0, 100 and 200 side by side, from their summary.json (BLOCKS="0 300"
## for others; UNITS=10 for the runs made with UNITS=10). A block not run shows "—".
BLOCKS ?= 0 100 200
verdicts: setup
	$(PY) scripts/verdicts.py $(BLOCKS) $(if $(UNITS),--units $(UNITS),)

## The papers' sizes (500 seeds, 15 generations, 200 GRPO steps) into results/full/: days on a CPU machine.
reproduce-full: setup
	$(PY) scripts/run_notebooks.py --full

## One notebook: make nb NAME=ee_effort (smoke) or make nb NAME=ee_effort FULL=1 (the papers' sizes);
## SEED=100 for another seed block, UNITS=10 for 10 units.
nb: setup
	@test -n "$(NAME)" || { echo "usage: make nb NAME=<notebook> [FULL=1] [SEED=N] [UNITS=N]"; exit 2; }
	$(PY) scripts/run_notebooks.py $(NAME) $(if $(FULL),--full,) $(if $(SEED),--seed $(SEED),) $(if $(UNITS),--units $(UNITS),)

## What CI runs (`bash .ci/run`): the default suite, then the notebooks at smoke sizes with their
## assertions on seed block 0, but for EE's three training notebooks (claims 4–6, 10–12 min each), which
## run in test-slow so that check stays well within an hour on 2 cores (34.7 min on a clean clone with
## 2 test workers; docs/setup-and-tests.md).
check: setup engine
	$(PY) -m pytest -m "not slow and not notebooks" $(XDIST) $(PYTEST_ARGS)
	$(PY) -m pytest -m "notebooks and not slow" $(XDIST) $(PYTEST_ARGS)

## The default test suite: everything not marked slow or notebooks (under ~15 min on 2 cores).
test: setup engine
	$(PY) -m pytest -m "not slow and not notebooks" $(XDIST) $(PYTEST_ARGS)

## Slow tests (apt/pip builds, long batteries, the lineage browser in headless Chromium, block 100's
## notebooks, EE's training notebooks on blocks 0 and 100).
test-slow: setup-browser
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

## The notebooks end to end at smoke sizes on block 0 (papermill into temporary folders, nbval), but for
## EE's training notebooks (test-slow): tens of minutes.
test-notebooks: setup
	$(PY) -m pytest -m "notebooks and not slow" $(XDIST) $(PYTEST_ARGS)

## The lineage browser in a real browser: JupyterLab + headless Chromium, slider and menu moved, no
## console error (scripts/check_browser.py → results/browser_check/: report.json, screenshots; ~2 min).
check-browser: setup-browser
	$(PY) scripts/check_browser.py $(BROWSER_ARGS)

bench: setup
	$(PY) benchmarks/bench_sandbox.py
	$(PY) benchmarks/bench_difficulty.py
	$(PY) benchmarks/bench_evolve.py
	$(PY) benchmarks/bench_parallel.py
	$(PY) benchmarks/bench_rollout.py
	$(PY) benchmarks/bench_trl.py

lint: setup
	$(PY) -m ruff check evokit tests benchmarks scripts notebooks

clean-cache:
	rm -rf $${EVOKIT_CACHE:-$$HOME/.cache/evokit}
