# `make train` and `make test` are all a fresh machine needs: each creates .venv when it
# is missing and installs jaxsac with its requirements into it first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.jaxsac-installed
PYTEST_ARGS ?= -n auto --dist worksteal --durations=15

.PHONY: install train test test-learning lint bench-peers clean
PEERS_ARGS ?=
SOLVE_ARGS ?=

install: $(STAMP)

$(STAMP): setup.cfg requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt -e '.[dev,ray,playground,locomotion]'
	touch $(STAMP)

train: $(STAMP)
	$(PY) -m experiments.train --tuned Pendulum-v1 --total-env-steps 20000 --log-dir runs/pendulum \
		--checkpoint-dir runs/pendulum/checkpoints

lint: $(STAMP)
	$(PY) -m ruff check .

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m pytest $(PYTEST_ARGS)

# The learning tests with the reference's whole budgets of env steps (`make test` asks
# the same bars earlier, in runs sized for CI).
test-learning: $(STAMP)
	$(PY) -m pytest -m learning --full-learning $(PYTEST_ARGS)

# Side-by-side comparison with stable-baselines3, sbx and rejax (their own .venv-peers):
# speed and returns, then the time each takes to solve Pendulum-v1, CartPole-v1 and
# MuJoCo Playground's CartpoleBalance (against brax's SAC).
bench-peers: $(STAMP)
	bash experiments/benchmarks/setup_peers.sh
	$(PY) -m experiments.benchmarks.compare_peers $(PEERS_ARGS)
	$(PY) -m experiments.benchmarks.time_to_solve $(SOLVE_ARGS)
	$(PY) -m experiments.benchmarks.time_to_solve --task cartpole $(SOLVE_ARGS)
	$(PY) -m experiments.benchmarks.time_to_solve --task cartpole_balance $(SOLVE_ARGS)

clean:
	rm -rf $(VENV) .venv-peers runs .pytest_cache .ruff_cache .hypothesis
