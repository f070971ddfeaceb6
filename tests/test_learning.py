"""End-to-end learning: the tuned examples reach their bars (minutes on a 2-core CPU)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxsac

pytestmark = pytest.mark.learning

PENDULUM_BAR = -250.0  # RLlib's bar for its tuned Pendulum-v1, here per seed


def test_tuned_pendulum_five_seeds_vmapped_reach_the_bar():
    config = jaxsac.tuned("Pendulum-v1")
    assert config.total_env_steps == 20_000
    train_fn = jax.jit(jax.vmap(jaxsac.make_train(config)))
    _, metrics = train_fn(jax.random.split(jax.random.key(0), 5))
    final = np.asarray(metrics["eval_return"])[:, -1]  # 10 deterministic episodes per seed
    assert np.all(final >= PENDULUM_BAR), final


def test_tuned_pendulum_on_the_gymnasium_backend_reaches_the_bar():
    config = jaxsac.tuned("Pendulum-v1", backend="gymnasium")
    result = jaxsac.train(config, progress=False)
    assert result.metrics["eval_return"][-1] >= PENDULUM_BAR, result.metrics["eval_return"]


def test_mountain_car_learns_beyond_random():
    """A random policy pays the action cost 0.1·a² with E[a²] = 1/3 for 999 steps, a
    return of about −33 without reaching the goal. The bar, ≥ −5, needs a policy that
    has learned what actions cost (the goal's +100 is a bonus the run may find)."""
    config = jaxsac.tuned("MountainCarContinuous-v0", total_env_steps=10_000, log_every=5_000)
    result = jaxsac.train(config, progress=False)
    assert result.metrics["eval_return"][-1] >= -5.0, result.metrics["eval_return"]
