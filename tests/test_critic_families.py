"""The distributional critic families against float64 NumPy references
(tests/support/numpy_critics.py, docs/semantics.md), their settings' checks, their
composition with the rest of a run, and a CPU-sized learning test of each."""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsac
from jaxsac import checkpoint
from jaxsac.assembly import assemble, init_state
from jaxsac.config import STRUCTURAL, SACConfig, fields_with
from jaxsac.learner import LossParams, make_learner
from jaxsac.networks import quantile_huber_loss
from tests.support import numpy_critics
from tests.support.helpers import assert_gradients_routed
from tests.test_learner import ACT_DIM, OBS_DIM, B, mixed_batch, noises, perturbed_targets

TOL = dict(rtol=2e-5, atol=2e-5)


def setup(**overrides):
    config = SACConfig(hidden_sizes=(32, 32), initial_alpha=0.5, **overrides)
    learner = make_learner(config, OBS_DIM, ACT_DIM)
    state = perturbed_targets(learner.init(jax.random.key(0)), jax.random.key(7))
    return config, learner, state


def loss_params(state) -> LossParams:
    return LossParams(state.actor_params, state.critic_params, state.log_alpha)


# --- TQC -----------------------------------------------------------------------------


TQC = dict(critic="tqc", num_quantiles=5, quantiles_to_drop_per_net=2, num_q=3)


def tqc_reference(state, batch, key):
    next_noise, policy_noise = noises(key)
    return numpy_critics.tqc_losses(
        state.actor_params, state.critic_params, state.target_critic_params, state.log_alpha,
        batch, next_noise, policy_noise, target_entropy=-ACT_DIM, drop_per_net=2)


def test_tqc_target_losses_and_td_error_match_numpy():
    """Terminated (discount 0), truncated (γ) and n-step (γ^k) rows, uneven importance
    weights: the truncated pooled target, the quantile Huber loss summed over critics,
    the TD error of the means, and the actor's mean over all quantiles."""
    _, learner, state = setup(**TQC)
    batch, key = mixed_batch(), jax.random.key(3)
    ref = tqc_reference(state, batch, key)
    assert ref["target"].shape == (B, 3 * (5 - 2))
    terminated = np.asarray(batch.discount) == 0
    assert terminated.any() and (~terminated).any()
    np.testing.assert_allclose(ref["target"][terminated],
                               np.broadcast_to(np.asarray(batch.reward, np.float64)[
                                   terminated, None], (terminated.sum(), 9)))

    _, aux = jax.jit(learner.loss)(loss_params(state), state.target_critic_params, batch, key)
    _, metrics, td_error = jax.jit(learner.update)(state, batch, key)
    for name in ("qf_loss", "policy_loss", "alpha_loss"):
        np.testing.assert_allclose(metrics[name], ref[name], **TOL, err_msg=name)
    np.testing.assert_allclose(td_error, ref["td_error"], **TOL)
    np.testing.assert_allclose(aux["td_error"], ref["td_error"], **TOL)
    np.testing.assert_allclose(metrics["q_mean"], ref["q"].mean(), **TOL)
    np.testing.assert_allclose(metrics["q_max"], ref["q"].max(), **TOL)


def test_quantile_huber_loss_matches_loops():
    """Errors on both sides of κ = 1 and of zero, against the scalar definition."""
    rng = np.random.default_rng(0)
    quantiles = rng.normal(scale=2.0, size=(2, 4, 7))
    target = rng.normal(scale=2.0, size=(4, 9))
    got = quantile_huber_loss(jnp.asarray(quantiles, jnp.float32),
                              jnp.asarray(target, jnp.float32))
    np.testing.assert_allclose(got, numpy_critics.quantile_huber(quantiles, target),
                               rtol=1e-5, atol=1e-6)


def test_tqc_gradients_reach_only_their_own_parameters():
    _, learner, state = setup(**TQC)
    assert_gradients_routed(learner, loss_params(state), state.target_critic_params,
                            mixed_batch(), jax.random.key(3))


