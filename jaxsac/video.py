"""Videos of a policy: one episode rendered to an MP4.

    policy = jaxsac.load_policy("runs/pendulum/checkpoints")
    video = jaxsac.record_video(policy, "runs/pendulum/policy.mp4")   # Video(path, ...)

Gymnasium ids (and jaxsac's JAX classic-control envs, which share gymnasium's ids and
dynamics) and factories of `envs.register_gym_env` render through gymnasium
(`render_mode="rgb_array"`); MuJoCo Playground tasks through MuJoCo's renderer
(Playground's `render`), on a machine without a display through EGL (`MUJOCO_GL=egl`,
set here when it is unset and MuJoCo is not imported yet). Frames are written with
imageio's ffmpeg (the extra `pip install -e '.[video]'`).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import gymnasium
import jax
import numpy as np

from jaxsac import checks, envs
from jaxsac.policy import EpisodeActing, Policy

if "MUJOCO_GL" not in os.environ and "mujoco" not in sys.modules \
        and not os.environ.get("DISPLAY"):
    os.environ["MUJOCO_GL"] = "egl"  # headless: MuJoCo renders through EGL

VIDEO_EXTRA = "pip install -e '.[video]'"


class Video(NamedTuple):
    """What `record_video` wrote: the MP4's path, its frames (the first observation's
    and one per step) and the episode's return."""

    path: str
    num_frames: int
    episode_return: float


def record_video(policy: Policy | Callable[[np.ndarray], Any], path: str | os.PathLike, *,
                 env_id: str | None = None, env_kwargs: dict[str, Any] | None = None,
                 max_steps: int = 1_000, seed: int = 0, fps: float | None = None) -> Video:
    """Renders one episode of `policy` on its env to the MP4 `path`.

    Args:
        policy: a `Policy` (its config's evaluation env is used) or any callable from
            one observation to one env action (then `env_id` is needed).
        env_id, env_kwargs: the env (None: the policy's `config.eval_env`).
        max_steps: steps after which the episode is cut (fewer when it ends first).
        seed: the env's reset seed (gymnasium) or key (Playground).
        fps: frames per second of the video (None: the env's own rate).

    Returns:
        Video(path, num_frames, episode_return).
    """
    if env_id is None:
        if not isinstance(policy, Policy):
            checks.fail("record_video", "env_id", env_id,
                        "an env id when the policy is not a jaxsac.Policy")
        env_id, env_kwargs = policy.config.eval_env
    if not callable(policy):
        checks.fail("record_video", "policy", policy, "a Policy or a callable obs -> action")
    checks.check_int("record_video", "max_steps", max_steps, 1)
    imageio = _imageio()
    kwargs = dict(env_kwargs or {})
    if isinstance(policy, Policy):  # acts on the env's frames through its frame stack
        policy = policy.episode()
    if envs.is_playground(env_id):
        obs_keys = policy.policy.config.obs_keys if isinstance(policy, EpisodeActing) \
            else None
        frames, total, rate = _playground_frames(policy, env_id, obs_keys, kwargs, max_steps,
                                                 seed)
    elif envs.source_spec(env_id) is not None or _gymnasium_knows(env_id):
        frames, total, rate = _gymnasium_frames(policy, env_id, kwargs, max_steps, seed)
    else:
        checks.fail("record_video", "env_id", env_id, "a gymnasium id, a factory of "
                    "register_gym_env, an Atari or DeepMind Control id, or a MuJoCo "
                    "Playground task (JAX envs of "
                    "register_jax_env have no renderer)")
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    imageio.mimwrite(path, frames, fps=fps or rate, codec="libx264", macro_block_size=1,
                     ffmpeg_log_level="error")
    return Video(path, len(frames), float(total))


def _imageio() -> Any:
    """imageio with its ffmpeg plugin, or ImportError naming the extra."""
    for module in ("imageio", "imageio_ffmpeg"):
        if importlib.util.find_spec(module) is None:
            raise ImportError(f"record_video needs {module.replace('_', '-')}, which is not "
                              f"installed: {VIDEO_EXTRA}")
    return importlib.import_module("imageio.v2")


def _gymnasium_knows(env_id: str) -> bool:
    try:
        gymnasium.spec(env_id)
        return True
    except gymnasium.error.Error:
        return False


def _gymnasium_frames(policy: Callable, env_id: str, kwargs: dict[str, Any],
                      max_steps: int, seed: int) -> tuple[list[np.ndarray], float, float]:
    """(frames [H, W, 3] uint8, the episode's return, the env's frame rate)."""
    env = envs.gym_env_factory(env_id, render_mode="rgb_array", **kwargs)()
    try:
        obs, _ = env.reset(seed=seed)
        frames, total = [env.render()], 0.0
        for _ in range(max_steps):
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            frames.append(env.render())
            total += float(reward)
            if terminated or truncated:
                break
        return frames, total, float(env.metadata.get("render_fps") or 30)
    finally:
        env.close()


def _playground_frames(policy: Callable, env_id: str, obs_keys: tuple[str, ...] | None,
                       kwargs: dict[str, Any], max_steps: int, seed: int
                       ) -> tuple[list[np.ndarray], float, float]:
    """(frames from MuJoCo's renderer, the episode's return, 1 / the control step)."""
    env = envs.make(env_id, backend="jax", obs_keys=obs_keys, **kwargs)
    reset, step = jax.jit(env.reset), jax.jit(env.step)
    key = jax.random.key(seed)
    state, obs = reset(key)
    states, total = [state.env_state], 0.0
    for _ in range(min(max_steps, env.max_episode_steps)):
        action = policy(jax.tree.map(np.asarray, obs))  # an array or a dict observation
        state, obs, reward, terminated, _ = step(state, np.asarray(action, np.float32), key)
        states.append(state.env_state)
        total += float(reward)
        if bool(terminated):
            break
    task = env.unwrapped.env  # Playground's MjxEnv
    frames = [np.asarray(frame) for frame in task.render(states, height=240, width=320)]
    return frames, total, 1.0 / float(task.dt)
