"""Networks and the squashed Gaussian against brute-force NumPy computations."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsac.config import SACConfig
from jaxsac.learner import make_learner
from jaxsac.networks import Actor, QEnsemble, deterministic_action, sample_action, squashed_log_prob
from tests.support import numpy_sac


def brute_force_log_prob(u, mean, log_std, h=1e-6):
    """log density of a = tanh(u) by change of variables with a finite-difference Jacobian."""
    u, mean, log_std = (np.asarray(x, np.float64) for x in (u, mean, log_std))
    std = np.exp(log_std)
    normal = -0.5 * ((u - mean) / std) ** 2 - np.log(std * np.sqrt(2 * np.pi))
    jacobian = (np.tanh(u + h) - np.tanh(u - h)) / (2 * h)
    return np.sum(normal - np.log(jacobian), axis=-1)


def test_log_prob_matches_change_of_variables():
    rng = np.random.default_rng(0)
    mean = rng.normal(size=(500, 3)) * 2
    log_std = rng.uniform(-3, 1, size=(500, 3))
    u = mean + np.exp(log_std) * rng.normal(size=(500, 3))
    got = squashed_log_prob(jnp.asarray(u, jnp.float32), jnp.asarray(mean, jnp.float32),
                            jnp.asarray(log_std, jnp.float32))
    np.testing.assert_allclose(got, brute_force_log_prob(u, mean, log_std), rtol=1e-4, atol=1e-3)


def test_squashed_density_integrates_to_one():
    """1-D: ∫ exp(log π(a)) da over (−1, 1) = 1, by the trapezoid rule in action space."""
    a = np.linspace(-1 + 1e-7, 1 - 1e-7, 400_001)
    u = np.arctanh(a)
    for mean, log_std in ((0.0, 0.0), (1.5, -1.0), (-0.7, 0.5)):
        density = np.exp(brute_force_log_prob(u[:, None], np.full((1, 1), mean),
                                              np.full((1, 1), log_std)))
        assert np.trapezoid(density, a) == pytest.approx(1.0, abs=2e-3)
        got = squashed_log_prob(jnp.asarray(u[::1000, None], jnp.float32),
                                jnp.full((1,), mean), jnp.full((1,), log_std))
        np.testing.assert_allclose(np.exp(got), density[::1000], rtol=2e-3, atol=1e-6)


def test_sample_is_reparameterised_tanh_of_gaussian():
    mean, log_std = jnp.array([[0.2, -1.0]]), jnp.array([[-0.5, 0.3]])
    key = jax.random.key(4)
    action, log_prob = sample_action(mean, log_std, key)
    u = mean + jnp.exp(log_std) * jax.random.normal(key, mean.shape)
    np.testing.assert_allclose(action, np.tanh(u), rtol=1e-6)
    np.testing.assert_allclose(log_prob, brute_force_log_prob(u, mean, log_std), rtol=1e-4)


def test_deterministic_action_is_tanh_of_mean():
    config = SACConfig(hidden_sizes=(16,))
    learner = make_learner(config, 4, 2)
    params = learner.init(jax.random.key(0)).actor_params
    obs = jax.random.normal(jax.random.key(1), (5, 4)) * 10
    mean, _ = numpy_sac.actor(params, np.asarray(obs, np.float64))
    got = learner.act(params, obs, jax.random.key(2), deterministic=True)
    np.testing.assert_allclose(got, np.tanh(mean), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(deterministic_action(jnp.asarray(mean)), np.tanh(mean), rtol=1e-6)
    stochastic = learner.act(params, obs, jax.random.key(2))
    assert np.all(np.abs(np.asarray(stochastic)) <= 1.0)
    assert not np.allclose(stochastic, got)


def test_actor_clips_log_std():
    actor = Actor(act_dim=2, hidden_sizes=(8,))
    params = actor.init(jax.random.key(0), jnp.zeros((1, 3)))
    big = jax.tree.map(lambda x: x * 1e3, params)
    _, log_std = actor.apply(big, jax.random.normal(jax.random.key(1), (64, 3)))
    assert float(log_std.min()) >= -5.0 and float(log_std.max()) <= 2.0
    assert float(log_std.min()) == -5.0 and float(log_std.max()) == 2.0


@pytest.mark.parametrize("num_q", [1, 2, 5])
def test_q_ensemble_is_n_independent_critics(num_q):
    critic = QEnsemble(num_q=num_q, hidden_sizes=(16, 8))
    obs, act = jnp.ones((7, 3)), jnp.zeros((7, 2))
    params = critic.init(jax.random.key(0), obs, act)
    q = critic.apply(params, obs, act)
    assert q.shape == (num_q, 7)
    np.testing.assert_allclose(q, numpy_sac.critics(params, np.ones((7, 3)), np.zeros((7, 2))),
                               rtol=1e-5, atol=1e-6)
    if num_q > 1:
        assert len({round(float(x), 5) for x in q[:, 0]}) == num_q  # distinct initialisations


def test_q_ensemble_refuses_parameters_of_another_number_of_critics():
    obs, act = jnp.ones((4, 3)), jnp.zeros((4, 1))
    params = QEnsemble(num_q=2, hidden_sizes=(8,), layer_norm=True).init(
        jax.random.key(0), obs, act)
    with pytest.raises(ValueError, match=r"num_q=3.*2 critics"):
        QEnsemble(num_q=3, hidden_sizes=(8,), layer_norm=True).apply(params, obs, act)


def _layer_norm_critic_numpy(params: dict, x: np.ndarray) -> np.ndarray:
    """One critic in float64: Dense -> relu -> LayerNorm (ε = 1e-6, scale and bias) per
    hidden layer, then a linear Dense."""
    hidden = sorted(k for k in params if k.startswith("Dense_"))
    for i, name in enumerate(hidden):
        x = x @ np.asarray(params[name]["kernel"], np.float64) + np.asarray(
            params[name]["bias"], np.float64)
        if i == len(hidden) - 1:
            return x
        x = np.maximum(x, 0.0)
        norm = params[f"LayerNorm_{i}"]
        x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-6)
        x = x * np.asarray(norm["scale"], np.float64) + np.asarray(norm["bias"], np.float64)
    raise AssertionError("no output layer")


def test_layer_norm_critics_match_a_float64_reference():
    critic = QEnsemble(num_q=2, hidden_sizes=(16, 8), layer_norm=True)
    obs = np.asarray(jax.random.normal(jax.random.key(3), (5, 3)))
    act = np.asarray(jax.random.uniform(jax.random.key(4), (5, 2), minval=-1, maxval=1))
    params = critic.init(jax.random.key(0), obs, act)
    # Non-trivial LayerNorm parameters, so scale and bias are checked too.
    params = jax.tree_util.tree_map_with_path(
        lambda path, p: p + 0.3 * jax.random.normal(jax.random.key(len(str(path))), p.shape)
        if "LayerNorm" in str(path) else p, params)
    q = critic.apply(params, obs, act)
    tree = jax.tree.map(np.asarray, params["params"]["VmapMLP_0"])
    x = np.concatenate([obs, act], -1).astype(np.float64)
    expected = np.stack([
        _layer_norm_critic_numpy(jax.tree.map(lambda p, i=i: p[i], tree), x)[:, 0]
        for i in range(2)])
    np.testing.assert_allclose(q, expected, rtol=1e-4, atol=1e-5)
    plain = QEnsemble(num_q=2, hidden_sizes=(16, 8)).init(jax.random.key(0), obs, act)
    assert "LayerNorm_0" not in plain["params"]["VmapMLP_0"]


def test_critic_layer_norm_config_reaches_the_learner():
    config = SACConfig(critic_layer_norm=True, hidden_sizes=(8, 8), batch_size=4)
    state = make_learner(config, 3, 1).init(jax.random.key(0))
    assert "LayerNorm_1" in state.critic_params["params"]["VmapMLP_0"]
    assert "LayerNorm_0" not in str(jax.tree_util.tree_structure(state.actor_params))
