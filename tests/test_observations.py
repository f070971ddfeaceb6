"""Dict observations end to end, against gymnasium itself and against the networks'
inputs: the host runner gives gymnasium's own observations (its FlattenObservation is
the reference for the flat features), an asymmetric actor-critic's critics read only
the privileged entries and its actor only what the robot senses, runs save, restore
and resume bit for bit, and a loaded policy needs only the actor's entries. The env
(tests/support/dict_envs.py) is a small reaching task with a dict observation, as a JAX
env and as a gymnasium env."""

from __future__ import annotations

import shutil

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsac
from jaxsac import checkpoint
from jaxsac.observations import flat_features, obs_spec
from jaxsac.runners import GymRunner
from tests.support import dict_envs, numpy_sac
from tests.support.helpers import leaves_equal

dict_envs.register()
SMALL = dict(num_envs=2, hidden_sizes=(16, 16), batch_size=16, buffer_capacity=400,
             learning_starts=40, log_every=40, total_env_steps=80, eval_episodes=1)
ASYMMETRIC = dict(actor_obs_keys=("state",), critic_obs_keys=("privileged_state",))


@pytest.mark.parametrize("vectorization", ["sync", "async"])
def test_the_gymnasium_runner_gives_gymnasiums_own_dict_observations(vectorization):
    """Packed host rows unpack to the env's own dicts (uint8 stays uint8), and the flat
    features are gymnasium's FlattenObservation of the same observations."""
    reference = dict_envs.DictReachGym()
    flattened = gymnasium.wrappers.FlattenObservation(dict_envs.DictReachGym())
    with GymRunner(jaxsac.envs.make(dict_envs.GYM_ID, backend="gymnasium"), 1, vectorization,
                   seed=5) as runner:
        spec = runner.obs_spec
        assert spec == obs_spec(dict_envs.OBSERVATION_SPACE) and spec.dim == 4 + 5 + 2
        obs, _ = reference.reset(seed=5)
        np.testing.assert_array_equal(runner.raw_obs[0], flattened.reset(seed=5)[0])
        for action in np.random.default_rng(0).uniform(-1, 1, (6, 2)).astype(np.float32):
            step, _ = runner.unpack(runner.step_packed(action[None]))
            next_obs, reward, terminated, _, _ = reference.step(action)
            assert step.next_obs["pixels"].dtype == np.uint8
            for name, entry in next_obs.items():
                np.testing.assert_array_equal(step.next_obs[name][0], entry)
            for name, entry in obs.items():
                np.testing.assert_array_equal(step.obs[name][0], entry)
            np.testing.assert_array_equal(
                np.asarray(flat_features(jax.tree.map(jnp.asarray, step.next_obs)))[0],
                flattened.step(action)[0])
            assert step.reward[0] == np.float32(reward) and step.terminated[0] == terminated
            obs = next_obs


class WrongPixels(dict_envs.DictReachGym):
    """Its reset's "pixels" are 3 x 2 (its space's are 2 x 2)."""

    def reset(self, *, seed=None, options=None):
        obs, info = super().reset(seed=seed)
        return {**obs, "pixels": np.zeros((3, 2), np.uint8)}, info


class MissingState(dict_envs.DictReachGym):
    """Its step's observation lacks the entry "state"."""

    def step(self, action):
        obs, *rest = super().step(action)
        return ({k: v for k, v in obs.items() if k != "state"}, *rest)


def test_an_env_whose_dict_observation_breaks_its_space_is_named():
    with pytest.raises(jaxsac.envs.EnvDataError, match=r"env 3 \('Reach'\) returned an "
                       r"observation entry 'pixels' of shape \(3, 2\) from reset; its "
                       r"observation_space has shape \(2, 2\)"):
        jaxsac.envs.CheckData(WrongPixels(), 3, "Reach").reset(seed=0)
    checked = jaxsac.envs.CheckData(MissingState(), 3, "Reach")
    checked.reset(seed=0)
    with pytest.raises(jaxsac.envs.EnvDataError, match=r"returned an observation with keys "
                       r"\['pixels', 'privileged_state'\] from step; its Dict "
                       r"observation_space has keys \['pixels', 'privileged_state', 'state'\]"):
        checked.step(np.zeros(2, np.float32))


def _networks_inputs(seed: int, batch: int = 8) -> dict[str, jax.Array]:
    rng = np.random.default_rng(seed)
    return {"pixels": jnp.asarray(rng.integers(0, 256, (batch, 2, 2)), jnp.uint8),
            "privileged_state": jnp.asarray(rng.normal(size=(batch, 5)), jnp.float32),
            "state": jnp.asarray(rng.normal(size=(batch, 2)), jnp.float32)}


