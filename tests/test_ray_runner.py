"""Remote env runners on a local Ray cluster of 2 CPUs: the same run as the local loop,
a runner whose process dies mid-block, a runner that keeps dying, and bad settings."""

from __future__ import annotations

import importlib.util
import pathlib

import gymnasium
import numpy as np
import pytest
import ray

import jaxsac
from jaxsac import checkpoint
from jaxsac.envs import EnvFailureError
from jaxsac.replay.state import FAILED, NOT_A_START, RESET, TRUNCATED
from tests.support import dict_envs, image_envs
from tests.support.helpers import assert_counter_transitions_are_real, buffer_rows, leaves_equal
from tests.support.ray_envs import (
    ALWAYS_DIES_ENV_ID,
    COUNTER_ENV_ID,
    DEATH_STEP,
    DIES_ONCE_ENV_ID,
    HANGS_ONCE_ENV_ID,
    CounterEnv,
)

REPO = pathlib.Path(__file__).resolve().parent.parent
COUNTER_RUN = dict(backend="gymnasium", num_envs=4, num_env_runners=2, hidden_sizes=(16, 16),
                   batch_size=8, buffer_capacity=1_000, learning_starts=80, log_every=80,
                   total_env_steps=320, host_block_steps=4, eval_episodes=1)
"""Two runners of two envs; 80 iterations in blocks of 4. An env's episodes take 7 steps
and a reset row: its lifetime step 34 falls in iteration 37, its 5th step of an episode."""


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray of 2 CPUs whose workers import the test envs from this repository."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})
    yield
    ray.shutdown()


def test_two_remote_runners_train_bit_for_bit_as_the_local_loop(ray_cluster):
    """Prioritized n-step replay, normalized observations and pink exploration noise."""
    config = jaxsac.SACConfig(env_id="Pendulum-v1", backend="gymnasium", num_envs=4, seed=3,
                              total_env_steps=480, learning_starts=160, log_every=160,
                              host_block_steps=4, hidden_sizes=(16, 16), batch_size=16,
                              normalize_obs=True, n_step=(1, 3), prioritized=True,
                              action_noise_exponent=1.0, eval_episodes=1)
    local = jaxsac.train(config, progress=False)
    remote = jaxsac.train(config.replace(num_env_runners=2), progress=False)
    assert int(remote.state.learner.step) > 200
    assert leaves_equal(local.state.learner, remote.state.learner)
    assert leaves_equal(local.state.buffer, remote.state.buffer)
    assert leaves_equal(local.state.runner, remote.state.runner)  # observation statistics
    np.testing.assert_array_equal(local.metrics["eval_return"], remote.metrics["eval_return"])
    np.testing.assert_array_equal(remote.metrics["env_runner_restarts"], [0, 0, 0])


def test_remote_runners_act_on_the_frame_stacks_of_the_local_loop(ray_cluster):
    """Image observations with a frame stack of 3: each runner keeps its envs' stacks."""
    image_envs.register()
    config = jaxsac.SACConfig(env_id=image_envs.GYM_ID, backend="gymnasium", num_envs=4,
                              frame_stack=3, total_env_steps=80, learning_starts=40,
                              log_every=80, host_block_steps=4, hidden_sizes=(16,),
                              batch_size=8, eval_episodes=1, conv_channels=(4,),
                              conv_strides=(1,), encoder_features=8)
    local = jaxsac.train(config, progress=False)
    remote = jaxsac.train(config.replace(num_env_runners=2), progress=False)
    assert int(remote.state.learner.step) > 30
    assert leaves_equal(local.state.learner, remote.state.learner)
    assert leaves_equal(local.state.buffer, remote.state.buffer)


def test_a_resumed_run_with_remote_runners_is_the_resumed_local_run(ray_cluster, tmp_path):
    """Checkpoint at 30 iterations (mid-episode), resume to 60: the envs restart in both,
    and the remote runners give the local loop's bits, the restart rows included."""
    config = jaxsac.SACConfig(env_id=COUNTER_ENV_ID,
                              **{**COUNTER_RUN, "total_env_steps": 120, "log_every": 40})
    results = []
    for runners in (0, 2):
        run = config.replace(num_env_runners=runners, checkpoint_dir=str(tmp_path / str(runners)))
        jaxsac.train(run, progress=False)
        results.append(jaxsac.train(run.replace(total_env_steps=240, resume=True),
                                    progress=False))
    local, remote = results
    assert leaves_equal(local.state.learner, remote.state.learner)
    assert leaves_equal(local.state.buffer, remote.state.buffer)
    rows = buffer_rows(remote.state.buffer, num_envs=4)
    assert_counter_transitions_are_real(rows, NOT_A_START)
    assert np.all(rows["flags"][:, 30] & RESET) and np.all(rows["obs"][:, 31, :2] == 0)


