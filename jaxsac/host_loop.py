"""The gymnasium loop: envs stepped on the host, the buffer and the learner on the device.

The env runner (`host_runner(config)`: an EnvRunner in this process, or Ray actors
when `config.num_env_runners > 0`) samples blocks of `config.host_block_steps`
iterations, acting with the policy and observation statistics of the block's start;
the block's rows then reach the device in one transfer, and one jitted call unpacks
them, updates the statistics, and runs `iteration.absorb` for each iteration (adds and
gradient steps). The observation statistics live in `TrainState.runner`.

A resumed run's envs restart: before its first new row, the restored buffer's running
episodes end, truncated, at their last stored steps, and the runner's first rows are
NEXT_STEP reset rows from the buffer's `last_next_obs` (no transition spans the restart).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jaxsac import connectors, envs, replay
from jaxsac.assembly import (
    TrainState,
    act,
    eval_key,
    exploration_noise,
    host_assembly,
    init_state,
    iteration_keys,
)
from jaxsac.config import SACConfig
from jaxsac.evaluation import evaluate_gymnasium, gym_evaluation
from jaxsac.iteration import absorb
from jaxsac.learner import METRICS as LEARNER_METRICS
from jaxsac.metrics import nan_learner_metrics, period_row
from jaxsac.observations import ObsSpec
from jaxsac.runners import (
    EnvRunner,
    GymRunner,
    HostRunner,
    RayEnvRunners,
    random_act_fn,
)
from jaxsac.schedule import Phase, iterations_per_period, segments

ACTING = {Phase.WARMUP: "random", Phase.FIRST_UPDATE: "random", Phase.LEARN: "policy"}
"""The acting function of each phase (see `acting_functions`)."""


def stack_rows(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """Metrics rows -> {name: array [rows, ...]} ({} for no rows)."""
    if not rows:
        return {}
    return {k: np.stack([np.asarray(r[k]) for r in rows]) for k in rows[0]}


def acting_functions(config: SACConfig, obs: ObsSpec | int,
                     actions: connectors.ModuleActions) -> dict[str, Callable]:
    """The jitted acting functions of the gymnasium loop, by name: "policy" (the
    stochastic policy) and "random" (uniform warm-up actions), each
    `(actor_params, obs_stats, raw_obs [T, obs_dim], root, iteration) -> module actions
    [T, ...]` with the iteration's acting key (raw_obs packed, `ObsSpec.pack`, of the
    ObsSpec `obs` seen through the config's frame stack, `Assembly.acting_spec`; an int
    d: flat [d]). Runners in other processes build theirs with
    this function too (it is what `EnvRunner`'s `acting` factory calls)."""
    assembly = host_assembly(config, obs, actions)

    def policy(actor_params, obs_stats, raw_obs, root, iteration):
        return act(assembly, actor_params, obs_stats, assembly.acting_spec.unpack(raw_obs),
                   iteration_keys(root, iteration)[0],
                   noise=exploration_noise(assembly, root, iteration, raw_obs.shape[0]))

    def random(actor_params, obs_stats, raw_obs, root, iteration):
        return random_act_fn(assembly.actions)(raw_obs, iteration_keys(root, iteration)[0])

    return {"policy": jax.jit(policy), "random": jax.jit(random)}


def host_runner(config: SACConfig) -> HostRunner:
    """The env runner of a gymnasium run: its `num_envs` envs in this process, or spread
    over `num_env_runners` Ray actors."""
    acting = functools.partial(acting_functions, config)
    if config.num_env_runners == 0:
        return EnvRunner(GymRunner(envs.from_config(config), config.num_envs,
                                   config.vectorization, config.max_env_restarts, config.seed,
                                   frame_stack=config.frame_stack),
                         acting)
    return RayEnvRunners(
        envs.from_config(config), config.num_env_runners,
        config.envs_per_env_runner, acting, vectorization=config.vectorization,
        max_env_restarts=config.max_env_restarts, seed=config.seed,
        sample_timeout_s=config.sample_timeout_s,
        max_env_runner_restarts=config.max_env_runner_restarts, address=config.ray_address,
        frame_stack=config.frame_stack)


class HostLoop:
    """Trains `config` on gymnasium envs stepped by `runner` (one seed; see
    `host_runner`).

    init(key) -> the initial TrainState (`runner` field: observation statistics after
        the envs' first observations).
    run_chunk(state, start, stop) -> (state, metrics rows [stop - start]): log periods
        [start, stop), block by block.
    """

    donates_state = True

    @property
    def env_restarts(self) -> int:
        """Envs rebuilt after a fault so far."""
        return self.runner.num_env_restarts

    def __init__(self, config: SACConfig, runner: HostRunner):
        if not isinstance(runner, HostRunner):
            raise ValueError(f"HostLoop: runner={type(runner).__name__} is invalid: must "
                             "follow jaxsac.runners.HostRunner (rows, num_envs, raw_obs, "
                             "sample, resume_from, close and the fault counters)")
        self.runner = runner
        self.assembly = host_assembly(config, runner.rows.obs_spec, runner.rows.actions)
        self._init = jax.jit(lambda key: init_state(self.assembly, key))
        self._end_episodes = jax.jit(replay.end_episodes, static_argnums=1)
        self._blocks: dict[tuple[Phase, int], Callable] = {}
        self._started = False
        self._learner_metrics: list[dict[str, np.ndarray]] = []
        self._evaluation = gym_evaluation(self.assembly.module_config)

    def init(self, key: jax.Array) -> TrainState:
        # The key committed to its device commits the state there, as a state restored
        # from a checkpoint is: both are the same arguments to the blocks.
        [device] = key.devices()
        state = self._init(jax.device_put(key, device))
        first_obs = self.assembly.obs_spec.unpack(jax.device_put(self.runner.raw_obs))
        return state.replace(runner=self.assembly.env_to_module.update(state.runner, first_obs))

    def state_shapes(self, key: jax.Array) -> TrainState:
        """`init(key)`'s ShapeDtypeStructs (nothing allocated)."""
        return jax.eval_shape(lambda key: init_state(self.assembly, key), key)

    def block(self, phase: Phase, size: int) -> Callable:
        """Jitted (state, rows [size, E, packed_width]) -> (state, learner metrics [size]);
        the state is donated. The statistics in `state.runner` fold in the rows' next
        observations first; the block's gradient steps normalize with them."""
        if (phase, size) not in self._blocks:
            to_module = self.assembly.env_to_module

            def run(state, rows):
                steps, episodes = self.runner.rows.unpack(rows)
                # A failed row's next_obs repeats an observation: not one more.
                obs_stats = jax.lax.scan(
                    lambda stats, xs: (to_module.update(stats, *xs), None),
                    state.runner, (steps.next_obs, ~steps.failed))[0]

                def body(s, xs):
                    return absorb(self.assembly, s, *xs, obs_stats, phase)
                state, metrics = jax.lax.scan(body, state, (steps, episodes))
                return state.replace(runner=obs_stats), metrics
            self._blocks[phase, size] = jax.jit(run, donate_argnums=0)
        return self._blocks[phase, size]

    def run_period(self, state: TrainState, period: int):
        """One log period: its iterations block by block, then its metrics row."""
        per = iterations_per_period(self.assembly.schedule)
        for phase, count in segments(self.assembly.schedule, period * per,
                                     (period + 1) * per):
            state = self.run(state, phase, count)
        return state, self.period_metrics(state, period)

    def run_chunk(self, state: TrainState, start: int, stop: int):
        """Log periods [start, stop): (state, metrics rows stacked [stop - start])."""
        if not self._started:
            state = self._restart_envs(state)
        rows = []
        for period in range(start, stop):
            state, row = self.run_period(state, period)
            rows.append(row)
        return state, stack_rows(rows)

    def _restart_envs(self, state: TrainState) -> TrainState:
        """Before the first block: a state whose buffer holds rows (a resumed run) ends
        their running episodes, and the fresh envs start with reset rows from them."""
        self._started = True
        if not int(state.buffer.filled_slots):
            return state
        last = jax.device_get(state.buffer.last_next_obs)
        self.runner.resume_from(np.asarray(self.assembly.obs_spec.pack(last)))
        return state.replace(buffer=self._end_episodes(state.buffer, self.runner.num_envs))

    def run(self, state: TrainState, phase: Phase, count: int) -> TrainState:
        """`count` iterations of `phase`, in blocks of at most host_block_steps."""
        block_steps = self.assembly.module_config.host_block_steps
        iteration = int(state.iteration)
        stop = iteration + count
        while iteration < stop:
            size = min(block_steps, stop - iteration)
            rows = self.runner.sample(ACTING[phase], state.learner.actor_params, state.runner,
                                      state.key, iteration, size)
            state, metrics = self.block(phase, size)(state, rows)
            if phase is not Phase.WARMUP:
                self._learner_metrics.append(metrics)
            iteration += size
        return state

    def period_metrics(self, state: TrainState, period: int) -> dict[str, Any]:
        """The period's row (Python numbers): learner metrics averaged over the
        period's gradient steps, and a deterministic evaluation on fresh envs."""
        metrics = self._learner_metrics or [nan_learner_metrics()]
        learner_metrics = {k: _mean_of_numbers(np.concatenate(
            [np.atleast_1d(np.asarray(m[k])) for m in metrics])) for k in LEARNER_METRICS}
        self._learner_metrics = []
        config = self.assembly.module_config
        returns = evaluate_gymnasium(self._evaluation, state.learner.actor_params,
                                     eval_key(state.key, period), config.eval_episodes,
                                     self.assembly.obs_stats(state))
        dropped = np.isnan(returns)
        return period_row(
            learner_metrics,
            env_steps=int(state.iteration) * self.assembly.env_steps_per_iteration,
            grad_steps=int(state.learner.step),
            target_update_freq=config.target_network_update_freq,
            episodes={k: np.asarray(v).item() for k, v in state.episodes.summary().items()},
            eval_return=_mean_of_numbers(returns),
            host_faults={"env_restarts": self.runner.num_env_restarts,
                         "env_runner_restarts": self.runner.num_env_runner_restarts,
                         "eval_failures": int(dropped.sum())})


def _mean_of_numbers(values: np.ndarray) -> float:
    """The mean of the non-NaN entries of `values`, NaN (without numpy's warning) when
    there are none: a period of warm-up steps only has no gradient step to average."""
    return float(np.nanmean(values)) if not np.isnan(values).all() else float("nan")
