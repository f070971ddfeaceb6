"""Env runners: step `num_envs` envs once per call and return the `Step`s for the buffer.

Two runners produce the same stream:

* `make_jax_runner(env, num_envs)`: for JAX envs, a NamedTuple of pure functions whose
  `step` is jittable (vmapped over the envs inside), so a whole training run can be one
  `lax.scan`.
* `GymRunner(env_id, num_envs)`: a host loop over a gymnasium `SyncVectorEnv` or
  `AsyncVectorEnv`, moving each step's arrays to the device in one transfer, with
  fault tolerance (a failing env is rebuilt, see `GymRunner`).

Stream shape (gymnasium's NEXT_STEP autoreset, what the replay buffer expects): after a
row whose `terminated` or `truncated` is set, that env's next row is the *reset row*:
obs = the final observation (== the done row's next_obs), action = whatever the policy
gave (ignored by the env), reward 0, terminated = truncated = False, next_obs = the first
observation of the new episode. A reset row is not an env step of any episode:
`EpisodeInfo.episode_length` counts only the real steps.

`Step.action` is the module's action in [-1, 1]; obs and next_obs are the flattened
float32 env observations, raw (normalization is applied at act time, and to sampled
batches by the learner connector `normalize_batch`, with the runner's statistics).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxsac import connectors
from jaxsac.connectors import EnvToModule, ObsNormState
from jaxsac.envs.core import AutoReset, AutoResetState, JaxEnv
from jaxsac.envs.gym_adapter import (
    EnvFailureError,
    GymEnvFactory,
    RestartOnFailure,
    check_spaces,
    gym_env_factory,
)
from jaxsac.types import Batch, Step

__all__ = [
    "EnvFailureError",
    "EpisodeInfo",
    "GymRunner",
    "JaxRunner",
    "RunnerState",
    "VECTORIZATIONS",
    "make_jax_runner",
    "random_act_fn",
]

VECTORIZATIONS = ("sync", "async")

# act_fn(module_obs [E, obs_dim] float32, key) -> module actions [E, act_dim] in [-1, 1].
ActFn = Callable[[jax.Array, jax.Array], jax.Array]


class EpisodeInfo(NamedTuple):
    """Episodes that ended at this step, per env (leading axis num_envs, E).

    done: [E] bool, the env's episode ended at this step (terminated or truncated).
    episode_return: [E] float32, where done the sum of that episode's rewards, else 0.
    episode_length: [E] int32, where done its number of env steps, else 0.
    """

    done: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array


def random_act_fn(act_dim: int) -> ActFn:
    """An `act_fn` drawing uniform random module actions in [-1, 1] (warm-up)."""

    def act(module_obs: jax.Array, key: jax.Array) -> jax.Array:
        return connectors.random_module_action(key, module_obs.shape[0], act_dim)

    return act


def _check_num_envs(num_envs: Any) -> None:
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs={num_envs!r} is invalid: must be an integer >= 1")


def _episode_bookkeeping(episode_return, episode_length, reward, not_a_step, done, xp):
    """Running returns/lengths after this step, and the finished episodes' totals.

    not_a_step: [E] bool, rows that are no env step of the episode (reset rows, and
    the host runner's failed steps); they add no length (and have reward 0).
    Works on numpy (host runner) or jax.numpy (JAX runner) arrays of shape [E].
    """
    episode_return = episode_return + reward
    episode_length = episode_length + (~not_a_step).astype(episode_length.dtype)
    finished = EpisodeInfo(
        done=done,
        episode_return=xp.where(done, episode_return, 0).astype(np.float32),
        episode_length=xp.where(done, episode_length, 0).astype(np.int32))
    episode_return = xp.where(done, 0, episode_return).astype(episode_return.dtype)
    episode_length = xp.where(done, 0, episode_length).astype(episode_length.dtype)
    return episode_return, episode_length, finished


# --- JAX runner --------------------------------------------------------------------


@struct.dataclass
class RunnerState:
    """State of the JAX runner (every leaf has leading axis num_envs, E, except obs_norm).

    env_state: the autoreset env states, [E, ...].
    obs: [E, obs_dim] float32, the current raw (flattened) observations.
    episode_return: [E] float32, reward summed over the running episode.
    episode_length: [E] int32, env steps of the running episode.
    obs_norm: ObsNormState, the env-to-module observation statistics ([obs_dim] leaves).
    """

    env_state: AutoResetState
    obs: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array
    obs_norm: ObsNormState


class JaxRunner(NamedTuple):
    """Pure functions stepping `num_envs` copies of a JAX env (see `make_jax_runner`)."""

    init: Callable[[jax.Array], RunnerState]
    step: Callable[[RunnerState, ActFn, jax.Array], tuple[RunnerState, Step, EpisodeInfo]]
    module_obs: Callable[[RunnerState], jax.Array]
    normalize_batch: Callable[[ObsNormState, Batch], Batch]
    num_envs: int
    obs_dim: int
    act_dim: int
    observation_space: gymnasium.spaces.Box
    action_space: gymnasium.spaces.Box


def make_jax_runner(env: JaxEnv, num_envs: int, normalize_obs: bool = False) -> JaxRunner:
    """A runner for a JAX env (e.g. `jaxsac.envs.make("Pendulum-v1", backend="jax")`).

    init(key) -> RunnerState: resets all envs.
    step(rstate, act_fn, key) -> (rstate, step, episodes): applies the env-to-module
        connectors to the current obs, calls `act_fn(module_obs [E, obs_dim], key)` for
        module actions [E, act_dim] in [-1, 1], rescales and clips them to the action Box
        (module-to-env), steps every env with NEXT_STEP autoreset, and returns the
        `Step` [E] and `EpisodeInfo` [E]. Pure and jittable (close over `act_fn`).
    module_obs(rstate) -> [E, obs_dim]: the current obs as the module sees them.
    normalize_batch(obs_norm, batch) -> Batch: the learner connector (normalizes obs and
        next_obs with `rstate.obs_norm` when `normalize_obs`, else the identity).
    """
    _check_num_envs(num_envs)
    check_spaces(env.observation_space, env.action_space, repr(env))
    obs_dim = connectors.flat_obs_dim(env.observation_space)
    act_dim = int(np.prod(env.action_space.shape))
    autoreset_env = AutoReset(env)
    to_module = EnvToModule(normalize=bool(normalize_obs))
    to_env = connectors.module_to_env(env.action_space)

    def init(key: jax.Array) -> RunnerState:
        env_state, obs = jax.vmap(autoreset_env.reset)(jax.random.split(key, num_envs))
        obs = connectors.flatten_obs(obs)
        return RunnerState(
            env_state=env_state,
            obs=obs,
            episode_return=jnp.zeros((num_envs,), jnp.float32),
            episode_length=jnp.zeros((num_envs,), jnp.int32),
            obs_norm=to_module.update(to_module.init(obs_dim), obs))

    def module_obs(rstate: RunnerState) -> jax.Array:
        return to_module.apply(rstate.obs_norm, rstate.obs)

    def step(rstate: RunnerState, act_fn: ActFn, key: jax.Array):
        act_key, env_key = jax.random.split(key)
        action = jnp.asarray(act_fn(module_obs(rstate), act_key), jnp.float32)
        if action.shape != (num_envs, act_dim):
            raise ValueError(f"act_fn returned actions of shape {action.shape}; expected "
                             f"(num_envs, act_dim) = {(num_envs, act_dim)}")
        is_reset_row = rstate.env_state.needs_reset
        env_state, next_obs, reward, terminated, truncated = jax.vmap(autoreset_env.step)(
            rstate.env_state, to_env(action), jax.random.split(env_key, num_envs))
        next_obs = connectors.flatten_obs(next_obs)
        done = jnp.logical_or(terminated, truncated)
        episode_return, episode_length, episodes = _episode_bookkeeping(
            rstate.episode_return, rstate.episode_length, reward, is_reset_row, done, jnp)
        transition = Step(obs=rstate.obs, action=action, reward=reward,
                          terminated=terminated, truncated=truncated, next_obs=next_obs)
        rstate = RunnerState(env_state=env_state, obs=next_obs, episode_return=episode_return,
                             episode_length=episode_length,
                             obs_norm=to_module.update(rstate.obs_norm, next_obs))
        return rstate, transition, episodes

    return JaxRunner(init=init, step=step, module_obs=module_obs,
                     normalize_batch=to_module.normalize_batch, num_envs=num_envs,
                     obs_dim=obs_dim, act_dim=act_dim,
                     observation_space=env.observation_space, action_space=env.action_space)


# --- gymnasium runner --------------------------------------------------------------


def _make_sub_env(factory: GymEnvFactory, index: int, max_env_restarts: int, seed: int,
                  flatten_structured_obs: bool) -> gymnasium.Env:
    env: gymnasium.Env = RestartOnFailure(factory, index, max_env_restarts, seed)
    if flatten_structured_obs and not isinstance(env.observation_space, gymnasium.spaces.Box):
        env = gymnasium.wrappers.FlattenObservation(env)
    return env


def _restarts_in(infos: dict[str, Any]) -> int:
    restarts = infos.get("env_restarts")
    return 0 if restarts is None else int(np.sum(restarts))


def _failed_in(infos: dict[str, Any], num_envs: int) -> np.ndarray:
    """[E] bool: the envs whose step raised in this call."""
    return np.asarray(infos.get("_env_failure", np.zeros(num_envs, bool)), bool)


class GymRunner:
    """Steps `num_envs` gymnasium envs in a vector env; same `Step` stream as the JAX runner.

    env_id: a registered gymnasium id, or a `GymEnvFactory` from
        `jaxsac.envs.make(env_id, backend="gymnasium")`.
    vectorization: "sync" (`SyncVectorEnv`, one process) or "async" (`AsyncVectorEnv`,
        one spawned process per env).
    seed: env i's first reset uses seed + i, so the same seed gives the same stream.
    normalize_obs: keep running obs statistics (`obs_norm`, a pytree to checkpoint) and
        give the module normalized obs (`obs`).
    flatten_structured_obs: wrap each env in gymnasium's `FlattenObservation`, the
        flattening connector that Dict / Tuple / Discrete observations need.

    step(actions [E, act_dim] in [-1, 1], numpy or device) -> (Step [E], EpisodeInfo [E]),
    as device arrays from one host-to-device transfer (and one jitted call that also
    updates the obs statistics).

    Fault tolerance: an env whose `step` raises at call t is rebuilt. For that call the
    runner emits for that env the row (obs = its last good obs, action = the attempted
    action, reward 0, terminated False, truncated True, next_obs = the last good obs), so
    its episode ends at the last good step; the next call is the usual NEXT_STEP reset row
    (obs = the last good obs, next_obs = the rebuilt env's first obs). The failed row is
    no env step of the episode: `EpisodeInfo.episode_length` counts the good steps only.
    (It is in the stream because every call gives every env a row; a learner sampling it
    sees the zero-reward, truncated self-transition (s, a, 0, s).) An env whose
    `reset` raises is rebuilt and reset again (the reset row stays exact). Every rebuild
    adds one to `num_env_restarts`. Up to `max_env_restarts` failures of one env in a row
    (no successful step in between) are rebuilt; the next raises `EnvFailureError`
    naming the env and the last exception, and the runner is then unusable (close it).
    """

    def __init__(self, env_id: str | GymEnvFactory, num_envs: int, vectorization: str = "sync",
                 max_env_restarts: int = 3, seed: int = 0, normalize_obs: bool = False,
                 env_kwargs: dict[str, Any] | None = None,
                 flatten_structured_obs: bool = False):
        _check_num_envs(num_envs)
        if vectorization not in VECTORIZATIONS:
            raise ValueError(f"GymRunner: vectorization={vectorization!r} is invalid: must be "
                             f"one of {list(VECTORIZATIONS)}")
        if isinstance(max_env_restarts, bool) or not isinstance(max_env_restarts, int) \
                or max_env_restarts < 0:
            raise ValueError(f"GymRunner: max_env_restarts={max_env_restarts!r} is invalid: "
                             "must be an integer >= 0")
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"GymRunner: seed={seed!r} is invalid: must be an integer >= 0")
        if isinstance(env_id, GymEnvFactory):
            factory = env_id
            if env_kwargs:
                factory = gym_env_factory(factory.env_id, **{**dict(factory.kwargs),
                                                             **env_kwargs})
        else:
            factory = gym_env_factory(env_id, **(env_kwargs or {}))
        check_spaces(factory.observation_space, factory.action_space, factory.env_id,
                     flatten_structured_obs=flatten_structured_obs)

        self.env_id = factory.env_id
        self.num_envs = num_envs
        env_fns = [functools.partial(_make_sub_env, factory, i, max_env_restarts, seed,
                                     flatten_structured_obs) for i in range(num_envs)]
        autoreset = gymnasium.vector.AutoresetMode.NEXT_STEP
        if vectorization == "sync":
            self._vec_env = gymnasium.vector.SyncVectorEnv(env_fns, autoreset_mode=autoreset)
        else:
            self._vec_env = gymnasium.vector.AsyncVectorEnv(
                env_fns, autoreset_mode=autoreset, context="spawn")
        self.observation_space = self._vec_env.single_observation_space
        self.action_space = self._vec_env.single_action_space
        self.obs_dim = connectors.flat_obs_dim(self.observation_space)
        self.act_dim = int(np.prod(self.action_space.shape))
        self._to_env = connectors.module_to_env(self.action_space)
        self._to_module = EnvToModule(normalize=bool(normalize_obs))

        obs, infos = self._vec_env.reset(seed=seed)
        self.num_env_restarts = _restarts_in(infos)
        self._obs = connectors.flatten_obs(np.asarray(obs))
        self._needs_reset = np.zeros(num_envs, bool)
        self._episode_return = np.zeros(num_envs, np.float64)
        self._episode_length = np.zeros(num_envs, np.int64)
        self.obs_norm: ObsNormState = self._to_module.update(
            self._to_module.init(self.obs_dim), jax.device_put(self._obs))
        self._unpack = jax.jit(self._unpack_impl)
        self._module_obs = jax.jit(self._to_module.apply)

    @property
    def packed_width(self) -> int:
        """Columns of a `step_packed` row: obs, action, reward, terminated, truncated,
        next_obs, episode return, episode length."""
        return 2 * self.obs_dim + self.act_dim + 5

    def unpack(self, packed: jax.Array) -> tuple[Step, EpisodeInfo]:
        """Rows of `step_packed`, [..., E, packed_width] -> (Step, EpisodeInfo) with
        leading axes [..., E]: numpy arrays for a numpy `packed`, else jax arrays. Pure and
        jittable (the gymnasium loop unpacks a whole block of rows inside its jitted call)."""
        d, a = self.obs_dim, self.act_dim
        xp = np if isinstance(packed, np.ndarray) else jnp
        columns = np.cumsum([d, a, 1, 1, 1, d, 1])
        obs, action, reward, terminated, truncated, next_obs, episode_return, episode_length = (
            xp.split(packed, columns, axis=-1))
        terminated, truncated = terminated[..., 0] > 0, truncated[..., 0] > 0
        transition = Step(obs=obs, action=action, reward=reward[..., 0], terminated=terminated,
                          truncated=truncated, next_obs=next_obs)
        episodes = EpisodeInfo(done=terminated | truncated, episode_return=episode_return[..., 0],
                               episode_length=episode_length[..., 0].astype(np.int32))
        return transition, episodes

    def _unpack_impl(self, packed: jax.Array, obs_norm: ObsNormState):
        """[E, packed_width] -> (Step, EpisodeInfo, obs_norm updated with next_obs)."""
        transition, episodes = self.unpack(packed)
        return transition, episodes, self._to_module.update(obs_norm, transition.next_obs)

    @property
    def raw_obs(self) -> np.ndarray:
        """[E, obs_dim] float32 on the host: the current flattened env observations."""
        return self._obs

    @property
    def obs(self) -> jax.Array:
        """[E, obs_dim] float32 on the device: the current obs as the module sees them
        (normalized with `obs_norm` when `normalize_obs`)."""
        return self._module_obs(self.obs_norm, self._obs)

    def normalize_batch(self, batch: Batch) -> Batch:
        """The learner connector with the current statistics (identity without them)."""
        return self._to_module.normalize_batch(self.obs_norm, batch)

    def step(self, actions: Any) -> tuple[Step, EpisodeInfo]:
        """Steps every env once; see the class docstring."""
        transition, episodes, self.obs_norm = self._unpack(self.step_packed(actions),
                                                           self.obs_norm)
        return transition, episodes

    def step_packed(self, actions: Any) -> np.ndarray:
        """Steps every env once and returns the row of `step` as one host array,
        [E, packed_width] float32 (see `unpack`), leaving `obs_norm` as it was: for loops
        that move many steps to the device at once. Bools are 0/1 and episode lengths
        below 2**24 are exact in float32."""
        action = np.asarray(actions, np.float32)
        if action.shape != (self.num_envs, self.act_dim):
            raise ValueError(f"GymRunner.step: actions of shape {action.shape}; expected "
                             f"(num_envs, act_dim) = {(self.num_envs, self.act_dim)}")
        next_obs, reward, terminated, truncated, infos = self._vec_env.step(
            self._to_env(action))
        self.num_env_restarts += _restarts_in(infos)
        next_obs = connectors.flatten_obs(np.asarray(next_obs))
        done = terminated | truncated
        # A failed step ends the episode but is not one of its env steps.
        not_a_step = self._needs_reset | _failed_in(infos, self.num_envs)
        self._episode_return, self._episode_length, episodes = _episode_bookkeeping(
            self._episode_return, self._episode_length, reward, not_a_step, done, np)
        packed = np.concatenate(
            [self._obs, action, reward[:, None], terminated[:, None], truncated[:, None],
             next_obs, episodes.episode_return[:, None], episodes.episode_length[:, None]],
            axis=1, dtype=np.float32)
        self._obs = next_obs
        self._needs_reset = done
        return packed

    def close(self) -> None:
        self._vec_env.close()

    def __enter__(self) -> GymRunner:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"GymRunner({self.env_id!r}, num_envs={self.num_envs}, "
                f"vectorization={type(self._vec_env).__name__})")
