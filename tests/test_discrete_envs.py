"""The discrete-action JAX envs (CartPole-v1, Acrobot-v1) against gymnasium itself: same
state + same actions -> same observations, rewards and flags, step for step.

Under `jax.enable_x64` an un-jitted step is gymnasium's float64 arithmetic bit for bit;
a jitted one can differ in the last bits (XLA turns divisions by constants into
multiplications and contracts multiply-adds), which a balanced CartPole amplifies over
hundreds of steps, so long episodes set gymnasium's state from the JAX state before each
step (`resync`). In float32 each step from the same state agrees to float32 precision.
"""

from __future__ import annotations

import warnings

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from jaxsac.envs.acrobot import Acrobot, AcrobotState
from jaxsac.envs.cartpole import CartPole, CartPoleState
from jaxsac.envs.core import AutoReset, JaxEnv, TimeLimit

CARTPOLE, ACROBOT = "CartPole-v1", "Acrobot-v1"
ENVS = {CARTPOLE: CartPole, ACROBOT: Acrobot}
FIELDS = {CARTPOLE: ("x", "x_dot", "theta", "theta_dot"),
          ACROBOT: ("theta1", "theta2", "dtheta1", "dtheta2")}
# Worst step differences allowed against gymnasium (obs and state, absolute).
X64_STATE_ATOL = 1e-12
F32_OBS_ATOL = 1e-5


def _state_array(env_id: str, state) -> np.ndarray:
    """[4] float64: the JAX env's state as gymnasium stores it (`unwrapped.state`)."""
    return np.array([getattr(state, f) for f in FIELDS[env_id]], np.float64)


def _set_gym_state(gym_env: gymnasium.Env, env_id: str, state, after_reset: bool) -> None:
    values = _state_array(env_id, state)
    if env_id == ACROBOT and after_reset:
        values = values.astype(np.float32)  # gymnasium's Acrobot reset state is float32
    gym_env.unwrapped.state = values


# Policies: obs -> int action (the same action is given to both envs).
def _balance(offset: float = 0.0):
    """Keeps the pole up; with an offset the cart drifts out of |x| <= 2.4."""
    return lambda obs, rng: int(obs[2] + 0.5 * obs[3] + 0.01 * (obs[0] - offset)
                                + 0.1 * obs[1] > 0)


def _random(n: int):
    return lambda obs, rng: int(rng.integers(n))


def _constant(action: int):
    return lambda obs, rng: action


def _pump(obs, rng):
    """Acrobot: torque along dtheta1 + dtheta2: swings up (and, kept on, spins)."""
    return 2 if obs[4] + obs[5] > 0 else 0


def _compare_episode(env_id: str, policy, seed: int, *, resync: bool) -> dict:
    """Steps TimeLimit(env, 500) (jitted) and gymnasium.make(env_id) from the same reset
    state with the same actions until the episode ends; checks obs, reward and flags
    every step and returns the outcome and the worst differences."""
    env = TimeLimit(ENVS[env_id](), 500)
    step = jax.jit(env.step)
    x64 = jnp.zeros(()).dtype == jnp.float64
    gym_env = gymnasium.make(env_id)
    gym_env.reset(seed=seed)
    key = jax.random.key(seed)
    state, obs = jax.jit(env.reset)(key)
    _set_gym_state(gym_env, env_id, state.env_state, after_reset=True)
    np.testing.assert_allclose(np.asarray(obs), gym_env.unwrapped._get_ob()
                               if env_id == ACROBOT else np.float32(gym_env.unwrapped.state),
                               rtol=1e-6, atol=1e-7)
    rng = np.random.default_rng(seed)
    worst_obs = worst_state = 0.0
    obs_atol = 1e-6 if x64 else F32_OBS_ATOL
    for t in range(1, 600):
        action = policy(np.asarray(obs), rng)
        if resync and t > 1:
            _set_gym_state(gym_env, env_id, state.env_state, after_reset=False)
        state, obs, reward, terminated, truncated = step(state, jnp.int32(action), key)
        g_obs, g_reward, g_terminated, g_truncated, _ = gym_env.step(action)
        obs = np.asarray(obs)
        assert obs.dtype == np.float32 and reward.dtype == jnp.float32
        assert terminated.dtype == jnp.bool_ and truncated.dtype == jnp.bool_
        worst_obs = max(worst_obs, float(np.max(np.abs(obs - g_obs))))
        np.testing.assert_allclose(obs, g_obs, rtol=obs_atol, atol=obs_atol,
                                   err_msg=f"{env_id} obs at step {t}")
        if x64:
            diff = np.abs(_state_array(env_id, state.env_state) - gym_env.unwrapped.state)
            worst_state = max(worst_state, float(diff.max()))
            if resync:
                assert diff.max() <= X64_STATE_ATOL, (env_id, t, diff)
        assert float(reward) == g_reward, (env_id, t)
        assert (bool(terminated), bool(truncated)) == (g_terminated, g_truncated), (env_id, t)
        if g_terminated or g_truncated:
            gym_env.close()
            return dict(length=t, terminated=g_terminated, truncated=g_truncated,
                        last_obs=obs, worst_obs=worst_obs, worst_state=worst_state)
    raise AssertionError("episode did not end")


