# evokit: every entry point sets itself up first (scripts/setup.sh is idempotent and fast when
# nothing changed), so each of these works on a fresh clone.
SHELL := /bin/bash
export HARBOR_TELEMETRY := 0
PY := .venv/bin/python
PYTEST_ARGS ?=

.PHONY: setup reproduce test test-slow bench lint clean-cache

setup:
	@scripts/setup.sh dev,llm,scale

## The main job (smoke reproduction): for now, build and verify the bundled example tasks.
reproduce: setup
	$(PY) -m evokit.cli verify examples/tasks tests/data/tb2_style

## The default test suite (what CI runs): everything not marked slow.
test: setup
	$(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

## Slow tests (apt/pip builds, long batteries).
test-slow: setup
	$(PY) -m pytest -m slow $(PYTEST_ARGS)

bench: setup
	$(PY) benchmarks/bench_sandbox.py

lint: setup
	$(PY) -m ruff check evokit tests benchmarks

clean-cache:
	rm -rf $${EVOKIT_CACHE:-$$HOME/.cache/evokit}
