"""The discrete-action (SAC-Discrete) learner against a float64 NumPy re-implementation of
its rules (docs/semantics.md, "Discrete actions"): exact expectations over the actions,
the categorical policy's actions, the settings it rejects, and int32 actions through the
episode replay buffer."""

from __future__ import annotations

import itertools
import math

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxsac import connectors
from jaxsac.assembly import example_step
from jaxsac.config import SACConfig
from jaxsac.connectors import DiscreteActions
from jaxsac.learner import METRICS, LossParams, make_learner, target_entropy
from jaxsac.networks import DISCRETE_TARGET_ENTROPY_SCALE, policy_head
from jaxsac.replay import episode_buffer
from jaxsac.types import Batch
from tests.support import numpy_sac
from tests.support.helpers import assert_gradients_routed, leaves_equal
from tests.test_learner import finite_difference, perturbed_targets
from tests.test_replay import Reference, check_batch, make_stream

OBS_DIM, NUM_ACTIONS, B = 3, 4, 16
GAMMA = 0.9
SMALL = dict(hidden_sizes=(16, 16), initial_alpha=0.5)
TARGET_ENTROPY = DISCRETE_TARGET_ENTROPY_SCALE * math.log(NUM_ACTIONS)  # "auto"
# Statistical tests use fixed keys (so they are deterministic) and reject at p < 1e-3.
P_VALUE_FLOOR = 1e-3


def mixed_batch(seed: int = 0, num_actions: int = NUM_ACTIONS) -> Batch:
    """Rows of k = 1..3 steps (reward Σ_{i<k} γ^i r_i): every fourth terminated (discount
    0), the others bootstrapped (γ^k: truncated or mid-episode); uneven weights; rewards
    large enough that some errors pass Huber's |x| = 1 and some do not."""
    rng = np.random.default_rng(seed)
    n_step = rng.integers(1, 4, size=B)
    step_rewards = 2.0 * rng.normal(size=(B, 3))
    reward = np.sum(np.where(np.arange(3) < n_step[:, None], GAMMA ** np.arange(3), 0.0)
                    * step_rewards, axis=1)
    terminated = np.arange(B) % 4 == 0
    discount = np.where(terminated, 0.0, GAMMA**n_step)
    return Batch(
        obs=jnp.asarray(rng.normal(size=(B, OBS_DIM)), jnp.float32),
        action=jnp.asarray(rng.integers(0, num_actions, size=B), jnp.int32),
        reward=jnp.asarray(reward, jnp.float32),
        next_obs=jnp.asarray(rng.normal(size=(B, OBS_DIM)), jnp.float32),
        discount=jnp.asarray(discount, jnp.float32),
        n_step=jnp.asarray(n_step, jnp.int32),
        weights=jnp.asarray(rng.uniform(0.2, 1.0, size=B), jnp.float32),
        indices=jnp.arange(B, dtype=jnp.int32),
    )


def setup(critic_loss="mse", actions=None, **overrides):
    """A small discrete learner (DiscreteActions(NUM_ACTIONS) unless `actions` is given)
    and its initial state with perturbed target critics."""
    actions = DiscreteActions(NUM_ACTIONS) if actions is None else actions
    config = SACConfig(critic_loss=critic_loss, **{**SMALL, **overrides})
    learner = make_learner(config, OBS_DIM, actions)
    state = perturbed_targets(learner.init(jax.random.key(0)), jax.random.key(7))
    return config, learner, state


def loss_params(state) -> LossParams:
    return LossParams(state.actor_params, state.critic_params, state.log_alpha)


def reference(state, batch, critic_loss="mse", entropy_target=TARGET_ENTROPY):
    return numpy_sac.discrete_sac_losses(
        state.actor_params, state.critic_params, state.target_critic_params, state.log_alpha,
        batch, entropy_target, critic_loss)


def close(actual, expected, name):
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=1e-5, atol=1e-6,
                               err_msg=name)


# --------------------------------------------------------------------------- losses


