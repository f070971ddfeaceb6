"""The records that flow between env runners, the replay buffer and the learner.

All are NamedTuples, so they are pytrees: `jit`, `vmap` and `tree_map` see their fields.
Shapes below are for one item; a batch adds leading axes (`[num_envs]` for a `Step` from
a vectorised runner, `[batch_size]` for a `Batch`). An observation is a pytree
(jaxsac.observations): a flat float32 array [obs_dim] for a Box observation space, or a
dict {key: [*shape]} of a Dict space's entries, each in its own dtype; a leading axis
of an observation field is on every leaf.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax


class Step(NamedTuple):
    """Exactly what one environment step gave.

    obs: the observation the action was chosen from ([obs_dim] float32, or a dict).
    action: the module's action: [act_dim] float32 in [-1, 1] for a Box (before env
        rescaling), [] int32 for a Discrete space (jaxsac.connectors.module_actions).
    reward: [] float32.
    terminated: [] bool, the episode reached a terminal state.
    truncated: [] bool, the episode was cut short (time limit, env failure).
    next_obs: the observation after the step (a tree like obs); when the episode ended
        this is the final observation (with gymnasium's NEXT_STEP autoreset the next
        `Step`'s `obs` is that same final observation and its action is ignored).
    failed: [] bool, or None when no row can fail (JAX envs): the env raised instead
        of stepping, so the row holds no env step. Its obs is the episode's last real
        observation (the real next_obs of the step before); the buffer never samples it
        and its n-step walks stop before it, so the episode ends, truncated, at its last
        real step (docs/reliability.md).
    """

    obs: Any
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    next_obs: Any
    failed: jax.Array | None = None


class Batch(NamedTuple):
    """A batch of (n-step) transitions for one gradient step, leading axis batch_size (B).

    obs: [B, obs_dim] float32, or a dict of [B, *shape] entries.
    action: [B, act_dim] float32 in [-1, 1] (Box) or [B] int32 (Discrete).
    reward: [B] float32, the n-step discounted sum  sum_{i<k} gamma^i r_{t+i}.
    next_obs: the observation k steps later (a tree like obs).
    discount: [B] float32, gamma^k, or 0 when the episode terminated within the k steps.
    n_step: [B] int32, k (1 <= k <= n).
    weights: [B] float32, importance-sampling weights (ones when sampling uniformly).
    indices: [B] int32, buffer rows of the samples (what `update_priorities` takes).
    """

    obs: Any
    action: jax.Array
    reward: jax.Array
    next_obs: Any
    discount: jax.Array
    n_step: jax.Array
    weights: jax.Array
    indices: jax.Array


class EpisodeInfo(NamedTuple):
    """Episodes that ended at this step, per env (leading axis num_envs, E).

    done: [E] bool, the env's episode ended at this step (terminated or truncated) after
        at least one real env step (an env that fails right after its reset ends no
        episode).
    episode_return: [E] float32, where done the sum of that episode's rewards, else 0.
    episode_length: [E] int32, where done its number of env steps, else 0.
    """

    done: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array
