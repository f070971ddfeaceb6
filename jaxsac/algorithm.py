"""The SAC training loop: `training_step`, the fully jitted `make_train`, and `train`.

One *iteration* is REFERENCE.md's training step: every env steps once (uniform random
actions during warm-up, then the stochastic policy), the steps go into the replay
buffer, and once `learning_starts` steps are stored the learner takes
`round(utd_ratio * num_envs)` gradient steps, each on a fresh sample, each followed by
the priority update. Iterations are grouped into *log periods* of `log_every` env
steps; each period ends with a row of metrics and a deterministic evaluation.

Every random draw of iteration i comes from `fold_in(key, i)`, so a run does not depend
on its total length: running in chunks, resuming, or extending a finished run gives the
same bits as one uninterrupted call.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from jaxsac import connectors, envs, sharding
from jaxsac.config import SACConfig
from jaxsac.env_runner import GymRunner, make_jax_runner
from jaxsac.learner import Hyperparams, Learner, LearnerState, make_learner
from jaxsac.logger import RunLogger
from jaxsac.replay import ReplayBuffer, ReplayState, episode_buffer, scheduled_beta
from jaxsac.types import Step

EPISODE_WINDOW = 100
"""Completed episodes averaged in `episode_return_mean` (REFERENCE.md)."""

SWEEPABLE = ("actor_lr", "critic_lr", "alpha_lr", "tau", "initial_alpha", "gamma")
"""SACConfig fields `make_train(config, sweep=...)` takes as traced arguments."""

LEARNER_METRICS = ("qf_loss", "policy_loss", "alpha_loss", "alpha", "log_alpha", "entropy",
                   "q_mean", "q_min", "q_max", "td_error_mean", "target_updates")


class Phase(enum.Enum):
    """What an iteration does; static, so each phase compiles to its own scan."""

    WARMUP = "warmup"  # random actions, no gradient steps
    FIRST_UPDATE = "first_update"  # random actions; learning_starts now stored: update
    LEARN = "learn"  # policy actions and gradient steps


@flax.struct.dataclass
class EpisodeStats:
    """The last `EPISODE_WINDOW` completed episodes (a ring) and how many completed."""

    returns: jax.Array  # [EPISODE_WINDOW] float32
    lengths: jax.Array  # [EPISODE_WINDOW] int32
    count: jax.Array  # [] int32, episodes completed so far

    @classmethod
    def empty(cls) -> EpisodeStats:
        return cls(jnp.zeros(EPISODE_WINDOW, jnp.float32), jnp.zeros(EPISODE_WINDOW, jnp.int32),
                   jnp.zeros((), jnp.int32))

    def record(self, done: jax.Array, returns: jax.Array, lengths: jax.Array) -> EpisodeStats:
        """Push the episodes that ended (done [E] bool, returns/lengths [E])."""
        slot = (self.count + jnp.cumsum(done) - 1) % EPISODE_WINDOW
        slot = jnp.where(done, slot, EPISODE_WINDOW)  # out of range: dropped
        return EpisodeStats(
            returns=self.returns.at[slot].set(returns, mode="drop"),
            lengths=self.lengths.at[slot].set(lengths, mode="drop"),
            count=self.count + jnp.sum(done, dtype=jnp.int32),
        )

    def summary(self) -> dict[str, jax.Array]:
        """Mean return and length over the window (NaN before any episode ended)."""
        filled = jnp.arange(EPISODE_WINDOW) < self.count
        n = jnp.maximum(jnp.sum(filled), 1)
        mean = lambda x: jnp.where(self.count > 0, jnp.sum(jnp.where(filled, x, 0)) / n, jnp.nan)
        return {"episode_return_mean": mean(self.returns),
                "episode_length_mean": mean(self.lengths.astype(jnp.float32)),
                "num_episodes": self.count}


@flax.struct.dataclass
class TrainState:
    """Everything a run carries from one iteration to the next (a pytree)."""

    learner: LearnerState
    buffer: ReplayState
    runner: Any  # RunnerState of the JAX runner; None in the gymnasium loop
    key: jax.Array  # the run's root key; iteration i draws from fold_in(key, i)
    iteration: jax.Array  # [] int32, iterations done (env steps = iteration * num_envs)
    episodes: EpisodeStats


class TrainResult(NamedTuple):
    """What `train` returns.

    state: the final TrainState (leading seed axis when several seeds were trained).
    metrics: dict of numpy arrays, leading axis = log periods ([periods, seeds] for seeds).
    config: the SACConfig of the run.
    log_dir: where metrics.csv, TensorBoard events and curve.png went (or None).
    """

    state: TrainState
    metrics: dict[str, np.ndarray]
    config: SACConfig
    log_dir: str | None


# --- static schedule ---------------------------------------------------------------


def warmup_iterations(config: SACConfig) -> int:
    """Iterations with random actions: ceil(learning_starts / num_envs)."""
    return -(-config.learning_starts // config.num_envs)


def iterations_per_period(config: SACConfig) -> int:
    return config.log_every // config.num_envs


def num_periods(config: SACConfig) -> int:
    return config.total_env_steps // config.log_every


def gradient_schedule(config: SACConfig) -> tuple[int, int]:
    """(gradient steps per update iteration, iterations between update iterations).

    round(utd_ratio * num_envs) per iteration when that is at least one, else one every
    round(1 / (utd_ratio * num_envs)) iterations.
    """
    per_iteration = config.utd_ratio * config.num_envs
    if round(per_iteration) >= 1:
        return round(per_iteration), 1
    return 1, max(1, round(1.0 / per_iteration))


def phase_of(config: SACConfig, iteration: int) -> Phase:
    warmup = warmup_iterations(config)
    if iteration < warmup - 1:
        return Phase.WARMUP
    if iteration == warmup - 1:
        return Phase.FIRST_UPDATE
    return Phase.LEARN


def segments(config: SACConfig, start: int, stop: int) -> list[tuple[Phase, int]]:
    """Iterations [start, stop) as consecutive (phase, count) runs."""
    warmup = warmup_iterations(config)
    cuts = [start, *(b for b in (warmup - 1, warmup) if start < b < stop), stop]
    out: list[tuple[Phase, int]] = []
    for begin, end in zip(cuts, cuts[1:], strict=False):
        phase = phase_of(config, begin)
        if out and out[-1][0] is phase:
            out[-1] = (phase, out[-1][1] + end - begin)
        else:
            out.append((phase, end - begin))
    return out


def validate_schedule(config: SACConfig) -> None:
    """Errors for settings the loop cannot honour, naming the fields."""
    if config.log_every % config.num_envs:
        raise ValueError(f"SACConfig.log_every={config.log_every} must be a multiple of "
                         f"num_envs={config.num_envs}")
    if config.total_env_steps % config.log_every:
        raise ValueError(f"SACConfig.total_env_steps={config.total_env_steps} must be a "
                         f"multiple of log_every={config.log_every}")
    if config.batch_size > config.buffer_capacity:
        raise ValueError(f"SACConfig.batch_size={config.batch_size} must be at most "
                         f"buffer_capacity={config.buffer_capacity}")
    if config.num_agents > 1 or envs.is_multi_agent(config.env_id):
        from jaxsac import multi_agent

        multi_agent.validate(config)


# --- the program's pieces ----------------------------------------------------------


class Program(NamedTuple):
    """The pure pieces of one run, built from a config (and swept values)."""

    config: SACConfig
    env: Any
    learner: Learner
    buffer: ReplayBuffer
    runner: Any
    env_to_module: connectors.EnvToModule
    obs_dim: int
    act_dim: int
    agents: Any = None  # multi_agent.AgentLayout of a multi-agent env, else None
    placement: sharding.Placement | None = None  # None: one device, nothing placed


def build_program(config: SACConfig, gamma: Any = None,
                  placement: sharding.Placement | None = None) -> Program:
    """Learner, buffer and JAX runner for `config`; `gamma` may be traced (a sweep).

    `placement` puts the state's arrays on a device mesh (jaxsac.sharding).
    """
    validate_schedule(config)
    if envs.is_multi_agent(config.env_id):
        from jaxsac import multi_agent

        check_one_shard(config, placement)
        return multi_agent.build_program(config, gamma)
    env = make_env(config)
    obs_dim = connectors.flat_obs_dim(env.observation_space)
    act_dim = int(np.prod(env.action_space.shape))
    learner = make_learner(config, obs_dim, act_dim)
    buffer = make_buffer(config, config.gamma if gamma is None else gamma)
    runner = make_jax_runner(env, config.num_envs, normalize_obs=config.normalize_obs)
    return Program(config, env, learner, buffer, runner,
                   connectors.EnvToModule(normalize=config.normalize_obs), obs_dim, act_dim,
                   placement=placement)


def check_one_shard(config: SACConfig, placement: sharding.Placement | None) -> None:
    """Multi-agent envs run on one device with one data shard; errors otherwise."""
    if placement is not None:
        raise ValueError(f"make_train/train: a mesh of {placement.mesh.devices.size} devices "
                         f"is invalid for the multi-agent env {config.env_id!r}: it runs on one "
                         "device; pass a one-device mesh (jaxsac.sharding.make_mesh(devices[:1]))")
    if config.num_data_shards > 1:
        raise ValueError(f"SACConfig.data_shards={config.data_shards} is invalid for the "
                         f"multi-agent env {config.env_id!r}: must be 1 or None")


def make_env(config: SACConfig):
    """The JAX env of `config` (an error naming the env when it has none)."""
    backend = "jax" if config.backend == "auto" else config.backend
    if backend != "jax":
        raise ValueError(f"SACConfig.backend={config.backend!r}: this path needs a JAX env; "
                         "use train(config) for gymnasium envs")
    return envs.make(config.env_id, backend="jax")


def make_buffer(config: SACConfig, gamma: Any) -> ReplayBuffer:
    """The replay buffer of `config`: one episode buffer, or `data_shards` of them."""
    shards = config.num_data_shards
    shard = episode_buffer(
        config.buffer_capacity // shards, config.num_envs // shards,
        config.batch_size // shards, n_step=config.n_step,
        gamma=gamma, prioritized=config.prioritized, alpha=config.priority_alpha,
        beta=config.priority_beta, eps=config.priority_eps,
        beta_final=config.priority_beta_final, beta_steps=config.priority_beta_steps)
    if shards == 1:
        return shard

    def beta(state: ReplayState) -> jax.Array:
        return scheduled_beta(state.priority_updates, config.priority_beta,
                              config.priority_beta_final, config.priority_beta_steps)

    return sharding.sharded_buffer(shard, shards, beta if config.prioritized else None)


def example_step(obs_dim: int, act_dim: int) -> Step:
    """One unbatched Step of zeros: the shapes `buffer.init` allocates for."""
    zero_obs = jnp.zeros((obs_dim,), jnp.float32)
    no = jnp.zeros((), bool)
    return Step(zero_obs, jnp.zeros((act_dim,), jnp.float32), jnp.zeros((), jnp.float32),
                no, no, zero_obs)


def iteration_keys(root: jax.Array, iteration: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(acting key, update key) of one iteration: a function of the iteration alone."""
    return tuple(jax.random.split(jax.random.fold_in(jax.random.fold_in(root, 0), iteration)))


