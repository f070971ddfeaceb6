"""PendulumPixels-v1: Pendulum-v1's dynamics (jaxsac.envs.pendulum) observed as an RGB
image drawn in JAX, so that the fully jitted training path has an image workload
without a renderer.

The observation is [size, size, 3] uint8: a black background and the pole, a red
segment of half-width `size / 20` pixels from the image's center to the point at
`0.4 · size` pixels in the direction (sin θ, -cos θ) (x right, y down: θ = 0 points up,
as in Pendulum-v1), antialiased: a pixel's intensity is its color times
clip(half_width + 1/2 - d, 0, 1), d the distance from the pixel's center to the segment.
One frame shows the angle, not the angular velocity: a frame stack (`frame_stack`)
shows both.
"""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np

from jaxsac import checks
from jaxsac.envs.pendulum import Pendulum, PendulumState

POLE_COLOR = (204, 77, 77)
"""The pole's RGB color (Pendulum-v1's renderer draws it in this red)."""


def pole_image(theta: jax.Array, size: int) -> jax.Array:
    """[size, size, 3] uint8: the pole at angle theta [] drawn as described in the
    module docstring (float32 arithmetic)."""
    center = (size - 1) / 2.0
    length, half_width = 0.4 * size, size / 20.0
    theta = jnp.asarray(theta, jnp.float32)
    dx, dy = length * jnp.sin(theta), -length * jnp.cos(theta)
    ys, xs = jnp.mgrid[0:size, 0:size].astype(jnp.float32)
    px, py = xs - center, ys - center
    along = jnp.clip((px * dx + py * dy) / (length * length), 0.0, 1.0)
    distance = jnp.hypot(px - along * dx, py - along * dy)
    coverage = jnp.clip(half_width + 0.5 - distance, 0.0, 1.0)
    color = jnp.asarray(POLE_COLOR, jnp.float32)
    return jnp.round(coverage[..., None] * color).astype(jnp.uint8)


class PendulumPixels(Pendulum):
    """Pendulum-v1 seen in pixels: obs [size, size, 3] uint8 (`pole_image`), action [1]
    torque; states, rewards and resets are Pendulum's."""

    def __init__(self, g: float = 10.0, size: int = 64):
        super().__init__(g)
        self.size = checks.check_int("PendulumPixels", "size", size, 8)
        self.observation_space = gymnasium.spaces.Box(0, 255, (self.size, self.size, 3),
                                                      np.uint8)

    def observation(self, state: PendulumState) -> jax.Array:
        """[size, size, 3] uint8: the pole at state.theta."""
        return pole_image(state.theta, self.size)

    def __repr__(self) -> str:
        return f"PendulumPixels(g={self.g}, size={self.size})"
