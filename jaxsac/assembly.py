"""The assembly of a run: its pure pieces (`Assembly`), its state (`TrainState`), the
initial state, its keys, and the one policy function every caller acts with.

`assemble(config)` is where a run's shape is decided, once: a single-agent env
gets the learner, buffer and JAX runner of `config`; a multi-agent env gets them
stacked over modules (jaxsac.agents) and a runner over all agents' columns. The loops
(jaxsac.jax_loop, jaxsac.host_loop) and evaluation use an Assembly without asking which.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp

from jaxsac import agents, checks, connectors, envs, logger, noise, replay, sharding
from jaxsac.agents import AgentLayout
from jaxsac.config import SACConfig
from jaxsac.frames import check_frame_stack
from jaxsac.learner import Hyperparams, Learner, LearnerState, make_learner, stacked_learner
from jaxsac.metrics import empty_episode_stats
from jaxsac.observations import ObsSpec, obs_spec
from jaxsac.replay import ReplayBuffer, ReplayState
from jaxsac.return_scale import ReturnScaler, return_scaler
from jaxsac.runners import JaxRunner, check_ray_installed, make_jax_runner
from jaxsac.schedule import Schedule, validate_schedule
from jaxsac.types import Step


@flax.struct.dataclass
class TrainState:
    """Everything a run carries from one iteration to the next (a pytree).

    learner: LearnerState (leaves [M, ...] for M stacked modules).
    buffer: ReplayState.
    runner: the JAX runner's RunnerState (env states, running episode sums, observation
        statistics); in the gymnasium loop, where the envs live on the host, the
        observation statistics (ObsNormState) alone.
    key: the run's root key; iteration i draws from fold_in(key, i).
    iteration: [] int32, iterations done (env steps = iteration * num_envs).
    episodes: EpisodeStats (AgentEpisodeStats for several agents).
    returns: the reward scaling's ReturnScaleState (`config.scale_rewards`), else None.
    """

    learner: LearnerState
    buffer: ReplayState
    runner: Any
    key: jax.Array
    iteration: jax.Array
    episodes: Any
    returns: Any = None


class Assembly(NamedTuple):
    """The pure pieces of one run, built from a config (and swept values).

    module_config: the config one module trains with (`agents.module_config` of a
        multi-agent config; the run's config itself otherwise).
    env: the JAX env (None for a gymnasium run); runner: its JaxRunner (None likewise).
    env_to_module: the env-to-module connector (observation normalization).
    obs_spec: what one stored observation is (jaxsac.observations: a flat array, or a
        dict's entries); the buffer, the learner and the policy take trees of it.
    actions: the action adapter of the env's action space (module actions, their
        storage and the policy head the learner uses follow from it).
    agents: the AgentLayout of a multi-agent env, else None.
    placement: where the state lives on a device mesh; None on one device.
    on_period: a host function called with each log period's metrics row from inside
        the compiled program (`make_train(..., period_callback=)`); None: no call.
    eval_env: the JAX env evaluations run on (`config.eval_env_id`, `eval_env_kwargs`;
        `env` itself when they are not set); None for a gymnasium run.
    returns: the reward scaling (`config.scale_rewards`, jaxsac.return_scale), else None.
    """

    module_config: SACConfig
    env: Any
    learner: Learner
    buffer: ReplayBuffer
    runner: JaxRunner | None
    env_to_module: connectors.EnvToModule
    obs_spec: ObsSpec
    actions: connectors.ModuleActions
    agents: AgentLayout | None = None
    placement: sharding.Placement | None = None
    on_period: Callable[[dict[str, Any]], Any] | None = None
    eval_env: Any = None
    returns: ReturnScaler | None = None

    @property
    def obs_dim(self) -> int:
        """Entries of an observation's flat features."""
        return self.obs_spec.dim

    @property
    def acting_spec(self) -> ObsSpec:
        """What the policy and the learner read: `obs_spec` seen through the config's
        frame stack (each image [H, W, C·frame_stack]; `obs_spec` itself without one)."""
        return self.obs_spec.stacked(self.module_config.frame_stack)

    def obs_stats(self, state: TrainState) -> Any:
        """The observation statistics (ObsNormState) in `state`: the JAX runner's, or,
        for a run whose envs live on the host, `state.runner` itself."""
        return state.runner if self.runner is None else state.runner.obs_norm

    @property
    def schedule(self) -> Schedule:
        """The schedule's settings of the module config."""
        return Schedule.of(self.module_config)

    @property
    def env_steps_per_iteration(self) -> int:
        """Env steps one iteration counts: num_envs (each agent's own, E, for several
        agents)."""
        return self.module_config.num_envs if self.agents is None else self.agents.num_envs


def _validate_agents(config: SACConfig) -> None:
    """Errors for multi-agent settings a run cannot honour, naming the fields."""
    if config.num_agents > 1 and not envs.is_multi_agent(config.env_id):
        raise ValueError(f"SACConfig.num_agents={config.num_agents} needs a multi-agent env, "
                         f"but env_id={config.env_id!r} is single-agent; multi-agent envs: "
                         f"{sorted(envs.MULTI_AGENT_ENVS)}")
    if config.num_modules > 1 and config.normalize_obs:
        raise ValueError("SACConfig.normalize_obs=True is not supported with "
                         "policy_mapping='independent' and num_agents > 1 (the runner's "
                         "statistics would pool all agents); use normalize_obs=False or "
                         "policy_mapping='shared'")
    if envs.is_multi_agent(config.env_id) and config.num_data_shards > 1:
        raise ValueError(f"SACConfig.data_shards={config.data_shards} is invalid for the "
                         f"multi-agent env {config.env_id!r}: must be 1 or None")


def validate(config: SACConfig, placement: sharding.Placement | None = None) -> str:
    """Errors for configs no run can honour, naming the fields; returns the backend."""
    backend = envs.resolve_backend(config.env_id, config.backend, owner="SACConfig")
    if envs.resolve_backend(config.eval_env[0], config.backend, owner="SACConfig") != backend:
        checks.fail("SACConfig", "eval_env_id", config.eval_env_id, f"an env of the "
                    f"training env's backend, {backend!r} (it evaluates the same policy)")
    if config.domain_randomization:  # the task has a randomizer
        envs.playground.domain_randomizer(config.env_id, "SACConfig")
    # The env kwargs and obs_keys exist, the evaluation env fits the training env.
    envs.check_config_envs(config)
    logger.check_loggers(config.loggers)
    if config.num_env_runners:
        if backend != "gymnasium":
            raise ValueError(f"SACConfig.num_env_runners={config.num_env_runners} needs "
                             f"gymnasium envs, but env_id={config.env_id!r} runs on the JAX "
                             "backend (inside the compiled program); set backend='gymnasium' "
                             "or num_env_runners=0")
        check_ray_installed(f"SACConfig.num_env_runners={config.num_env_runners}")
    _validate_agents(config)
    multi_agent = envs.is_multi_agent(config.env_id)
    if multi_agent and placement is not None:
        raise ValueError(f"make_train/train: a mesh of {placement.mesh.devices.size} devices "
                         f"is invalid for the multi-agent env {config.env_id!r}: it runs on one "
                         "device; pass a one-device mesh (jaxsac.sharding.make_mesh(devices[:1]))")
    validate_schedule(Schedule.of(config))
    if config.action_noise_exponent:
        noise_horizon(config)
    if multi_agent:
        validate_schedule(Schedule.of(agents.module_config(config)))
    return backend


def assemble(config: SACConfig, gamma: Any = None,
             placement: sharding.Placement | None = None) -> Assembly:
    """Learner, buffer and JAX runner for `config` (a JAX env); `gamma` may be traced (a
    sweep). `placement` puts the state's arrays on a device mesh (jaxsac.sharding)."""
    if validate(config, placement) != "jax":
        raise ValueError(f"SACConfig.backend={config.backend!r}: env_id={config.env_id!r} "
                         "runs on gymnasium; make_train needs a JAX env (use train(config))")
    if envs.is_multi_agent(config.env_id):
        return _multi_agent_assembly(config, gamma)
    env = envs.from_config(config)
    runner = make_jax_runner(env, config.num_envs, normalize_obs=config.normalize_obs,
                             frame_stack=checked_frame_stack(config, env.observation_space))
    check_exploration(config, runner.actions)
    check_obs_keys(config, runner.obs_spec)
    gamma = config.gamma if gamma is None else gamma
    return Assembly(config, env, make_learner(config, runner.obs_spec.stacked(
                        config.frame_stack), runner.actions),
                    make_buffer(config, gamma), runner,
                    connectors.EnvToModule(normalize=config.normalize_obs), runner.obs_spec,
                    runner.actions, placement=placement, eval_env=_eval_env(config, env),
                    returns=return_scaler(config, gamma, config.num_envs))


def _eval_env(config: SACConfig, env: Any) -> Any:
    """The JAX env evaluations run on: `env` unless the config names another."""
    same = config.eval_env == (config.env_id, config.env_kwargs)
    return env if same else envs.from_config(config, evaluation=True)


def _multi_agent_assembly(config: SACConfig, gamma: Any) -> Assembly:
    """Stacked per-module learner and buffer, a runner over all E·N agent columns, and
    the multi-agent env (for evaluation)."""
    per_module = agents.module_config(config)
    env = envs.from_config(config)
    layout = AgentLayout.from_config(config)
    runner = make_jax_runner(env.agent_env, config.num_envs * config.num_agents,
                             normalize_obs=config.normalize_obs,
                             frame_stack=checked_frame_stack(
                                 config, env.agent_env.observation_space))
    check_exploration(config, runner.actions)
    check_obs_keys(config, runner.obs_spec)
    learner = stacked_learner(make_learner(per_module, runner.obs_spec.stacked(
        config.frame_stack), runner.actions),
                              per_module, layout)
    gamma = per_module.gamma if gamma is None else gamma
    buffer = replay.stacked_buffer(make_buffer(per_module, gamma), layout)
    return Assembly(per_module, env, learner, buffer, runner,
                    connectors.EnvToModule(normalize=config.normalize_obs), runner.obs_spec,
                    runner.actions, agents=layout, eval_env=_eval_env(config, env),
                    returns=return_scaler(config, gamma, config.num_envs * config.num_agents))


def host_assembly(config: SACConfig, obs: ObsSpec | int,
                  actions: connectors.ModuleActions | int) -> Assembly:
    """The learner and buffer of a run whose envs live on the host (no JAX env or
    runner): the gymnasium loop, and checkpoint templates of such runs. `obs`: the
    observations' ObsSpec (an int d: flat [d]); `actions`: the action adapter (an int d:
    the Box [-1, 1]^d)."""
    spec = obs_spec(obs, "host_assembly")
    actions = connectors.module_actions(actions, "host_assembly")
    checked_frame_stack(config, spec)
    check_exploration(config, actions)
    check_obs_keys(config, spec)
    return Assembly(config, None, make_learner(config, spec.stacked(config.frame_stack),
                                               actions),
                    make_buffer(config, config.gamma), None,
                    connectors.EnvToModule(normalize=config.normalize_obs), spec, actions,
                    returns=return_scaler(config, config.gamma, config.num_envs))


def check_obs_keys(config: SACConfig, spec: ObsSpec) -> None:
    """An error naming the field, its value and the env's keys for `actor_obs_keys` or
    `critic_obs_keys` that the env's observation (`spec`) does not have: an array
    observation has none."""
    for name in ("actor_obs_keys", "critic_obs_keys"):
        keys = getattr(config, name)
        if keys is None:
            continue
        if not spec.is_dict:
            checks.fail("SACConfig", name, keys, f"None for env_id={config.env_id!r}, whose "
                        f"observation is an array ({spec.describe()}), not a dict of entries")
        missing = [k for k in keys if k not in spec.keys]
        if missing:
            checks.fail("SACConfig", name, keys, f"keys of env_id={config.env_id!r}'s "
                        f"observation {list(spec.keys)} (no key {missing[0]!r})")


def checked_frame_stack(config: SACConfig, observations: Any) -> int:
    """`config.frame_stack`, or an error naming it when the env's observations (a space
    or an ObsSpec) have no image to stack."""
    return check_frame_stack("SACConfig", config.frame_stack,
                             obs_spec(observations, f"env {config.env_id!r}"))


def check_exploration(config: SACConfig, actions: connectors.ModuleActions) -> None:
    """An error for exploration settings the action space cannot honour: colored noise
    is for the Gaussian policy of Box actions."""
    if config.action_noise_exponent and actions.kind == "discrete":
        checks.fail("SACConfig", "action_noise_exponent", config.action_noise_exponent,
                    f"0 for the Discrete action space {actions.space} (colored exploration "
                    "noise is for the Gaussian policy of Box actions)")


def make_buffer(config: SACConfig, gamma: Any) -> ReplayBuffer:
    """The replay buffer of `config`: one episode buffer, or `data_shards` of them."""
    shards = config.num_data_shards
    shard = replay.episode_buffer(
        config.buffer_capacity // shards, config.num_envs // shards,
        config.batch_size // shards, n_step=config.n_step,
        gamma=gamma, prioritized=config.prioritized, alpha=config.priority_alpha,
        beta=config.priority_beta, eps=config.priority_eps,
        beta_final=config.priority_beta_final, beta_steps=config.priority_beta_steps,
        frame_stack=config.frame_stack)
    if shards == 1:
        return shard

    def beta(state: ReplayState) -> jax.Array:
        return replay.scheduled_beta(state.priority_updates, config.priority_beta,
                                     config.priority_beta_final, config.priority_beta_steps)

    return replay.sharded_buffer(shard, shards, beta if config.prioritized else None)


def example_step(obs: ObsSpec | int, actions: connectors.ModuleActions) -> Step:
    """One unbatched Step of zeros: the shapes `buffer.init` allocates for (the
    observation tree of `obs`, an int d: [d] float32; the module action's shape and
    dtype: [|A|] float32 for a Box, [] int32 for Discrete)."""
    zero_obs = obs_spec(obs, "example_step").zeros()
    no = jnp.zeros((), bool)
    return Step(zero_obs, jnp.zeros(actions.shape, actions.dtype), jnp.zeros((), jnp.float32),
                no, no, zero_obs)


def run_generator_key(key: jax.Array, impl: str) -> jax.Array:
    """A key of the `jax.random` implementation `impl` drawn from `key` (any implementation,
    typed or a raw uint32 key): the same `key` always gives the same result."""
    words = jax.random.bits(key, (2,), jnp.uint32)  # the key data of both PRNG_IMPLS
    return jax.random.wrap_key_data(words, impl=impl)


def run_keys(config: SACConfig, num_seeds: int) -> jax.Array:
    """The key of each seed: key(seed), or split(key(seed), num_seeds) for several."""
    key = jax.random.key(config.seed)
    return key if num_seeds == 1 else jax.random.split(key, num_seeds)


def iteration_keys(root: jax.Array, iteration: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(acting key, update key) of one iteration: a function of the iteration alone."""
    return tuple(jax.random.split(jax.random.fold_in(jax.random.fold_in(root, 0), iteration)))


def eval_key(root: jax.Array, period: jax.Array) -> jax.Array:
    """The key of log period `period`'s evaluation."""
    return jax.random.fold_in(jax.random.fold_in(root, 1), period)


def place(assembly: Assembly, state: TrainState) -> TrainState:
    """`state` constrained to the assembly's placement (unchanged on one device)."""
    return state if assembly.placement is None else assembly.placement.constrain(state)


def init_state(assembly: Assembly, key: jax.Array, hparams: Hyperparams | None = None
               ) -> TrainState:
    """The state before the first iteration, for one seed (`jax.vmap` it over keys
    [S] for S seeds). Every key of the run derives from `key` (a typed or raw key),
    re-keyed for `config.prng_impl`; `hparams` default to the config's. An assembly
    without a JAX runner (the gymnasium loop) starts its `runner` field as observation
    statistics before any observation."""
    hparams = Hyperparams.from_config(assembly.module_config) if hparams is None else hparams
    key = run_generator_key(key, assembly.module_config.prng_impl)
    learner_key, runner_key, run_key = jax.random.split(key, 3)
    runner = (assembly.env_to_module.init(assembly.obs_spec) if assembly.runner is None
              else assembly.runner.init(runner_key))
    return place(assembly, TrainState(
        learner=assembly.learner.init(learner_key, hparams),
        buffer=assembly.buffer.init(example_step(assembly.obs_spec, assembly.actions)),
        runner=runner,
        key=run_key,
        iteration=jnp.zeros((), jnp.int32),
        episodes=empty_episode_stats(assembly.agents),
        returns=None if assembly.returns is None else assembly.returns.init(),
    ))


def act(assembly: Assembly, actor_params: Any, obs_stats: Any, obs: Any, key: jax.Array,
        deterministic: bool = False, noise: jax.Array | None = None) -> jax.Array:
    """The policy: module actions [B, *action shape] for raw observations obs [B, ...]
    (an observation tree; a dict may hold only the actor's entries) with the
    env-to-module connector applied with `obs_stats`, sampled, or
    the mode when `deterministic` (tanh(μ) in [-1, 1] for a Box, argmax for Discrete).
    For stacked modules B is E·N agent columns. noise: the sample's ε [B, |A|]
    (`exploration_noise`); None: white draws from `key`."""
    module_obs = assembly.env_to_module.apply(obs_stats, obs)
    return assembly.learner.act(actor_params, module_obs, key, deterministic, noise)


def exploration_noise(assembly: Assembly, root: jax.Array, iteration: jax.Array,
                      batch_size: int) -> jax.Array | None:
    """The acting ε [batch_size, |A|] of `iteration` with colored exploration noise
    (`config.action_noise_exponent` > 0, jaxsac.noise); None for white noise, which
    the policy draws from its key."""
    config = assembly.module_config
    if not config.action_noise_exponent:
        return None
    return noise.acting_noise(root, iteration, config.action_noise_exponent,
                              (batch_size, assembly.actions.dim), noise_horizon(config))


def noise_horizon(config: SACConfig) -> int:
    """Iterations a colored noise sequence covers: `action_noise_horizon`, else the
    env's time limit."""
    horizon = config.action_noise_horizon or envs.time_limit(config)
    if horizon is None:
        checks.fail("SACConfig", "action_noise_horizon", None,
                    f"an integer >= 2 for env_id={config.env_id!r}, which has no registered "
                    "time limit to take it from")
    return horizon


@functools.lru_cache(maxsize=16)
def deterministic_policy(config: SACConfig, obs: ObsSpec | int,
                         actions: connectors.ModuleActions) -> Callable:
    """Jitted (actor_params, obs_stats, raw obs [B, ...]) -> the mode [B, *action
    shape] of one module of `config` (what evaluation on the host and `load_policy` act
    with)."""
    assembly = host_assembly(config, obs, actions)
    key = jax.random.key(0)  # unused by the deterministic action
    return jax.jit(lambda params, stats, obs: act(assembly, params, stats, obs, key,
                                                  deterministic=True))


@functools.lru_cache(maxsize=16)
def sampling_policy(config: SACConfig, obs: ObsSpec | int,
                    actions: connectors.ModuleActions) -> Callable:
    """Jitted (actor_params, obs_stats, raw obs [B, ...], key) -> actions [B, *action
    shape] drawn from π(·|s) of one module of `config` (white noise; each row its own
    draw), what `Policy.sample` acts with."""
    assembly = host_assembly(config, obs, actions)
    return jax.jit(lambda params, stats, obs, key: act(assembly, params, stats, obs, key))