@pytest.mark.parametrize("critic_loss", ["mse", "huber"])
def test_losses_td_error_and_metrics_match_numpy(critic_loss):
    _, learner, state = setup(critic_loss)
    batch, key = mixed_batch(), jax.random.key(3)
    ref = reference(state, batch, critic_loss)
    errors = np.abs(ref["error"])
    assert np.any(errors > 1.0) and np.any(errors < 1.0)  # both branches of Huber

    total, aux = jax.jit(learner.loss)(loss_params(state), state.target_critic_params, batch,
                                       key)
    for name in ("qf_loss", "policy_loss", "alpha_loss", "td_error", "q", "log_prob"):
        close(aux[name], ref[name], name)
    close(total, ref["qf_loss"] + ref["policy_loss"] + ref["alpha_loss"], "sum")

    _, metrics, td_error = jax.jit(learner.update)(state, batch, key)
    assert set(metrics) == set(METRICS)
    expected = {"qf_loss": ref["qf_loss"], "policy_loss": ref["policy_loss"],
                "alpha_loss": ref["alpha_loss"], "alpha": 0.5, "log_alpha": math.log(0.5),
                "entropy": ref["entropy"], "q_mean": ref["q"].mean(), "q_min": ref["q"].min(),
                "q_max": ref["q"].max(), "td_error_mean": ref["td_error"].mean(),
                "td_error_nonfinite": 0.0}
    for name, value in expected.items():
        close(metrics[name], value, name)
    close(td_error, ref["td_error"], "td_error")


def recovered_targets(learner, state, batch, key) -> np.ndarray:
    """The target y [B, N] each critic's "mse" loss regresses on, read off its gradient:
    with weights one-hot on row b, ∂L_Q/∂(last bias of critic i)[a_b] = (Q_i(s_b, a_b) − y_b)/B
    (and 0 at the other actions, which this asserts)."""
    def last_bias_grad(batch, weights):
        def qf_loss(params):
            return learner.loss(params, state.target_critic_params,
                                batch._replace(weights=weights), key)[1]["qf_loss"]
        grads = jax.grad(qf_loss)(loss_params(state))
        return grads.critic_params["params"]["VmapMLP_0"]["Dense_2"]["bias"]  # [N, |A|]

    grads = np.asarray(jax.jit(jax.vmap(last_bias_grad, in_axes=(None, 0)))(batch, jnp.eye(B)),
                       np.float64)  # [B, N, |A|]
    action = np.asarray(batch.action)
    untaken = np.ones(grads.shape, bool)
    untaken[np.arange(B), :, action] = False
    assert np.all(grads[untaken] == 0)
    q = numpy_sac.discrete_critics(state.critic_params, np.asarray(batch.obs, np.float64))
    return q[:, np.arange(B), action].T - B * grads[np.arange(B), :, action]


def test_critic_target_is_the_exact_soft_value_of_the_target_critics():
    _, learner, state = setup()
    batch, key = mixed_batch(), jax.random.key(3)
    target = recovered_targets(learner, state, batch, key)
    expected = reference(state, batch)["target"]
    np.testing.assert_allclose(target, np.broadcast_to(expected[:, None], target.shape),
                               rtol=1e-5, atol=1e-5)
    # The perturbed targets make a mix-up with the online critics visible.
    online = numpy_sac.discrete_sac_losses(
        state.actor_params, state.critic_params, state.critic_params, state.log_alpha, batch,
        TARGET_ENTROPY)["target"]
    assert np.max(np.abs(online - expected)) > 1e-3


