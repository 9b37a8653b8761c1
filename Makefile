# Two entry points: `make demo` (the package's main job) and `make test` (lint, types and the
# whole suite); `make docs` builds the documentation site into docs/_build/html. Each
# creates .venv itself from a machine with only Python 3.11, pip and gcc; the demo installs
# only what it runs, the test dependencies come with `make test`.
#
# Each test file has one home (test/homes.py, docs/testing.md "Where each test runs"):
#   make test          Kilted (Python 3.11, newest libraries): every home, all of the suite;
#                      the core home first, in a run where ROS cannot be imported
#   make test-jazzy    Python 3.12 + ROS 2 Jazzy's rclpy 7.1 wheels, in .venv-jazzy: the ros home
#   make test-humble   Python 3.10 + the library versions of Ubuntu 22.04 (ROS 2 Humble's),
#                      in .venv-humble: the ros and floors homes; Humble's rclpy API is
#                      checked against its source
# Both find their interpreter in pyenv or as python3.12 / python3.10 on PATH, and leave out
# the tests marked `long` (RELEASE_MARKS): those end-to-end runs run in `make test`.
# `RELEASE_MARKS=` runs them too. Every run uses both cores (pytest-xdist, PYTEST_WORKERS)
# and ends with the time each test file took (.ci/times.py).
PYTHON ?= python3
VENV ?= .venv
ROS ?= kilted
# Constraints for every install (requirements/humble.txt: Ubuntu 22.04's versions)
CONSTRAINTS ?=
TEST_REQUIREMENTS ?= requirements-test.txt
# pytest -m expression of the homes a run takes: empty in `make test` (all of them)
PYTEST_MARKS ?=
RELEASE_MARKS ?= not long
# pytest-xdist workers; whole files to a worker, so a module's fixtures (its nodes, its bus)
# live in one process, in the order conftest.py sorts them (the long ones first)
PYTEST_WORKERS ?= 2
# JUnit reports of the runs, for the per-file times
REPORTS ?= $(VENV)/reports
# One BLAS thread per worker: two workers already fill the two cores, and OpenBLAS threads
# spinning against each other made one SVD 25x slower on a loaded machine (745 ms against
# 30 ms, a 4000x70 matrix at load 8).
PYTEST_ONE = OPENBLAS_NUM_THREADS=1 $(PY) -m pytest -q -p no:cacheprovider --durations=10
# Each selection runs twice: the files that may share the cores on pytest-xdist, then those
# marked `alone` (test/homes.py ALONE: real time on the emulated servo bus, a 200 Hz driver
# against the servos' 100 ms Bus Watchdog) one after another. No test selected (pytest's
# exit 5) is no failure. A worker that a hung test ended (pyproject.toml, faulthandler) is
# replaced once: xdist gives the new worker the rest of that file, the hung test first, so
# a second hang ends the run rather than repeating it. $(call run_tests,NAME,MARKS[,ENV])
run_tests = ($(3) $(PYTEST_ONE) -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder \
		--max-worker-restart=1 \
		-m '$(2)not alone' --junitxml=$(REPORTS)/$(1).xml test || [ $$? -eq 5 ]) && \
	($(3) $(PYTEST_ONE) -m '$(2)alone' --junitxml=$(REPORTS)/$(1)-alone.xml test \
		|| [ $$? -eq 5 ])
# The lab's install and colcon (lab-venv), where test_lab_install.py finds them
LAB_VENV ?= $(VENV)-lab
COLCON_VENV ?= $(VENV)-colcon
export PLAG_LAB_VENV := $(abspath $(LAB_VENV))
export PLAG_COLCON_VENV := $(abspath $(COLCON_VENV))
PACKAGE_FILES := setup.py setup.cfg package.xml $(shell find plag_ros -name '*.py' \
	-o -name '*.yaml' -o -name 'py.typed')
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PIP_C := $(if $(CONSTRAINTS),-c $(CONSTRAINTS))
# pyenv's interpreters first (its shims on PATH fail for a version that is not the active one)
PYENV_ROOT ?= $(or $(shell pyenv root 2>/dev/null),$(HOME)/.pyenv)
find_python = $(or $(lastword $(sort $(wildcard $(PYENV_ROOT)/versions/$(1).*/bin/python))),$\
	$(shell command -v python$(1) 2>/dev/null),$\
	$(error no Python $(1): install it (e.g. pyenv install $(1)) or put python$(1) on PATH))

.PHONY: venv test-venv lab-venv docs-venv demo docs lint test test-venv-jazzy test-jazzy \
	test-venv-humble test-humble bench clean

$(VENV)/.installed: requirements.txt requirements/libraries.txt requirements/ros-$(ROS).txt \
		$(CONSTRAINTS) setup.py
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	# torch pinned: for Python 3.11 the CPU build of 2.13.0 is on disk; anything unpinned
	# pulls a newer CUDA build. With the libraries: the pip command of docs/getting-started.md on a ROS install.
	$(PIP) install -q $(PIP_C) torch==2.13.0 -r requirements/libraries.txt
	$(PIP) install -q $(PIP_C) -r requirements/ros-$(ROS).txt
	$(PIP) install -q --no-deps -e .
	touch $@