def eval_key(root: jax.Array, period: jax.Array) -> jax.Array:
    return jax.random.fold_in(jax.random.fold_in(root, 1), period)


def gradient_steps(program: Program, learner_state: LearnerState, buffer_state: ReplayState,
                   obs_stats: Any, key: jax.Array, num_steps: int):
    """`num_steps` gradient steps, each on a fresh sample followed by the priority update.

    Returns (learner state, buffer state, metrics averaged over the steps).
    """

    def one(carry, step_key):
        lstate, bstate = carry
        sample_key, update_key = jax.random.split(step_key)
        batch = program.buffer.sample(bstate, sample_key)
        batch = program.env_to_module.normalize_batch(obs_stats, batch)
        lstate, metrics, td_error = program.learner.update(lstate, batch, update_key)
        bstate = program.buffer.update_priorities(bstate, batch.indices, td_error)
        return (lstate, bstate), metrics

    keys = jax.random.split(key, num_steps)
    (learner_state, buffer_state), metrics = jax.lax.scan(one, (learner_state, buffer_state), keys)
    return learner_state, buffer_state, jax.tree.map(lambda m: jnp.mean(m, axis=0), metrics)


def nan_learner_metrics(shape: tuple[int, ...] = ()) -> dict[str, jax.Array]:
    """NaN learner metrics (no gradient step); shape [M] for M stacked modules."""
    return {name: jnp.full(shape, jnp.nan) for name in LEARNER_METRICS}


