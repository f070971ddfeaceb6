"""`Policy`: the deterministic action and draws from the stochastic policy, against a
float64 NumPy forward pass of the actor (tests/support/numpy_sac.py): the draws' mean and
standard deviation before the squashing, or their frequencies for Discrete actions."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxsac
from jaxsac.assembly import assemble, init_state
from tests.support import numpy_sac

DRAWS = 4_000
TINY = dict(hidden_sizes=(16,), batch_size=8, buffer_capacity=256, learning_starts=16,
            log_every=32, total_env_steps=64, eval_episodes=1)


def shifted_state(config, last_bias):
    """A fresh TrainState of `config` whose actor's last layer has bias `last_bias` (so
    the distribution is far from the initial one's N(0, 1) or uniform)."""
    state = init_state(assemble(config), jax.random.key(1))
    params = jax.tree.map(np.asarray, state.learner.actor_params)
    layers = params["params"]["MLP_0"]
    last = max(layers, key=lambda name: int(name.split("_")[1]))
    layers[last]["bias"] = np.asarray(last_bias, np.float32)
    return state.replace(learner=state.learner.replace(actor_params=params))


def test_box_samples_follow_the_squashed_gaussian_and_the_mode_is_tanh_of_the_mean():
    config = jaxsac.SACConfig(env_id="Pendulum-v1", **TINY)
    state = shifted_state(config, [0.6, -1.0])  # mean ~0.6, log std ~-1
    policy = jaxsac.Policy.from_state(config, state)
    obs = np.array([[1.0, 0.0, 0.5], [-0.3, 0.95, -2.0], [0.0, -1.0, 4.0]], np.float32)
    mean, log_std = numpy_sac.actor(policy.actor_params, obs.astype(np.float64))
    # The mode: tanh(μ) rescaled to Pendulum's Box [-2, 2].
    np.testing.assert_allclose(policy(obs), 2.0 * np.tanh(mean), rtol=1e-5, atol=1e-5)
    for i in range(len(obs)):
        actions = policy.sample(jax.random.key(i), np.repeat(obs[i:i + 1], DRAWS, axis=0))
        assert actions.shape == (DRAWS, 1) and np.all(np.abs(actions) <= 2.0)
        u = np.arctanh(np.clip(actions / 2.0, -1 + 1e-7, 1 - 1e-7)).astype(np.float64)
        std = np.exp(log_std[i])
        assert abs(u.mean() - mean[i, 0]) < 5 * std[0] / np.sqrt(DRAWS)
        assert abs(u.std() / std[0] - 1.0) < 5 / np.sqrt(2 * DRAWS)
    # One observation, one key: the same draw; another key: another.
    first = policy.sample(jax.random.key(7), obs[0])
    assert first.shape == (1,)
    np.testing.assert_array_equal(first, policy.sample(jax.random.key(7), obs[0]))
    assert not np.array_equal(first, policy.sample(jax.random.key(8), obs[0]))


def test_discrete_samples_follow_the_categorical_probabilities_and_the_mode_is_the_argmax():
    config = jaxsac.SACConfig(env_id="CartPole-v1", **TINY)
    state = shifted_state(config, [0.4, -0.5])
    policy = jaxsac.Policy.from_state(config, state)
    obs = np.array([[0.0, 0.1, 0.02, -0.3], [1.0, -1.0, 0.1, 1.5]], np.float32)
    probs, _ = numpy_sac.categorical_actor(policy.actor_params, obs.astype(np.float64))
    np.testing.assert_array_equal(policy(obs), np.argmax(probs, axis=-1))
    for i in range(len(obs)):
        actions = policy.sample(jax.random.key(i), np.repeat(obs[i:i + 1], DRAWS, axis=0))
        assert actions.dtype == np.int64 and set(np.unique(actions)) <= {0, 1}
        p = probs[i, 1]
        assert abs(np.mean(actions == 1) - p) < 5 * np.sqrt(p * (1 - p) / DRAWS)


def test_from_state_picks_a_seed_and_names_bad_arguments():
    config = jaxsac.SACConfig(env_id="Pendulum-v1", **TINY)
    assembly = assemble(config)
    states = jax.vmap(lambda key: init_state(assembly, key))(jax.random.split(
        jax.random.key(0), 2))
    obs = np.zeros(3, np.float32)
    for seed in (0, 1):
        one = jax.tree.map(lambda x, s=seed: x[s], states)
        np.testing.assert_array_equal(jaxsac.Policy.from_state(config, states, seed)(obs),
                                      jaxsac.Policy.from_state(config, one)(obs))
    with pytest.raises(ValueError, match=r"seed_index=2 is invalid: must be in \[0, 2\)"):
        jaxsac.Policy.from_state(config, states, seed_index=2)
    with pytest.raises(ValueError, match=r"Policy.sample: key=.* is invalid: must be one "
                       r"jax.random.key"):
        jaxsac.Policy.from_state(config, states, 0).sample(0, obs)
