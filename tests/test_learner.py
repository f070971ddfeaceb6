"""The learner against a float64 NumPy re-implementation of the losses of
docs/semantics.md."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsac.config import SACConfig
from jaxsac.learner import LossParams, make_learner
from jaxsac.types import Batch
from tests.support import numpy_sac
from tests.support.helpers import assert_gradients_routed

OBS_DIM, ACT_DIM, B = 3, 2, 16
GAMMA = 0.9
SMALL = dict(hidden_sizes=(32, 32), initial_alpha=0.5)


def mixed_batch(seed: int = 0) -> Batch:
    """Terminated (discount 0), truncated (gamma), n-step (gamma^k) rows, uneven weights."""
    rng = np.random.default_rng(seed)
    n_step = rng.integers(1, 4, size=B)
    terminated = np.arange(B) % 4 == 0
    discount = np.where(terminated, 0.0, GAMMA**n_step)
    return Batch(
        obs=jnp.asarray(rng.normal(size=(B, OBS_DIM)), jnp.float32),
        action=jnp.asarray(rng.uniform(-0.99, 0.99, size=(B, ACT_DIM)), jnp.float32),
        reward=jnp.asarray(rng.normal(size=B), jnp.float32),
        next_obs=jnp.asarray(rng.normal(size=(B, OBS_DIM)), jnp.float32),
        discount=jnp.asarray(discount, jnp.float32),
        n_step=jnp.asarray(n_step, jnp.int32),
        weights=jnp.asarray(rng.uniform(0.2, 1.0, size=B), jnp.float32),
        indices=jnp.arange(B, dtype=jnp.int32),
    )


def perturbed_targets(state, key):
    """Targets that differ from the critics, so a mix-up of the two cannot pass."""
    leaves, tree = jax.tree.flatten(state.target_critic_params)
    keys = jax.random.split(key, len(leaves))
    noisy = [x + 0.05 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys, strict=True)]
    return state.replace(target_critic_params=jax.tree.unflatten(tree, noisy))


def noises(key):
    """The two standard-normal draws `loss` makes: next actions, then policy actions."""
    target_key, policy_key = jax.random.split(key)
    draw = lambda k: np.asarray(jax.random.normal(k, (B, ACT_DIM)), np.float64)
    return draw(target_key), draw(policy_key)


def setup(critic_loss="mse", **overrides):
    config = SACConfig(critic_loss=critic_loss, **{**SMALL, **overrides})
    learner = make_learner(config, OBS_DIM, ACT_DIM)
    state = perturbed_targets(learner.init(jax.random.key(0)), jax.random.key(7))
    return config, learner, state


def reference(state, batch, key, critic_loss="mse"):
    next_noise, policy_noise = noises(key)
    return numpy_sac.sac_losses(
        state.actor_params, state.critic_params, state.target_critic_params, state.log_alpha,
        batch, next_noise, policy_noise, target_entropy=-ACT_DIM, critic_loss=critic_loss)


@pytest.mark.parametrize("critic_loss", ["mse", "huber"])
def test_losses_and_td_error_match_numpy(critic_loss):
    _, learner, state = setup(critic_loss)
    batch, key = mixed_batch(), jax.random.key(3)
    ref = reference(state, batch, key, critic_loss)
    _, metrics, td_error = jax.jit(learner.update)(state, batch, key)
    for name in ("qf_loss", "policy_loss", "alpha_loss"):
        np.testing.assert_allclose(metrics[name], ref[name], rtol=2e-5, atol=2e-5, err_msg=name)
    np.testing.assert_allclose(td_error, ref["td_error"], rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(metrics["entropy"], -ref["log_prob"].mean(), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(metrics["q_mean"], ref["q"].mean(), rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(metrics["alpha"], 0.5, rtol=1e-6)


def test_terminated_rows_do_not_bootstrap_and_truncated_rows_do():
    _, learner, state = setup()
    batch, key = mixed_batch(), jax.random.key(3)
    ref = reference(state, batch, key)
    terminated = np.asarray(batch.discount) == 0
    np.testing.assert_allclose(ref["target"][terminated], np.asarray(batch.reward)[terminated])
    _, _, td_error = learner.update(state, batch, key)
    q = numpy_sac.critics(state.critic_params, np.asarray(batch.obs, np.float64),
                          np.asarray(batch.action, np.float64))
    expected_td = np.abs(q - np.asarray(batch.reward, np.float64)).mean(axis=0)
    np.testing.assert_allclose(np.asarray(td_error)[terminated], expected_td[terminated],
                               rtol=2e-5, atol=2e-5)


def finite_difference(fn, params, path_leaf, index, h=1e-4):
    """d fn / d params[leaf][index] by central differences in float64."""
    def shifted(delta):
        tree = jax.tree.map(lambda x: np.array(x, np.float64), params)
        leaf = path_leaf(tree)
        leaf[index] += delta
        return fn(tree)
    return (shifted(h) - shifted(-h)) / (2 * h)


def test_first_step_follows_the_gradient_of_each_loss():
    """Adam's first step moves each weight by -lr·sign(gradient): check the signs against
    float64 finite differences of the NumPy losses, and log α against its exact gradient."""
    config, learner, state = setup()
    batch, key = mixed_batch(), jax.random.key(3)
    new_state, _, _ = learner.update(state, batch, key)
    next_noise, policy_noise = noises(key)

    def losses(actor_params, critic_params):
        return numpy_sac.sac_losses(actor_params, critic_params, state.target_critic_params,
                                    state.log_alpha, batch, next_noise, policy_noise, -ACT_DIM)

    critic_leaf = lambda t: t["params"]["VmapMLP_0"]["Dense_1"]["kernel"]
    actor_leaf = lambda t: t["params"]["MLP_0"]["Dense_0"]["kernel"]
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(12):
        c_index = (rng.integers(2), rng.integers(32), rng.integers(32))
        grad = finite_difference(lambda p: losses(state.actor_params, p)["qf_loss"],
                                 state.critic_params, critic_leaf, c_index)
        step = critic_leaf(new_state.critic_params)[c_index] - critic_leaf(state.critic_params)[
            c_index]
        if abs(grad) > 1e-5:
            assert np.sign(step) == -np.sign(grad)
            np.testing.assert_allclose(abs(step), config.critic_lr, rtol=1e-2)
            checked += 1
        a_index = (rng.integers(OBS_DIM), rng.integers(32))
        grad = finite_difference(lambda p: losses(p, state.critic_params)["policy_loss"],
                                 state.actor_params, actor_leaf, a_index)
        step = actor_leaf(new_state.actor_params)[a_index] - actor_leaf(state.actor_params)[a_index]
        if abs(grad) > 1e-5:
            assert np.sign(step) == -np.sign(grad)
            checked += 1
    assert checked >= 12

    ref = reference(state, batch, key)
    alpha_grad = -np.mean(ref["log_prob"] - ACT_DIM)
    expected = float(state.log_alpha) - config.alpha_lr * alpha_grad / (abs(alpha_grad) + 1e-8)
    np.testing.assert_allclose(new_state.log_alpha, expected, rtol=1e-5, atol=1e-7)


def test_polyak_target_update_every_step():
    config, learner, state = setup(tau=0.1)
    new_state, metrics, _ = learner.update(state, mixed_batch(), jax.random.key(3))
    expected = jax.tree.map(
        lambda c, t: 0.1 * np.asarray(c, np.float64) + 0.9 * np.asarray(t, np.float64),
        new_state.critic_params, state.target_critic_params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7),
                 new_state.target_critic_params, expected)
    assert int(new_state.step) == 1


def test_target_update_period_counts_gradient_steps():
    _, learner, state = setup(tau=0.5, target_network_update_freq=3)
    update = jax.jit(learner.update)
    batch = mixed_batch()
    first_targets = state.target_critic_params
    for i in range(3):
        previous = state
        state, metrics, _ = update(state, batch, jax.random.key(i))
        if i < 2:
            jax.tree.map(np.testing.assert_array_equal, state.target_critic_params, first_targets)
    expected = jax.tree.map(lambda c, t: 0.5 * c + 0.5 * t, state.critic_params,
                            previous.target_critic_params)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6),
                 state.target_critic_params, expected)


def test_fixed_alpha_stays_fixed():
    _, learner, state = setup(learn_alpha=False)
    new_state, metrics, _ = learner.update(state, mixed_batch(), jax.random.key(1))
    assert float(new_state.log_alpha) == float(state.log_alpha)
    np.testing.assert_allclose(metrics["alpha"], 0.5, rtol=1e-6)


def test_gradients_reach_only_their_own_parameters():
    _, learner, state = setup()
    params = LossParams(state.actor_params, state.critic_params, state.log_alpha)
    assert_gradients_routed(learner, params, state.target_critic_params, mixed_batch(),
                            jax.random.key(3))


def test_update_vmaps_over_four_seeds():
    _, learner, _ = setup()
    keys = jax.random.split(jax.random.key(11), 4)
    states = jax.vmap(learner.init)(keys)
    batches = jax.tree.map(lambda *xs: jnp.stack(xs), *[mixed_batch(s) for s in range(4)])
    update_keys = jax.random.split(jax.random.key(12), 4)
    new_states, metrics, td_error = jax.jit(jax.vmap(learner.update))(states, batches, update_keys)
    assert td_error.shape == (4, B) and metrics["qf_loss"].shape == (4,)
    for i in range(4):
        one = jax.tree.map(lambda x, i=i: x[i], (states, batches, update_keys))
        single_state, single_metrics, _ = learner.update(*one)
        np.testing.assert_allclose(metrics["qf_loss"][i], single_metrics["qf_loss"], rtol=1e-5)
        jax.tree.map(lambda a, b, i=i: np.testing.assert_allclose(a[i], b, rtol=1e-5, atol=1e-6),
                     new_states.actor_params, single_state.actor_params)


def test_grad_clip_keeps_updates_finite_and_bounded():
    config, learner, state = setup(grad_clip=1e-3)
    new_state, _, _ = learner.update(state, mixed_batch(), jax.random.key(0))
    moved = jax.tree.map(lambda a, b: np.max(np.abs(np.asarray(a) - np.asarray(b))),
                         new_state.critic_params, state.critic_params)
    assert max(jax.tree.leaves(moved)) <= config.critic_lr * 1.001


def test_learns_a_one_state_mdp_with_known_soft_q():
    """One state, r(a) = 1 − (a − 0.3)², the next state is the same state, γ = 0.5, fixed
    small α: Q*(a) ≈ r(a) + γ·V* with V* ≈ 1 / (1 − γ) = 2, so Q*(a) ≈ 2 − (a − 0.3)²
    and the greedy action is 0.3."""
    config = SACConfig(hidden_sizes=(32, 32), actor_lr=1e-3, critic_lr=3e-3, tau=0.05,
                       learn_alpha=False, initial_alpha=0.005)
    learner = make_learner(config, 1, 1)
    obs = jnp.ones((64, 1))

    def train_step(state, key):
        action_key, update_key = jax.random.split(key)
        action = jax.random.uniform(action_key, (64, 1), minval=-1.0, maxval=1.0)
        batch = Batch(obs=obs, action=action, reward=1.0 - (action[:, 0] - 0.3) ** 2,
                      next_obs=obs, discount=jnp.full(64, 0.5), n_step=jnp.ones(64, jnp.int32),
                      weights=jnp.ones(64), indices=jnp.arange(64))
        state, metrics, _ = learner.update(state, batch, update_key)
        return state, metrics["qf_loss"]

    keys = jax.random.split(jax.random.key(0), 3000)
    state, _ = jax.jit(lambda s: jax.lax.scan(train_step, s, keys))(learner.init(jax.random.key(1)))
    probe = jnp.array([[-0.5], [0.0], [0.3], [0.8]])
    q = numpy_sac.critics(state.critic_params, np.ones((4, 1)), np.asarray(probe, np.float64))
    np.testing.assert_allclose(q, np.broadcast_to(2.0 - (probe[:, 0] - 0.3) ** 2, q.shape),
                               atol=0.1)
    greedy = learner.act(state.actor_params, jnp.ones((1, 1)), jax.random.key(0), True)
    np.testing.assert_allclose(greedy, [[0.3]], atol=0.05)


def test_make_learner_rejects_bad_dimensions():
    with pytest.raises(ValueError, match="act_dim=0"):
        make_learner(SACConfig(), 3, 0)