def learn_from(program: Program, state: TrainState, obs_stats: Any, key: jax.Array):
    """The gradient steps due after iteration `state.iteration - 1`'s add."""
    per_iteration, every = gradient_schedule(program.config)

    def run(_):
        return gradient_steps(program, state.learner, state.buffer, obs_stats, key,
                              per_iteration)

    if every == 1:
        return run(None)
    due = (state.iteration - 1) % every == 0
    skip = lambda _: (state.learner, state.buffer, nan_learner_metrics(state.learner.step.shape))
    return jax.lax.cond(due, run, skip, None)


def absorb(program: Program, state: TrainState, step: Step, episodes: Any, obs_stats: Any,
           phase: Phase):
    """Everything of an iteration after the env step: add the steps, count the
    iteration and its finished episodes, then the gradient steps due (none in WARMUP).

    step: Step [E]; episodes: EpisodeInfo [E]. Returns (state, learner metrics, NaN when
    no gradient step was taken). Shared by the JAX path and the gymnasium loop.
    """
    state = state.replace(
        buffer=program.buffer.add(state.buffer, step),
        iteration=state.iteration + 1,
        episodes=state.episodes.record(episodes.done, episodes.episode_return,
                                       episodes.episode_length),
    )
    if phase is Phase.WARMUP:
        return state, nan_learner_metrics(state.learner.step.shape)
    _, update_key = iteration_keys(state.key, state.iteration - 1)
    learner_state, buffer_state, metrics = learn_from(program, state, obs_stats, update_key)
    return state.replace(learner=learner_state, buffer=buffer_state), metrics


def act_fn_for(program: Program, actor_params: Any, phase: Phase):
    """Module actions [E, act_dim] in [-1, 1]: uniform random until learning starts."""
    if phase is Phase.LEARN:
        return lambda obs, key: program.learner.act(actor_params, obs, key)
    return lambda obs, key: connectors.random_module_action(key, obs.shape[0], program.act_dim)


def training_step(program: Program, state: TrainState, phase: Phase):
    """One iteration (REFERENCE.md "Training step") of the JAX path.

    Returns (state, learner metrics of this iteration, NaN when it took no gradient step).
    """
    act_key, _ = iteration_keys(state.key, state.iteration)
    act_fn = act_fn_for(program, state.learner.actor_params, phase)
    runner_state, step, episodes = program.runner.step(state.runner, act_fn, act_key)
    state = state.replace(runner=runner_state)
    state, metrics = absorb(program, state, step, episodes, runner_state.obs_norm, phase)
    return place(program, state), metrics


def place(program: Program, state: TrainState) -> TrainState:
    """`state` constrained to the program's placement (unchanged on one device)."""
    return state if program.placement is None else program.placement.constrain(state)


