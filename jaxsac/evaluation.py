"""Evaluation: full episodes of the policy's mode tanh(μ) (argmax for Discrete actions),
or of draws from π(·|s) with `eval_policy="sample"`.

    returns = jaxsac.evaluate(config, actor_params, key, num_episodes=10)

JAX envs run as one jitted scan (`evaluate_returns`, also called inside the training
program at the end of each log period); gymnasium envs run on the host
(`evaluate_gymnasium`). A multi-agent env adds a leading agent axis to the returns.
"""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxsac import connectors, envs
from jaxsac.assembly import Assembly, act, assemble, deterministic_policy, sampling_policy
from jaxsac.config import SACConfig
from jaxsac.envs import EnvDataError, EnvFailureError
from jaxsac.frames import FrameStack
from jaxsac.runners import GymRunner


def evaluate_returns(assembly: Assembly, actor_params: Any, obs_stats: Any, key: jax.Array,
                     num_episodes: int) -> jax.Array:
    """Returns of `num_episodes` (K) full episodes of the program's JAX env: [K], or
    [N, K] for a multi-agent env (N agents, each acting with its module; an agent's
    rewards after its own episode ended are not counted). Pure and jittable."""
    env = assembly.env if assembly.eval_env is None else assembly.eval_env
    agent_shape = () if assembly.agents is None else (assembly.agents.num_agents,)
    batch_shape = (num_episodes, *agent_shape)
    env_states, obs = jax.vmap(env.reset)(jax.random.split(key, num_episodes))
    frames = FrameStack(assembly.obs_spec, assembly.module_config.frame_stack)

    def columns_of(obs):  # [K·N, ...], episode-major, as the run stores them
        stored = assembly.obs_spec.from_env(obs, batch_dims=len(batch_shape))
        return jax.tree.map(lambda x: x.reshape(-1, *x.shape[len(batch_shape):]), stored)

    def step(carry, step_key):
        env_states, stack, total, done = carry
        action = act(assembly, actor_params, obs_stats, stack, jax.random.fold_in(step_key, 1),
                     deterministic=assembly.module_config.eval_policy == "mode")
        action = assembly.actions.to_env(action).reshape(*batch_shape, *env.action_space.shape)
        env_states, obs, reward, terminated, truncated = jax.vmap(env.step)(
            env_states, action, jax.random.split(step_key, num_episodes))[:5]
        total = total + jnp.where(done, 0.0, reward)
        stack = frames.push(stack, columns_of(obs), jnp.zeros(total.size, bool))
        return (env_states, stack, total, done | terminated | truncated), None

    start = (env_states, frames.start(columns_of(obs)), jnp.zeros(batch_shape),
             jnp.zeros(batch_shape, bool))
    step_keys = jax.random.split(jax.random.fold_in(key, 1), env.max_episode_steps)
    (_, _, total, _), _ = jax.lax.scan(step, start, step_keys)
    return jnp.moveaxis(total, 0, -1)


class GymEvaluation(NamedTuple):
    """What an evaluation on gymnasium envs reads, and all it reads (`gym_evaluation`
    takes it from a config).

    env: the evaluation env's factory (`envs.from_config(config, evaluation=True)`).
    env_id: its id, for the warnings.
    max_steps: the steps after which an episode ends: the env's own time limit, else
        `eval_max_episode_steps` (truncated there).
    timeout_s: `eval_timeout_s`, the wall-clock limit of one evaluation.
    max_env_restarts: the restart budget of a failing env, as in training.
    policy_for: (ObsSpec, ModuleActions) -> the policy evaluations act with,
        (actor_params, obs_stats, obs [B, ...], key, step) -> module actions [B, ...]
        (obs seen through the frame stack; `evaluation_policy`).
    frame_stack: `SACConfig.frame_stack`, the frames the policy sees.
    """

    env: Any
    env_id: str
    max_steps: int
    timeout_s: float
    max_env_restarts: int
    policy_for: Callable[[Any, connectors.ModuleActions], Callable]
    frame_stack: int = 1


def gym_evaluation(config: SACConfig) -> GymEvaluation:
    """The evaluation settings and pieces of one module of `config` on gymnasium envs."""
    return GymEvaluation(
        envs.from_config(config, evaluation=True), config.eval_env[0],
        envs.time_limit(config, evaluation=True) or config.eval_max_episode_steps,
        config.eval_timeout_s, config.max_env_restarts,
        functools.partial(evaluation_policy, config), config.frame_stack)


def evaluation_policy(config: SACConfig, obs: Any, actions: connectors.ModuleActions
                      ) -> Callable:
    """Jitted (actor_params, obs_stats, obs [B, ...], key, step) -> module actions
    [B, ...] of `config.eval_policy`: the mode (key and step unused) or a draw from
    π(·|s) with the key fold_in(key, step), derived inside the program."""
    if config.eval_policy == "sample":
        sample = sampling_policy(config, obs, actions)
        return jax.jit(lambda actor_params, obs_stats, obs, key, step: sample(
            actor_params, obs_stats, obs, jax.random.fold_in(key, step)))
    mode = deterministic_policy(config, obs, actions)
    return lambda actor_params, obs_stats, obs, key, step: mode(actor_params, obs_stats, obs)