def test_a_runner_killed_mid_block_is_replaced_and_its_envs_lose_only_that_block(
        ray_cluster):
    # Env 0 (runner 0) kills its process at its 34th step, in iteration 37 (block 36-39).
    result = jaxsac.train(jaxsac.SACConfig(env_id=DIES_ONCE_ENV_ID, **COUNTER_RUN),
                          progress=False)
    assert int(result.state.iteration) == 80 and int(result.state.learner.step) > 200
    np.testing.assert_array_equal(result.metrics["env_runner_restarts"], [0, 1, 1, 1])
    rows = buffer_rows(result.state.buffer, num_envs=4)
    flags, obs = rows["flags"], rows["obs"]
    assert_counter_transitions_are_real(rows, NOT_A_START)

    failed = (flags & FAILED) != 0
    assert not failed[2:].any()  # runner 1's envs lost nothing
    for env in (0, 1):
        np.testing.assert_array_equal(np.flatnonzero(failed[env]), np.arange(36, 40))
        # Its episode ended, truncated, at the last stored step (iteration 35, its 4th),
        # whose next observation, the failed rows' obs, is real: one step on from it.
        assert obs[env, 35, 0] == 3 and flags[env, 35] & TRUNCATED
        np.testing.assert_array_equal(obs[env, 36:40], np.repeat(obs[env, 35:36], 4, 0) +
                                      [1, 1, 0])
        # The new runner's first row is a NEXT_STEP reset row from there to the fresh
        # env's first observation; its next row is the fresh env's first step.
        assert flags[env, 40] & RESET and not flags[env, 40] & FAILED
        np.testing.assert_array_equal(obs[env, 40], obs[env, 39])
        assert obs[env, 41, 0] == 0 and obs[env, 41, 1] == 0
        assert obs[env, 41, 2] != obs[env, 35, 2]  # reseeded
        assert (flags[env, 41] & NOT_A_START) == 0
    # The failed rows hold env 0's last stored observation: 32 steps into its life; its
    # 33rd step went with the lost block, and its 34th killed the process.
    assert obs[0, 36, 1] == DEATH_STEP - 2


def test_a_runner_that_stops_answering_is_replaced_after_sample_timeout_s(ray_cluster):
    config = jaxsac.SACConfig(env_id=HANGS_ONCE_ENV_ID, sample_timeout_s=10.0,
                              **{**COUNTER_RUN, "total_env_steps": 160})
    result = jaxsac.train(config, progress=False)
    np.testing.assert_array_equal(result.metrics["env_runner_restarts"], [0, 1])
    flags = buffer_rows(result.state.buffer, num_envs=4)["flags"]
    for env in (0, 1):
        np.testing.assert_array_equal(np.flatnonzero(flags[env] & FAILED), np.arange(36, 40))
    assert not np.any(flags[2:] & FAILED)


def test_a_runner_that_keeps_dying_stops_the_run_after_a_checkpoint(ray_cluster, tmp_path):
    config = jaxsac.SACConfig(env_id=ALWAYS_DIES_ENV_ID, max_env_runner_restarts=1,
                              checkpoint_dir=str(tmp_path), **{**COUNTER_RUN,
                                                               "total_env_steps": 640})
    with pytest.raises(EnvFailureError, match=r"env runner 0 \(envs 0\.\.1\) failed after 1 "
                       r"replacement\(s\) \(max_env_runner_restarts=1\); last cause: "
                       r"ActorDiedError") as raised:
        jaxsac.train(config, progress=False)
    assert "was saved to" in str(raised.value)
    saved = checkpoint.latest_step(tmp_path)
    assert saved is not None and saved > 0


def test_missing_ray_is_named_with_its_extra(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "ray" else find_spec(name, *args))
    config = jaxsac.SACConfig(env_id="Pendulum-v1", backend="gymnasium", num_envs=2,
                              num_env_runners=2)
    with pytest.raises(ImportError, match=r"num_env_runners=2 needs Ray.*pip install -e "
                                          r"'\.\[ray\]'"):
        jaxsac.train(config, progress=False)


