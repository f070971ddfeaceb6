"""Acrobot-v1 in JAX, step for step gymnasium's `AcrobotEnv`.

The state (theta1, theta2, dtheta1, dtheta2) is in the default float dtype: float32
normally, float64 under `jax.enable_x64`, where it follows gymnasium's float64
arithmetic operation for operation: one RK4 step of dt = 0.2 of the book's dynamics
(gymnasium's default `book_or_nips="book"`, no torque noise), then both angles wrapped
into [-pi, pi] by repeated +-2 pi (gymnasium's `wrap`) and the velocities clipped to
+-4 pi and +-9 pi. An un-jitted step of one env equals gymnasium's bit for bit;
compiled (or batched), XLA turns divisions by constants into multiplications and fuses
multiply-adds, so a step can differ in the last bits (~1e-15). As in gymnasium, the
reset state is drawn uniform in [-0.1, 0.1]^4 and rounded to float32 (gymnasium stores
it as float32; every later state is float64), and the first observation is computed
from that float32 state.

The episode terminates when -cos(theta1) - cos(theta2 + theta1) > 1 (the tip above the
bar); the reward is -1 on every step that does not terminate, 0 on the one that does.
Wrap in `TimeLimit(env, 500)` for Acrobot-v1's time limit (truncation at step 500).

The action is an integer scalar [] (int32; a [1] array is accepted too) indexing the
torques (-1, 0, +1). gymnasium indexes a Python list with it (a negative index counts
from the end, 3 and above raise); a jitted step cannot raise, so out-of-range integers
are clipped into {0, 1, 2} (below 0 is torque -1, above 2 is torque +1). A non-integer
dtype is a `TypeError` at trace time.
"""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxsac.envs.cartpole import discrete_action
from jaxsac.envs.core import default_float

PI = np.pi


@struct.dataclass
class AcrobotState:
    theta1: jax.Array  # [] angle of the first link, 0 = hanging down, in [-pi, pi]
    theta2: jax.Array  # [] angle of the second link relative to the first, in [-pi, pi]
    dtheta1: jax.Array  # [] in [-4 pi, 4 pi]
    dtheta2: jax.Array  # [] in [-9 pi, 9 pi]


def wrap_angle(x: jax.Array, low: float, high: float) -> jax.Array:
    """gymnasium's `wrap`: subtract (high - low) while x > high, then add it while
    x < low (the same roundings as gymnasium's loops, any number of turns)."""
    diff = high - low
    x = jax.lax.while_loop(lambda v: v > high, lambda v: v - diff, x)
    return jax.lax.while_loop(lambda v: v < low, lambda v: v + diff, x)


