"""policy_update_every: the actor and α step every k gradient steps, the critics at each
(docs/semantics.md, "Policy update period"), checked against the learner with k = 1."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from jaxsac.config import SACConfig
from tests.test_learner import mixed_batch, setup


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
