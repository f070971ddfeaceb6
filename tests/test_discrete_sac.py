"""Discrete-action runs end to end: integer actions through the runners, the replay
buffer, evaluation, checkpoints and `load_policy`, on both backends, with prioritized
n-step replay, data shards and several agents; and the errors for spaces and settings
a run cannot honour. (The losses against a float64 NumPy reference are in
test_discrete_learner.py, the envs against gymnasium in test_discrete_envs.py.)"""

from __future__ import annotations

import math
import shutil

import gymnasium
import jax
import numpy as np
import pytest

import jaxsac
from jaxsac import connectors
from jaxsac.assembly import assemble
from jaxsac.replay.state import NOT_A_START
from tests.conftest import SPACES_ENV_ID
from tests.support import helpers
from tests.support.helpers import leaves_equal

TINY = {**helpers.TINY, "env_id": "CartPole-v1"}


def stored_actions(buffer) -> tuple[np.ndarray, np.ndarray]:
    """(actions, rows that start a transition) of a ReplayState with no seed axis."""
    written = int(buffer.filled_slots)
    flags = np.asarray(buffer.flags)[:written]
    return np.asarray(buffer.action)[:written], (flags & NOT_A_START) == 0


@pytest.mark.parametrize("backend", ["jax", "gymnasium"])
def test_a_run_stores_integer_actions_and_reports_the_exact_entropy(backend):
    result = jaxsac.train(jaxsac.SACConfig(**TINY, backend=backend), progress=False)
    actions, starts = stored_actions(result.state.buffer)
    assert actions.dtype == np.int32 and actions.shape == starts.shape
    assert set(np.unique(actions[starts])) == {0, 1}  # both actions, nothing else
    entropy = result.metrics["entropy"][-1]
    assert 0.0 < entropy <= math.log(2) + 1e-6
    assert np.all(np.isfinite(result.metrics["eval_return"]))
    assert np.all(result.metrics["eval_return"] >= 8)  # CartPole lasts at least 8 steps


def test_prioritized_n_step_replay_and_data_shards_take_integer_actions():
    config = jaxsac.SACConfig(**TINY, prioritized=True, n_step=(1, 3), num_envs=2,
                              data_shards=2)
    assembly = assemble(config)
    state = jaxsac.train(config, progress=False).state
    assert state.buffer.action.dtype == np.int32
    batch = jax.jit(assembly.buffer.sample)(state.buffer, jax.random.key(0))
    assert batch.action.shape == (config.batch_size,) and batch.action.dtype == np.int32
    assert set(np.unique(np.asarray(batch.action))) <= {0, 1}
    assert np.all(np.asarray(batch.n_step) >= 1) and np.all(np.asarray(batch.n_step) <= 3)
    assert int(state.learner.step) > 0 and np.isfinite(float(state.buffer.max_priority[0]))


def test_checkpoint_resume_is_bit_identical_and_load_policy_gives_cartpole_integers(tmp_path):
    directory = tmp_path / "run"
    config = jaxsac.SACConfig(**TINY, checkpoint_dir=str(directory), checkpoint_every=200)
    full = jaxsac.train(config, progress=False)
    checkpoint_steps = sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())
    assert checkpoint_steps == [200, 400, 600]

    # Resume from the middle checkpoint: the same bits as the uninterrupted run.
    partial = tmp_path / "partial"
    shutil.copytree(directory / "400", partial / "400")
    resumed = jaxsac.train(config.replace(checkpoint_dir=str(partial), resume=True),
                           progress=False)
    assert leaves_equal(resumed.state, full.state)

    policy = jaxsac.load_policy(str(directory))
    assert policy.actions == connectors.DiscreteActions(2)
    env = gymnasium.make("CartPole-v1")
    obs, _ = env.reset(seed=0)
    for _ in range(20):
        action = policy(obs)
        assert isinstance(action, np.integer) and env.action_space.contains(action)
        obs, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            obs, _ = env.reset()
    batch = np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32)
    assembly = assemble(config)
    logits = assembly.learner.act(full.state.learner.actor_params, batch, jax.random.key(0),
                                  deterministic=True)
    np.testing.assert_array_equal(policy(batch), np.asarray(logits))


