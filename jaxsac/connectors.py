"""Connectors: the pure transforms between envs, the RL module and the learner.

    env obs --env-to-module--> module obs --actor--> action in [-1, 1]
            --module-to-env--> env action (Box units)
    sampled Batch --learner connectors--> Batch the learner trains on

Each connector is a pure function. The only stateful one, running observation
normalization, keeps its statistics in an `ObsNormState` pytree that lives in the
runner state (`TrainState.runner`) and is saved with checkpoints.
Functions that only use arithmetic and `.clip` accept numpy or JAX arrays and return
the same kind, so the host runner can use them without a device round trip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxsac.types import Batch

Array = Any  # a numpy or JAX array


# --- env-to-module -----------------------------------------------------------------


def flatten_obs(obs: Array, batch_dims: int = 1) -> Array:
    """Box observations [*batch, *obs_shape] -> float32 [*batch, obs_dim]."""
    shape = obs.shape[:batch_dims] + (-1,)
    return obs.reshape(shape).astype(np.float32)


def flat_obs_dim(observation_space: gymnasium.Space) -> int:
    """obs_dim after flattening (gymnasium's flatdim: one-hot for Discrete parts)."""
    return int(gymnasium.spaces.flatdim(observation_space))


def flat_action_dim(action_space: gymnasium.spaces.Box) -> int:
    """act_dim: the number of entries of one action of the Box `action_space`."""
    return int(np.prod(action_space.shape))


@struct.dataclass
class ObsNormState:
    """Running mean and variance of observations (Chan et al.'s parallel update).

    mean: [obs_dim] float32. var: [obs_dim] float32, population variance.
    count: [] float32, observations seen, starting at a tiny `epsilon` like gymnasium's
    `RunningMeanStd` so the first update needs no special case.
    """

    mean: jax.Array
    var: jax.Array
    count: jax.Array


def init_obs_norm(obs_dim: int, epsilon: float = 1e-4) -> ObsNormState:
    """Statistics before any observation: mean 0, var 1, count `epsilon`."""
    return ObsNormState(mean=jnp.zeros((obs_dim,), jnp.float32),
                        var=jnp.ones((obs_dim,), jnp.float32),
                        count=jnp.asarray(epsilon, jnp.float32))


def update_obs_norm(stats: ObsNormState, obs: jax.Array) -> ObsNormState:
    """Statistics after also seeing `obs` [N, obs_dim] (N >= 1)."""
    obs = jnp.asarray(obs, jnp.float32)
    batch_mean = jnp.mean(obs, axis=0)
    batch_var = jnp.var(obs, axis=0)
    batch_count = jnp.asarray(obs.shape[0], jnp.float32)
    delta = batch_mean - stats.mean
    total = stats.count + batch_count
    mean = stats.mean + delta * batch_count / total
    m2 = (stats.var * stats.count + batch_var * batch_count
          + delta**2 * stats.count * batch_count / total)
    return ObsNormState(mean=mean, var=m2 / total, count=total)


def normalize_obs(stats: ObsNormState, obs: jax.Array, epsilon: float = 1e-8) -> jax.Array:
    """(obs - mean) / sqrt(var + epsilon), float32, any leading axes."""
    return ((obs - stats.mean) / jnp.sqrt(stats.var + epsilon)).astype(jnp.float32)


class EnvToModule(struct.PyTreeNode):
    """The env-to-module pipeline: flattened float32 obs, then optional normalization.

    `update(stats, obs)` folds new raw obs [N, obs_dim] into the statistics (a no-op
    when `normalize` is False) and `apply(stats, obs)` gives the module's obs.
    The statistics pytree has the same structure either way, so checkpoints do too.
    """

    normalize: bool = struct.field(pytree_node=False, default=False)

    def init(self, obs_dim: int) -> ObsNormState:
        return init_obs_norm(obs_dim)

    def update(self, stats: ObsNormState, obs: jax.Array) -> ObsNormState:
        return update_obs_norm(stats, obs) if self.normalize else stats

    def apply(self, stats: ObsNormState, obs: jax.Array) -> jax.Array:
        obs = jnp.asarray(obs, jnp.float32)
        return normalize_obs(stats, obs) if self.normalize else obs

    def normalize_batch(self, stats: ObsNormState, batch: Batch) -> Batch:
        """The learner connector matching this pipeline (identity without normalization)."""
        return normalize_batch(stats, batch) if self.normalize else batch


# --- module-to-env -----------------------------------------------------------------


def rescale_action(action: Array, low: Array, high: Array) -> Array:
    """Module action in [-1, 1] -> env action: low + (a + 1)(high - low)/2, clipped to
    [low, high]. Shapes broadcast ([..., act_dim] with [act_dim] bounds)."""
    return (low + (action + 1.0) * (high - low) / 2.0).clip(low, high)


def module_to_env(action_space: gymnasium.spaces.Box) -> Callable[[Array], Array]:
    """The module-to-env pipeline for a Box: [..., act_dim] in [-1, 1] -> env units.

    The env action has the Box's shape per env: a flat [act_dim] action is reshaped to
    `action_space.shape` after the leading axes.
    """
    low = np.asarray(action_space.low, np.float32).reshape(-1)
    high = np.asarray(action_space.high, np.float32).reshape(-1)
    shape = tuple(action_space.shape)

    def to_env(action: Array) -> Array:
        env_action = rescale_action(action.astype(np.float32), low, high)
        return env_action.reshape(action.shape[:-1] + shape)

    return to_env


def random_module_action(key: jax.Array, num: int, act_dim: int) -> jax.Array:
    """Uniform random module actions [num, act_dim] in [-1, 1] (warm-up exploration)."""
    return jax.random.uniform(key, (num, act_dim), jnp.float32, minval=-1.0, maxval=1.0)


# --- learner -----------------------------------------------------------------------


def normalize_batch(stats: ObsNormState, batch: Batch) -> Batch:
    """Learner connector: the batch's obs and next_obs normalized with `stats`."""
    return batch._replace(obs=normalize_obs(stats, batch.obs),
                          next_obs=normalize_obs(stats, batch.next_obs))
