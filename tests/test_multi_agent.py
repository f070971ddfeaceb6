"""Multi-agent SAC: the env, the module mapping, independence, metrics, checkpoints."""

from __future__ import annotations

import csv
import os
import shutil

import gymnasium
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxsac
from jaxsac import agents, checkpoint, connectors, envs
from jaxsac.assembly import assemble, init_state
from jaxsac.jax_loop import run_periods
from jaxsac.learner import Hyperparams
from jaxsac.metrics import AgentEpisodeStats, EpisodeStats
from jaxsac.schedule import Schedule, num_periods
from tests.support import dict_envs
from tests.support.helpers import TINY, leaves_equal

PENDULUM_BAR = -250.0


def multi_config(**changes) -> jaxsac.SACConfig:
    return jaxsac.SACConfig(**{"env_id": "MultiAgentPendulum-v1", "num_agents": 2, **TINY,
                               **changes})


def module(tree, m):
    return jax.tree.map(lambda x: x[m], tree)


# --- env -------------------------------------------------------------------------------


def test_multi_agent_pendulum_is_independent_single_agent_pendulums():
    num_agents, key = 3, jax.random.key(4)
    env = envs.make("MultiAgentPendulum-v1", num_agents=num_agents, max_episode_steps=5)
    single = envs.make("Pendulum-v1", max_episode_steps=5)
    assert env.observation_space == single.observation_space
    assert env.action_space == single.action_space
    state, obs = jax.jit(env.reset)(key)
    assert obs.shape == (num_agents, 3)
    singles = [single.reset(k) for k in jax.random.split(key, num_agents)]
    np.testing.assert_array_equal(obs, np.stack([o for _, o in singles]))
    step = jax.jit(env.step)
    for t in range(5):
        action = jnp.linspace(-2.0, 2.0, num_agents)[:, None] * (t - 2) / 2
        step_key = jax.random.fold_in(key, t)
        state, obs, reward, terminated, truncated, done = step(state, action, step_key)
        for n, k in enumerate(jax.random.split(step_key, num_agents)):
            s, o, r, term, trunc = single.step(singles[n][0], action[n], k)
            singles[n] = (s, o)
            np.testing.assert_allclose(obs[n], o, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(reward[n], r, rtol=1e-6, atol=1e-6)
            assert terminated[n] == term and truncated[n] == trunc
        # Time limits are truncations per agent, never terminations; the episode-level
        # flag is set once every agent's episode ended.
        assert not np.any(terminated)
        assert np.all(truncated) == (t == 4) and bool(done) == (t == 4)


def test_episode_done_needs_every_agent():
    env = envs.make("MultiAgentPendulum-v1", num_agents=2, max_episode_steps=3)
    state, _ = env.reset(jax.random.key(0))
    # Agent 1 starts one step into its episode: it truncates a step before agent 0.
    state = state.replace(elapsed_steps=jnp.array([0, 1], jnp.int32))
    dones = []
    for t in range(3):
        state, _, _, _, truncated, done = env.step(state, jnp.zeros((2, 1)), jax.random.key(t))
        dones.append((truncated.tolist(), bool(done)))
    assert dones == [([False, False], False), ([False, True], False), ([True, True], True)]


def test_multi_agent_envs_are_jax_only():
    with pytest.raises(ValueError, match="backend must be 'jax' or 'auto'"):
        envs.make("MultiAgentPendulum-v1", backend="gymnasium")
    with pytest.raises(ValueError, match="num_agents=0"):
        envs.MultiAgentPendulum(num_agents=0)


# --- config ----------------------------------------------------------------------------


def test_bad_multi_agent_settings_are_errors_naming_the_field():
    with pytest.raises(ValueError, match="policy_mapping='per_agent'"):
        multi_config(policy_mapping="per_agent")
    with pytest.raises(ValueError, match="num_agents=0"):
        multi_config(num_agents=0)
    with pytest.raises(ValueError, match="num_agents=2 needs a multi-agent env.*Pendulum-v1"):
        jaxsac.make_train(multi_config(env_id="Pendulum-v1"))
    with pytest.raises(ValueError, match="num_agents=2 needs a multi-agent env"):
        jaxsac.train(multi_config(env_id="HalfCheetah-v5"), progress=False)
    with pytest.raises(ValueError, match="normalize_obs=True"):
        jaxsac.make_train(multi_config(normalize_obs=True))
    with pytest.raises(ValueError, match="backend='gymnasium' is invalid"):
        jaxsac.train(multi_config(backend="gymnasium"), progress=False)


def test_module_config_counts_per_module():
    config = multi_config(num_agents=3, num_envs=2, buffer_capacity=600)
    independent = agents.module_config(config)
    assert (independent.num_envs, independent.total_env_steps, independent.buffer_capacity,
            independent.learning_starts) == (2, 600, 600, 100)
    shared = agents.module_config(config.replace(policy_mapping="shared"))
    assert (shared.num_envs, shared.total_env_steps, shared.buffer_capacity,
            shared.learning_starts, shared.log_every) == (6, 1800, 1800, 300, 600)
    assert config.num_modules == 3 and config.replace(policy_mapping="shared").num_modules == 1


# --- routing and per-agent statistics ----------------------------------------------------


def test_columns_route_to_their_agents_module_and_back():
    layout = agents.AgentLayout(num_agents=3, num_envs=2, num_modules=3)
    columns = np.arange(6 * 4).reshape(6, 4)  # column e*N + n is agent n of env copy e
    per_module = np.asarray(layout.to_modules(jnp.asarray(columns)))
    for m in range(3):
        np.testing.assert_array_equal(per_module[m], columns[m::3])
    np.testing.assert_array_equal(layout.from_modules(jnp.asarray(per_module)), columns)


def test_agent_episode_stats_equal_one_episode_stats_per_agent():
    rng = np.random.default_rng(0)
    num_agents, num_envs = 3, 2
    stats = AgentEpisodeStats.empty(num_agents)
    references = [EpisodeStats.empty() for _ in range(num_agents)]
    for _ in range(40):
        done = rng.random(num_agents * num_envs) < 0.3
        returns = np.where(done, rng.normal(size=done.shape), 0).astype(np.float32)
        lengths = np.where(done, rng.integers(1, 200, done.shape), 0).astype(np.int32)
        stats = stats.record(jnp.asarray(done), jnp.asarray(returns), jnp.asarray(lengths))
        references = [ref.record(jnp.asarray(done[n::num_agents]),
                                 jnp.asarray(returns[n::num_agents]),
                                 jnp.asarray(lengths[n::num_agents]))
                      for n, ref in enumerate(references)]
    summary = stats.summary()
    for n, ref in enumerate(references):
        for name, value in ref.summary().items():
            np.testing.assert_allclose(summary[name][n], value, rtol=1e-6)
    np.testing.assert_allclose(summary["episode_return_sum"],
                               sum(float(r.summary()["episode_return_mean"])
                                   for r in references), rtol=1e-6)


# --- the two mappings ------------------------------------------------------------------


def test_shared_with_n_agents_is_single_agent_training_with_n_envs():
    config = multi_config(num_agents=3, policy_mapping="shared", buffer_capacity=600,
                          prioritized=True, n_step=(1, 3))
    single = jaxsac.SACConfig(**{**TINY, "num_envs": 3, "buffer_capacity": 1800,
                                 "total_env_steps": 1800, "learning_starts": 300,
                                 "log_every": 600, "prioritized": True, "n_step": (1, 3)})
    key = jax.random.key(7)
    shared_state, shared_metrics = jax.jit(jaxsac.make_train(config))(key)
    single_state, single_metrics = jax.jit(jaxsac.make_train(single))(key)
    assert leaves_equal(shared_state.learner, single_state.learner)
    assert leaves_equal(shared_state.buffer, single_state.buffer)
    assert leaves_equal(shared_state.runner, single_state.runner)
    np.testing.assert_array_equal(shared_metrics["qf_loss"][:, 0], single_metrics["qf_loss"])
    np.testing.assert_array_equal(shared_metrics["grad_steps"][:, 0],
                                  single_metrics["grad_steps"])
    np.testing.assert_array_equal(shared_metrics["env_steps"], [200, 400, 600])  # per agent


def test_independent_modules_store_their_agents_columns():
    """During warm-up both mappings step the same envs with the same random actions:
    module m's buffer holds exactly the shared buffer's agent-m columns."""
    changes = dict(num_agents=3, num_envs=2, buffer_capacity=600, learning_starts=199,
                   total_env_steps=200, log_every=200)
    key = jax.random.key(3)
    independent, _ = jax.jit(jaxsac.make_train(multi_config(**changes)))(key)
    shared, _ = jax.jit(jaxsac.make_train(multi_config(policy_mapping="shared",
                                                       **changes)))(key)
    slots = 300  # ring slots per env column
    for name in ("obs", "action", "reward", "flags"):
        stacked = np.asarray(getattr(independent.buffer, name))  # [M, slots*E, ...]
        rows = np.asarray(getattr(shared.buffer, name))  # [slots*E*N, ...]
        rows = rows.reshape(slots, 2, 3, *rows.shape[1:])
        for m in range(3):
            np.testing.assert_array_equal(stacked[m].reshape(slots, 2, *rows.shape[3:]),
                                          rows[:, :, m], err_msg=name)


def reward_scaled_program(config: jaxsac.SACConfig, agent: int):
    """The program of `config` with `agent`'s rewards multiplied by a traced factor."""
    assembly = assemble(config)
    runner = assembly.runner

    def with_factor(factor):
        def step(rstate, act_fn, key):
            rstate, step, episodes = runner.step(rstate, act_fn, key)
            scaled = jnp.arange(step.reward.shape[0]) % config.num_agents == agent
            reward = jnp.where(scaled, step.reward * factor, step.reward)
            return rstate, step._replace(reward=reward), episodes
        return assembly._replace(runner=runner._replace(step=step))

    return with_factor


def test_independent_modules_stay_independent():
    """Changing agent 1's data (its rewards) leaves module 0 bit for bit unchanged."""
    config = multi_config(prioritized=True, n_step=(1, 2))
    with_factor = reward_scaled_program(config, agent=1)
    hparams = Hyperparams.from_config(config)

    def run(factor):
        assembly = with_factor(factor)
        state = init_state(assembly, jax.random.key(0), hparams)
        return run_periods(assembly, state, 0, num_periods(Schedule.of(config)))[0]

    states = jax.jit(jax.vmap(run))(jnp.array([1.0, 3.0]))
    learners = states.learner.replace(hparams=())  # [factor, module, ...] leaves
    first, second = module(learners, 0), module(learners, 1)
    assert leaves_equal(module(first, 0), module(second, 0))
    assert leaves_equal(module(module(states.buffer, 0), 0), module(module(states.buffer, 1), 0))
    assert not leaves_equal(module(first.critic_params, 1), module(second.critic_params, 1))
    assert not leaves_equal(module(first.actor_params, 0), module(first.actor_params, 1))


def test_independent_metrics_have_agent_and_module_axes():
    config = multi_config(num_agents=3)
    _, metrics = jax.jit(jax.vmap(jaxsac.make_train(config)))(
        jax.random.split(jax.random.key(0), 2))
    assert metrics["eval_return"].shape == (2, 3, 3)  # [seeds, periods, agents]
    assert metrics["qf_loss"].shape == (2, 3, 3)  # [seeds, periods, modules]
    np.testing.assert_array_equal(metrics["grad_steps"][0], [[101] * 3, [301] * 3, [501] * 3])
    np.testing.assert_allclose(metrics["eval_return_sum"], metrics["eval_return"].sum(-1),
                               rtol=1e-6)
    np.testing.assert_allclose(metrics["episode_return_sum"],
                               metrics["episode_return_mean"].sum(-1), rtol=1e-6)
    # Every agent finished its first 200-step episode in the first period.
    np.testing.assert_array_equal(metrics["num_episodes"][:, 0], 1)


def test_evaluation_runs_each_agent_with_its_module():
    """Reference: each agent's episode rolled out alone with the single-agent env."""
    config = multi_config(num_agents=2)
    assembly = assemble(config)
    learner = assembly.learner.init(jax.random.key(1))
    key, num_episodes = jax.random.key(2), 2
    returns = jaxsac.evaluate(config, learner.actor_params, key, num_episodes)
    assert returns.shape == (2, num_episodes)

    single_learner = jaxsac.make_learner(config, 3, 1)
    env = envs.make("Pendulum-v1")
    act = jax.jit(lambda p, o: single_learner.act(p, o[None], key, deterministic=True)[0])
    to_env = jax.jit(connectors.module_actions(env.action_space).to_env)
    env_step = jax.jit(env.step)
    step_keys = jax.random.split(jax.random.fold_in(key, 1), 200)
    for k, episode_key in enumerate(jax.random.split(key, num_episodes)):
        for n, agent_key in enumerate(jax.random.split(episode_key, 2)):
            params = module(learner.actor_params, n)
            state, obs = env.reset(agent_key)
            total = 0.0
            for step_key in step_keys:
                agent_step_key = jax.random.split(jax.random.split(step_key, num_episodes)[k],
                                                  2)[n]
                state, obs, reward, _, truncated = env_step(
                    state, to_env(act(params, obs)), agent_step_key)
                total += float(reward)
                if truncated:
                    break
            np.testing.assert_allclose(returns[n, k], total, rtol=1e-5)


# --- train, logs and checkpoints -------------------------------------------------------


def test_logged_columns_split_the_agent_and_module_axes_of_every_seed():
    from jaxsac.logger import flatten_metrics

    seeds = np.arange(2 * 3).reshape(2, 3)  # [seeds, agents or modules]
    flat = flatten_metrics({"env_steps": np.array([5, 5]), "eval_return": seeds,
                            "qf_loss": seeds + 10, "eval_return_sum": seeds.sum(1)}, 2)
    assert sorted(flat) == sorted(["env_steps", "eval_return_sum", *[
        f"eval_return/agent_{i}" for i in range(3)], *[f"qf_loss/module_{i}" for i in range(3)]])
    for i in range(3):
        np.testing.assert_array_equal(flat[f"eval_return/agent_{i}"], seeds[:, i])
        np.testing.assert_array_equal(flat[f"qf_loss/module_{i}"], seeds[:, i] + 10)
    assert flatten_metrics({"eval_return": 1.5, "env_steps": 7}, 1) == {
        "eval_return": 1.5, "env_steps": 7}
    np.testing.assert_array_equal(flatten_metrics({"env_steps": 7}, 3)["env_steps"], 7)



def test_train_logs_per_agent_columns_and_checkpoints_every_module(tmp_path):
    config = multi_config(log_dir=str(tmp_path / "logs"), checkpoint_every=200,
                          checkpoint_dir=str(tmp_path / "checkpoints"))
    result = jaxsac.train(config, progress=False)
    assert result.metrics["eval_return"].shape == (3, 2)
    with open(os.path.join(config.log_dir, "metrics.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3
    for column in ("eval_return/agent_0", "eval_return/agent_1", "eval_return_sum",
                   "episode_return_mean/agent_1", "qf_loss/module_0", "alpha/module_1",
                   "grad_steps/module_1"):
        assert column in rows[0], column
    np.testing.assert_allclose([float(r["eval_return/agent_1"]) for r in rows],
                               result.metrics["eval_return"][:, 1], rtol=1e-6)
    assert os.path.exists(os.path.join(config.log_dir, "curve.png"))

    state, stored = checkpoint.restore(config.checkpoint_dir, config=config)
    assert stored == config
    assert leaves_equal(state.learner, result.state.learner)
    assert leaves_equal(state.episodes, result.state.episodes)

    obs = np.random.default_rng(0).normal(size=(5, 3)).astype(np.float32)
    single_learner = jaxsac.make_learner(config, 3, 1)
    for m in range(2):
        policy = jaxsac.load_policy(config.checkpoint_dir, module_id=m)
        expected = connectors.module_actions(envs.make("Pendulum-v1").action_space).to_env(
            single_learner.act(module(state.learner.actor_params, m), obs, jax.random.key(0),
                               deterministic=True))
        np.testing.assert_allclose(policy(obs), expected, rtol=1e-6)
    with pytest.raises(ValueError, match="module_id=2 is invalid.*holds 2 module"):
        jaxsac.load_policy(config.checkpoint_dir, module_id=2)
    with pytest.raises(ValueError, match="num_agents: stored 2, requested 3"):
        checkpoint.restore(config.checkpoint_dir, config=config.replace(num_agents=3))

    # Resuming from the checkpoint at 400 env steps gives the uninterrupted run's state.
    assert checkpoint.latest_step(config.checkpoint_dir) == 600
    shutil.rmtree(os.path.join(config.checkpoint_dir, "600"))
    resumed = jaxsac.train(config.replace(resume=True, log_dir=None), progress=False)
    np.testing.assert_array_equal(resumed.metrics["env_steps"], [600])
    for part in ("learner", "buffer", "runner", "episodes", "iteration"):
        assert leaves_equal(getattr(resumed.state, part), getattr(result.state, part)), part


class FlatDictReach(dict_envs.DictReach):
    """DictReach observed as one float32 vector: its entries flattened and concatenated
    in sorted key order, as gymnasium flattens a Dict space."""

    observation_space = gymnasium.spaces.flatten_space(dict_envs.OBSERVATION_SPACE)

    @staticmethod
    def flat(obs):
        return jnp.concatenate([jnp.ravel(obs[k]).astype(jnp.float32) for k in sorted(obs)])

    def reset(self, key):
        state, obs = super().reset(key)
        return state, self.flat(obs)

    def step(self, state, action, key):
        state, obs, *rest = super().step(state, action, key)
        return (state, self.flat(obs), *rest)


@pytest.mark.parametrize("mapping", ["independent", "shared"])
def test_agents_with_a_dict_observation_train_as_with_its_flat_vector(mapping):
    """A registered multi-agent env of dict-observation agents keeps the dict (the picture
    uint8) in each module's buffer, and trains bit for bit as the same agents observed
    as the flat vector the "flat" encoder reads."""
    jaxsac.envs.register_multi_agent_env("jaxsac_test/DictReach", dict_envs.DictReach, 40)
    jaxsac.envs.register_multi_agent_env("jaxsac_test/FlatReach", FlatDictReach, 40)
    try:
        runs = {env_id: jaxsac.train(multi_config(env_id=env_id, policy_mapping=mapping,
                                                  total_env_steps=200),
                                     progress=False)
                for env_id in ("jaxsac_test/DictReach", "jaxsac_test/FlatReach")}
    finally:
        for env_id in ("jaxsac_test/DictReach", "jaxsac_test/FlatReach"):
            envs.MULTI_AGENT_ENVS.pop(env_id)
    dict_run, flat_run = runs.values()
    stored = dict_run.state.buffer.obs
    assert stored["pixels"].dtype == jnp.uint8
    def rows(k):  # entry k's rows [(M,) capacity, entry size]
        entry_dims = len(dict_envs.OBSERVATION_SPACE[k].shape)
        return np.reshape(stored[k], (*stored[k].shape[:-entry_dims], -1))
    flattened = np.concatenate([rows(k) for k in sorted(stored)], -1).astype(np.float32)
    np.testing.assert_array_equal(flattened, flat_run.state.buffer.obs)
    assert leaves_equal(dict_run.state.learner, flat_run.state.learner)
    np.testing.assert_array_equal(dict_run.metrics["eval_return"],
                                  flat_run.metrics["eval_return"])


def test_a_multi_agent_env_registration_is_checked():
    with pytest.raises(ValueError, match="env_id='MultiAgentPendulum-v1'"):
        jaxsac.envs.register_multi_agent_env("MultiAgentPendulum-v1", dict_envs.DictReach, 40)
    with pytest.raises(ValueError, match="max_episode_steps=0"):
        jaxsac.envs.register_multi_agent_env("jaxsac_test/X", dict_envs.DictReach, 0)


# --- learning ----------------------------------------------------------------------------


@pytest.mark.learning
def test_tuned_multi_agent_pendulum_every_agent_reaches_the_bar(learning_steps):
    """The bar: every agent >= -250 within 20,000 env steps of its own (asked
    at CI_LEARNING_STEPS unless --full-learning, as in tests/test_learning.py)."""
    config = jaxsac.tuned("MultiAgentPendulum-v1")
    assert (config.num_agents, config.policy_mapping, config.total_env_steps) == (
        2, "independent", 20_000)
    steps = learning_steps(config.total_env_steps)
    _, metrics = jax.jit(jaxsac.make_train(config.replace(total_env_steps=steps)))(
        jax.random.key(0))
    np.testing.assert_array_equal(metrics["env_steps"][-1], steps)  # each agent's own
    final = np.asarray(metrics["eval_return"])[-1]  # [agents], 10 episodes each
    assert np.all(final >= PENDULUM_BAR), final
