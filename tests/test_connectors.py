"""Connectors against independent references (gymnasium's RunningMeanStd, the formula)."""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from gymnasium.wrappers.utils import RunningMeanStd

from jaxsac import connectors
from jaxsac.connectors import EnvToModule
from jaxsac.observations import ObsSpec
from jaxsac.types import Batch


def test_rescale_action_formula_and_clipping():
    low, high = np.float32([-2.0, 0.0, 10.0]), np.float32([2.0, 1.0, 30.0])
    action = np.float32([[-1.0, -1.0, -1.0], [1.0, 1.0, 1.0], [0.0, 0.5, -0.5],
                         [-3.0, 1.5, 7.0]])
    expected = np.clip(low + (action + 1) * (high - low) / 2, low, high)
    np.testing.assert_allclose(expected[0], low)
    np.testing.assert_allclose(expected[1], high)
    np.testing.assert_allclose(expected[2], [0.0, 0.75, 15.0])
    np.testing.assert_allclose(expected[3], [-2.0, 1.0, 30.0])
    host = connectors.rescale_action(action, low, high)
    device = connectors.rescale_action(jnp.asarray(action), low, high)
    assert isinstance(host, np.ndarray) and isinstance(device, jax.Array)
    np.testing.assert_allclose(host, expected, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(device), expected, rtol=1e-6)


def test_module_to_env_reshapes_to_the_box():
    space = gymnasium.spaces.Box(low=np.float32([[0, 0], [-1, -4]]), high=np.float32(4.0))
    to_env = connectors.module_actions(space).to_env
    action = np.float32([[1.0, -1.0, 0.0, 2.0]] * 3)  # [E=3, act_dim=4]
    env_action = to_env(action)
    assert env_action.shape == (3, 2, 2) and env_action.dtype == np.float32
    np.testing.assert_allclose(env_action[0], [[4.0, 0.0], [1.5, 4.0]])
    assert all(space.contains(a) for a in env_action)


def test_flatten_obs():
    obs = np.arange(24, dtype=np.float64).reshape(2, 3, 4)
    flat = connectors.flatten_obs(obs)
    assert flat.shape == (2, 12) and flat.dtype == np.float32
    np.testing.assert_array_equal(flat[1], np.arange(12, 24))
    space = gymnasium.spaces.Dict({"a": gymnasium.spaces.Box(0, 1, (3,)),
                                   "b": gymnasium.spaces.Discrete(4)})
    assert connectors.flat_obs_dim(space) == 7


def test_obs_normalization_matches_gymnasium_running_mean_std():
    rng = np.random.default_rng(0)
    reference = RunningMeanStd(shape=(3,))
    stats = connectors.init_obs_norm(3)
    update = jax.jit(connectors.update_obs_norm)
    for n in (1, 4, 1, 16, 7):
        batch = rng.normal([1.0, -5.0, 100.0], [0.5, 3.0, 10.0], size=(n, 3))
        reference.update(batch)
        stats = update(stats, batch.astype(np.float32))
    np.testing.assert_allclose(stats.mean, reference.mean, rtol=1e-5)
    np.testing.assert_allclose(stats.var, reference.var, rtol=1e-4)
    np.testing.assert_allclose(stats.count, reference.count, rtol=1e-6)
    obs = rng.normal(size=(5, 3)).astype(np.float32)
    expected = (obs - reference.mean) / np.sqrt(reference.var + 1e-8)
    np.testing.assert_allclose(connectors.normalize_obs(stats, obs), expected, rtol=1e-4,
                               atol=1e-5)


def test_dict_observations_normalize_each_float_entry_on_its_own():
    """One running mean and variance per floating-point entry (gymnasium's RunningMeanStd
    of that entry alone, over the valid rows), none for a uint8 entry, which passes
    through as it is; a subset of the entries (the actor's) normalizes with theirs."""
    spec = ObsSpec(("pixels", "privileged", "state"), ((2, 2), (4,), (2, 3)),
                   ("uint8", "float32", "float32"))
    rng = np.random.default_rng(1)
    references = {"privileged": RunningMeanStd(shape=(4,)), "state": RunningMeanStd(shape=(2, 3))}
    pipeline = EnvToModule(normalize=True)
    stats = pipeline.init(spec)
    assert sorted(stats.mean) == ["privileged", "state"]
    update = jax.jit(pipeline.update)
    for n in (1, 5, 3, 12):
        obs = {"pixels": rng.integers(0, 256, (n, 2, 2)).astype(np.uint8),
               "privileged": rng.normal(-3.0, 4.0, (n, 4)).astype(np.float32),
               "state": rng.normal(10.0, 0.5, (n, 2, 3)).astype(np.float32)}
        valid = rng.uniform(size=n) < 0.7
        valid[0] = True
        for name, reference in references.items():
            reference.update(obs[name][valid].astype(np.float64))
        stats = update(stats, obs, valid)
    for name, reference in references.items():
        np.testing.assert_allclose(stats.mean[name], reference.mean, rtol=1e-5)
        np.testing.assert_allclose(stats.var[name], reference.var, rtol=1e-4)
        np.testing.assert_allclose(stats.count, reference.count, rtol=1e-6)
    obs = {"pixels": np.full((2, 2, 2), 7, np.uint8),
           "privileged": rng.normal(size=(2, 4)).astype(np.float32),
           "state": rng.normal(size=(2, 2, 3)).astype(np.float32)}
    module = pipeline.apply(stats, obs)
    assert module["pixels"].dtype == np.uint8
    np.testing.assert_array_equal(module["pixels"], obs["pixels"])
    for name, reference in references.items():
        np.testing.assert_allclose(module[name], (obs[name] - reference.mean)
                                   / np.sqrt(reference.var + 1e-8), rtol=1e-4, atol=1e-5)
    actor_stats = connectors.select_stats(stats, ("state",))
    assert sorted(actor_stats.mean) == ["state"]
    np.testing.assert_array_equal(pipeline.apply(actor_stats, {"state": obs["state"]})["state"],
                                  module["state"])
    batch = connectors.normalize_batch(stats, _batch(obs, obs))
    np.testing.assert_array_equal(batch.next_obs["privileged"], module["privileged"])


