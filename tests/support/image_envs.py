"""A tiny deterministic env with image observations, as a JAX env and as a gymnasium
env (the same integer dynamics, written once each), so that both runners can be driven
through the same stream.

State: t (steps in the episode) and v in [0, 256). Reset: t = 0, v = 1. An action a in
[-1, 1] is read as the integer u = round(20 (a + 1)) in [0, 40]; a step sets
v' = (5 v + u + 3) mod 256, terminated when v' mod 7 == 0, reward v' / 256. The
observation is [4, 3, 2] uint8, pixel (i, j, c) = (v + 10 i + 3 j + 7 t + 50 c) mod 256.
"""

from __future__ import annotations

import gymnasium
import jax.numpy as jnp
import numpy as np
from flax import struct

import jaxsac

JAX_ID, GYM_ID = "CounterImage-v0", "CounterImageGym-v0"
MAX_STEPS = 6
SHAPE = (4, 3, 2)
OBSERVATION_SPACE = gymnasium.spaces.Box(0, 255, SHAPE, np.uint8)
ACTION_SPACE = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)


def observe(v, t):
    """The observation of v and t (numpy or JAX scalars)."""
    i, j, c = np.indices(SHAPE)
    return ((v + 10 * i + 3 * j + 7 * t + 50 * c) % 256).astype(np.uint8)


def next_value(xp, v, action):
    u = xp.round(20.0 * (xp.asarray(action, np.float32)[0] + 1.0)).astype(np.int32)
    return (5 * v + u + 3) % 256


def action_of(stack) -> np.ndarray:
    """A deterministic module action [B, 1] from observations [B, ...] (numpy or JAX):
    every pixel of the stack shapes the next observation."""
    total = stack.reshape(stack.shape[0], -1).astype(np.int32).sum(axis=1)
    return ((total % 41) / 20.0 - 1.0).astype(np.float32)[:, None]


@struct.dataclass
class CounterState:
    v: jnp.ndarray
    t: jnp.ndarray


class CounterImage:
    """The JAX env (jaxsac.envs.JaxEnv; `register` adds the time limit)."""

    observation_space = OBSERVATION_SPACE
    action_space = ACTION_SPACE

    def reset(self, key):
        state = CounterState(jnp.int32(1), jnp.int32(0))
        return state, observe(state.v, state.t)

    def step(self, state, action, key):
        v, t = next_value(jnp, state.v, action), state.t + 1
        return (CounterState(v, t), observe(v, t), (v / 256.0).astype(jnp.float32),
                v % 7 == 0, jnp.bool_(False))


class CounterImageGym(gymnasium.Env):
    """The gymnasium env (`register` adds the time limit)."""

    observation_space = OBSERVATION_SPACE
    action_space = ACTION_SPACE

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.v, self.t = 1, 0
        return observe(self.v, self.t), {}

    def step(self, action):
        self.v, self.t = int(next_value(np, self.v, action)), self.t + 1
        return (observe(self.v, self.t), self.v / 256.0, self.v % 7 == 0, False, {})


def register() -> None:
    """Register both envs with jaxsac (JAX_ID, GYM_ID)."""
    jaxsac.envs.register_jax_env(JAX_ID, CounterImage, MAX_STEPS)
    jaxsac.envs.register_gym_env(GYM_ID, CounterImageGym, max_episode_steps=MAX_STEPS)
