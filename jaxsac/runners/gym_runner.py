"""The gymnasium runner: a host loop over a gymnasium vector env (sync or async) that
gives the same `Step` stream as the JAX runner (see jaxsac.runners.jax_runner), with
fault tolerance: a failing env is rebuilt (see `GymRunner`).
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any

import gymnasium
import jax.numpy as jnp
import numpy as np

from jaxsac import checks, connectors
from jaxsac.config import VECTORIZATIONS
from jaxsac.envs import (
    CheckData,
    EnvFailureError,
    GymEnvFactory,
    RestartOnFailure,
    check_observation_space,
    gym_env_factory,
)
from jaxsac.frames import FrameStack
from jaxsac.observations import ObsSpec, obs_spec
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


class PackedRows:
    """How a runner's steps travel to the device: each env's `Step` and `EpisodeInfo` of
    one iteration in one float32 row of `width` columns (obs, action, reward, terminated,
    truncated, next_obs, episode return, episode length, failed), so that a block of
    iterations reaches the device in one transfer. Bools are 0/1 and episode lengths
    below 2**24 are exact in float32. Observations are packed columns [obs_dim]
    (`ObsSpec.pack`: a Box's flattened, a Dict's entries concatenated in sorted key
    order); `unpack` gives them back as the observation trees of `obs_spec`.

    obs: the observations' ObsSpec (an int d: flat [d] float32)."""

    def __init__(self, obs: ObsSpec | int, actions: connectors.ModuleActions):
        self.obs_spec = obs_spec(obs, "PackedRows")
        self.obs_dim = self.obs_spec.dim
        self.actions = actions

    @property
    def width(self) -> int:
        return 2 * self.obs_dim + self.actions.columns + 6

    def pack(self, obs, action, reward, terminated, truncated, next_obs,
             episodes: EpisodeInfo, failed) -> np.ndarray:
        """[E] fields of one iteration (obs and next_obs packed [E, obs_dim], action
        [E, *shape]) -> rows [E, width] float32."""
        num_envs = len(obs)
        return np.concatenate(
            [obs, np.reshape(action, (num_envs, -1)), reward[:, None], terminated[:, None],
             truncated[:, None], next_obs, episodes.episode_return[:, None],
             episodes.episode_length[:, None], failed[:, None]], axis=1, dtype=np.float32)

    def lost(self, last_obs: np.ndarray, episode_return: np.ndarray,
             episode_length: np.ndarray, num_rows: int) -> np.ndarray:
        """[num_rows, E, width]: failed rows for E envs whose steps were lost with their
        runner (its process died). Each holds no env step: obs = next_obs = the env's
        last stored observation `last_obs` [E, obs_dim], action 0, reward 0, truncated.
        The first ends the running episode (`episode_return`, `episode_length` [E]: its
        real steps) at its last stored step, as the gymnasium runner's failed rows do."""
        num_envs = len(last_obs)
        zeros, ones = np.zeros(num_envs, np.float32), np.ones(num_envs, np.float32)
        ended = EpisodeInfo(done=episode_length > 0, episode_return=episode_return,
                            episode_length=episode_length)
        none = EpisodeInfo(done=zeros > 0, episode_return=zeros, episode_length=zeros)
        action = np.zeros((num_envs, self.actions.columns), np.float32)
        return np.stack([self.pack(last_obs, action, zeros, zeros, ones, last_obs,
                                   ended if i == 0 else none, ones)
                         for i in range(num_rows)])

    def unpack(self, packed: Any) -> tuple[Step, EpisodeInfo]:
        """Rows [..., E, width] -> (Step, EpisodeInfo) with leading axes [..., E]: numpy
        arrays for a numpy `packed`, else jax arrays. Pure and jittable (the gymnasium
        loop unpacks a whole block of rows inside its jitted call)."""
        d, a = self.obs_dim, self.actions.columns
        xp = np if isinstance(packed, np.ndarray) else jnp
        columns = np.cumsum([d, a, 1, 1, 1, d, 1, 1])
        (obs, action, reward, terminated, truncated, next_obs, episode_return, episode_length,
         failed) = xp.split(packed, columns, axis=-1)
        terminated, truncated = terminated[..., 0] > 0, truncated[..., 0] > 0
        episode_length = episode_length[..., 0].astype(np.int32)
        transition = Step(obs=self.obs_spec.unpack(obs),
                          action=self.actions.from_columns(action),
                          reward=reward[..., 0], terminated=terminated, truncated=truncated,
                          next_obs=self.obs_spec.unpack(next_obs), failed=failed[..., 0] > 0)
        # An episode ended at this row when it had real steps (episode_length is the
        # finished episode's length, 0 elsewhere).
        episodes = EpisodeInfo(done=(terminated | truncated) & (episode_length > 0),
                               episode_return=episode_return[..., 0],
                               episode_length=episode_length)
        return transition, episodes

    def next_obs_columns(self, packed: np.ndarray) -> np.ndarray:
        """Rows [..., E, width] -> their next observations, packed [..., E, obs_dim]."""
        start = self.obs_dim + self.actions.columns + 3
        return packed[..., start:start + self.obs_dim]