def test_env_to_module_without_normalization_is_identity():
    pipeline = EnvToModule(normalize=False)
    stats = pipeline.init(2)
    obs = jnp.float32([[3.0, -7.0]])
    assert pipeline.update(stats, obs) is stats
    np.testing.assert_array_equal(pipeline.apply(stats, obs), obs)
    normalized = EnvToModule(normalize=True)
    assert jax.tree.structure(normalized.update(stats, obs)) == jax.tree.structure(stats)


def _batch(obs, next_obs):
    b = jax.tree.leaves(obs)[0].shape[0]
    return Batch(obs=obs, action=jnp.zeros((b, 1)), reward=jnp.arange(b, dtype=jnp.float32),
                 next_obs=next_obs, discount=jnp.ones(b), n_step=jnp.ones(b, jnp.int32),
                 weights=jnp.ones(b), indices=jnp.arange(b))


def test_learner_connector_normalizes_obs_and_next_obs_only():
    stats = connectors.update_obs_norm(connectors.init_obs_norm(2),
                                       jnp.float32([[0.0, 10.0], [2.0, 30.0]]))
    batch = _batch(jnp.float32([[1.0, 20.0]]), jnp.float32([[3.0, 40.0]]))
    out = connectors.normalize_batch(stats, batch)
    np.testing.assert_allclose(out.obs, [[0.0, 0.0]], atol=1e-3)
    np.testing.assert_allclose(out.next_obs, [[2.0, 2.0]], rtol=1e-3)
    for name in ("action", "reward", "discount", "n_step", "weights", "indices"):
        assert getattr(out, name) is getattr(batch, name)
    assert EnvToModule(normalize=False).normalize_batch(stats, batch) is batch


@pytest.mark.parametrize("act_dim", [1, 3])
def test_random_module_action_is_uniform_in_unit_box(act_dim):
    actions = connectors.module_actions(act_dim).random(jax.random.key(0), 4096)
    assert actions.shape == (4096, act_dim)
    assert float(actions.min()) >= -1.0 and float(actions.max()) <= 1.0
    np.testing.assert_allclose(actions.mean(0), 0.0, atol=0.05)
    np.testing.assert_allclose(actions.var(0), 1 / 3, atol=0.03)


def test_random_discrete_actions_are_uniform_indices():
    actions = connectors.DiscreteActions(5).random(jax.random.key(0), 20_000)
    assert actions.shape == (20_000,) and actions.dtype == jnp.int32
    counts = np.bincount(np.asarray(actions), minlength=5)
    assert counts.shape == (5,)
    np.testing.assert_allclose(counts / 20_000, 0.2, atol=0.015)


def test_discrete_actions_map_indices_to_the_space_and_back():
    space = gymnasium.spaces.Discrete(4, start=-2)
    actions = connectors.module_actions(space)
    assert (actions.kind, actions.dim, actions.shape, actions.columns) == ("discrete", 4, (), 1)
    assert actions.space == space
    index = np.int32([0, 1, 2, 3])
    env_action = actions.to_env(index)
    assert all(space.contains(np.int64(a)) for a in env_action)
    np.testing.assert_array_equal(env_action, [-2, -1, 0, 1])
    np.testing.assert_array_equal(jax.jit(actions.to_env)(jnp.asarray(index)), env_action)
    columns = index[:, None].astype(np.float32)  # how the host runner packs them
    restored = actions.from_columns(columns)
    assert restored.dtype == np.int32
    np.testing.assert_array_equal(restored, index)
    assert connectors.actions_from_metadata(actions.metadata()) == actions


def test_box_actions_round_trip_through_metadata():
    space = gymnasium.spaces.Box(low=np.float32([[0, 0], [-1, -4]]), high=np.float32(4.0))
    actions = connectors.module_actions(space)
    assert (actions.kind, actions.dim, actions.shape) == ("continuous", 4, (4,))
    assert actions.space == space
    assert connectors.actions_from_metadata(actions.metadata()) == actions


@pytest.mark.parametrize("space", [gymnasium.spaces.MultiDiscrete([2, 3]),
                                   gymnasium.spaces.MultiBinary(2),
                                   gymnasium.spaces.Tuple((gymnasium.spaces.Discrete(2),))])
def test_other_action_spaces_are_rejected_with_what_is_supported(space):
    with pytest.raises(ValueError, match=rf"env 'X': action_space=.* is not supported "
                                         rf"\({type(space).__name__} actions\); supported "
                                         r"action spaces: Box .* and Discrete"):
        connectors.module_actions(space, "env 'X'")
