# `make train` and `make test` are all a fresh machine needs: each creates .venv when it
# is missing and installs what it needs into it first. Two install levels, one stamp
# each: `make train` installs jaxsac alone (BASE_STAMP: what Pendulum needs), `make test`
# every extra of setup.cfg (ALL_STAMP), so a `make test` after `make train` adds them.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
BASE_STAMP := $(VENV)/.jaxsac-installed-base
ALL_STAMP := $(VENV)/.jaxsac-installed-all
EXTRAS := $(shell sed -n '/^\[options.extras_require\]/,/^\[/s/^\([a-z_]*\) =.*/\1/p' setup.cfg | paste -sd, -)
PYTEST_ARGS ?= -n auto --dist worksteal --durations=15

.PHONY: install train test test-learning lint bench-peers clean
PEERS_ARGS ?=
SOLVE_ARGS ?=

install: $(ALL_STAMP)

$(BASE_STAMP): setup.cfg requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -e .
	touch $@

$(ALL_STAMP): setup.cfg requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -e '.[$(EXTRAS)]'
	touch $@ $(BASE_STAMP)

# A new run in the run folder runs/pendulum each time (--overwrite replaces the last one;
# --resume instead would continue it).
train: $(BASE_STAMP)
	$(PY) -m experiments.train --tuned Pendulum-v1 --total-env-steps 20000 --log-dir runs/pendulum \
		--overwrite

lint: $(ALL_STAMP)
	$(PY) -m ruff check .

# Two sessions: the tests that check plumbing and math compile far more than they run, so
# their programs are compiled for speed of compilation (FAST_COMPILE: the same programs,
# less optimized machine code, other rounding than the default build); the learning tests
# run long programs whose bars were measured with the default build, so they keep it.
FAST_COMPILE := --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true
test: $(ALL_STAMP)
	$(PY) -m ruff check .
	XLA_FLAGS="$$XLA_FLAGS $(FAST_COMPILE)" $(PY) -m pytest -m 'not learning' $(PYTEST_ARGS)
	$(PY) -m pytest -m learning $(PYTEST_ARGS)

# The learning tests with the reference's whole budgets of env steps (`make test` asks
# the same bars earlier, in runs sized for CI), and the tests marked `long`, too long
# for make test's budget.
test-learning: $(ALL_STAMP)
	$(PY) -m pytest -m 'learning or long' --full-learning $(PYTEST_ARGS)

# Side-by-side comparison with stable-baselines3, sbx and rejax (their own .venv-peers):
# speed and returns, then the time each takes to solve Pendulum-v1, CartPole-v1 and
# MuJoCo Playground's CartpoleBalance (against brax's SAC).
bench-peers: $(ALL_STAMP)
	bash experiments/benchmarks/setup_peers.sh
	$(PY) -m experiments.benchmarks.compare_peers $(PEERS_ARGS)
	$(PY) -m experiments.benchmarks.time_to_solve $(SOLVE_ARGS)
	$(PY) -m experiments.benchmarks.time_to_solve --task cartpole $(SOLVE_ARGS)
	$(PY) -m experiments.benchmarks.time_to_solve --task cartpole_balance $(SOLVE_ARGS)

clean:
	rm -rf $(VENV) .venv-peers runs .pytest_cache .ruff_cache .hypothesis
