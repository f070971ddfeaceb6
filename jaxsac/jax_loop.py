"""The JAX loop: a whole run, or any of its log periods, as one compiled program.

`training_step` is one iteration (act, step every env, store the steps, take the
gradient steps due), whatever its phase: the iteration's index picks the phase with
`lax.cond`. A log period is a `lax.scan` over its iterations followed by an evaluation
and the period's metrics row (`run_period`, the period may be traced); `make_train` is
a scan over every log period of a run, one pure function, jit- and vmap-able (seeds,
swept hyperparameters). `JaxLoop` is `train`'s view of the same program: the initial
state and one log period per call, with host work between them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jaxsac import checks, compilation, envs, sharding
from jaxsac.assembly import (
    Assembly,
    TrainState,
    assemble,
    eval_key,
    exploration_noise,
    init_state,
    iteration_keys,
    place,
)
from jaxsac.compilation import program_config
from jaxsac.config import SWEEPABLE, SACConfig, fields_with
from jaxsac.evaluation import evaluate_returns
from jaxsac.iteration import learn, skip_learning, store
from jaxsac.learner import Hyperparams
from jaxsac.metrics import period_row
from jaxsac.networks import uses_builtin_networks
from jaxsac.runners import random_act_fn
from jaxsac.schedule import iterations_per_period, num_periods, warmup_iterations

SWEEPABLE_FIELDS = fields_with(SWEEPABLE)
"""SACConfig fields `make_train(config, sweep=...)` takes as traced arguments."""


def policy_act_fn(assembly: Assembly, state: TrainState):
    """The policy's act_fn (obs [E, obs_dim], key) -> module actions [E, *action shape],
    with the iteration's colored exploration noise when the config asks for it."""
    noise = exploration_noise(assembly, state.key, state.iteration, assembly.runner.num_envs)
    return lambda obs, key: assembly.learner.act(state.learner.actor_params, obs, key,
                                                 noise=noise)


def training_step(assembly: Assembly, state: TrainState, iteration: jax.Array):
    """One iteration (docs/semantics.md, "Training step") of the JAX loop: every env of
    `assembly.runner` steps once, then the steps are stored and the gradient steps due
    are taken.

    iteration: the iteration's index, an int32 scalar the same for every vmapped seed
        (so `lax.cond` on it stays a branch under `vmap`). It picks the phase
        (schedule.phase_of): uniform random actions before `warmup_iterations`, and
        gradient steps from the last warm-up iteration on. Every phase is a branch of
        one program, so the update is compiled once however the phases fall.

    Returns (state, learner metrics of this iteration: {name: [] or [M] for M stacked
    modules}, NaN when it took no gradient step).
    """
    warmup = warmup_iterations(assembly.schedule)
    act_key, _ = iteration_keys(state.key, state.iteration)
    random_act, policy_act = random_act_fn(assembly.actions), policy_act_fn(assembly, state)

    def act_fn(obs: jax.Array, key: jax.Array) -> jax.Array:
        return jax.lax.cond(iteration < warmup, random_act, policy_act, obs, key)

    runner_state, step, episodes = assembly.runner.step(state.runner, act_fn, act_key)
    state = store(assembly, state.replace(runner=runner_state), step, episodes)
    state, metrics = jax.lax.cond(iteration >= warmup - 1,
                                  lambda s: learn(assembly, s, runner_state.obs_norm),
                                  skip_learning, state)
    return place(assembly, state), metrics


def run_iterations(assembly: Assembly, state: TrainState, first: Any, count: int):
    """Iterations [first, first + count) as one scan (`first` may be traced, `count`
    is static); learner metrics [count] per name."""
    iterations = first + jnp.arange(count, dtype=jnp.int32)
    return jax.lax.scan(lambda s, i: training_step(assembly, s, i), state, iterations)


def run_period(assembly: Assembly, state: TrainState, period: Any):
    """Log period `period` (an int, or an int32 scalar traced the same for every seed):
    its iterations, then one row of metrics with the period's evaluation."""
    per = iterations_per_period(assembly.schedule)
    state, metrics = run_iterations(assembly, state, period * per, per)
    learner_metrics = jax.tree.map(lambda m: jnp.nanmean(m, axis=0), metrics)
    return state, period_metrics(assembly, state, learner_metrics, period)


