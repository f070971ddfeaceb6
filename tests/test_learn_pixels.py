"""experiments/benchmarks/learn_pixels.py: its random-play baseline, on gymnasium's
CartPole-v1 (reward 1 per step, so a return is the episode's length), and its --set
overrides of the tuned example."""

from __future__ import annotations

import numpy as np
import pytest

import jaxsac
from experiments.benchmarks import harness, learn_pixels
from tests.support.helpers import gymnasium_cartpole_lengths


def test_random_play_plays_whole_episodes_of_uniform_actions():
    returns = learn_pixels.random_play("CartPole-v1", episodes=20, seed=3)
    assert len(returns) == 20 and returns == learn_pixels.random_play("CartPole-v1", 20, 3)
    uniform = gymnasium_cartpole_lengths(lambda rng: int(rng.integers(2)))
    assert all(float(r).is_integer() and 8 <= r < 200 for r in returns), returns
    assert len(set(returns)) > 5  # drawn, not one fixed action sequence
    assert abs(np.mean(returns) - uniform.mean()) < 3 * uniform.std() / np.sqrt(20)


def test_set_items_override_the_tuned_example_as_json_values():
    overrides = harness.field_overrides(["target_entropy_scale=0.5", "hidden_sizes=[256]",
                                         "prioritized=true"])
    config = jaxsac.tuned("ALE/RoadRunner-v5", **overrides)
    assert (config.target_entropy_scale, config.hidden_sizes, config.prioritized) == (
        0.5, (256,), True)
    tuned = jaxsac.tuned("ALE/RoadRunner-v5")
    assert (tuned.target_entropy_scale, tuned.prioritized) != (0.5, True)
    with pytest.raises(ValueError, match="'target_entropy_scale' is not FIELD=JSON"):
        harness.field_overrides(["target_entropy_scale"])