@pytest.mark.parametrize(("changes", "message"), [
    ({"num_envs": 3, "num_env_runners": 2}, r"num_envs=3.*multiple of num_env_runners=2"),
    ({"num_envs": 4, "num_env_runners": 2, "num_envs_per_env_runner": 3},
     r"num_envs_per_env_runner=3.*num_envs / num_env_runners = 4 / 2"),
    ({"num_envs_per_env_runner": 2}, r"num_envs_per_env_runner=2.*None without remote"),
    ({"num_env_runners": -1}, r"num_env_runners=-1"),
    ({"sample_timeout_s": 0.0}, r"sample_timeout_s=0\.0"),
    # The local loop cannot time out a step of its own envs: refused, not ignored.
    ({"sample_timeout_s": 10.0}, r"sample_timeout_s=10\.0 is invalid: must be 60\.0 \(the "
                                 r"default\) without remote runners"),
    ({"max_env_runner_restarts": -1}, r"max_env_runner_restarts=-1"),
    ({"ray_address": ""}, r"ray_address=''"),
])
def test_bad_runner_settings_are_named(changes, message):
    with pytest.raises(ValueError, match=message):
        jaxsac.SACConfig(**changes)


def test_remote_runners_need_gymnasium_envs():
    config = jaxsac.SACConfig(env_id="Pendulum-v1", num_env_runners=1)
    with pytest.raises(ValueError, match=r"num_env_runners=1 needs gymnasium envs.*"
                                         r"backend='gymnasium'"):
        jaxsac.train(config, progress=False)


def test_envs_per_runner():
    config = jaxsac.SACConfig(num_envs=6, buffer_capacity=6_000)
    assert config.envs_per_env_runner == 6
    assert config.replace(num_env_runners=3).envs_per_env_runner == 2
    assert config.replace(num_env_runners=2,
                          num_envs_per_env_runner=3).envs_per_env_runner == 3


def test_remote_runners_build_their_envs_with_a_registered_factory_and_its_kwargs(
        ray_cluster):
    """A factory defined here (a closure: Ray pickles it by value) wraps the counter in a
    reward wrapper scaled by an env kwarg; each remote runner's envs are built by it."""
    def scaled_counter(scale: float, **kwargs):
        return gymnasium.wrappers.TransformReward(CounterEnv(**kwargs), lambda r: scale * r)

    jaxsac.envs.register_gym_env("jaxsac_test/ScaledCounter", scaled_counter,
                                 max_episode_steps=7)
    try:
        config = jaxsac.SACConfig(env_id="jaxsac_test/ScaledCounter",
                                  env_kwargs={"scale": 10.0},
                                  **{**COUNTER_RUN, "total_env_steps": 80, "learning_starts": 40})
        result = jaxsac.train(config, progress=False)
    finally:
        jaxsac.envs.GYM_FACTORIES.pop("jaxsac_test/ScaledCounter")
    rows = buffer_rows(result.state.buffer, num_envs=4)
    start = (rows["flags"] & NOT_A_START) == 0
    # Every real transition pays 10 x the counter's reward, its new step count.
    np.testing.assert_array_equal(rows["reward"][start], 10.0 * rows["next_obs"][start][:, 0])
    np.testing.assert_array_equal(result.metrics["episode_return_mean"], [10.0 * 28])


def test_remote_runners_with_a_dict_observation_train_bit_for_bit_as_the_local_loop(
        ray_cluster):
    """A Dict observation (a uint8 picture, two float entries) travels from the remote
    runners as the local runner gives it: the same buffer rows, learner and statistics,
    each entry normalized on its own, the picture kept uint8."""
    dict_envs.register()
    config = jaxsac.SACConfig(env_id=dict_envs.GYM_ID, backend="gymnasium", num_envs=4,
                              seed=5, total_env_steps=240, learning_starts=80, log_every=80,
                              host_block_steps=4, hidden_sizes=(16, 16), batch_size=16,
                              normalize_obs=True, n_step=(1, 3), eval_episodes=1)
    local = jaxsac.train(config, progress=False)
    remote = jaxsac.train(config.replace(num_env_runners=2), progress=False)
    assert remote.state.buffer.obs["pixels"].dtype == np.uint8
    assert int(remote.state.learner.step) > 100
    assert leaves_equal(local.state.learner, remote.state.learner)
    assert leaves_equal(local.state.buffer, remote.state.buffer)
    assert leaves_equal(local.state.runner, remote.state.runner)
    np.testing.assert_array_equal(local.metrics["eval_return"], remote.metrics["eval_return"])