def test_terminated_rows_do_not_bootstrap_and_truncated_rows_do():
    """Moving next_obs of the discount-0 rows changes nothing; moving it on the others
    (truncated or mid-episode, discount γ^k) moves exactly their targets."""
    _, learner, state = setup()
    batch, key = mixed_batch(), jax.random.key(3)
    loss = jax.jit(learner.loss)
    terminated = np.asarray(batch.discount) == 0
    rng = np.random.default_rng(1)

    def moved_next_obs(rows):
        next_obs = np.array(batch.next_obs)
        next_obs[rows] += rng.normal(size=(int(rows.sum()), OBS_DIM))
        return batch._replace(next_obs=jnp.asarray(next_obs, jnp.float32))

    def aux_of(b):
        return jax.tree.map(np.asarray, loss(loss_params(state), state.target_critic_params,
                                             b, key)[1])

    base, base_target = aux_of(batch), recovered_targets(learner, state, batch, key)
    np.testing.assert_allclose(base_target[terminated],
                               np.broadcast_to(np.asarray(batch.reward)[terminated, None],
                                               base_target[terminated].shape),
                               rtol=1e-5, atol=1e-5)
    moved = moved_next_obs(terminated)
    after = aux_of(moved)
    for name in ("qf_loss", "td_error", "policy_loss", "alpha_loss"):
        np.testing.assert_array_equal(after[name], base[name], err_msg=name)
    np.testing.assert_array_equal(recovered_targets(learner, state, moved, key), base_target)

    moved = moved_next_obs(~terminated)
    after, target = aux_of(moved), recovered_targets(learner, state, moved, key)
    assert np.all(np.abs(target - base_target)[~terminated] > 1e-4)
    np.testing.assert_array_equal(target[terminated], base_target[terminated])
    ref = reference(state, moved)
    np.testing.assert_allclose(target, np.broadcast_to(ref["target"][:, None], target.shape),
                               rtol=1e-5, atol=1e-5)
    for name in ("qf_loss", "td_error"):
        close(after[name], ref[name], name)


# --------------------------------------------------------------------------- gradients


def test_gradients_reach_only_their_own_parameters():
    _, learner, state = setup()
    assert_gradients_routed(learner, loss_params(state), state.target_critic_params,
                            mixed_batch(), jax.random.key(3))


def layer_leaf(module: str, layer: int, part: str):
    """params -> the `part` ("kernel" or "bias") of Dense layer `layer` of `module`."""
    return lambda tree: tree["params"][module][f"Dense_{layer}"][part]


def test_first_step_follows_the_gradient_of_each_loss():
    """Adam's first step moves each weight by −lr·sign(gradient): check entries of every
    actor and critic layer against float64 finite differences of the NumPy losses, and
    log α against its exact gradient −mean_b(Σ_a π log π + H̄)."""
    config, learner, state = setup()
    batch, key = mixed_batch(), jax.random.key(3)
    new_state, _, _ = jax.jit(learner.update)(state, batch, key)

    def losses(actor_params, critic_params):
        return numpy_sac.discrete_sac_losses(actor_params, critic_params,
                                             state.target_critic_params, state.log_alpha,
                                             batch, TARGET_ENTROPY)

    nets = {  # name: (module, loss of the parameters, learning rate)
        "critic": ("VmapMLP_0", lambda p: losses(state.actor_params, p)["qf_loss"],
                   config.critic_lr),
        "actor": ("MLP_0", lambda p: losses(p, state.critic_params)["policy_loss"],
                  config.actor_lr),
    }
    rng = np.random.default_rng(0)
    for net, (module, fn, lr) in nets.items():
        params = getattr(state, f"{net}_params")
        new_params = getattr(new_state, f"{net}_params")
        checked = 0
        for layer, part in itertools.product(range(3), ("kernel", "bias")):
            leaf = layer_leaf(module, layer, part)
            for _ in range(5):
                index = tuple(int(rng.integers(n)) for n in leaf(params).shape)
                grad = finite_difference(fn, params, leaf, index)
                step = float(leaf(new_params)[index]) - float(leaf(params)[index])
                if abs(grad) > 1e-5:
                    assert np.sign(step) == -np.sign(grad), (net, layer, part, index)
                    np.testing.assert_allclose(abs(step), lr, rtol=1e-2)
                    checked += 1
        assert checked >= 15, (net, checked)

    alpha_grad = -np.mean(reference(state, batch)["log_prob"] + TARGET_ENTROPY)
    expected = float(state.log_alpha) - config.alpha_lr * alpha_grad / (abs(alpha_grad) + 1e-8)
    np.testing.assert_allclose(new_state.log_alpha, expected, rtol=1e-5, atol=1e-7)


# --------------------------------------------------------------------------- target entropy


