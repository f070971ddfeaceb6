"""DeepMind Control Suite tasks through gymnasium (the `dmc` extra: pip install -e
'.[dmc]'), from their state or from pixels:

    SACConfig(env_id="dmc/cartpole-swingup-pixels", env_kwargs={"action_repeat": 8},
              frame_stack=3)

Ids are "dmc/<domain>-<task>" (the state: a Dict of the task's observations, each a
float32 Box, scalars as [1]) and "dmc/<domain>-<task>-pixels" (an [size, size, 3] uint8
image rendered by MuJoCo from camera `camera_id`, 84 x 84 from camera 0 by default;
MUJOCO_GL defaults to "egl", headless rendering). Each env step repeats the action
`action_repeat` times (default 1) and sums the rewards. An episode ends when the task's
does: terminated when its last discount is 0, else truncated (the suite's time limit,
1,000 physics-control steps, so 1000 / action_repeat env steps). A reset with a seed
rebuilds the task with that seed.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
from typing import Any

import gymnasium
import numpy as np

from jaxsac import checks

DMC_PREFIX = "dmc/"
PIXELS_SUFFIX = "-pixels"
DMC_EXTRA = "pip install -e '.[dmc]'"
SUITE_STEPS = 1000
"""Control steps of a suite episode (its time limit)."""


def is_dmc(env_id: str) -> bool:
    """Whether `env_id` names a DeepMind Control task ("dmc/<domain>-<task>[-pixels]")."""
    return env_id.startswith(DMC_PREFIX)


def parse_dmc_id(env_id: str) -> tuple[str, str, bool]:
    """(domain, task, from pixels) of "dmc/<domain>-<task>[-pixels]"; a ValueError
    names a malformed id."""
    name = env_id[len(DMC_PREFIX):]
    pixels = name.endswith(PIXELS_SUFFIX)
    name = name[:-len(PIXELS_SUFFIX)] if pixels else name
    domain, _, task = name.partition("-")
    if not domain or not task:
        checks.fail("dmc", "env_id", env_id, "'dmc/<domain>-<task>' or "
                    "'dmc/<domain>-<task>-pixels', e.g. 'dmc/cartpole-swingup-pixels'")
    return domain, task, pixels


def _suite() -> Any:
    """dm_control.suite (rendering with EGL unless MUJOCO_GL says otherwise), or
    ImportError naming the extra."""
    if importlib.util.find_spec("dm_control") is None:
        raise ImportError(f"DeepMind Control envs need dm_control, which is not "
                          f"installed: {DMC_EXTRA}")
    os.environ.setdefault("MUJOCO_GL", "egl")
    return importlib.import_module("dm_control.suite")


class DMCEnv(gymnasium.Env):
    """One DeepMind Control task as a gymnasium env (see the module docstring)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 50}

    def __init__(self, domain: str, task: str, pixels: bool = False, action_repeat: int = 1,
                 size: int = 84, camera_id: int = 0, render_mode: str | None = "rgb_array"):
        self._domain, self._task, self._pixels = domain, task, pixels
        self._repeat = checks.check_int("dmc", "action_repeat", action_repeat, 1)
        self._size = checks.check_int("dmc", "size", size, 1)
        self._camera = camera_id
        self.render_mode = render_mode
        self._env = self._load(None)
        spec = self._env.action_spec()
        self.action_space = gymnasium.spaces.Box(spec.minimum.astype(np.float32),
                                                 spec.maximum.astype(np.float32),
                                                 dtype=np.float32)
        if pixels:
            self.observation_space = gymnasium.spaces.Box(0, 255, (size, size, 3), np.uint8)
        else:
            self.observation_space = gymnasium.spaces.Dict({
                k: gymnasium.spaces.Box(-np.inf, np.inf, (int(np.prod(v.shape)) or 1,),
                                        np.float32)
                for k, v in self._env.observation_spec().items()})

    def _load(self, seed: int | None) -> Any:
        return _suite().load(self._domain, self._task, task_kwargs={"random": seed})

    def _observation(self, time_step: Any) -> Any:
        if self._pixels:
            return self.render()
        return {k: np.asarray(v, np.float32).reshape(-1)
                for k, v in time_step.observation.items()}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None:
            self._env = self._load(seed)
        return self._observation(self._env.reset()), {}

    def step(self, action: Any):
        reward, time_step = 0.0, None
        for _ in range(self._repeat):
            time_step = self._env.step(np.asarray(action, np.float64))
            reward += time_step.reward or 0.0
            if time_step.last():
                break
        ended = time_step.last()
        terminated = bool(ended and time_step.discount == 0)
        return (self._observation(time_step), float(reward), terminated,
                bool(ended and not terminated), {})

    def render(self) -> np.ndarray:
        """[size, size, 3] uint8: the scene from camera `camera_id`."""
        return self._env.physics.render(self._size, self._size, camera_id=self._camera)


def make_dmc(env_id: str, **kwargs: Any) -> DMCEnv:
    """The env of `env_id` ("dmc/<domain>-<task>[-pixels]") with `kwargs`
    (action_repeat, size, camera_id)."""
    domain, task, pixels = parse_dmc_id(env_id)
    return DMCEnv(domain, task, pixels, **kwargs)


def dmc_spec(env_id: str) -> gymnasium.envs.registration.EnvSpec:
    """The gymnasium spec that builds `make_dmc(env_id, **kwargs)`; the suite's own
    time limit ends its episodes (see `dmc_time_limit`)."""
    parse_dmc_id(env_id)
    return gymnasium.envs.registration.EnvSpec(
        env_id, entry_point=functools.partial(make_dmc, env_id))


def dmc_time_limit(kwargs: dict[str, Any] | None) -> int:
    """Env steps of a suite episode with `kwargs`' action_repeat: ceil(1000 / repeat)."""
    return -(-SUITE_STEPS // int((kwargs or {}).get("action_repeat", 1)))
