"""PendulumPixels-v1: Pendulum-v1's dynamics (against gymnasium's Pendulum-v1) and its
image (against a float64 NumPy drawing of the same state)."""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxsac import envs
from jaxsac.envs.pendulum_pixels import POLE_COLOR, pole_image


def numpy_pole(theta: float, size: int) -> np.ndarray:
    """The documented drawing in float64, pixel by pixel: the intensity of a pixel is
    its color times clip(half_width + 1/2 - d, 0, 1), d its center's distance to the
    segment from the image center to 0.4·size pixels along (sin θ, -cos θ)."""
    center = np.array([(size - 1) / 2] * 2)
    tip = center + 0.4 * size * np.array([np.sin(theta), -np.cos(theta)])
    image = np.zeros((size, size, 3))
    for y in range(size):
        for x in range(size):
            p = np.array([x, y], float)
            u = np.clip(np.dot(p - center, tip - center) / np.dot(tip - center, tip - center),
                        0, 1)
            d = np.linalg.norm(p - (center + u * (tip - center)))
            image[y, x] = np.clip(size / 20 + 0.5 - d, 0, 1) * np.array(POLE_COLOR)
    return image


@pytest.mark.parametrize("theta", [0.0, 0.7, -2.0, np.pi, 5.5])
def test_image_is_the_drawing_of_the_angle(theta):
    size = 20
    image = np.asarray(pole_image(jnp.float32(theta), size))
    assert image.shape == (size, size, 3) and image.dtype == np.uint8
    reference = numpy_pole(float(np.float32(theta)), size)
    # float32 against float64: a value near .5 may round the other way, nothing more.
    off_by = np.abs(image.astype(float) - np.round(reference))
    assert off_by.max() <= 1 and (off_by > 0).mean() < 0.01
    assert (image > 0).any(axis=-1).sum() >= size  # the pole is drawn
    # The tip's pixel is the pole's color, the point opposite it is background.
    c, r = (size - 1) / 2, 0.35 * size
    tip = (int(round(c - r * np.cos(theta))), int(round(c + r * np.sin(theta))))
    back = (int(round(c + r * np.cos(theta))), int(round(c - r * np.sin(theta))))
    np.testing.assert_array_equal(image[tip], POLE_COLOR)
    np.testing.assert_array_equal(image[back], 0)


def test_dynamics_are_pendulum_v1():
    # Under x64 the state follows gymnasium's float64 arithmetic exactly; each image
    # is the drawing of the state's angle.
    with jax.enable_x64(True):
        env = envs.make("PendulumPixels-v1", backend="jax", size=16)
        assert env.observation_space == gymnasium.spaces.Box(0, 255, (16, 16, 3), np.uint8)
        step = jax.jit(env.step)
        gym_env = gymnasium.make("Pendulum-v1")
        gym_env.reset(seed=0)
        rng = np.random.default_rng(0)
        state, obs = env.reset(jax.random.key(1))
        gym_env.unwrapped.state = np.array([state.env_state.theta,
                                            state.env_state.theta_dot], np.float64)
        for t in range(1, 201):
            action = rng.uniform(-3, 3, (1,)).astype(np.float32)
            state, obs, reward, terminated, truncated = step(state, jnp.asarray(action),
                                                             jax.random.key(0))
            _, g_reward, g_terminated, g_truncated, _ = gym_env.step(action)
            np.testing.assert_allclose([state.env_state.theta, state.env_state.theta_dot],
                                       gym_env.unwrapped.state, rtol=1e-12, atol=1e-12)
            assert float(reward) == pytest.approx(g_reward, rel=1e-6)
            assert (bool(terminated), bool(truncated)) == (g_terminated, g_truncated)
            if t % 50 == 0:
                np.testing.assert_array_equal(obs, pole_image(state.env_state.theta, 16))
        assert truncated and t == 200
