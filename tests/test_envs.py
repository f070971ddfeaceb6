"""JAX envs against gymnasium itself: same state + same actions -> same obs, rewards, flags."""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

import jaxsac.envs as envs
from jaxsac.envs import AutoReset, GymEnvFactory, TimeLimit

PENDULUM, MOUNTAIN_CAR = "Pendulum-v1", "MountainCarContinuous-v0"


def _set_gym_state(gym_env: gymnasium.Env, env_id: str, state) -> None:
    """Put the JAX env's state into gymnasium's env (its own representation)."""
    inner = state.env_state
    if env_id == PENDULUM:
        gym_env.unwrapped.state = np.array([inner.theta, inner.theta_dot], np.float64)
    else:  # gymnasium keeps MountainCar's state as float32 after every step
        gym_env.unwrapped.state = np.array([inner.position, inner.velocity], np.float32)


def _pendulum_actions(rng: np.random.Generator):
    """Torques in and beyond [-2, 2]."""
    return lambda obs: rng.uniform(-3.5, 3.5, size=(1,)).astype(np.float32)


def _mountain_car_actions(rng: np.random.Generator, reach_goal: bool):
    """Push with the velocity (reaches the goal), often beyond [-1, 1]; or dither."""
    if reach_goal:
        return lambda obs: (np.sign(obs[1] + 1e-6) * rng.uniform(0.6, 1.6, (1,))).astype(
            np.float32)
    return lambda obs: rng.uniform(-0.4, 0.4, size=(1,)).astype(np.float32)


def _compare_episode(env_id, policy, key, *, resync_each_step: bool):
    """Steps the JAX env and gymnasium's env from the same state with the same actions
    until the episode ends in gymnasium or in JAX; returns the number of steps and flags."""
    env = envs.make(env_id, backend="jax")
    step = jax.jit(env.step)
    gym_env = gymnasium.make(env_id)
    gym_env.reset(seed=0)
    state, obs = env.reset(key)
    _set_gym_state(gym_env, env_id, state)
    for t in range(1, 2000):
        action = policy(np.asarray(obs))
        if resync_each_step:
            _set_gym_state(gym_env, env_id, state)
        state, obs, reward, terminated, truncated = step(state, jnp.asarray(action), key)
        g_obs, g_reward, g_terminated, g_truncated, _ = gym_env.step(action)
        np.testing.assert_allclose(np.asarray(obs), g_obs, rtol=1e-6, atol=1e-6,
                                   err_msg=f"{env_id} obs at step {t}")
        np.testing.assert_allclose(float(reward), np.float32(g_reward), rtol=1e-6, atol=1e-6,
                                   err_msg=f"{env_id} reward at step {t}")
        assert (bool(terminated), bool(truncated)) == (g_terminated, g_truncated), t
        assert obs.dtype == jnp.float32 and reward.dtype == jnp.float32
        if g_terminated or g_truncated:
            gym_env.close()
            return t, g_terminated, g_truncated
    raise AssertionError("episode did not end")


@pytest.mark.parametrize("resync_each_step", [False, True])
def test_pendulum_matches_gymnasium_float64(resync_each_step):
    # Under x64 the JAX env runs gymnasium's float64 arithmetic: whole episodes agree.
    with jax.enable_x64(True):
        for seed in range(2):
            rng = np.random.default_rng(seed)
            length, terminated, truncated = _compare_episode(
                PENDULUM, _pendulum_actions(rng), jax.random.key(seed),
                resync_each_step=resync_each_step)
            assert (length, terminated, truncated) == (200, False, True)


def test_pendulum_matches_gymnasium_float32_stepwise():
    # In float32 each step from the same state agrees to float32 precision.
    for seed in range(3):
        rng = np.random.default_rng(seed)
        length, terminated, truncated = _compare_episode(
            PENDULUM, _pendulum_actions(rng), jax.random.key(seed), resync_each_step=True)
        assert (length, terminated, truncated) == (200, False, True)


@pytest.mark.parametrize("x64", [True, False])
def test_mountain_car_matches_gymnasium(x64):
    with jax.enable_x64(x64):
        outcomes = []
        for seed, reach_goal in [(0, True), (1, True), (2, False)]:
            rng = np.random.default_rng(seed)
            outcomes.append(_compare_episode(
                MOUNTAIN_CAR, _mountain_car_actions(rng, reach_goal), jax.random.key(seed),
                resync_each_step=not x64))
    (len0, term0, _), (len1, term1, _), (len2, term2, trunc2) = outcomes
    assert term0 and term1 and len0 < 999 and len1 < 999
    assert (len2, term2, trunc2) == (999, False, True)