def run_segment(program: Program, state: TrainState, phase: Phase, count: int):
    """`count` iterations of `phase` as one scan; learner metrics [count] per name."""
    return jax.lax.scan(lambda s, _: training_step(program, s, phase), state, None, length=count)


def run_period(program: Program, state: TrainState, period: int):
    """Log period `period` (static): its iterations, then one row of metrics."""
    per = iterations_per_period(program.config)
    collected = []
    for phase, count in segments(program.config, period * per, (period + 1) * per):
        state, metrics = run_segment(program, state, phase, count)
        collected.append(metrics)
    learner_metrics = jax.tree.map(lambda *xs: jnp.nanmean(jnp.concatenate(xs), axis=0),
                                   *collected)
    return state, period_metrics(program, state, learner_metrics, period)


def period_metrics(program: Program, state: TrainState, learner_metrics: dict,
                   period: Any) -> dict[str, jax.Array]:
    if program.agents is not None:
        from jaxsac import multi_agent

        return multi_agent.period_metrics(program, state, learner_metrics, period)
    eval_returns = evaluate_jax(program, state.learner.actor_params,
                                state.runner.obs_norm,
                                eval_key(state.key, period), program.config.eval_episodes)
    return {
        **learner_metrics,
        "env_steps": state.iteration * program.config.num_envs,
        "grad_steps": state.learner.step,
        "target_updates": state.learner.step // program.config.target_network_update_freq,
        **state.episodes.summary(),
        "eval_return": jnp.mean(eval_returns),
    }


