"""The JAX runner: pure functions that step `num_envs` copies of a JAX env with NEXT_STEP
autoreset, so a whole training run can be one `lax.scan`.

Stream shape (what the replay buffer expects): after a row whose `terminated` or
`truncated` is set, that env's next row is the *reset row*: obs = the final observation
(== the done row's next_obs), action = whatever the policy gave (ignored by the env),
reward 0, terminated = truncated = False, next_obs = the first observation of the new
episode. A reset row is not an env step of any episode: `EpisodeInfo.episode_length`
counts only the real steps. `Step.action` is the module's action (in [-1, 1] for a
Box, an index for a Discrete space: jaxsac.connectors.module_actions); obs and
next_obs are the env observations as the run stores them (`ObsSpec.from_env`: a Box's
flattened to float32, a Dict's entries as they are), raw (normalization is applied at
act time, and to sampled batches by the learner connector).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import gymnasium
import jax
import jax.numpy as jnp
from flax import struct

from jaxsac import checks, connectors
from jaxsac.connectors import EnvToModule, ModuleActions, ObsNormState
from jaxsac.envs import AutoReset, AutoResetState, JaxEnv, check_observation_space
from jaxsac.frames import FrameStack
from jaxsac.observations import ObsSpec, batch_size, obs_spec
from jaxsac.runners.episodes import bookkeeping
from jaxsac.types import EpisodeInfo, Step

# act_fn(module_obs [E, ...] (an observation tree), key) -> module actions [E, *actions.shape]
# ([E, |A|] float32 in [-1, 1] for a Box, [E] int32 indices for a Discrete space).
ActFn = Callable[[jax.Array, jax.Array], jax.Array]


def random_act_fn(actions: ModuleActions | int) -> ActFn:
    """An `act_fn` drawing uniform random module actions (warm-up): uniform in [-1, 1]
    for a Box (an int d: the Box [-1, 1]^d), uniform indices for a Discrete space."""
    actions = connectors.module_actions(actions, "random_act_fn")

    def act(module_obs: Any, key: jax.Array) -> jax.Array:
        return actions.random(key, batch_size(module_obs))

    return act


@struct.dataclass
class RunnerState:
    """State of the JAX runner (every leaf has leading axis num_envs, E, except obs_norm).

    env_state: the autoreset env states, [E, ...].
    obs: [E, ...] the current raw observations (an observation tree: [E, obs_dim]
        float32 for a Box).
    episode_return: [E] float32, reward summed over the running episode.
    episode_length: [E] int32, env steps of the running episode.
    obs_norm: ObsNormState, the env-to-module observation statistics (no E axis).
    frames: with a frame stack of k > 1, the observations the policy acts on: [E, ...]
        with each image [H, W, C·k], the last k frames of the running episode
        (jaxsac.frames); None otherwise (the policy acts on `obs`).
    """

    env_state: AutoResetState
    obs: Any
    episode_return: jax.Array
    episode_length: jax.Array
    obs_norm: ObsNormState
    frames: Any = None


class JaxRunner(NamedTuple):
    """Pure functions stepping `num_envs` copies of a JAX env (see `make_jax_runner`)."""

    init: Callable[[jax.Array], RunnerState]
    step: Callable[[RunnerState, ActFn, jax.Array], tuple[RunnerState, Step, EpisodeInfo]]
    num_envs: int
    obs_spec: ObsSpec
    actions: ModuleActions
    observation_space: gymnasium.spaces.Space
    action_space: gymnasium.spaces.Space

    @property
    def obs_dim(self) -> int:
        """Entries of an observation's flat features."""
        return self.obs_spec.dim


def make_jax_runner(env: JaxEnv, num_envs: int, normalize_obs: bool = False,
                    frame_stack: int = 1) -> JaxRunner:
    """A runner for a JAX env (e.g. `jaxsac.envs.make("Pendulum-v1", backend="jax")`).
    With `frame_stack` k > 1 the policy acts on the last k frames of each episode
    (`RunnerState.frames`, kept with `jaxsac.frames.FrameStack`); the Steps hold single
    frames.

    init(key) -> RunnerState: resets all envs.
    step(rstate, act_fn, key) -> (rstate, step, episodes): applies the env-to-module
        connectors to the current obs, calls `act_fn(module_obs [E, ...], key)` for
        module actions [E, *actions.shape], turns them into env actions (module-to-env:
        a Box's units, a Discrete space's integers), steps every env with NEXT_STEP
        autoreset, and returns the `Step` [E] and `EpisodeInfo` [E]. Pure and jittable
        (close over `act_fn`).
    """
    checks.check_int("make_jax_runner", "num_envs", num_envs, 1)
    check_observation_space(env.observation_space, repr(env))
    actions = connectors.module_actions(env.action_space, f"env {env!r}")
    spec = obs_spec(env.observation_space, f"env {env!r}")
    frames = FrameStack(spec, frame_stack)
    autoreset_env = AutoReset(env)
    to_module = EnvToModule(normalize=bool(normalize_obs))

    def init(key: jax.Array) -> RunnerState:
        env_state, obs = jax.vmap(autoreset_env.reset)(jax.random.split(key, num_envs))
        obs = spec.from_env(obs)
        return RunnerState(
            env_state=env_state,
            obs=obs,
            episode_return=jnp.zeros((num_envs,), jnp.float32),
            episode_length=jnp.zeros((num_envs,), jnp.int32),
            obs_norm=to_module.update(to_module.init(spec), obs),
            frames=None if frame_stack == 1 else frames.start(obs))

    def module_obs(rstate: RunnerState) -> Any:
        return to_module.apply(rstate.obs_norm,
                               rstate.obs if frame_stack == 1 else rstate.frames)

    def step(rstate: RunnerState, act_fn: ActFn, key: jax.Array):
        act_key, env_key = jax.random.split(key)
        action = jnp.asarray(act_fn(module_obs(rstate), act_key), actions.dtype)
        if action.shape != (num_envs, *actions.shape):
            raise ValueError(f"act_fn returned actions of shape {action.shape}; expected "
                             f"(num_envs, *action shape) = {(num_envs, *actions.shape)}")
        is_reset_row = rstate.env_state.needs_reset
        env_state, next_obs, reward, terminated, truncated = autoreset_env.step_batch(
            rstate.env_state, actions.to_env(action), jax.random.split(env_key, num_envs))
        next_obs = spec.from_env(next_obs)
        done = jnp.logical_or(terminated, truncated)
        episode_return, episode_length, episodes = bookkeeping(
            rstate.episode_return, rstate.episode_length, reward, is_reset_row, done, jnp)
        transition = Step(obs=rstate.obs, action=action, reward=reward,
                          terminated=terminated, truncated=truncated, next_obs=next_obs)
        rstate = RunnerState(env_state=env_state, obs=next_obs, episode_return=episode_return,
                             episode_length=episode_length,
                             obs_norm=to_module.update(rstate.obs_norm, next_obs),
                             frames=None if frame_stack == 1 else frames.push(
                                 rstate.frames, next_obs, is_reset_row))
        return rstate, transition, episodes

    return JaxRunner(init=init, step=step, num_envs=num_envs,
                     obs_spec=spec, actions=actions,
                     observation_space=env.observation_space, action_space=env.action_space)
