"""The trained policy as a plain function: `load_policy(directory)` -> obs -> env action.

    policy = jaxsac.load_policy("runs/pendulum/checkpoints")
    action = policy(obs)              # numpy, in the env's action Box

Works in a fresh process: everything it needs (config, observation statistics, env
action bounds) is in the checkpoint.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from jaxsac import checkpoint, connectors
from jaxsac.assembly import deterministic_policy
from jaxsac.config import SACConfig


class Policy:
    """The deterministic policy of a checkpoint: obs -> env action (numpy).

    obs: one observation [*obs_shape] or a batch [B, *obs_shape]. Returns the mode of
    the policy as env actions: tanh(μ) rescaled to the env's action Box, [*act_shape]
    or [B, *act_shape], or for a Discrete action space the argmax as an integer [] or
    [B] (int64, offset by the space's `start`).
    Attributes: config, step, actor_params, obs_stats (observation statistics).
    """

    def __init__(self, config: SACConfig, step: int, actor_params: Any, obs_stats: Any,
                 meta: dict[str, Any]):
        self.config, self.step = config, step
        self.actor_params, self.obs_stats = actor_params, obs_stats
        self.obs_shape = tuple(meta["obs_shape"])
        self.actions = connectors.actions_from_metadata(meta)
        self._act = deterministic_policy(config, meta["obs_dim"], self.actions)

    def __call__(self, obs: Any) -> np.ndarray:
        obs = np.asarray(obs, np.float32)
        single = obs.shape == self.obs_shape
        if not single and obs.shape[1:] != self.obs_shape:
            raise ValueError(f"Policy: obs of shape {obs.shape}; expected {self.obs_shape} "
                             f"or (B, {', '.join(map(str, self.obs_shape))})")
        batch = connectors.flatten_obs(obs[None] if single else obs)
        action = np.asarray(self._act(self.actor_params, self.obs_stats, batch))
        env_action = self.actions.to_env(action.astype(self.actions.host_dtype))
        return env_action[0] if single else env_action

    def __repr__(self) -> str:
        return f"Policy({self.config.env_id!r}, step={self.step})"


def load_policy(directory: str | os.PathLike, step: int | None = None, *,
                seed_index: int = 0, module_id: int = 0) -> Policy:
    """The deterministic policy of checkpoint `step` (the newest when None).

    Reads only the actor's parameters and the observation statistics (never the replay
    buffer). For a checkpoint of several seeds, `seed_index` picks one; for a
    multi-agent run with independent modules, `module_id` picks one module (agent
    `module_id`'s policy; the only module, 0, otherwise).
    """
    stored = checkpoint.restore_actor(directory, step, seed_index=seed_index,
                                      module_id=module_id)
    return Policy(stored.config, stored.step, stored.actor_params, stored.obs_stats,
                  stored.meta)
