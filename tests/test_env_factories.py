"""Envs beyond registered ids: the env's own arguments (`env_kwargs`), gymnasium
wrappers and factories (`envs.register_gym_env`), and evaluation envs of their own
(`eval_env_id`, `eval_env_kwargs`), on both backends; what a checkpoint keeps of them.
(Factories in Ray runners: tests/test_ray_runner.py.)"""

from __future__ import annotations

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsac
from experiments import train as cli
from jaxsac import envs
from tests.support.helpers import buffer_rows

ONES_ID = "jaxsac_test/Ones-v0"
LAKE_ID = "jaxsac_test/FrozenLake-flat"
LAKE_X10_ID = "jaxsac_test/FrozenLake-x10"
TINY = dict(hidden_sizes=(8,), batch_size=8, buffer_capacity=256, learning_starts=24,
            log_every=24, total_env_steps=48, eval_episodes=2)


class Ones:
    """A JaxEnv that never ends by itself: obs [1] = steps so far, reward 1 per step, so
    a return is the episode's length."""

    observation_space = gymnasium.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, key):
        return jnp.zeros((), jnp.int32), jnp.zeros((1,), jnp.float32)

    def step(self, state, action, key):
        t = state + 1
        no = jnp.zeros((), bool)
        return t, t[None].astype(jnp.float32), jnp.ones((), jnp.float32), no, no


def flat_lake(**kwargs):
    """FrozenLake (Discrete observations) one-hot through gymnasium's FlattenObservation."""
    return gymnasium.wrappers.FlattenObservation(gymnasium.make("FrozenLake-v1", **kwargs))


def lake_x10(**kwargs):
    """The flat lake paying 10 instead of 1 (a gymnasium reward wrapper)."""
    return gymnasium.wrappers.TransformReward(flat_lake(**kwargs), lambda r: 10.0 * r)


@pytest.fixture(autouse=True)
def registered():
    envs.register_jax_env(ONES_ID, Ones, max_episode_steps=50)
    envs.register_gym_env(LAKE_ID, flat_lake, max_episode_steps=20)
    envs.register_gym_env(LAKE_X10_ID, lake_x10, max_episode_steps=20)
    yield
    envs.GYM_FACTORIES.pop(LAKE_ID, None)
    envs.GYM_FACTORIES.pop(LAKE_X10_ID, None)


def test_env_kwargs_and_an_evaluation_env_of_its_own_on_the_jax_backend():
    """Training episodes end at env_kwargs' time limit, evaluation episodes at
    eval_env_kwargs' (each step pays 1: a return is a length)."""
    config = jaxsac.SACConfig(env_id=ONES_ID, env_kwargs={"max_episode_steps": 6},
                              eval_env_kwargs={"max_episode_steps": 4}, **TINY)
    result = jaxsac.train(config, progress=False)
    np.testing.assert_array_equal(result.metrics["episode_length_mean"], [6, 6])
    np.testing.assert_array_equal(result.metrics["episode_return_mean"], [6, 6])
    np.testing.assert_array_equal(result.metrics["eval_return"], [4, 4])
    # Without them, the registered limit of 50 steps.
    plain = jaxsac.evaluate(config.replace(env_kwargs={}, eval_env_kwargs=None),
                            result.state.learner.actor_params, jax.random.key(0), 2)
    np.testing.assert_array_equal(plain, [50, 50])


