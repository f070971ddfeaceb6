"""The env runner: gymnasium envs and the policy that acts in them (RLlib's EnvRunner).

An `EnvRunner` samples a block of iterations at a time: at each one it acts on its
envs' observations with the block's actor parameters and observation statistics, then
steps its `GymRunner`. The gymnasium loop (jaxsac.host_loop) keeps one in its own
process; remote runners (jaxsac.runners.ray_runner) keep one in each Ray actor.

Acting functions come from a picklable factory, `acting(obs_spec, actions) ->
{name: fn}`, each `fn(actor_params, obs_stats, raw_obs [T, obs_dim], root, iteration)
-> module actions [T, ...]` for the run's T envs, raw_obs packed (`ObsSpec.pack`; with
a frame stack, the stacks `GymRunner.acting_obs`) (the loop's `acting_functions`), so
a remote process builds the same functions as the learner's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from jaxsac.runners.gym_runner import GymRunner, PackedRows

ActingFactory = Callable[..., dict[str, Callable]]


class EnvRunner:
    """Samples blocks of iterations from `gym_runner`'s envs, acting with `acting`.

    gym_runner: the envs, the run's envs first_env_index ... first_env_index + E - 1.
    acting: the factory of the acting functions (see the module docstring).
    total_envs: T, the run's envs over all runners (None: this runner's E).

    Each action is computed for all T envs, this runner's observations in their rows
    and zeros elsewhere, and this runner keeps its rows: the acting functions then run
    on the shapes, keys and values of the one-runner loop, so N runners of E envs act
    bit for bit as one runner of N·E envs does on the same kind of processor (XLA's
    matmul rounding depends on the number of rows, and the exploration noise is drawn
    for the whole batch; remote runners act on their CPUs, so a learner acting on a GPU
    rounds otherwise). The price is a policy evaluation on T rows per step in every
    runner.
    """

    def __init__(self, gym_runner: GymRunner, acting: ActingFactory,
                 total_envs: int | None = None):
        self.gym = gym_runner
        self.total_envs = gym_runner.num_envs if total_envs is None else total_envs
        first = gym_runner.first_env_index
        if not 0 <= first <= self.total_envs - gym_runner.num_envs:
            raise ValueError(f"EnvRunner: envs {first}..{first + gym_runner.num_envs - 1} of "
                             f"the runner lie outside the run's total_envs={self.total_envs}")
        self._rows = slice(first, first + gym_runner.num_envs)
        self._acting = acting(gym_runner.obs_spec, gym_runner.actions)

    num_env_runner_restarts = 0  # the runner of this process is never replaced

    @property
    def rows(self) -> PackedRows:
        return self.gym.rows

    @property
    def num_envs(self) -> int:
        return self.gym.num_envs

    @property
    def raw_obs(self) -> np.ndarray:
        """[E, obs_dim] float32: the envs' current observations, packed."""
        return self.gym.raw_obs

    @property
    def num_env_restarts(self) -> int:
        """Envs rebuilt after a fault so far."""
        return self.gym.num_env_restarts

    def resume_from(self, obs: np.ndarray) -> None:
        """See `GymRunner.resume_from`."""
        self.gym.resume_from(obs)

    def close(self) -> None:
        self.gym.close()

    def sample(self, acting: str, actor_params: Any, obs_stats: Any, root: Any,
               iteration: int, size: int) -> np.ndarray:
        """Rows [size, E, rows.width] of iterations iteration ... iteration + size - 1,
        acting with `self._acting[acting]` at each."""
        act = self._acting[acting]
        rows = np.empty((size, self.gym.num_envs, self.rows.width), np.float32)
        for i in range(size):
            action = act(actor_params, obs_stats, self._all_envs(self.gym.acting_obs), root,
                         iteration + i)
            rows[i] = self.gym.step_packed(np.asarray(action)[self._rows])
        return rows

    def _all_envs(self, obs: np.ndarray) -> np.ndarray:
        """[T, obs_dim]: this runner's observations in its rows, zeros elsewhere."""
        if self.total_envs == self.gym.num_envs:
            return obs
        batch = np.zeros((self.total_envs, *obs.shape[1:]), obs.dtype)
        batch[self._rows] = obs
        return batch