CARTPOLE_CASES = [  # (policy, seed, expected: "truncated" | "angle" | "position")
    (_balance(), 0, "truncated"),
    (_balance(), 1, "truncated"),
    (_balance(offset=10.0), 2, "position"),
    (_balance(offset=-10.0), 3, "position"),
    (_random(2), 4, "angle"),
    (_constant(1), 5, "angle"),
]
ACROBOT_CASES = [  # (policy, seed, expected: "truncated" | "swung up")
    (_constant(1), 0, "truncated"),  # no torque: never swings up
    (_random(3), 1, "truncated"),
    (_pump, 3, "swung up"),
    (_pump, 4, "swung up"),
]


def _check_outcome(env_id: str, expected: str, out: dict) -> None:
    if expected == "truncated":
        assert (out["length"], out["terminated"], out["truncated"]) == (500, False, True)
        return
    assert out["terminated"] and not out["truncated"] and out["length"] < 500
    obs = out["last_obs"]
    if expected == "position":
        assert abs(obs[0]) > 2.4
    elif expected == "angle":
        assert abs(obs[2]) > CartPole.theta_threshold_radians
    else:  # swung up: -cos(theta1) - cos(theta1 + theta2) > 1
        assert -obs[0] - (obs[0] * obs[2] - obs[1] * obs[3]) > 1.0 - 1e-5


@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])
@pytest.mark.parametrize("env_id", [CARTPOLE, ACROBOT])
def test_episodes_match_gymnasium_stepwise(env_id, x64):
    # Whole episodes (terminated and truncated at step 500), gymnasium set to the JAX
    # state before each step: every step agrees (float64: state to 1e-12).
    cases = CARTPOLE_CASES if env_id == CARTPOLE else ACROBOT_CASES
    with jax.enable_x64(x64):
        for policy, seed, expected in cases:
            out = _compare_episode(env_id, policy, seed, resync=True)
            _check_outcome(env_id, expected, out)


def test_episodes_match_gymnasium_float64_without_resync():
    # Under x64 whole episodes agree without ever resetting gymnasium's state, except a
    # balanced CartPole (unstable: jit's last-bit differences grow over ~500 steps).
    with jax.enable_x64(True):
        for env_id, cases in ((CARTPOLE, CARTPOLE_CASES[2:]), (ACROBOT, ACROBOT_CASES)):
            for policy, seed, expected in cases:
                out = _compare_episode(env_id, policy, seed, resync=False)
                _check_outcome(env_id, expected, out)
                assert out["worst_state"] < 1e-5, (env_id, seed, out["worst_state"])