def evaluate_gymnasium(evaluation: GymEvaluation, actor_params: Any, key: jax.Array,
                       num_episodes: int, obs_stats: Any = None) -> np.ndarray:
    """Returns [num_episodes] of the evaluation policy on gymnasium envs, one episode per
    env, stepped on the host (step t's actions drawn with fold_in(fold_in(key, 1), t)).
    obs_stats: the ObsNormState the policy normalizes with (a fresh one, the identity
    without normalize_obs, when None).

    An episode ends at the env's own time limit, or for an env without one after
    `eval_max_episode_steps` steps (`evaluation.max_steps`; truncated there); episodes
    not finished within `evaluation.timeout_s` seconds are dropped, with a warning.

    Env faults do not end the evaluation: an env that raises is rebuilt (up to
    `evaluation.max_env_restarts` times in a row, as in training) and its episode is
    dropped, NaN in the returns; an env that keeps failing, or returns data that cannot
    be evaluated on (`EnvDataError`), drops the episodes not yet finished, with a
    warning naming it as an evaluation env. It never raises for an env's fault, so a
    periodic evaluation cannot end a training run.
    """
    seed = int(jax.random.randint(key, (), 0, 2**31 - 1))
    action_key = jax.random.fold_in(key, 1)
    total = np.zeros(num_episodes)
    finished = np.zeros(num_episodes, bool)
    dropped = np.zeros(num_episodes, bool)
    try:
        runner = GymRunner(evaluation.env, num_episodes, "sync", evaluation.max_env_restarts,
                           seed, frame_stack=evaluation.frame_stack)
    except (EnvFailureError, EnvDataError) as error:
        _warn_dropped(error)
        return np.full(num_episodes, np.nan)
    try:
        spec = runner.frames.stacked_spec
        policy = evaluation.policy_for(runner.obs_spec, runner.actions)
        if obs_stats is None:
            obs_stats = connectors.init_obs_norm(runner.obs_spec)
        deadline = time.monotonic() + evaluation.timeout_s
        steps = 0
        while not finished.all():
            if time.monotonic() > deadline:
                warnings.warn(f"evaluation of {evaluation.env_id!r} took longer than "
                              f"eval_timeout_s={evaluation.timeout_s}; its "
                              f"{int((~finished).sum())} unfinished episode(s) are dropped "
                              "(eval_failures)", stacklevel=2)
                dropped |= ~finished
                break
            action = policy(actor_params, obs_stats, spec.unpack(runner.acting_obs),
                            action_key, steps)
            step, _ = runner.unpack(runner.step_packed(action))
            steps += 1
            total += np.where(finished, 0.0, step.reward)
            dropped |= ~finished & step.failed
            finished |= step.terminated | step.truncated | (steps >= evaluation.max_steps)
    except (EnvFailureError, EnvDataError) as error:
        _warn_dropped(error)
        dropped |= ~finished
    finally:
        runner.close()
    return np.where(dropped, np.nan, total)


def _warn_dropped(error: Exception) -> None:
    """The warning for evaluation episodes dropped by `error`, naming the env as an
    evaluation env (its message starts "env <index> (<id>)")."""
    warnings.warn(f"evaluation {error}; the evaluation episodes not yet finished are "
                  "dropped (eval_failures)", stacklevel=3)


def evaluate(config: SACConfig, actor_params: Any, key: jax.Array, num_episodes: int = 10,
             obs_stats: Any = None) -> np.ndarray:
    """Returns [num_episodes] of the policy (`config.eval_policy`: its mode tanh(μ), or
    draws from π) on `config.env_id`
    ([num_agents, num_episodes] for a multi-agent env; NaN for a gymnasium episode
    dropped because its env failed, see `evaluate_gymnasium`).

    JAX envs run as one jitted program; gymnasium envs run in a host loop.

    Args:
        config: the run's config (its env and evaluation settings).
        actor_params: one module's actor parameters (no seed axis; [M, ...] for the
            stacked modules of a multi-agent run).
        key: the evaluation's key (env resets).
        num_episodes: K, full episodes evaluated.
        obs_stats: observation-normalization statistics when `config.normalize_obs`.

    Returns:
        [K] returns, [num_agents, K] for a multi-agent env.
    """
    if envs.resolve_backend(config.eval_env[0], config.backend) == "gymnasium":
        return evaluate_gymnasium(gym_evaluation(config), actor_params, key, num_episodes,
                                  obs_stats)
    assembly = assemble(config)
    stats = obs_stats if obs_stats is not None else assembly.env_to_module.init(assembly.obs_spec)
    run = jax.jit(lambda p, s, k: evaluate_returns(assembly, p, s, k, num_episodes))
    return np.asarray(run(actor_params, stats, key))
