"""Colored exploration noise: the sequences against a float64 NumPy reimplementation of
Timmer and König's method, their spectra and correlations, and how acting uses them."""

from __future__ import annotations

import jax
import numpy as np
import pytest

import jaxsac
from jaxsac import noise
from jaxsac.assembly import assemble, exploration_noise, init_state
from jaxsac.host_loop import acting_functions
from jaxsac.jax_loop import policy_act_fn
from jaxsac.networks import Actor


def reference_colored_noise(real: np.ndarray, imag: np.ndarray, beta: float,
                            horizon: int) -> np.ndarray:
    """float64: sequences from the given standard normal draws [..., horizon // 2 + 1]:
    amplitude f^(-β/2) per frequency (the zero frequency at 1/horizon), a real zero (and
    even-horizon Nyquist) coefficient with √2 of the power, normalized by the std of
    irfft's output, counted term by term."""
    k = np.arange(horizon // 2 + 1, dtype=np.float64)
    f = np.maximum(k, 1.0) / horizon
    amplitude = f ** (-beta / 2)
    coefficients = real * amplitude + 1j * imag * amplitude
    coefficients[..., 0] = np.sqrt(2) * real[..., 0] * amplitude[0]
    if horizon % 2 == 0:
        coefficients[..., -1] = np.sqrt(2) * real[..., -1] * amplitude[-1]
    # irfft(c)[t] = (c_0 + 2 Σ_{0<k<n/2} Re(c_k e^{2πikt/n}) + c_{n/2} (-1)^t) / n: a
    # complex c_k = s(a + ib) adds 4s²/n² to the variance, a real √2·s·a adds 2s²/n².
    complex_terms = np.ones(len(k), bool)
    complex_terms[0] = False
    if horizon % 2 == 0:
        complex_terms[-1] = False
    std = np.sqrt(np.sum(np.where(complex_terms, 4.0, 2.0) * amplitude ** 2)) / horizon
    return np.fft.irfft(coefficients, n=horizon, axis=-1) / std


@pytest.mark.parametrize(("beta", "horizon"), [(0.0, 64), (1.0, 999), (1.0, 1000),
                                               (2.0, 200), (0.5, 7)])
def test_sequences_match_a_float64_reference(beta, horizon):
    key = jax.random.key(3)
    got = np.asarray(noise.colored_noise(key, beta, (4, 2), horizon))
    real, imag = np.asarray(jax.random.normal(key, (2, 4, 2, horizon // 2 + 1)), np.float64)
    expected = reference_colored_noise(real, imag, beta, horizon)
    assert got.shape == (4, 2, horizon) and got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("beta", [0.0, 1.0, 2.0])
def test_the_power_spectrum_falls_as_one_over_f_to_the_beta(beta):
    horizon = 512
    sequences = np.asarray(noise.colored_noise(jax.random.key(0), beta, (4_000,), horizon),
                           np.float64)
    power = np.mean(np.abs(np.fft.rfft(sequences, axis=-1)) ** 2, axis=0)
    frequencies = np.fft.rfftfreq(horizon)
    band = slice(1, horizon // 2)  # every frequency but zero and Nyquist
    slope = np.polyfit(np.log(frequencies[band]), np.log(power[band]), 1)[0]
    assert abs(slope + beta) < 0.05


def test_white_noise_is_independent_and_pink_noise_is_correlated():
    def lag_one(beta):
        x = np.asarray(noise.colored_noise(jax.random.key(1), beta, (2_000,), 999))
        return np.corrcoef(x[:, :-1].ravel(), x[:, 1:].ravel())[0, 1], x.std()
    white, white_std = lag_one(0.0)
    pink, pink_std = lag_one(1.0)
    assert abs(white) < 0.01 and abs(white_std - 1) < 0.01
    assert pink > 0.7 and abs(pink_std - 1) < 0.02
    # An even horizon: the Nyquist frequency is real too.
    even = np.asarray(noise.colored_noise(jax.random.key(2), 1.0, (4_000,), 1_000))
    assert abs(even.std() - 1) < 0.02 and abs(even[:, -1].std() - 1) < 0.05


def test_acting_noise_walks_through_one_sequence_per_horizon():
    root, beta, horizon = jax.random.key(7), 1.0, 10
    chunk_key = jax.random.fold_in(jax.random.fold_in(root, noise.NOISE_STREAM), 2)
    sequences = np.asarray(noise.colored_noise(chunk_key, beta, (3, 2), horizon))
    for iteration in (20, 23, 29):
        np.testing.assert_array_equal(
            np.asarray(noise.acting_noise(root, iteration, beta, (3, 2), horizon)),
            sequences[..., iteration - 20])
    assert not np.array_equal(np.asarray(noise.acting_noise(root, 30, beta, (3, 2), horizon)),
                              np.asarray(noise.acting_noise(root, 20, beta, (3, 2), horizon)))


def test_the_policy_acts_with_the_colored_epsilon():
    config = jaxsac.SACConfig(env_id="MountainCarContinuous-v0", num_envs=3,
                              buffer_capacity=300, log_every=300, total_env_steps=900,
                              learning_starts=300, action_noise_exponent=1.0,
                              hidden_sizes=(8,))
    assembly = assemble(config)
    state_key = jax.random.key(0)
    eps = exploration_noise(assembly, state_key, 5, 3)
    np.testing.assert_array_equal(
        np.asarray(eps), np.asarray(noise.acting_noise(state_key, 5, 1.0, (3, 1), 999)))
    params = assembly.learner.init(jax.random.key(1)).actor_params
    obs = np.array([[-0.5, 0.0], [-0.4, 0.01], [0.1, -0.02]], np.float32)
    action = assembly.learner.act(params, obs, jax.random.key(2), noise=eps)
    mean, log_std = Actor(1, (8,)).apply(params, obs)
    np.testing.assert_allclose(np.asarray(action),
                               np.tanh(np.asarray(mean) + np.exp(np.asarray(log_std))
                                       * np.asarray(eps)), rtol=1e-6)
    assert exploration_noise(assemble(config.replace(action_noise_exponent=0.0)),
                             state_key, 5, 3) is None


@pytest.mark.parametrize(("changes", "message"), [
    ({"action_noise_exponent": -1.0}, r"action_noise_exponent=-1\.0"),
    ({"action_noise_horizon": 100}, r"action_noise_horizon=100.*None with white"),
    ({"action_noise_exponent": 1.0, "action_noise_horizon": 1}, r"action_noise_horizon=1"),
])
def test_bad_noise_settings_are_named(changes, message):
    with pytest.raises(ValueError, match=message):
        jaxsac.SACConfig(**changes)


def test_colored_noise_needs_box_actions_and_a_horizon():
    with pytest.raises(ValueError, match=r"action_noise_exponent=1\.0.*Discrete"):
        assemble(jaxsac.SACConfig(env_id="CartPole-v1", action_noise_exponent=1.0))
    with pytest.raises(ValueError, match=r"action_noise_horizon=None.*no registered time "
                                         r"limit"):
        assemble(jaxsac.SACConfig(env_id="MultiAgentPendulum-v1", num_agents=2,
                                  action_noise_exponent=1.0))


def test_both_loops_act_with_the_same_colored_noise():
    """The gymnasium loop's policy and the JAX loop's draw the same ε for an iteration."""
    config = jaxsac.SACConfig(env_id="MountainCarContinuous-v0", num_envs=2,
                              buffer_capacity=200, log_every=200, total_env_steps=400,
                              learning_starts=200, batch_size=16, action_noise_exponent=2.0,
                              action_noise_horizon=50, hidden_sizes=(8,))
    assembly = assemble(config)
    state = init_state(assembly, jax.random.key(4))
    root, iteration = state.key, 73
    policy = acting_functions(config, assembly.obs_dim, assembly.actions)["policy"]
    obs = np.asarray(state.runner.obs)
    host_action = policy(state.learner.actor_params, state.runner.obs_norm, obs, root,
                         iteration)
    eps = noise.acting_noise(root, iteration, 2.0, (2, 1), 50)
    mean, log_std = Actor(1, (8,)).apply(state.learner.actor_params, obs)
    np.testing.assert_allclose(np.asarray(host_action),
                               np.tanh(np.asarray(mean) + np.exp(np.asarray(log_std))
                                       * np.asarray(eps)), rtol=1e-6)
    act = policy_act_fn(assembly, state.replace(iteration=iteration))
    jax_action = act(obs, jax.random.key(0))  # the key draws nothing with colored noise
    np.testing.assert_allclose(np.asarray(jax_action), np.asarray(host_action), rtol=1e-6)