@pytest.mark.parametrize("scale", [None, 0.2, 0.9])
def test_auto_target_entropy_is_scale_times_log_num_actions(scale):
    assert DISCRETE_TARGET_ENTROPY_SCALE == 0.5
    config = SACConfig(target_entropy_scale=scale, **SMALL)
    for num_actions in (2, 3, 7, 100):
        head = policy_head(DiscreteActions(num_actions))
        expected = (0.5 if scale is None else scale) * math.log(num_actions)
        assert target_entropy(config, head) == pytest.approx(expected, rel=1e-12)
    assert target_entropy(SACConfig(**SMALL), policy_head(connectors.module_actions(3))) == -3.0


@pytest.mark.parametrize("num_actions, scale", [(2, None), (7, 0.9)])
def test_alpha_loss_uses_the_auto_target_entropy(num_actions, scale):
    _, learner, state = setup(actions=gymnasium.spaces.Discrete(num_actions),
                              target_entropy_scale=scale)
    batch = mixed_batch(num_actions=num_actions)
    entropy_target = (0.5 if scale is None else scale) * math.log(num_actions)
    _, aux = jax.jit(learner.loss)(loss_params(state), state.target_critic_params, batch,
                                   jax.random.key(3))
    ref = reference(state, batch, entropy_target=entropy_target)
    close(aux["alpha_loss"], ref["alpha_loss"], "alpha_loss")
    close(aux["policy_loss"], ref["policy_loss"], "policy_loss")


def test_gymnasium_discrete_space_and_adapter_give_the_same_learner():
    _, from_space, space_state = setup(actions=gymnasium.spaces.Discrete(NUM_ACTIONS))
    _, from_adapter, adapter_state = setup()
    assert leaves_equal(space_state, adapter_state)
    batch, key = mixed_batch(), jax.random.key(3)
    params = loss_params(space_state)
    assert leaves_equal(from_space.loss(params, space_state.target_critic_params, batch, key),
                        from_adapter.loss(params, space_state.target_critic_params, batch, key))


# --------------------------------------------------------------------------- acting


def test_deterministic_action_is_the_argmax_of_the_logits():
    _, learner, state = setup()
    obs = np.random.default_rng(2).normal(size=(64, OBS_DIM))
    action = jax.jit(learner.act, static_argnums=3)(
        state.actor_params, jnp.asarray(obs, jnp.float32), jax.random.key(0), True)
    assert action.dtype == jnp.int32 and action.shape == (64,)
    _, log_probs = numpy_sac.categorical_actor(state.actor_params, obs)
    top_two = np.sort(log_probs, axis=-1)[:, -2:]
    assert np.all(top_two[:, 1] - top_two[:, 0] > 1e-5)  # no float32 near-ties
    np.testing.assert_array_equal(action, log_probs.argmax(axis=-1))
    assert len(np.unique(action)) >= 2


def test_sampled_actions_follow_the_softmax_of_the_logits():
    """Chi-square of each state's action counts against π = softmax(logits); a bias on the
    last layer moves π far from uniform, so a uniform or argmax sampler fails."""
    _, learner, state = setup()
    actor = jax.tree.map(lambda x: x, state.actor_params)  # new dicts, the same arrays
    last = actor["params"]["MLP_0"]["Dense_2"]
    last["bias"] = last["bias"] + jnp.asarray([1.5, 0.0, -1.0, 0.5], jnp.float32)
    states = np.random.default_rng(3).normal(size=(3, OBS_DIM))
    draws = 4000
    obs = jnp.asarray(np.repeat(states, draws, axis=0), jnp.float32)
    actions = np.asarray(jax.jit(learner.act)(actor, obs, jax.random.key(5)))
    assert actions.dtype == np.int32 and actions.shape == (3 * draws,)
    probs, _ = numpy_sac.categorical_actor(actor, states)
    assert np.all(np.ptp(probs, axis=-1) > 0.3)
    for i in range(3):
        counts = np.bincount(actions[i * draws:(i + 1) * draws], minlength=NUM_ACTIONS)
        assert len(counts) == NUM_ACTIONS
        assert stats.chisquare(counts, probs[i] * draws).pvalue > P_VALUE_FLOOR, (i, counts)