def _random_states(env_id: str, rng: np.random.Generator, n: int) -> np.ndarray:
    """[n, 4] float64 states spanning (and beyond) where episodes go."""
    if env_id == CARTPOLE:
        high = np.array([2.6, 3.0, 0.25, 3.5])
    else:  # angles anywhere, velocities up to (and past) the bounds
        high = np.array([np.pi, np.pi, 1.2 * Acrobot.max_vel_1, 1.2 * Acrobot.max_vel_2])
    states = rng.uniform(-high, high, (n, 4))
    if env_id == ACROBOT:  # angles at +-pi and velocities at the bounds
        states[: n // 4, :2] = np.pi * rng.choice([-1.0, 1.0], (n // 4, 2))
        states[n // 4: n // 2, 2:] = rng.choice([-1.0, 1.0], (n // 4, 2)) * [
            Acrobot.max_vel_1, Acrobot.max_vel_2]
    return states


@pytest.mark.parametrize("env_id", [CARTPOLE, ACROBOT])
def test_unjitted_float64_steps_are_gymnasium_bit_for_bit(env_id):
    # Op by op on scalars (jit disabled) the float64 arithmetic is gymnasium's exactly,
    # over wide states (wraps, clipped velocities, terminal states) and several steps.
    # (Compiled, or on arrays, XLA rewrites x / c as x * (1 / c); jitted steps are
    # checked to 1e-12 above.)
    n, steps = 16, 4
    rng = np.random.default_rng(7)
    env = ENVS[env_id]()
    with jax.enable_x64(True), jax.disable_jit(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gymnasium warns on steps past termination
        for i, values in enumerate(_random_states(env_id, rng, n)):
            fields = [jnp.float64(v) for v in values]
            if env_id == CARTPOLE:
                state = CartPoleState(*fields, jnp.zeros((), bool))
            else:
                state = AcrobotState(*fields)
            gym_env = gymnasium.make(env_id).unwrapped
            gym_env.reset(seed=i)
            gym_env.state = values.copy()
            for _ in range(steps):
                action = int(rng.integers(env.action_space.n))
                state, obs, reward, terminated, _ = env.step(
                    state, jnp.int32(action), jax.random.key(0))
                g_obs, g_reward, g_terminated, _, _ = gym_env.step(action)
                np.testing.assert_array_equal(_state_array(env_id, state), gym_env.state)
                np.testing.assert_array_equal(np.asarray(obs), g_obs)
                assert (float(reward), bool(terminated)) == (g_reward, g_terminated)


@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])
def test_acrobot_spinning_past_termination_matches_gymnasium(x64):
    # Adversarial: start near both velocity bounds and keep torquing along dtheta2 after
    # the tip is up (no reset; gymnasium allows it): the links spin, the angles wrap at
    # +-pi and both velocities get clipped at their bounds.
    env = Acrobot()
    step = jax.jit(env.step)
    gym_env = gymnasium.make(ACROBOT).unwrapped
    gym_env.reset(seed=0)
    with jax.enable_x64(x64):
        state = AcrobotState(*jnp.asarray(
            [0.05, -0.05, 0.99 * Acrobot.max_vel_1, 0.99 * Acrobot.max_vel_2]))
        wraps = terminals = 0
        clipped = np.zeros(2, bool)
        for t in range(200):
            action = 2 if float(state.dtheta2) > 0 else 0
            before = _state_array(ACROBOT, state)
            gym_env.state = before.copy()
            state, obs, reward, terminated, _ = step(state, jnp.int32(action),
                                                     jax.random.key(0))
            g_obs, g_reward, g_terminated, _, _ = gym_env.step(action)
            after = _state_array(ACROBOT, state)
            np.testing.assert_allclose(after, gym_env.state, rtol=0,
                                       atol=X64_STATE_ATOL if x64 else F32_OBS_ATOL)
            np.testing.assert_allclose(np.asarray(obs), g_obs, rtol=1e-5, atol=1e-5)
            assert (float(reward), bool(terminated)) == (g_reward, g_terminated), t
            wraps += int(np.any(np.abs(after[:2] - before[:2]) > np.pi))
            terminals += int(g_terminated)
            clipped |= np.abs(gym_env.state[2:]) == [Acrobot.max_vel_1, Acrobot.max_vel_2]
    assert wraps > 10 and terminals > 10 and clipped.all(), (wraps, terminals, clipped)


