"""MountainCarContinuous-v0 in JAX, step for step gymnasium's `Continuous_MountainCarEnv`.

The state (position, velocity) is float32, as gymnasium stores it after every step; the
hill term cos(3 x) is computed in the default float dtype (float64 under
`jax.enable_x64`, where an un-jitted step equals gymnasium's bit for bit; compiled,
XLA may round the float32 sum differently by one ulp). The force is the
action clipped to [-1, 1]; the action cost 0.1·a² uses the unclipped action, as in
gymnasium. Wrap in `TimeLimit(env, 999)` (what `jaxsac.envs.make` does).
"""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxsac.envs.core import default_float


@struct.dataclass
class MountainCarState:
    position: jax.Array  # [] float32 in [min_position, max_position]
    velocity: jax.Array  # [] float32 in [-max_speed, max_speed]


class MountainCarContinuous:
    """Drive an underpowered car up a hill. obs [2] = (position, velocity); action [1].

    Terminates (reward +100) when position >= 0.45 and velocity >= goal_velocity.
    """

    min_action = -1.0
    max_action = 1.0
    min_position = -1.2
    max_position = 0.6
    max_speed = 0.07
    goal_position = 0.45
    power = 0.0015
    reset_low, reset_high = -0.6, -0.4

    def __init__(self, goal_velocity: float = 0.0):
        self.goal_velocity = float(goal_velocity)
        low = np.array([self.min_position, -self.max_speed], dtype=np.float32)
        high = np.array([self.max_position, self.max_speed], dtype=np.float32)
        self.observation_space = gymnasium.spaces.Box(low=low, high=high, dtype=np.float32)
        self.action_space = gymnasium.spaces.Box(
            low=self.min_action, high=self.max_action, shape=(1,), dtype=np.float32)

    def reset(self, key: jax.Array) -> tuple[MountainCarState, jax.Array]:
        position = jax.random.uniform(
            key, (), jnp.float32, minval=self.reset_low, maxval=self.reset_high)
        state = MountainCarState(position, jnp.zeros((), jnp.float32))
        return state, self.observation(state)

    def step(self, state: MountainCarState, action: jax.Array, key: jax.Array):
        del key  # deterministic dynamics
        f32 = jnp.float32
        action = jnp.asarray(action, f32)[0]
        force = jnp.clip(action, self.min_action, self.max_action)
        position, velocity = state.position, state.velocity
        wide = default_float()
        hill = 0.0025 * jnp.cos((3 * position).astype(wide))
        # gymnasium's min/max clip yields a float32 force inside the bounds but a Python
        # float outside them, which changes where the force term is rounded.
        force_term = jnp.where(
            jnp.abs(action) > self.max_action,
            (force.astype(wide) * self.power - hill).astype(f32),
            force * f32(self.power) - hill.astype(f32))
        velocity = velocity + force_term
        velocity = jnp.clip(velocity, -self.max_speed, self.max_speed)
        position = jnp.clip(position + velocity, self.min_position, self.max_position)
        at_left_wall = jnp.logical_and(position == f32(self.min_position), velocity < 0)
        velocity = jnp.where(at_left_wall, f32(0.0), velocity)
        terminated = jnp.logical_and(position >= f32(self.goal_position),
                                     velocity >= f32(self.goal_velocity))
        reward = jnp.where(terminated, f32(100.0), f32(0.0)) - 0.1 * action**2
        new_state = MountainCarState(position, velocity)
        return (new_state, self.observation(new_state), reward.astype(f32), terminated,
                jnp.zeros((), bool))

    @staticmethod
    def observation(state: MountainCarState) -> jax.Array:
        """[2] float32: (position, velocity)."""
        return jnp.stack([state.position, state.velocity]).astype(jnp.float32)

    def __repr__(self) -> str:
        return f"MountainCarContinuous(goal_velocity={self.goal_velocity})"
