"""Connectors: the pure transforms between envs, the RL module and the learner.

    env obs --env-to-module--> module obs --actor--> module action
            --module-to-env--> env action
    (a module action is [|A|] float32 in [-1, 1] for a Box, rescaled to its units, or
    an int32 index for a Discrete space: `module_actions(space)` picks the adapter)
    sampled Batch --learner connectors--> Batch the learner trains on

Observations are pytrees (jaxsac.observations: a flat float32 array, or a dict of a
Dict space's entries). Each connector is a pure function. The only stateful one,
running observation normalization (one mean and variance per floating-point entry),
keeps its statistics in an `ObsNormState` pytree that lives in the runner state
(`TrainState.runner`) and is saved with checkpoints.
Functions that only use arithmetic and `.clip` accept numpy or JAX arrays and return
the same kind, so the host runner can use them without a device round trip.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxsac import checks
from jaxsac.observations import ObsSpec, obs_spec
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


@struct.dataclass
class ObsNormState:
    """Running mean and variance of observations (Chan et al.'s parallel update), one per
    floating-point entry of the observation (jaxsac.observations): integer entries
    (uint8 images) are not normalized.

    mean: [obs_dim] float32 for a flat observation; for a dict one, {key: [*shape]
    float32} of its floating-point entries ({} for an image array observation).
    var: the same, population variances.
    count: [] float32, observations seen, starting at a tiny `epsilon` like gymnasium's
    `RunningMeanStd` so the first update needs no special case.
    """

    mean: Any
    var: Any
    count: jax.Array


def init_obs_norm(obs: ObsSpec | int, epsilon: float = 1e-4) -> ObsNormState:
    """Statistics before any observation of `obs` (an ObsSpec, or an int d for flat
    observations [d]): mean 0, var 1, count `epsilon`."""
    spec = obs_spec(obs, "init_obs_norm")
    if spec.is_dict or spec.is_image_array:  # an image array: no entry tracked, {}
        shapes = {k: shape for k, shape, _ in spec.entries()}
        mean = {k: jnp.zeros(shapes[k], jnp.float32) for k in spec.float_keys()}
        var = {k: jnp.ones(shapes[k], jnp.float32) for k in spec.float_keys()}
    else:
        mean, var = jnp.zeros((spec.dim,), jnp.float32), jnp.ones((spec.dim,), jnp.float32)
    return ObsNormState(mean=mean, var=var, count=jnp.asarray(epsilon, jnp.float32))


def update_obs_norm(stats: ObsNormState, obs: Any,
                    valid: jax.Array | None = None) -> ObsNormState:
    """Statistics after also seeing `obs` [N, ...] (N >= 1; an array, or a dict whose
    tracked entries each update their own mean and variance), or only its rows where
    `valid` [N] is True (unchanged when none is)."""
    if not isinstance(stats.mean, Mapping):
        return _update_leaf(stats, obs, valid)
    leaves = {k: _update_leaf(ObsNormState(stats.mean[k], stats.var[k], stats.count),
                              obs[k], valid) for k in stats.mean}
    count = next(iter(leaves.values())).count if leaves else stats.count
    return ObsNormState(mean={k: s.mean for k, s in leaves.items()},
                        var={k: s.var for k, s in leaves.items()}, count=count)


def _update_leaf(stats: ObsNormState, obs: jax.Array, valid: jax.Array | None
                 ) -> ObsNormState:
    """`update_obs_norm` of one array of observations [N, *shape]."""
    obs = jnp.asarray(obs, jnp.float32)
    every_row = _merge_obs_stats(stats, jnp.mean(obs, axis=0), jnp.var(obs, axis=0),
                                 jnp.asarray(obs.shape[0], jnp.float32))
    if valid is None:
        return every_row
    weight = jnp.asarray(valid, jnp.float32).reshape((-1,) + (1,) * (obs.ndim - 1))
    count = jnp.sum(weight)
    mean = jnp.sum(weight * obs, axis=0) / jnp.maximum(count, 1.0)
    var = jnp.sum(weight * (obs - mean) ** 2, axis=0) / jnp.maximum(count, 1.0)
    valid_rows = _merge_obs_stats(stats, mean, var, count)
    # Every row valid: the unmasked update, bit for bit; none: the old statistics.
    return jax.tree.map(
        lambda all_rows, some_rows, old: jnp.where(
            count == obs.shape[0], all_rows, jnp.where(count > 0, some_rows, old)),
        every_row, valid_rows, stats)


def _merge_obs_stats(stats: ObsNormState, batch_mean: jax.Array, batch_var: jax.Array,
                     batch_count: jax.Array) -> ObsNormState:
    """Chan et al.'s merge of running statistics with a batch's mean, variance, count."""
    delta = batch_mean - stats.mean
    total = stats.count + batch_count
    mean = stats.mean + delta * batch_count / total
    m2 = (stats.var * stats.count + batch_var * batch_count
          + delta**2 * stats.count * batch_count / total)
    return ObsNormState(mean=mean, var=m2 / total, count=total)


def normalize_obs(stats: ObsNormState, obs: Any, epsilon: float = 1e-8) -> Any:
    """(obs - mean) / sqrt(var + epsilon), float32, any leading axes; for a dict
    observation each tracked entry with its own statistics (other entries as they
    are; `obs` may hold a subset of the keys, e.g. the actor's). An image array
    observation (its statistics track nothing: `mean` is {}) is returned as it is."""
    if not isinstance(obs, Mapping):
        if isinstance(stats.mean, Mapping):
            return obs
        return ((obs - stats.mean) / jnp.sqrt(stats.var + epsilon)).astype(jnp.float32)
    return {k: normalize_obs(ObsNormState(stats.mean[k], stats.var[k], stats.count), x,
                             epsilon) if k in stats.mean else x for k, x in obs.items()}


def select_stats(stats: ObsNormState, keys: tuple[str, ...] | None) -> ObsNormState:
    """The statistics of a dict observation's entries `keys` (those tracked), e.g. the
    actor's; `stats` itself when keys is None or the observation is flat."""
    if keys is None or not isinstance(stats.mean, Mapping):
        return stats
    kept = [k for k in keys if k in stats.mean]
    return ObsNormState(mean={k: stats.mean[k] for k in kept},
                        var={k: stats.var[k] for k in kept}, count=stats.count)


def module_floats(obs: Any) -> Any:
    """Observations with their floating-point entries as float32 (a non-image array:
    all of it; uint8 images stay uint8)."""
    if not isinstance(obs, Mapping):
        obs = jnp.asarray(obs)
        return obs if obs.dtype == jnp.uint8 else obs.astype(jnp.float32)
    return {k: jnp.asarray(x, jnp.float32) if jnp.issubdtype(jnp.asarray(x).dtype,
                                                              jnp.floating) else x
            for k, x in obs.items()}


class EnvToModule(struct.PyTreeNode):
    """The env-to-module pipeline: flattened float32 obs, then optional normalization.

    `update(stats, obs, valid=None)` folds new raw obs [N, ...] (the rows where
    `valid` [N]) into the statistics (a no-op when `normalize` is False) and
    `apply(stats, obs)` gives the module's obs (floating-point entries as float32).
    The statistics pytree has the same structure either way, so checkpoints do too.
    """

    normalize: bool = struct.field(pytree_node=False, default=False)

    def init(self, obs: ObsSpec | int) -> ObsNormState:
        return init_obs_norm(obs)

    def update(self, stats: ObsNormState, obs: Any,
               valid: jax.Array | None = None) -> ObsNormState:
        return update_obs_norm(stats, obs, valid) if self.normalize else stats

    def apply(self, stats: ObsNormState, obs: Any) -> Any:
        obs = module_floats(obs)
        return normalize_obs(stats, obs) if self.normalize else obs

    def normalize_batch(self, stats: ObsNormState, batch: Batch) -> Batch:
        """The learner connector matching this pipeline (identity without normalization)."""
        return normalize_batch(stats, batch) if self.normalize else batch


# --- module-to-env: the action adapters ----------------------------------------------


SUPPORTED_ACTION_SPACES = (
    "supported action spaces: Box with finite low and high (continuous actions, a "
    "squashed Gaussian policy) and Discrete (a categorical policy)")


def rescale_action(action: Array, low: Array, high: Array) -> Array:
    """Module action in [-1, 1] -> env action: low + (a + 1)(high - low)/2, clipped to
    [low, high]. Shapes broadcast ([..., act_dim] with [act_dim] bounds)."""
    return (low + (action + 1.0) * (high - low) / 2.0).clip(low, high)


@dataclasses.dataclass(frozen=True)
class BoxActions:
    """Continuous actions: the module acts in [-1, 1]^|A| (flat [..., dim] float32);
    `to_env` rescales to the Box's [low, high] and reshapes to its shape.

    low, high: the Box's bounds, flattened. env_shape: the Box's shape.
    """

    low: tuple[float, ...]
    high: tuple[float, ...]
    env_shape: tuple[int, ...]
    kind = "continuous"

    @property
    def dim(self) -> int:
        """|A|: entries of one action."""
        return len(self.low)

    @property
    def shape(self) -> tuple[int, ...]:
        """Shape of one stored module action: (|A|,)."""
        return (self.dim,)

    dtype = np.float32
    host_dtype = np.float32
    """The dtype of env actions on the host (what `load_policy` returns)."""

    @functools.cached_property
    def _bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """(low, high) as float32 [dim] arrays, made once (the host runner rescales every
        step)."""
        return np.float32(self.low), np.float32(self.high)

    @property
    def columns(self) -> int:
        """float32 columns one action takes in a packed host row."""
        return self.dim

    def to_env(self, action: Array) -> Array:
        """[..., dim] in [-1, 1] -> env actions [..., *env_shape] (numpy or JAX)."""
        low, high = self._bounds
        return rescale_action(action.astype(np.float32), low, high).reshape(
            action.shape[:-1] + self.env_shape)

    def random(self, key: jax.Array, num: int) -> jax.Array:
        """Uniform random module actions [num, dim] in [-1, 1] (warm-up exploration)."""
        return jax.random.uniform(key, (num, self.dim), jnp.float32, minval=-1.0, maxval=1.0)

    def from_columns(self, columns: Array) -> Array:
        """Packed columns [..., dim] float32 -> module actions [..., dim]."""
        return columns

    @property
    def space(self) -> gymnasium.spaces.Box:
        """The env's action space."""
        return gymnasium.spaces.Box(np.float32(self.low).reshape(self.env_shape),
                                    np.float32(self.high).reshape(self.env_shape),
                                    dtype=np.float32)

    def metadata(self) -> dict[str, Any]:
        """What a checkpoint stores of the action space (`actions_from_metadata`)."""
        return {"act_dim": self.dim, "act_shape": list(self.env_shape),
                "act_low": list(self.low), "act_high": list(self.high)}


@dataclasses.dataclass(frozen=True)
class DiscreteActions:
    """Discrete actions: the module gives an index in {0, ..., n - 1} (int32 [...]);
    `to_env` adds the space's `start`.

    n: the number of actions |A|. start: the env's first action (gymnasium's
    `Discrete(n, start=...)`).
    """

    n: int
    start: int = 0
    kind = "discrete"
    shape = ()
    dtype = np.int32
    host_dtype = np.int64
    """The dtype of env actions on the host: gymnasium's Discrete spaces sample int64."""
    columns = 1

    @property
    def dim(self) -> int:
        """|A|: the number of actions (the width of the policy's and critics' outputs)."""
        return self.n

    def to_env(self, action: Array) -> Array:
        """Indices [...] -> env actions [...] (numpy or JAX integers)."""
        return action + self.start if self.start else action

    def random(self, key: jax.Array, num: int) -> jax.Array:
        """Uniform random indices [num] int32 (warm-up exploration)."""
        return jax.random.randint(key, (num,), 0, self.n, jnp.int32)

    def from_columns(self, columns: Array) -> Array:
        """Packed columns [..., 1] float32 (exact small integers) -> indices [...] int32."""
        return columns[..., 0].astype(np.int32)

    @property
    def space(self) -> gymnasium.spaces.Discrete:
        """The env's action space."""
        return gymnasium.spaces.Discrete(self.n, start=self.start)

    def metadata(self) -> dict[str, Any]:
        """What a checkpoint stores of the action space (`actions_from_metadata`)."""
        return {"act_kind": self.kind, "act_dim": self.n, "act_shape": [],
                "act_start": self.start}


@runtime_checkable
class ModuleActions(Protocol):
    """An action adapter: how one kind of action space is represented inside a module
    and handed to the env (`BoxActions`, `DiscreteActions`, or a user's own, whose `kind`
    picks its policy head: jaxsac.networks.register_policy_head).

    kind: the policy head's key. dim: the width of the policy's and critics' outputs.
    shape, dtype: one module action's shape and dtype (the buffer stores them).
    host_dtype: env actions' dtype on the host. columns: float32 columns one action
    takes in a packed host row. space: the env's action space.
    """

    kind: str
    shape: tuple[int, ...]
    dtype: Any
    host_dtype: Any
    columns: int

    @property
    def dim(self) -> int: ...

    @property
    def space(self) -> gymnasium.Space: ...

    def to_env(self, action: Array) -> Array:
        """Module actions [..., *shape] -> env actions (numpy or JAX)."""

    def random(self, key: jax.Array, num: int) -> jax.Array:
        """Uniform random module actions [num, *shape] (warm-up exploration)."""

    def from_columns(self, columns: Array) -> Array:
        """Packed columns [..., columns] float32 -> module actions [..., *shape]."""

    def metadata(self) -> dict[str, Any]:
        """What a checkpoint stores of the action space (`actions_from_metadata`)."""


def module_actions(space: gymnasium.Space | int, owner: str = "env") -> ModuleActions:
    """The action adapter of an env's action space: Box -> BoxActions, Discrete ->
    DiscreteActions; an int d is the Box [-1, 1]^d. Other spaces raise `ValueError`
    naming the space and what is supported."""
    if isinstance(space, ModuleActions):
        return space
    if checks.is_int(space):
        checks.check_int(owner, "act_dim", space, 1)
        return BoxActions((-1.0,) * int(space), (1.0,) * int(space), (int(space),))
    if isinstance(space, gymnasium.spaces.Discrete):
        return DiscreteActions(int(space.n), int(space.start))
    if isinstance(space, gymnasium.spaces.Box):
        if not (np.all(np.isfinite(space.low)) and np.all(np.isfinite(space.high))):
            raise ValueError(
                f"{owner}: action_space={space} is not supported (unbounded Box: actions "
                f"in [-1, 1] cannot be rescaled to infinite bounds); {SUPPORTED_ACTION_SPACES}")
        low = np.asarray(space.low, np.float32).reshape(-1)
        high = np.asarray(space.high, np.float32).reshape(-1)
        with np.errstate(over="ignore"):
            width = high - low
        if not np.all(np.isfinite(width)):
            raise ValueError(
                f"{owner}: action_space={space} is not supported (the width high - low of "
                "its bounds overflows float32, so actions in [-1, 1] cannot be rescaled to "
                f"it); {SUPPORTED_ACTION_SPACES}")
        return BoxActions(tuple(map(float, low)), tuple(map(float, high)), tuple(space.shape))
    raise ValueError(f"{owner}: action_space={space} is not supported "
                     f"({type(space).__name__} actions); {SUPPORTED_ACTION_SPACES}")


def actions_from_metadata(meta: dict[str, Any]) -> ModuleActions:
    """The adapter `metadata()` describes (a checkpoint's env metadata): Box and Discrete
    adapters, the ones an env's action space gives (`module_actions`)."""
    kind = meta.get("act_kind", "continuous")
    if kind not in ("continuous", "discrete"):
        raise ValueError(f"actions_from_metadata: act_kind={kind!r} is invalid: must be "
                         "'continuous' or 'discrete' (the adapters module_actions builds "
                         "from an env's action space)")
    if kind == "discrete":
        return DiscreteActions(int(meta["act_dim"]), int(meta["act_start"]))
    return BoxActions(tuple(map(float, meta["act_low"])), tuple(map(float, meta["act_high"])),
                      tuple(meta["act_shape"]))


# --- learner -----------------------------------------------------------------------


def normalize_batch(stats: ObsNormState, batch: Batch) -> Batch:
    """Learner connector: the batch's obs and next_obs normalized with `stats`."""
    return batch._replace(obs=normalize_obs(stats, batch.obs),
                          next_obs=normalize_obs(stats, batch.next_obs))