# --------------------------------------------------------------------------- bad input


def test_settings_the_discrete_space_cannot_honour_are_rejected():
    discrete = gymnasium.spaces.Discrete(3)
    with pytest.raises(ValueError, match=r"log_std_bounds=\(-4\.0, 1\.0\) is invalid: must be "
                                         r"None for the Discrete action space Discrete\(3\)"):
        make_learner(SACConfig(log_std_bounds=(-4.0, 1.0), **SMALL), OBS_DIM, discrete)
    with pytest.raises(ValueError, match=r"target_entropy_scale=0\.5 is invalid: must be None "
                                         r"for the Box action space Box\(.*Discrete-only"):
        make_learner(SACConfig(target_entropy_scale=0.5, **SMALL), OBS_DIM, 2)
    for too_large in (math.log(3), 2.0):
        with pytest.raises(ValueError, match=r"target_entropy=.* is invalid: must be \"auto\" "
                                             r"or below log\|A\| = 1\.09861 for the Discrete "
                                             r"action space Discrete\(3\)"):
            make_learner(SACConfig(target_entropy=too_large, **SMALL), OBS_DIM, discrete)
    make_learner(SACConfig(target_entropy=math.log(3) - 1e-6, **SMALL), OBS_DIM, discrete)


def test_multi_discrete_actions_are_rejected():
    space = gymnasium.spaces.MultiDiscrete([2, 3])
    supported = r"supported action spaces: Box .* and Discrete"
    with pytest.raises(ValueError, match=r"env: action_space=MultiDiscrete\(\[2 3\]\) is not "
                                         r"supported \(MultiDiscrete actions\); " + supported):
        connectors.module_actions(space)
    with pytest.raises(ValueError, match=r"make_learner: action_space=MultiDiscrete.*"
                                         + supported):
        make_learner(SACConfig(**SMALL), OBS_DIM, space)


# --------------------------------------------------------------------------- replay


def test_replay_stores_and_samples_int32_actions():
    """A NEXT_STEP stream of 3 envs with int32 actions through a wrapped episode buffer:
    every sampled action is the one stored at its row, and reward, next_obs and discount
    are the brute-force n-step transition (tests/test_replay.py's Reference)."""
    num_envs, ring, n_step = 3, 12, (1, 3)
    rng = np.random.default_rng(5)
    stream = [step._replace(action=rng.integers(0, NUM_ACTIONS, num_envs).astype(np.int32))
              for step in make_stream(5, num_envs, 40, 5, 0.5)]
    buf = episode_buffer(ring * num_envs, num_envs, 128, n_step=n_step, gamma=GAMMA)
    state = buf.init(example_step(stream[0].obs.shape[1], DiscreteActions(NUM_ACTIONS)))
    assert state.action.dtype == jnp.int32 and state.action.shape == (ring * num_envs,)
    add = jax.jit(buf.add)
    for step in stream:
        state = add(state, step)
    ref = Reference(stream, ring, GAMMA, *n_step)

    many = jax.jit(jax.vmap(buf.sample, in_axes=(None, 0)))
    batches = jax.tree.map(np.asarray, many(state, jax.random.split(jax.random.key(0), 6)))
    assert batches.action.dtype == np.int32 and batches.action.shape == (6, 128)
    ends = set()  # (k, how the walk's last step ended)
    for i in range(6):
        batch = jax.tree.map(lambda x, i=i: x[i], batches)
        check_batch(ref, batch)
        np.testing.assert_array_equal(batch.action, np.asarray(state.action)[batch.indices])
        for b in range(128):
            env, t = int(batch.obs[b, 0]), ref.locate(batch.obs[b])
            last = ref.rows[env][t + int(batch.n_step[b]) - 1]
            ends.add((int(batch.n_step[b]), "terminated" if last.terminated else
                      "truncated" if last.truncated else "running"))
    assert {k for k, _ in ends} == {1, 2, 3}
    assert {"terminated", "truncated", "running"} <= {end for _, end in ends}
