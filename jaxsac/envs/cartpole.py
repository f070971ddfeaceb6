"""CartPole-v1 in JAX, step for step gymnasium's `CartPoleEnv`.

The state (x, x_dot, theta, theta_dot) is in the default float dtype: float32 normally,
float64 under `jax.enable_x64`, where it follows gymnasium's float64 arithmetic
operation for operation (the same constants, the same order of evaluation): an
un-jitted step of one env equals gymnasium's bit for bit; compiled (or batched), XLA
turns divisions by constants into multiplications and fuses multiply-adds, so a step
can differ in the last bits (~1e-16), which a balanced pole amplifies over hundreds of
steps. One step is an Euler step of the Barto-Sutton-Anderson cart-pole; the episode
terminates when |x| > 2.4 or |theta| > 12 degrees. The reward is 1.0 on every step,
the terminating one included (gymnasium's default `sutton_barto_reward=False`); like
gymnasium, stepping on after a termination gives reward 0 while the state stays out of
bounds. Wrap in `TimeLimit(env, 500)` for CartPole-v1's time limit (truncation at step 500).

The action is an integer scalar [] (int32; a [1] array is accepted too): 0 pushes the
cart left, 1 pushes it right. gymnasium asserts that the action is in `Discrete(2)`; a
jitted step cannot raise on values, so out-of-range integers are clipped into {0, 1}
(below 0 pushes left, above 1 pushes right). A non-integer dtype is a `TypeError` at
trace time.
"""

from __future__ import annotations

import math

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxsac.envs.core import default_float


@struct.dataclass
class CartPoleState:
    x: jax.Array  # [] cart position
    x_dot: jax.Array  # [] cart velocity
    theta: jax.Array  # [] pole angle, 0 = upright
    theta_dot: jax.Array  # [] pole angular velocity
    # [] bool: a step of this episode has terminated already (gymnasium's
    # `steps_beyond_terminated is not None`): a further terminated step gives reward 0.
    has_terminated: jax.Array


def discrete_action(action: jax.Array, num_actions: int, owner: str) -> jax.Array:
    """The action as an int32 scalar clipped into [0, num_actions - 1].

    action: [] or [1] integer array. A non-integer dtype raises `TypeError` (at trace
    time under jit); out-of-range values are clipped since a jitted step cannot raise.
    """
    action = jnp.asarray(action)
    if not jnp.issubdtype(action.dtype, jnp.integer):
        raise TypeError(f"{owner}.step: action has dtype {action.dtype}: must be an "
                        f"integer in [0, {num_actions - 1}] (Discrete({num_actions}))")
    if action.size != 1:
        raise ValueError(f"{owner}.step: action has shape {action.shape}: must be [] "
                         "(one integer per env)")
    return jnp.clip(action.reshape(()).astype(jnp.int32), 0, num_actions - 1)


class CartPole:
    """Balance a pole on a cart. obs [4] = (x, x_dot, theta, theta_dot); action [] in {0, 1}.

    Terminates when |x| > 2.4 or |theta| > 12 degrees; reward 1.0 per step (with
    `sutton_barto_reward=True`: 0.0 per step and -1.0 on termination, as in gymnasium).
    """

    gravity = 9.8
    masscart = 1.0
    masspole = 0.1
    total_mass = masspole + masscart
    length = 0.5  # half the pole's length
    polemass_length = masspole * length
    force_mag = 10.0
    tau = 0.02  # seconds per step
    theta_threshold_radians = 12 * 2 * math.pi / 360
    x_threshold = 2.4
    # Half-width of the uniform reset distribution of all four state variables.
    reset_high = 0.05

    def __init__(self, sutton_barto_reward: bool = False):
        self.sutton_barto_reward = bool(sutton_barto_reward)
        high = np.array([self.x_threshold * 2, np.inf, self.theta_threshold_radians * 2,
                         np.inf], dtype=np.float32)
        self.observation_space = gymnasium.spaces.Box(-high, high, dtype=np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)

    def reset(self, key: jax.Array) -> tuple[CartPoleState, jax.Array]:
        x, x_dot, theta, theta_dot = jax.random.uniform(
            key, (4,), default_float(), minval=-self.reset_high, maxval=self.reset_high)
        state = CartPoleState(x, x_dot, theta, theta_dot, jnp.zeros((), bool))
        return state, self.observation(state)

    def step(self, state: CartPoleState, action: jax.Array, key: jax.Array):
        del key  # deterministic dynamics
        action = discrete_action(action, 2, "CartPole")
        dtype = state.x.dtype
        x, x_dot, theta, theta_dot = state.x, state.x_dot, state.theta, state.theta_dot
        force = jnp.where(action == 1, self.force_mag, -self.force_mag).astype(dtype)
        cos_theta, sin_theta = jnp.cos(theta), jnp.sin(theta)
        # The same operations in the same order as gymnasium (float64 roundings).
        temp = (force + self.polemass_length * (theta_dot * theta_dot) * sin_theta
                ) / self.total_mass
        theta_acc = (self.gravity * sin_theta - cos_theta * temp) / (
            self.length * (4.0 / 3.0 - self.masspole * (cos_theta * cos_theta)
                           / self.total_mass))
        x_acc = temp - self.polemass_length * theta_acc * cos_theta / self.total_mass
        # Euler (gymnasium's default kinematics_integrator): positions use old velocities.
        x = x + self.tau * x_dot
        x_dot = x_dot + self.tau * x_acc
        theta = theta + self.tau * theta_dot
        theta_dot = theta_dot + self.tau * theta_acc
        terminated = ((x < -self.x_threshold) | (x > self.x_threshold)
                      | (theta < -self.theta_threshold_radians)
                      | (theta > self.theta_threshold_radians))
        if self.sutton_barto_reward:
            reward = jnp.where(terminated, -1.0, 0.0)
        else:
            reward = jnp.where(terminated & state.has_terminated, 0.0, 1.0)
        new_state = CartPoleState(x, x_dot, theta, theta_dot,
                                  state.has_terminated | terminated)
        return (new_state, self.observation(new_state), reward.astype(jnp.float32),
                terminated, jnp.zeros((), bool))

    @staticmethod
    def observation(state: CartPoleState) -> jax.Array:
        """[4] float32: (x, x_dot, theta, theta_dot)."""
        return jnp.stack([state.x, state.x_dot, state.theta, state.theta_dot]).astype(
            jnp.float32)

    def __repr__(self) -> str:
        if self.sutton_barto_reward:
            return "CartPole(sutton_barto_reward=True)"
        return "CartPole()"