def period_metrics(assembly: Assembly, state: TrainState, learner_metrics: dict,
                   period: Any) -> dict[str, jax.Array]:
    """The metrics row at the end of log period `period`, with its evaluation."""
    returns = evaluate_returns(assembly, state.learner.actor_params, assembly.obs_stats(state),
                               eval_key(state.key, period), assembly.module_config.eval_episodes)
    env_steps = state.iteration * assembly.env_steps_per_iteration
    row = period_row(learner_metrics, env_steps=env_steps, grad_steps=state.learner.step,
                     target_update_freq=assembly.module_config.target_network_update_freq,
                     episodes=state.episodes.summary(), eval_return=jnp.mean(returns, axis=-1),
                     layout=assembly.agents)
    if assembly.on_period is not None:
        jax.debug.callback(assembly.on_period, row, ordered=True)
    return row


def run_periods(assembly: Assembly, state: TrainState, start: int, stop: int):
    """Log periods [start, stop) as one scan over the period index.

    Returns (state, metrics with a leading period axis).
    """
    periods = jnp.arange(start, stop, dtype=jnp.int32)
    return jax.lax.scan(lambda s, p: run_period(assembly, s, p), state, periods)


def make_train(config: SACConfig, sweep: Sequence[str] = (),
               mesh: jax.sharding.Mesh | None = None,
               period_callback: Callable[[dict[str, Any]], Any] | None = None
               ) -> Callable[..., Any]:
    """The whole run as one pure function, for JAX-native envs.

    Returns `train_fn(key, *swept) -> (TrainState, metrics)`, where `swept` are the
    values of the `sweep` fields (any of SWEEPABLE_FIELDS) in order, as scalars, so

        jax.jit(jax.vmap(make_train(config)))(jax.random.split(key, 8))    # 8 seeds
        jax.jit(jax.vmap(make_train(config, sweep=("critic_lr",))))(keys, lrs)

    train many seeds or settings in one compiled program.

    Args:
        config: the run's settings (a JAX env: `backend` "jax" or "auto").
        sweep: SWEEPABLE_FIELDS names whose values `train_fn` takes as traced scalars.
        mesh: the devices to train on, a `jax.sharding.Mesh` with a "data" axis
            (default: `jaxsac.sharding.default_mesh(config)`: all devices when the
            config splits evenly over them, else one device). On several devices the
            replay buffer's shards and the envs are spread over the data axis and the
            learner is replicated (jaxsac.sharding); `config.data_shards` defaults to
            the data axis's size.
        period_callback: a host function called with every log period's metrics row
            (numpy values: scalars, or [M] / [N] for the module and agent axes of a
            multi-agent run) as the compiled program reaches the period's end
            (`jax.debug.callback`, ordered; under `vmap`, once per seed with that
            seed's row): progress or timestamps from inside one program.

    Returns:
        `train_fn(key, *swept) -> (TrainState, metrics)`: metrics holds arrays with a
        leading axis of log periods (`total_env_steps // log_every`).

    Raises:
        ValueError: a config no JAX run can honour or a sweep of other fields, before
            anything is traced.
    """
    if period_callback is not None and not callable(period_callback):
        checks.fail("make_train", "period_callback", period_callback, "callable (row) -> None")
    unknown = [name for name in sweep if name not in SWEEPABLE_FIELDS]
    if unknown:
        raise ValueError(f"make_train: sweep={tuple(sweep)!r} has {unknown}, which cannot be "
                         f"swept; allowed: {list(SWEEPABLE_FIELDS)}")
    mesh = sharding.check_mesh(mesh, "make_train", config)
    config = sharding.resolve(config, mesh, "make_train")
    placement = sharding.placement(mesh)
    assemble(config, placement=placement)  # validates eagerly, outside any trace
    compilation.enable_default_cache()

    def train_fn(key: jax.Array, *swept: Any):
        if len(swept) != len(sweep):
            raise TypeError(f"train_fn takes {len(sweep)} swept value(s) {tuple(sweep)}, "
                            f"got {len(swept)}")
        values = dict(zip(sweep, swept, strict=True))
        gamma = values.pop("gamma", None)
        assembly = assemble(config, gamma, placement)._replace(on_period=period_callback)
        state = init_state(assembly, key, Hyperparams.from_config(assembly.module_config, **values))
        return run_periods(assembly, state, 0, num_periods(assembly.schedule))

    return train_fn