def test_tqc_update_vmaps_over_seeds():
    _, learner, _ = setup(**TQC)
    states = jax.vmap(learner.init)(jax.random.split(jax.random.key(11), 3))
    batches = jax.tree.map(lambda *xs: jnp.stack(xs), *[mixed_batch(s) for s in range(3)])
    keys = jax.random.split(jax.random.key(12), 3)
    new_states, metrics, td_error = jax.jit(jax.vmap(learner.update))(states, batches, keys)
    assert td_error.shape == (3, B)
    update = jax.jit(learner.update)
    for i in range(3):
        one = jax.tree.map(lambda x, i=i: x[i], (states, batches, keys))
        single_state, single_metrics, single_td = update(*one)
        np.testing.assert_allclose(metrics["qf_loss"][i], single_metrics["qf_loss"], rtol=1e-5)
        np.testing.assert_allclose(td_error[i], single_td, rtol=1e-5, atol=1e-6)
        jax.tree.map(lambda a, b, i=i: np.testing.assert_allclose(a[i], b, rtol=1e-5, atol=1e-6),
                     new_states.critic_params, single_state.critic_params)


@pytest.mark.parametrize("changes, message", [
    (dict(critic="tqc", num_quantiles=5, quantiles_to_drop_per_net=5),
     r"SACConfig.quantiles_to_drop_per_net=5 is invalid: must be below num_quantiles=5 "
     r"\(dropping every"),
    (dict(critic="tqc", quantiles_to_drop_per_net=-1),
     r"quantiles_to_drop_per_net=-1 is invalid: must be an integer >= 0"),
    (dict(critic="tqc", num_quantiles=0), r"num_quantiles=0 is invalid: must be an integer"),
    (dict(num_quantiles=10), r"SACConfig.num_quantiles=10 is invalid: must be 25 \(the "
                             r"default\) with critic='ensemble': it is a setting of "
                             r"critic='tqc'"),
    (dict(critic="tqc", critic_loss="huber"),
     r"critic_loss='huber' is invalid: must be 'mse' \(the default\) with critic='tqc'"),
])
def test_tqc_settings_are_checked_when_the_config_is_made(changes, message):
    with pytest.raises(ValueError, match=message):
        SACConfig(**changes)


def test_tqc_refuses_discrete_actions_when_the_learner_is_built():
    config = SACConfig(critic="tqc", hidden_sizes=(8,))
    with pytest.raises(ValueError, match=r"SACConfig.critic='tqc' is invalid: .*Discrete "
                                         r"action space of 2 actions"):
        make_learner(config, 4, gymnasium.spaces.Discrete(2))
    with pytest.raises(ValueError, match=r"critic='tqc' is invalid"):
        assemble(config.replace(env_id="CartPole-v1"))


def _state_shapes(config: SACConfig):
    state = jax.eval_shape(lambda key: init_state(assemble(config), key), jax.random.key(0))
    return jax.tree.map(lambda x: (x.shape, x.dtype), state)


def test_a_tqc_checkpoint_shares_the_number_of_quantiles():
    """num_quantiles changes the critics' arrays: it is STRUCTURAL, so restoring into
    another is refused with the difference named; the drop count is not (the arrays
    mean the same)."""
    base = SACConfig(critic="tqc", num_quantiles=5, hidden_sizes=(4,), buffer_capacity=512,
                     batch_size=8, learning_starts=32, log_every=128, total_env_steps=512)
    assert _state_shapes(base) != _state_shapes(base.replace(num_quantiles=6))
    assert _state_shapes(base) == _state_shapes(base.replace(quantiles_to_drop_per_net=1))
    assert "num_quantiles" in fields_with(STRUCTURAL)
    assert "quantiles_to_drop_per_net" not in fields_with(STRUCTURAL)
    assert checkpoint.config_differences(base, base.replace(num_quantiles=6)) == [
        "num_quantiles: stored 5, requested 6"]


# --- learning ------------------------------------------------------------------------


def pendulum(**overrides) -> SACConfig:
    """The tuned Pendulum-v1 (n-step from [2, 4], prioritized replay) cut short."""
    return jaxsac.tuned("Pendulum-v1", total_env_steps=3_000, log_every=1_000,
                        eval_episodes=5, **overrides)


@pytest.mark.learning
def test_tqc_learns_pendulum():
    """TQC with the tuned config's n-step returns and prioritized replay: well above
    random (about −1,200) after 3,000 env steps (measured for 3 seeds: −101 to −205
    from 2,000 on, after −525 to −1,199 at 1,000)."""
    config = pendulum(critic="tqc", num_quantiles=10)
    _, metrics = jax.jit(jaxsac.make_train(config))(jax.random.key(0))
    returns = np.asarray(metrics["eval_return"])
    assert returns[-1] >= -300.0, returns
