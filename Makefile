# Two entry points: `make demo` (the package's main job) and `make test` (lint, types and the
# whole suite). Each creates .venv itself from a machine with only Python 3.11, pip and gcc;
# the demo installs only what it runs, the test dependencies come with `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: venv test-venv demo lint test bench clean

$(VENV)/.installed: requirements.txt setup.py
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first and pinned: the CPU build of 2.13.0 is on disk; anything unpinned pulls CUDA.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -r requirements.txt
	$(PIP) install -q --no-deps -e .
	touch $@

$(VENV)/.test-installed: $(VENV)/.installed requirements-test.txt
	$(PIP) install -q -r requirements-test.txt
	touch $@

venv: $(VENV)/.installed

test-venv: $(VENV)/.test-installed

demo: venv
	$(VENV)/bin/plag-ros sim --duration 10 --report out/demo

lint: test-venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

test: lint
	$(PY) -m pytest -q test

bench: test-venv
	for b in bench/bench_*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
