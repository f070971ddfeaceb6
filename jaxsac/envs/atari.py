"""Atari games from pixels: ids "ALE/<Game>-v5" built by ale-py with gymnasium's
`AtariPreprocessing` applied (the `atari` extra: pip install -e '.[atari]').

    SACConfig(env_id="ALE/Pong-v5", frame_stack=4)   # discrete SAC on [84, 84, 1] frames

The observation is one grayscale frame [84, 84, 1] uint8 (the max of the last two ALE
frames of each agent step, resized), each agent step repeats the action for
`frame_skip` = 4 emulator frames, and a reset takes up to `noop_max` = 30 random no-op
steps. Frames are stacked by the replay buffer and the runners (`frame_stack`), not by
gymnasium's FrameStackObservation, so each frame is stored once. The action space is
the game's Discrete set. Keyword arguments (SACConfig.env_kwargs) set the preprocessing
(noop_max, frame_skip, screen_size, terminal_on_life_loss) or go to ale-py's
`gymnasium.make` (e.g. repeat_action_probability; ALE's frameskip is always 1 here, the
preprocessing skips).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
from typing import Any

import gymnasium

ATARI_PREFIX = "ALE/"
ATARI_EXTRA = "pip install -e '.[atari]'"


def is_atari(env_id: str) -> bool:
    """Whether `env_id` names an Atari game of ale-py ("ALE/<Game>-v5")."""
    return env_id.startswith(ATARI_PREFIX)


def _ale() -> Any:
    """ale_py with its games registered in gymnasium, or ImportError naming the extra."""
    for module in ("ale_py", "cv2"):
        if importlib.util.find_spec(module) is None:
            raise ImportError(f"Atari envs need {module}, which is not installed: "
                              f"{ATARI_EXTRA}")
    ale_py = importlib.import_module("ale_py")
    gymnasium.register_envs(ale_py)
    return ale_py


def make_atari(env_id: str, *, noop_max: int = 30, frame_skip: int = 4,
               screen_size: int = 84, terminal_on_life_loss: bool = False,
               **kwargs: Any) -> gymnasium.Env:
    """The game `env_id` with AtariPreprocessing (grayscale [screen_size, screen_size, 1]
    uint8 frames, `frame_skip`, up to `noop_max` no-ops at reset); `kwargs` go to
    ale-py's env."""
    _ale()
    env = gymnasium.make(env_id, frameskip=1, **kwargs)
    return gymnasium.wrappers.AtariPreprocessing(
        env, noop_max=noop_max, frame_skip=frame_skip, screen_size=screen_size,
        terminal_on_life_loss=terminal_on_life_loss, grayscale_obs=True,
        grayscale_newaxis=True, scale_obs=False)


def atari_spec(env_id: str) -> gymnasium.envs.registration.EnvSpec:
    """The gymnasium spec that builds `make_atari(env_id, **kwargs)` (no time limit of
    its own: ale-py truncates an episode after 108,000 emulator frames)."""
    return gymnasium.envs.registration.EnvSpec(
        env_id, entry_point=functools.partial(make_atari, env_id))