class GymRunner:
    """Steps `num_envs` gymnasium envs in a vector env; same `Step` stream as the JAX runner.

    env_id: a registered gymnasium id, or a `GymEnvFactory` from
        `jaxsac.envs.make(env_id, backend="gymnasium")`.
    vectorization: "sync" (`SyncVectorEnv`, one process) or "async" (`AsyncVectorEnv`,
        one spawned process per env).
    seed: env i's first reset uses seed + first_env_index + i, so the same seed gives the
        same stream.
    first_env_index: the run's index of env 0 (a remote runner steps the run's envs
        first_env_index ... first_env_index + num_envs - 1): envs are seeded and named by
        it, so N runners of E envs seed their envs as one runner of N·E does.
    flatten_structured_obs: wrap each env in gymnasium's `FlattenObservation`, the
        flattening connector that Tuple / Discrete observations need (a Dict of Boxes is
        kept as a dict without it; with it, flattened too).
    frame_stack: k; > 1 keeps the last k frames of each env's running episode for the
        policy (`acting_obs`, jaxsac.frames; restarted at each episode's first
        observation); the rows hold single frames.

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
                 flatten_structured_obs: bool = False, first_env_index: int = 0,
                 frame_stack: int = 1):
        checks.check_int("GymRunner", "num_envs", num_envs, 1)
        checks.check_int("GymRunner", "first_env_index", first_env_index, 0)
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
        self.first_env_index = first_env_index
        self._env_fns = [functools.partial(_make_sub_env, factory, first_env_index + i,
                                           max_env_restarts, seed, flatten_structured_obs)
                         for i in range(num_envs)]
        self._vectorization, self._seed = vectorization, seed
        self._max_env_restarts, self._worker_deaths_in_a_row = max_env_restarts, 0
        self._vec_env = self._vector_env()
        self.observation_space = self._vec_env.single_observation_space
        self.action_space = self._vec_env.single_action_space
        self.obs_spec = obs_spec(self.observation_space, f"env {self.env_id!r}")
        self.obs_dim = self.obs_spec.dim
        self.actions = connectors.module_actions(self.action_space, f"env {self.env_id!r}")
        self.rows = PackedRows(self.obs_spec, self.actions)
        self.frames = FrameStack(self.obs_spec, frame_stack)

        obs, infos = self._vec_env.reset(seed=seed + first_env_index)
        self.num_env_restarts = _restarts_in(infos)
        self._obs = self._packed(obs)
        self._stack = self.frames.start(self._obs, packed=True)
        self._needs_reset = np.zeros(num_envs, bool)
        self._episode_return = np.zeros(num_envs, np.float64)
        self._episode_length = np.zeros(num_envs, np.int64)
        self._resume_obs: np.ndarray | None = None

    def _vector_env(self) -> gymnasium.vector.VectorEnv:
        autoreset = gymnasium.vector.AutoresetMode.NEXT_STEP
        if self._vectorization == "sync":
            return gymnasium.vector.SyncVectorEnv(self._env_fns, autoreset_mode=autoreset)
        return gymnasium.vector.AsyncVectorEnv(self._env_fns, autoreset_mode=autoreset,
                                               context="spawn")

    def _packed(self, obs: Any) -> np.ndarray:
        """The vector env's observations [E, ...] as packed float32 columns [E, obs_dim]."""
        if not self.obs_spec.is_dict:
            return connectors.flatten_obs(np.asarray(obs))
        return self.obs_spec.pack(self.obs_spec.from_env(
            {k: np.asarray(obs[k]) for k in self.obs_spec.keys}))

    @property
    def packed_width(self) -> int:
        """Columns of a `step_packed` row (see `PackedRows`)."""
        return self.rows.width

    def unpack(self, packed: Any) -> tuple[Step, EpisodeInfo]:
        """Rows of `step_packed` -> (Step, EpisodeInfo) (see `PackedRows.unpack`)."""
        return self.rows.unpack(packed)

    @property
    def episode_sums(self) -> tuple[np.ndarray, np.ndarray]:
        """(return [E] float64, length [E] int64) of each env's running episode: its real
        steps so far (0 and 0 right after an episode ended)."""
        return self._episode_return.copy(), self._episode_length.copy()

    def resume_from(self, obs: np.ndarray) -> None:
        """Makes the next `step_packed` call emit NEXT_STEP reset rows from `obs`
        [E, obs_dim] (where each env's previous episode stopped: a restored buffer's
        `last_next_obs`, or a lost runner's last observations) to the envs' current
        observations, without stepping the envs: the envs restarted, and their previous
        episodes end, truncated, at the last steps stored."""
        obs = np.asarray(obs, np.float32)
        if obs.shape != self._obs.shape:
            raise ValueError(f"GymRunner.resume_from: obs of shape {obs.shape}; expected "
                             f"(num_envs, obs_dim) = {self._obs.shape}")
        self._resume_obs = obs

    @property
    def raw_obs(self) -> np.ndarray:
        """[E, obs_dim] float32 on the host: the current env observations, packed
        (`ObsSpec.pack`; a Box's flattened)."""
        return self._obs

    @property
    def acting_obs(self) -> np.ndarray:
        """[E, dim] float32: what the policy acts on, packed (`frames.stacked_spec`):
        each env's frame stack, or `raw_obs` itself without a frame stack."""
        return self._stack

    def _advance_frames(self, next_obs: np.ndarray, new_episode: np.ndarray) -> None:
        """The frame stacks after rows whose next observations are next_obs [E, dim]
        (packed); new_episode [E]: those rows were reset rows (next_obs starts an
        episode)."""
        self._stack = self.frames.push(self._stack, next_obs, new_episode, packed=True)

    def step_packed(self, actions: Any) -> np.ndarray:
        """Steps every env once: its rows, [E, packed_width] float32 on the host (see
        `unpack`). Bools are 0/1 and episode lengths below 2**24 are exact in float32."""
        action = np.asarray(actions, self.actions.dtype)
        expected = (self.num_envs, *self.actions.shape)
        if action.shape != expected:
            raise ValueError(f"GymRunner.step_packed: actions of shape {action.shape}; expected "
                             f"(num_envs, *action shape) = {expected}")
        if self._resume_obs is not None:
            return self._reset_rows_after_resume(action)
        try:
            next_obs, reward, terminated, truncated, infos = self._vec_env.step(
                self.actions.to_env(action))
        except (EOFError, BrokenPipeError, ConnectionResetError) as e:
            return self._replace_vector_env(action, e)
        self._worker_deaths_in_a_row = 0
        self.num_env_restarts += _restarts_in(infos)
        next_obs = self._packed(next_obs)
        done = terminated | truncated
        # A failed step ends the episode but is not one of its env steps.
        failed = _failed_in(infos, self.num_envs)
        not_a_step = self._needs_reset | failed
        self._episode_return, self._episode_length, episodes = bookkeeping(
            self._episode_return, self._episode_length, reward, not_a_step, done, np)
        packed = self.rows.pack(self._obs, action, reward, terminated, truncated, next_obs,
                                episodes, failed)
        self._advance_frames(next_obs, self._needs_reset)
        self._obs = next_obs
        self._needs_reset = done
        return packed

    def _replace_vector_env(self, action: np.ndarray, error: BaseException) -> np.ndarray:
        """A worker process of the async vector env died (`error`): every env is rebuilt
        in a new vector env, as for an env whose step raised. This call's rows are failed
        rows (no env step: obs = next_obs = each env's last good obs, truncated); the next
        call's are the NEXT_STEP reset rows to the new envs' first observations. Each
        death adds num_envs to `num_env_restarts`; more than `max_env_restarts` deaths in
        a row (no successful step between) raise `EnvFailureError`."""
        last = self.first_env_index + self.num_envs - 1
        named = (f"envs {self.first_env_index}..{last} ({self.env_id!r}): a worker process "
                 f"of the async vector env died ({type(error).__name__}: {error})")
        self._worker_deaths_in_a_row += 1
        if self._worker_deaths_in_a_row > self._max_env_restarts:
            raise EnvFailureError(f"{named} {self._worker_deaths_in_a_row} times in a row, "
                                  f"more than max_env_restarts={self._max_env_restarts}; "
                                  "its envs cannot be stepped") from error
        with contextlib.suppress(Exception):  # the dead worker's pipe may not close cleanly
            self._vec_env.close(terminate=True)
        self._vec_env = self._vector_env()
        restart_seed = np.random.SeedSequence(
            [self._seed, self.first_env_index, self.num_env_restarts]).generate_state(1)[0]
        first_obs, infos = self._vec_env.reset(seed=int(restart_seed) % 2**31)
        self.num_env_restarts += self.num_envs + _restarts_in(infos)
        failed = np.ones(self.num_envs, bool)
        zeros = np.zeros(self.num_envs)
        self._episode_return, self._episode_length, episodes = bookkeeping(
            self._episode_return, self._episode_length, zeros, failed, failed, np)
        packed = self.rows.pack(self._obs, action, zeros, ~failed, failed, self._obs, episodes,
                                failed)
        self.resume_from(self._obs)
        self._advance_frames(self._obs, ~failed)
        self._obs = self._packed(first_obs)
        return packed

    def _reset_rows_after_resume(self, action: np.ndarray) -> np.ndarray:
        """The NEXT_STEP reset rows of `resume_from`: from its obs to the envs' current
        observations, no env step (reward 0, not done)."""
        no, zeros = np.zeros(self.num_envs, bool), np.zeros(self.num_envs)
        self._episode_return[:] = 0
        self._episode_length[:] = 0
        packed = self.rows.pack(self._resume_obs, action, zeros, no, no, self._obs,
                                EpisodeInfo(no, zeros, zeros), no)
        self._resume_obs = None
        self._needs_reset = no
        self._advance_frames(self._obs, ~no)
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
