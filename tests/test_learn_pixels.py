"""experiments/benchmarks/learn_pixels.py's random-play baseline, on gymnasium's
CartPole-v1 (reward 1 per step, so a return is the episode's length)."""

from __future__ import annotations

import numpy as np

from experiments.benchmarks import learn_pixels
from tests.support.helpers import gymnasium_cartpole_lengths


def test_random_play_plays_whole_episodes_of_uniform_actions():
    returns = learn_pixels.random_play("CartPole-v1", episodes=20, seed=3)
    assert len(returns) == 20 and returns == learn_pixels.random_play("CartPole-v1", 20, 3)
    uniform = gymnasium_cartpole_lengths(lambda rng: int(rng.integers(2)))
    assert all(float(r).is_integer() and 8 <= r < 200 for r in returns), returns
    assert len(set(returns)) > 5  # drawn, not one fixed action sequence
    assert abs(np.mean(returns) - uniform.mean()) < 3 * uniform.std() / np.sqrt(20)