def first_steady_period(config: SACConfig) -> int:
    """The first log period made only of LEARN iterations."""
    return -(-warmup_iterations(config) // iterations_per_period(config))


def run_generator_key(key: jax.Array, impl: str) -> jax.Array:
    """A key of the `jax.random` implementation `impl` drawn from `key` (any implementation,
    typed or a raw uint32 key): the same `key` always gives the same result."""
    words = jax.random.bits(key, (2,), jnp.uint32)  # the key data of both PRNG_IMPLS
    return jax.random.wrap_key_data(words, impl=impl)


def init_state(program: Program, key: jax.Array, hparams: Hyperparams) -> TrainState:
    """The state before the first iteration (`runner` None for the gymnasium loop).

    Every key of the run derives from `key`, re-keyed for `config.prng_impl`.
    """
    key = run_generator_key(key, program.config.prng_impl)
    learner_key, runner_key, run_key = jax.random.split(key, 3)
    return place(program, TrainState(
        learner=program.learner.init(learner_key, hparams),
        buffer=program.buffer.init(example_step(program.obs_dim, program.act_dim)),
        runner=None if program.runner is None else program.runner.init(runner_key),
        key=run_key,
        iteration=jnp.zeros((), jnp.int32),
        episodes=empty_episode_stats(program),
    ))


def empty_episode_stats(program: Program) -> Any:
    """EpisodeStats, or one per agent (multi_agent.AgentEpisodeStats) for several agents."""
    if program.agents is None:
        return EpisodeStats.empty()
    from jaxsac import multi_agent

    return multi_agent.AgentEpisodeStats.empty(program.agents.num_agents)


def run_periods(program: Program, state: TrainState, start: int, stop: int):
    """Log periods [start, stop): warm-up periods one by one, the steady ones in one scan.

    Returns (state, metrics with a leading period axis).
    """
    rows = []
    steady = max(start, min(stop, first_steady_period(program.config)))
    for period in range(start, steady):
        state, row = run_period(program, state, period)
        rows.append(jax.tree.map(lambda x: x[None], row))
    if stop > steady:
        def body(s, period):
            return run_steady_period(program, s, period)
        state, steady_rows = jax.lax.scan(body, state, jnp.arange(steady, stop))
        rows.append(steady_rows)
    return state, jax.tree.map(lambda *xs: jnp.concatenate(xs), *rows)


def run_steady_period(program: Program, state: TrainState, period: jax.Array):
    """A log period of LEARN iterations only (period may be traced)."""
    state, metrics = run_segment(program, state, Phase.LEARN,
                                 iterations_per_period(program.config))
    learner_metrics = jax.tree.map(lambda m: jnp.nanmean(m, axis=0), metrics)
    return state, period_metrics(program, state, learner_metrics, period)


def make_train(config: SACConfig, sweep: Sequence[str] = (),
               mesh: jax.sharding.Mesh | None = None) -> Callable[..., Any]:
    """The whole run as one pure function, for JAX-native envs.

    Returns `train_fn(key, *swept) -> (TrainState, metrics)`, where `swept` are the
    values of the `sweep` fields (any of SWEEPABLE) in order, as scalars, so

        jax.jit(jax.vmap(make_train(config)))(jax.random.split(key, 8))    # 8 seeds
        jax.jit(jax.vmap(make_train(config, sweep=("critic_lr",))))(keys, lrs)

    train many seeds or settings in one compiled program. `metrics` holds arrays with a
    leading axis of log periods (`total_env_steps // log_every`).

    mesh: the devices to train on, a `jax.sharding.Mesh` with a "data" axis (default:
    `jaxsac.sharding.default_mesh(config)`: all devices when the config splits evenly
    over them, else one device). On several devices the replay buffer's
    shards and the envs are spread over the data axis and the learner is replicated
    (jaxsac.sharding); `config.data_shards` defaults to the data axis's size.
    """
    unknown = [name for name in sweep if name not in SWEEPABLE]
    if unknown:
        raise ValueError(f"make_train: sweep={tuple(sweep)!r} has {unknown}, which cannot be "
                         f"swept; allowed: {list(SWEEPABLE)}")
    mesh = sharding.check_mesh(mesh, "make_train", config)
    config = sharding.resolve(config, mesh, "make_train")
    placement = sharding.placement(mesh)
    build_program(config)  # validates the config and env eagerly, outside any trace

    def train_fn(key: jax.Array, *swept: Any):
        if len(swept) != len(sweep):
            raise TypeError(f"train_fn takes {len(sweep)} swept value(s) {tuple(sweep)}, "
                            f"got {len(swept)}")
        values = dict(zip(sweep, swept, strict=True))
        gamma = values.pop("gamma", None)
        program = build_program(config, gamma, placement)
        state = init_state(program, key, Hyperparams.from_config(config, **values))
        return run_periods(program, state, 0, num_periods(config))

    return train_fn


# --- evaluation --------------------------------------------------------------------


def evaluate_jax(program: Program, actor_params: Any, obs_stats: Any, key: jax.Array,
                 num_episodes: int) -> jax.Array:
    """Deterministic-policy returns [num_episodes] of full episodes of the JAX env."""
    env = program.env
    horizon = env.max_episode_steps
    reset_keys = jax.random.split(key, num_episodes)
    env_states, obs = jax.vmap(env.reset)(reset_keys)

    to_env = connectors.module_to_env(env.action_space)

    def step(carry, step_key):
        env_states, obs, total, done = carry
        module_obs = program.env_to_module.apply(obs_stats, connectors.flatten_obs(obs))
        action = program.learner.act(actor_params, module_obs, step_key, deterministic=True)
        env_states, obs, reward, terminated, truncated = jax.vmap(env.step)(
            env_states, to_env(action), jax.random.split(step_key, num_episodes))
        total = total + jnp.where(done, 0.0, reward)
        return (env_states, obs, total, done | terminated | truncated), None

    start = (env_states, obs, jnp.zeros(num_episodes), jnp.zeros(num_episodes, bool))
    step_keys = jax.random.split(jax.random.fold_in(key, 1), horizon)
    (_, _, total, _), _ = jax.lax.scan(step, start, step_keys)
    return total


def evaluate(config: SACConfig, actor_params: Any, key: jax.Array, num_episodes: int = 10,
             obs_stats: Any = None) -> np.ndarray:
    """Returns [num_episodes] of the deterministic policy tanh(μ) on `config.env_id`.

    JAX envs run as one jitted program; gymnasium envs run in a host loop. Multi-agent
    envs give [num_agents, num_episodes] (`jaxsac.multi_agent.evaluate`).
    `obs_stats`: observation-normalization statistics when `config.normalize_obs`.
    """
    if envs.is_multi_agent(config.env_id):
        from jaxsac import multi_agent

        return multi_agent.evaluate(config, actor_params, key, num_episodes, obs_stats)
    if uses_jax_env(config):
        program = build_program(config.replace(total_env_steps=0))
        stats = obs_stats if obs_stats is not None else program.env_to_module.init(
            program.obs_dim)
        run = jax.jit(lambda p, s, k: evaluate_jax(program, p, s, k, num_episodes))
        return np.asarray(run(actor_params, stats, key))
    return evaluate_gymnasium(config, actor_params, key, num_episodes, obs_stats)


def uses_jax_env(config: SACConfig) -> bool:
    if config.backend == "gymnasium":
        return False
    if config.backend == "jax" and not envs.has_jax_env(config.env_id):
        raise ValueError(f"SACConfig.backend='jax' but env_id={config.env_id!r} has no JAX "
                         f"implementation; JAX envs: {sorted(envs.JAX_ENVS)}")
    return envs.has_jax_env(config.env_id)


# --- train: chunked JAX runs and the gymnasium loop -----------------------------------


def train(config: SACConfig, num_seeds: int = 1, progress: bool = True,
          mesh: jax.sharding.Mesh | None = None) -> TrainResult:
    """Train `config` on any backend, with progress, logs and a learning curve.

    JAX envs run the jitted program one log period per call (identical to one
    `make_train` call for the same key); `num_seeds > 1` trains seeds
    `split(key(config.seed), num_seeds)` vmapped in one program. Gymnasium envs run a
    host loop (one seed) with the buffer on the device. Logs go to `config.log_dir`.

    mesh: as for `make_train` for JAX envs; the gymnasium loop
    runs on one device, and a mesh of several devices or `data_shards > 1` is an error.
    """
    if not isinstance(num_seeds, int) or num_seeds < 1:
        raise ValueError(f"train: num_seeds={num_seeds!r} is invalid: must be an integer >= 1")
    validate_schedule(config)
    if uses_jax_env(config):
        mesh = sharding.check_mesh(mesh, "train", config)
        config = sharding.resolve(config, mesh, "train")
        return _train_jax(config, num_seeds, progress, sharding.placement(mesh))
    if num_seeds != 1:
        raise ValueError(f"train: num_seeds={num_seeds} needs a JAX env; {config.env_id!r} "
                         "runs on gymnasium, one seed per process")
    check_one_device(config, mesh)
    return _train_gymnasium(config, progress)


def check_one_device(config: SACConfig, mesh: jax.sharding.Mesh | None) -> None:
    """The gymnasium loop runs on one device with one data shard; errors otherwise."""
    if mesh is not None and sharding.check_mesh(mesh, "train", config).devices.size > 1:
        raise ValueError(f"train: mesh of {mesh.devices.size} devices is invalid for "
                         f"{config.env_id!r} on the gymnasium backend: the host loop runs on "
                         "one device; pass mesh=None or a one-device mesh")
    if config.num_data_shards > 1:
        raise ValueError(f"SACConfig.data_shards={config.data_shards} is invalid for "
                         f"{config.env_id!r} on the gymnasium backend: must be 1 or None (the "
                         "host loop runs one shard)")


def run_keys(config: SACConfig, num_seeds: int) -> jax.Array:
    """The key of each seed: key(seed), or split(key(seed), num_seeds) for several."""
    key = jax.random.key(config.seed)
    return key if num_seeds == 1 else jax.random.split(key, num_seeds)


def _train_jax(config: SACConfig, num_seeds: int, progress: bool,
               placement: sharding.Placement | None) -> TrainResult:
    program = build_program(config, placement=placement)
    keys = run_keys(config, num_seeds)

    def over_seeds(f, in_axes=0):
        # Metrics come back [periods, seeds, ...], one row per log period.
        return jax.vmap(f, in_axes=in_axes, out_axes=(0, 1)) if num_seeds > 1 else f

    initial = lambda key: init_state(program, key, Hyperparams.from_config(config))
    # Every chunk takes its hyperparameters from the config (so a resumed run uses the
    # requested ones), as constants, as make_train's program does.
    hparams = Hyperparams.from_config(config)
    pin = lambda s: s.replace(learner=s.learner.replace(hparams=hparams))

    def steady_chunk(state: TrainState, period: jax.Array):
        state, row = run_steady_period(program, pin(state), period)
        return state, jax.tree.map(lambda x: x[None], row)

    steady = jax.jit(over_seeds(steady_chunk, in_axes=(0, None)))

    def run_chunk(state: TrainState, start: int, stop: int):
        if start == 0:
            # The initial state is computed again inside this program: XLA then compiles
            # the first periods exactly as in make_train's program, bit for bit (with the
            # state as an argument its fusions, and so its rounding, differ).
            return jax.jit(over_seeds(lambda key: run_periods(program, initial(key), 0,
                                                              stop)))(keys)
        if start >= first_steady_period(config):
            return steady(state, jnp.asarray(start, jnp.int32))
        return jax.jit(over_seeds(lambda s: run_periods(program, pin(s), start, stop)))(state)

    state = jax.jit(jax.vmap(initial) if num_seeds > 1 else initial)(keys)
    return run_host_periods(config, state, run_chunk, num_seeds, progress,
                            fused_periods=first_steady_period(config))


def log_chunks(config: SACConfig, start: int, fused_periods: int) -> list[tuple[int, int]]:
    """The chunks [a, b) of log periods `train` runs from period `start`, with host work
    (logs, checkpoints) between them: periods before `fused_periods` in one chunk when
    starting from 0, then one period per chunk."""
    stop = num_periods(config)
    if start == 0 and fused_periods > 0:
        first = min(fused_periods, stop)
        return [(0, first)] + [(p, p + 1) for p in range(first, stop)]
    return [(p, p + 1) for p in range(start, stop)]


def run_host_periods(config: SACConfig, state: TrainState,
                     run_chunk: Callable[[TrainState, int, int], tuple[TrainState, dict]],
                     num_seeds: int, progress: bool, runner: GymRunner | None = None,
                     fused_periods: int = 0) -> TrainResult:
    """The log periods of `train` from the host: resume, log, checkpoint, stop on NaN.

    run_chunk(state, start, stop) -> (state, metrics [stop - start, ...]) runs log periods
    [start, stop); see `log_chunks` for how the run is cut.
    """
    checkpoints = Checkpoints(config, runner)
    state = checkpoints.resume(state)
    start = int(np.max(jax.device_get(state.iteration))) * config.num_envs // config.log_every
    first = jax.process_index() == 0  # on several hosts only the first one logs
    logger = RunLogger(config.log_dir if first else None, config.total_env_steps, num_seeds,
                       progress and first, start_env_steps=start * config.log_every)
    rows = []
    try:
        for chunk_start, chunk_stop in log_chunks(config, start, fused_periods):
            # The gymnasium loop donates its state to the device; keep a copy to save
            # should this chunk end in NaNs.
            previous = (jax.tree.map(jnp.copy, state) if runner is not None and
                        checkpoints.directory else state)
            new_state, chunk_rows = run_chunk(state, chunk_start, chunk_stop)
            chunk_rows = jax.device_get(chunk_rows)
            for i in range(chunk_stop - chunk_start):
                row = jax.tree.map(lambda x, i=i: x[i], chunk_rows)
                if not all_finite(row, new_state.learner):
                    checkpoints.save(previous, final=True)
                    period = chunk_start + i
                    raise FloatingPointError(
                        f"non-finite losses or parameters in log period {period} (env steps "
                        f"{period * config.log_every}..{(period + 1) * config.log_every}); the "
                        f"last finite state was saved" + checkpoints.where())
                rows.append(row)
                logger.log(row)
            state = new_state
            checkpoints.maybe_save(state, last=chunk_stop == num_periods(config))
    finally:
        logger.close()
    return TrainResult(state, stack_rows(rows), config, config.log_dir)


def all_finite(row: dict[str, Any], learner_state: LearnerState) -> bool:
    """Finite losses (they are NaN only before the first gradient step) and parameters."""
    learned = np.asarray(row["grad_steps"]) > 0
    losses_ok = all(not np.any(learned & ~np.isfinite(np.asarray(row[name])))
                    for name in ("qf_loss", "policy_loss", "alpha_loss"))
    params = (learner_state.actor_params, learner_state.critic_params, learner_state.log_alpha)
    return losses_ok and all(bool(jnp.all(jnp.isfinite(x))) for x in jax.tree.leaves(params))


class Checkpoints:
    """`train`'s use of jaxsac.checkpoint: resume, periodic and final saves.

    For the gymnasium loop the host runner's observation statistics travel in
    `TrainState.runner`.
    """

    def __init__(self, config: SACConfig, runner: GymRunner | None = None):
        self.config, self.runner = config, runner
        self.directory = config.checkpoint_dir
        self._last_saved = -1

    def where(self) -> str:
        return f" to {self.directory}" if self.directory else " (no checkpoint_dir set)"

    def resume(self, state: TrainState) -> TrainState:
        if not (self.config.resume and self.directory):
            return state
        from jaxsac import checkpoint

        if checkpoint.latest_step(self.directory) is None:
            return state
        restored, _ = checkpoint.restore(self.directory, config=self.config,
                                         like=self._with_runner(state))
        # Hyperparameters come from the requested config, as in an uninterrupted run.
        restored = restored.replace(
            learner=restored.learner.replace(hparams=state.learner.hparams))
        self._last_saved = self.env_steps(restored)
        if self.runner is not None:
            self.runner.obs_norm = restored.runner
            restored = restored.replace(runner=None)
        return restored

    def _with_runner(self, state: TrainState) -> TrainState:
        if self.runner is None:
            return state
        return state.replace(runner=self.runner.obs_norm)

    def env_steps(self, state: TrainState) -> int:
        return int(np.max(jax.device_get(state.iteration))) * self.config.num_envs

    def maybe_save(self, state: TrainState, last: bool) -> None:
        every = self.config.checkpoint_every
        steps = self.env_steps(state)
        if last or (every and steps // every > max(self._last_saved, 0) // every):
            self.save(state)

    def save(self, state: TrainState, final: bool = False) -> None:
        if not self.directory:
            return
        from jaxsac import checkpoint

        steps = self.env_steps(state)
        if steps == self._last_saved:
            return
        checkpoint.save(self.directory, self._with_runner(state), self.config, steps)
        self._last_saved = steps


def stack_rows(rows: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    if not rows:
        return {}
    return {k: np.stack([np.asarray(r[k]) for r in rows]) for k in rows[0]}


def host_program(config: SACConfig, runner: GymRunner) -> Program:
    """The learner and buffer for a gymnasium runner (no JAX env, no JAX runner)."""
    learner = make_learner(config, runner.obs_dim, runner.act_dim)
    return Program(config, None, learner, make_buffer(config, config.gamma), None,
                   connectors.EnvToModule(normalize=config.normalize_obs),
                   runner.obs_dim, runner.act_dim)


def _train_gymnasium(config: SACConfig, progress: bool) -> TrainResult:
    runner = GymRunner(config.env_id, config.num_envs, config.vectorization,
                       config.max_env_restarts, config.seed, config.normalize_obs)
    try:
        program = host_program(config, runner)
        state = jax.jit(lambda key: init_state(program, key, Hyperparams.from_config(config)))(
            jax.random.key(config.seed))
        loop = HostLoop(program, runner)
        return run_host_periods(config, state, loop.run_chunk, 1, progress, runner)
    finally:
        runner.close()


class HostLoop:
    """Steps a GymRunner from the host in blocks of `config.host_block_steps` iterations.

    Within a block the host only steps the envs, acting with the policy and the
    observation statistics of the block's start; the block's rows then reach the
    device in one transfer, and one jitted call unpacks them, updates the statistics,
    adds them and takes their gradient steps.
    """

    def __init__(self, program: Program, runner: GymRunner):
        self.program, self.runner = program, runner
        learner, to_module = program.learner, program.env_to_module

        def policy(actor_params, obs_stats, raw_obs, root, iteration):
            obs = to_module.apply(obs_stats, raw_obs)
            return learner.act(actor_params, obs, iteration_keys(root, iteration)[0])

        def random(actor_params, obs_stats, raw_obs, root, iteration):
            key = iteration_keys(root, iteration)[0]
            return connectors.random_module_action(key, raw_obs.shape[0], program.act_dim)

        self._act = {Phase.LEARN: jax.jit(policy), Phase.WARMUP: jax.jit(random),
                     Phase.FIRST_UPDATE: jax.jit(random)}
        self._blocks: dict[tuple[Phase, int], Callable] = {}
        self._learner_metrics: list[dict[str, np.ndarray]] = []

    def block(self, phase: Phase, size: int) -> Callable:
        """Jitted (state, rows [size, E, packed_width], obs_stats) -> (state, learner
        metrics [size], obs_stats after the rows); the state is donated."""
        if (phase, size) not in self._blocks:
            def run(state, rows, obs_stats):
                steps, episodes = self.runner.unpack(rows)
                obs_stats = jax.lax.scan(
                    lambda stats, next_obs: (self.program.env_to_module.update(stats, next_obs),
                                             None), obs_stats, steps.next_obs)[0]

                def body(s, xs):
                    return absorb(self.program, s, *xs, obs_stats, phase)
                state, metrics = jax.lax.scan(body, state, (steps, episodes))
                return state, metrics, obs_stats
            self._blocks[phase, size] = jax.jit(run, donate_argnums=0)
        return self._blocks[phase, size]

    def run_period(self, state: TrainState, period: int):
        """One log period: its iterations block by block, then its metrics row."""
        per = iterations_per_period(self.program.config)
        for phase, count in segments(self.program.config, period * per, (period + 1) * per):
            state = self.run(state, phase, count)
        return state, self.period_metrics(state, period)

    def run_chunk(self, state: TrainState, start: int, stop: int):
        """Log periods [start, stop): (state, metrics rows stacked [stop - start])."""
        rows = []
        for period in range(start, stop):
            state, row = self.run_period(state, period)
            rows.append(row)
        return state, stack_rows(rows)

    def run(self, state: TrainState, phase: Phase, count: int) -> TrainState:
        block_steps = self.program.config.host_block_steps
        iteration = int(state.iteration)
        act = self._act[phase]
        stop = iteration + count
        while iteration < stop:
            size = min(block_steps, stop - iteration)
            rows = np.empty((size, self.runner.num_envs, self.runner.packed_width), np.float32)
            for i in range(size):
                action = act(state.learner.actor_params, self.runner.obs_norm,
                             self.runner.raw_obs, state.key, iteration + i)
                rows[i] = self.runner.step_packed(action)
            state, metrics, self.runner.obs_norm = self.block(phase, size)(
                state, rows, self.runner.obs_norm)
            if phase is not Phase.WARMUP:
                self._learner_metrics.append(metrics)
            iteration += size
        return state

    def period_metrics(self, state: TrainState, period: int) -> dict[str, Any]:
        metrics = self._learner_metrics or [nan_learner_metrics()]
        learner_metrics = {k: float(np.nanmean(np.concatenate(
            [np.atleast_1d(np.asarray(m[k])) for m in metrics]))) for k in LEARNER_METRICS}
        self._learner_metrics = []
        returns = evaluate_gymnasium(self.program.config, state.learner.actor_params,
                                     eval_key(state.key, period),
                                     self.program.config.eval_episodes, self.runner.obs_norm)
        config = self.program.config
        return {
            **learner_metrics,
            "env_steps": int(state.iteration) * config.num_envs,
            "grad_steps": int(state.learner.step),
            "target_updates": int(state.learner.step) // config.target_network_update_freq,
            **{k: np.asarray(v).item() for k, v in state.episodes.summary().items()},
            "eval_return": float(np.mean(returns)),
        }


@functools.lru_cache(maxsize=16)
def deterministic_policy(config: SACConfig, obs_dim: int, act_dim: int) -> Callable:
    """Jitted (actor_params, obs_stats, raw obs [B, obs_dim]) -> tanh(μ) [B, act_dim]."""
    learner = make_learner(config, obs_dim, act_dim)
    to_module = connectors.EnvToModule(normalize=config.normalize_obs)
    key = jax.random.key(0)  # unused by the deterministic action
    return jax.jit(lambda params, stats, obs: learner.act(
        params, to_module.apply(stats, obs), key, deterministic=True))


def evaluate_gymnasium(config: SACConfig, actor_params: Any, key: jax.Array,
                       num_episodes: int, obs_stats: Any = None) -> np.ndarray:
    """Deterministic-policy returns [num_episodes] on gymnasium envs, one episode per env."""
    seed = int(jax.random.randint(key, (), 0, 2**31 - 1))
    runner = GymRunner(config.env_id, num_episodes, "sync", 0, seed, normalize_obs=False)
    try:
        act = deterministic_policy(config, runner.obs_dim, runner.act_dim)
        if obs_stats is None:
            obs_stats = connectors.init_obs_norm(runner.obs_dim)
        total = np.zeros(num_episodes)
        finished = np.zeros(num_episodes, bool)
        raw_obs = runner.raw_obs
        while not finished.all():
            step, _ = runner.unpack(runner.step_packed(act(actor_params, obs_stats, raw_obs)))
            total += np.where(finished, 0.0, step.reward)
            finished |= step.terminated | step.truncated
            raw_obs = step.next_obs
        return total
    finally:
        runner.close()
