"""FastSAC's settings: the actor and α step every k gradient steps (policy_update_every),
checked against the learner with k = 1, and the Box target entropy as a ratio of the
action dimension (target_entropy_ratio), checked against the float64 NumPy losses
(docs/semantics.md, "Policy update period" and "Temperature")."""

from __future__ import annotations

import gymnasium
import jax
import numpy as np
import pytest

from jaxsac.config import SACConfig
from jaxsac.learner import make_learner
from tests.support import numpy_sac
from tests.test_learner import ACT_DIM, mixed_batch, noises, setup


def _close(a, b):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-6), a, b)


def _equal(a, b):
    jax.tree.map(np.testing.assert_array_equal, a, b)


def test_actor_and_alpha_step_every_k_gradient_steps():
    """k = 3 over 6 gradient steps: the actor, log α and their Adam states move at steps
    3 and 6 only, each move the one the k = 1 learner makes from the same state, batch
    and key; the critics move at every step as the k = 1 learner's do."""
    _, delayed, state = setup(policy_update_every=3)
    _, every_step, _ = setup()
    delayed_update, plain_update = jax.jit(delayed.update), jax.jit(every_step.update)
    for i in range(6):
        batch, key = mixed_batch(i), jax.random.key(20 + i)
        new, metrics, td_error = delayed_update(state, batch, key)
        plain, plain_metrics, plain_td = plain_update(state, batch, key)
        _close(new.critic_params, plain.critic_params)
        _close(new.critic_opt_state, plain.critic_opt_state)
        np.testing.assert_allclose(td_error, plain_td, rtol=1e-5, atol=1e-6)
        for name in ("qf_loss", "policy_loss", "alpha_loss"):
            np.testing.assert_allclose(metrics[name], plain_metrics[name], rtol=1e-5,
                                       atol=1e-6)
        policy = lambda s: (s.actor_params, s.actor_opt_state, s.log_alpha, s.alpha_opt_state)
        if (i + 1) % 3 == 0:
            _close(policy(new), policy(plain))
            assert not np.array_equal(new.log_alpha, state.log_alpha)
        else:
            _equal(policy(new), policy(state))
        assert int(new.step) == i + 1
        state = new


def test_policy_update_every_is_checked():
    with pytest.raises(ValueError, match=r"SACConfig.policy_update_every=0 is invalid: must "
                                         r"be an integer >= 1"):
        SACConfig(policy_update_every=0)


@pytest.mark.parametrize("ratio", [0.0, 0.5])
def test_target_entropy_ratio_scales_the_box_target_entropy(ratio):
    """H̄ = −ratio · |A| in the temperature loss, and in α's first Adam step (its sign
    follows log π + H̄)."""
    config, learner, state = setup(target_entropy_ratio=ratio)
    batch, key = mixed_batch(), jax.random.key(3)
    next_noise, policy_noise = noises(key)
    ref = numpy_sac.sac_losses(state.actor_params, state.critic_params,
                               state.target_critic_params, state.log_alpha, batch,
                               next_noise, policy_noise, target_entropy=-ratio * ACT_DIM)
    new, metrics, _ = jax.jit(learner.update)(state, batch, key)
    np.testing.assert_allclose(metrics["alpha_loss"], ref["alpha_loss"], rtol=2e-5, atol=2e-5)
    gradient = -np.mean(ref["log_prob"] - ratio * ACT_DIM)
    expected = float(state.log_alpha) - config.alpha_lr * np.sign(gradient)
    np.testing.assert_allclose(new.log_alpha, expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("changes, message", [
    (dict(target_entropy_ratio=-0.7), r"SACConfig.target_entropy_ratio=-0.7 is invalid: "
                                      r"must be None or a finite number above -log 2"),
    (dict(target_entropy_ratio=float("nan")), r"target_entropy_ratio=nan is invalid"),
    (dict(target_entropy_ratio=0.5, target_entropy=-1.0),
     r"target_entropy_ratio=0.5 is invalid: must be None with an explicit target_entropy"),
])
def test_target_entropy_ratio_is_checked(changes, message):
    with pytest.raises(ValueError, match=message):
        SACConfig(**changes)


def test_target_entropy_ratio_is_refused_for_discrete_actions():
    with pytest.raises(ValueError, match=r"SACConfig.target_entropy_ratio=0.5 is invalid: must "
                                         r"be None for the Discrete action space Discrete\(2\)"):
        make_learner(SACConfig(target_entropy_ratio=0.5, hidden_sizes=(8,)), 4,
                     gymnasium.spaces.Discrete(2))
