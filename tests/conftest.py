"""Test-session settings (a compilation cache shared by the workers, the order tests
start in) and small gymnasium envs registered for the env and runner tests."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable

import gymnasium
import numpy as np
import pytest

CACHE_VARIABLE = "JAX_COMPILATION_CACHE_DIR"
SWITCH_VARIABLE = "JAXSAC_COMPILATION_CACHE"
CACHE_KEY = pytest.StashKey[str]()
CI_LEARNING_STEPS = 6_000
"""Env steps of the learning tests sized for CI (2 CPU cores), unless a test gives its
own: RLlib's bars say "within N env steps" and these runs stop earlier and ask for the
bar there."""
LONGEST_TESTS = ("test_the_readme_python_examples_run_as_written",
                 "test_a_resumed_run_with_remote_runners_is_the_resumed_local_run",
                 "test_tuned_cartpole_five_seeds_vmapped_reach_the_bar",
                 "test_tuned_pendulum_from_pixels_three_seeds_vmapped_reach_the_bar")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--full-learning", action="store_true",
                     help="learning tests train for the reference's whole budget of env "
                          "steps (20,000 for the Pendulums) instead of the shorter runs "
                          "sized for CI; see docs/BENCHMARKS.md")


@pytest.fixture
def learning_steps(request: pytest.FixtureRequest) -> Callable[..., int]:
    """`learning_steps(budget, ci=CI_LEARNING_STEPS)`: the env steps a learning test
    trains, the reference's whole `budget` with --full-learning, else `ci`."""
    full = request.config.getoption("--full-learning")
    return lambda budget, ci=CI_LEARNING_STEPS: budget if full else ci


