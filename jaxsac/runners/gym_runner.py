"""The gymnasium runner: a host loop over a gymnasium vector env (sync or async) that
gives the same `Step` stream as the JAX runner (see jaxsac.runners.jax_runner), with
fault tolerance: a failing env is rebuilt (see `GymRunner`).
"""

from __future__ import annotations

import functools
from typing import Any

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from jaxsac import checks, connectors
from jaxsac.config import VECTORIZATIONS
from jaxsac.envs import (
    CheckData,
    GymEnvFactory,
    RestartOnFailure,
    check_observation_space,
    gym_env_factory,
)
from jaxsac.runners.episodes import bookkeeping
from jaxsac.types import EpisodeInfo, Step


def _make_sub_env(factory: GymEnvFactory, index: int, max_env_restarts: int, seed: int,
                  flatten_structured_obs: bool) -> gymnasium.Env:
    env: gymnasium.Env = RestartOnFailure(factory, index, max_env_restarts, seed)
    if flatten_structured_obs and not isinstance(env.observation_space, gymnasium.spaces.Box):
        env = gymnasium.wrappers.FlattenObservation(env)
    return CheckData(env, index, factory.env_id)


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
    flatten_structured_obs: wrap each env in gymnasium's `FlattenObservation`, the
        flattening connector that Dict / Tuple / Discrete observations need.

    step_packed(actions [E, *actions.shape]: module actions, see
    `jaxsac.connectors.module_actions`) -> rows [E, packed_width] float32 on the
    host: each env's `Step` and `EpisodeInfo` packed in one array, so that many steps
    reach the device in one transfer; `unpack` (jittable) turns rows back into
    (Step, EpisodeInfo).

    Fault tolerance: an env whose `step` raises at call t is rebuilt. For that call the
    runner emits for that env a *failed* row (`Step.failed` True; obs = its last good
    obs, action = the attempted action, reward 0, terminated False, truncated True,
    next_obs = the last good obs); the next call is the usual NEXT_STEP reset row (obs =
    the last good obs, next_obs = the rebuilt env's first obs). A failed row holds no env
    step: the replay buffer never samples it and ends the episode, truncated, at the row
    before (its last real step), and `EpisodeInfo` counts only the real steps (an env
    failing right after its reset ends no episode). An env whose `reset` raises is
    rebuilt and reset again (the reset row stays exact). Every rebuild
    adds one to `num_env_restarts`. Up to `max_env_restarts` failures of one env in a row
    (no successful step in between) are rebuilt; the next raises `EnvFailureError`
    naming the env and the last exception, and the runner is then unusable (close it).
    """

    def __init__(self, env_id: str | GymEnvFactory, num_envs: int, vectorization: str = "sync",
                 max_env_restarts: int = 3, seed: int = 0,
                 env_kwargs: dict[str, Any] | None = None,
                 flatten_structured_obs: bool = False):
        checks.check_int("GymRunner", "num_envs", num_envs, 1)
        checks.check_choice("GymRunner", "vectorization", vectorization, VECTORIZATIONS)
        checks.check_int("GymRunner", "max_env_restarts", max_env_restarts, 0)
        checks.check_int("GymRunner", "seed", seed, 0)
        if isinstance(env_id, GymEnvFactory):
            factory = env_id
            if env_kwargs:
                factory = gym_env_factory(factory.env_id, **{**dict(factory.kwargs),
                                                             **env_kwargs})
        else:
            factory = gym_env_factory(env_id, **(env_kwargs or {}))
        check_observation_space(factory.observation_space, factory.env_id,
                                flatten_structured_obs=flatten_structured_obs)
        connectors.module_actions(factory.action_space, f"env {factory.env_id!r}")

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
        self.actions = connectors.module_actions(self.action_space, f"env {self.env_id!r}")

        obs, infos = self._vec_env.reset(seed=seed)
        self.num_env_restarts = _restarts_in(infos)
        self._obs = connectors.flatten_obs(np.asarray(obs))
        self._needs_reset = np.zeros(num_envs, bool)
        self._episode_return = np.zeros(num_envs, np.float64)
        self._episode_length = np.zeros(num_envs, np.int64)

    @property
    def packed_width(self) -> int:
        """Columns of a `step_packed` row: obs, action, reward, terminated, truncated,
        next_obs, episode return, episode length, failed."""
        return 2 * self.obs_dim + self.actions.columns + 6

    def unpack(self, packed: jax.Array) -> tuple[Step, EpisodeInfo]:
        """Rows of `step_packed`, [..., E, packed_width] -> (Step, EpisodeInfo) with
        leading axes [..., E]: numpy arrays for a numpy `packed`, else jax arrays. Pure and
        jittable (the gymnasium loop unpacks a whole block of rows inside its jitted call)."""
        d, a = self.obs_dim, self.actions.columns
        xp = np if isinstance(packed, np.ndarray) else jnp
        columns = np.cumsum([d, a, 1, 1, 1, d, 1, 1])
        (obs, action, reward, terminated, truncated, next_obs, episode_return, episode_length,
         failed) = xp.split(packed, columns, axis=-1)
        terminated, truncated = terminated[..., 0] > 0, truncated[..., 0] > 0
        episode_length = episode_length[..., 0].astype(np.int32)
        transition = Step(obs=obs, action=self.actions.from_columns(action),
                          reward=reward[..., 0], terminated=terminated, truncated=truncated,
                          next_obs=next_obs, failed=failed[..., 0] > 0)
        # An episode ended at this row when it had real steps (episode_length is the
        # finished episode's length, 0 elsewhere).
        episodes = EpisodeInfo(done=(terminated | truncated) & (episode_length > 0),
                               episode_return=episode_return[..., 0],
                               episode_length=episode_length)
        return transition, episodes

    @property
    def raw_obs(self) -> np.ndarray:
        """[E, obs_dim] float32 on the host: the current flattened env observations."""
        return self._obs

    def step_packed(self, actions: Any) -> np.ndarray:
        """Steps every env once: its rows, [E, packed_width] float32 on the host (see
        `unpack`). Bools are 0/1 and episode lengths below 2**24 are exact in float32."""
        action = np.asarray(actions, self.actions.dtype)
        expected = (self.num_envs, *self.actions.shape)
        if action.shape != expected:
            raise ValueError(f"GymRunner.step_packed: actions of shape {action.shape}; expected "
                             f"(num_envs, *action shape) = {expected}")
        next_obs, reward, terminated, truncated, infos = self._vec_env.step(
            self.actions.to_env(action))
        self.num_env_restarts += _restarts_in(infos)
        next_obs = connectors.flatten_obs(np.asarray(next_obs))
        done = terminated | truncated
        # A failed step ends the episode but is not one of its env steps.
        failed = _failed_in(infos, self.num_envs)
        not_a_step = self._needs_reset | failed
        self._episode_return, self._episode_length, episodes = bookkeeping(
            self._episode_return, self._episode_length, reward, not_a_step, done, np)
        packed = np.concatenate(
            [self._obs, action.reshape(self.num_envs, -1), reward[:, None],
             terminated[:, None], truncated[:, None], next_obs,
             episodes.episode_return[:, None], episodes.episode_length[:, None],
             failed[:, None]], axis=1, dtype=np.float32)
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
