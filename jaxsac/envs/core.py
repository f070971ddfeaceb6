"""The JAX env protocol and the wrappers every JAX env gets: a time limit and autoreset.

A `JaxEnv` is a pair of pure functions over an explicit state pytree, so it can be
`jit`-ed, `vmap`-ed over many envs and `scan`-ned over time:

    state, obs = env.reset(key)
    state, obs, reward, terminated, truncated = env.step(state, action, key)

Shapes are for one env: obs [*obs_shape] for a Box observation space, or a dict of
its entries for a Dict space (jaxsac.observations), action [act_dim] (in the env's own
`action_space` units), reward [] float32, terminated / truncated [] bool. Time limits
set `truncated`, never `terminated`.

An env whose state keeps something across its episodes (a domain-randomized model,
jaxsac.envs.randomization) also has `reset_episode(state, key) -> (state, obs)`, which
the autoreset calls instead of `reset(key)`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import gymnasium
import jax
import jax.numpy as jnp
from flax import struct

EnvState = Any


@runtime_checkable
class JaxEnv(Protocol):
    """What runners need from a JAX-native environment (pure and vmappable)."""

    observation_space: gymnasium.spaces.Box | gymnasium.spaces.Dict
    action_space: gymnasium.spaces.Box

    def reset(self, key: jax.Array) -> tuple[EnvState, jax.Array]: ...

    def step(
        self, state: EnvState, action: jax.Array, key: jax.Array
    ) -> tuple[EnvState, jax.Array, jax.Array, jax.Array, jax.Array]: ...


def default_float() -> jnp.dtype:
    """float64 under `jax.enable_x64`, else float32 (read at trace time)."""
    return jnp.zeros(()).dtype


@struct.dataclass
class TimeLimitState:
    env_state: EnvState
    elapsed_steps: jax.Array  # [] int32, steps taken in this episode


class Wrapper:
    """A JAX env around `env`, with its spaces; `unwrapped` is the innermost env."""

    def __init__(self, env: JaxEnv):
        self.env = env
        self.observation_space = env.observation_space
        self.action_space = env.action_space

    @property
    def unwrapped(self) -> JaxEnv:
        return getattr(self.env, "unwrapped", self.env)


class TimeLimit(Wrapper):
    """Truncates an episode after `max_episode_steps` steps, like gymnasium's TimeLimit."""

    def __init__(self, env: JaxEnv, max_episode_steps: int):
        if not isinstance(max_episode_steps, int) or max_episode_steps < 1:
            raise ValueError(
                f"TimeLimit: max_episode_steps={max_episode_steps!r} is invalid: "
                "must be an integer >= 1")
        super().__init__(env)
        self.max_episode_steps = max_episode_steps

    def reset(self, key: jax.Array) -> tuple[TimeLimitState, jax.Array]:
        env_state, obs = self.env.reset(key)
        return TimeLimitState(env_state, jnp.zeros((), jnp.int32)), obs

    def step(self, state: TimeLimitState, action: jax.Array, key: jax.Array):
        env_state, obs, reward, terminated, truncated = self.env.step(
            state.env_state, action, key)
        elapsed = state.elapsed_steps + 1
        truncated = jnp.logical_or(truncated, elapsed >= self.max_episode_steps)
        return TimeLimitState(env_state, elapsed), obs, reward, terminated, truncated

    def __repr__(self) -> str:
        return f"TimeLimit({self.env!r}, max_episode_steps={self.max_episode_steps})"


@struct.dataclass
class AutoResetState:
    env_state: EnvState
    needs_reset: jax.Array  # [] bool, the last step ended the episode


