# Two entry points: `make demo` (the package's main job) and `make test` (the whole suite).
# Each creates .venv itself from a machine with only Python 3.11, pip and gcc.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: venv demo test bench clean

$(VENV)/.installed: requirements.txt requirements-test.txt setup.py
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch first and pinned: the CPU build of 2.13.0 is on disk; anything unpinned pulls CUDA.
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -r requirements.txt -r requirements-test.txt
	$(PIP) install -q --no-deps -e .
	touch $@

venv: $(VENV)/.installed

demo: venv
	$(VENV)/bin/plag-ros sim --duration 10

test: venv
	$(PY) -m pytest -q test

bench: venv
	for b in bench/bench_*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) build *.egg-info