def _changed(obs: dict, name: str) -> dict:
    return {**obs, name: obs[name] + jnp.ones_like(obs[name])}


def test_asymmetric_critics_read_the_privileged_entries_and_the_actor_the_robots():
    """The critics' output moves with privileged_state alone (not with state or pixels)
    and the actor's with state alone: the gradients of their outputs with respect to
    every other entry are zero."""
    config = jaxsac.SACConfig(env_id=dict_envs.JAX_ID, **ASYMMETRIC, **SMALL)
    spec = obs_spec(dict_envs.OBSERVATION_SPACE)
    learner = jaxsac.make_learner(config, spec, 2)
    head = jaxsac.networks.policy_head(jaxsac.connectors.module_actions(2), config, spec)
    state = learner.init(jax.random.key(0))
    actor_params, critic_params = state.actor_params, state.critic_params
    assert actor_params["params"]["MLP_0"]["Dense_0"]["kernel"].shape == (2, 16)
    assert critic_params["params"]["VmapMLP_0"]["Dense_0"]["kernel"].shape == (2, 5 + 2, 16)
    obs = _networks_inputs(1)
    action = jnp.asarray(np.random.default_rng(2).uniform(-1, 1, (8, 2)), jnp.float32)

    def critic(o):
        return head.critic.apply(critic_params, o, action)

    def actor(o):
        return head.actor.apply(actor_params, o)[0]

    q, mean = critic(obs), actor(obs)
    for name in ("state", "pixels"):
        np.testing.assert_array_equal(critic(_changed(obs, name)), q)
    assert np.abs(np.asarray(critic(_changed(obs, "privileged_state")) - q)).min() > 0
    for name in ("privileged_state", "pixels"):
        np.testing.assert_array_equal(actor(_changed(obs, name)), mean)
    assert np.abs(np.asarray(actor(_changed(obs, "state")) - mean)).min() > 0

    floats = {k: v for k, v in obs.items() if k != "pixels"}
    critic_grad = jax.grad(lambda o: jnp.sum(critic({**obs, **o})))(floats)
    actor_grad = jax.grad(lambda o: jnp.sum(actor({**obs, **o})))(floats)
    assert not np.any(np.asarray(critic_grad["state"]))
    assert np.all(np.any(np.asarray(critic_grad["privileged_state"]) != 0, axis=1))
    assert not np.any(np.asarray(actor_grad["privileged_state"]))
    assert np.all(np.any(np.asarray(actor_grad["state"]) != 0, axis=1))
    # The learner's act reads the actor's entry alone.
    np.testing.assert_array_equal(
        learner.act(actor_params, {"state": obs["state"]}, None, deterministic=True),
        jnp.tanh(mean))


def test_asymmetric_settings_need_an_env_with_those_keys():
    flat = jaxsac.SACConfig(env_id="Pendulum-v1", actor_obs_keys=("state",), **SMALL)
    with pytest.raises(ValueError, match=r"SACConfig.actor_obs_keys=\('state',\) is invalid: "
                       r"must be None for env_id='Pendulum-v1', whose observation is an "
                       r"array \(flat \[3\]\)"):
        jaxsac.make_train(flat)
    with pytest.raises(ValueError, match=r"SACConfig.actor_obs_keys=\('state',\) is invalid"):
        jaxsac.train(flat.replace(backend="gymnasium"), progress=False)
    missing = jaxsac.SACConfig(env_id=dict_envs.JAX_ID, critic_obs_keys=("velocity",),
                               **SMALL)
    with pytest.raises(ValueError, match=r"SACConfig.critic_obs_keys=\('velocity',\) is "
                       r"invalid: must be keys of env_id='DictReach-v0''s observation "
                       r"\['pixels', 'privileged_state', 'state'\] \(no key 'velocity'\)"):
        jaxsac.make_train(missing)
    with pytest.raises(ValueError, match=r"SACConfig.critic_obs_keys=\('privileged_state',\) "
                       r"is invalid: must be None or keys among obs_keys=\('state',\)"):
        jaxsac.SACConfig(obs_keys=("state",), critic_obs_keys=("privileged_state",))
    with pytest.raises(ValueError, match=r"SACConfig.actor_obs_keys=\(\) is invalid"):
        jaxsac.SACConfig(actor_obs_keys=())