class Acrobot:
    """Swing the tip of a two-link chain above a bar by torquing the middle joint.

    obs [6] = (cos θ1, sin θ1, cos θ2, sin θ2, θ̇1, θ̇2); action [] in {0, 1, 2}
    (torque -1, 0, +1).
    """

    dt = 0.2
    link_length_1 = 1.0
    link_length_2 = 1.0
    link_mass_1 = 1.0
    link_mass_2 = 1.0
    link_com_pos_1 = 0.5  # position of the center of mass of link 1
    link_com_pos_2 = 0.5
    link_moi = 1.0  # moment of inertia of both links
    gravity = 9.8
    max_vel_1 = 4 * PI
    max_vel_2 = 9 * PI
    torques = (-1.0, 0.0, 1.0)
    # Half-width of the uniform reset distribution of all four state variables.
    reset_high = 0.1

    def __init__(self):
        high = np.array([1.0, 1.0, 1.0, 1.0, self.max_vel_1, self.max_vel_2],
                        dtype=np.float32)
        self.observation_space = gymnasium.spaces.Box(low=-high, high=high, dtype=np.float32)
        self.action_space = gymnasium.spaces.Discrete(3)

    def reset(self, key: jax.Array) -> tuple[AcrobotState, jax.Array]:
        dtype = default_float()
        # gymnasium draws in float64 and stores the state as float32.
        draw = jax.random.uniform(key, (4,), dtype, minval=-self.reset_high,
                                  maxval=self.reset_high)
        state32 = AcrobotState(*draw.astype(jnp.float32))
        state = jax.tree.map(lambda v: v.astype(dtype), state32)
        # gymnasium's first observation is computed from its float32 state.
        return state, self.observation(state32)

    def derivatives(self, s: jax.Array) -> jax.Array:
        """[5] -> [5]: d/dt of (theta1, theta2, dtheta1, dtheta2, torque), gymnasium's
        `_dsdt` with the book's equations (operations in gymnasium's order)."""
        m1, m2 = self.link_mass_1, self.link_mass_2
        l1 = self.link_length_1
        lc1, lc2 = self.link_com_pos_1, self.link_com_pos_2
        i1 = i2 = self.link_moi
        g = self.gravity
        theta1, theta2, dtheta1, dtheta2, torque = s[0], s[1], s[2], s[3], s[4]
        cos_theta2, sin_theta2 = jnp.cos(theta2), jnp.sin(theta2)
        d1 = (m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos_theta2)
              + i1 + i2)
        d2 = m2 * (lc2**2 + l1 * lc2 * cos_theta2) + i2
        phi2 = m2 * lc2 * g * jnp.cos(theta1 + theta2 - PI / 2.0)
        phi1 = (-m2 * l1 * lc2 * (dtheta2 * dtheta2) * sin_theta2
                - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin_theta2
                + (m1 * lc1 + m2 * l1) * g * jnp.cos(theta1 - PI / 2)
                + phi2)
        ddtheta2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * (dtheta1 * dtheta1) * sin_theta2
                    - phi2) / (m2 * lc2**2 + i2 - (d2 * d2) / d1)
        ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
        return jnp.stack([dtheta1, dtheta2, ddtheta1, ddtheta2, jnp.zeros_like(torque)])

    def step(self, state: AcrobotState, action: jax.Array, key: jax.Array):
        del key  # deterministic dynamics (gymnasium's torque_noise_max is 0)
        action = discrete_action(action, 3, "Acrobot")
        dtype = state.theta1.dtype
        torque = jnp.asarray(self.torques, dtype)[action]
        y0 = jnp.stack([state.theta1, state.theta2, state.dtheta1, state.dtheta2, torque])
        # gymnasium's rk4 over the times [0, dt].
        dt = self.dt - 0
        half = dt / 2.0
        k1 = self.derivatives(y0)
        k2 = self.derivatives(y0 + half * k1)
        k3 = self.derivatives(y0 + half * k2)
        k4 = self.derivatives(y0 + dt * k3)
        y1 = y0 + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        new_state = AcrobotState(
            wrap_angle(y1[0], -PI, PI), wrap_angle(y1[1], -PI, PI),
            jnp.clip(y1[2], -self.max_vel_1, self.max_vel_1),
            jnp.clip(y1[3], -self.max_vel_2, self.max_vel_2))
        terminated = self.tip_height(new_state) > 1.0
        reward = jnp.where(terminated, 0.0, -1.0).astype(jnp.float32)
        return (new_state, self.observation(new_state), reward, terminated,
                jnp.zeros((), bool))

    @staticmethod
    def tip_height(state: AcrobotState) -> jax.Array:
        """[] the tip's height above the pivot in link lengths: -cos θ1 - cos(θ2 + θ1)."""
        return -jnp.cos(state.theta1) - jnp.cos(state.theta2 + state.theta1)

    @staticmethod
    def observation(state: AcrobotState) -> jax.Array:
        """[6] float32: (cos θ1, sin θ1, cos θ2, sin θ2, θ̇1, θ̇2)."""
        return jnp.stack([
            jnp.cos(state.theta1), jnp.sin(state.theta1),
            jnp.cos(state.theta2), jnp.sin(state.theta2),
            state.dtheta1, state.dtheta2]).astype(jnp.float32)

    def __repr__(self) -> str:
        return "Acrobot()"