class JaxLoop:
    """`train`'s view of the JAX loop for `num_seeds` seeds (vmapped when more than one).

    init(keys) -> the initial TrainState (leading seed axis for several seeds).
    run_chunk(state, start, stop) -> (state, metrics rows [stop - start, (seeds,) ...]):
        log periods [start, stop), one call each of the period program, which takes the
        period as an argument (`run_period`). A run compiles two programs, the initial
        state and the log period, whatever its length and warm-up.
    The period program takes its hyperparameters from `assembly.module_config` (so a resumed
    run uses the requested ones), as constants, as make_train's program does. Each is
    jitted once per JaxLoop; `kept_jax_loop` keeps JaxLoops between calls, so a repeated
    `train` of the same config compiles nothing. Both are `compilation.KeptProgram`s on
    the mesh's devices, described by `description` (what else decides them besides the
    source: the config, the seeds and the mesh's shape; None for an env whose code is
    not jaxsac's), so with `compilation.enable_cache` a fresh process loads them without
    tracing.
    """

    donates_state = False
    env_restarts = 0  # JAX envs do not fail

    def __init__(self, assembly: Assembly, num_seeds: int, mesh: jax.sharding.Mesh,
                 description: str | None):
        self.assembly, self.num_seeds = assembly, num_seeds
        self._hparams = Hyperparams.from_config(assembly.module_config)
        devices = list(mesh.devices.flat)
        self._period = compilation.KeptProgram(
            jax.jit(self._over_seeds(self._one_period, in_axes=(0, None))), "period",
            description, devices)
        self._init = compilation.KeptProgram(
            jax.jit(jax.vmap(self._initial) if num_seeds > 1 else self._initial), "initial",
            description, devices)

    def _over_seeds(self, f: Callable, in_axes: Any = 0) -> Callable:
        # Metrics come back [periods, seeds, ...], one row per log period.
        return jax.vmap(f, in_axes=in_axes, out_axes=(0, 1)) if self.num_seeds > 1 else f

    def _initial(self, key: jax.Array) -> TrainState:
        return init_state(self.assembly, key, self._hparams)

    def _one_period(self, state: TrainState, period: jax.Array):
        pinned = state.replace(learner=state.learner.replace(hparams=self._hparams))
        new_state, row = run_period(self.assembly, pinned, period)
        return with_strong_types_of(new_state, state), jax.tree.map(lambda x: x[None], row)

    def init(self, keys: jax.Array) -> TrainState:
        return self._init(keys)

    def state_shapes(self, keys: jax.Array) -> TrainState:
        """`init(keys)`'s ShapeDtypeStructs (all seeds), from the initial-state program
        itself (a fresh process with it kept traces nothing)."""
        return self._init.output_shapes(keys)

    def run_chunk(self, state: TrainState, start: int, stop: int):
        """Log periods [start, stop) from `state`."""
        rows = []
        for period in range(start, stop):
            state, row = self._period(state, jnp.asarray(period, jnp.int32))
            rows.append(row)
        return state, jax.tree.map(lambda *xs: jnp.concatenate(xs), *rows)


def with_strong_types_of(new: Any, old: Any) -> Any:
    """`new` with each leaf that is weakly typed where `old`'s is not converted to its
    (same) dtype, strongly typed; the values are unchanged. So the period program returns
    the state with the types it took, and the next period's call reuses it: a MuJoCo
    Playground humanoid's step returns weakly typed reward metrics in its state where its
    reset returned strong ones, which compiled the period program a second time."""
    def strong(new_leaf: jax.Array, old_leaf: jax.Array) -> jax.Array:
        if jax.typeof(new_leaf).weak_type and not jax.typeof(old_leaf).weak_type:
            return jax.lax.convert_element_type(new_leaf, new_leaf.dtype)
        return new_leaf
    return jax.tree.map(strong, new, old)


def kept_jax_loop(config: SACConfig, num_seeds: int, mesh: jax.sharding.Mesh) -> JaxLoop:
    """The JaxLoop of `config` (already resolved for `mesh`) and `num_seeds`, kept for
    later calls: a repeated `train` reuses its compiled programs, also with another
    seed, length (total_env_steps), log or checkpoint folder (the NOT_COMPILED fields).

    Only programs made of jaxsac's own code are kept: one whose env, encoder or critic
    family was registered by the user could be registered again with other code under
    the same name, so it is built afresh each time and never written to disk."""
    if envs.is_registered_by_user(config.env_id) or envs.is_registered_by_user(
            config.eval_env[0]) or not uses_builtin_networks(config):
        return JaxLoop(assemble(config, placement=sharding.placement(mesh)), num_seeds,
                       mesh, None)
    return _cached_jax_loop(program_config(config), num_seeds, mesh)


@functools.lru_cache(maxsize=16)
def _cached_jax_loop(config: SACConfig, num_seeds: int, mesh: jax.sharding.Mesh) -> JaxLoop:
    # A Playground task's code is not jaxsac's and could change under the same config
    # (another version of the package): kept in memory, never on disk.
    description = repr((config, num_seeds, mesh.axis_names, mesh.devices.shape)) \
        if envs.is_jaxsac_code(config.env_id) and envs.is_jaxsac_code(config.eval_env[0]) \
        else None
    return JaxLoop(assemble(config, placement=sharding.placement(mesh)), num_seeds,
                   mesh, description)