$(VENV)/.test-installed: $(VENV)/.installed $(TEST_REQUIREMENTS) requirements/test-tools.txt
	$(PIP) install -q $(PIP_C) -r $(TEST_REQUIREMENTS)
	touch $@

# A lab's install beside the test venv (test/test_lab_install.py): what `pip install
# '.[driver]'` declares, with the ROS wheels standing in for a ROS install, and no test tool;
# this checkout's plag_ros put in again (not editable) whenever it changes. And colcon with
# ament from the registries, in a virtualenv of their own.
$(LAB_VENV)/.installed: setup.py requirements/libraries.txt requirements/ros-$(ROS).txt \
		$(CONSTRAINTS)
	rm -rf $(LAB_VENV)
	$(PYTHON) -m venv $(LAB_VENV)
	$(LAB_VENV)/bin/python -m pip install -q --upgrade pip
	$(LAB_VENV)/bin/python -m pip install -q $(PIP_C) torch==2.13.0 '.[driver]' \
		-r requirements/ros-$(ROS).txt
	touch $@

$(LAB_VENV)/.package: $(LAB_VENV)/.installed $(PACKAGE_FILES)
	$(LAB_VENV)/bin/python -m pip install -q --no-deps --force-reinstall .
	touch $@

$(COLCON_VENV)/.installed: requirements/colcon.txt
	rm -rf $(COLCON_VENV)
	$(PYTHON) -m venv $(COLCON_VENV)
	$(COLCON_VENV)/bin/python -m pip install -q --upgrade pip
	$(COLCON_VENV)/bin/python -m pip install -q -r requirements/colcon.txt
	touch $@

$(VENV)/.docs-installed: $(VENV)/.installed requirements/docs.txt
	$(PIP) install -q $(PIP_C) -r requirements/docs.txt
	touch $@

venv: $(VENV)/.installed

lab-venv: $(LAB_VENV)/.package $(COLCON_VENV)/.installed

test-venv: $(VENV)/.test-installed

docs-venv: $(VENV)/.docs-installed

demo: venv
	$(VENV)/bin/plag-ros sim --duration 10 --report out/demo

# Warnings are errors: a broken link, a missing image or a docstring Sphinx cannot read
# fails the build (CI's Kilted suite runs it after the tests).
docs: $(VENV)/.docs-installed
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html

lint: test-venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# The core home first, with ROS made unimportable (conftest.py), then the rest. With
# PYTEST_MARKS (test-jazzy, test-humble) one run of those homes.
# test_lab_install.py is `long`: where those run, the lab's install comes first
test: lint $(if $(findstring not long,$(PYTEST_MARKS)),,lab-venv)
	rm -rf $(REPORTS) && mkdir -p $(REPORTS)
ifeq ($(PYTEST_MARKS),)
	$(call run_tests,core,,PLAG_TEST_HOME=core)
	$(call run_tests,ros-floors,not core and )
else
	$(call run_tests,homes,($(PYTEST_MARKS)) and )
endif
	$(PY) .ci/times.py $(REPORTS)/*.xml

# Jazzy: its rclpy and message wheels in place of Kilted's (they share the ros-* names, so
# they need a virtualenv of their own).
JAZZY = VENV=.venv-jazzy ROS=jazzy PYTHON=$(call find_python,3.12)

test-venv-jazzy:
	$(MAKE) test-venv $(JAZZY)

test-jazzy:
	$(MAKE) test $(JAZZY) PYTEST_MARKS='ros$(if $(RELEASE_MARKS), and $(RELEASE_MARKS))'

# Humble: what rosdep installs on Ubuntu 22.04 first (as apt would), then the
# Humble recipe of docs/getting-started.md (its pip command, with the same constraints). Humble has no rclpy wheels:
# the suite runs on Kilted's cp310 wheels and test_rclpy_humble_api checks Humble's API.
HUMBLE = VENV=.venv-humble CONSTRAINTS=requirements/humble.txt \
	PYTHON=$(call find_python,3.10) TEST_REQUIREMENTS=requirements/test-tools.txt

.venv-humble/.floor-installed:
	$(call find_python,3.10) -m venv .venv-humble
	.venv-humble/bin/python -m pip install -q --upgrade pip
	# jammy's PyYAML 5.4.1 has no cp310 wheel and builds only with Cython < 3
	.venv-humble/bin/python -m pip install -q 'cython<3' wheel 'setuptools>=77,<81'
	.venv-humble/bin/python -m pip install -q --no-build-isolation -c requirements/humble.txt \
		pyyaml
	.venv-humble/bin/python -m pip install -q -r requirements/humble.txt
	# the tests' Pinocchio, without its numpy>=2 declaration (see the file)
	.venv-humble/bin/python -m pip install -q --no-deps -r requirements/pinocchio-nodeps.txt
	touch $@

test-venv-humble: .venv-humble/.floor-installed
	$(MAKE) test-venv $(HUMBLE)

test-humble: .venv-humble/.floor-installed
	$(MAKE) test $(HUMBLE) PYTEST_MARKS='(ros or floors)$(if $(RELEASE_MARKS), and $(RELEASE_MARKS))'

bench: test-venv
	for b in bench/bench_*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) $(LAB_VENV) $(COLCON_VENV) .venv-jazzy .venv-humble build *.egg-info docs/_build docs/reference/generated