def test_mountain_car_terminal_reward_and_left_wall():
    env = envs.make(MOUNTAIN_CAR, backend="jax").unwrapped
    at_goal = envs.MountainCarState(jnp.float32(0.449), jnp.float32(0.05))
    _, obs, reward, terminated, _ = env.step(at_goal, jnp.array([2.0]), jax.random.key(0))
    # +100, minus 0.1 a^2 of the unclipped action, as in gymnasium.
    assert bool(terminated) and float(reward) == pytest.approx(100.0 - 0.4)
    at_wall = envs.MountainCarState(jnp.float32(-1.19), jnp.float32(-0.05))
    _, obs, _, terminated, _ = env.step(at_wall, jnp.array([-1.0]), jax.random.key(0))
    assert not bool(terminated)
    np.testing.assert_array_equal(np.asarray(obs), np.float32([-1.2, 0.0]))


@pytest.mark.parametrize("env_id", [PENDULUM, MOUNTAIN_CAR])
def test_reset_distribution_matches_gymnasium(env_id):
    env = envs.make(env_id, backend="jax")
    _, jax_obs = jax.vmap(env.reset)(jax.random.split(jax.random.key(0), 2000))
    gym_env = gymnasium.make(env_id)
    gym_obs = np.stack([gym_env.reset(seed=s)[0] for s in range(2000)])
    assert jax_obs.shape == gym_obs.shape and jax_obs.dtype == jnp.float32
    for column in range(gym_obs.shape[1]):
        if np.ptp(gym_obs[:, column]) == 0:  # MountainCar starts at rest
            np.testing.assert_array_equal(np.asarray(jax_obs[:, column]), gym_obs[:, column])
            continue
        p_value = scipy.stats.ks_2samp(np.asarray(jax_obs[:, column]), gym_obs[:, column]).pvalue
        assert p_value > 1e-3, (env_id, column, p_value)
    assert np.all(env.observation_space.low <= np.asarray(jax_obs).min(0))
    assert np.all(np.asarray(jax_obs).max(0) <= env.observation_space.high)


@pytest.mark.parametrize("env_id", [PENDULUM, MOUNTAIN_CAR])
def test_spaces_match_gymnasium(env_id):
    env, gym_env = envs.make(env_id, backend="jax"), gymnasium.make(env_id)
    assert env.observation_space == gym_env.observation_space
    assert env.action_space == gym_env.action_space
    assert isinstance(env, envs.JaxEnv)


