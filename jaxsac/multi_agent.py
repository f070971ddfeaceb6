"""Multi-agent SAC: one module per agent ("independent") or one for all ("shared").

The training loop is the single-agent one (`jaxsac.algorithm`); only the pieces it is
built from change. The runner steps the N agents of E env copies as E·N columns of the
single-agent JAX runner (column e·N + n is agent n of copy e). Then:

* "independent": module m trains on agent m's E columns. The learner and buffer are the
  single-agent ones vmapped over a leading module axis M = N (`stacked_learner`,
  `stacked_buffer`): each module keeps its own parameters, α, optimizer states, replay
  rows and priorities, and draws from its own key `split(key, M)[m]`.
* "shared": one module trains on all E·N columns, so the run *is* single-agent training
  with num_envs = E·N (no module axis; the same keys).

A run with one module (shared, or one agent) has no module axis and draws from the
iteration's keys unchanged, exactly as single-agent training does.

Step counts of a multi-agent config count each agent's own env steps. `module_config`
gives the single-agent config a module trains with: for "shared" every count (and
num_envs) is multiplied by N, since the module sees all agents' steps.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from jaxsac import connectors, envs
from jaxsac.config import SACConfig
from jaxsac.env_runner import make_jax_runner
from jaxsac.learner import Hyperparams, Learner, LearnerState, make_learner
from jaxsac.replay import ReplayBuffer

SCALED_COUNTS = ("total_env_steps", "learning_starts", "log_every", "buffer_capacity",
                 "checkpoint_every")
"""SACConfig fields counted in env steps: per agent in a config, per module in
`module_config` (multiplied by num_agents for a shared module)."""


class AgentLayout(NamedTuple):
    """How the E·N runner columns map to modules.

    num_agents: N. num_envs: E, copies of the multi-agent env.
    num_modules: M, N for "independent", 1 for "shared".
    """

    num_agents: int
    num_envs: int
    num_modules: int

    @classmethod
    def from_config(cls, config: SACConfig) -> AgentLayout:
        return cls(config.num_agents, config.num_envs, config.num_modules)

    def to_modules(self, columns: Any) -> Any:
        """Leaves [E·N, ...] (env-major columns) -> [M, E, ...]; unchanged for M = 1."""
        if self.num_modules == 1:
            return columns
        return jax.tree.map(lambda x: jnp.swapaxes(
            x.reshape(-1, self.num_agents, *x.shape[1:]), 0, 1), columns)

    def from_modules(self, per_module: Any) -> Any:
        """Inverse of `to_modules`: leaves [M, E, ...] -> [E·N, ...]."""
        if self.num_modules == 1:
            return per_module
        return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:]),
                            per_module)

    def module_keys(self, key: jax.Array) -> jax.Array:
        """[M] keys, one per module (the key itself for one module)."""
        return key if self.num_modules == 1 else jax.random.split(key, self.num_modules)


def validate(config: SACConfig) -> None:
    """Errors for multi-agent settings the loop cannot honour, naming the fields."""
    if config.num_agents > 1 and not envs.is_multi_agent(config.env_id):
        raise ValueError(f"SACConfig.num_agents={config.num_agents} needs a multi-agent env, "
                         f"but env_id={config.env_id!r} is single-agent; multi-agent envs: "
                         f"{sorted(envs.MULTI_AGENT_ENVS)}")
    if envs.is_multi_agent(config.env_id) and config.backend == "gymnasium":
        raise ValueError(f"SACConfig.backend='gymnasium' is invalid for env_id="
                         f"{config.env_id!r}: multi-agent envs run on the 'jax' backend only")
    if config.num_modules > 1 and config.normalize_obs:
        raise ValueError("SACConfig.normalize_obs=True is not supported with "
                         "policy_mapping='independent' and num_agents > 1 (the runner's "
                         "statistics would pool all agents); use normalize_obs=False or "
                         "policy_mapping='shared'")


def module_config(config: SACConfig) -> SACConfig:
    """The single-agent config one module trains with (counts per module)."""
    if config.policy_mapping == "independent":
        return config.replace(num_agents=1)
    scale = config.num_agents
    return config.replace(num_agents=1, num_envs=config.num_envs * scale,
                          **{name: getattr(config, name) * scale for name in SCALED_COUNTS})


# --- the per-module pieces, stacked over modules ---------------------------------------


def _learner_axes() -> LearnerState:
    """vmap axes of a stacked LearnerState: a module axis on everything but `hparams`."""
    return LearnerState(*([0] * (len(LearnerState.__dataclass_fields__) - 1)), hparams=None)


def stacked_learner(learner: Learner, config: SACConfig, layout: AgentLayout) -> Learner:
    """`learner` vmapped over M modules (`learner` itself for one module).

    init(key, hparams) -> LearnerState with leaves [M, ...] (hparams shared, unstacked).
    update(state, batch [M, B], key) -> (state, metrics [M], td_error [M, B]).
    act(actor_params [M, ...], obs [E·N, obs_dim], key, deterministic) -> [E·N, act_dim]:
        each column acts with its agent's module.
    loss(params [M], target_critic_params [M], batch [M, B], keys [M]): per module.
    """
    if layout.num_modules == 1:
        return learner
    axes = _learner_axes()

    def init(key: jax.Array, hparams: Hyperparams | None = None) -> LearnerState:
        hparams = Hyperparams.from_config(config) if hparams is None else hparams
        return jax.vmap(lambda k: learner.init(k, hparams), out_axes=axes)(
            layout.module_keys(key))

    def update(state: LearnerState, batch: Any, key: jax.Array):
        return jax.vmap(learner.update, in_axes=(axes, 0, 0), out_axes=(axes, 0, 0))(
            state, batch, layout.module_keys(key))

    def act(actor_params: Any, obs: jax.Array, key: jax.Array,
            deterministic: bool = False) -> jax.Array:
        actions = jax.vmap(lambda p, o, k: learner.act(p, o, k, deterministic))(
            actor_params, layout.to_modules(obs), layout.module_keys(key))
        return layout.from_modules(actions)

    return Learner(init=init, update=update, act=act, loss=jax.vmap(learner.loss))


def stacked_buffer(buffer: ReplayBuffer, layout: AgentLayout) -> ReplayBuffer:
    """`buffer` (E columns) vmapped over M modules (`buffer` itself for one module).

    add(state, step [E·N]) gives module m agent m's columns; sample(state, key) ->
    Batch [M, B]; update_priorities(state, indices [M, B], td_error [M, B]).
    """
    if layout.num_modules == 1:
        return buffer
    modules = jnp.arange(layout.num_modules)
    return ReplayBuffer(
        init=lambda example: jax.vmap(lambda _: buffer.init(example))(modules),
        add=lambda state, step: jax.vmap(buffer.add)(state, layout.to_modules(step)),
        sample=lambda state, key: jax.vmap(buffer.sample)(state, layout.module_keys(key)),
        update_priorities=jax.vmap(buffer.update_priorities),
        can_sample=jax.vmap(buffer.can_sample),
    )


@flax.struct.dataclass
class AgentEpisodeStats:
    """`EpisodeStats` of each agent: leaves with a leading agent axis N.

    Same interface as `EpisodeStats` (record / summary), so the loop's `absorb` uses it
    unchanged; `summary` gives [N] arrays and the sum over agents.
    """

    per_agent: Any  # EpisodeStats with leaves [N, ...]

    @classmethod
    def empty(cls, num_agents: int) -> AgentEpisodeStats:
        from jaxsac.algorithm import EpisodeStats

        return cls(jax.vmap(lambda _: EpisodeStats.empty())(jnp.arange(num_agents)))

    def record(self, done: jax.Array, returns: jax.Array,
               lengths: jax.Array) -> AgentEpisodeStats:
        """Push the episodes that ended (done, returns, lengths: [E·N] runner columns)."""
        num_agents = self.per_agent.count.shape[0]
        by_agent = lambda x: x.reshape(-1, num_agents).T  # [N, E]
        return AgentEpisodeStats(jax.vmap(lambda s, d, r, n: s.record(d, r, n))(
            self.per_agent, by_agent(done), by_agent(returns), by_agent(lengths)))

    def summary(self) -> dict[str, jax.Array]:
        """episode_return_mean, episode_length_mean, num_episodes: [N];
        episode_return_sum: [] the sum over agents of their mean returns."""
        per_agent = jax.vmap(lambda s: s.summary())(self.per_agent)
        return {**per_agent, "episode_return_sum": jnp.sum(per_agent["episode_return_mean"])}


# --- program, metrics and evaluation ---------------------------------------------------


def build_program(config: SACConfig, gamma: Any = None):
    """The algorithm's `Program` for a multi-agent config: stacked per-module learner and
    buffer, a runner over all E·N agent columns, and the multi-agent env (evaluation)."""
    from jaxsac import algorithm

    validate(config)
    per_module = module_config(config)
    algorithm.validate_schedule(per_module)
    backend = "jax" if config.backend == "auto" else config.backend
    env = envs.make(config.env_id, backend=backend, num_agents=config.num_agents)
    layout = AgentLayout.from_config(config)
    obs_dim = connectors.flat_obs_dim(env.observation_space)
    act_dim = int(np.prod(env.action_space.shape))
    learner = stacked_learner(make_learner(per_module, obs_dim, act_dim), per_module, layout)
    buffer = stacked_buffer(
        algorithm.make_buffer(per_module, per_module.gamma if gamma is None else gamma), layout)
    runner = make_jax_runner(env.agent_env, config.num_envs * config.num_agents,
                             normalize_obs=config.normalize_obs)
    return algorithm.Program(per_module, env, learner, buffer, runner,
                             connectors.EnvToModule(normalize=config.normalize_obs),
                             obs_dim, act_dim, agents=layout)


def period_metrics(program: Any, state: Any, learner_metrics: dict[str, jax.Array],
                   period: Any) -> dict[str, jax.Array]:
    """A multi-agent metrics row: learner metrics [M], episode and evaluation returns
    [N] per agent and their sums over agents [], env_steps (each agent's own) []."""
    from jaxsac.algorithm import eval_key

    layout: AgentLayout = program.agents
    per_module = lambda x: jnp.reshape(x, (layout.num_modules,))
    eval_returns = evaluate_agents(program, state.learner.actor_params, state.runner.obs_norm,
                                   eval_key(state.key, period), program.config.eval_episodes)
    eval_return = jnp.mean(eval_returns, axis=-1)
    return {
        **jax.tree.map(per_module, learner_metrics),
        "env_steps": state.iteration * layout.num_envs,
        "grad_steps": per_module(state.learner.step),
        "target_updates": per_module(state.learner.step
                                     // program.config.target_network_update_freq),
        **state.episodes.summary(),
        "eval_return": eval_return,
        "eval_return_sum": jnp.sum(eval_return),
    }


def evaluate_agents(program: Any, actor_params: Any, obs_stats: Any, key: jax.Array,
                    num_episodes: int) -> jax.Array:
    """Deterministic-policy returns [N, num_episodes]: K = num_episodes episodes of the
    multi-agent env, each agent acting with its module; an agent's rewards after its own
    episode ended are not counted."""
    env, layout = program.env, program.agents
    reset_keys = jax.random.split(key, num_episodes)
    env_states, obs = jax.vmap(env.reset)(reset_keys)  # obs [K, N, ...]
    to_env = connectors.module_to_env(env.action_space)

    def step(carry, step_key):
        env_states, obs, total, agent_done = carry
        columns = connectors.flatten_obs(obs, batch_dims=2).reshape(
            num_episodes * layout.num_agents, -1)  # [K·N, obs_dim], episode-major
        module_obs = program.env_to_module.apply(obs_stats, columns)
        action = program.learner.act(actor_params, module_obs, step_key, deterministic=True)
        action = to_env(action).reshape(num_episodes, layout.num_agents,
                                        *env.action_space.shape)
        env_states, obs, reward, terminated, truncated, _ = jax.vmap(env.step)(
            env_states, action, jax.random.split(step_key, num_episodes))
        total = total + jnp.where(agent_done, 0.0, reward)
        return (env_states, obs, total, agent_done | terminated | truncated), None

    shape = (num_episodes, layout.num_agents)
    start = (env_states, obs, jnp.zeros(shape), jnp.zeros(shape, bool))
    step_keys = jax.random.split(jax.random.fold_in(key, 1), env.max_episode_steps)
    (_, _, total, _), _ = jax.lax.scan(step, start, step_keys)
    return total.T


def evaluate(config: SACConfig, actor_params: Any, key: jax.Array, num_episodes: int = 10,
             obs_stats: Any = None) -> np.ndarray:
    """Returns [N, num_episodes]: each agent's deterministic-policy returns."""
    program = build_program(config.replace(total_env_steps=0))
    stats = obs_stats if obs_stats is not None else program.env_to_module.init(program.obs_dim)
    run = jax.jit(lambda p, s, k: evaluate_agents(program, p, s, k, num_episodes))
    return np.asarray(run(actor_params, stats, key))


__all__ = ["AgentEpisodeStats", "AgentLayout", "build_program", "evaluate",
           "evaluate_agents", "module_config", "period_metrics", "stacked_buffer",
           "stacked_learner", "validate"]