class AutoReset(Wrapper):
    """Gymnasium's NEXT_STEP autoreset for a JAX env.

    The `step` after a terminated or truncated one resets the env instead of stepping
    it: its action is ignored and it returns (first obs of the new episode, reward 0,
    terminated False, truncated False). `state.needs_reset` says whether the next step
    is such a reset step.
    """

    def reset(self, key: jax.Array) -> tuple[AutoResetState, jax.Array]:
        env_state, obs = self.env.reset(key)
        return AutoResetState(env_state, jnp.zeros((), bool)), obs

    def step(self, state: AutoResetState, action: jax.Array, key: jax.Array):
        def reset_branch(_):
            env_state, obs = self._reset_episode(state.env_state, key)
            no = jnp.zeros((), bool)
            return env_state, obs, jnp.zeros((), jnp.float32), no, no

        def step_branch(_):
            return self._step_as_float32_and_bools(state.env_state, action, key)

        env_state, obs, reward, terminated, truncated = jax.lax.cond(
            state.needs_reset, reset_branch, step_branch, None)
        needs_reset = jnp.logical_or(terminated, truncated)
        return AutoResetState(env_state, needs_reset), obs, reward, terminated, truncated

    def step_batch(self, state: AutoResetState, action: jax.Array, keys: jax.Array):
        """`step` for E envs at once (every leaf with a leading axis E; keys [E]): the
        same values as `jax.vmap(self.step)`, but the resets are computed only in calls
        where some env needs one, also under further `vmap`s (over seeds or swept
        hyperparameters).

        `vmap` turns `step`'s `lax.cond` into a select that computes a reset for every
        env at every step: free for classic control, but a MuJoCo Playground reset can
        cost hundreds of physics steps (dm_control's cheetah settles for 200).
        """
        stepped = jax.vmap(self._step_as_float32_and_bools)(state.env_state, action, keys)
        env_state, obs, reward, terminated, truncated = _reset_where(
            self._reset_episode, state.needs_reset, keys, stepped)
        needs_reset = jnp.logical_or(terminated, truncated)
        return AutoResetState(env_state, needs_reset), obs, reward, terminated, truncated

    def _reset_episode(self, env_state: EnvState, key: jax.Array) -> tuple[EnvState, jax.Array]:
        """The next episode's start: the env's `reset_episode(env_state, key)` when it has
        one, else `reset(key)`."""
        if hasattr(self.env, "reset_episode"):
            return self.env.reset_episode(env_state, key)
        return self.env.reset(key)

    def _step_as_float32_and_bools(self, env_state: EnvState, action: jax.Array, key: jax.Array):
        """The wrapped env's step, reward as float32 and the flags as bools."""
        env_state, obs, reward, terminated, truncated = self.env.step(env_state, action, key)
        return (env_state, obs, reward.astype(jnp.float32), jnp.asarray(terminated, bool),
                jnp.asarray(truncated, bool))

    def __repr__(self) -> str:
        return f"AutoReset({self.env!r})"


def _reset_where(reset: Any, needs_reset: jax.Array, keys: jax.Array, stepped: tuple) -> tuple:
    """`stepped` (env_state, obs, reward, terminated, truncated), each leaf [E, ...], with
    the rows where `needs_reset` [E] replaced by `reset(env_state[e], keys[e])`'s
    (reward 0, both flags False). The resets run only when some row needs one; under
    `vmap` the batch axes are folded into E (a custom batching rule), so that stays a
    `lax.cond` and does not become a select that computes every reset."""

    @jax.custom_batching.custom_vmap
    def where(needs_reset, keys, stepped):
        def with_resets(stepped):
            env_state, obs = jax.vmap(reset)(stepped[0], keys)
            no = jnp.zeros_like(needs_reset)
            fresh = (env_state, obs, jnp.zeros(needs_reset.shape, jnp.float32), no, no)
            return jax.tree.map(lambda r, s: jnp.where(
                jnp.reshape(needs_reset, needs_reset.shape + (1,) * (s.ndim - 1)), r, s),
                fresh, stepped)

        return jax.lax.cond(needs_reset.any(), with_resets, lambda s: s, stepped)

    @where.def_vmap
    def where_batched(axis_size, in_batched, needs_reset, keys, stepped):
        args = jax.tree.map(
            lambda x, batched: x if batched else jnp.broadcast_to(x, (axis_size, *x.shape)),
            (needs_reset, keys, stepped), tuple(in_batched))
        num_envs = args[0].shape[1]
        flat = jax.tree.map(lambda x: jnp.reshape(x, (axis_size * num_envs, *x.shape[2:])),
                            args)
        out = jax.tree.map(lambda x: jnp.reshape(x, (axis_size, num_envs, *x.shape[1:])),
                           where(*flat))
        return out, jax.tree.map(lambda _: True, out)

    return where(needs_reset, keys, stepped)
