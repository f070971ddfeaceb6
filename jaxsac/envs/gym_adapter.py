"""Gymnasium envs for the host runner: a picklable env factory, space checks and the
wrapper that rebuilds an env when it raises (docs/semantics.md, "Fault tolerance
(gymnasium envs)")."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import gymnasium
import numpy as np

from jaxsac import checks
from jaxsac.envs.atari import atari_spec, is_atari
from jaxsac.envs.dmc import dmc_spec, is_dmc
from jaxsac.observations import obs_spec


class EnvFailureError(RuntimeError):
    """An env kept failing: `max_env_restarts` rebuilds in a row did not help.

    The message names the env (index and id) and the last exception, which is also the
    `__cause__` when raised in this process.
    """


@dataclasses.dataclass(frozen=True)
class GymEnvFactory:
    """Builds `gymnasium.make(env_id, **kwargs)`; picklable, so async workers can use it.

    `observation_space` / `action_space` are read from one probe env, built on first use.
    """

    env_id: str
    kwargs: tuple[tuple[str, Any], ...] = ()
    # The registered spec, resolved where the factory was made: a spawned worker process
    # may not have run the code that registered `env_id`.
    spec: gymnasium.envs.registration.EnvSpec | None = dataclasses.field(
        default=None, compare=False, repr=False)

    def __call__(self) -> gymnasium.Env:
        return gymnasium.make(self.spec or self.env_id, **dict(self.kwargs))

    @functools.cached_property
    def _spaces(self) -> tuple[gymnasium.Space, gymnasium.Space]:
        env = self()
        try:
            return env.observation_space, env.action_space
        finally:
            env.close()

    @property
    def observation_space(self) -> gymnasium.Space:
        return self._spaces[0]

    @property
    def action_space(self) -> gymnasium.Space:
        return self._spaces[1]


GYM_FACTORIES: dict[str, gymnasium.envs.registration.EnvSpec] = {}
"""env id -> the spec of a factory registered with `register_gym_env` (kept here, not in
gymnasium's registry)."""


def register_gym_env(env_id: str, factory: Callable[..., gymnasium.Env],
                     max_episode_steps: int | None = None) -> None:
    """Add an env built by a callable: `SACConfig(env_id=env_id, env_kwargs=kwargs)` then
    trains (and evaluates) on `factory(**kwargs)` on the gymnasium backend, with any
    wrappers the factory applies, e.g.

        register_gym_env("FrozenLake-flat", lambda **kw: gymnasium.wrappers.
                         FlattenObservation(gymnasium.make("FrozenLake-v1", **kw)))

    The factory travels to async vector envs and Ray runners with cloudpickle (lambdas
    and closures work); a checkpoint stores the id and kwargs, not the factory: register
    it again in a fresh process before evaluating or resuming. `max_episode_steps` adds
    gymnasium's TimeLimit (None: the factory's env keeps its own ends). Registering an
    id again replaces its factory; gymnasium's own ids cannot be taken."""
    owner = "register_gym_env"
    if not isinstance(env_id, str) or not env_id:
        checks.fail(owner, "env_id", env_id, "a non-empty string")
    if env_id in gymnasium.registry:
        checks.fail(owner, "env_id", env_id, "an id gymnasium does not know already (use "
                    "SACConfig.env_kwargs for its arguments)")
    if not callable(factory):
        checks.fail(owner, "factory", factory, "callable (**env_kwargs) -> gymnasium.Env")
    if max_episode_steps is not None:
        checks.check_int(owner, "max_episode_steps", max_episode_steps, 1)
    try:
        spec = gymnasium.envs.registration.EnvSpec(env_id, entry_point=factory,
                                                   max_episode_steps=max_episode_steps)
    except gymnasium.error.Error as e:
        checks.fail(owner, "env_id", env_id, f"an id gymnasium can parse ({e})")
    GYM_FACTORIES[env_id] = spec


def source_spec(env_id: str) -> gymnasium.envs.registration.EnvSpec | None:
    """The spec of an env jaxsac builds itself: a factory of `register_gym_env`, an
    Atari game from pixels ("ALE/<Game>-v5", jaxsac.envs.atari) or a DeepMind Control
    task ("dmc/<domain>-<task>[-pixels]", jaxsac.envs.dmc); None for other ids."""
    if env_id in GYM_FACTORIES:
        return GYM_FACTORIES[env_id]
    if is_atari(env_id):
        return atari_spec(env_id)
    if is_dmc(env_id):
        return dmc_spec(env_id)
    return None


def gym_env_factory(env_id: str, **kwargs: Any) -> GymEnvFactory:
    """A factory for a registered gymnasium id, one of `register_gym_env`, an Atari game
    or a DeepMind Control task (`source_spec`); unknown ids raise `ValueError`."""
    spec = source_spec(env_id)
    if spec is not None:
        return GymEnvFactory(env_id, tuple(sorted(kwargs.items())), spec)
    try:
        spec = gymnasium.spec(env_id)
    except gymnasium.error.Error as e:
        raise ValueError(
            f"env_id={env_id!r} is not a registered gymnasium environment ({e}) nor a "
            "factory registered with jaxsac.envs.register_gym_env (a checkpoint stores the "
            "id, not the factory: register it again in a fresh process)") from e
    return GymEnvFactory(env_id, tuple(sorted(kwargs.items())), spec)


FLATTENING = (
    "train on a factory that wraps the env in gymnasium.wrappers.FlattenObservation "
    "(jaxsac.envs.register_gym_env; a GymRunner built by hand flattens them with "
    "flatten_structured_obs=True)")
SUPPORTED_OBSERVATIONS = (
    "supported: a Box observation space of any shape (an image [H, W, C] uint8 kept as "
    "it is, any other flattened to float32), or a Dict of "
    "Boxes (each entry kept with its shape and dtype); Tuple, Discrete, MultiDiscrete or "
    "nested observations must be flattened first: " + FLATTENING)


def check_observation_space(observation_space: gymnasium.Space, env_name: str, *,
                            flatten_structured_obs: bool = False) -> None:
    """Raises `ValueError` saying what is supported when the observations are not
    (the action space is checked by `jaxsac.connectors.module_actions`)."""
    if isinstance(observation_space, gymnasium.spaces.Box):
        return
    if not flatten_structured_obs and isinstance(observation_space, gymnasium.spaces.Dict):
        try:
            obs_spec(observation_space, f"env {env_name!r}")
        except ValueError as e:
            raise ValueError(f"{e}; otherwise flatten it first: {FLATTENING}") from None
        return
    if not flatten_structured_obs:
        raise ValueError(
            f"env {env_name!r}: observation_space={observation_space} is not supported "
            f"without a flattening connector; {SUPPORTED_OBSERVATIONS}")
    try:
        gymnasium.spaces.flatdim(observation_space)
    except (NotImplementedError, ValueError) as e:
        raise ValueError(
            f"env {env_name!r}: observation_space={observation_space} cannot be flattened "
            f"({e}); {SUPPORTED_OBSERVATIONS}") from e


class RestartOnFailure(gymnasium.Wrapper):
    """Rebuilds the wrapped env when its `reset` or `step` raises.

    A failed `step` is reported as the end of the episode at its last good step:
    (last good obs, reward 0, terminated False, truncated True, info["env_failure"]).
    The vector env's NEXT_STEP autoreset then resets the rebuilt env on the next call.
    A failed `reset` is retried on a rebuilt env, and a failed construction (the first
    one or a rebuild's) is tried again. Every rebuild adds one to info["env_restarts"].
    Up to `max_env_restarts` failures in a row of any of these (with no successful step
    in between) are survived; the next one raises `EnvFailureError`.
    A rebuilt env is reset with a seed derived from (seed, index, restarts), so a
    seeded run is reproducible.
    """

    def __init__(self, make_env: GymEnvFactory, index: int, max_env_restarts: int,
                 seed: int | None = None):
        self._make_env = make_env
        self._index = index
        self._max_env_restarts = max_env_restarts
        self._seed = seed
        self._consecutive_failures = 0
        self._total_restarts = 0
        self._reseed = False
        self._last_obs: Any = None
        super().__init__(self._construct())

    def _count_failure(self, error: BaseException) -> None:
        """One more failure in a row; `EnvFailureError` once they exceed the budget."""
        self._consecutive_failures += 1
        if self._consecutive_failures > self._max_env_restarts:
            count = self._consecutive_failures
            raise EnvFailureError(
                f"env {self._index} ({self._make_env.env_id!r}) gave up after {count} "
                f"consecutive failure{'s' if count != 1 else ''} (max_env_restarts="
                f"{self._max_env_restarts}); last error: {type(error).__name__}: {error}"
            ) from error

    def _construct(self) -> gymnasium.Env:
        """A new env from the factory, tried again while its construction fails (each
        failure counted against the budget)."""
        while True:
            try:
                return self._make_env()
            except Exception as e:  # a constructor can fail transiently too
                self._count_failure(e)

    def _rebuild(self, error: BaseException) -> None:
        self._count_failure(error)
        try:
            self.env.close()
        except Exception:  # the broken env may not close cleanly
            pass
        self.env = self._construct()
        self._total_restarts += 1
        self._reseed = self._seed is not None

    def _restart_seed(self) -> int:
        seq = np.random.SeedSequence([self._seed, self._index, self._total_restarts])
        return int(seq.generate_state(1)[0])

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        restarts_before = self._total_restarts
        while True:
            if seed is None and self._reseed:
                seed = self._restart_seed()
            try:
                obs, info = self.env.reset(seed=seed, options=options)
                break
            except Exception as e:  # any env error is survivable
                self._rebuild(e)
                seed = None
        self._reseed = False
        self._last_obs = obs
        restarts = self._total_restarts - restarts_before
        return obs, ({**info, "env_restarts": restarts} if restarts else info)

    def step(self, action):
        try:
            obs, reward, terminated, truncated, info = self.env.step(action)
        except Exception as e:  # any env error is survivable
            self._rebuild(e)
            info = {"env_restarts": 1, "env_failure": f"{type(e).__name__}: {e}"}
            return self._last_obs, 0.0, False, True, info
        self._consecutive_failures = 0
        self._last_obs = obs  # a reference: vector envs copy what they return anyway
        return obs, reward, terminated, truncated, info


class EnvDataError(ValueError):
    """An env returned data that cannot be trained on: a non-finite observation or
    reward, or an observation whose shape is not its observation space's."""


class CheckData(gymnasium.Wrapper):
    """Raises `EnvDataError`, naming the env (index and id) and its step, when the
    wrapped env's `reset` or `step` returns an observation of another shape than its
    observation space's, a float observation or a reward that is not finite as the
    float32 the buffer stores (1e39 is finite as float64, inf as float32), or a reward
    that is not one number.

    Nothing such an env returns reaches the replay buffer, where a NaN would end the
    run much later as "non-finite losses" without saying where it came from. A step
    given a non-finite action is not checked: what it returns is the policy's fault,
    and `train`'s divergence check reports it (after saving the last finite state).
    """

    def __init__(self, env: gymnasium.Env, index: int, env_id: str):
        super().__init__(env)
        self._index, self._env_id = index, env_id
        self._steps = 0
        space = env.observation_space
        self._shape = (tuple(space.shape or ()) if not isinstance(space, gymnasium.spaces.Dict)
                       else {k: tuple(entry.shape) for k, entry in space.spaces.items()})

    def _fail(self, what: str) -> None:
        raise EnvDataError(f"env {self._index} ({self._env_id!r}) {what} at its env step "
                           f"{self._steps} (counted from the runner's start, resets "
                           "excluded)")

    def _check_obs(self, obs: Any, call: str) -> None:
        if isinstance(self._shape, dict):
            if not isinstance(obs, dict) or set(obs) != set(self._shape):
                got = sorted(obs) if isinstance(obs, dict) else type(obs).__name__
                self._fail(f"returned an observation with keys {got} from {call}; its "
                           f"Dict observation_space has keys {sorted(self._shape)}")
            for key, shape in self._shape.items():
                self._check_array(np.asarray(obs[key]), shape, call, f" entry {key!r}")
            return
        self._check_array(np.asarray(obs), self._shape, call, "")

    def _check_array(self, array: np.ndarray, shape: tuple[int, ...], call: str,
                     entry: str) -> None:
        if array.shape != shape:
            self._fail(f"returned an observation{entry} of shape {array.shape} from {call}; "
                       f"its observation_space has shape {shape}")
        if np.issubdtype(array.dtype, np.floating) and not np.all(np.isfinite(array)):
            self._fail(f"returned a non-finite observation {array.tolist()} from {call}")
        if np.issubdtype(array.dtype, np.floating) and not np.all(_finite_as_float32(array)):
            self._fail(f"returned an observation that is not finite as float32 "
                       f"{array.tolist()} from {call}")

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        self._check_obs(obs, "reset")
        return obs, info

    def step(self, action: Any):
        self._steps += 1
        obs, reward, terminated, truncated, info = self.env.step(action)
        numeric = np.issubdtype(np.asarray(action).dtype, np.number)
        if numeric and not np.all(np.isfinite(action)):
            return obs, reward, terminated, truncated, info
        self._check_obs(obs, "step")
        if np.ndim(reward) != 0:
            self._fail(f"returned a reward of shape {np.shape(reward)}; a reward is one number,")
        if not np.isfinite(reward):
            self._fail(f"returned the non-finite reward {reward!r}")
        if not _finite_as_float32(reward):
            self._fail(f"returned the reward {reward!r}, not finite as float32,")
        return obs, reward, terminated, truncated, info


def _finite_as_float32(x: Any) -> np.ndarray:
    """Whether each entry of `x` stays finite in the float32 the replay buffer stores."""
    with np.errstate(over="ignore"):
        return np.isfinite(np.asarray(x, np.float32))

