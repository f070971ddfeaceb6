"""The n-step walk: transitions assembled at sample time from the stored step stream.

From a start row t and a drawn n, walk forward along the start row's env ring and stop
after a terminated or truncated step, after the env's newest stored step, or after n
steps; see `episode_buffer` and docs/replay.md for the rules and a worked example.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jaxsac.replay.frames import stack_rows, stacked_obs
from jaxsac.replay.state import DONE, TERMINATED, ReplayState
from jaxsac.types import Batch


def n_step_batch(state: ReplayState, start: jax.Array, n: jax.Array, gamma: Any,
                  num_envs: int, n_max: int, weights: jax.Array,
                  frame_stack: int = 1) -> Batch:
    """Builds the n-step transitions from start rows [B] and drawn n [B].

    Gathers n_max rows of reward and flags and two observation rows per sample (of
    every leaf of an observation tree); with frame_stack k > 1, k rows of each image
    leaf for the observation and k for the next (jaxsac.replay.frames).
    """
    ring = state.flags.shape[0] // num_envs
    env, slot = start % num_envs, start // num_envs
    offsets = jnp.arange(n_max, dtype=jnp.int32)
    walk_slots = (slot[:, None] + offsets) % ring  # [B, n_max]
    walk_rows = walk_slots * num_envs + env[:, None]
    flags = state.flags[walk_rows]
    reward = state.reward[walk_rows]
    newest_slot = (state.write_slot - 1) % ring
    is_newest = walk_slots == newest_slot
    stop = ((flags & DONE) != 0) | is_newest | (offsets == (n - 1)[:, None])
    # The first stop is the k-th step (k = last + 1); a min, not an argmax (slow on CPU).
    last = jnp.min(jnp.where(stop, offsets, n_max), axis=1)
    n_step = last + 1
    at_last = offsets[None, :] == last[:, None]

    gamma = jnp.asarray(gamma, jnp.float32)
    powers = gamma ** offsets.astype(jnp.float32)
    taken = offsets[None, :] <= last[:, None]
    n_step_reward = jnp.sum(jnp.where(taken, powers * reward, 0.0), axis=1)
    terminated = jnp.any(at_last & ((flags & TERMINATED) != 0), axis=1)
    discount = jnp.where(terminated, 0.0, gamma ** n_step.astype(jnp.float32))

    last_is_newest = jnp.any(at_last & is_newest, axis=1)
    next_row = ((slot + n_step) % ring) * num_envs + env

    def next_obs_of(rows: jax.Array, last_next: jax.Array) -> jax.Array:
        extra_dims = (1,) * (rows.ndim - 1)
        return jnp.where(last_is_newest.reshape(-1, *extra_dims), last_next[env],
                         rows[next_row])

    next_obs = jax.tree.map(next_obs_of, state.obs, state.last_next_obs)
    obs = jax.tree.map(lambda rows: rows[start], state.obs)
    if frame_stack > 1:
        obs = stacked_obs(state.obs, stack_rows(state, slot, env, num_envs, frame_stack,
                                                free_first_step=False), obs)
        next_obs = stacked_obs(state.obs, stack_rows(state, (slot + n_step) % ring, env,
                                                     num_envs, frame_stack,
                                                     free_first_step=True), next_obs)
    return Batch(
        obs=obs,
        action=state.action[start],
        reward=n_step_reward.astype(jnp.float32),
        next_obs=next_obs,
        discount=discount.astype(jnp.float32),
        n_step=n_step,
        weights=weights.astype(jnp.float32),
        indices=start.astype(jnp.int32),
    )

