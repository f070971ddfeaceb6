"""Atari and DeepMind Control from pixels through jaxsac's env sources: the runners'
observations are the frames the libraries themselves give for the same seed and
actions, with the shapes and dtypes the image observations promise."""

from __future__ import annotations

import importlib

import ale_py
import gymnasium
import numpy as np
import pytest

import jaxsac
from jaxsac import envs
from jaxsac.observations import ObsSpec, obs_spec
from jaxsac.runners import GymRunner


def test_atari_frames_are_ale_py_frames_preprocessed():
    factory = envs.make("ALE/Pong-v5", backend="gymnasium")
    assert factory.observation_space == gymnasium.spaces.Box(0, 255, (84, 84, 1), np.uint8)
    assert factory.action_space == gymnasium.spaces.Discrete(6)
    assert obs_spec(factory.observation_space) == ObsSpec.image((84, 84, 1))
    gymnasium.register_envs(ale_py)
    reference = gymnasium.wrappers.AtariPreprocessing(
        gymnasium.make("ALE/Pong-v5", frameskip=1), noop_max=30, frame_skip=4,
        screen_size=84, grayscale_obs=True, grayscale_newaxis=True)
    first, _ = reference.reset(seed=5)
    actions = np.random.default_rng(0).integers(0, 6, 6)
    with GymRunner(factory, 1, seed=5) as runner:
        spec = runner.obs_spec
        np.testing.assert_array_equal(spec.unpack(runner.raw_obs)[0], first)
        for action in actions:
            step, _ = runner.unpack(runner.step_packed(np.array([action], np.int32)))
            expected, reward = reference.step(action)[:2]
            assert step.next_obs.dtype == np.uint8 and step.next_obs.shape == (1, 84, 84, 1)
            np.testing.assert_array_equal(step.next_obs[0], expected)
            assert step.reward[0] == reward
    assert envs.max_episode_steps("ALE/Pong-v5") is None


def test_dmc_pixels_are_dm_control_renders_with_action_repeat():
    factory = envs.make("dmc/cartpole-swingup-pixels", backend="gymnasium", action_repeat=2)
    suite = importlib.import_module("dm_control.suite")  # as jaxsac loads it (EGL)
    assert factory.observation_space == gymnasium.spaces.Box(0, 255, (84, 84, 3), np.uint8)
    assert factory.action_space == gymnasium.spaces.Box(-1, 1, (1,), np.float32)
    assert envs.max_episode_steps("dmc/cartpole-swingup-pixels", {"action_repeat": 2}) == 500
    reference = suite.load("cartpole", "swingup", task_kwargs={"random": 3})
    reference.reset()
    actions = np.random.default_rng(0).uniform(-1, 1, (3, 1)).astype(np.float32)
    with GymRunner(factory, 1, seed=3) as runner:
        first = runner.obs_spec.unpack(runner.raw_obs)[0]
        np.testing.assert_array_equal(first, reference.physics.render(84, 84, camera_id=0))
        for action in actions:
            step, _ = runner.unpack(runner.step_packed(action[None]))
            reward = sum(reference.step(action.astype(np.float64)).reward for _ in range(2))
            assert step.next_obs.dtype == np.uint8
            np.testing.assert_array_equal(step.next_obs[0],
                                          reference.physics.render(84, 84, camera_id=0))
            np.testing.assert_allclose(step.reward[0], reward, rtol=1e-6)


def test_dmc_state_observations_are_a_dict_of_the_task_entries():
    factory = envs.make("dmc/cartpole-swingup", backend="gymnasium")
    assert obs_spec(factory.observation_space) == ObsSpec(
        ("position", "velocity"), ((3,), (2,)), ("float32", "float32"))
    assert envs.max_episode_steps("dmc/cartpole-swingup") == 1000


# The DMC example learns in 12,500 env steps (docs/BENCHMARKS.md); cut here to a smoke run.
DMC_SMOKE = dict(total_env_steps=64, log_every=32, learning_starts=16, eval_episodes=1,
                 buffer_capacity=1000)


@pytest.mark.parametrize("env_id, smoke", [("ALE/Pong-v5", {}),
                                           ("dmc/cartpole-swingup-pixels", DMC_SMOKE)])
@pytest.mark.filterwarnings("ignore:Mean of empty slice")  # a period without updates
def test_cpu_examples_train_evaluate_and_save(env_id, smoke, tmp_path):
    # One iteration per host block: fewer programs to compile.
    config = jaxsac.tuned(f"{env_id}-cpu", checkpoint_dir=str(tmp_path), checkpoint_every=64,
                          host_block_steps=1, **smoke)
    result = jaxsac.train(config)
    rows = result.metrics
    assert list(rows["env_steps"]) == list(range(32, config.total_env_steps + 1, 32))
    assert np.isfinite(rows["eval_return"]).all() and np.isfinite(rows["qf_loss"][-1])
    state = result.state
    assert state.buffer.obs.dtype == np.uint8  # frames, stored once
    assert state.buffer.obs.shape[1:] == obs_spec(
        envs.from_config(config).observation_space).shapes[0]
    restored, _ = jaxsac.checkpoint.restore(tmp_path)
    assert int(restored.iteration) == int(state.iteration)
    np.testing.assert_array_equal(restored.buffer.obs, state.buffer.obs)


def test_a_dmc_episode_renders_to_a_video(tmp_path):
    video = jaxsac.record_video(lambda obs: np.zeros(1, np.float32), tmp_path / "dmc.mp4",
                                env_id="dmc/cartpole-swingup-pixels", max_steps=3,
                                env_kwargs={"size": 32})
    assert video.num_frames == 4 and (tmp_path / "dmc.mp4").stat().st_size > 0
