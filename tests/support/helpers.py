"""Helpers shared by several test files."""

from __future__ import annotations

import jax
import numpy as np

TINY = dict(hidden_sizes=(32, 32), batch_size=32, buffer_capacity=2_000, learning_starts=100,
            log_every=200, total_env_steps=600, eval_episodes=2)
"""SACConfig overrides for runs that only check plumbing: small nets, few steps."""


def leaves_equal(a, b) -> bool:
    """Bit-equal pytrees of the same structure: every leaf the same dtype and bits (NaN
    equal to NaN, as in metrics before learning starts; typed keys by their data)."""
    def same(x, y):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x, y = jax.random.key_data(x), jax.random.key_data(y)
        x, y = np.asarray(x), np.asarray(y)
        return x.dtype == y.dtype and bool(np.array_equal(
            x, y, equal_nan=np.issubdtype(x.dtype, np.floating)))
    if jax.tree.structure(a) != jax.tree.structure(b):
        return False
    return all(same(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


def assert_gradients_routed(learner, params, target_critic_params, batch, key,
                            critic_state=None) -> None:
    """The critic loss's gradient reaches only the critics, the actor loss's only the
    actor, the temperature loss's only log α (`params`: the learner's LossParams;
    `critic_state`: the critic family's state, if it has one)."""
    def grads(p):  # one compiled program for the three gradients
        return tuple(jax.grad(lambda q, n=name: learner.loss(
            q, target_critic_params, batch, key, critic_state)[1][n])(p)
            for name in ("qf_loss", "policy_loss", "alpha_loss"))

    def is_zero(tree):
        return all(bool(np.all(np.asarray(x) == 0)) for x in jax.tree.leaves(tree))

    critic_grads, actor_grads, alpha_grads = jax.jit(grads)(params)
    assert is_zero(critic_grads.actor_params) and is_zero(critic_grads.log_alpha)
    assert not is_zero(critic_grads.critic_params)
    assert is_zero(actor_grads.critic_params) and is_zero(actor_grads.log_alpha)
    assert not is_zero(actor_grads.actor_params)
    assert is_zero(alpha_grads.actor_params) and is_zero(alpha_grads.critic_params)
    assert not is_zero(alpha_grads.log_alpha)


def buffer_rows(buffer, num_envs: int) -> dict[str, np.ndarray]:
    """A one-shard ReplayState's rows per env, oldest first, as numpy: obs [E, T, d],
    reward [E, T], flags [E, T] and next_obs [E, T, d] (the next row's obs, or
    last_next_obs after the newest row); T = the slots written (no ring wrap-around)."""
    slots = int(buffer.filled_slots)
    assert slots < np.asarray(buffer.flags).shape[0] // num_envs, "the ring wrapped around"

    def per_env(x):
        x = np.asarray(x)[:slots * num_envs]
        return np.swapaxes(x.reshape(slots, num_envs, *x.shape[1:]), 0, 1)
    obs = per_env(buffer.obs)
    next_obs = np.concatenate([obs[:, 1:], np.asarray(buffer.last_next_obs)[:, None]], axis=1)
    return {"obs": obs, "reward": per_env(buffer.reward), "flags": per_env(buffer.flags),
            "next_obs": next_obs}


def assert_counter_transitions_are_real(rows: dict[str, np.ndarray], not_a_start: int) -> None:
    """Every row a transition can start at (flags without `not_a_start` bits) is a step
    of tests.support.ray_envs.CounterEnv: step and lifetime counters one up, the same draw, and
    reward = the new step count."""
    start = (rows["flags"] & not_a_start) == 0
    obs, next_obs = rows["obs"][start], rows["next_obs"][start]
    np.testing.assert_array_equal(next_obs[:, :2], obs[:, :2] + 1)
    np.testing.assert_array_equal(next_obs[:, 2], obs[:, 2])
    np.testing.assert_array_equal(rows["reward"][start], next_obs[:, 0])


def gymnasium_cartpole_lengths(choose_action, episodes: int = 200) -> np.ndarray:
    """Episode lengths (= returns) of gymnasium's own CartPole-v1 under `choose_action`."""
    import gymnasium

    env, rng, lengths = gymnasium.make("CartPole-v1"), np.random.default_rng(0), []
    for episode in range(episodes):
        env.reset(seed=episode)
        steps, done = 0, False
        while not done:
            _, _, terminated, truncated, _ = env.step(choose_action(rng))
            steps, done = steps + 1, terminated or truncated
        lengths.append(steps)
    return np.asarray(lengths)
