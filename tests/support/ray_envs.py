"""Gymnasium envs for the remote-runner tests, registered on import. Ray's worker
processes import this module through the registered entry point, so the test cluster
puts the repository on their PYTHONPATH."""

from __future__ import annotations

import os
import signal
import time

import gymnasium
import numpy as np

COUNTER_ENV_ID = "jaxsac_test/Counter-v0"
DIES_ONCE_ENV_ID = "jaxsac_test/CounterDiesOnce-v0"
ALWAYS_DIES_ENV_ID = "jaxsac_test/CounterAlwaysDies-v0"
HANGS_ONCE_ENV_ID = "jaxsac_test/CounterHangsOnce-v0"
COUNTER_EPISODE_STEPS = 7
DEATH_STEP = 34
"""The lifetime step at which the dying counters kill their own process."""
TEST_PROCESS = int(os.environ.setdefault("JAXSAC_TEST_PROCESS", str(os.getpid())))
"""The test's own process (Ray's workers inherit the variable), which never dies."""


class CounterEnv(gymnasium.Env):
    """obs [3] = (step in episode, steps in this instance's life, a seeded draw at reset),
    reward = step in episode: every real transition (s, a, r, s') has s'[0] = s[0] + 1,
    s'[1] = s[1] + 1, s'[2] = s[2] and r = s'[0], so a test can tell a stored transition
    from an invented one.

    die_at_step: kill this process (SIGKILL, as a crash would) on that lifetime step,
    when the first reset was seeded with `die_env_seed` (any seed when None), unless this
    is the test's own process (which evaluates the policy on these envs too).
    hang: on that step, hang for an hour instead (a runner that stops answering).
    """

    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, die_at_step: int | None = None, die_env_seed: int | None = None,
                 hang: bool = False):
        self.die_at_step = die_at_step
        self.die_env_seed = die_env_seed
        self.hang = hang
        self.first_seed = None
        self.lifetime_steps = 0
        self.t = 0
        self.draw = 0.0

    def _obs(self) -> np.ndarray:
        return np.array([self.t, self.lifetime_steps, self.draw], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.first_seed is None:
            self.first_seed = seed
        self.t = 0
        self.draw = float(self.np_random.uniform())
        return self._obs(), {}

    def step(self, action):
        self.lifetime_steps += 1
        dies = (self.die_env_seed is None or self.first_seed == self.die_env_seed) and (
            os.getpid() != TEST_PROCESS)
        if dies and self.lifetime_steps == self.die_at_step:
            if self.hang:
                time.sleep(3600)
            os.kill(os.getpid(), signal.SIGKILL)
        self.t += 1
        return self._obs(), float(self.t), False, False, {}


def _register() -> None:
    for env_id, kwargs in ((COUNTER_ENV_ID, {}),
                           (DIES_ONCE_ENV_ID, {"die_at_step": DEATH_STEP, "die_env_seed": 0}),
                           (ALWAYS_DIES_ENV_ID, {"die_at_step": DEATH_STEP}),
                           (HANGS_ONCE_ENV_ID, {"die_at_step": DEATH_STEP, "die_env_seed": 0,
                                                "hang": True})):
        if env_id not in gymnasium.registry:
            gymnasium.register(env_id, entry_point="tests.support.ray_envs:CounterEnv",
                               kwargs=kwargs,
                               max_episode_steps=COUNTER_EPISODE_STEPS,
                               disable_env_checker=True)


_register()