def test_a_factory_with_a_wrapper_and_kwargs_trains_and_its_checkpoint_asks_for_it(tmp_path):
    """A 2x2 lake (env_kwargs reach gymnasium.make through the factory) seen one-hot
    (the factory's FlattenObservation): 4 states, the goal one step right of the start;
    the evaluation env is a factory of its own that pays 10 for the goal. The checkpoint
    keeps the id and kwargs; without the factory (a fresh process) the policy loads, and
    evaluation says what it needs."""
    kwargs = {"desc": ["SG", "FF"], "is_slippery": False}
    config = jaxsac.SACConfig(env_id=LAKE_ID, env_kwargs=kwargs, num_envs=2,
                              eval_env_id=LAKE_X10_ID,
                              checkpoint_dir=str(tmp_path),
                              **{**TINY, "total_env_steps": 24, "learning_starts": 16})
    result = jaxsac.train(config, progress=False)
    rows = buffer_rows(result.state.buffer, num_envs=2)
    assert rows["obs"].shape == (2, 12, 4)  # the 2x2 map's states, not the default's 16
    np.testing.assert_array_equal(rows["obs"].sum(-1), 1.0)  # one-hot
    # FrozenLake pays 1 for a step into the goal, state 1, and nothing else.
    np.testing.assert_array_equal(rows["reward"], np.argmax(rows["next_obs"], -1) == 1)
    assert set(result.metrics["eval_return"]) <= {0.0, 10.0}

    envs.GYM_FACTORIES.pop(LAKE_ID)  # as in a fresh process
    envs.GYM_FACTORIES.pop(LAKE_X10_ID)
    policy = jaxsac.load_policy(tmp_path)  # the policy needs no env
    assert policy.config.env_id == LAKE_ID and policy.config.env_kwargs == kwargs
    assert policy(np.eye(4, dtype=np.float32)).shape == (4,)
    with pytest.raises(ValueError, match=r"'jaxsac_test/FrozenLake-x10' is not a registered "
                       r"gymnasium environment .* nor a factory registered with "
                       r"jaxsac.envs.register_gym_env .* register it again"):
        jaxsac.evaluate(policy.config, policy.actor_params, jax.random.key(0), 1)
    envs.register_gym_env(LAKE_X10_ID, lake_x10, max_episode_steps=20)
    returns = jaxsac.evaluate(policy.config, policy.actor_params, jax.random.key(0), 2)
    assert returns.shape == (2,) and set(returns) <= {0.0, 10.0}


@pytest.mark.parametrize("changes, message", [
    ({"env_kwargs": {"gravity": 1.0}}, r"SACConfig.env_kwargs=\{'gravity': 1.0\} is invalid: "
                                       r"must be arguments env_id='Pendulum-v1' takes .*gravity"),
    ({"backend": "gymnasium", "env_kwargs": {"gravity": 1.0}},
     r"SACConfig.env_kwargs=\{'gravity': 1.0\} is invalid"),
    ({"eval_env_kwargs": {"gravity": 1.0}}, r"SACConfig.eval_env_kwargs=\{'gravity': 1.0\}"),
    ({"eval_env_id": "MountainCarContinuous-v0"},
     r"eval_env_id='MountainCarContinuous-v0' is invalid: must be an env with the training "
     r"env's spaces \(observations of shape \(3,\)"),
    ({"eval_env_id": LAKE_ID}, r"eval_env_id='jaxsac_test/FrozenLake-flat' is invalid: must "
                               r"be an env of the training env's backend, 'jax'"),
    ({"env_kwargs": {"g": object()}}, r"env_kwargs=.* is invalid: must be a dict of keyword "
                                      r"arguments .* JSON values"),
])
def test_env_settings_that_cannot_work_are_named_before_training(changes, message):
    with pytest.raises(ValueError, match=message):
        jaxsac.train(jaxsac.SACConfig(**{**TINY, **changes}), progress=False)


def test_a_factory_cannot_take_a_gymnasium_id_or_run_on_the_jax_backend():
    with pytest.raises(ValueError, match=r"register_gym_env: env_id='Pendulum-v1' is invalid"):
        envs.register_gym_env("Pendulum-v1", flat_lake)
    with pytest.raises(ValueError, match=r"backend='jax' is invalid: must be 'gymnasium' or "
                       r"'auto' for env_id='jaxsac_test/FrozenLake-flat'"):
        jaxsac.SACConfig(env_id=LAKE_ID, backend="jax", **TINY) and jaxsac.train(
            jaxsac.SACConfig(env_id=LAKE_ID, backend="jax", **TINY), progress=False)


def test_env_kwargs_round_trip_through_json_and_the_command_line():
    config = jaxsac.SACConfig(env_kwargs={"g": 9.0, "max_episode_steps": 50})
    assert jaxsac.SACConfig.from_json(config.to_json()) == config
    assert hash(config) == hash(jaxsac.SACConfig(env_kwargs={"max_episode_steps": 50, "g": 9.0}))
    with pytest.raises(TypeError, match="read-only"):
        config.env_kwargs["g"] = 1.0
    args, _ = cli.parse(["--env-kwargs", '{"g": 9.0, "max_episode_steps": 50}',
                         "--eval-env-kwargs", '{"g": 3.0}'])
    assert args.config.env_kwargs == {"g": 9.0, "max_episode_steps": 50}
    assert args.config.eval_env == ("Pendulum-v1", {"g": 3.0})