def test_cartpole_steps_past_termination_and_sutton_barto_reward():
    # Stepping on after a termination (no reset): reward 0 while out of bounds, as in
    # gymnasium; sutton_barto_reward=True: 0 per step, -1 on terminated steps.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for sutton_barto in (False, True):
            env = CartPole(sutton_barto_reward=sutton_barto)
            step = jax.jit(env.step)
            gym_env = gymnasium.make(CARTPOLE, sutton_barto_reward=sutton_barto).unwrapped
            gym_env.reset(seed=0)
            state, _ = env.reset(jax.random.key(0))
            gym_env.state = _state_array(CARTPOLE, state)
            rewards = []
            for t in range(40):
                gym_env.state = _state_array(CARTPOLE, state)
                state, obs, reward, terminated, _ = step(state, jnp.int32(1),
                                                         jax.random.key(0))
                g_obs, g_reward, g_terminated, _, _ = gym_env.step(1)
                np.testing.assert_allclose(np.asarray(obs), g_obs, rtol=1e-5, atol=1e-5)
                assert (float(reward), bool(terminated)) == (g_reward, g_terminated), t
                rewards.append(float(reward))
            if sutton_barto:
                assert rewards[0] == 0.0 and rewards[-1] == -1.0
            else:
                assert rewards[0] == 1.0 and rewards.count(1.0) < 40 and rewards[-1] == 0.0
                first_terminal = rewards.index(0.0) - 1
                assert bool(state.has_terminated) and first_terminal > 0


@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])
@pytest.mark.parametrize("env_id", [CARTPOLE, ACROBOT])
def test_reset_distribution_matches_gymnasium(env_id, x64):
    env = ENVS[env_id]()
    high = env.reset_high
    gym_env = gymnasium.make(env_id).unwrapped
    gym_states = []
    for i in range(1000):
        gym_env.reset(seed=0 if i == 0 else None)
        gym_states.append(gym_env.state)
    gym_states = np.stack(gym_states)
    with jax.enable_x64(x64):
        states, obs = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.key(0), 2000))
        jax_states = np.stack([np.asarray(getattr(states, f)) for f in FIELDS[env_id]], 1)
        assert jax_states.dtype == (np.float64 if x64 else np.float32)
    assert obs.shape == (2000, *env.observation_space.shape) and obs.dtype == jnp.float32
    assert np.all(np.abs(jax_states) <= high)
    if env_id == ACROBOT:  # gymnasium keeps the reset state as float32
        np.testing.assert_array_equal(jax_states, jax_states.astype(np.float32))
        assert gym_env.state.dtype == np.float32
    for column in range(4):
        p_uniform = scipy.stats.kstest(jax_states[:, column], "uniform",
                                       args=(-high, 2 * high)).pvalue
        p_gym = scipy.stats.ks_2samp(jax_states[:, column], gym_states[:, column]).pvalue
        assert p_uniform > 1e-3 and p_gym > 1e-3, (env_id, column, p_uniform, p_gym)
    assert np.all(env.observation_space.low <= np.asarray(obs).min(0))
    assert np.all(np.asarray(obs).max(0) <= env.observation_space.high)


@pytest.mark.parametrize("x64", [True, False], ids=["float64", "float32"])
@pytest.mark.parametrize("env_id", [CARTPOLE, ACROBOT])
def test_jit_vmap_step_equals_single_steps(env_id, x64):
    env = ENVS[env_id]()
    n = 8
    rng = np.random.default_rng(1)
    with jax.enable_x64(x64):
        keys = jax.random.split(jax.random.key(2), n)
        states, _ = jax.vmap(env.reset)(keys)
        wide = jnp.asarray(_random_states(env_id, rng, n), getattr(states, FIELDS[env_id][0])
                           .dtype)
        states = states.replace(**{f: wide[:, i] for i, f in enumerate(FIELDS[env_id])})
        actions = jnp.asarray(rng.integers(-1, env.action_space.n + 1, n), jnp.int32)
        batched = jax.jit(jax.vmap(env.step))(states, actions, keys)
        single = jax.jit(env.step)
        for i in range(n):
            state_i = jax.tree.map(lambda v, i=i: v[i], states)
            out_i = single(state_i, actions[i], keys[i])
            for got, want in zip(jax.tree.leaves(batched), jax.tree.leaves(out_i),
                                 strict=True):
                np.testing.assert_allclose(np.asarray(got[i]), np.asarray(want),
                                           rtol=1e-6, atol=1e-6)
    assert 0 < int(batched[3].sum()) < n  # some terminated, some not


