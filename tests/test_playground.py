"""The MuJoCo Playground adapter against Playground itself: the same states and actions
give the same observations, rewards and ends; a time-limit end is truncated with its
true final observation (where brax's training wrapper keeps the next episode's first);
dict observations; bad input; a checkpointed run restores and resumes bit for bit."""

from __future__ import annotations

import importlib.util
import shutil

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from mujoco_playground import registry
from mujoco_playground import wrapper as playground_wrapper

import jaxsac
from jaxsac import checkpoint, envs
from jaxsac.envs import AutoReset, PlaygroundEnv
from tests.support.helpers import leaves_equal

TASK = "CartpoleBalance"
ENV_ID = "playground/" + TASK
STEPS = 300


@pytest.fixture(scope="module")
def own():
    """Playground's own task, loaded as Playground loads it."""
    return registry.load(TASK, config_overrides={"impl": "jax"})


def _actions(num_steps: int, act_dim: int, seed: int = 0) -> jax.Array:
    """Actions in and beyond the control range [-1, 1] (MuJoCo clamps controls)."""
    return jax.random.uniform(jax.random.key(seed), (num_steps, act_dim), minval=-1.5,
                              maxval=1.5)


def test_adapter_steps_as_playground_does(own):
    env = envs.make(ENV_ID)
    actions = _actions(STEPS, 1)
    key = jax.random.key(7)

    def ours(key, actions):
        state, obs = env.reset(key)

        def body(state, action):
            state, obs, reward, terminated, truncated = env.step(state, action, key)
            return state, (obs, reward, terminated, truncated)

        return obs, jax.lax.scan(body, state, actions)[1]

    def theirs(key, actions):
        state = own.reset(key)

        def body(state, action):
            state = own.step(state, action)
            return state, (state.obs, state.reward, state.done)

        return state.obs, jax.lax.scan(body, state, actions)[1]

    first, (obs, reward, terminated, truncated) = jax.jit(ours)(key, actions)
    own_first, (own_obs, own_reward, own_done) = jax.jit(theirs)(key, actions)
    np.testing.assert_array_equal(first, own_first)
    np.testing.assert_array_equal(obs, own_obs)
    np.testing.assert_array_equal(reward, own_reward)
    np.testing.assert_array_equal(terminated, own_done > 0)
    assert not truncated.any() and obs.dtype == jnp.float32 and reward.dtype == jnp.float32
    assert reward.min() >= 0.0 and reward.max() <= 1.0 and not np.all(reward == reward[0])


def test_physics_end_is_terminated(own):
    """Playground ends an episode whose physics diverged (NaN state): terminated, not
    truncated."""
    env = envs.make(ENV_ID)
    state, _ = env.reset(jax.random.key(0))
    inner = state.env_state
    broken = inner.replace(data=inner.data.replace(qvel=inner.data.qvel.at[0].set(jnp.nan)))
    state = state.replace(env_state=broken)
    _, _, _, terminated, truncated = jax.jit(env.step)(state, jnp.zeros(1), jax.random.key(1))
    assert bool(terminated) and not bool(truncated)
    assert float(own.step(broken, jnp.zeros(1)).done) == 1.0


def test_time_limit_end_is_truncated_with_its_final_observation(own):
    """At the task's episode_length (1,000 steps) the adapter's step is truncated and
    its observation is Playground's own after that many steps; the following step is
    the NEXT_STEP reset. brax's training wrapper marks the same step but returns the
    next episode's first observation there."""
    length = envs.max_episode_steps(ENV_ID)
    assert length == registry.get_default_config(TASK).episode_length == 1000
    env = AutoReset(envs.make(ENV_ID))
    actions = _actions(length + 2, 1, seed=1)
    key = jax.random.key(3)

    @jax.jit
    def ours(key, actions):
        state, _ = env.reset(key)

        def body(state, action):
            state, obs, reward, terminated, truncated = env.step(state, action, key)
            return state, (obs, terminated, truncated)

        return jax.lax.scan(body, state, actions)[1]

    @jax.jit
    def theirs(key, actions):
        def body(state, action):
            state = own.step(state, action)
            return state, state.obs

        return jax.lax.scan(body, own.reset(key), actions[:length])[1]

    @jax.jit
    def brax_wrapped(key, actions):
        wrapped = playground_wrapper.wrap_for_brax_training(own, episode_length=length)

        def body(state, action):
            state = wrapped.step(state, action[None])
            return state, (state.obs[0], state.info["truncation"][0], state.done[0])

        # brax wrappers take raw uint32 keys.
        return jax.lax.scan(body, wrapped.reset(jax.random.key_data(key)[None]),
                            actions[:length])[1]

    obs, terminated, truncated = ours(key, actions)
    own_obs = theirs(key, actions)
    assert np.flatnonzero(truncated).tolist() == [length - 1]
    assert not terminated.any()
    # The true final observation (after 1,000 steps the two compiled programs differ in
    # the last bits: XLA fuses the autoreset's select differently).
    np.testing.assert_allclose(obs[length - 1], own_obs[length - 1], rtol=1e-4, atol=1e-5)
    first_obs = AutoReset(envs.make(ENV_ID)).reset(key)[1]
    np.testing.assert_array_equal(obs[length], first_obs)  # the reset step, same key
    assert np.abs(obs[length - 1] - first_obs).max() > 0.1

    brax_obs, brax_truncation, brax_done = brax_wrapped(key, actions)
    assert np.flatnonzero(brax_truncation).tolist() == [length - 1] and bool(brax_done[-1])
    assert np.abs(brax_obs[length - 1] - own_obs[length - 1]).max() > 0.1


