"""Pendulum-v1 in JAX, step for step gymnasium's `PendulumEnv`.

The state is (theta, theta_dot) in the default float dtype: float32 normally, float64
under `jax.enable_x64`, where it follows gymnasium's float64 arithmetic exactly.
The torque is clipped to [-2, 2] in float32, as gymnasium does with its float32 action.
Wrap in `TimeLimit(env, 200)` (what `jaxsac.envs.make` does) for Pendulum-v1's truncation.
"""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxsac.envs.core import default_float


@struct.dataclass
class PendulumState:
    theta: jax.Array  # [] angle, 0 = upright, unbounded
    theta_dot: jax.Array  # [] angular velocity in [-max_speed, max_speed]


def angle_normalize(x: jax.Array) -> jax.Array:
    """Angle mapped to [-pi, pi)."""
    return ((x + np.pi) % (2 * np.pi)) - np.pi


class Pendulum:
    """Classic torque-controlled pendulum swing-up. obs [3] = (cos θ, sin θ, θ̇); action [1]."""

    max_speed = 8.0
    max_torque = 2.0
    dt = 0.05
    mass = 1.0
    length = 1.0
    # Half-widths of the uniform reset distribution of (theta, theta_dot).
    reset_high = (np.pi, 1.0)

    def __init__(self, g: float = 10.0):
        self.g = float(g)
        high = np.array([1.0, 1.0, self.max_speed], dtype=np.float32)
        self.observation_space = gymnasium.spaces.Box(low=-high, high=high, dtype=np.float32)
        self.action_space = gymnasium.spaces.Box(
            low=-self.max_torque, high=self.max_torque, shape=(1,), dtype=np.float32)

    def reset(self, key: jax.Array) -> tuple[PendulumState, jax.Array]:
        high = jnp.asarray(self.reset_high, default_float())
        theta, theta_dot = jax.random.uniform(
            key, (2,), default_float(), minval=-high, maxval=high)
        state = PendulumState(theta, theta_dot)
        return state, self.observation(state)

    def step(self, state: PendulumState, action: jax.Array, key: jax.Array):
        del key  # deterministic dynamics
        dtype = state.theta.dtype
        torque = jnp.clip(jnp.asarray(action, jnp.float32)[0], -self.max_torque, self.max_torque)
        th, thdot = state.theta, state.theta_dot
        # gymnasium mixes float32 torque terms into float64 state; keep the same roundings.
        cost = (angle_normalize(th) ** 2 + 0.1 * thdot**2
                + (0.001 * torque**2).astype(dtype))
        gravity_term = 3 * self.g / (2 * self.length) * jnp.sin(th)
        torque_term = (3.0 / (self.mass * self.length**2) * torque).astype(dtype)
        new_thdot = thdot + (gravity_term + torque_term) * self.dt
        new_thdot = jnp.clip(new_thdot, -self.max_speed, self.max_speed)
        new_th = th + new_thdot * self.dt
        new_state = PendulumState(new_th, new_thdot)
        no = jnp.zeros((), bool)
        return new_state, self.observation(new_state), (-cost).astype(jnp.float32), no, no

    @staticmethod
    def observation(state: PendulumState) -> jax.Array:
        """[3] float32: (cos θ, sin θ, θ̇)."""
        th = state.theta
        return jnp.stack([jnp.cos(th), jnp.sin(th), state.theta_dot]).astype(jnp.float32)

    def __repr__(self) -> str:
        return f"Pendulum(g={self.g})"