def test_a_dict_observation_run_restores_resumes_and_loads_its_policy(tmp_path):
    """Every entry of the observation (uint8 pixels too) and its statistics go through
    a checkpoint and back; the run resumed from the middle ends with the same bits; its
    policy loads with the actor's entry alone."""
    full_dir, resumed_dir = tmp_path / "full", tmp_path / "resumed"
    config = jaxsac.SACConfig(env_id=dict_envs.JAX_ID, normalize_obs=True,
                              checkpoint_every=40, checkpoint_dir=str(full_dir), **ASYMMETRIC,
                              **SMALL)
    full = jaxsac.train(config, progress=False)
    assert full.state.buffer.obs["pixels"].dtype == jnp.uint8
    assert sorted(full.state.runner.obs_norm.mean) == ["privileged_state", "state"]
    restored, _ = checkpoint.restore(full_dir)
    assert leaves_equal(restored, full.state)
    shutil.copytree(full_dir / "40", resumed_dir / "40")
    resumed = jaxsac.train(config.replace(checkpoint_dir=str(resumed_dir), resume=True),
                           progress=False)
    assert resumed.metrics["env_steps"].tolist() == [80]
    assert leaves_equal(resumed.state, full.state)
    check_loaded_policy(full_dir, config, full.state, full.state.runner.obs_norm)


def test_load_policy_of_an_asymmetric_gymnasium_run(tmp_path):
    config = jaxsac.SACConfig(env_id=dict_envs.GYM_ID, normalize_obs=True,
                              checkpoint_dir=str(tmp_path), **ASYMMETRIC, **SMALL)
    result = jaxsac.train(config, progress=False)
    check_loaded_policy(tmp_path, config, result.state, result.state.runner)


def check_loaded_policy(directory, config, state, stats):
    """The loaded policy reads only the actor's parameters and the statistics of
    `state`, and acts on {"state": ...} as the float64 NumPy actor does on the
    normalized state; the whole observation gives the same action."""
    policy = jaxsac.load_policy(directory)
    assert sorted(policy.obs_stats.mean) == ["state"]
    assert policy.actor_params["params"]["MLP_0"]["Dense_0"]["kernel"].shape == (2, 16)
    obs = jax.tree.map(np.asarray, _networks_inputs(3, batch=5))
    normalized = ((obs["state"].astype(np.float64) - np.asarray(stats.mean["state"]))
                  / np.sqrt(np.asarray(stats.var["state"], np.float64) + 1e-8))
    expected = np.tanh(numpy_sac.actor(policy.actor_params, normalized)[0])
    acted = policy({"state": obs["state"]})
    np.testing.assert_allclose(acted, expected, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(policy({"state": obs["state"][0]}), acted[0], rtol=1e-5,
                               atol=1e-6)  # one row against a batch: float32 rounding
    np.testing.assert_array_equal(policy(obs), acted)
    in_memory = jaxsac.Policy.from_state(config, state)
    np.testing.assert_array_equal(in_memory({"state": obs["state"]}), acted)
    with pytest.raises(ValueError, match=r"Policy: obs=\['privileged_state'\] is invalid: "
                       r"must be a dict with the entries \['state'\]"):
        policy({"privileged_state": obs["privileged_state"]})
    with pytest.raises(ValueError, match=r"Policy: obs\['state'\] of shape \(5, 3\)"):
        policy({"state": np.zeros((5, 3), np.float32)})


def test_a_checkpoint_that_stored_a_dict_observation_flattened_is_refused():
    """Before format 4 a Playground task's dict observation was stored flattened (its
    meta has no obs_entries): its template no longer fits the env and says so."""
    config = jaxsac.SACConfig(env_id=dict_envs.JAX_ID, **SMALL)
    meta = {"backend": "jax", "obs_shape": [11], "obs_dim": 11, "seed_axis": False,
            "num_seeds": 1, "arrays": {}, **jaxsac.connectors.module_actions(
                dict_envs.ACTION_SPACE).metadata()}
    with pytest.raises(ValueError, match=r"the checkpoint of 'DictReach-v0' stored "
                       r"observations flat \[11\], but the env's are \{'pixels': \[2, 2\] "
                       r"uint8, 'privileged_state': \[5\] float32, 'state': \[2\] float32\}; "
                       r"checkpoints before format 4 .* cannot be restored or loaded"):
        checkpoint.template(config, meta)
    spec = obs_spec(dict_envs.OBSERVATION_SPACE)
    assert jaxsac.observations.ObsSpec.from_metadata({**meta, **spec.metadata()}) == spec