class _DictObservation:
    """A Playground task whose observation is a dict, as Playground's locomotion tasks
    have ({"state": ..., "privileged_state": ...})."""

    def __init__(self, env):
        self.env, self.mj_model, self.action_size = env, env.mj_model, env.action_size

    def _with_dict(self, state):
        obs = {"state": state.obs, "privileged_state": jnp.concatenate(
            [state.obs, state.data.qpos]), "pixels": jnp.zeros((2, 3))}
        return state.replace(obs=obs)

    def reset(self, key):
        return self._with_dict(self.env.reset(key))

    def step(self, state, action):
        return self._with_dict(self.env.step(state.replace(obs=state.obs["state"]), action))


def test_dict_observations_stay_dicts_of_the_selected_keys(own):
    task = _DictObservation(own)
    key = jax.random.key(0)
    raw = task.reset(key).obs
    selected = PlaygroundEnv(task, obs_keys=("state", "privileged_state"))  # any order
    assert selected.observation_space == gymnasium.spaces.Dict({
        "privileged_state": gymnasium.spaces.Box(-np.inf, np.inf, (7,), np.float32),
        "state": gymnasium.spaces.Box(-np.inf, np.inf, (5,), np.float32)})
    obs = selected.reset(key)[1]
    assert sorted(obs) == ["privileged_state", "state"]
    for name in obs:
        np.testing.assert_array_equal(obs[name], raw[name])
    everything = PlaygroundEnv(task)  # all keys
    assert sorted(everything.reset(key)[1]) == ["pixels", "privileged_state", "state"]
    # The flat features: gymnasium's flattening of the Dict space (sorted keys).
    spec = jaxsac.observations.obs_spec(everything.observation_space)
    all_obs = everything.reset(key)[1]
    np.testing.assert_array_equal(
        jaxsac.observations.flat_features(jax.tree.map(lambda x: x[None], all_obs))[0],
        gymnasium.spaces.flatten(everything.observation_space,
                                 {k: np.asarray(v) for k, v in all_obs.items()}))
    assert spec.dim == 6 + 7 + 5
    state, obs, *_ = selected.step(selected.reset(key)[0], jnp.ones(1), key)
    np.testing.assert_array_equal(obs["state"], own.step(own.reset(key), jnp.ones(1)).obs)
    with pytest.raises(ValueError, match=r"obs_keys=\('state', 'velocity'\) is invalid: "
                       r"must be .*\['pixels', 'privileged_state', 'state'\].*'velocity'"):
        PlaygroundEnv(task, obs_keys=("state", "velocity"))


class _ModelStub:
    def __init__(self, ctrlrange, ctrllimited):
        self.nu = len(ctrlrange)
        self.actuator_ctrlrange = np.asarray(ctrlrange, np.float64)
        self.actuator_ctrllimited = np.asarray(ctrllimited)


@pytest.mark.parametrize(("ctrlrange", "limited", "low", "high"), [
    ([[-2.0, 0.5], [0.0, 3.0]], [1, 1], [-2.0, 0.0], [0.5, 3.0]),   # the control range
    ([[-2.0, 0.5], [0.0, 0.0]], [1, 0], [-1.0, -1.0], [1.0, 1.0]),  # unbounded: [-1, 1]
])
def test_action_bounds_come_from_the_control_range(own, ctrlrange, limited, low, high):
    class Task(_DictObservation):
        def __init__(self, env):
            super().__init__(env)
            self.mj_model, self.action_size = _ModelStub(ctrlrange, limited), 2

    space = PlaygroundEnv(Task(own)).action_space
    np.testing.assert_array_equal(space.low, low)
    np.testing.assert_array_equal(space.high, high)
    cheetah = envs.make("playground/CheetahRun").action_space
    model = registry.load("CheetahRun", config_overrides={"impl": "jax"}).mj_model
    np.testing.assert_array_equal(cheetah.low, model.actuator_ctrlrange[:, 0])
    np.testing.assert_array_equal(cheetah.high, model.actuator_ctrlrange[:, 1])


