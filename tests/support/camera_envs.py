"""A small reaching task seen through a uint8 camera, as a JAX env with a dict
observation: `pixels` (H, W, 3) uint8, a picture of the point (red channel) and the goal
(green channel), and `state`, the point's position.

The dynamics are tests/support/dict_envs.py's: a point p in the plane moves by 0.1·a
(a in [-1, 1]^2) toward a goal g drawn at reset; reward −|p′ − g|, terminated within
0.05 of the goal.
"""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

import jaxsac
from tests.support import dict_envs

JAX_ID = "PixelReach-v0"
MAX_STEPS = dict_envs.MAX_STEPS
SIZE = 12
OBSERVATION_SPACE = gymnasium.spaces.Dict({
    "pixels": gymnasium.spaces.Box(0, 255, (SIZE, SIZE, 3), np.uint8),
    "state": gymnasium.spaces.Box(-np.inf, np.inf, (2,), np.float32),
})
ACTION_SPACE = dict_envs.ACTION_SPACE


def render(position: jax.Array, goal: jax.Array) -> jax.Array:
    """(SIZE, SIZE, 3) uint8: a Gaussian blob at p (red) and at g (green) on [-1.5, 1.5]²."""
    grid = jnp.linspace(-1.5, 1.5, SIZE)
    rows, cols = jnp.meshgrid(grid, grid, indexing="ij")

    def blob(point: jax.Array) -> jax.Array:
        return 255.0 * jnp.exp(-((rows - point[0]) ** 2 + (cols - point[1]) ** 2) / 0.1)

    return jnp.stack([blob(position), blob(goal), jnp.zeros_like(rows)], -1).astype(jnp.uint8)


class PixelReach(dict_envs.DictReach):
    """The JAX env (jaxsac.envs.JaxEnv): DictReach's dynamics, seen through the camera."""

    observation_space = OBSERVATION_SPACE
    action_space = ACTION_SPACE

    def observe(self, position, goal):
        return {"pixels": render(position, goal), "state": position}


def register() -> None:
    """Register the env under JAX_ID (again in a fresh process)."""
    jaxsac.envs.register_jax_env(JAX_ID, PixelReach, max_episode_steps=MAX_STEPS)
