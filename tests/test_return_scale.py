"""SimbaV2's reward scaling (jaxsac.return_scale, docs/semantics.md "Reward scaling")
against a float64 NumPy reference written from its definition: the running discounted
return of each env column over episodes that end terminated or truncated (and rows that
failed), its running variance and largest magnitude, and the scale rewards are divided
by. Its composition with a run (multi-agent, prioritized n-step replay, checkpoint
resume) is tests/test_normalized_networks.py's resumed CrossQ run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsac.config import SACConfig
from jaxsac.return_scale import ReturnScaler
from jaxsac.types import Batch, Step

GAMMA, G_MAX = 0.9, 2.5


def numpy_return_scale(rewards, terminated, truncated, failed, gamma, g_max):
    """Float64, a loop over steps and columns: G_t = γ G_{t−1} + r_t (0 before an
    episode's first step, restarting after its last; a failed row skipped), then after
    each step the variance of every G seen pooled with gymnasium's prior (mean 0,
    variance 1, weight 1e-4) and max|G|. Returns (the two terms √(var + 1e-8) and
    max|G| / g_max [T] each, the final G [C])."""
    steps, columns = rewards.shape
    g = np.zeros(columns)
    seen, by_variance, by_largest = [], [], []
    prior = 1e-4
    for t in range(steps):
        for c in range(columns):
            if failed[t, c]:
                continue
            g[c] = gamma * g[c] + rewards[t, c]
            seen.append(g[c])
            if terminated[t, c] or truncated[t, c]:
                g[c] = 0.0
        values = np.asarray(seen)
        total = prior + len(values)
        mean = values.sum() / total
        var = (prior * (1.0 + mean**2) + np.sum((values - mean) ** 2)) / total
        by_variance.append(np.sqrt(var + 1e-8))
        by_largest.append(np.abs(values).max() / g_max if len(values) else 0.0)
    return np.asarray(by_variance), np.asarray(by_largest), g


def episodes(seed=0, steps=40, columns=3):
    """Rewards of mixed sign and size; episodes end terminated or truncated at random
    steps, some rows failed."""
    rng = np.random.default_rng(seed)
    rewards = rng.normal(size=(steps, columns)) * rng.uniform(0.5, 4.0, size=columns) + 1.0
    ends = rng.uniform(size=(steps, columns))
    terminated, truncated = ends < 0.08, (ends >= 0.08) & (ends < 0.16)
    failed = rng.uniform(size=(steps, columns)) < 0.05
    return rewards, terminated, truncated, failed


def run_scaler(rewards, terminated, truncated, failed):
    scaler = ReturnScaler(GAMMA, G_MAX, rewards.shape[1])
    state, scales = scaler.init(), []
    update = jax.jit(scaler.update)
    for t in range(len(rewards)):
        zeros = jnp.zeros((rewards.shape[1], 1))
        step = Step(zeros, zeros, jnp.asarray(rewards[t], jnp.float32),
                    jnp.asarray(terminated[t]), jnp.asarray(truncated[t]), zeros,
                    jnp.asarray(failed[t]))
        state = update(state, step)
        scales.append(float(scaler.scale(state)))
    return scaler, state, np.asarray(scales)


def test_the_return_scale_matches_numpy_over_terminated_truncated_and_failed_rows():
    data = episodes()
    assert data[1].any() and data[2].any() and data[3].any()
    _, state, scales = run_scaler(*data)
    by_variance, by_largest, final_g = numpy_return_scale(*data, GAMMA, G_MAX)
    assert (by_largest > by_variance).any() and (by_variance > by_largest).any()
    np.testing.assert_allclose(scales, np.maximum(by_variance, by_largest), rtol=1e-5)
    np.testing.assert_allclose(state.discounted_return, final_g, rtol=1e-5, atol=1e-6)


def test_the_max_term_bounds_the_scaled_returns_early():
    """One large first reward: the variance (pooled with the prior) stays small, so the
    scale is max|G| / g_max and the scaled return is g_max."""
    rewards = np.array([[100.0]])
    no = np.zeros((1, 1), bool)
    _, _, scales = run_scaler(rewards, no, no, no)
    by_variance, by_largest, _ = numpy_return_scale(rewards, no, no, no, GAMMA, G_MAX)
    assert by_largest[0] > by_variance[0]
    np.testing.assert_allclose(scales, by_largest, rtol=1e-5)
    np.testing.assert_allclose(100.0 / scales[0], G_MAX, rtol=1e-5)


def test_a_batch_reward_is_divided_by_the_scale():
    scaler, state, scales = run_scaler(*episodes(1))
    reward = jnp.asarray([1.5, -3.0, 0.25], jnp.float32)
    batch = Batch(None, None, reward, None, jnp.ones(3), jnp.ones(3, jnp.int32),
                  jnp.ones(3), jnp.zeros(3, jnp.int32))
    np.testing.assert_allclose(scaler.scale_batch(state, batch).reward,
                               np.asarray(reward, np.float64) / scales[-1], rtol=1e-6)


@pytest.mark.parametrize("changes, message", [
    (dict(scale_rewards="yes"), r"scale_rewards='yes' is invalid"),
    (dict(reward_scale_g_max=0.0), r"reward_scale_g_max=0.0 is invalid"),
])
def test_settings_are_checked(changes, message):
    with pytest.raises(ValueError, match=message):
        SACConfig(**changes)