def test_bad_input_fails_at_config_time(monkeypatch):
    config = jaxsac.SACConfig(env_id="playground/CartpoleBalanse", total_env_steps=10,
                              learning_starts=1)
    for call in (jaxsac.make_train, jaxsac.train):
        with pytest.raises(ValueError, match=r"SACConfig.env_id='playground/CartpoleBalanse' "
                           r"is invalid: must be .*'playground/CartpoleBalance'"):
            call(config)
    with pytest.raises(ValueError, match=r"obs_keys=\('state',\) is invalid: must be None: "
                       "the env's observation is an array"):
        jaxsac.train(config.replace(env_id=ENV_ID, obs_keys=("state",)))
    with pytest.raises(ValueError, match=r"SACConfig.critic_obs_keys=\('privileged_state',\) "
                       r"is invalid: must be None for env_id='playground/CartpoleBalance', "
                       r"whose observation is an array \(flat \[5\]\)"):
        jaxsac.make_train(config.replace(env_id=ENV_ID, log_every=10,
                                         critic_obs_keys=("privileged_state",)))
    with pytest.raises(ValueError, match=r"SACConfig.backend='gymnasium' is invalid"):
        jaxsac.train(config.replace(env_id=ENV_ID, backend="gymnasium"))
    with pytest.raises(ValueError, match=r"obs_keys=\(\) is invalid"):
        jaxsac.SACConfig(obs_keys=())
    with pytest.raises(ValueError, match=r"make: obs_keys=\('state',\) is invalid: must be "
                       "None for env_id='Pendulum-v1'"):
        envs.make("Pendulum-v1", obs_keys=("state",))

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "mujoco_playground"
                        else find_spec(name, *a))
    with pytest.raises(ImportError, match=r"MuJoCo Playground, which is not installed: "
                       r"pip install -e '\.\[playground\]'"):
        jaxsac.train(config.replace(env_id=ENV_ID))


@pytest.mark.parametrize("task", ["CartpoleBalance", "CheetahRun"])
def test_tuned_examples_follow_playgrounds_brax_sac_settings(task):
    from mujoco_playground.config import dm_control_suite_params

    theirs = dm_control_suite_params.brax_sac_config(task)
    ours = jaxsac.tuned(f"playground/{task}")
    assert ours.env_id == f"playground/{task}" and ours.backend == "auto"
    assert ours.num_envs == theirs.num_envs and ours.batch_size == theirs.batch_size
    assert round(ours.utd_ratio * ours.num_envs) == theirs.grad_updates_per_step
    assert ours.actor_lr == ours.critic_lr == theirs.learning_rate
    assert ours.gamma == theirs.discounting and ours.learning_starts == theirs.min_replay_size
    assert ours.buffer_capacity == theirs.max_replay_size
    assert ours.normalize_obs == theirs.normalize_observations
    assert ours.critic_layer_norm == theirs.network_factory.q_network_layer_norm
    assert 0 <= ours.total_env_steps - theirs.num_timesteps < ours.log_every
    act_dim = envs.make(ours.env_id).action_space.shape[0]
    assert ours.target_entropy == -0.5 * act_dim  # brax's SAC fixes it there
    jaxsac.make_train(ours)  # a valid run (validated; nothing is compiled)


def test_a_checkpointed_run_restores_and_resumes_bit_for_bit(tmp_path):
    """A Playground env state holds a typed PRNG key (key<fry>) and zero-size contact
    arrays: both are saved, restored bit for bit, and a run resumed from the middle
    checkpoint ends with the uninterrupted run's state."""
    full_dir, resumed_dir = tmp_path / "full", tmp_path / "resumed"
    config = jaxsac.SACConfig(env_id=ENV_ID, num_envs=2, hidden_sizes=(8, 8), batch_size=16,
                              buffer_capacity=200, learning_starts=20, log_every=40,
                              total_env_steps=80, eval_episodes=1, checkpoint_every=40,
                              checkpoint_dir=str(full_dir))
    full = jaxsac.train(config, progress=False)
    assert checkpoint.latest_step(full_dir) == 80
    env_keys = [leaf for leaf in jax.tree.leaves(full.state.runner)
                if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)]
    assert env_keys and all(str(jax.random.key_impl(k)) == "threefry2x32" for k in env_keys)
    restored, _ = checkpoint.restore(full_dir)
    assert leaves_equal(restored, full.state)  # typed keys: same impl and key data
    shutil.copytree(full_dir / "40", resumed_dir / "40")
    resumed = jaxsac.train(config.replace(checkpoint_dir=str(resumed_dir), resume=True),
                           progress=False)
    assert resumed.metrics["env_steps"].tolist() == [80]  # only the second period ran
    assert leaves_equal(resumed.state, full.state)
    assert leaves_equal(checkpoint.restore(resumed_dir)[0], full.state)
