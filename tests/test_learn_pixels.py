"""experiments/benchmarks/learn_pixels.py's random-play baseline, on gymnasium's
CartPole-v1 (reward 1 per step, so a return is the episode's length)."""

from __future__ import annotations

import gymnasium
import numpy as np

from experiments.benchmarks import learn_pixels


def test_random_play_plays_whole_episodes_of_uniform_actions():
    returns = learn_pixels.random_play("CartPole-v1", episodes=20, seed=3)
    assert len(returns) == 20 and returns == learn_pixels.random_play("CartPole-v1", 20, 3)
    # gymnasium's own CartPole under uniform actions, 200 episodes: the same distribution
    env, rng = gymnasium.make("CartPole-v1"), np.random.default_rng(0)
    lengths = []
    for episode in range(200):
        env.reset(seed=episode)
        steps, done = 0, False
        while not done:
            _, _, terminated, truncated, _ = env.step(int(rng.integers(2)))
            steps, done = steps + 1, terminated or truncated
        lengths.append(steps)
    assert all(float(r).is_integer() and 8 <= r < 200 for r in returns), returns
    assert len(set(returns)) > 5  # drawn, not one fixed action sequence
    assert abs(np.mean(returns) - np.mean(lengths)) < 3 * np.std(lengths) / np.sqrt(20)