@pytest.mark.parametrize("env_id", [CARTPOLE, ACROBOT])
def test_autoreset_matches_gymnasium_next_step(env_id):
    # AutoReset(TimeLimit(env, 500)) against gymnasium's vector env in NEXT_STEP mode:
    # the step after a terminated / truncated one resets (reward 0, no flags); each
    # reset state is copied into gymnasium's env, then the episodes agree again.
    env = AutoReset(TimeLimit(ENVS[env_id](), 500))
    step = jax.jit(env.step)
    vec = gymnasium.vector.SyncVectorEnv(
        [lambda: gymnasium.make(env_id)],
        autoreset_mode=gymnasium.vector.AutoresetMode.NEXT_STEP)
    vec.reset(seed=0)
    state, obs = env.reset(jax.random.key(0))
    inner = vec.envs[0]
    _set_gym_state(inner, env_id, state.env_state.env_state, after_reset=True)
    rng = np.random.default_rng(0)
    policy = _random(2) if env_id == CARTPOLE else _constant(1)
    steps = 300 if env_id == CARTPOLE else 520
    done_before, resets = False, 0
    for t in range(steps):
        action = policy(np.asarray(obs), rng)
        key = jax.random.key(1000 + t)
        state, obs, reward, terminated, truncated = step(state, jnp.int32(action), key)
        g_obs, g_reward, g_terminated, g_truncated, _ = vec.step(np.array([action]))
        assert (float(reward), bool(terminated), bool(truncated)) == (
            g_reward[0], g_terminated[0], g_truncated[0]), t
        if done_before:  # a reset step: the JAX env reset with this step's key
            resets += 1
            assert float(reward) == 0.0 and not terminated and not truncated
            _, expected = env.env.reset(key)
            np.testing.assert_array_equal(np.asarray(obs), np.asarray(expected))
            _set_gym_state(inner, env_id, state.env_state.env_state, after_reset=True)
        else:
            np.testing.assert_allclose(np.asarray(obs), g_obs[0], rtol=1e-5, atol=1e-5)
        done_before = bool(terminated) or bool(truncated)
        assert bool(state.needs_reset) == done_before
    vec.close()
    assert resets >= (5 if env_id == CARTPOLE else 1)


@pytest.mark.parametrize("env_id", [CARTPOLE, ACROBOT])
def test_spaces_repr_and_invalid_actions(env_id):
    env, gym_env = ENVS[env_id](), gymnasium.make(env_id)
    assert env.observation_space == gym_env.observation_space
    assert env.action_space == gym_env.action_space
    assert isinstance(env, JaxEnv)
    assert repr(TimeLimit(env, 500)) == f"TimeLimit({env_id.split('-')[0]}(), " \
                                        "max_episode_steps=500)"
    state, _ = env.reset(jax.random.key(0))
    step = jax.jit(env.step)
    last = env.action_space.n - 1

    def obs_after(action):
        return np.asarray(step(state, action, jax.random.key(0))[1])

    # Out-of-range integers are clipped into the Discrete range; [1] arrays are accepted.
    np.testing.assert_array_equal(obs_after(jnp.int32(-3)), obs_after(jnp.int32(0)))
    np.testing.assert_array_equal(obs_after(jnp.int32(last + 5)), obs_after(jnp.int32(last)))
    np.testing.assert_array_equal(obs_after(jnp.array([last], jnp.int32)),
                                  obs_after(jnp.int32(last)))
    assert not np.array_equal(obs_after(jnp.int32(0)), obs_after(jnp.int32(last)))
    with pytest.raises(TypeError, match=r"must be an integer"):
        step(state, jnp.float32(1.0), jax.random.key(0))
    with pytest.raises(ValueError, match=r"must be \[\]"):
        step(state, jnp.array([0, 1], jnp.int32), jax.random.key(0))
    assert repr(CartPole(sutton_barto_reward=True)) == "CartPole(sutton_barto_reward=True)"