def pytest_configure(config: pytest.Config) -> None:
    """One XLA compilation cache for the session, shared by the xdist workers (they
    inherit the variable): many tests compile programs that others compiled already.
    jaxsac's own default stores stay off (tests replace library functions that a kept
    program would not see); tests/test_compilation.py turns them on where it tests them."""
    os.environ.setdefault(SWITCH_VARIABLE, "0")
    if CACHE_VARIABLE not in os.environ and not hasattr(config, "workerinput"):
        config.stash[CACHE_KEY] = os.environ[CACHE_VARIABLE] = tempfile.mkdtemp(
            prefix="jaxsac-tests-xla-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if CACHE_KEY in config.stash:
        shutil.rmtree(config.stash[CACHE_KEY], ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without --full-learning, the tests marked `long` are deselected (`make
    test-learning` runs them; they would take `make test` past its budget). Then
    the longest tests first, the other learning tests last: `--dist worksteal` gives
    each worker a contiguous share, so the first worker starts the longest tests at once
    and the others reach the rest of the learning tests after the quick ones."""
    if not config.getoption("--full-learning"):
        long_runs = [item for item in items if item.get_closest_marker("long")]
        if long_runs:
            config.hook.pytest_deselected(items=long_runs)
            items[:] = [item for item in items if not item.get_closest_marker("long")]

    def rank(item: pytest.Item) -> int:
        if item.name in LONGEST_TESTS:
            return 0
        return 2 if item.get_closest_marker("learning") else 1
    items.sort(key=rank)

FAULTY_ENV_ID = "jaxsac_test/Faulty-v0"
SPACES_ENV_ID = "jaxsac_test/Spaces-v0"
FAULTY_EPISODE_STEPS = 5
RECURRING_FAULT_ENV_ID = "jaxsac_test/FaultyAtSeventhStep-v0"
"""Every instance raises on its 7th step: one whole episode, then a failure in the next."""
EARLY_FAULT_ENV_ID = "jaxsac_test/FaultyAtThirdStep-v0"
"""Every instance raises on its 3rd step: no episode reaches the time limit."""
LATE_FAULT_ENV_ID = "jaxsac_test/FaultyAtSeventiethStep-v0"
"""Every instance raises on its 70th step."""
NAN_AT_SECOND_STEP_ENV_ID = "jaxsac_test/NaNAtSecondStep-v0"
"""Every instance's observation is NaN on its 2nd step."""
NAN_AT_FORTIETH_STEP_ENV_ID = "jaxsac_test/NaNAtFortiethStep-v0"
"""Every instance's observation is NaN on its 40th step."""
ENDLESS_ENV_ID = "jaxsac_test/Endless-v0"
"""FaultyEnv without a time limit: its episodes never end."""
ENDLESS_SLOW_ENV_ID = "jaxsac_test/EndlessSlow-v0"
"""FaultyEnv without a time limit whose steps take 50 ms."""


class FaultyEnv(gymnasium.Env):
    """obs [3] = (step in episode, steps in this instance's life, a seeded draw at reset);
    reward = step in episode. `step` raises on the instance's lifetime steps listed in
    `fail_at_steps` (1-based, counting attempts) when its first reset was seeded with
    `fail_env_seed` (any seed when None); `reset` raises when `fail_reset`. On the
    lifetime steps in `nan_obs_at_steps` the observation is NaN, in `inf_reward_at_steps`
    the reward is inf, in `bad_shape_at_steps` the observation has 4 entries, in
    `huge_obs_at_steps` it is float64 with an entry of 1e39 (finite, but inf as float32),
    in `huge_reward_at_steps` the reward is 1e39, in `vector_reward_at_steps` the
    reward has shape (2,). Each step sleeps `step_sleep_s` seconds. While
    `FaultyEnv.FAILING_CONSTRUCTIONS` is positive, a construction in this process counts
    it down and raises.

    Every step that returns is logged in `FaultyEnv.LOG` as (obs, action, reward,
    next obs), so a test can check that each stored transition is one an env produced.
    """

    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)
    LOG: list = []
    FAILING_CONSTRUCTIONS = 0

    def __init__(self, fail_at_steps=(), fail_env_seed=None, fail_reset=False,
                 nan_obs_at_steps=(), inf_reward_at_steps=(), bad_shape_at_steps=(),
                 huge_obs_at_steps=(), huge_reward_at_steps=(), vector_reward_at_steps=(),
                 step_sleep_s=0.0):
        if FaultyEnv.FAILING_CONSTRUCTIONS > 0:
            FaultyEnv.FAILING_CONSTRUCTIONS -= 1
            raise RuntimeError("injected construction failure")
        self.fail_at_steps = tuple(fail_at_steps)
        self.fail_env_seed = fail_env_seed
        self.fail_reset = fail_reset
        self.nan_obs_at_steps = tuple(nan_obs_at_steps)
        self.inf_reward_at_steps = tuple(inf_reward_at_steps)
        self.bad_shape_at_steps = tuple(bad_shape_at_steps)
        self.huge_obs_at_steps = tuple(huge_obs_at_steps)
        self.huge_reward_at_steps = tuple(huge_reward_at_steps)
        self.vector_reward_at_steps = tuple(vector_reward_at_steps)
        self.step_sleep_s = step_sleep_s
        self.first_seed = None
        self.lifetime_steps = 0
        self.t = 0
        self.draw = 0.0

    def _obs(self):
        return np.array([self.t, self.lifetime_steps, self.draw], np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if self.first_seed is None:
            self.first_seed = seed
        if self.fail_reset:
            raise RuntimeError("injected reset failure")
        self.t = 0
        self.draw = float(self.np_random.uniform())
        return self._obs(), {}

    def step(self, action):
        time.sleep(self.step_sleep_s)
        before = self._obs()
        self.lifetime_steps += 1
        seed_fails = self.fail_env_seed is None or self.first_seed == self.fail_env_seed
        if seed_fails and self.lifetime_steps in self.fail_at_steps:
            raise RuntimeError(f"injected failure at step {self.lifetime_steps}")
        self.t += 1
        obs, reward = self._obs(), float(self.t)
        if self.lifetime_steps in self.nan_obs_at_steps:
            obs[2] = np.nan
        if self.lifetime_steps in self.inf_reward_at_steps:
            reward = np.inf
        if self.lifetime_steps in self.bad_shape_at_steps:
            obs = np.append(obs, np.float32(0))
        if self.lifetime_steps in self.huge_obs_at_steps:
            obs = obs.astype(np.float64)
            obs[2] = 1e39
        if self.lifetime_steps in self.huge_reward_at_steps:
            reward = 1e39
        if self.lifetime_steps in self.vector_reward_at_steps:
            reward = np.array([reward, reward])
        FaultyEnv.LOG.append((before, np.array(action, np.float32), reward, obs.copy()))
        return obs, reward, False, False, {}


class SpacesEnv(gymnasium.Env):
    """An env with the given spaces, for space validation tests."""

    def __init__(self, observation_space, action_space):
        self.observation_space = observation_space
        self.action_space = action_space

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action):
        return self.observation_space.sample(), 0.0, False, False, {}


if FAULTY_ENV_ID not in gymnasium.registry:
    gymnasium.register(FAULTY_ENV_ID, entry_point=FaultyEnv,
                       max_episode_steps=FAULTY_EPISODE_STEPS, disable_env_checker=True)
for env_id, fail_at in ((RECURRING_FAULT_ENV_ID, (7,)), (EARLY_FAULT_ENV_ID, (3,)),
                        (LATE_FAULT_ENV_ID, (70,))):
    if env_id not in gymnasium.registry:
        gymnasium.register(env_id, entry_point=FaultyEnv, kwargs={"fail_at_steps": fail_at},
                           max_episode_steps=FAULTY_EPISODE_STEPS, disable_env_checker=True)
for env_id, nan_at in ((NAN_AT_SECOND_STEP_ENV_ID, (2,)), (NAN_AT_FORTIETH_STEP_ENV_ID, (40,))):
    if env_id not in gymnasium.registry:
        gymnasium.register(env_id, entry_point=FaultyEnv, kwargs={"nan_obs_at_steps": nan_at},
                           max_episode_steps=FAULTY_EPISODE_STEPS, disable_env_checker=True)
for env_id, sleep_s in ((ENDLESS_ENV_ID, 0.0), (ENDLESS_SLOW_ENV_ID, 0.05)):
    if env_id not in gymnasium.registry:
        gymnasium.register(env_id, entry_point=FaultyEnv, kwargs={"step_sleep_s": sleep_s},
                           disable_env_checker=True)
if SPACES_ENV_ID not in gymnasium.registry:
    gymnasium.register(SPACES_ENV_ID, entry_point=SpacesEnv, disable_env_checker=True)
