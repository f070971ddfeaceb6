"""Remote env runners: gymnasium envs stepped by Ray actors, sampled synchronously, and
replaced when they fail (RLlib's `synchronous_parallel_sample` and
`restart_failed_env_runners`).

    runners = RayEnvRunners(factory, num_runners=2, envs_per_runner=4, acting=...)
    rows = runners.sample("policy", actor_params, obs_stats, root, iteration, size)

Each actor owns an `EnvRunner` (a gymnasium vector env and the acting policy, on the
actor's CPU). Every block the learner puts the actor parameters and observation
statistics into Ray's object store once; each runner acts and steps its envs for the
block and returns its rows; the rows are concatenated along the env axis, runner-major,
so runner r holds the run's envs r·E ... r·E + E - 1.

Faults: a runner whose actor dies (process killed, node lost) or does not answer
within `sample_timeout_s` is killed and replaced by a new actor whose envs restart
(reset with a seed derived from the run's seed, the runner and its restart count). The
block it was sampling is dropped for its envs: their rows are failed rows (no env step,
never sampled) that end their episodes, truncated, at the last step stored, and the new
actor's first row is a NEXT_STEP reset row. `max_env_runner_restarts` replacements of
one runner are allowed; the next failure raises `EnvFailureError` naming the runner and
the cause. An env that fails inside a runner is rebuilt there as in the local loop;
when it gives up, the `EnvFailureError` reaches the learner as it would locally.

Ray is an optional extra (`pip install -e '.[ray]'`), imported on first use.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from typing import Any

import jax
import numpy as np

from jaxsac import connectors
from jaxsac.envs import EnvFailureError, GymEnvFactory
from jaxsac.observations import obs_spec
from jaxsac.runners.env_runner import ActingFactory, EnvRunner
from jaxsac.runners.gym_runner import GymRunner, PackedRows

RAY_EXTRA = "pip install -e '.[ray]'"
RUNNER_START_TIMEOUT_S = 120.0
"""Seconds a new runner may take to start (a worker process, imports, its envs)."""


def check_ray_installed(owner: str) -> None:
    """Raises ImportError naming the extra when Ray cannot be imported."""
    if importlib.util.find_spec("ray") is None:
        raise ImportError(f"{owner} needs Ray, which is not installed: {RAY_EXTRA} "
                          "(or pip install 'ray>=2.9')")


def _ray() -> Any:
    check_ray_installed("remote env runners (SACConfig.num_env_runners > 0)")
    return importlib.import_module("ray")


class _RunnerActor:
    """The body of one remote runner (wrapped in `ray.remote` by `RayEnvRunners`)."""

    def __init__(self, factory: GymEnvFactory, num_envs: int, vectorization: str,
                 max_env_restarts: int, seed: int, first_env_index: int, total_envs: int,
                 acting: ActingFactory, resume_obs: np.ndarray | None, frame_stack: int):
        jax.config.update("jax_platforms", "cpu")  # the runner acts on its host's CPU
        gym = GymRunner(factory, num_envs, vectorization, max_env_restarts, seed,
                        first_env_index=first_env_index, frame_stack=frame_stack)
        self.runner = EnvRunner(gym, acting, total_envs)
        if resume_obs is not None:
            self.runner.resume_from(resume_obs)

    def pid(self) -> int:
        return os.getpid()

    def raw_obs(self) -> np.ndarray:
        return self.runner.raw_obs

    def resume_from(self, obs: np.ndarray) -> None:
        self.runner.resume_from(obs)

    def sample(self, acting: str, payload: tuple, iteration: int, size: int):
        """(rows [size, E, width], running episode return [E], length [E], env restarts)."""
        actor_params, obs_stats, key_data, key_impl = payload
        root = jax.random.wrap_key_data(key_data, impl=key_impl)
        rows = self.runner.sample(acting, actor_params, obs_stats, root, iteration, size)
        return (rows, *self.runner.gym.episode_sums, self.runner.num_env_restarts)

    def close(self) -> None:
        self.runner.close()


class RayEnvRunners:
    """`num_runners` Ray actors of `envs_per_runner` gymnasium envs each; the same
    interface as a local `EnvRunner` over all N·E envs (see the module docstring).

    address: the Ray cluster to join when Ray is not initialized yet ("auto", an
        address; None: RAY_ADDRESS, else a local Ray).
    frame_stack: each actor's runners keep the policy's frame stacks (`GymRunner`).
    Each actor takes one CPU of the cluster.
    """

    def __init__(self, factory: GymEnvFactory, num_runners: int, envs_per_runner: int,
                 acting: ActingFactory, *, vectorization: str = "sync",
                 max_env_restarts: int = 3, seed: int = 0, sample_timeout_s: float = 60.0,
                 max_env_runner_restarts: int = 10, address: str | None = None,
                 frame_stack: int = 1):
        ray = _ray()
        if not ray.is_initialized():
            ray.init(address=address, include_dashboard=False)
        self._ray = ray
        self._actor_class = ray.remote(num_cpus=1, max_restarts=0)(_RunnerActor)
        self._factory = factory
        self._settings = dict(num_envs=envs_per_runner, vectorization=vectorization,
                              max_env_restarts=max_env_restarts,
                              total_envs=num_runners * envs_per_runner, acting=acting,
                              frame_stack=frame_stack)
        self.seed = seed
        self.num_runners = num_runners
        self.envs_per_runner = envs_per_runner
        self.num_envs = num_runners * envs_per_runner
        self.sample_timeout_s = sample_timeout_s
        self.max_env_runner_restarts = max_env_runner_restarts
        self.rows = PackedRows(obs_spec(factory.observation_space, f"env {factory.env_id!r}"),
                               connectors.module_actions(factory.action_space))

        self.restarts = [0] * num_runners  # replacements of each runner
        self._env_restarts = [0] * num_runners  # env rebuilds inside each runner's actor
        self._lost_env_restarts = 0  # those of actors that were replaced
        # A runner is lost when its actor's process or node dies (its results with it).
        exceptions = ray.exceptions
        self._lost_errors = (exceptions.RayActorError, exceptions.ObjectLostError,
                             exceptions.WorkerCrashedError, exceptions.OutOfMemoryError)
        self._actors = []
        try:
            for r in range(num_runners):
                self._actors.append(self._start(r, seed, None))
            self._last_obs = np.concatenate(self._get(
                [a.raw_obs.remote() for a in self._actors], timeout=RUNNER_START_TIMEOUT_S))
        except BaseException:
            self._kill_all()
            raise
        self._episode_return = np.zeros(self.num_envs)
        self._episode_length = np.zeros(self.num_envs, np.int64)

    # ------------------------------------------------------------------ the interface

    @property
    def num_env_runner_restarts(self) -> int:
        """Remote runners replaced so far."""
        return sum(self.restarts)

    @property
    def num_env_restarts(self) -> int:
        """Envs rebuilt after a fault so far, inside every runner (replaced ones too)."""
        return self._lost_env_restarts + sum(self._env_restarts)

    @property
    def raw_obs(self) -> np.ndarray:
        """[N·E, obs_dim]: each env's newest observation the learner has seen."""
        return self._last_obs

    @property
    def actor_pids(self) -> list[int]:
        """The process id of each runner's actor."""
        return self._get([a.pid.remote() for a in self._actors])

    def sample(self, acting: str, actor_params: Any, obs_stats: Any, root: jax.Array,
               iteration: int, size: int) -> np.ndarray:
        """Rows [size, N·E, width] of iterations iteration ... iteration + size - 1 from
        every runner, runner-major along the env axis; a runner that fails gives failed
        rows for its envs and is replaced (see the module docstring)."""
        payload = self._ray.put((jax.device_get(actor_params), jax.device_get(obs_stats),
                                 np.asarray(jax.random.key_data(root)),
                                 jax.random.key_impl(root)))
        pending = [a.sample.remote(acting, payload, iteration, size) for a in self._actors]
        ready, _ = self._ray.wait(pending, num_returns=len(pending),
                                  timeout=self.sample_timeout_s)
        ready = set(ready)
        blocks = []
        for r, ref in enumerate(pending):
            if ref not in ready:
                blocks.append(self._replace(
                    r, f"no block within sample_timeout_s={self.sample_timeout_s}", size))
                continue
            try:
                rows, episode_return, episode_length, env_restarts = self._get(ref)
            except self._lost_errors as e:
                blocks.append(self._replace(r, f"{type(e).__name__}: {e}", size))
                continue
            envs = self._envs(r)
            self._last_obs[envs] = self.rows.next_obs_columns(rows[-1])
            self._episode_return[envs], self._episode_length[envs] = (episode_return,
                                                                      episode_length)
            self._env_restarts[r] = env_restarts
            blocks.append(rows)
        return np.concatenate(blocks, axis=1)

    def resume_from(self, obs: np.ndarray) -> None:
        """Every runner emits NEXT_STEP reset rows from `obs` [N·E, obs_dim] first (see
        `GymRunner.resume_from`); a runner lost before then ends its envs' episodes there."""
        self._get([a.resume_from.remote(obs[self._envs(r)])
                   for r, a in enumerate(self._actors)])
        self._last_obs = np.array(obs, np.float32)

    def close(self, timeout_s: float = 10.0) -> None:
        """Closes the runners' envs (waiting at most `timeout_s` for runners still
        busy) and ends their actors."""
        self._ray.wait([a.close.remote() for a in self._actors],
                       num_returns=len(self._actors), timeout=timeout_s)
        self._kill_all()

    def _kill_all(self) -> None:
        for actor in self._actors:
            self._ray.kill(actor, no_restart=True)

    # ------------------------------------------------------------------ the rest

    def _envs(self, runner: int) -> slice:
        return slice(runner * self.envs_per_runner, (runner + 1) * self.envs_per_runner)

    def _get(self, refs: Any, timeout: float | None = None) -> Any:
        """ray.get, with an env that gave up inside a runner raised as itself."""
        try:
            return self._ray.get(refs, timeout=timeout)
        except self._ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, EnvFailureError):
                raise EnvFailureError(str(e.cause)) from e
            raise

    def _start(self, runner: int, seed: int, resume_obs: np.ndarray | None) -> Any:
        return self._actor_class.remote(self._factory, seed=seed,
                                        first_env_index=runner * self.envs_per_runner,
                                        resume_obs=resume_obs, **self._settings)

    def _replace(self, runner: int, cause: str, size: int) -> np.ndarray:
        """Failed rows [size, E, width] for the block `runner` lost (`cause` says why);
        a new actor in its place, started and answering, or EnvFailureError once the
        runner has been replaced max_env_runner_restarts times."""
        envs = self._envs(runner)
        lost = self.rows.lost(self._last_obs[envs], self._episode_return[envs],
                              self._episode_length[envs], size)
        self._episode_return[envs], self._episode_length[envs] = 0, 0
        self._lost_env_restarts += self._env_restarts[runner]
        self._env_restarts[runner] = 0
        while True:
            self._ray.kill(self._actors[runner], no_restart=True)
            if self.restarts[runner] >= self.max_env_runner_restarts:
                raise EnvFailureError(
                    f"env runner {runner} (envs {envs.start}..{envs.stop - 1}) failed after "
                    f"{self.restarts[runner]} replacement(s) (max_env_runner_restarts="
                    f"{self.max_env_runner_restarts}); last cause: {cause}")
            self.restarts[runner] += 1
            self._actors[runner] = self._start(runner, self.restart_seed(runner),
                                               self._last_obs[envs].copy())
            try:
                self._get(self._actors[runner].raw_obs.remote(), timeout=RUNNER_START_TIMEOUT_S)
                return lost
            except (*self._lost_errors, self._ray.exceptions.GetTimeoutError) as e:
                cause = f"its replacement did not start: {type(e).__name__}: {e}"

    def restart_seed(self, runner: int) -> int:
        """The seed of `runner`'s envs after its latest replacement: a function of the
        run's seed, the runner and its restart count."""
        sequence = np.random.SeedSequence([self.seed, runner, self.restarts[runner]])
        return int(sequence.generate_state(1)[0]) // 2  # room for the env index
