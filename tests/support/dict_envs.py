"""A small reaching task with a dict observation, as a JAX env and as a gymnasium env
(the same dynamics, written once each): what the robot senses (`state`), what only the
simulator knows (`privileged_state`: the goal as well) and a uint8 picture of both.

A point p in the plane moves by 0.1·a (a in [-1, 1]^2) toward a goal g drawn at reset;
reward −|p′ − g|, terminated within 0.05 of the goal.
"""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

import jaxsac

JAX_ID, GYM_ID = "DictReach-v0", "DictReachGym-v0"
MAX_STEPS = 40
OBSERVATION_SPACE = gymnasium.spaces.Dict({
    "pixels": gymnasium.spaces.Box(0, 255, (2, 2), np.uint8),
    "privileged_state": gymnasium.spaces.Box(-np.inf, np.inf, (5,), np.float32),
    "state": gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float32),
})
ACTION_SPACE = gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32)


def observe(xp, position, goal):
    """The dict observation of position p [2] and goal g [2] (numpy or jax.numpy)."""
    distance = xp.sqrt(xp.sum((position - goal) ** 2, keepdims=True))
    pixels = xp.clip((xp.stack([position, goal]) + 1.5) * 85.0, 0, 255).astype(np.uint8)
    return {"pixels": pixels,
            "privileged_state": xp.concatenate([position, goal, distance]).astype(np.float32),
            "state": position.astype(np.float32)}


@struct.dataclass
class ReachState:
    position: jax.Array
    goal: jax.Array


class DictReach:
    """The JAX env (jaxsac.envs.JaxEnv)."""

    observation_space = OBSERVATION_SPACE
    action_space = ACTION_SPACE

    def observe(self, position, goal):
        """The observation of position [2] and goal [2] (a subclass sees otherwise)."""
        return observe(jnp, position, goal)

    def reset(self, key):
        position, goal = jax.random.uniform(key, (2, 2), jnp.float32, -1.0, 1.0)
        return ReachState(position, goal), self.observe(position, goal)

    def step(self, state, action, key):
        position = jnp.clip(state.position + 0.1 * action, -1.5, 1.5)
        distance = jnp.sqrt(jnp.sum((position - state.goal) ** 2))
        return (ReachState(position, state.goal), self.observe(position, state.goal),
                -distance, distance < 0.05, jnp.bool_(False))


class DictReachGym(gymnasium.Env):
    """The gymnasium env."""

    observation_space = OBSERVATION_SPACE
    action_space = ACTION_SPACE

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.position, self.goal = self.np_random.uniform(-1, 1, (2, 2)).astype(np.float32)
        return observe(np, self.position, self.goal), {}

    def step(self, action):
        self.position = np.clip(self.position + 0.1 * np.asarray(action, np.float32), -1.5,
                                1.5).astype(np.float32)
        distance = float(np.sqrt(np.sum((self.position - self.goal) ** 2)))
        return (observe(np, self.position, self.goal), -distance, distance < 0.05, False, {})


def register() -> None:
    """Register both under JAX_ID and GYM_ID (again in a fresh process)."""
    jaxsac.envs.register_jax_env(JAX_ID, DictReach, max_episode_steps=MAX_STEPS)
    jaxsac.envs.register_gym_env(GYM_ID, DictReachGym, max_episode_steps=MAX_STEPS)
