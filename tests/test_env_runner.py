"""Env runners: the NEXT_STEP stream the buffer expects, episode metrics, fault tolerance,
and clear errors for unsupported spaces."""

from __future__ import annotations

import functools

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.wrappers.utils import RunningMeanStd

import jaxsac.envs as envs
from jaxsac import connectors
from jaxsac.config import SACConfig
from jaxsac.envs import EnvFailureError
from jaxsac.host_loop import HostLoop, host_runner
from jaxsac.runners import GymRunner, make_jax_runner, random_act_fn
from jaxsac.schedule import Phase
from jaxsac.types import Step
from tests.conftest import FAULTY_ENV_ID, SPACES_ENV_ID


def _stack(rows):
    """[(Step, EpisodeInfo)] per call -> (Step, EpisodeInfo) of numpy arrays [T, E, ...]."""
    return jax.tree.map(lambda *xs: np.stack([np.asarray(x) for x in xs]), *rows)


def _env_torque(action):
    """Pendulum's Box [-2, 2]: low + (a + 1)(high - low)/2 in float32, clipped."""
    low, high = np.float32(-2.0), np.float32(2.0)
    return np.clip(low + (action + np.float32(1)) * (high - low) / np.float32(2), low, high)


def _check_next_step_stream(steps, episodes, first_obs, failed=None):
    """The NEXT_STEP stream rules, env by env; returns the number of finished episodes.

    failed: [T, E] bool, rows of failed env steps (they end an episode, adding no length)."""
    num_calls, num_envs = steps.reward.shape
    finished = 0
    for e in range(num_envs):
        previous_done, episode_return, episode_length = False, 0.0, 0
        expected_obs = first_obs[e]
        for t in range(num_calls):
            np.testing.assert_array_equal(steps.obs[t, e], expected_obs, err_msg=f"{t=} {e=}")
            done = bool(steps.terminated[t, e] or steps.truncated[t, e])
            if previous_done:  # the reset row: final obs in, first obs of the next episode out
                assert steps.reward[t, e] == 0 and not done, (t, e)
            else:
                episode_return += float(steps.reward[t, e])
                episode_length += 0 if failed is not None and failed[t, e] else 1
            assert bool(episodes.done[t, e]) == done
            if done:
                assert episodes.episode_return[t, e] == pytest.approx(episode_return, rel=1e-5)
                assert episodes.episode_length[t, e] == episode_length
                finished += 1
                episode_return, episode_length = 0.0, 0
            else:
                assert episodes.episode_return[t, e] == 0 and episodes.episode_length[t, e] == 0
            previous_done = done
            expected_obs = steps.next_obs[t, e]
    return finished


def _check_dtypes(steps, num_envs, obs_dim, act_dim):
    assert steps.obs.shape[1:] == (num_envs, obs_dim) and steps.obs.dtype == np.float32
    assert steps.next_obs.dtype == np.float32 and steps.reward.dtype == np.float32
    assert steps.action.shape[1:] == (num_envs, act_dim) and steps.action.dtype == np.float32
    assert steps.terminated.dtype == np.bool_ and steps.truncated.dtype == np.bool_


def _run_jax(runner, act_fn, key, num_calls):
    rstate = runner.init(key)
    first_obs = rstate.obs

    def body(rstate, key):
        rstate, step, episodes = runner.step(rstate, act_fn, key)
        return rstate, (step, episodes)

    rstate, (steps, episodes) = jax.jit(lambda r, k: jax.lax.scan(body, r, k))(
        rstate, jax.random.split(jax.random.key(1), num_calls))
    return rstate, np.asarray(first_obs), jax.tree.map(np.asarray, (steps, episodes))