def test_a_discrete_space_starting_at_an_offset_reaches_the_env_offset(tmp_path):
    """A gymnasium Discrete(3, start=-1) env: the buffer holds indices 0..2, the env and
    load_policy see -1..1."""
    config = jaxsac.SACConfig(**{**TINY, "env_id": SPACES_ENV_ID, "learning_starts": 60,
                                 "total_env_steps": 200, "log_every": 100},
                              checkpoint_dir=str(tmp_path))
    space = gymnasium.spaces.Discrete(3, start=-1)
    gymnasium.register(id="jaxsac_test/DiscreteOffset-v0",
                       entry_point=gymnasium.spec(SPACES_ENV_ID).entry_point,
                       kwargs={"action_space": space,
                               "observation_space": gymnasium.spaces.Box(-1, 1, (3,))},
                       max_episode_steps=20, disable_env_checker=True)
    try:
        config = config.replace(env_id="jaxsac_test/DiscreteOffset-v0")
        result = jaxsac.train(config, progress=False)
        actions, starts = stored_actions(result.state.buffer)
        assert set(np.unique(actions[starts])) == {0, 1, 2}
        env_actions = jaxsac.load_policy(str(tmp_path))(
            np.random.default_rng(0).uniform(-1, 1, (64, 3)).astype(np.float32))
        assert env_actions.dtype == np.int64 and set(np.unique(env_actions)) <= {-1, 0, 1}
    finally:
        del gymnasium.registry["jaxsac_test/DiscreteOffset-v0"]


def test_multi_agent_cartpole_trains_independent_discrete_modules(tmp_path):
    config = jaxsac.SACConfig(**{**TINY, "env_id": "MultiAgentCartPole-v1"}, num_agents=2,
                              checkpoint_dir=str(tmp_path))
    result = jaxsac.train(config, progress=False)
    assert result.metrics["eval_return"].shape[-1] == 2  # one column per agent
    assert result.state.buffer.action.dtype == np.int32
    obs = np.zeros((3, 4), np.float32)
    for module_id in range(2):
        actions = jaxsac.load_policy(str(tmp_path), module_id=module_id)(obs)
        assert actions.dtype == np.int64 and set(np.unique(actions)) <= {0, 1}


@pytest.mark.parametrize("changes, message", [
    ({"log_std_bounds": (-5.0, 2.0)},
     r"SACConfig.log_std_bounds=\(-5.0, 2.0\) is invalid: must be None for the Discrete "
     r"action space Discrete\(2\) \(a Box-only setting"),
    ({"target_entropy": 0.7},
     r"SACConfig.target_entropy=0.7 is invalid: must be \"auto\" or below log\|A\| = 0.693147 "
     r"for the Discrete action space Discrete\(2\)"),
    ({"env_id": "Pendulum-v1", "target_entropy_scale": 0.5},
     r"SACConfig.target_entropy_scale=0.5 is invalid: must be None for the Box action space "
     r"Box\(-2.0, 2.0, \(1,\), float32\) \(a Discrete-only setting"),
])
@pytest.mark.parametrize("backend", ["jax", "gymnasium"])
def test_settings_of_the_other_action_kind_are_errors_naming_the_space(changes, message,
                                                                       backend):
    config = jaxsac.SACConfig(**{**TINY, **changes}, backend=backend)
    with pytest.raises(ValueError, match=message):
        jaxsac.train(config, progress=False)


def test_multi_discrete_actions_are_an_error_naming_the_space():
    gymnasium.register(id="jaxsac_test/MultiDiscrete-v0",
                       entry_point=gymnasium.spec(SPACES_ENV_ID).entry_point,
                       kwargs={"action_space": gymnasium.spaces.MultiDiscrete([2, 3]),
                               "observation_space": gymnasium.spaces.Box(-1, 1, (3,))},
                       max_episode_steps=20, disable_env_checker=True)
    try:
        with pytest.raises(ValueError, match=r"env 'jaxsac_test/MultiDiscrete-v0': "
                                             r"action_space=MultiDiscrete\(\[2 3\]\) is not "
                                             r"supported \(MultiDiscrete actions\); supported "
                                             r"action spaces: Box .* and Discrete"):
            jaxsac.train(jaxsac.SACConfig(**{**TINY, "env_id": "jaxsac_test/MultiDiscrete-v0"}),
                         progress=False)
    finally:
        del gymnasium.registry["jaxsac_test/MultiDiscrete-v0"]