def test_vmapped_step_equals_single_envs():
    env = envs.make(PENDULUM, backend="jax")
    keys = jax.random.split(jax.random.key(3), 5)
    actions = jnp.linspace(-3.0, 3.0, 5)[:, None]
    states, obs = jax.jit(jax.vmap(env.reset))(keys)
    states, obs, rewards, _, _ = jax.jit(jax.vmap(env.step))(states, actions, keys)
    for i in range(5):
        state_i, _ = env.reset(keys[i])
        _, obs_i, reward_i, _, _ = env.step(state_i, actions[i], keys[i])
        np.testing.assert_allclose(obs[i], obs_i, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(rewards[i], reward_i, rtol=1e-6)


def test_time_limit_truncates_never_terminates():
    env = envs.make(PENDULUM, backend="jax", max_episode_steps=3)
    assert isinstance(env, TimeLimit) and env.max_episode_steps == 3
    state, _ = env.reset(jax.random.key(0))
    flags = []
    for _ in range(4):
        state, _, _, terminated, truncated = env.step(state, jnp.zeros(1), jax.random.key(0))
        flags.append((bool(terminated), bool(truncated)))
    assert flags == [(False, False), (False, False), (False, True), (False, True)]


def test_autoreset_next_step_semantics():
    env = AutoReset(envs.make(PENDULUM, backend="jax", max_episode_steps=2))
    step = jax.jit(env.step)
    state, obs0 = env.reset(jax.random.key(0))
    rows = []
    for t in range(5):
        key = jax.random.key(100 + t)
        state, obs, reward, terminated, truncated = step(state, jnp.full((1,), 2.0), key)
        rows.append((obs, float(reward), bool(terminated), bool(truncated), key))
    assert [r[3] for r in rows] == [False, True, False, False, True]
    # The step after the truncated one resets with its key and ignores its action.
    _, expected_reset_obs = env.env.reset(rows[2][4])
    np.testing.assert_array_equal(rows[2][0], expected_reset_obs)
    assert rows[2][1] == 0.0 and not rows[2][2]
    assert rows[3][1] != 0.0  # a real step again


class _CountedResets:
    """Pendulum whose reset reports each run to the host (a debug callback), so a test
    counts the resets a compiled step actually computes."""

    def __init__(self, env, calls: list):
        self.env, self.calls = env, calls
        self.observation_space, self.action_space = env.observation_space, env.action_space

    def reset(self, key):
        state, obs = self.env.reset(key)
        jax.debug.callback(lambda: self.calls.append(1))
        return state, obs

    def step(self, state, action, key):
        return self.env.step(state, action, key)


@pytest.mark.parametrize("seeds", [None, 2])
def test_autoreset_step_batch_is_vmapped_step_with_resets_only_when_needed(seeds):
    """step_batch gives vmap(step)'s rows, each env on its own: a row of an env that
    needs a reset is env.reset(that row's key), others are steps. The resets run only in
    steps where some env needs one, also when vmapped over seeds (a vmapped lax.cond
    would compute them at every step)."""
    calls: list = []
    env = AutoReset(TimeLimit(_CountedResets(envs.Pendulum(), calls), 3))
    num_envs, num_steps = 3, 9

    def rollout(key, batched):
        state, _ = jax.vmap(env.reset)(jax.random.split(key, num_envs))
        # Envs out of step: env 1 starts one step into its episode.
        state = state.replace(env_state=state.env_state.replace(
            elapsed_steps=jnp.array([0, 1, 0], jnp.int32)))

        def body(state, key):
            action = jax.random.uniform(key, (num_envs, 1), minval=-2, maxval=2)
            keys = jax.random.split(key, num_envs)
            out = (env.step_batch(state, action, keys) if batched
                   else jax.vmap(env.step)(state, action, keys))
            return out[0], (*out[1:], state.needs_reset, keys)

        return jax.lax.scan(body, state, jax.random.split(key, num_steps))[1]

    keys = jax.random.key(5) if seeds is None else jax.random.split(jax.random.key(5), seeds)
    def run(batched):
        calls.clear()
        fn = (lambda k: rollout(k, batched))
        out = jax.block_until_ready(jax.jit(fn if seeds is None else jax.vmap(fn))(keys))
        return out, len(calls)

    expected, calls_vmapped_step = run(False)
    got, calls_step_batch = run(True)
    obs, reward, terminated, truncated, needs_reset, step_keys = got
    np.testing.assert_allclose(obs, expected[0], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(reward, expected[1], rtol=1e-6, atol=1e-6)
    for a, b in zip(got[2:5], expected[2:5], strict=True):
        np.testing.assert_array_equal(a, b)
    reset_rows = np.asarray(needs_reset).reshape(-1, num_steps, num_envs)  # [seeds, T, E]
    assert reset_rows.any() and not reset_rows.all()
    # Reset rows: the env's reset with that row's key, reward 0, no flags.
    flat_keys = np.asarray(jax.random.key_data(step_keys)).reshape(-1, 2)
    rows = np.flatnonzero(reset_rows.reshape(-1))
    for row in rows:
        key = jax.random.wrap_key_data(flat_keys[row])
        np.testing.assert_array_equal(obs.reshape(-1, 3)[row], envs.Pendulum().reset(key)[1])
    assert not np.any(np.asarray(reward).reshape(-1)[rows])
    # Each compiled reset call (all envs of all seeds at once) reports once: the initial
    # reset, then only the steps where some env of some seed needs one, where the
    # vmapped step computes them at every step.
    steps_with_resets = int(reset_rows.any(axis=(0, 2)).sum())
    assert steps_with_resets < num_steps
    assert calls_step_batch == 1 + steps_with_resets
    assert calls_vmapped_step == 1 + num_steps


def test_make_backends():
    assert envs.has_jax_env(PENDULUM) and envs.has_jax_env(MOUNTAIN_CAR)
    assert envs.has_jax_env("CartPole-v1") and envs.has_jax_env("Acrobot-v1")
    assert not envs.has_jax_env("MountainCar-v0")
    assert isinstance(envs.make(PENDULUM), TimeLimit)  # auto -> JAX
    factory = envs.make(PENDULUM, backend="gymnasium", g=9.81)
    assert isinstance(factory, GymEnvFactory)
    gym_env = factory()
    assert gym_env.unwrapped.g == 9.81 and gym_env.spec.max_episode_steps == 200
    assert factory.action_space == gym_env.action_space
    assert isinstance(envs.make("MountainCar-v0"), GymEnvFactory)  # auto -> gymnasium
    assert envs.make(PENDULUM, backend="jax", g=9.81).unwrapped.g == 9.81


def test_make_bad_input_messages():
    with pytest.raises(ValueError, match=r"backend='torch' is invalid: must be one of"):
        envs.make(PENDULUM, backend="torch")
    with pytest.raises(ValueError,
                       match=r"'MountainCar-v0', which has no JAX implementation; JAX "
                             r"envs: \['Acrobot-v1', 'CartPole-v1', "):
        envs.make("MountainCar-v0", backend="jax")
    with pytest.raises(ValueError, match=r"'NoSuchEnv-v0' is not a registered gymnasium"):
        envs.make("NoSuchEnv-v0", backend="gymnasium")
    with pytest.raises(ValueError, match=r"max_episode_steps=0 is invalid"):
        envs.make(PENDULUM, backend="jax", max_episode_steps=0)


def test_mujoco_env_through_gymnasium_backend():
    pytest.importorskip("mujoco")
    factory = envs.make("HalfCheetah-v5", backend="gymnasium")
    env = factory()
    assert env.action_space.shape == (6,)
    env.close()