def test_jax_runner_stream_pendulum_against_gymnasium_dynamics():
    env = envs.make("Pendulum-v1", backend="jax", max_episode_steps=4)
    runner = make_jax_runner(env, num_envs=3)
    _, first_obs, (steps, episodes) = _run_jax(runner, random_act_fn(1), jax.random.key(0), 14)
    _check_dtypes(steps, 3, 3, 1)
    assert _check_next_step_stream(steps, episodes, first_obs) == 9
    assert not steps.terminated.any()
    np.testing.assert_array_equal(episodes.done.any(1), [i % 5 == 3 for i in range(14)])
    assert set(episodes.episode_length[episodes.done]) == {4}
    assert np.all(np.abs(steps.action) <= 1)
    # Real rows agree with gymnasium's Pendulum stepped from the row's obs with the
    # module action rescaled to the torque Box.
    gym_env = gymnasium.make("Pendulum-v1").unwrapped
    gym_env.reset(seed=0)
    real = ~np.roll(episodes.done, 1, axis=0)
    real[0] = True
    for t, e in zip(*np.nonzero(real), strict=True):
        cos, sin, theta_dot = steps.obs[t, e].astype(np.float64)
        gym_env.state = np.array([np.arctan2(sin, cos), theta_dot])
        obs, reward, *_ = gym_env.step(_env_torque(steps.action[t, e]))
        np.testing.assert_allclose(steps.next_obs[t, e], obs, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(steps.reward[t, e], reward, rtol=1e-5, atol=1e-5)


def test_jax_runner_mountain_car_terminations():
    env = envs.make("MountainCarContinuous-v0", backend="jax")
    runner = make_jax_runner(env, num_envs=2)
    push_with_velocity = lambda obs, key: jnp.where(obs[:, 1:] >= 0, 1.0, -1.0)  # noqa: E731
    _, first_obs, (steps, episodes) = _run_jax(runner, push_with_velocity,
                                               jax.random.key(2), 500)
    assert _check_next_step_stream(steps, episodes, first_obs) >= 4
    assert steps.terminated.sum() >= 4 and not steps.truncated.any()
    assert np.all(steps.reward[steps.terminated] > 99.0)
    assert np.all(steps.next_obs[steps.terminated][:, 0] >= 0.45)


def test_jax_runner_normalizes_obs_at_act_time_with_running_statistics():
    env = envs.make("Pendulum-v1", backend="jax", max_episode_steps=3)
    runner = make_jax_runner(env, num_envs=4, normalize_obs=True)
    first_dim = lambda obs, key: jnp.clip(obs[:, :1], -1.0, 1.0)  # noqa: E731
    rstate, first_obs, (steps, _) = _run_jax(runner, first_dim, jax.random.key(3), 7)
    reference = RunningMeanStd(shape=(3,))
    reference.update(first_obs)
    for t in range(7):
        normalized = (steps.obs[t] - reference.mean) / np.sqrt(reference.var + 1e-8)
        np.testing.assert_allclose(steps.action[t, :, 0], np.clip(normalized[:, 0], -1, 1),
                                   rtol=1e-4, atol=1e-4)
        reference.update(steps.next_obs[t])
    expected = (np.asarray(rstate.obs) - reference.mean) / np.sqrt(reference.var + 1e-8)
    to_module = connectors.EnvToModule(normalize=True)
    np.testing.assert_allclose(to_module.apply(rstate.obs_norm, rstate.obs), expected,
                               rtol=1e-4, atol=1e-4)
    # Stored obs stay raw; the learner connector normalizes batches with the same stats.
    np.testing.assert_array_equal(steps.next_obs[-1], rstate.obs)
    batch = to_module.normalize_batch(rstate.obs_norm, _batch_of(rstate.obs))
    np.testing.assert_allclose(batch.obs, expected, rtol=1e-4, atol=1e-4)


def _batch_of(obs):
    from jaxsac.types import Batch
    b = obs.shape[0]
    ones = jnp.ones(b)
    return Batch(obs, jnp.zeros((b, 1)), ones, obs, ones, jnp.ones(b, jnp.int32), ones,
                 jnp.arange(b))


def _run_gym(runner, num_calls, seed=0):
    rng = np.random.default_rng(seed)
    first_obs = np.asarray(runner.raw_obs)
    actions = rng.uniform(-1, 1, (num_calls, runner.num_envs, runner.actions.dim))
    rows = [runner.unpack(runner.step_packed(a)) for a in actions.astype(np.float32)]
    return first_obs, _stack(rows)


def test_gym_runner_stream_equals_bare_gymnasium_next_step():
    runner = GymRunner("Pendulum-v1", num_envs=2, seed=5, env_kwargs={"max_episode_steps": 4})
    first_obs, (steps, episodes) = _run_gym(runner, 12)
    runner.close()
    _check_dtypes(steps, 2, 3, 1)
    assert isinstance(runner.observation_space, gymnasium.spaces.Box)
    assert _check_next_step_stream(steps, episodes, first_obs) == 4
    # Replay each env by hand: gymnasium env i seeded with seed + i.
    for e in range(2):
        env = gymnasium.make("Pendulum-v1", max_episode_steps=4)
        obs, _ = env.reset(seed=5 + e)
        np.testing.assert_array_equal(first_obs[e], obs)
        done = False
        for t in range(12):
            if done:
                next_obs, reward, terminated, truncated = (*env.reset()[:1], 0.0, False, False)
            else:
                torque = _env_torque(steps.action[t, e])
                next_obs, reward, terminated, truncated, _ = env.step(torque)
            np.testing.assert_array_equal(steps.next_obs[t, e], next_obs)
            assert steps.reward[t, e] == np.float32(reward)
            assert (steps.terminated[t, e], steps.truncated[t, e]) == (terminated, truncated)
            done = terminated or truncated


def test_gym_runner_is_deterministic_and_takes_a_factory():
    factory = envs.make("Pendulum-v1", backend="gymnasium", max_episode_steps=3)
    streams = []
    for seed in (7, 7, 8):
        with GymRunner(factory, num_envs=2, seed=seed) as runner:
            streams.append(_run_gym(runner, 5))
    same = jax.tree.map(np.array_equal, streams[0], streams[1])
    assert all(jax.tree.leaves(same))
    assert not np.array_equal(streams[0][0], streams[2][0])


def test_host_loop_keeps_running_obs_statistics_of_every_observation():
    config = SACConfig(env_id="Pendulum-v1", backend="gymnasium", num_envs=3,
                       normalize_obs=True, host_block_steps=2, buffer_capacity=30,
                       batch_size=4)
    runner = host_runner(config)
    try:
        loop = HostLoop(config, runner)
        state = loop.run(loop.init(jax.random.key(0)), Phase.WARMUP, 5)
    finally:
        runner.close()
    # The buffer holds each iteration's obs [slot * E + env]; the obs after the last
    # iteration are its last_next_obs.
    obs = np.asarray(state.buffer.obs[:15]).reshape(5, 3, 3)
    reference = RunningMeanStd(shape=(3,))
    for t in range(5):
        reference.update(obs[t])
    reference.update(np.asarray(state.buffer.last_next_obs))
    np.testing.assert_allclose(state.runner.mean, reference.mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(state.runner.var, reference.var, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(state.runner.count, reference.count, rtol=1e-6)


FAULTY = functools.partial(GymRunner, FAULTY_ENV_ID, num_envs=2, seed=10)


def test_gym_runner_rebuilds_a_failing_env_and_ends_its_episode():
    # Env 1 (seeded 11) raises on its 3rd step; env 0 never fails.
    kwargs = {"fail_at_steps": (3,), "fail_env_seed": 11}
    with FAULTY(env_kwargs=kwargs, max_env_restarts=1) as runner:
        first_obs, (steps, episodes) = _run_gym(runner, 14)
        assert runner.num_env_restarts == 1
    with FAULTY(env_kwargs={}) as healthy:
        _, (healthy_steps, _) = _run_gym(healthy, 14)
    failed = np.zeros((14, 2), bool)
    failed[2, 1] = True
    _check_next_step_stream(steps, episodes, first_obs, failed)
    # Env 0's stream, and env 1's up to the failure, are those of a run without failures.
    for field in Step._fields:
        np.testing.assert_array_equal(getattr(steps, field)[:, 0],
                                      getattr(healthy_steps, field)[:, 0])
        np.testing.assert_array_equal(getattr(steps, field)[:2, 1],
                                      getattr(healthy_steps, field)[:2, 1])
    # Call 3: env 1's episode ends, truncated, at its last good step (t = 2).
    last_good = steps.next_obs[1, 1]
    np.testing.assert_array_equal(steps.obs[2, 1], last_good)
    np.testing.assert_array_equal(steps.next_obs[2, 1], last_good)
    assert (steps.reward[2, 1], steps.terminated[2, 1], steps.truncated[2, 1]) == (0, 0, 1)
    assert (episodes.episode_return[2, 1], episodes.episode_length[2, 1]) == (3.0, 2)
    # Call 4: the reset row into the rebuilt env (a fresh instance: lifetime steps 0).
    np.testing.assert_array_equal(steps.obs[3, 1], last_good)
    assert steps.next_obs[3, 1][:2].tolist() == [0.0, 0.0]
    assert (steps.reward[3, 1], steps.terminated[3, 1], steps.truncated[3, 1]) == (0, 0, 0)
    # Then full episodes of 5 steps again.
    assert episodes.done[:, 1].nonzero()[0].tolist() == [2, 8]
    assert episodes.episode_length[8, 1] == 5


def test_gym_runner_async_equals_sync_with_a_failure():
    kwargs = {"fail_at_steps": (3,), "fail_env_seed": 11}
    streams, restarts = [], []
    for vectorization in ("sync", "async"):
        with FAULTY(env_kwargs=kwargs, vectorization=vectorization) as runner:
            streams.append(_run_gym(runner, 8))
            restarts.append(runner.num_env_restarts)
    assert restarts == [1, 1]
    assert all(jax.tree.leaves(jax.tree.map(np.array_equal, streams[0], streams[1])))


@pytest.mark.filterwarnings("ignore::UserWarning")  # gymnasium logs the worker's error
@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_gym_runner_stops_after_max_env_restarts_consecutive_failures(vectorization):
    # Every instance fails on its first step; the successful resets in between do not
    # reset the count.
    runner = GymRunner(FAULTY_ENV_ID, num_envs=1, max_env_restarts=2,
                       vectorization=vectorization, env_kwargs={"fail_at_steps": (1,)})
    action = np.zeros((1, 1), np.float32)
    for _ in range(4):  # fail, reset row, fail, reset row
        runner.step_packed(action)
    assert runner.num_env_restarts == 2
    with pytest.raises(EnvFailureError,
                       match=r"env 0 \('jaxsac_test/Faulty-v0'\) gave up after 3 consecutive "
                             r"failures \(max_env_restarts=2\); last error: RuntimeError: "
                             r"injected failure at step 1"):
        runner.step_packed(action)
    runner.close()


def test_gym_runner_reset_failures():
    with pytest.raises(EnvFailureError, match=r"gave up after 1 consecutive failure \("
                                              r"max_env_restarts=0\); last error: "
                                              r"RuntimeError: injected reset failure"):
        GymRunner(FAULTY_ENV_ID, num_envs=1, max_env_restarts=0,
                  env_kwargs={"fail_reset": True})


def _spaces_runner(observation_space, action_space, **kwargs):
    return GymRunner(SPACES_ENV_ID, num_envs=2, env_kwargs={
        "observation_space": observation_space, "action_space": action_space}, **kwargs)


BOX_OBS = gymnasium.spaces.Box(-1, 1, (3,), np.float32)
BOX_ACT = gymnasium.spaces.Box(-1, 1, (2,), np.float32)


@pytest.mark.parametrize("action_space, reason", [
    (gymnasium.spaces.MultiDiscrete([2, 3]), r"action_space=MultiDiscrete\(\[2 3\]\) is not "
                                             r"supported \(MultiDiscrete actions"),
    (gymnasium.spaces.MultiBinary(3), r"\(MultiBinary actions"),
    (gymnasium.spaces.Box(-np.inf, np.inf, (2,)), r"\(unbounded Box"),
    # Finite bounds whose width high - low is inf in float32: rescaled actions were NaN.
    (gymnasium.spaces.Box(np.finfo(np.float32).min, np.finfo(np.float32).max, (2,),
                          np.float32), r"\(the width high - low of its bounds overflows"),
])
def test_unsupported_action_spaces(action_space, reason):
    with pytest.raises(ValueError, match=reason + r".*supported action spaces: Box with "
                                                  r"finite low and high .* and Discrete"):
        _spaces_runner(BOX_OBS, action_space)


def test_discrete_actions_reach_the_env_as_integers_and_come_back_as_indices():
    """Discrete(3, start=-1): module indices {0, 1, 2} are the env's actions {-1, 0, 1};
    the packed rows give back the int32 index the module chose."""
    space = gymnasium.spaces.Discrete(3, start=-1)
    with _spaces_runner(BOX_OBS, space) as runner:
        assert runner.actions == connectors.DiscreteActions(3, start=-1)
        assert runner.packed_width == 2 * 3 + 1 + 6
        for indices in ([0, 2], [1, 0], [2, 1]):
            step, _ = runner.unpack(runner.step_packed(np.int32(indices)))
            assert step.action.dtype == np.int32
            np.testing.assert_array_equal(step.action, indices)
        with pytest.raises(ValueError, match=r"actions of shape \(2, 1\); expected"):
            runner.step_packed(np.zeros((2, 1), np.int32))


def test_gymnasium_cartpole_steps_with_integer_actions():
    """The gymnasium runner and gymnasium's own CartPole agree step for step."""
    with GymRunner("CartPole-v1", num_envs=1, seed=3) as runner:
        env = gymnasium.make("CartPole-v1")
        obs, _ = env.reset(seed=3)
        np.testing.assert_array_equal(runner.raw_obs[0], obs)
        for action in [0, 1, 1, 0, 1, 0, 0]:
            step, _ = runner.unpack(runner.step_packed(np.int32([action])))
            obs, reward, terminated, truncated, _ = env.step(action)
            np.testing.assert_array_equal(step.next_obs[0], obs)
            assert (step.reward[0], step.terminated[0]) == (reward, terminated)


@pytest.mark.parametrize("observation_space, message", [
    (gymnasium.spaces.Dict({"a": BOX_OBS, "b": gymnasium.spaces.Discrete(2)}),
     r"observation_space entry 'b' = Discrete\(2\) is not supported \(Discrete; a Dict's "
     r"entries must be Boxes .*; otherwise flatten it first: .*flatten_structured_obs=True"),
    (gymnasium.spaces.Dict({"a": BOX_OBS, "inner": gymnasium.spaces.Dict({"c": BOX_OBS})}),
     r"observation_space entry 'inner' = Dict\('c': .*\) is not supported \(Dict; a "
     r"Dict's entries must be Boxes .*flatten_structured_obs=True"),
    (gymnasium.spaces.Tuple((BOX_OBS, BOX_OBS)),
     r"is not supported without a flattening connector; supported: .*"
     r"flatten_structured_obs=True"),
])
def test_structured_obs_need_a_flattening_connector(observation_space, message):
    with pytest.raises(ValueError, match=message):
        _spaces_runner(observation_space, BOX_ACT)
    with _spaces_runner(observation_space, BOX_ACT, flatten_structured_obs=True) as runner:
        obs_dim = gymnasium.spaces.flatdim(observation_space)
        assert runner.obs_dim == obs_dim and runner.raw_obs.shape == (2, obs_dim)
        step, _ = runner.unpack(runner.step_packed(np.zeros((2, 2), np.float32)))
        assert step.next_obs.shape == (2, obs_dim)


def test_jax_runner_rejects_unsupported_spaces():
    class MultiDiscreteActionEnv:
        observation_space = BOX_OBS
        action_space = gymnasium.spaces.MultiDiscrete([2, 2])

    with pytest.raises(ValueError, match=r"action_space=MultiDiscrete\(\[2 2\]\) is not "
                                         r"supported .*supported action spaces"):
        make_jax_runner(MultiDiscreteActionEnv(), num_envs=1)


@pytest.mark.parametrize("kwargs, message", [
    ({"num_envs": 0}, r"num_envs=0 is invalid: must be an integer >= 1"),
    ({"vectorization": "threads"}, r"vectorization='threads' is invalid: must be one of"),
    ({"max_env_restarts": -1}, r"max_env_restarts=-1 is invalid: must be an integer >= 0"),
])
def test_gym_runner_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        GymRunner("Pendulum-v1", **{"num_envs": 1, **kwargs})


def test_action_shape_is_checked():
    runner = make_jax_runner(envs.make("Pendulum-v1", backend="jax"), num_envs=2)
    rstate = runner.init(jax.random.key(0))
    with pytest.raises(ValueError, match=r"act_fn returned actions of shape \(2, 2\)"):
        runner.step(rstate, random_act_fn(2), jax.random.key(1))
    with GymRunner("Pendulum-v1", num_envs=2) as gym_runner:
        with pytest.raises(ValueError, match=r"actions of shape \(2,\); expected"):
            gym_runner.step_packed(np.zeros(2, np.float32))


def test_rescaling_matches_the_module_to_env_connector():
    runner = GymRunner("MountainCarContinuous-v0", num_envs=1)
    to_env = connectors.module_actions(runner.action_space).to_env
    np.testing.assert_array_equal(to_env(np.float32([[-1.0], [1.0], [3.0]]))[:, 0],
                                  [-1.0, 1.0, 1.0])
    runner.close()
